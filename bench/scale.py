"""Scale (issues 14 and 25): the predictor daemon's own tick with the deployed LSTM at 100 / 1,000 / 10,000 / 50,000
series, one replica against two shards, and the exporter's /metrics render at 512 nodes x 8 GPUs.

    nice -n 10 .venv/bin/python bench/scale.py [--sizes 100,1000,10000,50000] [--json] [--no-publish]

1. Forecasting, measured as it ships: `PredictorLoop.from_config` on the seed's fleet file (so the LSTM is the
   shipped model file, `predictors/models/lstm_kv`, with its online band and the calendar prior, an event two
   minutes ahead), after `infercast.predictors.cli.prepare_process` (the daemon's torch threads,
   `predictor.torch_threads`, and `gc.freeze()`), ticking as the daemon does.  N (pool, version) groups, one instance
   each, an hour of 15 s history of KV usage and of the covariates the LSTM reads (running and waiting requests,
   fragmentation), served from memory (the cost measured is the forecasting, not Prometheus; no request counter, so no
   traffic series: Prophet's per-series traffic forecasts are not in these figures).  Each group publishes two KV
   forecasts (the pool's mean and its fullest instance), so N groups are 2N forecast series.  The loop first ticks one
   horizon and a step (21 ticks, 15 s apart) so every band has forecasts waiting for their outcomes, as in a running
   daemon; then the median of `--repeat` ticks is the figure, each tick's time with the garbage collections that run
   between its end and the next tick (the tick pauses the collector, `service.collector_paused`: what it leaves
   is collected after it, and counted here).  The per-series path (`PredictorLoop(batched=False)`:
   each series through its own pipeline, as the tick forecast before issue 25) runs first, the same ticks on the first
   `--per-series-max` groups only (it costs about 1 ms a group) and its time is scaled by N / that number: the output
   says which.  `max_abs_diff` is the largest difference between the two paths' published values on those groups.
   Each size runs in its own process, so its peak RSS (`peak_rss_bytes`: the fleet's data, the model and the tick)
   is its own.
2. At 10,000 groups, each of two replicas' ticks through `ShardedStore` (`--shard i/2`), one after the other: both
   shards together must publish exactly the one replica's series, and two replicas on their own pods cost the
   slower shard's time.
3. Fetch and parse (issue 25 item 2), at 1,000 and 10,000 of the sizes asked for: what a tick asks Prometheus for
   and reads back, from the answer's bytes (compact query_range JSON, as Prometheus writes it, built here for the
   fleet above plus a request counter per group) to the series the tick aligns, in this process, no network.  The
   old path: each metric over the whole history (KV and the request counter) or the LSTM's covariate tail, read by
   `json` and a float() per sample, as `PrometheusStore` did before; the new: the daemon's rolling history
   (`predictors/rolling.py`) in its steady state, one query per metric for the newest points only (each window
   read whole once, untimed), through the store's fast JSON path.  `fetch` in the JSON: both times, their ratio,
   the answers' bytes, and the first tick's (whole windows, fast path) time.
4. Exporter: the fleet exporter (one process scraping every node: the worst case; on Kubernetes each GPU node's
   DaemonSet pod renders only its own GPUs) rendering 512 nodes x 8 GPUs, against prometheus_client rendering the
   same series from plain labelled Gauges, both in this run (bench/exporter.py's method at 8x the fleet).

`--before DIR` (a checkout of an earlier commit: `git worktree add /tmp/scale-before COMMIT`, or `git archive COMMIT`
unpacked) runs each size's child process under that code too, right after this code's, and prints and publishes its
tick time and peak RSS beside this code's (`before` in the JSON), so the two are measured under the same load; this
bench measures both (the earlier code imported from DIR, `SCALE_CODE`), so both ticks are timed the same way.  Each
tick's CPU seconds (all the process' threads, its garbage collections included; `tick_cpu_seconds`, median) are
printed beside its time: on a busy machine the wall time grows with the load, the CPU time much less.

`--json` prints one object per size (`series`, `model`, `tick_seconds`, `per_series_tick_seconds`,
`peak_rss_bytes`, `max_abs_diff`, and how the per-series figure was measured).  Publishes docs/results/scale.json
and the `<!-- bench:scale:... -->` blocks (bench/results.py).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
#: the code measured: this checkout's, or in a `--before` child the earlier checkout's (`SCALE_CODE`), measured by
#: this same bench (the same fleet, ticks and clocks for both)
CODE = Path(os.environ.get("SCALE_CODE") or REPO).resolve()
sys.path.insert(0, str(CODE))
sys.path.insert(0, str(REPO / "bench"))

import results  # noqa: E402

from infercast.catalog import (  # noqa: E402
    FORECAST_BREACH_ETA_SECONDS,
    FORECAST_KV_CACHE_USAGE_RATIO,
    FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS,
    FORECAST_REQUESTS_PER_SECOND,
    FORECAST_SKIPPED,
    KV_CACHE_FRAGMENTATION_RATIO,
    KV_CACHE_USAGE_RATIO,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    ROUTER_REQUESTS_TOTAL,
)
from infercast.config import FleetConfig, load_config  # noqa: E402
from infercast.store import Series  # noqa: E402

T0 = 1_800_000_000.0
STEP = 15.0
FLEET_FILE = CODE / "examples" / "flash-sale.yaml"
SIZES = (100, 1_000, 10_000, 50_000)
# every series the predictor publishes (the batched and per-series ticks must publish the same ones, equal)
FORECAST_SERIES = frozenset(
    {
        FORECAST_BREACH_ETA_SECONDS,
        FORECAST_KV_CACHE_USAGE_RATIO,
        FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS,
        FORECAST_REQUESTS_PER_SECOND,
        FORECAST_SKIPPED,
    }
)
WARMUP_TICKS = 21  # one horizon (300 s) and a step: the first forecasts' outcomes are in by the timed ticks
SHARD_SIZE = 10_000
FETCH_SIZES = (1_000, 10_000)  # the sizes whose Prometheus fetch and parse is measured (item 4 below)


class FixedStore:
    """The fleet's series, already in memory, by metric; metrics it has no series of answer empty.  Like Prometheus,
    it answers only the points in [start, end] (every series here shares one time grid, so one search cuts all)."""

    def __init__(self, series: dict[str, list[Series]]) -> None:
        self.series = series

    def query_range(self, metric, matchers, start, end, step) -> list[Series]:
        ss = self.series.get(metric, [])
        if not ss:
            return []
        t = ss[0].t
        a, b = np.searchsorted(t, [start - 1e-6, end + 1e-6], side="left")
        if a == 0 and b == len(t):
            return ss
        out = []
        for s in ss:
            if s.t is not t:
                raise ValueError("FixedStore: the fleet's series must share one time grid")
            out.append(Series(s.labels, t[a:b], s.v[a:b]))
        return out


def fleet(n: int) -> dict[str, list[Series]]:
    """n (pool, version) groups of one instance: KV usage drifting at its own level, and the LSTM's covariates."""
    t = np.arange(T0 - 3600.0, T0 + 1.0, STEP)
    rng = np.random.default_rng(14)
    out: dict[str, list[Series]] = {m: [] for m in (KV_CACHE_USAGE_RATIO, REQUESTS_RUNNING, REQUESTS_WAITING)}
    out[KV_CACHE_FRAGMENTATION_RATIO] = []
    for i in range(n):
        labels = {"pool": f"pool-{i:05d}", "version": f"v{i % 3}", "instance": "n0"}
        kv = np.clip(0.3 + 0.4 * (i / n) + 1e-5 * (t - T0) + rng.normal(0, 0.01, t.size), 0, 1)
        out[KV_CACHE_USAGE_RATIO].append(Series(labels, t, kv))
        out[REQUESTS_RUNNING].append(Series(labels, t, 40 + 60 * kv))
        out[REQUESTS_WAITING].append(Series(labels, t, np.maximum(0.0, 200 * (kv - 0.6))))
        out[KV_CACHE_FRAGMENTATION_RATIO].append(Series(labels, t, 0.1 + 0.1 * kv))
    return out


