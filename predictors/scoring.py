"""Scores of a rolling-origin backtest: one number per question an operator asks.  Pure: arrays in, dict out.

Definitions (all at the horizon `h`, on the forecast origins `o` the backtest made):

- `mae`: mean |yhat(o + h) - y(o + h)|, over origins whose target sample exists.
- `peak_mae`: mean |max over (o, o+h] of yhat - max over (o, o+h] of y|: "how high does it go in the next h".
  Only origins whose whole future window is observed count.
- `coverage`: share of origins with y(o + h) inside [yhat_lower, yhat_upper] at h; `coverage_nominal` is the
  band's stated width (upper quantile - lower quantile, 0.8 for P10-P90).
- `pinball`: mean over origins of the pinball (quantile) loss of the three forecast values at h, averaged over
  them: yhat_lower at the lower quantile, yhat at 0.5, yhat_upper at the upper quantile.
- `breach` (only with a threshold, e.g. KV usage 0.75; the operator's question is "will it go over in the next
  h?", so the scores judge the forecast's upper band as a pager):
  - an *alarm* at origin o: the upper band reaches the threshold anywhere in (o, o + h] while y(o) is below it.
    Origins already at or over the threshold are not scored (the breach is there; the threshold alert speaks,
    not the forecast), nor are those whose y(o) is missing.
  - *per origin*: an origin is scored when y(o) is below the threshold and its window (o, o + h] lies inside the
    data.  It is *positive* when some observed y in (o, o + h] reaches the threshold (a crossing within the
    horizon).  `origins_scored`, `origins_crossing` (positives), `alarms`, `true_alarms` count them;
    `origin_precision` = true alarms / alarms, `origin_recall` = true alarms / positives, `origin_f1` =
    2 TP / (2 TP + FP + FN).  An upper band that always alarms has precision = the share of positives and an F1
    of 2p / (1 + p); one that never alarms has recall 0 and F1 0.  `origin_f1` is the headline breach score.
  - a *breach* is a sample c where y(c) >= threshold and the sample before is (finite and) below it.  A breach is
    scored when the backtest had origins during all of [c - h, c).  `breaches` counts them, `detected` those with
    an alarm at an origin in [c - h, c); `event_recall` = detected / breaches.
  - an *alarm episode* is a maximal run of consecutive origins with an alarm.  `median_lead_seconds`: median over
    detected breaches of c minus the first alarm of the episode holding the last alarm before c.  It is not
    capped at h: a page that went out 20 minutes early has a 20-minute lead, and its first 15 minutes are false
    alarms below.
  - *lead against what was possible*: a breach's *possible lead* is the largest lead any alarm could have had:
    the time from the first sample after the series was last at or over the threshold before c (when it left the
    threshold; the series' start if it never was) to c, capped at h.  An alarm needs y(o) below the threshold, so
    no pager can page earlier in that calm, and a detection counts only from c - h.  A breach's *lead share* is
    min(lead, possible lead) / possible lead, 0 when missed; `lead_share` is its mean over the scored breaches,
    so a pager that pages at every origin under the threshold (`always_alarm`) reads 1 and one that never pages 0,
    whatever the spacing of the breaches; it is read beside `false_alarms_per_hour`, which is what paging early
    costs.  `possible_lead_median_seconds` is the median possible lead: how much room the series leaves at all.
  - *calm breaches*: those with at least `CALM_SECONDS` (300 s) under the threshold before them (their possible
    lead is the whole horizon when h <= 300 s).  `calm_breaches` counts them, `calm_detected` those paged, and
    `calm_median_lead_seconds` is the median over them of min(lead, possible lead), 0 for a missed one: the
    absolute lead where there was room for one, which a pager that misses half of them cannot lift.
  - a *false alarm step* is an alarm at a scored origin with no crossing within the horizon (a false positive
    above); `false_alarm_steps` counts them, `false_alarm_episodes` the maximal runs of consecutive ones, and
    `false_alarms_per_hour` = false alarm episodes per hour of origins (last origin - first origin + one step).
  Ratios are null where their denominator is zero (no alarm, no positive, no breach).
"""

from __future__ import annotations

import math

import numpy as np

from infercast.predictors.alarm import AlarmPolicy
from infercast.predictors.base import DEFAULT_BAND, Forecast, History

