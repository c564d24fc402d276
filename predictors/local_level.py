"""Traffic as a level that wanders plus noise (the local-level model), its smoothing read off the series itself.  Pure.

A request rate seen at 15 s is a level that moves (clients come and go, the day turns) plus noise that does not
carry over (Poisson arrivals, batches of requests).  How much of a new sample is level and how much is noise decides
the best forecast: all level, and the last value is best; mostly noise, and an average of many samples is.  The
local-level model (a random walk observed with white noise) says exactly how much, from one number of the series:
the lag-1 autocorrelation `rho` of its first differences is `-1 / (q + 2)`, where `q` is the level's step variance
over the noise's.  The steady-state Kalman filter of that model is simple exponential smoothing with the gain

    P = (q + sqrt(q^2 + 4 q)) / 2,   gain = P / (P + 1)

(`rho >= 0`: no noise to remove, gain 1, the last value; `rho <= -0.5`: noise around a fixed level, gain 0).  This
is the model behind the forecast bench's predictability bound (`bench/forecast.py`, `level_bound`), so on a series it
fits, this forecaster's error is that bound's.

`LocalLevel` estimates `rho` on the recent window at every forecast (the noise of a fleet's traffic changes with its
level), smooths the window with that gain, and holds the level over the horizon.  Two additions:

- **Level shifts.** A surge is a level shift that a small gain follows slowly.  When a sample is further from the
  level than `shift_sigmas` robust standard deviations of the one-step errors, the level restarts at that sample
  (None: never).
- **The band** is the baselines' (`infercast.predictors.naive.residual_band`): the errors the same smoothing made
  from the window's earlier origins; the service calibrates it online (`infercast.predictors.conformal`).
"""

from __future__ import annotations

import math

import numpy as np

from infercast.predictors.naive import LocalForecaster, ffill, held_paths

#: Fewer samples than this in the window and the autocorrelation is not estimated: the last value (gain 1).
MIN_SAMPLES = 12


def diff_autocorrelation(y: np.ndarray) -> float:
    """The lag-1 autocorrelation of the first differences of `y`'s finite samples (0 when it cannot be estimated)."""
    d = np.diff(y[np.isfinite(y)])
    if len(d) < MIN_SAMPLES - 1:
        return 0.0
    a, b = d[1:] - d.mean(), d[:-1] - d.mean()
    den = math.sqrt(float(np.dot(a, a)) * float(np.dot(b, b)))
    return float(np.dot(a, b)) / den if den > 0 else 0.0


def steady_gain(rho: float) -> float:
    """The local-level model's steady-state Kalman gain for a lag-1 autocorrelation `rho` of the differences."""
    if rho >= 0:
        return 1.0
    q = max(0.0, -1.0 / rho - 2.0)
    p = (q + math.sqrt(q * q + 4.0 * q)) / 2.0
    return p / (p + 1.0)


def smooth(y: np.ndarray, gain: float, shift_sigmas: float | None) -> np.ndarray:
    """The level after each sample (missing samples hold it): exponential smoothing with `gain`, restarted at a sample
    more than `shift_sigmas` robust standard deviations of the one-step errors away from the level."""
    held = ffill(y)
    first = int(np.argmax(np.isfinite(held)))
    x = held[first:].tolist()
    limit = math.inf
    if shift_sigmas is not None and len(x) > 2:
        plain = _ses(x, gain, math.inf)
        errors = np.asarray(x[1:]) - plain[:-1]  # each sample against the level before it
        spread = 1.4826 * float(np.median(np.abs(errors - np.median(errors))))
        limit = shift_sigmas * spread if spread > 0 else math.inf
    out = np.full(len(y), np.nan)
    out[first:] = _ses(x, gain, limit)
    return out


def _ses(x: list[float], gain: float, limit: float) -> np.ndarray:
    """Exponential smoothing from a diffuse start: the running mean until the steady gain is larger (what the Kalman
    filter does from an unknown first level), so a small gain averages the window rather than keep its first sample."""
    level = x[0]
    out = np.empty(len(x))
    since = 0  # samples since the level (re)started
    for i, v in enumerate(x):
        e = v - level
        if abs(e) > limit:
            level, since = v, 1
        else:
            since += 1
            level += max(gain, 1.0 / since) * e
        out[i] = level
    return out


class LocalLevel(LocalForecaster):
    name = "local_level"

    def __init__(self, window_s: float = 3600.0, shift_sigmas: float | None = 6.0, min_window_samples: int = 96, **kw):
        super().__init__(**kw)
        self.window_s = float(window_s)
        self.shift_sigmas = shift_sigmas
        self.min_window_samples = int(min_window_samples)
        self.gain_: float = 1.0

    def window_seconds(self, step: float) -> float:
        # At coarse steps (ServeGen's 600 s windows) an hour is 6 samples: look back far enough to estimate rho.
        return max(self.window_s, self.min_window_samples * step)

    def _paths(self, t, y, n, step):
        self.gain_ = steady_gain(diff_autocorrelation(y))
        return held_paths(ffill(smooth(y, self.gain_, self.shift_sigmas)), n, self.band_origins)
