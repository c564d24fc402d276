"""A traffic forecast that weighs several models by how each has done on this series lately.  Pure.

Which simple forecaster is best depends on the traffic: on a rate that wanders, the last value; on a smooth curve,
Holt's damped trend; on a rate that jumps between two levels, the line through the last minutes; on noisy arrivals,
a smoothed level (`infercast.predictors.local_level`).  No one model is best on every fleet, and a fleet's traffic
changes its kind over a day.  `OnlineCombination(members)` forecasts with every member and publishes a weighted mean of
their paths and bands.  The weights are learnt online, per series, from the members' own errors at the horizon: after
each forecast's horizon has passed, the outcome at the horizon is known (it is in the next history handed to
`forecast`), and each member's discounted mean squared error moves towards its new squared error,

    E_i <- decay * E_i + (1 - decay) * e_i^2,      w_i proportional to 1 / E_i   (mode "inverse")

or all the weight goes to the member with the lowest `E_i` (mode "best").  This is the inverse-MSE combination
(Bates & Granger 1969) with discounting so that it follows a series that changes.  Until `min_outcomes` outcomes are
known the members are weighed equally.  The feedback is delayed by the horizon, as it is in production.

`traffic_combination()` is the service's traffic model (`infercast.predictors.deployed`): the last value,
predict_linear, Holt-Winters and the local level, all the weight on the one with the lowest discounted error
(decay 0.95: about the last 20 outcomes, five minutes at the 15 s tick).  It was chosen on the traffic protocol's
training runs (docs/forecasting.md, "Traffic"), where it beat Prophet anchored on both the mean and the worst error
ratio to the best baseline; its settings were set once, not tuned.

One instance holds the state of one series, like `infercast.predictors.conformal.AdaptiveBand`: the service keeps one
per (series, pool, version), the backtest a fresh one per series; a history that goes back in time resets it.  A
member that fails at an origin is left out of that forecast (and scored on nothing it did not forecast).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from infercast.predictors.base import DEFAULT_BAND, Forecast, Forecaster, History, history_cap
from infercast.predictors.conformal import due_outcomes
from infercast.predictors.holt_winters import HoltWinters
from infercast.predictors.linear import PredictLinear
from infercast.predictors.local_level import LocalLevel
from infercast.predictors.naive import LastValue

MODES = ("inverse", "best")


@dataclass
class _Issued:
    t_horizon: float
    yhat: dict[str, float]  # each member's forecast at the horizon


class OnlineCombination:
    name = "combined"

    def __init__(
        self,
        members: Sequence[Forecaster],
        decay: float = 0.95,
        mode: str = "inverse",
        min_outcomes: int = 4,
        band: tuple[float, float] = DEFAULT_BAND,
        clip: tuple[float, float] = (-math.inf, math.inf),
        bound_factor: float | None = None,
    ) -> None:
        if not members:
            raise ValueError("combined: no member model")
        if mode not in MODES:
            raise ValueError(f"combined: unknown mode {mode!r}; use one of {MODES}")
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"combined: decay must be in [0, 1), got {decay}")
        self.members = list(members)
        self.decay, self.mode, self.min_outcomes = float(decay), mode, int(min_outcomes)
        self.band, self.clip = band, clip
        self.bound_factor = bound_factor
        self.reset()

    def reset(self) -> None:
        self.mse: dict[str, float] = {m.name: math.nan for m in self.members}
        self.outcomes = 0
        self._pending: list[_Issued] = []
        self._last_t = -math.inf

    def fit(self, histories: list[History]) -> OnlineCombination:
        for m in self.members:
            m.fit(histories)
        return self

    def weights(self, names: Sequence[str]) -> dict[str, float]:
        """The weight of each named member now (they sum to 1)."""
        known = {n: self.mse[n] for n in names if math.isfinite(self.mse.get(n, math.nan))}
        if self.outcomes < self.min_outcomes or len(known) < len(names):
            return {n: 1.0 / len(names) for n in names}
        if self.mode == "best":
            best = min(names, key=lambda n: known[n])
            return {n: float(n == best) for n in names}
        floor = 1e-12 * max(known.values()) + 1e-300  # a member that has been exact so far does not divide by 0
        inv = {n: 1.0 / max(known[n], floor) for n in names}
        total = sum(inv.values())
        return {n: v / total for n, v in inv.items()}

    def _learn(self, history: History) -> None:
        t_now = float(history.t[-1])
        if t_now < self._last_t:
            self.reset()
        self._last_t = t_now
        outcomes, self._pending = due_outcomes(self._pending, history, lambda f: f.t_horizon)
        for f, y in outcomes:
            for name, yhat in f.yhat.items():
                err = (y - yhat) ** 2
                old = self.mse[name]
                self.mse[name] = err if not math.isfinite(old) else self.decay * old + (1.0 - self.decay) * err
            self.outcomes += 1

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        self._learn(history)
        fcs: dict[str, Forecast] = {}
        failures = []
        for m in self.members:
            try:
                fc = m.forecast(history, horizon_s)
            except Exception as e:  # a member that cannot forecast here is left out here
                failures.append(f"{m.name}: {e}")
                continue
            if np.isfinite(fc.yhat).all() and np.isfinite(fc.yhat_lower).all() and np.isfinite(fc.yhat_upper).all():
                fcs[m.name] = fc
        if not fcs:
            raise ValueError("combined: no member could forecast (" + "; ".join(failures) + ")")
        w = self.weights(list(fcs))
        first = next(iter(fcs.values()))
        n = min(len(f.t) for f in fcs.values())  # members share the grid; guard against one that is shorter

        def mix(attr: str) -> np.ndarray:
            return sum(w[k] * getattr(f, attr)[:n] for k, f in fcs.items())  # type: ignore[return-value]

        lo, hi = self.clip
        if self.bound_factor is not None:  # never above `bound_factor` x the highest value in the history
            hi = min(hi, history_cap(history.y, self.bound_factor))
        yhat = np.clip(mix("yhat"), lo, hi)
        lower = np.minimum(np.clip(mix("yhat_lower"), lo, hi), yhat)
        upper = np.maximum(np.clip(mix("yhat_upper"), lo, hi), yhat)
        self._pending.append(_Issued(float(first.t[n - 1]), {k: float(f.yhat[n - 1]) for k, f in fcs.items()}))
        return Forecast(first.t[:n], yhat, lower, upper, self.band, self.name)


def traffic_combination(
    band: tuple[float, float] = DEFAULT_BAND, clip: tuple[float, float] = (0.0, math.inf), bound_factor: float = 1.5
) -> OnlineCombination:
    """The service's traffic model (module docstring): a fresh one, for one series.  Its path and band never go above
    `bound_factor` (`predictor.traffic_bound_factor`) x the highest rate in the history: a line through a ramp, or a
    trend fitted across a burst, is an extrapolation, not a forecast (the calendar's announced rates may still go
    above it: `infercast.predictors.announced` acts on this model's forecast)."""
    members = [
        LastValue(band=band, clip=clip),
        PredictLinear(band=band, clip=clip),
        HoltWinters(band=band, clip=clip),
        LocalLevel(shift_sigmas=4.0, band=band, clip=clip),
    ]
    return OnlineCombination(members, decay=0.95, mode="best", band=band, clip=clip, bound_factor=bound_factor)