def subset(series: dict[str, list[Series]], pools: set[str]) -> dict[str, list[Series]]:
    return {m: [s for s in ss if s.labels["pool"] in pools] for m, ss in series.items()}


def bench_config() -> FleetConfig:
    """The seed's fleet file with an hour of history and its sale moved two minutes after the timed tick."""
    cfg = load_config(FLEET_FILE)
    events = [e.model_copy(update={"start": f"{T0 + 120:.0f}", "end": f"{T0 + 1020:.0f}"}) for e in cfg.events]
    pc = cfg.predictor.model_copy(update={"history_seconds": 3600.0})
    return cfg.model_copy(update={"predictor": pc, "events": events})


def _loop(cfg: FleetConfig, batched: bool):
    from infercast.predictors.service import PredictorLoop

    loop = PredictorLoop.from_config(cfg, batched=batched)
    if loop.lstm is None:
        raise SystemExit(f"scale: the deployed LSTM did not load ({loop.lstm_error or 'no model file'})")
    return loop


class _Collections:
    """Seconds the garbage collector has run in this process (gc.callbacks), to charge a tick for the collections
    its garbage sets off after it returns (the tick pauses the collector: `service.collector_paused`)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t0

    def __enter__(self) -> _Collections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)


def _ticks(
    loop, store, repeat: int, after_gc: list[float] | None = None, cpu: list[float] | None = None
) -> tuple[list[float], list]:
    """Warm-up ticks, then `repeat` timed ones ending at T0: (their durations, the last tick's samples).  A timed
    tick's duration includes the garbage collections run between its end and the next tick's start (a tick leaves
    its collections to after it; one more, untimed, tick follows the last timed one so its are counted too), listed
    in `after_gc` when given.  `cpu`, when given, gets each timed tick's CPU seconds (every thread of the process,
    from its start to the next tick's, the collections included): on a busy machine the figure that does not grow
    with the load."""
    times = T0 - STEP * np.arange(WARMUP_TICKS + repeat - 1, -2, -1)
    took, out = [], []
    before = c0 = 0.0
    with _Collections() as gcs:
        for k, now in enumerate(times):
            if k > WARMUP_TICKS:  # the previous tick was timed: its collections since
                took[-1] += gcs.seconds - before
                if after_gc is not None:
                    after_gc.append(gcs.seconds - before)
                if cpu is not None:
                    cpu.append(time.process_time() - c0)
            if k == len(times) - 1:
                loop.tick(float(now), store)  # only for the collections the last timed tick left behind
                break
            c0 = time.process_time()
            t0 = time.perf_counter()
            out = loop.tick(float(now), store)
            if k >= WARMUP_TICKS:
                took.append(time.perf_counter() - t0)
            before = gcs.seconds
    return took, out


def _values(samples, pools: set[str] | None = None) -> dict:
    return {
        (s.name, s.labels): s.value
        for s in samples
        if s.name in FORECAST_SERIES and "pool" in s.label_dict and (pools is None or s.label_dict["pool"] in pools)
    }


def _max_abs_diff(a: dict, b: dict) -> float:
    if a.keys() != b.keys():
        raise SystemExit(f"scale: the batched and per-series ticks publish different series: {set(a) ^ set(b)}")
    worst = 0.0
    for k, va in a.items():
        vb = b[k]
        if np.isinf(va) or np.isinf(vb):
            if va != vb:
                return float("inf")
        else:
            worst = max(worst, abs(va - vb))
    return worst


def measure(n: int, repeat: int, per_series_max: int) -> dict:
    """One size, in this process (main() runs each in its own)."""
    from infercast.predictors.cli import prepare_process
    from infercast.predictors.shard import Shard, ShardedStore

    cfg = bench_config()
    series = fleet(n)
    store = FixedStore(series)
    single, loop = _loop(cfg, batched=False), _loop(cfg, batched=True)
    prepare_process(cfg.predictor)
    # the per-series path first, on the first groups, same ticks: run after the batched one, it paid for the
    # garbage collector walking the batched loop's state and samples (20x slower at 50,000 series)
    k = min(n, per_series_max)
    pools = {f"pool-{i:05d}" for i in range(k)}
    took1, out1 = _ticks(single, FixedStore(subset(series, pools)), repeat)
    reference = _values(out1)
    del single, out1
    gc.collect()
    cpu: list[float] = []
    took, out = _ticks(loop, store, repeat, cpu=cpu)
    models = sorted({s.label_dict["forecaster"] for s in out if s.name == FORECAST_KV_CACHE_USAGE_RATIO})
    published = sum(s.name == FORECAST_KV_CACHE_USAGE_RATIO for s in out) // 3
    r = {
        "series": n,
        "forecast_series": published,
        "model": loop.lstm.name,
        "model_label": models[0] if len(models) == 1 else models,
        "model_file": str(Path(cfg.predictor.model_file or "predictors/models/lstm_kv")),
        "tick_seconds": statistics.median(took),
        "ticks_timed": took,
        "tick_cpu_seconds": statistics.median(cpu),
        "ticks_cpu": cpu,
        "per_series_tick_seconds": statistics.median(took1) * n / k,
        "per_series_measured_on": k,
        "per_series_scaled": k < n,
        "peak_rss_bytes": 0,
        "max_abs_diff": _max_abs_diff(_values(out, pools), reference),
    }
    r["ratio"] = r["tick_seconds"] / r["per_series_tick_seconds"]
    if n == SHARD_SIZE:
        shards = []
        for i in range(2):
            shard_loop = _loop(cfg, batched=True)
            s_took, s_out = _ticks(shard_loop, ShardedStore(store, Shard(i, 2)), repeat)
            shards.append((statistics.median(s_took), set(_values(s_out))))
        whole = set(_values(out))
        if shards[0][1] & shards[1][1] or shards[0][1] | shards[1][1] != whole:
            raise SystemExit("scale: the two shards do not publish exactly the one replica's forecasts")
        r["shard_tick_seconds"] = [s for s, _ in shards]
        r["two_replicas_ratio"] = max(r["shard_tick_seconds"]) / r["tick_seconds"]
    r.update(state_bytes(loop, n))
    r["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return r


def state_bytes(loop, n: int) -> dict:
    """What the loop keeps between ticks, in array bytes per group: the rolling history (every metric's window:
    values and presence) and the online band's state (factors and the forecasts waiting for their outcomes)."""
    history = sum(w.v.nbytes + w.present.nbytes for w in loop._rolling.windows.values())
    bank = loop._kv_bank
    band = 0 if bank is None else sum(getattr(bank, k).nbytes for k in ("log_up", "log_lo", "updates", "last_t"))
    if bank is not None:
        band += sum(getattr(bank, k).nbytes for k in ("pend_t", "pend_lo", "pend_up", "pend_n"))
    return {"history_bytes_per_series": history / n, "band_bytes_per_series": band / n}


def _one_size(root: Path, n: int, repeat: int, per_series_max: int) -> dict:
    """`measure(n)` in a child process: this bench measuring the code of the checkout at `root`."""
    cmd = [sys.executable, str(REPO / "bench" / "scale.py"), "--one", str(n), "--repeat", str(repeat)]
    cmd += ["--per-series-max", str(per_series_max)]
    env = {**os.environ, "PYTHONPATH": str(root), "SCALE_CODE": str(root)}
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=root, env=env)
    if done.returncode != 0:
        raise SystemExit(f"scale: size {n} under {root} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def forecast_bench(
    sizes: list[int], repeat: int, per_series_max: int, progress: bool, before: Path | None = None
) -> list[dict]:
    out = []
    for n in sizes:
        r = _one_size(REPO, n, repeat, per_series_max)
        if before is not None:  # the earlier code right after, under the same load
            old = _one_size(before, n, repeat, per_series_max)
            r["before"] = {
                "commit": results.commit_of(before),
                "tick_seconds": old["tick_seconds"],
                "tick_cpu_seconds": old["tick_cpu_seconds"],
                "peak_rss_bytes": old["peak_rss_bytes"],
            }
        out.append(r)
        if progress:
            how = f"measured on {r['per_series_measured_on']}, scaled" if r["per_series_scaled"] else "all"
            print(
                f"{n:>6} series: tick {r['tick_seconds']:.3f} s, per-series {r['per_series_tick_seconds']:.2f} s "
                f"({how}), peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB, max |diff| {r['max_abs_diff']:.1e}, "
                f"CPU {r['tick_cpu_seconds']:.2f} s a tick"
                + (
                    f"; at {r['before']['commit']}: tick {r['before']['tick_seconds']:.3f} s, peak RSS "
                    f"{r['before']['peak_rss_bytes'] / 2**20:.0f} MiB, CPU {r['before']['tick_cpu_seconds']:.2f} s"
                    if "before" in r
                    else ""
                ),
                file=sys.stderr,
            )
    return out


