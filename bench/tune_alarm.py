"""Choose the predictive alert's persistence (`for:`), hysteresis, the calendar prior's onset and what the alert
reads (the forecast's band alone or with `predict_linear`) on runs the scores never see.

    nice -n 10 .venv/bin/python bench/tune_alarm.py [--json OUT] [--cache DIR] [--traces /work/shared/traces]

Data (none of it is scored by bench/forecast.py, trains, validates or calibrates the LSTM):
- *sale runs*: the flash-sale fleet under `--control none`, with arrival seeds 700-703 (the scored run is seed 0;
  the LSTM's data use seeds 100-105, 300-303, 400, 500-511, 600), the sale as in the fleet file;
- *calm runs*: two runs (seeds 710, 711) of the same fleet with the flash-sale customer's stream and the calendar
  event removed: 30 minutes of the regular 200 req/s;
- *bursty runs* (`BURSTY_SOURCES`): request-level ServeGen hours replayed through the twin on a fleet sized the way
  `infercast.simulator.replay.evaluate` sizes the scored series (`infercast.simulator.replay.sizing.sized_fleet`, fixed
  for the hour), the series the scored ones are (the fullest instance of the pool with the highest peak).  The published
  choice was made when that sizing pushed the busiest minutes over 0.8 KV; since issue 37 it sizes the trace's median
  load at <= 0.6 KV, so a rerun of this bench replays other fleets.  Per source, the `HOURS_PER_SOURCE` busiest
  whole hours (by the 600 s rates, as `infercast.simulator.replay.evaluate` picks ServeGen's busiest hour) that overlap
  neither the scored hour nor any hour the LSTM was trained, validated or calibrated on (`EXCLUDED_HOURS`,
  docs/forecasting.md's protocol) nor each other:
  `reason/deepseek-r1` (the scored series' source: on/off bursts of long reasoning requests) and
  `multimodal/mm-image`.  What else touched them: the LSTM's generated pre-training series are driven by these
  two models' 600 s rates over the whole day (time-warped, rescaled), never these hours at request level.
- *shaped runs* (`SHAPES`, added after three of the four ServeGen hours turned out to cross the trigger every minute
  or so, none of those three with a crossing after 5 calm minutes): an hour of synthetic requests each, replayed on
  a fleet sized the same way; Poisson arrivals at a base rate (`BASE_RPS`, any rate would do: the fleet is sized to
  the trace) with the flash-sale fleet's length mix, shaped by round numbers chosen for what they model, not fitted
  to any trace: `ramp` (seeds 750, 751), 15 calm minutes, then the rate doubles linearly over 20 minutes (an
  organic ramp: a region failing over, the morning rise compressed), holds 10 minutes and drops back; `onoff`
  (seeds 752, 753), after 10 calm minutes a client doubles the rate for 2 minutes every 10 minutes (a scheduled
  batch job).
  These runs hold the traffic the sale and calm runs lack: ramps and bursts that come and go within minutes, where
  `predict_linear`'s extrapolation can reach the trigger before the band does.
The series is what the predictive alert pages on, the fullest instance (`kv_usage_max`), at the 15 s step; the
model is the one the service runs (`infercast.predictors.deployed.service_forecaster`: the shipped LSTM, online band,
calendar prior; the bursty runs have no calendar, so the onset does not change their forecasts).

What the alert reads (`ALARMS`): `band`, the published upper band at the horizon (the alert today); the ensembles an
SRE would write, adding Prometheus' own `predict_linear(usage[15m], 300)` of the same series (its point value, what
the one-line rule compares): `band or linear`, each through the `for:` and hysteresis on its own and a page when
either fires (two alert expressions); `max(band, linear)`, the higher of the two through one `for:` and hysteresis
(one expression, either over the trigger counting toward the same `for:`); and `band or linear or kalman`, the
Kalman baseline's upper band as a third expression.

Rule (written down before any bursty run was scored): among the settings with
1. no page on the calm runs,
2. at most `MAX_FALSE_PER_HOUR` false-alarm episodes per hour over all runs (calm, sale and bursty together), and
3. the first crossing of every sale paged ahead (the collapse that follows crosses again and again; those rebounds
   count in the event recall),
the one that pages the most crossings over all choosing runs (the event recall over the sale runs' crossings,
rebounds included, and every crossing of the bursty runs: the bursty runs have no single crossing that matters
more than the others, so their recall is what "every sale's first crossing" becomes there), then the longest median
lead (the median over the runs of each run's median lead); ties go to the simpler alarm (fewer expressions,
`ALARMS` order), then the shorter persistence, then the smaller hysteresis, then the earlier onset.  When no setting
meets 1-3, nothing changes: the choice is the setting deployed today (`deployed_setting`), marked as not meeting
the rule.  Each row also carries the lead share (`infercast.predictors.scoring`) and the bursty runs' own recall and
false alarms, for the reader: they choose nothing.  Prints every candidate; writes docs/results/alarm-tuning.json, and
the docs render it (bench/results.py, part `choice`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import numpy as np

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent
SURGE_SEEDS = (700, 701, 702, 703)
CALM_SEEDS = (710, 711)
FOR_SECONDS = (0, 15, 30, 45, 60, 90)
HYSTERESIS = (0.0, 0.03, 0.05, 0.08)
ONSET_SECONDS = (0, 30, 60, 90, 120)
MAX_FALSE_PER_HOUR = 1.0
#: What the alert reads, simplest first (see the module docstring).
ALARMS = ("band", "max(band, linear)", "band or linear", "band or linear or kalman")
#: Prometheus' `predict_linear` range in the ensembles (the one-line rule a Prometheus user writes)
LINEAR_RANGE_S = 900.0


def deployed_setting() -> dict:
    """What `infercast.config` deploys (its defaults; the fleet files leave them unset): the choice when no setting
    meets the rule, and shown beside the rule's choice in the docs."""
    from infercast.config import PredictorConfig, Thresholds

    t, pc = Thresholds(), PredictorConfig()
    return {
        "alarm": "band",  # the generated alert reads the forecast's band alone (alertrules/rules.py)
        "for_seconds": round(t.kv_forecast_for_seconds),
        "hysteresis": t.kv_forecast_hysteresis,
        "onset_seconds": round(pc.event_onset_seconds),
    }


