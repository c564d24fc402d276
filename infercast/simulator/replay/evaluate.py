"""Score forecasters on a series from a trace or a scenario: the library behind `infercast backtest`
(`infercast.simulator.replay.backtest_cli` parses the flags and prints; the benches call these directly).

`load_series` builds the series (I/O: reads the trace, runs the twin for `kv`); `backtest` runs the pure rolling
origin backtest (`infercast.predictors.backtest`) on it and returns one JSON-ready object; `table` formats that object.
Wherever a threshold is set (always for `kv`), the two degenerate references of `infercast.predictors.reference`,
`always_alarm` and `never_alarm`, are scored beside the models (also with `models=`), so a breach score can be
read against a pager that always pages and one that never does.

Series:
- `rps`: requests per second straight from the trace, per `step` bin (ServeGen: its 600 s windows, so the
  horizon is at least one window there); covariate `long_share`.
- `kv`: the trace replayed through the fleet twin on a fleet sized as an operator sizes one (the trace's median
  load at <= 0.6 KV usage, `infercast.simulator.replay.sizing.sized_fleet`), fixed for the whole replay.  The sizing
  looks at the whole trace, as an operator sizing a fleet would; the forecasters never do.  The series is the KV usage
  of the pool whose peak is highest, with `rps`, `long_share`, `running`, `waiting`, `fragmentation` and
  `alloc_failures_total` of that pool as covariates.  The same replay marks when requests were hurt
  (`infercast.simulator.replay.harm_replay`, rules in `infercast.predictors.harm`), and every model's deployed alert is
  scored as a page for that harm (`harm`), and so is the page built for harm (`infercast.predictors.harm_page`, the row
  `harm_page`: harm scores only).
- `scenario:NAME` runs a scenario of `examples/` (e.g. `scenario:flash-sale`) or a named variant of one
  (`infercast.simulator.twin.variants`: `scenario:calm-day`, `scenario:flash-sale-unannounced`) instead of a trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from infercast.predictors.base import History
from infercast.predictors.reference import references
from infercast.predictors.score_table import aligned
from infercast.predictors.score_table import cell as _fmt
from infercast.predictors.scoring import CALM_SECONDS
from infercast.resources import example_fleet
from infercast.simulator.replay.sizing import sized_fleet

#: The degenerate references (`infercast.predictors.reference`) every report with a threshold scores beside the models.
REFERENCE_NAMES = ("always_alarm", "never_alarm")


DEFAULT_FLEET = example_fleet()
COVARIATES = ("rps", "long_share", "running", "waiting", "fragmentation", "alloc_failures_total")


@dataclass(frozen=True)
class BacktestOptions:
    """What to build and how to score it: the flags of `infercast backtest`, with its defaults."""

    series: str = "kv"  # "kv": KV usage through the twin; "rps": request rate
    horizon: float = 300.0
    step: float = 15.0
    threshold: float | None = None  # None: 0.75 for kv, no breach scores for rps
    warmup: float = 300.0
    refit: float = 1800.0
    config: str | None = None  # the fleet file the twin sizes from (None: examples/flash-sale.yaml)
    start: float | None = None
    end: float | None = None
    models: str | None = None  # comma-separated subset
    lstm: str | None = None  # an LSTM model file (None: the shipped one)
    no_lstm: bool = False
    no_prophet: bool = False
    plot: str | None = None  # a PNG to write
    aggregate: str = "max"  # kv: the pool's fullest instance, or "mean"

    @classmethod
    def from_namespace(cls, ns) -> BacktestOptions:
        """From parsed flags (`infercast backtest`): the attributes this class has, the rest ignored."""
        return cls(**{f.name: getattr(ns, f.name) for f in fields(cls) if hasattr(ns, f.name)})


@dataclass
class SeriesData:
    history: History
    name: str
    series: str
    meta: dict = field(default_factory=dict)
    events: tuple = ()
    harm: list[tuple[float, float]] | None = None  # harm episodes of the replay (kv series only)


#: The twin's column per KV aggregate: the mean over the pool's up instances, or its fullest instance.
KV_COLUMN = {"mean": "kv_usage", "max": "kv_usage_max"}


def _pool_history(ts, name: str, aggregate: str = "max") -> tuple[History, dict]:
    """The KV series (`aggregate` over instances) of the pool with the highest peak, with its covariates, from a
    twin timeseries frame."""
    col = KV_COLUMN[aggregate]
    peaks = ts.groupby("pool")[col].max()
    pool = str(peaks.idxmax())
    df = ts[ts["pool"] == pool].sort_values("t")
    t = df["t"].to_numpy(dtype=float)
    feats = {c: df[c].to_numpy(dtype=float) for c in COVARIATES if c in df.columns}
    h = History(t, df[col].to_numpy(dtype=float), feats, f"{name}/{pool}")
    version = str(df["version"].iloc[0]) if "version" in df.columns else ""
    return h, {
        "pool": pool,
        "version": version,
        "aggregate": aggregate,
        "pool_peaks": {str(k): round(float(v), 4) for k, v in peaks.items()},
    }


def load_series(spec: str, args: BacktestOptions) -> SeriesData:
    """The series to score: `spec` a trace file, a ServeGen directory or `scenario:NAME`."""
    from infercast.config import load_config

    step = float(args.step)
    if spec.startswith("scenario:"):
        from infercast.simulator.replay.harm_replay import replay_scenario
        from infercast.simulator.twin.run import run_scenario
        from infercast.simulator.twin.variants import load_scenario

        cfg = load_scenario(spec.split(":", 1)[1])
        if cfg.scenario is None:
            raise ValueError(f"{spec} has no scenario section")
        harm = None
        if args.series == "kv":
            rep = replay_scenario(cfg, step_seconds=step)
            ts, harm = rep.timeseries, rep.episodes()
        else:
            ts = run_scenario(cfg, step_seconds=step).timeseries
        name = spec
        if args.series == "kv":
            h, meta = _pool_history(ts, name, args.aggregate)
            meta["harm"] = rep.summary()
        else:
            col = "offered_rps" if "offered_rps" in ts.columns else "rps"
            agg = ts.groupby("t")[col].max() if col == "offered_rps" else ts.groupby("t")[col].sum()
            t = agg.index.to_numpy(dtype=float)
            h = History(t, agg.to_numpy(dtype=float), {}, f"{name}/rps")
            meta = {"rps": "offered load" if col == "offered_rps" else "sum over pools of the traffic routed"}
        meta["fleet"] = {p: c.nodes for p, c in cfg.pools.items()}
        return SeriesData(h, name, args.series, meta, tuple(cfg.events), harm)

    from infercast.simulator.replay.traces import (
        detect_format,
        load_trace,
        long_share_series,
        rate_series,
        servegen_rates,
    )

    path = Path(spec)
    fmt = detect_format(path)
    if args.series == "rps" and fmt == "servegen":
        t, r = servegen_rates(path, args.start, args.end)
        return SeriesData(History(t, r, {}, f"{path.name}/rps"), path.name, "rps", {"format": fmt, "step_s": 600.0})
    start, end, note = args.start, args.end, None
    if fmt == "servegen" and args.series == "kv" and start is None and end is None:
        # Days of ServeGen at request level are millions of generated arrivals: replay its busiest hour.
        t, r = servegen_rates(path)
        hourly = np.convolve(np.nan_to_num(r), np.ones(6) / 6, mode="valid")
        start = float(t[int(np.argmax(hourly))])
        end = start + 3600.0
        note = f"ServeGen: replaying its busiest hour, [{start:g}, {end:g}) s"
    trace = load_trace(path, start_s=start, end_s=end)
    if args.series == "rps":
        t, r = rate_series(trace, step)
        _, share = long_share_series(trace, step)
        h = History(t, r, {"rps": r, "long_share": share}, f"{trace.name}/rps")
        return SeriesData(h, trace.name, "rps", {"format": fmt, "requests": len(trace)})
    base = load_config(args.config or DEFAULT_FLEET)
    _, rep, how = sized_fleet(trace, base, step)
    h, meta = _pool_history(rep.timeseries, trace.name, args.aggregate)
    meta.update({"format": fmt, "requests": len(trace), "sizing": how, "harm": how["harm"]})
    if note:
        meta["window"] = note
    return SeriesData(h, trace.name, "kv", meta, harm=rep.episodes())


def backtest(data: SeriesData, args: BacktestOptions, extra_models: Sequence = ()) -> dict:
    """Run and score every model on the series; the JSON object the command prints.  `extra_models` (forecasters,
    e.g. a variant a bench compares) are scored beside the registry's."""
    from infercast.config import load_config
    from infercast.predictors import deployed, registry
    from infercast.predictors.backtest import run_backtest, score_runs
    from infercast.predictors.threads import one_math_thread

    threshold = args.threshold if args.threshold is not None else (0.75 if data.series == "kv" else None)
    lstm = False if args.no_lstm else (args.lstm or True)
    models, notes = registry.models_for(data.series, events=data.events, prophet=not args.no_prophet, lstm=lstm)
    # What the predictor service would run on this series, built as the service builds it (its online band state
    # starts fresh, as after a restart), scored as deployed: `service_model` names it.
    fleet = load_config(args.config or DEFAULT_FLEET)
    lstm_model = next((m for m in models if m.name == "lstm"), None)
    service = deployed.service_forecaster(data.series, fleet.predictor, lstm=lstm_model, events=data.events)
    models.append(service)
    if args.models:
        wanted = [m.strip() for m in args.models.split(",") if m.strip()]
        unknown = set(wanted) - {m.name for m in models} - set(REFERENCE_NAMES)
        if unknown:
            notes.append(f"not available for this series: {', '.join(sorted(unknown))}")
        models = [m for m in models if m.name in wanted]
    models += list(extra_models)
    if threshold is not None:  # the degenerate references are in every report that has breach scores
        models += references(threshold, registry.CLIP[data.series])
    h = data.history
    horizon = max(float(args.horizon), h.step)
    if horizon != args.horizon:
        notes.append(f"horizon raised to one sample step ({h.step:g} s)")
    warmup = max(float(args.warmup), h.step * 2)
    with one_math_thread():  # thousands of tiny fits: a thread pool only waits (infercast.predictors.threads)
        runs = run_backtest(h, models, horizon, warmup_s=warmup, refit_every_s=float(args.refit))
    policy = deployed.alarm_policy(fleet.thresholds, h.step) if threshold is not None else None
    scores = score_runs(h, runs, horizon, threshold, policy, data.harm)
    page = harm_page_scores(h, runs.get(service.name), data.harm)
    if page is not None:
        scores[HARM_PAGE] = page
    result = {
        "trace": data.name,
        "series": data.series,
        "service_model": service.name,
        "horizon_s": horizon,
        "step_s": h.step,
        "threshold": threshold,
        "samples": len(h.t),
        "span_s": float(h.t[-1] - h.t[0]),
        "warmup_s": warmup,
        "refit_s": float(args.refit),
        "meta": data.meta,
        "notes": notes,
        "models": scores,
    }
    if args.plot:
        from infercast.predictors.plot import plot_backtest

        shown = {k: v for k, v in runs.items() if k not in REFERENCE_NAMES}
        plot_backtest(h, shown, horizon, threshold, args.plot, title=f"{data.name} {data.series}")
        result["plot"] = str(args.plot)
    return result


