"""The rolling-origin backtest: every model forecasts from the same origins on the same series, with the
production refit schedule and no look-ahead.  Pure: a History and models in, forecasts and timings out.

At each origin o (every `origin_every_s` from `warmup_s` after the series starts), every model sees only
`history.upto(o)`: the samples at or before o.  A model is re-`fit` on `history.upto(o)` when it was never fitted
or when `refit_every_s` has passed since its last fit (the service does the same with
`predictor.refit_interval_seconds`); local models learn nothing in `fit`, so for them this costs nothing.
`tests/predictors/test_backtest.py` asserts that changing the future does not change any past forecast.

Timing comes from an injected `timer` (time.perf_counter by default) and is reported, never used to decide.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from infercast.predictors.alarm import AlarmPolicy
from infercast.predictors.base import Forecast, Forecaster, History
from infercast.predictors.harm import PageRule, score_page
from infercast.predictors.reference import AlwaysAlarm, NeverAlarm
from infercast.predictors.scoring import score_forecasts

log = logging.getLogger(__name__)


@dataclass
class ModelRun:
    """What one model did in a backtest: its forecasts at the origins, and what that cost."""

    name: str
    origins: list[float] = field(default_factory=list)
    forecasts: list[Forecast] = field(default_factory=list)
    fit_seconds: float = 0.0
    fits: int = 0
    predict_seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def predict_seconds_per_series(self) -> float | None:
        return self.predict_seconds / len(self.forecasts) if self.forecasts else None


def origin_times(history: History, warmup_s: float, origin_every_s: float | None = None) -> np.ndarray:
    """Forecast origins: sample times from `warmup_s` after the start, every `origin_every_s` (default: each step)."""
    t = history.t
    every = origin_every_s or history.step
    cand = t[t >= t[0] + warmup_s]
    if not len(cand):
        return cand
    keep = [cand[0]]
    for x in cand[1:]:
        if x - keep[-1] >= every - 1e-9:
            keep.append(x)
    return np.asarray(keep)


def run_backtest(
    history: History,
    models: Sequence[Forecaster],
    horizon_s: float = 300.0,
    *,
    warmup_s: float = 600.0,
    refit_every_s: float = 1800.0,
    origin_every_s: float | None = None,
    timer: Callable[[], float] = time.perf_counter,
) -> dict[str, ModelRun]:
    """Forecast from every origin with every model; a model that raises is recorded and skipped at that origin."""
    origins = origin_times(history, warmup_s, origin_every_s)
    runs: dict[str, ModelRun] = {}
    for model in models:
        run = runs[model.name] = ModelRun(model.name)
        last_fit: float | None = None
        for o in origins:
            past = history.upto(float(o))
            if last_fit is None or o - last_fit >= refit_every_s:
                t0 = timer()
                try:
                    model.fit([past])
                    last_fit = float(o)
                except Exception as e:  # a model that cannot fit here is skipped here, with the reason kept
                    run.errors.append(f"fit at t={o:g}: {e}")
                    last_fit = float(o)
                run.fit_seconds += timer() - t0
                run.fits += 1
            t0 = timer()
            try:
                f = model.forecast(past, horizon_s)
            except Exception as e:
                run.errors.append(f"forecast at t={o:g}: {e}")
                continue
            finally:
                run.predict_seconds += timer() - t0
            run.origins.append(float(o))
            run.forecasts.append(f)
        if run.errors:
            log.warning("%s: %d errors, first: %s", model.name, len(run.errors), run.errors[0])
    return runs


def page_flags(run: ModelRun, policy: AlarmPolicy, step: float) -> np.ndarray:
    """Whether the alert as deployed fires at each of the run's origins: its upper band published at the horizon
    through the policy (persistence, hysteresis), the state restarting after a gap.  The degenerate references page
    literally always and never (their bands are built for the line scores, which judge only origins under the
    threshold: `never_alarm`'s band at the last value would page whenever the series is over it)."""
    origins = np.asarray(run.origins, float)
    if run.name in (AlwaysAlarm.name, NeverAlarm.name):
        return np.full(len(origins), run.name == AlwaysAlarm.name)
    upper = np.array([f.at_horizon()[2] for f in run.forecasts], float)
    contiguous = np.concatenate([[True], np.diff(origins) <= step * 1.5]) if len(origins) else np.zeros(0, bool)
    return policy.run(upper, contiguous)


def score_runs(
    history: History,
    runs: dict[str, ModelRun],
    horizon_s: float,
    threshold: float | None = None,
    policy: AlarmPolicy | None = None,
    harm: list[tuple[float, float]] | None = None,
) -> dict[str, dict]:
    """Scores per model (see `infercast.predictors.scoring`), plus fit and predict cost; with a `policy` and the
    replay's `harm` episodes, `harm`: the alert as deployed on the model's band scored as a page for harm
    (`infercast.predictors.harm.score_page`)."""
    out = {}
    for name, run in runs.items():
        if run.forecasts:
            s = score_forecasts(history, np.asarray(run.origins), run.forecasts, horizon_s, threshold, policy)
            if policy is not None and harm is not None:
                s["harm"] = score_page(np.asarray(run.origins), page_flags(run, policy, history.step), harm, PageRule())
        else:
            s = {"n_origins": 0}
        s["fit_seconds"] = round(run.fit_seconds, 4)
        s["fits"] = run.fits
        s["predict_seconds_per_series"] = (
            round(run.predict_seconds_per_series, 6) if run.predict_seconds_per_series is not None else None
        )
        if run.errors:
            s["errors"] = len(run.errors)
            s["first_error"] = run.errors[0]
        out[name] = s
    return out