#: ServeGen sources of the bursty runs (under the traces folder) and how many of their hours each gives.
BURSTY_SOURCES = ("servegen/data/reason/deepseek-r1", "servegen/data/multimodal/mm-image")
HOURS_PER_SOURCE = 2
#: The shaped runs (`shaped_trace`, replayed through the twin): shape -> arrival seeds, and their base rate and length.
SHAPES = {"ramp": (750, 751), "onoff": (752, 753)}
BASE_RPS = 20.0
SHAPED_SECONDS = 3600.0
#: Hours (start, end) s no choosing run may overlap, per source: the forecast bench's scored hour and the LSTM's
#: training, validation and calibration slices (docs/forecasting.md, "The protocol"; predictors/models/lstm_kv.json).
EXCLUDED_HOURS = {
    "servegen/data/reason/deepseek-r1": ((78000.0, 81600.0), (19200.0, 22800.0)),
    "servegen/data/multimodal/mm-image": ((53400.0, 57000.0), (15000.0, 18600.0), (21000.0, 24600.0)),
}


def choosing_fleet(seed: int, calm: bool):
    """The flash-sale fleet of a choosing run with arrival seed `seed`: as in the fleet file, or, `calm`, its regular
    stream alone (no flash-sale customer, no calendar, no quota lane)."""
    from infercast.config import load_config

    cfg = load_config(ROOT / "examples" / "flash-sale.yaml")
    sc = cfg.scenario.model_copy(update={"seed": seed, **({"streams": ()} if calm else {})})
    update = {"scenario": sc}
    if calm:
        update |= {"events": (), "protections": cfg.protections.model_copy(update={"quota_lanes": {}})}
    return cfg.model_copy(update=update)


def cached(cache: Path | None, key: str, build: Callable[[], T]) -> T:
    """`build()`, kept in `cache/key` and read from there the next time (a replay takes minutes; `--cache`)."""
    import pickle

    if cache is not None and (cache / key).exists():
        return pickle.loads((cache / key).read_bytes())
    out = build()
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / key).write_bytes(pickle.dumps(out))
    return out


