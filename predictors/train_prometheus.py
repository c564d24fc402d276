"""`infercast train --from-prometheus URL`: learn the LSTM (and check Prophet) on the fleet's own history.

1. Read the history the deployed predictor reads (`infercast.predictors.history`: KV usage per pool and version, fullest
   instance and mean, from the recording rules or the raw metric; the LSTM's covariates; the traffic), on the
   predictor's step, over `--since` (default 7d) or `--start`/`--end`.
2. Refuse, with rc 2 and a message that says why, when Prometheus cannot be reached or answers with an error, when
   it holds no KV series, or when the history is shorter than `--min-history` (say how much there is).
3. Cut the time axis: train / validation (early stopping) / held-out tail (`--val-fraction`,
   `--holdout-fraction`), by time, never shuffled across it.
4. Train the LSTM with the same trainer and hyperparameters as the shipped model (`LSTMForecaster.fit`, whose
   progress bar shows the epochs and losses), its internal split off (`val_fraction=0`): the validation part is
   the time after the training part.
5. Score on the held-out tail, every `--score-every` seconds: the new model, the shipped one (when its step
   matches), `predict_linear` (what a Prometheus user writes) and the last value; the scores are
   `infercast.predictors.scoring`'s (peak_mae, mae, band coverage, pinball, and the breach scores at `--threshold`,
   by default the `--config` fleet file's KV forecast trigger), pooled over the series.  Traffic (when Prometheus
   has it): the service's traffic pipeline (`combined_aci`) and Prophet anchored (fitted once on the time before the
   held-out tail) against the same baselines.  Neither has a model file (the combination learns online; the
   service refits Prophet every `predictor.refit_interval_seconds`); scoring them here says whether either is worth
   it on this fleet's traffic.
6. Write OUT.safetensors / OUT.json (the shipped model's format) with where the data came from (URL without
   credentials, series, time range and split, series count, seed) and the held-out scores; the table is printed.
   The shipped model is never the default output.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from infercast.durations import parse_duration, parse_time
from infercast.predictors.score_table import aligned, cell
from infercast.redact import redact_url

if TYPE_CHECKING:
    from infercast.config import FleetConfig
    from infercast.predictors.history import FleetHistory, Split
    from infercast.predictors.lstm import LSTMForecaster, LSTMParams

log = logging.getLogger(__name__)

#: where `--from-prometheus` writes without `--out`: the current directory, never over the shipped model
DEFAULT_OUT = "lstm_kv_local"
TOKEN_ENV = "INFERCAST_PROMETHEUS_TOKEN"


class Refusal(Exception):
    """`infercast train --from-prometheus` cannot train: the message says why and what to do (rc 2)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training on your own history (--from-prometheus)")
    g.add_argument(
        "--from-prometheus",
        metavar="URL",
        default=None,
        help="learn from this Prometheus' history of the series the predictor reads (docs/lstm.md)",
    )
    g.add_argument("--since", default="7d", help="how far back to read, a Prometheus duration (default 7d)")
    g.add_argument("--start", default=None, help="start of the range: RFC 3339 or Unix seconds (overrides --since)")
    g.add_argument("--end", default=None, help="end of the range: RFC 3339 or Unix seconds (default now)")
    g.add_argument(
        "--matchers",
        nargs="*",
        default=[],
        metavar="LABEL=VALUE",
        help="exact label matchers on every series read (e.g. namespace=llm cluster=eu1)",
    )
    g.add_argument(
        "--token",
        default=None,
        help=f"bearer token for Prometheus (default ${TOKEN_ENV}); basic auth goes in the URL (user:pass@)",
    )
    g.add_argument(
        "--source",
        choices=("auto", "rules", "raw"),
        default="auto",
        help="KV usage from the recording rules, the raw metric, or the rules when they hold enough history "
        "(default auto)",
    )
    g.add_argument("--min-history", default="6h", help="refuse a shorter history (default 6h)")
    g.add_argument("--val-fraction", type=float, default=0.15, help="share of the time that validates (0.15)")
    g.add_argument("--holdout-fraction", type=float, default=0.15, help="share held out for the score (0.15)")
    g.add_argument("--score-every", type=float, default=60.0, help="seconds between scored origins (default 60)")
    g.add_argument("--max-score-origins", type=int, default=2000, help="at most this many origins per series")
    g.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="KV usage the breach scores judge (default: the --config fleet file's thresholds.kv_forecast_trigger)",
    )
    g.add_argument("--no-prophet", action="store_true", help="do not fit Prophet on the traffic")
    g.add_argument("--timeout", type=float, default=30.0, help="seconds per Prometheus request (default 30)")


