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
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from infercast.predictors.base import DEFAULT_BAND, Forecast, Forecaster, History

FACTOR_BOUNDS = (0.05, 50.0)

#: A matrix of histories, or a function reading its elements `(rows, cols) -> values` (`AdaptiveBandBank`).
YSource = np.ndarray | Callable[[np.ndarray, np.ndarray], np.ndarray]


def due_outcomes(pending: list, history: History, horizon_t: Callable[[object], float]) -> tuple[list, list]:
    """Split forecasts awaiting their outcome: ([(forecast, the value observed at its horizon)], [still pending]).
    A forecast whose horizon has passed without a finite sample there is dropped (nothing to learn from it)."""
    t_now = float(history.t[-1])
    tol = history.step / 2 if len(history.t) > 1 else 0.0
    done, keep = [], []
    for f in pending:
        t_h = horizon_t(f)
        if t_h > t_now + tol:
            keep.append(f)
            continue
        i = int(np.clip(np.searchsorted(history.t, t_h), 0, len(history.t) - 1))
        y = float(history.y[i])
        if abs(history.t[i] - t_h) <= tol and np.isfinite(y):
            done.append((f, y))
    return done, keep


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
        outcomes, self._pending = due_outcomes(self._pending, history, lambda f: float(f.t[-1]))
        for f, y in outcomes:
            band = getattr(self.inner, "band", DEFAULT_BAND)
            miss_up = float(y > f.upper[-1])
            miss_lo = float(y < f.lower[-1])
            lo_b, hi_b = (math.log(b) for b in FACTOR_BOUNDS)
            self.log_up = min(hi_b, max(lo_b, self.log_up + self.gamma * (miss_up - (1.0 - band[1]))))
            self.log_lo = min(hi_b, max(lo_b, self.log_lo + self.gamma * (miss_lo - band[0])))
            self.updates += 1

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