def _series(seed: int, calm: bool, cache: Path | None = None):
    def build():
        import numpy as np

        from infercast.predictors.base import History
        from infercast.simulator.twin.run import run_scenario

        cfg = choosing_fleet(seed, calm)
        ts = run_scenario(cfg, "none", seed=seed, step_seconds=15.0).timeseries
        df = ts[ts["pool"] == "v4-main"].sort_values("t")
        feats = {c: df[c].to_numpy(dtype=float) for c in ("rps", "long_share", "running", "waiting", "fragmentation")}
        h = History(df["t"].to_numpy(dtype=float), df["kv_usage_max"].to_numpy(dtype=float), feats, f"seed{seed}")
        return (h, tuple(cfg.events), float(np.nanmax(h.y)))

    return cached(cache, f"{seed}.pkl", build)


def bursty_hours(t, rates, excluded, n: int) -> list[float]:
    """Starts of the `n` busiest whole hours of a ServeGen source (600 s rates `rates` at times `t`, the hour's mean
    as `infercast.simulator.replay.evaluate` ranks them) that overlap no `excluded` (start, end) and no hour picked
    before."""
    import numpy as np

    hourly = np.convolve(np.nan_to_num(np.asarray(rates, float)), np.ones(6) / 6, mode="valid")
    picked: list[float] = []
    for i in np.argsort(-hourly, kind="stable"):
        start = float(t[i])
        taken = [*excluded, *((p, p + 3600.0) for p in picked)]
        if all(start + 3600.0 <= a or start >= b for a, b in taken):
            picked.append(start)
        if len(picked) == n:
            break
    return picked


def _trace_series(path: Path, start: float, cache: Path | None = None):
    """One ServeGen hour replayed on a sized fleet, as `infercast.simulator.replay.evaluate` builds the scored
    series."""

    def build():
        import numpy as np

        from infercast.simulator.replay.evaluate import BacktestOptions, load_series

        data = load_series(str(path), BacktestOptions(series="kv", start=start, end=start + 3600.0))
        return (data.history, (), float(np.nanmax(data.history.y)))

    return cached(cache, f"{path.parent.name}-{path.name}-{start:g}.pkl", build)


def bursty_runs(traces: Path, cache: Path | None = None) -> list[tuple[str, str, object, tuple, float]]:
    """The ServeGen bursty choosing runs: ("bursty", "MODEL@START", history, events, peak) per picked hour."""
    from infercast.simulator.replay.traces import servegen_rates

    runs = []
    for src in BURSTY_SOURCES:
        t, r = servegen_rates(traces / src)
        for start in bursty_hours(t, r, EXCLUDED_HOURS[src], HOURS_PER_SOURCE):
            name = f"{src.rsplit('/', 1)[-1]}@{start:g}"
            runs.append(("bursty", name, *_trace_series(traces / src, start, cache)))
    return runs


def shaped_rate(shape: str, t) -> np.ndarray:
    """Request rate (req/s) of a `SHAPES` run at times `t` (s): the base rate `BASE_RPS` with either a ramp that
    doubles it or on/off bursts that double it (module docstring: the parameters and why)."""
    import numpy as np

    t = np.asarray(t, float)
    if shape == "ramp":
        # calm 15 min, a linear ramp to twice the rate over 20 min, 10 min held, then back to the base at once
        up = np.clip((t - 900.0) / 1200.0, 0.0, 1.0)
        return BASE_RPS * np.where(t < 2700.0, 1.0 + up, 1.0)
    if shape == "onoff":
        # a client at the base rate on for 2 minutes every 10 (a scheduled batch job), after 10 calm minutes
        on = (t >= 600.0) & (((t - 600.0) % 600.0) < 120.0)
        return BASE_RPS * np.where(on, 2.0, 1.0)
    raise ValueError(f"unknown shape {shape!r}")


def shaped_trace(shape: str, seed: int):
    """An hour of `shape`'s traffic as a request trace: a Poisson process at `shaped_rate` (thinned from its peak)
    with the flash-sale fleet's lengths (its scenario's length mix, 15% long prompts)."""
    import numpy as np

    from infercast.config import load_config
    from infercast.simulator.replay.traces import Trace
    from infercast.simulator.twin.traffic import sample_lengths

    rng = np.random.default_rng(seed)
    peak = 2.0 * BASE_RPS
    n = rng.poisson(peak * SHAPED_SECONDS)
    t = np.sort(rng.uniform(0.0, SHAPED_SECONDS, n))
    t = t[rng.uniform(0.0, peak, n) < shaped_rate(shape, t)]
    lengths = load_config(ROOT / "examples" / "flash-sale.yaml").scenario.lengths
    prompt, out = sample_lengths(len(t), 0.15, lengths, rng)
    return Trace(f"{shape}-{seed}", "synthetic", t, prompt, out, SHAPED_SECONDS)


