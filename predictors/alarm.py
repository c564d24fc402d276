"""The predictive alarm as deployed: the upper band crossing the trigger, with persistence and hysteresis.  Pure.

The alert rule `InfercastKVCacheForecastBreach` and the backtest's deployed breach scores use this one definition
(`alertrules/rules.py` writes it in PromQL; `tests/alerting` replays it through promtool):

- *raw* alarm at an evaluation: the published upper band (`band="upper"` at the horizon, the most pessimistic
  model and aggregate: `pool_version:infercast_forecast_kv_cache_usage_ratio:max_yhat_upper`) reaches `trigger`;
- it *fires* once the raw alarm has held for `persistence` consecutive evaluations (Prometheus' `for:` of
  `(persistence - 1)` evaluation intervals: `persistence=1` fires at once);
- once firing it *stays* while that band is at least `trigger - hysteresis` (in PromQL: `or` the same band over
  `trigger - hysteresis` `and` the alert's own firing `ALERTS` series), so a band wobbling around the trigger
  pages once, not on every wobble; below that it clears, and firing again needs `persistence` again.

What each costs: persistence delays every page by `persistence - 1` evaluations (15 s each in production), so it
costs that much lead on every breach and removes alarm episodes shorter than that; hysteresis costs no lead (it only
acts once firing) but keeps an episode alive longer after the band falls, which can turn a false alarm's tail into
more false-alarm steps (never more episodes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AlarmPolicy:
    trigger: float
    persistence: int = 1
    hysteresis: float = 0.0

    def __post_init__(self) -> None:
        if self.persistence < 1:
            raise ValueError(f"persistence must be >= 1 evaluation, got {self.persistence}")
        if not 0.0 <= self.hysteresis < self.trigger:
            raise ValueError(f"hysteresis must be in [0, trigger), got {self.hysteresis}")

    def run(
        self, upper: np.ndarray, contiguous: np.ndarray | None = None, hold: np.ndarray | None = None
    ) -> np.ndarray:
        """Firing flags for consecutive evaluations of an upper band `upper` (NaN: no forecast, no alarm); `hold`,
        if given, is the band the hysteresis holds on (default: `upper`).

        `contiguous[i]` False says evaluation i does not follow i - 1 (a gap): the state restarts there.
        """
        upper = np.nan_to_num(np.asarray(upper, float), nan=-np.inf)
        hold = upper if hold is None else np.nan_to_num(np.asarray(hold, float), nan=-np.inf)
        out = np.zeros(len(upper), bool)
        run = 0
        firing = False
        for i, u in enumerate(upper):
            if contiguous is not None and i and not contiguous[i]:
                run, firing = 0, False
            run = run + 1 if u >= self.trigger else 0
            if firing:
                firing = u >= self.trigger or hold[i] >= self.trigger - self.hysteresis
            else:
                firing = run >= self.persistence
            out[i] = firing
        return out
