"""Traffic at the service's step (15 s, 300 s ahead) on the traffic protocol's training runs: what chose the service's
traffic pipeline, and the calendar's share of it (the ablation).  Part of `bench/forecast.py` (section 3c).

The runs (none is scored by the forecast bench; docs/forecasting.md, "Traffic"):
- the flash-sale fleet under `--control none` with arrival seeds 700-703 (the offered load, all streams: the calendar
  announces the sale at 12,000 req/s), and the calm fleet (regular traffic only, no calendar) with seeds 710, 711;
- the four synthetic hours of `bench/tune_alarm.py` (a ramp doubling the rate over 20 minutes, seeds 750, 751; a
  client doubling it for 2 minutes every 10, seeds 752, 753): their request rate at 15 s, Poisson arrivals;
- real-trace hours at the service's own step (issue 37, item 5): ServeGen `language/m-large`, every client together
  (the load of one pool serving the model), replayed at request level (each client's arrivals drawn from its own
  window rates and inter-arrival law, `infercast.simulator.replay.traces`), the hours 09:00-10:00 and 21:00-22:00 of
  the training days 1-4 of the 600 s protocol (`SERVEGEN_HOURS`), their request rate at 15 s.  Chosen before any was
  scored: the days are the ones the 600 s protocol already trains on, the two hours a morning and an evening of each,
  fixed by the clock, not by what the traffic does in them.  They need the full traces (`--traces`, which
  `bench/forecast.py` always passes); `section()` called without a traces folder leaves them out and says so.

The models: the four baselines; the service's pipeline as deployed (`service`: the online combination of
`infercast.predictors.combined`, the calendar's announced rates, its band calibrated online); two ablations, the same
pipeline without the announced rates (`service_without_expected_rps`) and without any calendar
(`service_without_calendar`, which is the inner model alone); and the candidates for the inner model: Prophet anchored
(`prophet_anchored`, the service's traffic model until this table chose the combination over it) and the local-level
model alone (`infercast.predictors.local_level`).

The rules, written before any of these runs was scored:
- **the announced rates ship** when the service with them has an error no higher than without them on every run, and
  lower than the best baseline's on every run whose calendar announces a rate;
- **the inner model changes** only for a candidate whose mean and worst error ratio to the best baseline (over these
  runs and the ServeGen training days of `traffic_section`) are both below the current inner model's.  Run with
  Prophet anchored as the inner model and the combination as a candidate, this rule chose the combination
  (docs/forecasting.md, "Traffic"); each rerun checks the choice again.
"""

from __future__ import annotations

import dataclasses
import math
import time

SALE_SEEDS = (700, 701, 702, 703)
CALM_SEEDS = (710, 711)
HORIZON_S = 300.0
STEP_S = 15.0
#: as `infercast backtest` scores the scored rps series (its defaults): the same origins and refits
WARMUP_S, REFIT_S = 300.0, 1800.0
BASELINES = ("last_value", "predict_linear", "holt_winters", "kalman")
SERVICE, ABLATION, NO_CALENDAR = "service", "service_without_expected_rps", "service_without_calendar"
CANDIDATES = ("prophet_anchored", "local_level")
#: the real-trace training hours: (day, hour of the day), days 1-4 being the 600 s protocol's training days
SERVEGEN_HOURS = tuple((day, hour) for day in (1, 2, 3, 4) for hour in (9, 21))
SERVEGEN_TRACE = "servegen/data/language/m-large"


class Renamed:
    """A forecaster under another name in a table (the service's pipelines name themselves after their model)."""

    def __init__(self, inner, name: str) -> None:
        self.inner, self.name = inner, name

    def fit(self, histories):
        self.inner.fit(histories)
        return self

    def forecast(self, history, horizon_s):
        return self.inner.forecast(history, horizon_s)


def _twin_run(seed: int, calm: bool):
    """The flash-sale fleet's offered load (req/s, all streams) at 15 s, and its calendar (none for a calm run): the
    alert tuning's choosing fleet (`tune_alarm.choosing_fleet`)."""
    import tune_alarm

    from infercast.predictors.base import History
    from infercast.simulator.twin.run import run_scenario

    cfg = tune_alarm.choosing_fleet(seed, calm)
    ts = run_scenario(cfg, "none", seed=seed, step_seconds=STEP_S).timeseries
    agg = ts.groupby("t")["offered_rps"].max()
    name = f"{'calm' if calm else 'sale'}-{seed}"
    return History(agg.index.to_numpy(dtype=float), agg.to_numpy(dtype=float), {}, name), tuple(cfg.events)