def _shaped_series(shape: str, seed: int, cache: Path | None = None):
    """A `SHAPES` run replayed on a fleet sized as `infercast.simulator.replay.evaluate` sizes a trace (`sized_fleet`):
    the series of the pool with the highest peak, its fullest instance."""

    def build():
        import numpy as np

        from infercast.config import load_config
        from infercast.simulator.replay.evaluate import DEFAULT_FLEET, _pool_history
        from infercast.simulator.replay.sizing import sized_fleet

        trace = shaped_trace(shape, seed)
        _, res, _ = sized_fleet(trace, load_config(DEFAULT_FLEET), 15.0)
        h, _ = _pool_history(res.timeseries, trace.name, "max")
        return (h, (), float(np.nanmax(h.y)))

    return cached(cache, f"{shape}-{seed}.pkl", build)


def _forecasts(h, events, onset: float):
    from infercast.config import load_config
    from infercast.predictors import registry
    from infercast.predictors.backtest import run_backtest
    from infercast.predictors.deployed import service_forecaster

    pc = load_config(ROOT / "examples" / "flash-sale.yaml").predictor.model_copy(update={"event_onset_seconds": onset})
    lstm, note = registry.load_lstm()
    if lstm is None:
        raise SystemExit(note)
    model = service_forecaster("kv", pc, lstm=lstm, events=events)
    run = run_backtest(h, [model], 300.0, warmup_s=300.0, refit_every_s=1e12)[model.name]
    return run


def _baseline_signals(h, origins):
    """What the ensembles add, per origin: `predict_linear(usage[15m], 300)` (the point value, from the samples at
    or before the origin) and the Kalman baseline's upper band at 300 s (its own backtest, same origins)."""
    import numpy as np

    from infercast.predictors import registry
    from infercast.predictors.backtest import run_backtest
    from infercast.predictors.linear import predict_linear

    linear = np.array(
        [predict_linear(h.t, h.y, float(o), np.array([300.0]), LINEAR_RANGE_S)[0] for o in origins], float
    )
    kal = run_backtest(h, [registry.make("kalman", "kv")], 300.0, warmup_s=300.0, refit_every_s=1e12)["kalman"]
    by_origin = {o: f.yhat_upper[-1] for o, f in zip(kal.origins, kal.forecasts, strict=True)}
    kalman = np.array([by_origin.get(float(o), np.nan) for o in origins], float)
    return {"linear": linear, "kalman": kalman}


def _highest_under(signal, h, origins) -> float | None:
    """The highest value of `signal` at the origins where the series is under the trigger (0.75)."""
    import numpy as np

    o = np.asarray(origins, float)
    under = np.interp(o, h.t, h.y) < 0.75
    vals = np.asarray(signal, float)[under]
    vals = vals[np.isfinite(vals)]
    return round(float(vals.max()), 3) if len(vals) else None


def _linear_alone(linear, band, h, origins) -> dict:
    """At the origins under the trigger: how many have `predict_linear` at or over it, and at how many of those the
    band at the horizon is under it (the only origins where `band or linear` can page and the band cannot)."""
    import numpy as np

    o = np.asarray(origins, float)
    under = np.interp(o, h.t, h.y) < 0.75
    lin = under & (np.nan_to_num(np.asarray(linear, float), nan=-np.inf) >= 0.75)
    alone = lin & ~(np.nan_to_num(np.asarray(band, float), nan=-np.inf) >= 0.75)
    return {"origins_under": int(under.sum()), "linear_over": int(lin.sum()), "band_under_there": int(alone.sum())}


def _fires(policy, alarm: str, band, extra, contiguous):
    """Firing flags of the alert reading `alarm` (one of `ALARMS`) through `policy`."""
    import numpy as np

    if alarm == "band":
        return policy.run(band, contiguous)
    if alarm == "max(band, linear)":
        return policy.run(np.fmax(band, extra["linear"]), contiguous)
    parts = ["band", "linear", "kalman"] if alarm.endswith("kalman") else ["band", "linear"]
    signals = {"band": band, **extra}
    return np.logical_or.reduce([policy.run(signals[p], contiguous) for p in parts])