#: A breach with at least this long under the threshold before it is a *calm* breach (the issue's five minutes).
CALM_SECONDS = 300.0


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
    policy: AlarmPolicy | None = None,
) -> dict:
    """Score forecasts made at `origins` against the actual `history` (the whole series, future included).

    With a threshold, `breach` scores the raw crossing of the upper band anywhere in the horizon; with a `policy`
    too, `alarm` scores the alert as deployed: the upper band published at the horizon, through the policy
    (persistence, hysteresis).
    """
    t, y = history.t, history.y
    step = history.step
    tol = step / 2
    t_last = t[-1]
    abs_err, peak_err, covered, pin, uppers, at_h, yhats = [], [], [], [], [], [], []
    band = forecasts[0].band if forecasts else DEFAULT_BAND
    for o, f in zip(origins, forecasts, strict=True):
        target = f.t[-1]
        actual = _at(t, y, np.array([target]), tol)[0]
        yhat, lo, hi = f.at_horizon()
        yhats.append(yhat)
        if np.isfinite(actual) and np.isfinite(yhat):
            abs_err.append(abs(yhat - actual))
            covered.append(lo <= actual <= hi)
            pin.append((pinball(actual, lo, band[0]) + pinball(actual, yhat, 0.5) + pinball(actual, hi, band[1])) / 3)
        if o + horizon_s <= t_last + tol:
            fut = y[_in_horizon(t, o, horizon_s, tol)]
            if len(fut) and np.isfinite(fut).any() and np.isfinite(f.yhat).any():
                peak_err.append(abs(float(np.nanmax(f.yhat)) - float(np.nanmax(fut))))
        uppers.append(float(np.nanmax(f.yhat_upper)) if np.isfinite(f.yhat_upper).any() else np.nan)
        at_h.append(float(hi))
    out = {
        "n_origins": len(origins),
        "mae": _nan_to_none(float(np.mean(abs_err))) if abs_err else None,
        "peak_mae": _nan_to_none(float(np.mean(peak_err))) if peak_err else None,
        "coverage": _nan_to_none(float(np.mean(covered))) if covered else None,
        "coverage_nominal": round(band[1] - band[0], 6),
        "pinball": _nan_to_none(float(np.mean(pin))) if pin else None,
        # the highest value it ever forecast at the horizon (a forecaster that extrapolates a surge shows here)
        "max_yhat": _nan_to_none(float(np.nanmax(yhats))) if np.isfinite(yhats).any() else None,
    }
    if threshold is not None:
        o_arr, u_arr = np.asarray(origins, float), np.asarray(uppers)
        out["breach"] = breach_scores(t, y, o_arr, u_arr, horizon_s, threshold)
        if policy is not None:
            # as the alert rule reads it: the upper band published at the horizon
            out["alarm"] = breach_scores(t, y, o_arr, np.asarray(at_h), horizon_s, threshold, policy)
    return out


def breach_starts(t: np.ndarray, y: np.ndarray, threshold: float) -> np.ndarray:
    """Times of first crossings: y >= threshold where the previous sample was (finite and) below it."""
    above = y >= threshold
    below = y < threshold
    idx = np.nonzero(above[1:] & below[:-1])[0] + 1
    return t[idx]


def calm_before(t: np.ndarray, y: np.ndarray, threshold: float, c: float) -> float:
    """Seconds the series had been under `threshold` before the crossing at `c`: from the first sample after the
    last one at or over it (the series' first sample if none was) to c."""
    before = t < c
    over = np.nonzero(before & (y >= threshold))[0]
    if not len(over):
        return float(c - t[0])
    nxt = over[-1] + 1
    return float(c - t[nxt]) if nxt < len(t) else 0.0


def _runs(flags: np.ndarray, origins: np.ndarray, max_gap: float) -> list[tuple[int, int]]:
    """(first, last) indices of maximal runs of consecutive True flags (origins at most `max_gap` apart)."""
    runs: list[tuple[int, int]] = []
    for i in np.nonzero(flags)[0]:
        if runs and runs[-1][1] == i - 1 and origins[i] - origins[i - 1] <= max_gap:
            runs[-1] = (runs[-1][0], int(i))
        else:
            runs.append((int(i), int(i)))
    return runs


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def breach_scores(
    t: np.ndarray,
    y: np.ndarray,
    origins: np.ndarray,
    upper_max: np.ndarray,
    horizon_s: float,
    threshold: float,
    policy: AlarmPolicy | None = None,
    upper_at_horizon: np.ndarray | None = None,
) -> dict:
    """Scores of "upper band reaches `threshold` within `horizon_s`" as a pager (see the module docstring).

    `upper_max[i]` is the highest upper band over (origins[i], origins[i] + horizon_s] (NaN: no forecast there).
    With a `policy` (`infercast.predictors.alarm`: persistence and hysteresis), an alarm is the policy firing at the
    origin instead of the raw crossing: the scores of the alert as deployed (`upper_at_horizon`, the published band, is
    what its hysteresis holds on).
    """
    step = float(np.median(np.diff(t))) if len(t) > 1 else horizon_s
    tol = step / 2
    res: dict = {
        "threshold": threshold,
        "origins_scored": 0,
        "origins_crossing": 0,
        "alarms": 0,
        "true_alarms": 0,
        "origin_precision": None,
        "origin_recall": None,
        "origin_f1": None,
        "breaches": 0,
        "detected": 0,
        "event_recall": None,
        "median_lead_seconds": None,
        "lead_share": None,
        "possible_lead_median_seconds": None,
        "calm_breaches": 0,
        "calm_detected": 0,
        "calm_median_lead_seconds": None,
        "false_alarm_steps": 0,
        "false_alarm_episodes": 0,
        "false_alarms_per_hour": None,
    }
    if len(origins) == 0:
        return res
    y_at_origin = _at(t, y, origins, tol)
    below = np.isfinite(y_at_origin) & (y_at_origin < threshold)
    if policy is None:
        alarm = below & (np.nan_to_num(upper_max, nan=-np.inf) >= threshold)
    else:
        contiguous = np.concatenate([[True], np.diff(origins) <= step + tol])
        alarm = below & policy.run(upper_max, contiguous, upper_at_horizon)
        res["policy"] = {"persistence": policy.persistence, "hysteresis": policy.hysteresis}
    judged, crossing = _crossings(t, y, origins, horizon_s, threshold, tol)
    scored = below & judged
    res.update(_origin_scores(scored, alarm, crossing))
    max_gap = step + tol
    res.update(_event_scores(t, y, origins, alarm, horizon_s, threshold, step, max_gap))
    false_step = scored & alarm & ~crossing
    n_false = len(_runs(false_step, origins, max_gap))
    res["false_alarm_steps"] = int(false_step.sum())
    res["false_alarm_episodes"] = n_false
    hours = (origins[-1] - origins[0] + step) / 3600.0
    res["false_alarms_per_hour"] = n_false / hours if hours > 0 else None
    return res