def _shaped_run(shape: str, seed: int):
    import tune_alarm

    from infercast.predictors.base import History
    from infercast.simulator.replay.traces import rate_series

    t, r = rate_series(tune_alarm.shaped_trace(shape, seed), STEP_S)
    return History(t.astype(float), r, {}, f"{shape}-{seed}"), ()


def _servegen_hour(root, day: int, hour: int):
    """One hour of every ServeGen m-large client replayed at request level, its request rate at 15 s (no calendar:
    ServeGen has none).  The arrivals' seed is fixed by the hour, so a rerun replays the same requests."""
    from pathlib import Path

    from infercast.predictors.base import History
    from infercast.simulator.replay.traces import load_trace, rate_series

    start = day * 86400.0 + hour * 3600.0
    trace = load_trace(Path(root) / SERVEGEN_TRACE, seed=day * 24 + hour, start_s=start, end_s=start + 3600.0)
    t, r = rate_series(trace, STEP_S)
    return History(t.astype(float), r, {}, f"servegen-d{day}-{hour:02d}h"), ()


def training_runs(root=None) -> dict[str, tuple]:
    """Name -> (history, events) for every training run; the ServeGen hours only with `root` (the full traces)."""
    import tune_alarm

    runs = {}
    if root is None:
        print("# traffic training runs: no traces folder, the ServeGen hours left out")
    else:
        for day, hour in SERVEGEN_HOURS:
            h, events = _servegen_hour(root, day, hour)
            runs[h.series_id] = (h, events)
    for seed in SALE_SEEDS:
        runs[f"sale-{seed}"] = _twin_run(seed, calm=False)
    for seed in CALM_SEEDS:
        runs[f"calm-{seed}"] = _twin_run(seed, calm=True)
    for shape, seeds in tune_alarm.SHAPES.items():
        for seed in seeds:
            runs[f"{shape}-{seed}"] = _shaped_run(shape, seed)
    return runs


def models(events: tuple) -> list:
    """Every model of the section, fresh (the service's pipelines hold online state per series)."""
    from infercast.config import PredictorConfig
    from infercast.predictors import registry
    from infercast.predictors.deployed import service_forecaster

    cfg = PredictorConfig(horizon_seconds=HORIZON_S, step_seconds=STEP_S)
    out = [registry.make(n, "rps") for n in BASELINES]
    service = Renamed(service_forecaster("rps", cfg, events=events), SERVICE)
    bare = tuple(dataclasses.replace(e, expected_rps=None) for e in events)
    ablation = Renamed(service_forecaster("rps", cfg, events=bare), ABLATION)
    blind = Renamed(service_forecaster("rps", cfg, events=()), NO_CALENDAR)
    return [*out, service, ablation, blind, *(registry.make(n, "rps") for n in CANDIDATES)]


def section(servegen_train: dict | None = None, root=None) -> dict:
    """Every model on every training run: mae, and its ratio to the run's best baseline; then the two rules.
    `servegen_train` (name -> mae on the ServeGen training days, from `traffic_section`) joins the inner-model rule;
    `root` (the traces' folder) adds the ServeGen hours at 15 s."""
    from infercast.predictors.backtest import run_backtest, score_runs
    from infercast.predictors.prophet_model import event_windows

    t0 = time.perf_counter()
    per_run: dict[str, dict] = {}
    for name, (h, events) in training_runs(root).items():
        windows = tuple(event_windows(events))
        runs = run_backtest(h, models(windows), HORIZON_S, warmup_s=WARMUP_S, refit_every_s=REFIT_S)
        mae = {n: s.get("mae") for n, s in score_runs(h, runs, HORIZON_S).items()}
        best = min(BASELINES, key=lambda n: mae[n] if mae[n] is not None else math.inf)
        per_run[name] = {
            "announced": any(w.expected_rps is not None for w in windows),
            "best_baseline": best,
            "mae": {n: _r(v) for n, v in mae.items()},
            "ratio": {n: _r(v / mae[best]) if v is not None and mae[best] else None for n, v in mae.items()},
        }
        print(f"# traffic training run {name}: " + ", ".join(f"{n} {v}" for n, v in per_run[name]["ratio"].items()))
    return {**verdicts(per_run, servegen_train), "wall_seconds": round(time.perf_counter() - t0, 1)}