def _score_setting(policy, alarm: str, runs, fcs, extras) -> dict:
    """Totals of one setting (an `AlarmPolicy` and what the alert reads) over the choosing runs."""
    import numpy as np

    from infercast.predictors.scoring import breach_scores, breach_starts

    tot = {
        "false_episodes": 0,
        "calm_false_episodes": 0,
        "hours": 0.0,
        "breaches": 0,
        "detected": 0,
        "leads": [],
        "shares": [],
        "first_paged": 0,
        "surges": 0,
        "bursty": {"false_episodes": 0, "hours": 0.0, "breaches": 0, "detected": 0},
    }
    for kind, name, h, _, _ in runs:
        run = fcs[name]
        o = np.asarray(run.origins)
        at_h = np.array([f.yhat_upper[-1] for f in run.forecasts])
        contiguous = np.concatenate([[True], np.diff(o) <= 15.0 * 1.5])
        fired = _fires(policy, alarm, at_h, extras[name], contiguous)
        # the firing flags as a band that is over the trigger exactly when the alert fires: breach_scores
        # without a policy then scores the alert as it fires
        b = breach_scores(h.t, h.y, o, np.where(fired, 1.0, 0.0), 300.0, 0.75)
        hours = (o[-1] - o[0] + 15.0) / 3600
        tot["false_episodes"] += b["false_alarm_episodes"]
        if kind == "calm":
            tot["calm_false_episodes"] += b["false_alarm_episodes"]
        if kind == "bursty":
            bt = tot["bursty"]
            bt["false_episodes"] += b["false_alarm_episodes"]
            bt["hours"] += hours
            bt["breaches"] += b["breaches"]
            bt["detected"] += b["detected"]
        tot["hours"] += hours
        tot["breaches"] += b["breaches"]
        tot["detected"] += b["detected"]
        if b["median_lead_seconds"] is not None:
            tot["leads"].append(b["median_lead_seconds"])
        if b["lead_share"] is not None:
            tot["shares"].append((b["lead_share"], b["breaches"]))
        if kind == "surge":  # the first crossing of the sale: is it paged ahead (not the collapse's rebounds)?
            tot["surges"] += 1
            y0 = np.interp(o, h.t, h.y)
            c = breach_starts(h.t, h.y, 0.75)[0]
            tot["first_paged"] += bool((fired & (y0 < 0.75))[(o >= c - 300.0) & (o < c)].any())
    return tot


def _row(alarm: str, for_s: int, hyst: float, onset: float, tot: dict) -> dict:
    import numpy as np

    n_share = sum(n for _, n in tot["shares"])
    bt = tot["bursty"]
    return {
        "alarm": alarm,
        "for_seconds": for_s,
        "hysteresis": hyst,
        "onset_seconds": onset,
        "false_alarms_per_hour": round(tot["false_episodes"] / tot["hours"], 3),
        "calm_false_alarms": tot["calm_false_episodes"],
        "detected": tot["detected"],
        "event_recall": tot["detected"] / tot["breaches"] if tot["breaches"] else None,
        "first_crossings_paged": f"{tot['first_paged']}/{tot['surges']}",
        "median_lead_seconds": float(np.median(tot["leads"])) if tot["leads"] else None,
        "lead_share": round(sum(x * n for x, n in tot["shares"]) / n_share, 3) if n_share else None,
        "breaches": tot["breaches"],
        # the bursty runs alone, for the reader (the rule reads the totals above)
        "bursty_detected": f"{bt['detected']}/{bt['breaches']}",
        "bursty_false_alarms_per_hour": round(bt["false_episodes"] / bt["hours"], 3) if bt["hours"] else None,
    }


def _meets(r: dict, surges: int) -> bool:
    """Conditions 1-3 of the rule (module docstring)."""
    return (
        r["calm_false_alarms"] == 0
        and r["false_alarms_per_hour"] <= MAX_FALSE_PER_HOUR
        and r["first_crossings_paged"] == f"{surges}/{surges}"
    )