def lstm_params(args: argparse.Namespace, **fixed: float) -> LSTMParams:
    """The LSTM's training parameters from `infercast train`'s flags (--step, --seed, --max-epochs,
    --windows-per-epoch, --hidden), for the model file built from generated series and for one trained on a
    Prometheus history alike; `fixed` sets the others."""
    from infercast.predictors.lstm import LSTMParams

    return LSTMParams(
        step_s=args.step,
        seed=args.seed,
        max_epochs=args.max_epochs,
        windows_per_epoch=args.windows_per_epoch,
        hidden=args.hidden,
        **fixed,
    )


def _time(text: str, what: str) -> float:
    try:
        return parse_time(text)
    except ValueError:
        raise Refusal(f"{what} {text!r} is neither Unix seconds nor an RFC 3339 time") from None


def time_range(args: argparse.Namespace, now: float) -> tuple[float, float]:
    end = _time(args.end, "--end") if args.end else now
    if args.start:
        start = _time(args.start, "--start")
    else:
        try:
            start = end - parse_duration(args.since)
        except ValueError as e:
            raise Refusal(f"--since: {e}") from None
    if start >= end:
        raise Refusal(f"the range is empty: start {_iso(start)} is not before end {_iso(end)}")
    return start, end


def matchers(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise Refusal(f"--matchers: expected LABEL=VALUE, got {item!r}")
        out[k.strip()] = v
    return out


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hours(s: float) -> str:
    return f"{s / 3600:.1f} h"


def store_for(url: str, token: str | None, timeout: float):
    """A `PrometheusStore` that sends `Authorization: Bearer` when a token is given."""
    import requests

    from infercast.store import StoreError
    from infercast.store.prometheus import PrometheusStore

    session = requests.Session()
    if token:
        session.headers["Authorization"] = f"Bearer {token}"
    try:
        return PrometheusStore(url, timeout_seconds=timeout, session=session)
    except StoreError as e:
        raise Refusal(str(e)) from None


def command_line() -> str | None:
    """The command as typed, the token's value masked (it is written into the model's metadata)."""
    if len(sys.argv) < 2 or sys.argv[1] != "train":
        return None
    out, hide = [], False
    for a in sys.argv[2:]:
        if hide:
            out.append("***")
            hide = False
            continue
        if a == "--token":
            hide = True
        elif a.startswith("--token="):
            a = "--token=***"
        elif a.startswith(("http://", "https://")):
            a = redact_url(a)
        out.append(a)
    return "infercast train " + " ".join(shlex.quote(a) for a in out)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except Refusal as e:
        print(f"infercast train: {e}", file=sys.stderr)
        return 2


def _fleet(args: argparse.Namespace) -> FleetConfig | None:
    """The fleet file of `--config` (a Refusal when it is not valid), None without one."""
    from infercast.config import ConfigError, load_config

    path = getattr(args, "config", None)
    if not path:
        return None
    try:
        return load_config(path)
    except ConfigError as e:
        raise Refusal(f"--config: {e}") from None


def _inputs(fleet: FleetConfig | None):
    """What the deployed predictor of the fleet file reads: its `metrics.source` (the exporter's series or the
    engine rules) and rate window, so the model trains on the series it will serve on."""
    from infercast.predictors.service import SourceSeries

    if fleet is None:
        return SourceSeries.of()
    return SourceSeries.of(fleet.metrics.source, fleet.metrics.rate_window)


def _threshold(args: argparse.Namespace, fleet: FleetConfig | None) -> float:
    """`--threshold`, else the fleet file's KV forecast trigger: the breach scores judge what the alert pages on."""
    from infercast.config import Thresholds

    if args.threshold is not None:
        return args.threshold
    return (fleet.thresholds if fleet is not None else Thresholds()).kv_forecast_trigger


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _history_needed(args: argparse.Namespace, params: LSTMParams) -> tuple[float, float]:
    """(--min-history, the floor the fractions set) in seconds: validation and the held-out tail must each hold at
    least one window (lookback + horizon) plus a step.  Refuses an unreadable --min-history or fractions that leave
    no part to train on."""
    from infercast.predictors import history as H

    try:
        min_history = parse_duration(args.min_history)
    except ValueError as e:
        raise Refusal(f"--min-history: {e}") from None
    try:
        H.split_times(0.0, 1.0, args.val_fraction, args.holdout_fraction, 1e-6)
    except ValueError as e:
        raise Refusal(f"--val-fraction {args.val_fraction} / --holdout-fraction {args.holdout_fraction}: {e}") from None
    per_part = (params.lookback + params.horizon_steps + 1) * params.step_s
    return min_history, per_part / min(args.val_fraction, args.holdout_fraction)


def _train_and_validation(train_kv: list, split: Split, params: LSTMParams) -> tuple[list, list]:
    """The training part of each series and its validation part (with a lookback of context before it), each kept
    only when it holds enough samples for a window."""
    from infercast.predictors import history as H

    ctx = params.lookback * params.step_s
    train = [H.window(h, split.first, split.val) for h in train_kv]
    val = [H.window(h, split.val - ctx, split.test) for h in train_kv]
    train = [h for h in train if np.isfinite(h.y).sum() > params.horizon_steps]
    val = [h for h in val if np.isfinite(h.y).sum() > params.lookback + params.horizon_steps]
    return train, val


def _too_short(
    args: argparse.Namespace, fh: FleetHistory, shown: str, step: float, min_history: float, floor: float
) -> Refusal:
    """The refusal of a history shorter than training needs: how much there is, how much is needed and for what,
    and how to get more."""
    first, last, most = fh.observed()
    have = last - first if math.isfinite(first) else 0.0
    need = max(min_history, floor)
    return Refusal(
        f"the history at {shown} is too short: {_hours(have)} of {fh.metrics['kv_max']} "
        + (f"({_iso(first)} to {_iso(last)}, " if have > 0 else "(")
        + f"{len(fh.groups())} pool/version series, at most {most} samples at {step:g} s), and training needs at least "
        f"{_hours(need)}: {1 - args.val_fraction - args.holdout_fraction:.0%} to train, {args.val_fraction:.0%} to "
        f"validate, {args.holdout_fraction:.0%} held out to score against predict_linear"
        + (f" (--min-history {args.min_history})" if need == min_history else "")
        + ". Let Prometheus record longer (its retention must hold it), widen --since/--start"
        + (f", or lower --min-history (not below {_hours(floor)} with these fractions)" if need > floor else "")
    )


def _train(params: LSTMParams, train: list, val: list, progress: bool) -> tuple[LSTMForecaster, float]:
    """A new LSTM fitted on `train` (early stopping on `val`), saying what it trains and how it went; (the model,
    the seconds it took)."""
    from infercast.predictors.lstm import LSTMForecaster

    _say(
        f"training the LSTM (hidden {params.hidden}, up to {params.max_epochs} epochs of "
        f"{params.windows_per_epoch} windows, seed {params.seed})"
    )
    t1 = time.perf_counter()
    model = LSTMForecaster(params, progress=progress).fit(train, validation=val)
    train_s = time.perf_counter() - t1
    s = model.meta_["scores"]
    _say(
        f"trained in {train_s:.0f} s: {s.get('epochs_run', 0):.0f} epochs, best {s.get('best_epoch', 0):.0f}, "
        f"train loss {s.get('train_loss')}, validation loss {s.get('val_loss')}"
    )
    return model, train_s


def _score_held_out(
    args: argparse.Namespace, fh: FleetHistory, model: LSTMForecaster, split: Split, threshold: float, out: str
) -> tuple[dict, dict | None]:
    """The held-out tail's scores: KV usage (the new model beside predict_linear and the shipped model, per
    aggregate) and, unless --no-prophet or there is no traffic, the request rate."""
    from infercast.predictors import history as H
    from infercast.predictors.lstm import DEFAULT_MODEL

    p = model.params
    _say(f"scoring on the held-out tail ({_hours(split.last - split.test)})")
    shipped = _shipped(DEFAULT_MODEL, p.step_s, out)
    kv_scores = {
        how: score_kv(fh.kv[how], model, shipped, split, args, p.horizon_s, threshold) for how in H.KV_AGGREGATES
    }
    rps_scores = None
    if fh.rps and not args.no_prophet:
        rps_scores = score_rps(fh.rps, split, args, p.horizon_s)
    return kv_scores, rps_scores


def _run(args: argparse.Namespace) -> int:
    from infercast.predictors import history as H
    from infercast.predictors.lstm import DEFAULT_MODEL
    from infercast.predictors.modelfile import paths

    t_start = time.perf_counter()
    out = args.out or DEFAULT_OUT
    if paths(out)[0].resolve() == paths(DEFAULT_MODEL)[0].resolve():
        _say(f"note: --out {out} is the shipped model: it will be replaced")
    # the validation part is the time after the training part (split below)
    params = lstm_params(args, val_fraction=0.0)
    min_history, floor = _history_needed(args, params)
    need = max(min_history, floor)
    step = params.step_s
    start, end = time_range(args, time.time())
    url = args.from_prometheus
    shown = redact_url(url)
    store = store_for(url, args.token or os.environ.get(TOKEN_ENV) or None, args.timeout)
    sel = matchers(args.matchers)
    _say(f"reading {_hours(end - start)} of KV usage from {shown} ({_iso(start)} to {_iso(end)}, step {step:g} s)")
    fleet = _fleet(args)
    threshold = _threshold(args, fleet)
    try:
        fh = H.fetch(store, start, end, step, sel, args.source, need_s=need, inputs=_inputs(fleet))
    except H.HistoryError as e:
        raise Refusal(str(e)) from None
    for n in fh.notes:
        _say(f"note: {n}")
    first, last, _ = fh.observed()
    have = last - first if math.isfinite(first) else 0.0
    n_groups = len(fh.groups())
    if have < need:
        raise _too_short(args, fh, shown, step, min_history, floor)
    split = H.split_times(first, last + step, args.val_fraction, args.holdout_fraction, step)
    train_kv = fh.kv["max"] + H.distinct(fh.kv["mean"], fh.kv["max"])
    train, val = _train_and_validation(train_kv, split, params)
    _say(
        f"{n_groups} pool/version series ({len(train_kv)} with both aggregates, from the "
        f"{'recording rules' if fh.source == 'rules' else 'raw metric'}), {_hours(have)}: train "
        f"{_iso(split.first)}..{_iso(split.val)}, validate ..{_iso(split.test)}, hold out ..{_iso(split.last)}; "
        f"covariates: {', '.join(k for k in fh.metrics if not k.startswith('kv_')) or 'none'}"
    )
    model, train_s = _train(params, train, val, progress=not args.no_progress)
    s = model.meta_["scores"]
    kv_scores, rps_scores = _score_held_out(args, fh, model, split, threshold, out)
    extra = {
        "data": {
            "sources": [f"prometheus: {shown}"],
            "prometheus": {
                "url": shown,
                "source": fh.source,
                "series": fh.metrics,
                "matchers": sel,
                "range": [_iso(start), _iso(end)],
                "observed": [_iso(first), _iso(last)],
                "step_s": step,
                "pool_version_series": n_groups,
                "training_series": len(train),
                "groups": [f"{p}/{v}" for p, v in fh.groups()][:40],
                "split": split.as_dict(),
                "seed": params.seed,
            },
            "validation": {
                "early_stopping": f"the {args.val_fraction:.0%} of the time after the training part",
                "held_out": f"the last {args.holdout_fraction:.0%} of the time, scored after training",
            },
        },
        "held_out_scores": {"kv": kv_scores, "rps": rps_scores},
        "command": command_line(),
        "train_seconds": round(train_s, 1),
    }
    model.save(out, extra=extra)
    print(report(kv_scores, rps_scores, threshold))
    wpath, mpath = paths(out)
    print(
        f"wrote {wpath} and {mpath.name} ({len(train)} training series, {s.get('epochs_run', 0):.0f} epochs, "
        f"{time.perf_counter() - t_start:.0f} s in all); use it with predictor.model_file: {Path(out).resolve()}"
    )
    return 0


def _shipped(stem: Path, step: float, out: str):
    """The shipped model, to score beside the new one, when it loads and reads this step (else None)."""
    from infercast.predictors.lstm import LSTMForecaster
    from infercast.predictors.modelfile import ModelFileError, paths

    if paths(out)[0].resolve() == paths(stem)[0].resolve():
        return None
    try:
        m = LSTMForecaster.load(stem)
    except (ModelFileError, OSError) as e:
        log.info("shipped model not scored: %s", e)
        return None
    return m if abs(m.params.step_s - step) < 1e-9 else None


def _origins(h, split, args, step: float, cap: int | None = None) -> tuple[float, float]:
    """(warm-up from the history's start, seconds between origins) putting origins on the held-out tail."""
    span = split.last - split.test
    every = max(step, args.score_every, span / max(1, cap or args.max_score_origins))
    every = math.ceil(every / step - 1e-9) * step
    return split.test - float(h.t[0]), every


def score_kv(hs, model, shipped, split, args, horizon_s: float, threshold: float) -> dict:
    """Scores on the held-out tail pooled over the series (breaches at `threshold`): each model forecasts from the
    same origins."""
    from infercast.predictors.backtest import ModelRun, origin_times, run_backtest, score_runs
    from infercast.predictors.registry import make

    step = float(hs[0].t[1] - hs[0].t[0])
    per_model: dict[str, list[dict]] = {}
    for h in hs:
        if not np.isfinite(_held_out(h, split)).any():
            continue
        warmup, every = _origins(h, split, args, step)
        runs = run_backtest(
            h, [make("predict_linear", "kv"), make("last_value", "kv")], horizon_s,
            warmup_s=warmup, refit_every_s=math.inf, origin_every_s=every,
        )  # fmt: skip
        origins = origin_times(h, warmup, every)
        for name, m in (("lstm (new)", model), ("lstm (shipped)", shipped)):
            if m is not None:
                runs[name] = lstm_run(ModelRun(name), m, h, origins, horizon_s)
        for name, sc in score_runs(h, runs, horizon_s, threshold).items():
            per_model.setdefault(name, []).append({**sc, "hours": _span_h(runs[name].origins, step)})
    order = ["lstm (new)", "lstm (shipped)", "predict_linear", "last_value"]
    return {name: pooled(per_model[name]) for name in order if name in per_model}


def _held_out(h, split) -> np.ndarray:
    """The held-out values of `h`."""
    return h.y[h.t >= split.test]


def lstm_run(run, model, h, origins: np.ndarray, horizon_s: float, chunk: int = 512):
    """The LSTM's forecasts from every origin, in batches (each from the model's window of the past only)."""
    lookback = model.params.lookback
    todo = []
    for o in origins:
        past = h.upto(float(o)).tail(lookback)
        if np.isfinite(past.y).any() and len(past.t) >= 2:
            todo.append((float(o), past))
        else:
            run.errors.append(f"forecast at t={o:g}: no finite sample in the window")
    t0 = time.perf_counter()
    for a in range(0, len(todo), chunk):
        part = todo[a : a + chunk]
        fcs = model.forecast_many([p for _, p in part], horizon_s)
        run.origins += [o for o, _ in part]
        run.forecasts += fcs
    run.predict_seconds = time.perf_counter() - t0
    return run


def _span_h(origins: list[float], step: float) -> float:
    return (origins[-1] - origins[0] + step) / 3600 if origins else 0.0


def pooled(scores: list[dict]) -> dict:
    """One row from per-series scores: means weighted by origins; breach counts summed, their ratios recomputed."""
    n = sum(s.get("n_origins", 0) for s in scores)
    row: dict = {"series": len(scores), "n_origins": n}
    for k in ("mae", "peak_mae", "coverage", "pinball"):
        w = [(s[k], s["n_origins"]) for s in scores if s.get(k) is not None]
        row[k] = round(sum(v * c for v, c in w) / sum(c for _, c in w), 6) if w and sum(c for _, c in w) else None
    bs = [s["breach"] for s in scores if s.get("breach")]
    if bs:
        tp = sum(b["true_alarms"] for b in bs)
        fp = sum(b["alarms"] for b in bs) - tp
        fn = sum(b["origins_crossing"] for b in bs) - tp
        hours = sum(s["hours"] for s in scores if s.get("breach"))
        episodes = sum(b["false_alarm_episodes"] for b in bs)
        row["breach"] = {
            "threshold": bs[0]["threshold"],
            "origins_crossing": tp + fn,
            "alarms": tp + fp,
            "true_alarms": tp,
            "origin_f1": round(2 * tp / (2 * tp + fp + fn), 6) if (2 * tp + fp + fn) else None,
            "origin_recall": round(tp / (tp + fn), 6) if tp + fn else None,
            "origin_precision": round(tp / (tp + fp), 6) if tp + fp else None,
            "breaches": sum(b["breaches"] for b in bs),
            "detected": sum(b["detected"] for b in bs),
            "false_alarms_per_hour": round(episodes / hours, 4) if hours else None,
        }
    return row


def score_rps(hs, split, args, horizon_s: float) -> dict | None:
    """Traffic: the service's traffic pipeline (`combined_aci`, `infercast.predictors.deployed`) and Prophet anchored
    (when Prophet is installed; fitted once on the time before the held-out tail) against predict_linear and the
    last value, from the same origins (at most 100 per series: Prophet predicts slowly)."""
    from infercast.config import PredictorConfig
    from infercast.predictors.anchored import AnchoredProphet
    from infercast.predictors.backtest import run_backtest, score_runs
    from infercast.predictors.deployed import service_forecaster
    from infercast.predictors.prophet_model import import_prophet
    from infercast.predictors.registry import make

    try:
        import_prophet()
        prophet = True
    except ImportError as e:
        _say(f"note: Prophet is not installed ({e}): Prophet anchored not scored")
        prophet = False
    logging.getLogger("cmdstanpy").setLevel(logging.WARNING)
    logging.getLogger("prophet").setLevel(logging.WARNING)
    pc = PredictorConfig()
    step = float(hs[0].t[1] - hs[0].t[0])
    per_model: dict[str, list[dict]] = {}
    for h in hs:
        if np.isfinite(h.y[h.t < split.test]).sum() < 10 or not np.isfinite(_held_out(h, split)).any():
            continue
        warmup, every = _origins(h, split, args, step, cap=min(100, args.max_score_origins))
        models = [service_forecaster("rps", pc), make("predict_linear", "rps"), make("last_value", "rps")]
        if prophet:
            models.append(AnchoredProphet(band=pc.band, bound_factor=pc.traffic_bound_factor))
        runs = run_backtest(h, models, horizon_s, warmup_s=warmup, refit_every_s=math.inf, origin_every_s=every)
        for name, sc in score_runs(h, runs, horizon_s).items():
            per_model.setdefault(name, []).append({**sc, "hours": _span_h(runs[name].origins, step)})
    return {name: pooled(rows) for name, rows in per_model.items()} or None


def report(kv: dict, rps: dict | None, threshold: float) -> str:
    """The held-out score tables."""
    lines = []
    titles = {"max": "fullest instance per pool (what pages)", "mean": "mean over the pool's instances"}
    for how, rows in kv.items():
        lines.append(f"\nheld-out KV usage, {titles.get(how, how)}: 5-min horizon, breach at {threshold:g}")
        cols = ("model", "peak_mae", "mae", "coverage", "pinball", "f1", "recall", "fa/h", "origins")
        table = [cols]
        for name, r in rows.items():
            b = r.get("breach") or {}
            table.append(
                (
                    name,
                    cell(r.get("peak_mae")),
                    cell(r.get("mae")),
                    cell(r.get("coverage"), 3),
                    cell(r.get("pinball")),
                    cell(b.get("origin_f1"), 3),
                    cell(b.get("origin_recall"), 3),
                    cell(b.get("false_alarms_per_hour"), 3),
                    str(r["n_origins"]),
                )
            )
        lines += aligned(table, "  ")
        crossing = next((r["breach"]["origins_crossing"] for r in rows.values() if r.get("breach")), 0)
        if not crossing:
            lines.append(f"  (no origin in the held-out tail crossed {threshold:g} within the horizon: f1/recall -)")
    if rps:
        lines.append("\nheld-out traffic (req/s): 5-min horizon")
        table = [("model", "peak_mae", "mae", "coverage", "pinball", "origins")]
        for name, r in rps.items():
            table.append(
                (name, cell(r.get("peak_mae")), cell(r.get("mae")), cell(r.get("coverage"), 3), cell(r.get("pinball")),
                 str(r["n_origins"]))
            )  # fmt: skip
        lines += aligned(table, "  ")
    return "\n".join(lines)
