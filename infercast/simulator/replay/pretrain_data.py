"""Data to pre-train the LSTM on: KV-usage series generated from ServeGen's production rates and synthetic surges.

A real trace is an hour long; a forecaster of five-minute peaks needs many surges, many pool sizes and many
traffic shapes.  This module makes them with a *fluid pool model* — a vectorised, per-pool queue with a KV
budget, a slot limit and decode that slows as the batch grows (the twin's latency model: inter-token time
doubles at a batch of 64) — driven by:

- ServeGen's per-600 s aggregate request rates (`infercast.simulator.replay.traces.servegen_rates`; the development
  slice has days 0-8 of `language/m-large` and a day each of `reason/deepseek-r1` and `multimodal/mm-image`), at random
  offsets, rescaled to random traffic levels and roughened at minute scale (the 600 s windows are too smooth to
  hold the minute-scale bursts KV alerts are about);
- synthetic surges: flash sales (2-60x in 10-300 s, as seed 000's 200 -> 12,000 req/s), on/off bursts
  (as in Azure code), and jumps of the >8k prompt share (seed 000's 15% -> 63%).

Pool sizes are drawn so that some series never come near 0.75 and others saturate, as the twin's
`size_fleet_for_trace` does for real traces.  When the fleet twin is importable, `twin_histories` adds series
from the twin itself (the flash-sale scenario, and traces given on the command line).

The development traces (Azure, Mooncake) and the flash-sale scenario itself (seed 0) are *not* used here, nor for
validation: the backtest scores them, so nothing that trains or chooses the model may see them (`train_cli`
validates on twin runs with seeds the backtest never uses).
Everything is deterministic under its seed.  No I/O except reading the ServeGen directories named by the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from infercast.predictors.base import History

log = logging.getLogger(__name__)

SIM_DT_S = 5.0  # internal step of the fluid model


@dataclass(frozen=True)
class Pools:
    """Per-series pool parameters (arrays of length S)."""

    capacity_tokens: np.ndarray  # KV capacity of the pool
    max_running: np.ndarray  # slots (max batch x nodes)
    nodes: np.ndarray
    short_tokens: np.ndarray  # mean KV tokens held by a short (<= 8k) request
    long_tokens: np.ndarray
    out_tokens: np.ndarray  # mean generated tokens
    itl_s: np.ndarray  # inter-token time at batch 1
    prefill_short_s: np.ndarray
    prefill_long_s: np.ndarray
    abandon_s: np.ndarray  # mean time a waiting client waits before giving up
    paged: np.ndarray  # bool: paged KV (internal fragmentation) or contiguous (reserved, external)
    reserve_factor: np.ndarray  # contiguous managers reserve this multiple of the held tokens
    has_fragmentation: np.ndarray  # bool: does this source export fragmentation?
    size_cv: np.ndarray  # coefficient of variation of one request's KV tokens


def draw_pools(n: int, rng: np.random.Generator) -> Pools:
    """Random but plausible pools (13B-class model on A100-40GB nodes, as in examples/flash-sale.yaml)."""
    nodes = rng.integers(2, 40, n)
    # ~14 GB of KV per GPU x 4 GPUs at 0.8 MB/token ~ 70k tokens per node, +-50%
    per_node = rng.uniform(35_000, 105_000, n)
    return Pools(
        capacity_tokens=nodes * per_node,
        max_running=nodes * rng.choice([64, 128, 256], n),
        nodes=nodes.astype(float),
        short_tokens=rng.uniform(800, 3500, n),
        long_tokens=rng.uniform(12_000, 30_000, n),
        out_tokens=rng.uniform(120, 600, n),
        itl_s=rng.uniform(0.015, 0.045, n),
        prefill_short_s=rng.uniform(0.1, 0.3, n),
        prefill_long_s=rng.uniform(0.6, 1.5, n),
        abandon_s=rng.uniform(20, 120, n),
        paged=rng.random(n) < 0.8,
        reserve_factor=rng.uniform(1.3, 2.5, n),
        has_fragmentation=rng.random(n) < 0.8,
        size_cv=rng.uniform(0.5, 1.3, n),
    )


def steady_kv_tokens(rps: np.ndarray, long_share: np.ndarray, pools: Pools, nodes: np.ndarray) -> np.ndarray:
    """KV tokens an unsaturated pool of `nodes` nodes holds at steady rates (S, T); 1e30 where decode can't keep up.

    Little's law with decode slowing as the batch per node x grows: x = (rps/N) * (prefill + out*itl*(1 + x/64)),
    solved in closed form.
    """
    per_node = rps / nodes[:, None]
    prefill = (1 - long_share) * pools.prefill_short_s[:, None] + long_share * pools.prefill_long_s[:, None]
    decode = (pools.out_tokens * pools.itl_s)[:, None]
    b = per_node * decode / 64
    with np.errstate(divide="ignore"):
        x = np.where(b < 1, per_node * (prefill + decode) / np.maximum(1 - b, 1e-9), 1e30)
    tokens = (1 - long_share) * pools.short_tokens[:, None] + long_share * pools.long_tokens[:, None]
    hold = np.where(pools.paged, 1.0, pools.reserve_factor)[:, None]
    return x * nodes[:, None] * tokens * hold


def simulate(
    rps: np.ndarray,
    long_share: np.ndarray,
    pools: Pools,
    rng: np.random.Generator,
    out_step_s: float = 15.0,
    t0: float = 0.0,
    ids: Sequence[str] | None = None,
    poisson: bool = True,
) -> list[History]:
    """Run the fluid pool model on rates (S, T) given every SIM_DT_S seconds; sample gauges every out_step_s.

    Per step: Poisson arrivals (short and long) join the waiting queue; running requests finish at a rate set
    by their prefill + decode time, decode slowing with the batch per node; waiting requests are admitted while
    KV tokens and slots allow (first come first served, fluid); waiting clients give up after `abandon_s`.
    `poisson=False` takes the rates as the exact arrival counts (for replaying a real trace's counts).
    """
    s_n, t_n = rps.shape
    every = max(1, round(out_step_s / SIM_DT_S))
    dt = SIM_DT_S
    run_s, run_l, wait_s, wait_l = (np.zeros(s_n) for _ in range(4))
    n_out = t_n // every
    out = {k: np.full((s_n, n_out), np.nan) for k in ("y", "rps", "long_share", "running", "waiting", "frag")}
    arr_acc, long_acc = np.zeros(s_n), np.zeros(s_n)
    cap, slots = pools.capacity_tokens, pools.max_running
    for k in range(t_n):
        lam = np.maximum(rps[:, k], 0) * dt
        if poisson:
            a_l = rng.poisson(lam * long_share[:, k])
            a_s = rng.poisson(lam * (1 - long_share[:, k]))
        else:
            a_l = lam * long_share[:, k]
            a_s = lam - a_l
        arr_acc += a_s + a_l
        long_acc += a_l
        wait_s += a_s
        wait_l += a_l
        per_node = (run_s + run_l) / pools.nodes
        itl = pools.itl_s * (1 + per_node / 64)
        life_s = pools.prefill_short_s + pools.out_tokens * itl
        life_l = pools.prefill_long_s + pools.out_tokens * itl
        # Exponential lifetimes in continuous time: those running at the step's start survive e^-dt/life; of the
        # requests admitted during the step, on average life * (1 - e^-dt/life) / dt are still running at its end.
        keep_s, keep_l = np.exp(-dt / life_s), np.exp(-dt / life_l)
        g_s, g_l = life_s * (1 - keep_s) / dt, life_l * (1 - keep_l) / dt
        run_s *= keep_s
        run_l *= keep_l
        hold = np.where(pools.paged, 1.0, pools.reserve_factor)
        used = (run_s * pools.short_tokens + run_l * pools.long_tokens) * hold
        want = (wait_s * g_s * pools.short_tokens + wait_l * g_l * pools.long_tokens) * hold
        free = np.maximum(cap - used, 0)
        frac = np.minimum(1.0, free / np.maximum(want, 1e-9))
        free_slots = np.maximum(slots - run_s - run_l, 0)
        frac = np.minimum(frac, free_slots / np.maximum(wait_s * g_s + wait_l * g_l, 1e-9))
        run_s += frac * wait_s * g_s
        run_l += frac * wait_l * g_l
        wait_s *= 1 - frac
        wait_l *= 1 - frac
        give_up = np.exp(-dt / pools.abandon_s)
        wait_s *= give_up
        wait_l *= give_up
        if (k + 1) % every == 0:
            j = (k + 1) // every - 1
            live = run_s * pools.short_tokens + run_l * pools.long_tokens
            reserved = live * hold + (run_s + run_l) * 8.0 * pools.paged  # paged: half a 16-token block each
            kv = reserved / cap
            # What a scrape sees is one draw of whole requests, not the fluid mean: the running count is
            # Poisson around it, and KV the sum of that many lognormal sizes (CV ~1), so a small pool's KV is
            # as jumpy as the twin's or a real node's.
            running = rng.poisson(np.maximum(run_s + run_l, 0))
            scale = running / np.maximum(run_s + run_l, 1e-9)
            kv = kv * scale * (1 + pools.size_cv / np.sqrt(running + 1) * rng.standard_normal(s_n))
            out["y"][:, j] = np.clip(kv + rng.normal(0, 0.003, s_n), 0, 1)
            out["rps"][:, j] = arr_acc / (every * dt)
            with np.errstate(invalid="ignore", divide="ignore"):
                out["long_share"][:, j] = np.where(arr_acc > 0, long_acc / np.maximum(arr_acc, 1), np.nan)
                frag = np.where(reserved > 0, 1 - live / np.maximum(reserved, 1e-9), 0.0)
            out["running"][:, j] = running
            out["waiting"][:, j] = np.round(wait_s + wait_l)
            out["frag"][:, j] = np.clip(frag + rng.normal(0, 0.003, s_n), 0, 1)
            arr_acc[:] = 0
            long_acc[:] = 0
    t = t0 + out_step_s * np.arange(1, n_out + 1)
    hs = []
    for i in range(s_n):
        feats = {
            "rps": out["rps"][i],
            "long_share": out["long_share"][i],
            "running": out["running"][i],
            "waiting": out["waiting"][i],
        }
        if pools.has_fragmentation[i]:
            feats["fragmentation"] = out["frag"][i]
        hs.append(History(t.copy(), out["y"][i], feats, ids[i] if ids else f"sim-{i}"))
    return hs


# ---------------------------------------------------------------------------------------------------------------
# traffic


def _ar1(n_series: int, n: int, tau_steps: np.ndarray, sigma: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Stationary AR(1) paths (S, n) with correlation time tau_steps and marginal std sigma."""
    phi = np.exp(-1.0 / np.maximum(tau_steps, 1.0))
    e = rng.standard_normal((n_series, n)) * (sigma * np.sqrt(1 - phi**2))[:, None]
    x = np.zeros((n_series, n))
    x[:, 0] = rng.standard_normal(n_series) * sigma
    for k in range(1, n):
        x[:, k] = phi * x[:, k - 1] + e[:, k]
    return x


def add_surges(
    rps: np.ndarray, long_share: np.ndarray, rng: np.random.Generator, per_hour: float = 0.5
) -> tuple[np.ndarray, np.ndarray]:
    """Flash-sale surges: rate x(1.5..60) over a 10-300 s ramp, held 2-30 min, decaying over 1-10 min; the long
    prompt share jumps to 0.3-0.7 over 0-300 s.  Returns new arrays."""
    rps, long_share = rps.copy(), long_share.copy()
    s_n, n = rps.shape
    dt = SIM_DT_S
    t = np.arange(n) * dt
    hours = n * dt / 3600
    for i in range(s_n):
        for _ in range(rng.poisson(per_hour * hours)):
            start = rng.uniform(0, n * dt)
            mult = np.exp(rng.uniform(np.log(1.5), np.log(60)))
            ramp, hold, decay = rng.uniform(10, 300), rng.uniform(120, 1800), rng.uniform(60, 600)
            up = np.clip((t - start) / ramp, 0, 1)
            down = np.clip(1 - (t - start - ramp - hold) / decay, 0, 1)
            shape = np.minimum(up, down)
            rps[i] *= 1 + (mult - 1) * shape
            if rng.random() < 0.7:
                target = rng.uniform(0.3, 0.7)
                lramp = rng.uniform(1, 300)
                lshape = np.minimum(np.clip((t - start) / lramp, 0, 1), down)
                long_share[i] = long_share[i] + (np.maximum(target, long_share[i]) - long_share[i]) * lshape
    return rps, long_share


def add_on_off(rps: np.ndarray, rng: np.random.Generator, frac_series: float = 0.35) -> np.ndarray:
    """On/off bursts (as in Azure code): for some series, random 1-6 min periods at 2-30x the base."""
    rps = rps.copy()
    s_n, n = rps.shape
    per = max(1, round(60 / SIM_DT_S))
    for i in range(s_n):
        if rng.random() > frac_series:
            continue
        k = 0
        while k < n:
            off = int(rng.exponential(8) * per)
            on = int(rng.uniform(1, 6) * per)
            k += off
            rps[i, k : k + on] *= rng.uniform(2, 30)
            k += on
    return rps


def traffic_from_rates(
    base_t: np.ndarray, base_rps: np.ndarray, n_series: int, hours: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Rates (S, T) every SIM_DT_S from random offsets into a 600 s rate series, rescaled and roughened."""
    n = int(hours * 3600 / SIM_DT_S)
    ok = np.isfinite(base_rps) & (base_rps > 0)
    bt, br = base_t[ok], np.log(base_rps[ok])
    span = bt[-1] - bt[0]
    out = np.zeros((n_series, n))
    t_rel = np.arange(n) * SIM_DT_S
    for i in range(n_series):
        warp = np.exp(rng.uniform(np.log(0.5), np.log(4)))  # replay 0.5x-4x as fast: sharper or gentler days
        start = rng.uniform(bt[0], max(bt[0], bt[-1] - hours * 3600 * warp))
        tt = start + t_rel * warp
        tt = bt[0] + np.mod(tt - bt[0], span)
        lr = np.interp(tt, bt, br)
        lr = lr - np.median(lr) + rng.uniform(np.log(2), np.log(20_000))  # the fleet's traffic level
        out[i] = np.exp(lr)
    rough = _ar1(
        n_series, n, rng.uniform(2, 120, n_series), rng.uniform(0.02, 0.45, n_series), rng
    )  # 10 s - 10 min correlation, 2-45% minute-scale roughness
    out *= np.exp(rough)
    base_long = rng.uniform(0.02, 0.45, n_series)
    drift = _ar1(n_series, n, rng.uniform(60, 720, n_series), rng.uniform(0.0, 0.08, n_series), rng)
    long_share = np.clip(base_long[:, None] + drift, 0.0, 0.95)
    return out, long_share


def size_pools(
    rps: np.ndarray, long_share: np.ndarray, pools: Pools, rng: np.random.Generator, target_peak: float | None = None
) -> Pools:
    """Choose each pool's node count so that its busiest minutes reach `target_peak` of its KV capacity (default:
    0.3-1.05, drawn per pool, so some series never come near the 0.75 trigger and some saturate), as the twin's
    `size_fleet_for_trace` does for traces."""
    per_node_tokens = pools.capacity_tokens / pools.nodes
    slots_per_node = pools.max_running / pools.nodes
    n = rps.shape[0]
    target = rng.uniform(0.3, 1.05, n) if target_peak is None else np.full(n, target_peak)
    lo, hi = np.zeros(rps.shape[0]), np.full(rps.shape[0], 16.0)  # log2 nodes in [1, 65536]
    for _ in range(30):
        mid = (lo + hi) / 2
        nodes = 2.0**mid
        peak = np.quantile(steady_kv_tokens(rps, long_share, pools, nodes), 0.995, axis=1)
        too_small = peak / (nodes * per_node_tokens) > target
        lo, hi = np.where(too_small, mid, lo), np.where(too_small, hi, mid)
    nodes = 2.0**hi
    return Pools(
        **{
            **pools.__dict__,
            "nodes": nodes,
            "capacity_tokens": nodes * per_node_tokens,
            "max_running": nodes * slots_per_node,
        }
    )


def generated_histories(
    rate_series: Sequence[tuple[str, np.ndarray, np.ndarray]],
    n_series: int,
    hours: float,
    seed: int,
    out_step_s: float = 15.0,
    surges_per_hour: float = 0.5,
) -> list[History]:
    """KV histories from the fluid model on ServeGen-shaped traffic with surges and bursts.

    `rate_series`: (name, window starts s, rps) per source, e.g. from
    `infercast.simulator.replay.traces.servegen_rates`; with none, a synthetic diurnal curve is used.  Series are split
    evenly across the sources.
    """
    rng = np.random.default_rng(seed)
    if not rate_series:
        t = np.arange(0, 86_400, 600.0)
        rate_series = [("synthetic-diurnal", t, 100 * (1.5 + np.sin(2 * np.pi * t / 86_400)))]
    per = np.array_split(np.arange(n_series), len(rate_series))
    hs: list[History] = []
    for (name, bt, br), idx in zip(rate_series, per, strict=True):
        if len(idx) == 0:
            continue
        rps, ls = traffic_from_rates(bt, br, len(idx), hours, rng)
        rps = add_on_off(rps, rng)
        pools = size_pools(rps, ls, draw_pools(len(idx), rng), rng)  # sized on the traffic without surges
        rps, ls = add_surges(rps, ls, rng, per_hour=surges_per_hour)
        ids = [f"{name}#{int(i)}" for i in idx]
        hs += simulate(rps, ls, pools, rng, out_step_s=out_step_s, ids=ids)
    return hs


def trace_histories(trace, n_pools: int, seed: int, out_step_s: float = 15.0, target_peak: float = 0.85):
    """KV histories of `n_pools` random pools (fluid model) fed the arrivals of a real trace, sized so that the
    trace's busiest minutes reach `target_peak` (the twin's default).  For validation when the twin is absent."""
    from infercast.simulator.replay.traces import long_share_series, rate_series

    rng = np.random.default_rng(seed)
    _, r = rate_series(trace, SIM_DT_S)
    _, share = long_share_series(trace, SIM_DT_S)
    share = np.where(np.isfinite(share), share, np.nanmean(share) if np.isfinite(share).any() else 0.0)
    rps = np.repeat(r[None, :], n_pools, axis=0).astype(float)
    ls = np.repeat(share[None, :], n_pools, axis=0)
    pools = size_pools(rps, ls, draw_pools(n_pools, rng), rng, target_peak=target_peak)
    # The trace's own counts are the arrivals (no Poisson re-draw: the trace already is one realisation).
    ids = [f"{trace.name}#fluid{i}" for i in range(n_pools)]
    return simulate(rps, ls, pools, rng, out_step_s=out_step_s, ids=ids, poisson=False)


def servegen_rate_series(dirs: Sequence[Path | str]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, t, rps) for each ServeGen model directory given (e.g. .../servegen/data/language/m-large)."""
    from infercast.simulator.replay.traces import servegen_rates

    out = []
    for d in dirs:
        t, r = servegen_rates(d)
        out.append((f"servegen:{Path(d).parent.name}/{Path(d).name}", t, r))
        log.info("servegen %s: %d windows, %.1f-%.1f req/s", d, len(t), np.nanmin(r), np.nanmax(r))
    return out