class _Canned:
    """An HTTP session answering GETs with prepared bodies (the fetch bench: Prometheus' answers, no network)."""

    class _Response:
        status_code = 200

        def __init__(self, body: bytes) -> None:
            self.content = body

        def json(self):
            return json.loads(self.content)

    def __init__(self) -> None:
        self.body = b""

    def get(self, url, params=None, timeout=None):
        return self._Response(self.body)


def _answer(labels: list[dict[str, str]], t: np.ndarray, v: np.ndarray) -> bytes:
    """A query_range answer for series `labels` on grid `t` (values `v`, one row each), compact as Prometheus."""
    ts = [f"{x:.0f}" for x in t]
    parts = []
    for lab, row in zip(labels, v.tolist(), strict=True):
        metric = json.dumps(lab, separators=(",", ":"))
        pts = ",".join(f'[{a},"{b!r}"]' for a, b in zip(ts, row, strict=True))
        parts.append(f'{{"metric":{metric},"values":[{pts}]}}')
    return ('{"status":"success","data":{"resultType":"matrix","result":[' + ",".join(parts) + "]}}").encode()


def _old_read(body: bytes) -> list[Series]:
    """`PrometheusStore.query_range`'s reading before issue 25 item 2: json, then a float() per time and value."""
    data = json.loads(body)["data"]
    merged: dict[tuple, tuple[list[float], list[float]]] = {}
    for item in data.get("result", []):
        labels = {k: v for k, v in item.get("metric", {}).items() if k != "__name__"}
        ts, vs = merged.setdefault(tuple(sorted(labels.items())), ([], []))
        for t, v in item.get("values", []):
            if ts and float(t) <= ts[-1]:
                continue
            ts.append(float(t))
            vs.append(float(v))
    return [Series(dict(k), np.asarray(ts), np.asarray(vs)) for k, (ts, vs) in merged.items()]


