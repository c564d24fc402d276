"""A page built for harm (issue 37, item 4): what moves before requests are hurt, read together.  Pure: a series,
its covariates and the KV forecast's band in, firing flags out.

The deployed KV page fires when the forecast's upper band reaches the actuator's line (0.75); on a fleet sized as
operators size one (median minute at 0.6 KV) that band sits over 0.75 for much of the day, so it pages for a line,
not for harm (docs/forecasting.md, "Pages scored by harm").  Harm (`infercast.predictors.harm`) is the cache
exhausted with allocation failures or preemptions at >= 0.9, an OOM, or the urgent tier's first tokens late; what
moves before it, per evaluation at t (all from samples at or before t, as Prometheus has them):

- `band`: the KV forecast's upper band at the horizon (the deployed forecaster's, `lstm_aci`);
- `queue`: the waiting queue grew over the last `QUEUE_WINDOW_S` (60 s) and is not empty: requests are queueing
  faster than the engines admit them;
- `failures`: allocation failures or preemptions in the last `QUEUE_WINDOW_S` (the engine already evicting);
- `surge`: the arrival rate of the last minute over the 5 minutes before it by at least `surge_ratio`, or the
  long-context share of the last minute up by `long_rise` over the same 5 minutes (seed 000's 15% -> 63%).

A *setting* (`HarmPage`) reads the band at a trigger and requires, beside it, one of the pressures it names
(`needs`: none, or any of queue / failures / surge); the raw alarm must hold for `persistence` evaluations (`for:`),
and once firing the page holds while the band stays at or over `trigger - hysteresis` (as the deployed alert does,
`infercast.predictors.alarm`).  Which setting ships is chosen on training runs only by bench/tune_harm_page.py's
rule (docs/forecasting.md, "A page built for harm"); `CHOSEN` is its choice, and the bench checks that they agree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from infercast.predictors.alarm import AlarmPolicy

QUEUE_WINDOW_S = 60.0
BEFORE_WINDOW_S = 300.0
PRESSURES = ("queue", "failures", "surge")


@dataclass(frozen=True)
class HarmPage:
    """One page setting (module docstring)."""

    trigger: float = 0.9
    needs: tuple[str, ...] = ()  # pressures, any of which must hold beside the band; () = the band alone
    persistence: int = 1
    hysteresis: float = 0.0
    surge_ratio: float = 1.5
    long_rise: float = 0.2

    def __post_init__(self) -> None:
        unknown = set(self.needs) - set(PRESSURES)
        if unknown:
            raise ValueError(f"unknown pressures {sorted(unknown)}; known: {PRESSURES}")

    def label(self) -> str:
        need = " and (" + " or ".join(self.needs) + ")" if self.needs else ""
        return f"band >= {self.trigger:g}{need}, for {self.persistence - 1} evals, hysteresis {self.hysteresis:g}" + (
            f", surge x{self.surge_ratio:g} / long +{self.long_rise:g}" if "surge" in self.needs else ""
        )

    def as_dict(self) -> dict:
        d = asdict(self)
        d["needs"] = list(self.needs)
        return d


def _trailing(values: np.ndarray, t: np.ndarray, origins: np.ndarray, back_s: float) -> np.ndarray:
    """Per origin: the value at the origin's sample and the one `back_s` earlier (NaN where there is none)."""
    v = np.asarray(values, float)
    i = np.searchsorted(t, origins, side="right") - 1
    j = np.searchsorted(t, origins - back_s, side="right") - 1
    now = np.where(i >= 0, v[np.clip(i, 0, None)], np.nan)
    then = np.where(j >= 0, v[np.clip(j, 0, None)], np.nan)
    return np.stack([now, then])