def verdicts(per_run: dict[str, dict], servegen_train: dict | None = None) -> dict:
    """The two rules of the module docstring, on the training runs' scores (`section`'s `runs`): whether the announced
    rates ship, each model's mean and worst ratio, and the models that beat the service's inner model on both."""
    calendar_ships = all(  # the announced rates' rule (module docstring)
        r["mae"][SERVICE] <= r["mae"][ABLATION] and (not r["announced"] or r["ratio"][SERVICE] < 1.0)
        for r in per_run.values()
    )
    ratios = {
        n: [r["ratio"][n] for r in per_run.values()] for n in (*BASELINES, SERVICE, ABLATION, NO_CALENDAR, *CANDIDATES)
    }
    if servegen_train:  # ServeGen has no calendar: the service with and without it are the same model there
        sg_best = min(servegen_train[n] for n in BASELINES)
        keys = {
            SERVICE: "service",
            ABLATION: "service",
            NO_CALENDAR: "service",
            **{n: n for n in (*CANDIDATES, *BASELINES)},
        }
        for n, key in keys.items():
            if servegen_train.get(key) is not None:
                ratios[n].append(servegen_train[key] / sg_best)
    summary = {n: {"mean": _r(sum(v) / len(v)), "worst": _r(max(v)), "n": len(v)} for n, v in ratios.items()}
    inner = summary[NO_CALENDAR]
    better = [
        c
        for c in (*CANDIDATES, *BASELINES)
        if summary[c]["n"] == inner["n"] and summary[c]["mean"] < inner["mean"] and summary[c]["worst"] < inner["worst"]
    ]
    return {
        "runs": per_run,
        "summary": summary,
        "servegen_train_included": bool(servegen_train),
        "expected_rps_ships": calendar_ships,
        "inner_better": better,  # candidates (or baselines) that beat the service's inner model on both counts
    }


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(float(v), nd)


def render(result: dict) -> str:
    tr = result.get("traffic_runs", result)
    runs = tr["runs"]
    names = [*BASELINES, SERVICE, ABLATION, NO_CALENDAR, *CANDIDATES]
    head = "| run | best baseline (mae) | " + " | ".join(names) + " |"
    out = [head, "|---|---|" + "---:|" * len(names)]
    for run, r in runs.items():
        label = run + (" (announced)" if r["announced"] else "")
        cells = " | ".join("-" if r["ratio"].get(n) is None else f"{r['ratio'][n]:.2f}" for n in names)
        out.append(f"| {label} | {r['best_baseline']} ({r['mae'][r['best_baseline']]:.1f}) | {cells} |")
    s = tr["summary"]
    extra = " and the ServeGen training days" if tr["servegen_train_included"] else ""
    out.append(
        f"| mean{extra and ' (with ServeGen days 1-4)'} | | "
        + " | ".join(f"{s[n]['mean']:.2f}" if n in s else "-" for n in names)
        + " |"
    )
    out.append(
        f"| worst{extra and ' (with ServeGen days 1-4)'} | | "
        + " | ".join(f"{s[n]['worst']:.2f}" if n in s else "-" for n in names)
        + " |"
    )
    verdict_cal = (
        "The announced rates ship: with them the service's error is no higher than without on every run, and below "
        "the best baseline's on every announced sale."
        if tr["expected_rps_ships"]
        else "The announced rates do not ship: on some run they raised the error or did not beat the best baseline."
    )
    verdict_inner = (
        f"Beating the service's inner model (the combination, `{NO_CALENDAR}` here) on both the mean and the worst "
        f"ratio{extra}: "
        + ", ".join(f"`{n}`" for n in tr["inner_better"])
        + "; docs/forecasting.md says what was done with it."
        if tr["inner_better"]
        else f"No candidate beats the service's inner model (the combination, `{NO_CALENDAR}` here) on both the mean "
        f"and the worst ratio{extra}, so it stays."
    )
    out.append(
        f"\nError (mae) as a ratio to each run's best baseline, 300 s ahead at 15 s, on the training runs only "
        f"(`bench/traffic_runs.py`). `{SERVICE}` is the service's pipeline as deployed; `{ABLATION}` the same "
        f"without the calendar's announced rates; `{NO_CALENDAR}` without any calendar (the same forecasts, as the "
        f"combination reads no event; Prophet anchored reads them as regressors). {verdict_cal} {verdict_inner}"
    )
    return "\n".join(out)