class AdaptiveBandBank:
    """`AdaptiveBand` for many series at once: the state of one series per row, in arrays, updated in numpy.

    Row `key` behaves exactly as one `AdaptiveBand` wrapping a model whose forecasts are handed in (the predictor's
    batched tick, `infercast.predictors.service`): the same learning from the outcomes at each issued forecast's
    horizon, in the order they were issued, the same clipping and floors.  The series of one call share one time grid
    `t` and end at its last point; each starts at its own index into it.
    """

    def __init__(
        self,
        gamma: float = 0.05,
        clip: tuple[float, float] = (-math.inf, math.inf),
        min_width: float = 1e-3,
        band: tuple[float, float] = DEFAULT_BAND,
    ) -> None:
        self.gamma, self.clip, self.min_width, self.band = gamma, clip, min_width, band
        self.rows: dict[object, int] = {}
        self.log_up = np.zeros(0)
        self.log_lo = np.zeros(0)
        self.updates = np.zeros(0, dtype=np.int64)
        self.last_t = np.zeros(0)
        # issued forecasts not yet learned from, oldest first: the horizon's time and the band there as issued
        self.pend_t = np.full((0, 4), np.nan)
        self.pend_lo = np.full((0, 4), np.nan)
        self.pend_up = np.full((0, 4), np.nan)
        self.pend_n = np.zeros(0, dtype=np.int64)
        #: the shortcuts below (the last call's rows reused, whole arrays instead of gathered rows, one compaction
        #: order for every row); off, every call takes the general path (the tests compare the two)
        self.fast = True
        self._last_keys: list | None = None
        self._last_r = np.zeros(0, dtype=np.int64)

    def factors(self, key: object) -> tuple[float, float]:
        """(lower, upper) width factors of one series now."""
        i = self.rows[key]
        return math.exp(self.log_lo[i]), math.exp(self.log_up[i])

    def _index(self, keys: list) -> np.ndarray:
        """Each key's row (new keys get new rows).  A tick hands in the same keys as the last, in the same order:
        checked (a list comparison) and the last answer reused instead of a lookup per key."""
        if self.fast and self._last_keys is not None and keys == self._last_keys:
            return self._last_r
        r = self._lookup(keys)
        self._last_keys, self._last_r = list(keys), r
        return r

    def _rows_of(self, r: np.ndarray) -> np.ndarray | slice:
        """What indexes rows `r` of the state arrays: a slice (views, no copies) when `r` is every row in order, as it
        is on a steady tick; else `r` itself."""
        if self.fast and len(r) == len(self.log_up) and (not len(r) or (r[0] == 0 and (np.diff(r) == 1).all())):
            return slice(None)
        return r

    def _lookup(self, keys: list) -> np.ndarray:
        new = [k for k in keys if k not in self.rows]
        if new:
            for k in new:
                self.rows[k] = len(self.rows)
            m = len(new)
            self.log_up = np.concatenate([self.log_up, np.zeros(m)])
            self.log_lo = np.concatenate([self.log_lo, np.zeros(m)])
            self.updates = np.concatenate([self.updates, np.zeros(m, dtype=np.int64)])
            self.last_t = np.concatenate([self.last_t, np.full(m, -math.inf)])
            width = self.pend_t.shape[1]
            self.pend_t = np.vstack([self.pend_t, np.full((m, width), np.nan)])
            self.pend_lo = np.vstack([self.pend_lo, np.full((m, width), np.nan)])
            self.pend_up = np.vstack([self.pend_up, np.full((m, width), np.nan)])
            self.pend_n = np.concatenate([self.pend_n, np.zeros(m, dtype=np.int64)])
        return np.fromiter((self.rows[k] for k in keys), dtype=np.int64, count=len(keys))

    def _learn(self, r: np.ndarray, t: np.ndarray, y: YSource, start: np.ndarray) -> None:
        """`AdaptiveBand._learn` for rows `r`: histories `t[start[i]:]`, `y[i, start[i]:]`."""
        y_at = y if callable(y) else (lambda rows, cols: y[rows, cols])
        r_all = r
        r = self._rows_of(r)  # type: ignore[assignment]  # (a slice where that is the same rows)
        t_now = float(t[-1])
        back = t_now < self.last_t[r]
        if back.any():  # a history that goes back in time is a new series
            rb = r_all[back]
            self.log_up[rb] = self.log_lo[rb] = 0.0
            self.updates[rb] = 0
            self.pend_n[rb] = 0
            self.pend_t[rb] = self.pend_lo[rb] = self.pend_up[rb] = np.nan
        self.last_t[r] = t_now
        width = self.pend_t.shape[1]
        if not width or not self.pend_n[r].any():
            return
        length = len(t) - start
        step = float(np.median(np.diff(t))) if len(t) > 1 else 0.0
        tol = np.where(length > 1, step / 2, 0.0)
        pt, plo, pup = self.pend_t[r], self.pend_lo[r], self.pend_up[r]
        valid = np.arange(width)[None, :] < self.pend_n[r][:, None]
        done = valid & ~(pt > t_now + tol[:, None])
        lo_b, hi_b = (math.log(b) for b in FACTOR_BOUNDS)
        rows = np.arange(len(r_all))
        log_up, log_lo, updates = self.log_up[r], self.log_lo[r], self.updates[r]
        for k in range(width):
            on = done[:, k]
            if not on.any():
                continue
            te = pt[:, k]
            i = np.clip(np.searchsorted(t, np.where(on, te, t_now)), start, len(t) - 1)
            yv = y_at(rows, i)
            seen = on & (np.abs(t[i] - te) <= tol) & np.isfinite(yv)
            if not seen.any():
                continue
            miss_up = (yv > pup[:, k]).astype(float)
            miss_lo = (yv < plo[:, k]).astype(float)
            new_up = np.minimum(hi_b, np.maximum(lo_b, log_up + self.gamma * (miss_up - (1.0 - self.band[1]))))
            new_lo = np.minimum(hi_b, np.maximum(lo_b, log_lo + self.gamma * (miss_lo - self.band[0])))
            log_up = np.where(seen, new_up, log_up)
            log_lo = np.where(seen, new_lo, log_lo)
            updates = updates + seen
        self.log_up[r], self.log_lo[r], self.updates[r] = log_up, log_lo, updates
        keep = valid & ~done
        if self.fast and len(keep) and (keep == keep[0]).all():
            # every row keeps the same columns (a steady tick: one forecast per series came due): one order for all,
            # the same arrays as the general path's
            order1 = np.argsort(~keep[0], kind="stable")
            self.pend_t[r] = np.where(keep[0][order1], pt[:, order1], np.nan)
            self.pend_lo[r] = plo[:, order1]
            self.pend_up[r] = pup[:, order1]
            self.pend_n[r] = int(keep[0].sum())
            return
        order = np.argsort(~keep, axis=1, kind="stable")  # the kept ones first, in the order they were issued
        self.pend_t[r] = np.where(np.take_along_axis(keep, order, 1), np.take_along_axis(pt, order, 1), np.nan)
        self.pend_lo[r] = np.take_along_axis(plo, order, 1)
        self.pend_up[r] = np.take_along_axis(pup, order, 1)
        self.pend_n[r] = keep.sum(axis=1)

    def forecast(
        self,
        keys: list,
        t: np.ndarray,
        y: YSource,
        start: np.ndarray,
        t_future: np.ndarray,
        lower: np.ndarray,
        yhat: np.ndarray,
        upper: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Learn from each series' history, then rescale the band of the forecasts handed in: (yhat, lower, upper),
        each (len(keys), len(t_future)), as `AdaptiveBand.forecast` returns them one series at a time.  `y` is the
        histories' values, (len(keys), len(t)), or a function `(rows, cols) -> y[rows, cols]` that reads them where
        they are (the batched tick's rows live in two matrices, copied nowhere)."""
        r = self.learn(keys, t, y, start)
        return self.widen(r, t_future, lower, yhat, upper)

    def learn(self, keys: list, t: np.ndarray, y: YSource, start: np.ndarray) -> np.ndarray:
        """`forecast`'s first half: learn from each series' history (the outcomes of the forecasts issued earlier);
        the rows of `keys`, for `widen`.  It needs none of this tick's forecasts: the batched tick runs it while the
        LSTM makes them."""
        r = self._index(keys)
        self._learn(r, t, y, np.asarray(start, dtype=np.int64))
        return r

    def widen(
        self, r: np.ndarray, t_future: np.ndarray, lower: np.ndarray, yhat: np.ndarray, upper: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`forecast`'s second half: rescale the band of the forecasts of rows `r` (`learn`'s answer) and issue
        them (remembered until their outcome is in)."""
        s_lo = np.exp(self.log_lo[r])[:, None]
        s_up = np.exp(self.log_up[r])[:, None]
        up_w = np.maximum(upper - yhat, self.min_width)
        lo_w = np.maximum(yhat - lower, self.min_width)
        lo, hi = self.clip
        out_y = np.clip(yhat, lo, hi)
        out_up = np.maximum(np.clip(yhat + s_up * up_w, lo, hi), out_y)
        out_lo = np.minimum(np.clip(yhat - s_lo * lo_w, lo, hi), out_y)
        self._issue(r, float(t_future[-1]), out_lo[:, -1], out_up[:, -1])
        return out_y, out_lo, out_up

    def _issue(self, r: np.ndarray, t_end: float, lower: np.ndarray, upper: np.ndarray) -> None:
        col = self.pend_n[r]
        width = self.pend_t.shape[1]
        if len(col) and int(col.max()) >= width:
            grow = max(width, 4)
            pad = np.full((self.pend_t.shape[0], grow), np.nan)
            self.pend_t = np.hstack([self.pend_t, pad])
            self.pend_lo = np.hstack([self.pend_lo, pad])
            self.pend_up = np.hstack([self.pend_up, pad])
        self.pend_t[r, col] = t_end
        self.pend_lo[r, col] = lower
        self.pend_up[r, col] = upper
        self.pend_n[r] = col + 1