def _window_mean(values: np.ndarray, t: np.ndarray, origins: np.ndarray, a_s: float, b_s: float) -> np.ndarray:
    """Per origin o: the mean of `values` at samples in (o - a_s, o - b_s] (NaN-aware; NaN when none)."""
    v = np.nan_to_num(np.asarray(values, float), nan=0.0)
    ok = np.isfinite(np.asarray(values, float)).astype(float)
    cs, cn = np.concatenate([[0.0], np.cumsum(v)]), np.concatenate([[0.0], np.cumsum(ok)])
    hi = np.searchsorted(t, origins - b_s, side="right")
    lo = np.searchsorted(t, origins - a_s, side="right")
    n = cn[hi] - cn[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, (cs[hi] - cs[lo]) / np.where(n > 0, n, 1), np.nan)


def pressures(t: np.ndarray, features: dict[str, np.ndarray], origins: np.ndarray, page: HarmPage) -> dict:
    """Per origin, each pressure's flag (module docstring), from the samples at or before it."""
    t = np.asarray(t, float)
    o = np.asarray(origins, float)
    out: dict[str, np.ndarray] = {}
    w = features.get("waiting")
    if w is not None:
        now, then = _trailing(np.nan_to_num(np.asarray(w, float)), t, o, QUEUE_WINDOW_S)
        out["queue"] = (now > 0) & (now > np.nan_to_num(then, nan=np.inf))
    else:
        out["queue"] = np.zeros(len(o), bool)
    f = features.get("alloc_failures_total")
    if f is not None:
        now, then = _trailing(np.nan_to_num(np.asarray(f, float)), t, o, QUEUE_WINDOW_S)
        out["failures"] = np.nan_to_num(now - then, nan=0.0) > 0
    else:
        out["failures"] = np.zeros(len(o), bool)
    surge = np.zeros(len(o), bool)
    r = features.get("rps")
    if r is not None:
        last = _window_mean(r, t, o, QUEUE_WINDOW_S, 0.0)
        before = _window_mean(r, t, o, QUEUE_WINDOW_S + BEFORE_WINDOW_S, QUEUE_WINDOW_S)
        with np.errstate(invalid="ignore", divide="ignore"):
            surge |= np.nan_to_num(last / before, nan=0.0, posinf=0.0) >= page.surge_ratio
    s = features.get("long_share")
    if s is not None:
        last = _window_mean(s, t, o, QUEUE_WINDOW_S, 0.0)
        before = _window_mean(s, t, o, QUEUE_WINDOW_S + BEFORE_WINDOW_S, QUEUE_WINDOW_S)
        surge |= np.nan_to_num(last - before, nan=0.0) >= page.long_rise
    out["surge"] = surge
    return out


def fire(
    page: HarmPage,
    origins: np.ndarray,
    upper: np.ndarray,
    t: np.ndarray,
    features: dict[str, np.ndarray],
    contiguous: np.ndarray | None = None,
) -> np.ndarray:
    """Firing flags of `page` at `origins` (ascending), given the band's upper value at the horizon at each origin
    (`upper`, NaN: no forecast) and the series' sample times `t` and covariates `features`."""
    upper = np.asarray(upper, float)
    if len(upper) != len(origins):
        raise ValueError(f"{len(origins)} origins but {len(upper)} band values")
    raw = np.nan_to_num(upper, nan=-np.inf) >= page.trigger
    if page.needs:
        p = pressures(t, features, origins, page)
        raw &= np.logical_or.reduce([p[n] for n in page.needs])
    # through the deployed alert's logic: `for:` on the raw alarm, hysteresis on the band itself
    signal = np.where(raw, upper, -np.inf)
    policy = AlarmPolicy(page.trigger, page.persistence, page.hysteresis)
    return policy.run(signal, contiguous, hold=upper)


#: The setting bench/tune_harm_page.py chose on training runs (docs/results/tune-harm-page.json); None until a run.
#: Training recall 3/18, no false page, paged 25% of the time, median lead 525 s: the band alone at 0.75 paged 16/18
#: only by staying on 89% of the time (docs/forecasting.md, "A page built for harm").
CHOSEN: HarmPage | None = HarmPage(trigger=0.9, needs=("queue",), persistence=3, hysteresis=0.0)

__all__ = ["CHOSEN", "PRESSURES", "HarmPage", "fire", "pressures"]