# ---------------------------------------------------------------------------------------------------------------
# the fleet twin (optional)


def result_histories(timeseries, name: str) -> list[History]:
    """One History per pool from a twin RunResult.timeseries (columns t, pool, kv_usage, rps, ...); pools that
    never had a node up (standby pools never started) are left out."""
    hs = []
    for pool, df in timeseries.groupby("pool", sort=True):
        df = df.sort_values("t")
        if not np.isfinite(df["kv_usage"].to_numpy(dtype=float)).any():
            continue
        covs = ("rps", "long_share", "running", "waiting", "fragmentation")
        feats = {c: df[c].to_numpy(dtype=float) for c in covs if c in df.columns}
        hs.append(History(df["t"].to_numpy(dtype=float), df["kv_usage"].to_numpy(dtype=float), feats, f"{name}:{pool}"))
    return hs


def scenario_variants(config, n: int, seed: int):
    """`n` variants of the config's surge scenario: baseline rate, surge size, ramp, start and long-share jump
    drawn around the seed's flash sale (so the model learns the family, not the one instance it is scored on)."""
    from infercast.config import TrafficPhase

    if config.scenario is None:
        raise ValueError(f"fleet {config.name!r} has no scenario to vary")
    rng = np.random.default_rng(seed)
    base = config.scenario.phases[0]
    out = []
    for i in range(n):
        b_rps = float(base.rps) * rng.uniform(0.5, 1.2)
        b_long = float(np.clip(base.long_share * rng.uniform(0.5, 1.5), 0.02, 0.5))
        start = float(rng.uniform(300, 1200))
        phases = (
            TrafficPhase(start_seconds=0, rps=b_rps, long_share=b_long),
            TrafficPhase(
                start_seconds=start,
                ramp_seconds=float(rng.uniform(10, 300)),
                rps=b_rps * float(np.exp(rng.uniform(np.log(1.3), np.log(60)))),
                long_share=float(rng.uniform(max(b_long, 0.2), 0.7)),
                long_ramp_seconds=float(rng.uniform(20, 400)),
            ),
        )
        # the variant's phases are the whole traffic: the scenario's other streams (its own surge) are left out
        sc = config.scenario.model_copy(
            update={
                "phases": phases,
                "streams": (),
                "duration_seconds": start + float(rng.uniform(900, 1500)),
                "seed": seed + i,
            }
        )
        out.append(config.model_copy(update={"scenario": sc, "name": f"{config.name}-variant{seed + i}"}))
    return out