def fetch_bench(n: int, repeat: int) -> dict:
    """Fetch and parse of one tick at n groups, old path against the rolling history (see the module docstring)."""
    from infercast.predictors.rolling import RollingWindow
    from infercast.predictors.service import COVARIATE_METRICS, RATE_WINDOW_STEPS
    from infercast.store.prometheus import PrometheusStore

    cfg = bench_config()
    loop = _loop(cfg, batched=True)
    series = fleet(n)
    t_fleet = series[KV_CACHE_USAGE_RATIO][0].t
    t_all = np.concatenate([[t_fleet[0] - STEP], t_fleet])  # a step more: the tick before the timed one reads it
    labels = [s.labels for s in series[KV_CACHE_USAGE_RATIO]]
    values = {m: np.stack([s.v for s in ss]) for m, ss in series.items()}
    values = {m: np.concatenate([v[:, :1], v], axis=1) for m, v in values.items()}
    values[ROUTER_REQUESTS_TOTAL] = np.cumsum(np.full((n, len(t_all)), 30.0 * STEP), axis=1)
    req_labels = [{**lab, "priority": "normal", "outcome": "ok"} for lab in labels]
    n_grid = round(cfg.predictor.history_seconds / STEP) + 1
    tail = loop.lstm.params.lookback + RATE_WINDOW_STEPS
    covs = [m for m, _ in COVARIATE_METRICS.values()]
    # the old tick: KV and the counter over the history, the covariates and the counter again over the LSTM's tail
    old_plan = [(KV_CACHE_USAGE_RATIO, n_grid), (ROUTER_REQUESTS_TOTAL, n_grid)]
    old_plan += [(m, tail) for m in covs] + [(ROUTER_REQUESTS_TOTAL, tail)]
    new_plan = loop.spans(n_grid, loop._batch_model())  # metric -> points the rolling history holds

    def body(metric: str, points: int, end: int = len(t_all)) -> bytes:
        lab = req_labels if metric == ROUTER_REQUESTS_TOTAL else labels
        return _answer(lab, t_all[end - points : end], values[metric][:, end - points : end])

    old_bodies = [body(m, k) for m, k in old_plan]
    session = _Canned()
    store = PrometheusStore("http://127.0.0.1:9", session=session)
    new_full = {m: body(m, k, len(t_all) - 1) for m, k in new_plan.items()}  # the window, one tick earlier
    new_inc = {m: body(m, 3) for m in new_plan}  # the newest point held less a step, to the tick
    old_s, new_s, first_s = [], [], []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        for b in old_bodies:
            _old_read(b)
        old_s.append(time.perf_counter() - t0)
        windows = {m: RollingWindow(m) for m in new_plan}
        t0 = time.perf_counter()
        for m, k in new_plan.items():  # the first tick: each window whole, fast path
            session.body = new_full[m]
            windows[m].read(store, float(t_all[-1 - k]), float(t_all[-2]), STEP)
        first_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for m, k in new_plan.items():
            session.body = new_inc[m]
            windows[m].read(store, float(t_all[-k]), float(t_all[-1]), STEP)
        new_s.append(time.perf_counter() - t0)
        if any(w.incremental_fetches != 1 or w.full_fetches != 1 for w in windows.values()):
            raise SystemExit("scale: the fetch bench's rolling history did not read incrementally")
    r = {
        "series": n,
        "old_queries": [[m, k] for m, k in old_plan],
        "new_windows": new_plan,
        "old_seconds": statistics.median(old_s),
        "new_seconds": statistics.median(new_s),
        "first_tick_seconds": statistics.median(first_s),
        "old_bytes": sum(len(b) for b in old_bodies),
        "new_bytes": sum(len(b) for b in new_inc.values()),
    }
    r["ratio"] = r["new_seconds"] / r["old_seconds"]
    return r