def _in_horizon(t: np.ndarray, o: float, horizon_s: float, tol: float) -> np.ndarray:
    """Which samples of `t` lie in the forecast window (o, o + horizon_s] of the origin `o`."""
    return (t > o + tol / 10) & (t <= o + horizon_s + tol / 10)


def _crossings(
    t: np.ndarray, y: np.ndarray, origins: np.ndarray, horizon_s: float, threshold: float, tol: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per origin: (judged, crossing): its window (o, o + h] lies inside the data and holds an observed sample,
    and one of those samples reaches the threshold."""
    judged = np.zeros(len(origins), bool)
    crossing = np.zeros(len(origins), bool)
    for i, o in enumerate(origins):
        if o + horizon_s > t[-1] + tol:
            continue
        fut = y[_in_horizon(t, o, horizon_s, tol)]
        fut = fut[np.isfinite(fut)]
        if len(fut):
            judged[i] = True
            crossing[i] = bool((fut >= threshold).any())
    return judged, crossing


def _origin_scores(scored: np.ndarray, alarm: np.ndarray, crossing: np.ndarray) -> dict:
    """The per-origin confusion counts and ratios over the `scored` origins."""
    tp = int((scored & alarm & crossing).sum())
    fp = int((scored & alarm & ~crossing).sum())
    fn = int((scored & ~alarm & crossing).sum())
    return {
        "origins_scored": int(scored.sum()),
        "origins_crossing": tp + fn,
        "alarms": tp + fp,
        "true_alarms": tp,
        "origin_precision": _ratio(tp, tp + fp),
        "origin_recall": _ratio(tp, tp + fn),
        "origin_f1": _ratio(2 * tp, 2 * tp + fp + fn),
    }


def _event_scores(
    t: np.ndarray,
    y: np.ndarray,
    origins: np.ndarray,
    alarm: np.ndarray,
    horizon_s: float,
    threshold: float,
    step: float,
    max_gap: float,
) -> dict:
    """The breach scores: each scored crossing, detected by an alarm in [c - h, c); the lead runs from the start
    of its alarm episode, and is judged against the lead the calm before the crossing made possible."""
    tol = step / 2
    episode_start = np.full(len(origins), np.nan)
    for a, b in _runs(alarm, origins, max_gap):
        episode_start[a : b + 1] = origins[a]
    starts = breach_starts(t, y, threshold)
    scored_starts = starts[(starts - horizon_s >= origins[0] - tol) & (starts <= origins[-1] + step + tol)]
    leads, shares, calm_leads = [], [], []
    possible_all = []
    for c in scored_starts:
        w = np.nonzero((origins >= c - horizon_s - tol / 10) & (origins < c - tol / 10) & alarm)[0]
        lead = float(c - episode_start[w[-1]]) if len(w) else None
        if lead is not None:
            leads.append(lead)
        calm = calm_before(t, y, threshold, float(c))
        possible = min(horizon_s, calm)
        possible_all.append(possible)
        got = 0.0 if lead is None else min(lead, possible)
        shares.append(got / possible if possible > 0 else 0.0)
        if calm >= CALM_SECONDS - tol / 10:
            calm_leads.append((got, lead is not None))
    return {
        "breaches": len(scored_starts),
        "detected": len(leads),
        "event_recall": _ratio(len(leads), len(scored_starts)),
        "median_lead_seconds": float(np.median(leads)) if leads else None,
        "lead_share": float(np.mean(shares)) if shares else None,
        "possible_lead_median_seconds": float(np.median(possible_all)) if shares else None,
        "calm_breaches": len(calm_leads),
        "calm_detected": sum(1 for _, hit in calm_leads if hit),
        "calm_median_lead_seconds": float(np.median([g for g, _ in calm_leads])) if calm_leads else None,
    }