def twin_scenario_histories(configs: Sequence, step_s: float = 15.0) -> list[History]:
    """Per-pool KV histories of the twin running each config's scenario (e.g. `scenario_variants`)."""
    from infercast.simulator.twin.run import run_scenario

    hs = []
    for cfg in configs:
        res = run_scenario(cfg, seed=cfg.scenario.seed, step_seconds=step_s)
        hs += result_histories(res.timeseries, f"twin:{cfg.name}")
    return hs


def twin_trace_histories(traces: Sequence, config, seed: int = 0, step_s: float = 15.0) -> list[History]:
    """Per-pool KV histories of the twin replaying each trace on a fleet sized for it (`size_fleet_for_trace`)."""
    from infercast.simulator.twin.run import run_trace, size_fleet_for_trace

    hs = []
    for trace in traces:
        sized = size_fleet_for_trace(trace, config)
        res = run_trace(trace, sized, seed=seed, step_seconds=step_s)
        hs += result_histories(res.timeseries, f"twin:{trace.name}")
    return hs


@dataclass(frozen=True)
class SliceSpec:
    """One slice of a ServeGen directory for the twin to replay: [start_s, end_s) of `source` (the directory's
    `family/model`, e.g. `language/m-large`), arrivals generated with `seed`."""

    source: str
    start_s: float
    end_s: float
    seed: int

    def as_dict(self) -> dict:
        return {"source": self.source, "start_s": self.start_s, "end_s": self.end_s, "seed": self.seed}