def exporter_bench(nodes: int, gpus: int, repeat: int) -> dict:
    from exporter import render_bench

    return render_bench(repeat, nodes, gpus)


def table_forecast(r: dict) -> str:
    f = r["forecast"]
    before = next((s["before"]["commit"] for s in f["sizes"] if "before" in s), None)
    head = "| series | tick (s) | per-series path (s) | x per-series | forecasts | peak RSS (MiB) | max abs diff |"
    rule = "|---:|---:|---:|---:|---:|---:|---:|"
    if before is not None:  # the earlier commit's tick, measured in the same run (`--before`)
        head += f" tick at {before} (s) | peak RSS at {before} (MiB) |"
        rule += "---:|---:|"
    rows = [head, rule]
    for s in f["sizes"]:
        per = f"{s['per_series_tick_seconds']:.2f}"
        if s["per_series_scaled"]:
            per += f" (on {s['per_series_measured_on']:,}, scaled)"
        row = (
            f"| {s['series']:,} | {s['tick_seconds']:.3f} | {per} | {s['ratio']:.3f} | {s['forecast_series']:,} | "
            f"{s['peak_rss_bytes'] / 2**20:,.0f} | {s['max_abs_diff']:.1e} |"
        )
        if before is not None:
            b = s.get("before")
            row += f" {b['tick_seconds']:.3f} | {b['peak_rss_bytes'] / 2**20:,.0f} |" if b else " - | - |"
        rows.append(row)
    per_series = memory_per_series(f["sizes"])
    if per_series is not None:
        lo, hi, kib = per_series
        rows.append(
            f"\nMemory per series: {kib:,.1f} KiB (the peak RSS's growth from {lo:,} to {hi:,} series over the "
            "series added: the predictor's rolling history, band state and the tick's temporaries, and the bench's own "
            "copy of the fleet's hour of four metrics, about 7.5 KiB of it)."
        )
        big = max(f["sizes"], key=lambda s: s["series"])
        if "history_bytes_per_series" in big:
            rows.append(
                f"Kept between ticks, per series at {big['series']:,}: the rolling history "
                f"{big['history_bytes_per_series'] / 1024:,.2f} KiB (each metric's window, values and presence), the "
                f"online band {big['band_bytes_per_series']:,.0f} bytes."
            )
    sh = (
        next(s for s in f["sizes"] if "shard_tick_seconds" in s)
        if any("shard_tick_seconds" in s for s in f["sizes"])
        else None
    )
    rows.append("")
    if sh is not None:
        rows.append(
            f"Two replicas (`--shard i/2`) at {sh['series']:,} series: the slower shard's tick "
            f"{max(sh['shard_tick_seconds']):.3f} s, {sh['two_replicas_ratio']:.2f}x one replica's."
        )
        rows.append("")
    for x in f.get("fetch", []):
        rows.append(
            f"Fetch and parse at {x['series']:,} series: {x['new_seconds']:.3f} s a tick from the rolling history "
            f"({x['new_bytes'] / 1e6:.1f} MB of answers) against {x['old_seconds']:.3f} s for the whole windows as "
            f"read before ({x['old_bytes'] / 1e6:.1f} MB), {x['ratio']:.3f}x; the first tick (whole windows, fast "
            f"JSON path) {x['first_tick_seconds']:.3f} s."
        )
        rows.append("")
    rows.append(
        f"`infercast predictor`'s tick with the shipped LSTM (`{f['model_label']}`: the model file, its online band, "
        "the calendar prior), median of "
        f"{f['repeat']} ticks after {f['warmup_ticks']} warm-up ticks; series are (pool, version) groups with an hour "
        "of 15 s history of KV usage and the covariates, each publishing its mean and max forecasts; the per-series "
        "path (`batched=False`: each series through its own pipeline, as before issue 25) timed in the same run, on "
        "the first "
        f"{f['per_series_max']:,} groups and scaled where marked; max abs diff between the two paths' published "
        "values; traffic not included (its forecasts, per series, are timed in docs/results/forecast.md). "
        f"{f['torch_threads']} torch thread"
        + (
            f", the LSTM's chunks of windows on {f['lstm_workers']} threads (the same floats as one); a pool's mean "
            "and max that are one window (a one-instance pool, as every group here) are forecast once; each tick's "
            "time includes the garbage collections it leaves to after it returns"
            if "lstm_workers" in f
            else ""
        )
        + f"; {r['machine']}; load average "
        f"{f['load_before']:.1f} before, {f['load_after']:.1f} after."
    )
    return "\n".join(rows)