#: The row of the page built for harm (`infercast.predictors.harm_page.CHOSEN` on the deployed forecaster's band).
HARM_PAGE = "harm_page"


def harm_page_scores(h: History, service_run, harm: list[tuple[float, float]] | None) -> dict | None:
    """The page built for harm, scored for harm like every model's alert (`harm`), on the deployed forecaster's band
    and the series' covariates; None without harm marked, without that forecaster's run or without a chosen setting."""
    from infercast.predictors import harm_page
    from infercast.predictors.harm import PageRule, score_page

    if harm is None or service_run is None or not service_run.forecasts or harm_page.CHOSEN is None:
        return None
    origins = np.asarray(service_run.origins, float)
    upper = np.array([f.at_horizon()[2] for f in service_run.forecasts], float)
    contiguous = np.concatenate([[True], np.diff(origins) <= h.step * 1.5])
    flags = harm_page.fire(harm_page.CHOSEN, origins, upper, h.t, h.features, contiguous)
    return {
        "page": harm_page.CHOSEN.label(),
        "on": service_run.name,
        "harm": score_page(origins, flags, harm, PageRule()),
    }


def _calm(b: dict) -> str:
    """`calm_lead` cell: median lead over the crossings after `CALM_SECONDS` under the threshold, and their count."""
    if not b.get("calm_breaches"):
        return "- (0)"
    return f"{_fmt(b.get('calm_median_lead_seconds'), 4)} ({b['calm_breaches']})"


