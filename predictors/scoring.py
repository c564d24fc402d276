"""Scores of a rolling-origin backtest: one number per question an operator asks.  Pure: arrays in, dict out.

Definitions (all at the horizon `h`, on the forecast origins `o` the backtest made):

- `mae`: mean |yhat(o + h) - y(o + h)|, over origins whose target sample exists.
- `peak_mae`: mean |max over (o, o+h] of yhat - max over (o, o+h] of y|: "how high does it go in the next h".
  Only origins whose whole future window is observed count.
- `coverage`: share of origins with y(o + h) inside [yhat_lower, yhat_upper] at h; `coverage_nominal` is the
  band's stated width (upper quantile - lower quantile, 0.8 for P10-P90).
- `pinball`: mean over origins of the pinball (quantile) loss of the three forecast values at h, averaged over
  them: yhat_lower at the lower quantile, yhat at 0.5, yhat_upper at the upper quantile.
- `breach` (only with a threshold, e.g. KV usage 0.75):
  - a *breach* is a sample c where y(c) >= threshold and the sample before is below it (first crossing after
    being below).  A breach is scored when the backtest had origins during all of [c - h, c).
  - an *alarm* is raised at origin o when the upper band crosses the threshold anywhere in (o, o + h], and y(o)
    is still below it (once over the threshold the breach has happened; forecasting it is no longer a warning).
  - `recall`: share of scored breaches with at least one alarm at an origin in [c - h, c).
  - `median_lead_seconds`: median over detected breaches of c minus the first alarm time in [c - h, c)
    (so a lead is at most h).
  - an *alarm episode* is a maximal run of consecutive origins with an alarm.  It is *true* when a breach
    starts in [first alarm, last alarm + h]; episodes whose outcome lies beyond the data are not counted.
  - `precision`: true episodes / counted episodes; `false_alarms_per_hour`: false episodes per hour of origins.
  Values are null where the denominator is zero (no breach, no alarm).
"""

from __future__ import annotations

import math

import numpy as np

from predictors.base import Forecast, History


def _at(t: np.ndarray, y: np.ndarray, when: np.ndarray, tol: float) -> np.ndarray:
    """y at each time in `when` (nearest sample within `tol`), NaN where there is none."""
    idx = np.clip(np.searchsorted(t, when), 0, len(t) - 1)
    prev = np.clip(idx - 1, 0, len(t) - 1)
    best = np.where(np.abs(t[prev] - when) < np.abs(t[idx] - when), prev, idx)
    out = y[best].astype(float)
    out[np.abs(t[best] - when) > tol] = np.nan
    return out


def pinball(y: float, q_value: float, q: float) -> float:
    d = y - q_value
    return max(q * d, (q - 1) * d)


def _nan_to_none(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def score_forecasts(
    history: History,
    origins: np.ndarray,
    forecasts: list[Forecast],
    horizon_s: float,
    threshold: float | None = None,
) -> dict:
    """Score forecasts made at `origins` against the actual `history` (the whole series, future included)."""
    t, y = history.t, history.y
    step = history.step
    tol = step / 2
    t_last = t[-1]
    abs_err, peak_err, covered, pin, uppers = [], [], [], [], []
    band = forecasts[0].band if forecasts else (0.1, 0.9)
    for o, f in zip(origins, forecasts, strict=True):
        target = f.t[-1]
        actual = _at(t, y, np.array([target]), tol)[0]
        yhat, lo, hi = f.at_horizon()
        if np.isfinite(actual) and np.isfinite(yhat):
            abs_err.append(abs(yhat - actual))
            covered.append(lo <= actual <= hi)
            pin.append((pinball(actual, lo, band[0]) + pinball(actual, yhat, 0.5) + pinball(actual, hi, band[1])) / 3)
        if o + horizon_s <= t_last + tol:
            window = (t > o + tol / 10) & (t <= o + horizon_s + tol / 10)
            fut = y[window]
            if len(fut) and np.isfinite(fut).any() and np.isfinite(f.yhat).any():
                peak_err.append(abs(float(np.nanmax(f.yhat)) - float(np.nanmax(fut))))
        uppers.append(float(np.nanmax(f.yhat_upper)) if np.isfinite(f.yhat_upper).any() else np.nan)
    out = {
        "n_origins": len(origins),
        "mae": _nan_to_none(float(np.mean(abs_err))) if abs_err else None,
        "peak_mae": _nan_to_none(float(np.mean(peak_err))) if peak_err else None,
        "coverage": _nan_to_none(float(np.mean(covered))) if covered else None,
        "coverage_nominal": round(band[1] - band[0], 6),
        "pinball": _nan_to_none(float(np.mean(pin))) if pin else None,
    }
    if threshold is not None:
        out["breach"] = breach_scores(t, y, np.asarray(origins, float), np.asarray(uppers), horizon_s, threshold)
    return out


def breach_starts(t: np.ndarray, y: np.ndarray, threshold: float) -> np.ndarray:
    """Times of first crossings: y >= threshold where the previous sample was (finite and) below it."""
    above = y >= threshold
    below = y < threshold
    idx = np.nonzero(above[1:] & below[:-1])[0] + 1
    return t[idx]


def breach_scores(
    t: np.ndarray, y: np.ndarray, origins: np.ndarray, upper_max: np.ndarray, horizon_s: float, threshold: float
) -> dict:
    """Precision, recall, lead and false alarms of "upper band crosses `threshold` within `horizon_s`"."""
    step = float(np.median(np.diff(t))) if len(t) > 1 else horizon_s
    tol = step / 2
    res = {
        "threshold": threshold,
        "breaches": 0,
        "detected": 0,
        "alarm_episodes": 0,
        "true_alarm_episodes": 0,
        "precision": None,
        "recall": None,
        "median_lead_seconds": None,
        "false_alarms_per_hour": None,
    }
    if len(origins) == 0:
        return res
    y_at_origin = _at(t, y, origins, tol)
    alarm = (upper_max >= threshold) & (y_at_origin < threshold)
    starts = breach_starts(t, y, threshold)
    # Only breaches whose whole warning window [c - h, c) was covered by origins.
    scored = starts[(starts - horizon_s >= origins[0] - tol) & (starts <= origins[-1] + step + tol)]
    leads = []
    for c in scored:
        w = (origins >= c - horizon_s - tol / 10) & (origins < c - tol / 10) & alarm
        if w.any():
            leads.append(float(c - origins[w].min()))
    res["breaches"] = len(scored)
    res["detected"] = len(leads)
    if len(scored):
        res["recall"] = len(leads) / len(scored)
    if leads:
        res["median_lead_seconds"] = float(np.median(leads))
    # Alarm episodes: runs of consecutive origins with an alarm.
    episodes = []
    i = 0
    while i < len(alarm):
        if alarm[i]:
            j = i
            while j + 1 < len(alarm) and alarm[j + 1] and origins[j + 1] - origins[j] <= step + tol:
                j += 1
            episodes.append((origins[i], origins[j]))
            i = j + 1
        else:
            i += 1
    n_true = n_counted = 0
    for a, b in episodes:
        hit = ((starts >= a - tol / 10) & (starts <= b + horizon_s + tol / 10)).any()
        if hit:
            n_true += 1
            n_counted += 1
        elif b + horizon_s <= t[-1] + tol:
            n_counted += 1
    res["alarm_episodes"] = n_counted
    res["true_alarm_episodes"] = n_true
    if n_counted:
        res["precision"] = n_true / n_counted
    hours = (origins[-1] - origins[0] + step) / 3600.0
    res["false_alarms_per_hour"] = (n_counted - n_true) / hours if hours > 0 else None
    return res