def memory_per_series(sizes: list[dict]) -> tuple[int, int, float] | None:
    """(smaller size, larger size, KiB per series) between the two largest sizes measured, or None with one size."""
    if len(sizes) < 2:
        return None
    a, b = sorted(sizes, key=lambda s: s["series"])[-2:]
    return a["series"], b["series"], (b["peak_rss_bytes"] - a["peak_rss_bytes"]) / (b["series"] - a["series"]) / 1024


def table_exporter(r: dict) -> str:
    e = r["exporter"]
    return "\n".join(
        [
            "| /metrics of the fleet exporter | ms | x baseline |",
            "|---|---:|---:|",
            f"| prometheus_client Gauges, same series (baseline) | {e['baseline_ms']:.0f} | 1.00 |",
            f"| exporter render | {e['render_ms']:.0f} | {e['render_ratio']:.2f} |",
            f"| exporter frame build + render | {e['frame_and_render_ms']:.0f} | {e['frame_and_render_ratio']:.2f} |",
            "",
            f"{e['nodes']} nodes x {e['gpus_per_node']} GPUs: {e['series']:,} series, "
            f"{e['body_bytes'] / 1e6:.1f} MB per scrape; {r['machine']}.",
        ]
    )


TABLES = {"forecast": table_forecast, "exporter": table_exporter}