def table(result: dict) -> str:
    """The scores as a fixed-width text table."""
    cols = (
        "model",
        "mae",
        "peak_mae",
        "coverage",
        "pinball",
        "f1",
        "precision",
        "recall",
        "events",
        "lead_s",
        "share",
        "calm_lead",
        "fa/h",
        "fit_s",
        "pred_ms",
    )
    rows = [cols]
    entries: list[tuple[str, dict, dict]] = []
    for name, s in result["models"].items():
        if name == HARM_PAGE:  # a page, not a forecaster: it has harm scores only (the harm table)
            continue
        entries.append((name, s, s.get("breach") or {}))
        if s.get("alarm"):  # the alert as deployed (persistence, hysteresis) on the same forecasts
            entries.append((f"{name} [alert]", {}, s["alarm"]))
    for name, s, b in entries:
        pred = s.get("predict_seconds_per_series")
        rows.append(
            (
                name,
                _fmt(s.get("mae")),
                _fmt(s.get("peak_mae")),
                _fmt(s.get("coverage"), 3),
                _fmt(s.get("pinball")),
                _fmt(b.get("origin_f1"), 3),
                _fmt(b.get("origin_precision"), 3),
                _fmt(b.get("origin_recall"), 3),
                _fmt(b.get("event_recall"), 3),
                _fmt(b.get("median_lead_seconds"), 4),
                _fmt(b.get("lead_share"), 3),
                _calm(b),
                _fmt(b.get("false_alarms_per_hour"), 3),
                _fmt(s.get("fit_seconds"), 3),
                _fmt(pred * 1000 if pred is not None else None, 3),
            )
        )
    lines = [
        f"# {result['trace']} series={result['series']} horizon={result['horizon_s']:g}s step={result['step_s']:g}s "
        f"samples={result['samples']} threshold={result['threshold']}"
    ]
    first = next(iter(result["models"].values()), {})
    if "breach" in first:
        b = first["breach"]
        lines.append(
            f"# breach scores at {b['threshold']:g}: {b['origins_scored']} origins below it, "
            f"{b['origins_crossing']} of them crossing within the horizon; {b['breaches']} crossings, "
            f"{b.get('calm_breaches', 0)} of them after {CALM_SECONDS / 60:g} calm minutes; median possible lead "
            f"{_fmt(b.get('possible_lead_median_seconds'), 4)} s"
        )
        lines.append(
            "# (f1/precision/recall over origins, events = share of crossings paged ahead, lead_s = median lead, "
            "share = mean lead / possible lead per crossing (missed: 0), calm_lead = median lead in s on the "
            "crossings after the calm minutes (missed: 0) and how many of them, fa/h = false-alarm episodes per hour)"
        )
    lines += aligned(rows)
    lines += harm_table(result)
    for n in result["notes"]:
        lines.append(f"note: {n}")
    return "\n".join(lines)


def harm_table(result: dict) -> list[str]:
    """The harm scores of every model's deployed alert (`infercast.predictors.harm`), as fixed-width lines; none
    when the series has no harm marked."""
    rows = [("model", "episodes", "recall", "lead_s", "false/day", "paged")]
    for name, s in result["models"].items():
        hs = s.get("harm")
        if hs is None:
            continue
        rows.append(
            (
                name,
                str(hs["episodes"]),
                _fmt(hs["recall"], 3),
                _fmt(hs["median_lead_seconds"], 4),
                _fmt(hs["false_pages_per_day"], 3),
                _fmt(hs["paged_fraction"], 3),
            )
        )
    if len(rows) == 1:
        return []
    harm = (result.get("meta") or {}).get("harm") or {}
    out = [
        "",
        f"# harm: {harm.get('episodes', '?')} episodes in the replay ({harm.get('by_kind', {})} harmful samples by "
        "kind); each model's alert as deployed, scored as a page for harm (recall: episodes paged 60 s to 10 min "
        "ahead; lead_s: median lead, capped at 600; false/day: pages with no harm within 10 minutes, per day; "
        "paged: share of the time paged)",
    ]
    out += aligned(rows)
    return out
