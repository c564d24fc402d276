"""Bands calibrated per series and online: adaptive conformal inference on the band's two half-widths.  Pure.

`AdaptiveBand(inner)` forecasts with `inner` and rescales its band: the upper half-width `yhat_upper - yhat` by a
factor `s_up`, the lower one by `s_lo`.  After each forecast's horizon has passed, the outcomes it covered are known
(they are in the next history handed to `forecast`): with `miss` = 1 when the actual value at the horizon fell
above the upper band *as issued* (below the lower band for `s_lo`), else 0, the factor moves as in adaptive
conformal inference (Gibbs & Candes 2021) on a log scale,

    log s <- log s + gamma * (miss - alpha),    alpha = 1 - upper quantile (lower quantile for s_lo),

so each side misses alpha of the time in the long run on whatever series it runs on, calm or bursty, and re-adapts
when the series changes.  The horizon is the point that is published (`yhat_upper` at 300 s is what the alert and
the actuator read); the whole path is scaled by the same factor, so its shape stays the model's.  The feedback
is delayed by the horizon, as it is in production.  One instance holds the state of one series: the service
keeps one per (series, pool, version, aggregate); the backtest a fresh one per series.  A history that goes back
in time (a new series) resets it.

`gamma` = 0.05 (`predictor.band_adaptation`) was set from the rate of adaptation it gives (a sustained miss
doubles the width in about 15 forecasts, four minutes at the 15 s tick), not tuned on any scored series.  A
half-width of 0 (a flat band) is floored at `min_width` so a factor can act on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from predictors.base import Forecast, Forecaster, History

FACTOR_BOUNDS = (0.05, 50.0)


@dataclass
class _Issued:
    t: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


@dataclass
class AdaptiveBand:
    inner: Forecaster
    gamma: float = 0.05
    clip: tuple[float, float] = (-math.inf, math.inf)
    min_width: float = 1e-3
    log_up: float = 0.0
    log_lo: float = 0.0
    updates: int = 0
    _pending: list[_Issued] = field(default_factory=list)
    _last_t: float = -math.inf

    @property
    def name(self) -> str:
        return f"{self.inner.name}_aci"

    @property
    def factors(self) -> tuple[float, float]:
        """(lower, upper) width factors now."""
        return math.exp(self.log_lo), math.exp(self.log_up)

    def fit(self, histories: list[History]) -> AdaptiveBand:
        self.inner.fit(histories)
        return self

    def reset(self) -> None:
        self.log_up = self.log_lo = 0.0
        self.updates = 0
        self._pending.clear()

    def _learn(self, history: History) -> None:
        t_now = float(history.t[-1])
        if t_now < self._last_t:
            self.reset()
        self._last_t = t_now
        tol = history.step / 2 if len(history.t) > 1 else 0.0
        keep = []
        for f in self._pending:
            if f.t[-1] > t_now + tol:
                keep.append(f)
                continue
            i = int(np.clip(np.searchsorted(history.t, f.t[-1]), 0, len(history.t) - 1))
            y = float(history.y[i])
            if abs(history.t[i] - f.t[-1]) > tol or not np.isfinite(y):
                continue  # the outcome at its horizon was never observed: nothing to learn
            band = getattr(self.inner, "band", (0.1, 0.9))
            miss_up = float(y > f.upper[-1])
            miss_lo = float(y < f.lower[-1])
            lo_b, hi_b = (math.log(b) for b in FACTOR_BOUNDS)
            self.log_up = min(hi_b, max(lo_b, self.log_up + self.gamma * (miss_up - (1.0 - band[1]))))
            self.log_lo = min(hi_b, max(lo_b, self.log_lo + self.gamma * (miss_lo - band[0])))
            self.updates += 1
        self._pending = keep

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        self._learn(history)
        fc = self.inner.forecast(history, horizon_s)
        s_lo, s_up = self.factors
        up_w = np.maximum(fc.yhat_upper - fc.yhat, self.min_width)
        lo_w = np.maximum(fc.yhat - fc.yhat_lower, self.min_width)
        lo, hi = self.clip
        yhat = np.clip(fc.yhat, lo, hi)
        upper = np.clip(fc.yhat + s_up * up_w, lo, hi)
        lower = np.clip(fc.yhat - s_lo * lo_w, lo, hi)
        out = Forecast(fc.t, yhat, np.minimum(lower, yhat), np.maximum(upper, yhat), fc.band, self.name)
        self._pending.append(_Issued(fc.t.copy(), out.yhat_lower.copy(), out.yhat_upper.copy()))
        return out
