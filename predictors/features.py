"""Turn histories into the LSTM's input tensors and targets.  Pure numpy: no torch, no I/O, no clock.

One encoding serves training and inference, so a window seen at inference time is built exactly as the windows
the model was trained on.  Every window is made scale-free where the scale is a property of the fleet and not
of the situation: request rate and running requests enter as log-ratios to their own mean over the window
(a 200 req/s pool and a 12,000 req/s pool look alike when both double), while KV usage, long-context share and
fragmentation are already 0-1 ratios and enter as they are.  The fleet's scale comes back as *series features*
(traffic level, KV level and volatility, and which covariates the source gives), which is how one global model
serves every pool and version.

A covariate a source doesn't give (NaN, or absent from `History.features`) is set to 0 *and flagged* by a mask
channel: the model is told that it doesn't know, it is never handed an invented value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from infercast.predictors.base import History

#: Covariates the exporter gives (History.features keys), in channel order.
COVARIATES: tuple[str, ...] = ("rps", "long_share", "running", "waiting", "fragmentation")

#: Per-step channels: name -> meaning.  Each covariate has a value channel and a mask channel (1 = observed).
STEP_CHANNELS: tuple[str, ...] = (
    "y",  # target (KV usage), last observation carried forward where missing
    "y_mask",
    "y_rel",  # y minus the last observed y: the shape of the recent path
    "rps_logratio",
    "rps_mask",
    "long_share",
    "long_share_mask",
    "running_logratio",
    "running_mask",
    "waiting_log",
    "waiting_mask",
    "fragmentation",
    "fragmentation_mask",
)
#: Per-window series features (fed to the output head alongside the LSTM state).
SERIES_CHANNELS: tuple[str, ...] = (
    "y_last",
    "y_mean",
    "y_std",
    "rps_level",  # log1p(mean rps) / 10: the traffic scale of this pool
    "rps_present",
    "long_share_present",
    "running_present",
    "waiting_present",
    "fragmentation_present",
)

_LOG_CLIP = 5.0


class StepMismatchError(ValueError):
    """A history's sampling step is too far from the model's to be resampled honestly."""


@dataclass(frozen=True)
class EncodedWindows:
    """Encoded windows: `x` (n, lookback, STEP_CHANNELS), `s` (n, SERIES_CHANNELS), `y_last` (n,)."""

    x: np.ndarray
    s: np.ndarray
    y_last: np.ndarray


def to_grid(history: History, step_s: float, max_coarser: float = 4.0) -> History:
    """The history on the model's step, ending at the history's last sample.

    Finer histories are resampled by taking, at each model grid time, the latest sample at or before it (what a
    scrape at that time would have read); histories up to `max_coarser` times coarser are linearly interpolated.
    Anything coarser is refused: interpolating a 5-minute series to 15 s would hand the model a smoothness it
    never saw.  Only the past is used: the grid ends at the last sample, so resampling cannot look ahead.
    """
    h_step = history.step
    if abs(h_step - step_s) <= 0.01 * step_s:
        return history
    if h_step > max_coarser * step_s:
        raise StepMismatchError(
            f"history {history.series_id or '(unnamed)'} has a {h_step:g} s step, more than {max_coarser:g}x the "
            f"model's {step_s:g} s step; resample it to {step_s:g} s or train a model with --step {h_step:g}"
        )
    t_end = float(history.t[-1])
    n = int(np.floor((t_end - float(history.t[0])) / step_s)) + 1
    grid = t_end - step_s * np.arange(n - 1, -1, -1)

    def resample(v: np.ndarray) -> np.ndarray:
        ok = np.isfinite(v)
        if ok.sum() == 0:
            return np.full(n, np.nan)
        tt, vv = history.t[ok], v[ok]
        if h_step < step_s:
            idx = np.searchsorted(tt, grid, side="right") - 1
            out = vv[np.clip(idx, 0, None)].astype(float)
            out[idx < 0] = np.nan
            # a grid point whose latest sample is much older than one history step saw a gap
            stale = grid - tt[np.clip(idx, 0, None)] > 1.5 * step_s
            out[stale] = np.nan
            return out
        out = np.interp(grid, tt, vv)
        out[(grid < tt[0]) | (grid > tt[-1])] = np.nan
        return out

    return History(
        grid,
        resample(history.y),
        {k: resample(v) for k, v in history.features.items()},
        history.series_id,
    )


def _ffill(a: np.ndarray) -> np.ndarray:
    """Carry the last finite value forward along the last axis; leading NaNs take the first finite value."""
    a = np.array(a, dtype=float, copy=True)
    ok = np.isfinite(a)
    idx = np.where(ok, np.arange(a.shape[-1]), 0)
    np.maximum.accumulate(idx, axis=-1, out=idx)
    out = np.take_along_axis(a, idx, axis=-1)
    # leading NaNs (before any finite value): back-fill with the first finite value
    first = np.argmax(ok, axis=-1)
    first_val = np.take_along_axis(a, first[..., None], axis=-1)
    lead = ~np.maximum.accumulate(ok, axis=-1)
    out = np.where(lead, first_val, out)
    return np.where(np.isfinite(out), out, 0.0)


def _masked_mean(v: np.ndarray, m: np.ndarray) -> np.ndarray:
    cnt = m.sum(axis=-1)
    return np.where(cnt > 0, np.where(m, v, 0.0).sum(axis=-1) / np.maximum(cnt, 1), 0.0)


def encode(raw: dict[str, np.ndarray]) -> EncodedWindows:
    """Encode raw windows: `raw["y"]` and each covariate are (n, lookback) arrays with NaN for missing samples.

    A covariate absent from `raw` counts as missing everywhere.
    """
    y = np.asarray(raw["y"], dtype=float)
    n, lookback = y.shape
    y_ok = np.isfinite(y)
    yf = _ffill(y)
    y_last = yf[:, -1]
    x = np.zeros((n, lookback, len(STEP_CHANNELS)), dtype=np.float32)
    s = np.zeros((n, len(SERIES_CHANNELS)), dtype=np.float32)
    x[:, :, 0] = yf
    x[:, :, 1] = y_ok
    x[:, :, 2] = yf - y_last[:, None]
    s[:, 0] = y_last
    s[:, 1] = _masked_mean(yf, y_ok)
    s[:, 2] = np.sqrt(np.maximum(_masked_mean((yf - s[:, 1:2]) ** 2, y_ok), 0.0))

    def cov(name: str) -> tuple[np.ndarray, np.ndarray]:
        v = raw.get(name)
        if v is None:
            return np.zeros((n, lookback)), np.zeros((n, lookback), dtype=bool)
        v = np.asarray(v, dtype=float)
        m = np.isfinite(v) & (v >= 0)
        return np.where(m, v, 0.0), m

    rps, m = cov("rps")
    lr = np.log1p(rps)
    ref = _masked_mean(lr, m)
    x[:, :, 3] = np.where(m, np.clip(lr - ref[:, None], -_LOG_CLIP, _LOG_CLIP), 0.0)
    x[:, :, 4] = m
    s[:, 3] = ref / 10.0
    s[:, 4] = m.any(axis=-1)

    ls, m = cov("long_share")
    x[:, :, 5] = np.clip(ls, 0.0, 1.0)
    x[:, :, 6] = m
    s[:, 5] = m.any(axis=-1)

    run, m = cov("running")
    lr = np.log1p(run)
    ref = _masked_mean(lr, m)
    x[:, :, 7] = np.where(m, np.clip(lr - ref[:, None], -_LOG_CLIP, _LOG_CLIP), 0.0)
    x[:, :, 8] = m
    s[:, 6] = m.any(axis=-1)

    wait, m = cov("waiting")
    x[:, :, 9] = np.clip(np.log1p(wait) / 8.0, 0.0, 2.0)
    x[:, :, 10] = m
    s[:, 7] = m.any(axis=-1)

    fr, m = cov("fragmentation")
    x[:, :, 11] = np.clip(fr, 0.0, 1.0)
    x[:, :, 12] = m
    s[:, 8] = m.any(axis=-1)
    return EncodedWindows(x, s, y_last.astype(np.float32))


def tail_windows(histories: Sequence[History], lookback: int) -> dict[str, np.ndarray]:
    """The last `lookback` samples of each history (already on the model grid), front-padded with NaN."""
    n = len(histories)
    raw = {"y": np.full((n, lookback), np.nan)}
    for name in COVARIATES:
        raw[name] = np.full((n, lookback), np.nan)
    for i, h in enumerate(histories):
        k = min(lookback, len(h.t))
        raw["y"][i, lookback - k :] = h.y[-k:]
        for name in COVARIATES:
            v = h.features.get(name)
            if v is not None:
                raw[name][i, lookback - k :] = v[-k:]
    return raw


def training_windows(
    histories: Sequence[History],
    lookback: int,
    horizon_steps: int,
    max_windows: int,
    rng: np.random.Generator,
    min_context: int = 8,
    weights: Sequence[float] | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Sample windows (inputs up to an origin, targets the next `horizon_steps` values) from each history.

    Returns the raw input windows (as `tail_windows`) and the targets (n, horizon_steps) with NaN where the
    future is missing.  Windows are spread over histories in proportion to their length.  The origin never sees
    past itself: inputs are samples [e - lookback + 1, e], targets [e + 1, e + horizon_steps].
    `weights` (one per history) make a history's windows that many times likelier (drawn with replacement).
    """
    counts = np.array([max(0, len(h.t) - horizon_steps - min_context + 1) for h in histories])
    total = int(counts.sum())
    raw = {"y": [], **{c: [] for c in COVARIATES}}
    targets = []
    if total == 0:
        return {k: np.zeros((0, lookback)) for k in raw}, np.zeros((0, horizon_steps))
    take = min(max_windows, total)
    if weights is None:
        picks = np.sort(rng.choice(total, size=take, replace=False))
    else:
        p = np.repeat(np.asarray(weights, dtype=float), counts)
        picks = np.sort(rng.choice(total, size=max_windows, replace=True, p=p / p.sum()))
    offsets = np.concatenate([[0], np.cumsum(counts)])
    for i, h in enumerate(histories):
        sel = picks[(picks >= offsets[i]) & (picks < offsets[i + 1])] - offsets[i]
        if len(sel) == 0:
            continue
        ends = sel + min_context - 1  # index of the last input sample
        pad = lookback - 1
        yp = np.concatenate([np.full(pad, np.nan), h.y, np.full(horizon_steps, np.nan)])
        idx_in = ends[:, None] + np.arange(lookback)[None, :]  # in padded coordinates
        raw["y"].append(yp[idx_in])
        idx_out = ends[:, None] + pad + 1 + np.arange(horizon_steps)[None, :]
        targets.append(yp[idx_out])
        for c in COVARIATES:
            v = h.features.get(c)
            if v is None:
                raw[c].append(np.full((len(ends), lookback), np.nan))
            else:
                vp = np.concatenate([np.full(pad, np.nan), v, np.full(horizon_steps, np.nan)])
                raw[c].append(vp[idx_in])
    return {k: np.concatenate(v) for k, v in raw.items()}, np.concatenate(targets)