def servegen_source(d: Path | str) -> str:
    """The name a ServeGen directory goes by in slice specs and model metadata: `family/model`."""
    return f"{Path(d).parent.name}/{Path(d).name}"


def plan_servegen_slices(
    dirs: Sequence[Path | str],
    hours: int,
    seed: int,
    slice_s: float = 3600.0,
    avoid: Sequence[SliceSpec] = (),
) -> list[SliceSpec]:
    """`hours` one-hour slices drawn at random from the ServeGen directories (round robin), none overlapping a
    slice in `avoid` of the same source (so validation and calibration slices stay apart from training's)."""
    from infercast.simulator.replay.traces import servegen_rates

    rng = np.random.default_rng(seed)
    out = []
    for i in range(hours):
        d = dirs[i % len(dirs)]
        src = servegen_source(d)
        t, r = servegen_rates(d)
        ok = t[np.isfinite(r)]
        cand = ok[ok <= ok[-1] - slice_s]
        for a in avoid:
            if a.source == src:
                cand = cand[(cand + slice_s <= a.start_s) | (cand >= a.end_s)]
        start = float(rng.choice(cand)) if len(cand) else float(ok[0])
        out.append(SliceSpec(src, start, start + slice_s, seed + i))
    return out


def load_servegen_slices(dirs: Sequence[Path | str], specs: Sequence[SliceSpec]) -> list:
    """The traces of planned slices (arrivals generated from the per-client windows by `load_trace`)."""
    from infercast.simulator.replay.traces import load_trace

    by_source = {servegen_source(d): d for d in dirs}
    return [load_trace(by_source[s.source], seed=s.seed, start_s=s.start_s, end_s=s.end_s) for s in specs]


def servegen_slices(dirs: Sequence[Path | str], hours: int, seed: int, slice_s: float = 3600.0) -> list:
    """`hours` one-hour traces cut at random from the ServeGen directories, for the twin to replay."""
    return load_servegen_slices(dirs, plan_servegen_slices(dirs, hours, seed, slice_s))