def _rank(r: dict) -> tuple:
    """The rule's order among the settings that meet it: the most crossings paged, the longest median lead, then the
    simpler alarm, shorter persistence, smaller hysteresis, earlier onset (max wins)."""
    return (
        r["detected"],
        r["median_lead_seconds"] or 0,
        -ALARMS.index(r["alarm"]),
        -r["for_seconds"],
        -r["hysteresis"],
        -r["onset_seconds"],
    )


def _neg(r: dict) -> tuple:
    """`_rank` reversed, for a `min`."""
    return tuple(-x for x in _rank(r))


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    from infercast.predictors.alarm import AlarmPolicy

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, default=None, help="also write the result here (default: publish)")
    p.add_argument("--cache", type=Path, default=None, help="keep the twin runs here (a rerun skips the twin)")
    p.add_argument("--traces", type=Path, default=Path("/work/shared/traces"), help="folder holding the traces")
    args = p.parse_args(argv)
    deployed = deployed_setting()
    t0 = time.perf_counter()
    runs = []
    for seed in SURGE_SEEDS:
        runs.append(("surge", f"surge-{seed}", *_series(seed, calm=False, cache=args.cache)))
    for seed in CALM_SEEDS:
        runs.append(("calm", f"calm-{seed}", *_series(seed, calm=True, cache=args.cache)))
    runs += bursty_runs(args.traces, args.cache)
    for shape, seeds in SHAPES.items():
        runs += [("bursty", f"{shape}-{seed}", *_shaped_series(shape, seed, args.cache)) for seed in seeds]
    print(f"# twin runs: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    extras: dict = {}
    linear_alone: dict = {}
    rows = []
    fcs: dict = {}
    for onset in ONSET_SECONDS:
        for _, name, h, ev, _ in runs:
            if ev or name not in fcs:  # without a calendar the onset changes nothing: forecast once
                fcs[name] = _forecasts(h, ev, onset)
            if name not in extras:
                extras[name] = _baseline_signals(h, np.asarray(fcs[name].origins))
            if onset == deployed["onset_seconds"]:
                band = [f.yhat_upper[-1] for f in fcs[name].forecasts]
                linear_alone[name] = _linear_alone(extras[name]["linear"], band, h, fcs[name].origins)
        for alarm, for_s, hyst in itertools.product(ALARMS, FOR_SECONDS, HYSTERESIS):
            policy = AlarmPolicy(0.75, 1 + round(for_s / 15.0), hyst)
            row = _row(alarm, for_s, hyst, onset, _score_setting(policy, alarm, runs, fcs, extras))
            rows.append(row)
            print(json.dumps(row), flush=True)
    ok = [r for r in rows if _meets(r, len(SURGE_SEEDS))]
    if ok:
        best = {**max(ok, key=_rank), "rule_met": True}
    else:  # nothing meets the rule: what is deployed stays
        best = {**next(r for r in rows if all(r[k] == v for k, v in deployed.items())), "rule_met": False}
    # the best setting of each alarm (the rule within that alarm), so the docs can say what each one cost; where
    # none meets the rule, the closest: the fewest false alarms/h among those that meet conditions 1 and 3
    best_of = {}
    for alarm in ALARMS:
        mine = [r for r in ok if r["alarm"] == alarm]
        near = [
            r
            for r in rows
            if r["alarm"] == alarm
            and r["calm_false_alarms"] == 0
            and r["first_crossings_paged"] == f"{len(SURGE_SEEDS)}/{len(SURGE_SEEDS)}"
        ]
        best_of[alarm] = {
            "met_by": len(mine),
            "best": max(mine, key=_rank) if mine else None,
            "closest": None if mine or not near else min(near, key=lambda r: (r["false_alarms_per_hour"], *_neg(r))),
        }
    result = {
        "data": {
            "surge_seeds": list(SURGE_SEEDS),
            "calm_seeds": list(CALM_SEEDS),
            "bursty": [name for kind, name, *_ in runs if kind == "bursty"],
            "peaks": {name: round(pk, 3) for _, name, _, _, pk in runs},
            "series": "the fullest instance (kv_usage_max) at the 15 s step: v4-main of the flash-sale fleet under "
            "--control none (sale and calm runs); the pool with the highest peak of the sized fleet (bursty runs)",
            # how close the ensembles' predict_linear came: its highest value at an origin under the trigger
            "linear_highest_under_trigger": {
                name: _highest_under(extras[name]["linear"], h, fcs[name].origins) for _, name, h, _, _ in runs
            },
            # where the ensembles could differ from the band alone (the band at the deployed onset)
            "linear_over_where_band_under": linear_alone,
        },
        "rule": (
            f"no page on the calm runs, false alarms <= {MAX_FALSE_PER_HOUR}/h over all runs and every sale's first "
            "crossing paged ahead, then the most crossings paged over all runs (sale and bursty), then the longest "
            "median lead, then the simpler alarm"
        ),
        "met_by": len(ok),
        "by_alarm": best_of,
        "candidates": rows,
        "choice": best,
        # what infercast.config deploys: the docs show it beside the rule's choice where they differ
        "deployed": deployed,
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps({"choice": best, "met_by": len(ok)}))
    sys.path.insert(0, str(ROOT))
    from bench import results

    results.publish_or_write("alarm-tuning", result, TABLES, args.json)
    return 0


def render_choice(result: dict) -> str:
    c = result["choice"]
    d = result["data"]
    lead = c["median_lead_seconds"]
    bursty = d.get("bursty") or []
    met = c.get("rule_met", True)
    dep = result.get("deployed") or c
    settings = (
        ("what the alert reads", "alarm", ALARMS),
        ("`thresholds.kv_forecast_for_seconds`", "for_seconds", FOR_SECONDS),
        ("`thresholds.kv_forecast_hysteresis`", "hysteresis", HYSTERESIS),
        ("`predictor.event_onset_seconds`", "onset_seconds", ONSET_SECONDS),
    )
    rows = ["| setting | the rule's choice | deployed (infercast/config/predictor.py) | tried |", "|---|---:|---:|---|"]
    rows += [f"| {label} | {c[k]} | {dep[k]} | {', '.join(map(str, tried))} |" for label, k, tried in settings]
    rows.append("")
    rows.append(
        f"On the choosing runs (sale seeds {', '.join(map(str, d['surge_seeds']))}, calm seeds "
        f"{', '.join(map(str, d['calm_seeds']))}"
        + (f", bursty runs {', '.join(bursty)}" if bursty else "")
        + f"): {c['false_alarms_per_hour']:.2f} false-alarm episodes per hour, first crossings of the sales paged "
        f"{c['first_crossings_paged']}, event recall {c['event_recall']:.2f} over {c['breaches']} crossings "
        + (
            f"(bursty runs: {c['bursty_detected']} paged, {c['bursty_false_alarms_per_hour']:.2f} false alarms/h)"
            if bursty
            else "(rebounds included)"
        )
        + f", median lead {'-' if lead is None else f'{lead:.0f} s'}; {result['met_by']} of "
        f"{len(result['candidates'])} settings met the rule ({result['rule']})"
        + ("." if met else "; none did, so the setting deployed before stays.")
        + (
            ""
            if all(c[k] == dep[k] for _, k, _ in settings)
            else " The rule's choice is not what is deployed: docs/forecasting.md says why."
        )
    )
    if result.get("by_alarm"):
        rows += [
            "",
            "| what the alert reads | settings meeting the rule | its best: `for:`, hysteresis, onset | false alarms/h "
            "| first crossings paged | crossings paged (all runs) | bursty runs: paged, false alarms/h | median lead "
            "| lead share |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
        for alarm, got in result["by_alarm"].items():
            b = got["best"] or got.get("closest")
            if b is None:
                rows.append(f"| {alarm} | 0 | - | - | - | - | - | - | - |")
                continue
            ml = b["median_lead_seconds"]
            bfa = b.get("bursty_false_alarms_per_hour")
            which = "" if got["best"] else " (closest: fewest false alarms/h)"
            rows.append(
                f"| {alarm} | {got['met_by']} | {b['for_seconds']} s, {b['hysteresis']}, {b['onset_seconds']} s{which} "
                f"| {b['false_alarms_per_hour']:.2f} | {b['first_crossings_paged']} "
                f"| {b.get('detected', '-')}/{b['breaches']} ({b['event_recall']:.2f}) "
                f"| {b.get('bursty_detected', '-')}, {'-' if bfa is None else f'{bfa:.2f}'} "
                f"| {'-' if ml is None else f'{ml:.0f} s'} | {'-' if b['lead_share'] is None else b['lead_share']} |"
            )
    return "\n".join(rows)


TABLES = {"choice": render_choice}


if __name__ == "__main__":
    sys.exit(main())