def _parser() -> argparse.ArgumentParser:
    """The bench's command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default=",".join(str(n) for n in SIZES), help="series counts, comma-separated")
    p.add_argument("--nodes", type=int, default=512)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3, help="timed ticks per size (and exporter renders)")
    p.add_argument("--per-series-max", type=int, default=500, help="groups the per-series path runs on (scaled)")
    p.add_argument("--json", action="store_true", help="print one JSON object per size")
    p.add_argument(
        "--no-exporter", action="store_true", help="forecasting only; the exporter's published figures are kept"
    )
    p.add_argument("--no-publish", action="store_true", help="print only")
    p.add_argument(
        "--fetch-only", action="store_true", help="only the fetch and parse figures (printed; nothing published)"
    )
    p.add_argument(
        "--before", type=Path, default=None, help="a checkout of an earlier commit, timed beside this one in this run"
    )
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # one size, in a child process
    return p


def _fetch_only(sizes: list[int], repeat: int, as_json: bool) -> None:
    """`--fetch-only`: the fetch and parse figures of each size, printed."""
    for n in sizes:
        x = fetch_bench(n, repeat)
        print(
            json.dumps(x)
            if as_json
            else f"{n:>6} series: fetch+parse {x['new_seconds']:.4f} s a tick "
            f"(rolling, {x['new_bytes'] / 1e6:.2f} MB), was {x['old_seconds']:.3f} s ({x['old_bytes'] / 1e6:.1f} "
            f"MB), {x['ratio']:.4f}x; first tick {x['first_tick_seconds']:.3f} s"
        )


def main() -> int:
    p = _parser()
    a = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if a.one is not None:
        print(json.dumps(measure(a.one, a.repeat, a.per_series_max)))
        return 0
    sizes = [int(x) for x in a.sizes.split(",") if x]
    if not sizes or min(sizes) < 2 or a.nodes < 1 or a.gpus < 1 or a.repeat < 1 or a.per_series_max < 1:
        p.error("--sizes must be >= 2; --nodes, --gpus, --repeat and --per-series-max >= 1")
    from infercast.config import PredictorConfig
    from infercast.predictors.lstm import forecast_workers

    if a.fetch_only:
        _fetch_only(sizes, a.repeat, a.json)
        return 0
    load_before = os.getloadavg()[0]
    sized = forecast_bench(sizes, a.repeat, a.per_series_max, progress=not a.json, before=a.before)
    fetched = []
    for n in (x for x in sizes if x in FETCH_SIZES):
        fetched.append(fetch_bench(n, a.repeat))
        x = fetched[-1]
        line = (
            f"{n:>6} series: fetch+parse {x['new_seconds']:.3f} s a tick (rolling, {x['new_bytes'] / 1e6:.1f} MB), "
            f"was {x['old_seconds']:.3f} s ({x['old_bytes'] / 1e6:.1f} MB), {x['ratio']:.3f}x; first tick "
            f"{x['first_tick_seconds']:.3f} s"
        )
        print(line if not a.json else json.dumps({"fetch": x}), file=sys.stderr if not a.json else sys.stdout)
    if a.json:
        keys = ("series", "model", "tick_seconds", "per_series_tick_seconds", "peak_rss_bytes", "max_abs_diff")
        for r in sized:
            print(json.dumps({**{k: r[k] for k in keys}, **{k: v for k, v in r.items() if k not in keys}}))
    r = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}",
        "forecast": {
            "sizes": sized,
            "model_label": sized[0]["model_label"],
            "repeat": a.repeat,
            "warmup_ticks": WARMUP_TICKS,
            "per_series_max": a.per_series_max,
            "torch_threads": PredictorConfig().torch_threads,
            "lstm_workers": forecast_workers(),
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
            "fetch": fetched,
        },
    }
    if a.no_exporter:  # the exporter's figures stay those of the last run that measured them
        r["exporter"] = results.load("scale")["exporter"]
    else:
        r["exporter"] = exporter_bench(a.nodes, a.gpus, a.repeat)
    if not a.json:
        print(table_forecast(r))
        print()
        print(table_exporter(r))
    if not a.no_publish:
        out = results.publish("scale", r, TABLES)
        if not a.json:
            print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
