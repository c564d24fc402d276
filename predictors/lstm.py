"""The LSTM forecaster: one global model, multivariate input, P10/P50/P90 at every step to the horizon.

Input: the last `lookback` steps of KV usage and the exporter's covariates (request rate, long-context share,
running and waiting requests, fragmentation), encoded by `infercast.predictors.features` (scale-free, with mask channels
for what a source doesn't give), plus per-window series features.  Output: for each future step, the change of
KV usage from its last value at three quantiles; the lower and upper quantiles are the median minus/plus a
softplus, so the band is ordered by construction.  Trained with the pinball loss plus a loss on the peak of the
median path (the alerting question is "how high does it go in the next five minutes"), early stopping on a
time-ordered split, and covariate dropout so that a missing covariate is a situation the model has seen.

torch is imported lazily (in methods), so importing this module is cheap and `infercast --help` stays instant.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import platform
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from infercast.predictors import features as F
from infercast.predictors import modelfile
from infercast.predictors.base import DEFAULT_BAND, Forecast, History, future_grid
from infercast.predictors.modelfile import ModelFileError

if TYPE_CHECKING:
    import torch

#: (raw windows, targets) for the histories: `features.training_windows` with the fit's history weights bound
Windows = Callable[..., tuple[dict[str, np.ndarray], np.ndarray]]

log = logging.getLogger(__name__)

#: The shipped pre-trained model (stem; `.safetensors` + `.json`).
DEFAULT_MODEL = Path(__file__).resolve().parent / "models" / "lstm_kv"

#: Metadata key of the band calibration (per-step factors on the P10/P90 offsets).  Optional: a file without it
#: loads with factors 1 (the band as trained).  A new layout gets a new key, so old readers skip it.
CALIBRATION_KEY = "band_calibration_v1"
FACTOR_MIN, FACTOR_MAX = 0.05, 50.0  # a factor outside this range means the data don't fit the model at all
#: Windows per forward pass of a batched forecast (`forecast_windows`): small enough that a pass stays in the CPU's
#: caches (on 2 shared cores 256-512 windows ran fastest, 20,000 at once 3x slower) and memory stays bounded.
BATCH_CHUNK = 512
#: Python threads `forecast_windows` spreads its chunks over by default (`forecast_workers`): torch and numpy release
#: the GIL in the forward pass and most of the array work, so two chunks run at once on two cores.  Each chunk is
#: computed exactly as before (the same windows, torch's intra-op threads unchanged, `predictor.torch_threads`), so
#: the forecasts are bit for bit those of one thread (tests/predictors/test_lstm_windows.py).
MAX_WORKERS = 2


def forecast_workers() -> int:
    """Chunk threads for `forecast_windows`: the cores this process may run on, at most `MAX_WORKERS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores))


@functools.lru_cache(maxsize=4)
def _pool(workers: int) -> ThreadPoolExecutor:
    """One long-lived pool per worker count: a tick reuses its threads, idle between ticks."""
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lstm-chunk")


# a forked child (a bench's or the twin's worker processes) has none of its parent's threads: it makes its own pool
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_pool.cache_clear)


class WindowsPass:
    """A `forecast_windows` pass under way (`LSTMForecaster.start_windows`): `result()` waits for its chunks."""

    def __init__(self, out: np.ndarray, chunks: list[Future]) -> None:
        self._out, self._chunks = out, chunks

    def result(self) -> np.ndarray:
        """The forecasts, (N, 3, len(dt)), once every chunk is done; a chunk's error is re-raised here (after every
        chunk has stopped: none still writes into the answer)."""
        wait(self._chunks)
        for f in self._chunks:
            f.result()
        return self._out


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def set_threads(n: int) -> None:
    """torch's intra-op threads for this process (`predictor.torch_threads`; docs/lstm.md says why 1)."""
    import torch

    if torch.get_num_threads() != n:
        torch.set_num_threads(max(1, int(n)))


@dataclass(frozen=True)
class LSTMParams:
    """Hyperparameters (stored in the model file)."""

    step_s: float = 15.0
    lookback: int = 60  # 15 min at 15 s, the window predict_linear(x[15m]) sees
    horizon_s: float = 300.0
    hidden: int = 48
    head_hidden: int = 64
    target_scale: float = 0.1  # targets are (y[t+h] - y[t]) / target_scale
    lr: float = 3e-3
    weight_decay: float = 1e-5
    batch_size: int = 256
    max_epochs: int = 30
    patience: int = 4
    windows_per_epoch: int = 20_000
    val_windows: int = 8_000
    val_fraction: float = 0.2  # the last 20% of each training series is its validation part
    peak_weight: float = 0.5
    cov_dropout: float = 0.15
    seed: int = 0
    finetune_min_steps: int = 960  # a pre-trained model fine-tunes only on at least 4 h (at 15 s) of new history
    y_min: float = 0.0  # KV usage bounds: forecasts are clipped to them
    y_max: float = 1.0

    @property
    def horizon_steps(self) -> int:
        return max(1, round(self.horizon_s / self.step_s))


def _build_net(p: LSTMParams):
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(len(F.STEP_CHANNELS), p.hidden, batch_first=True)
            self.head = nn.Sequential(
                nn.Linear(p.hidden + len(F.SERIES_CHANNELS), p.head_hidden),
                nn.GELU(),
                nn.Linear(p.head_hidden, 3 * p.horizon_steps),
            )

        def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
            _, (h, _) = self.lstm(x)
            out = self.head(torch.cat([h[-1], s], dim=1)).view(-1, 3, p.horizon_steps)
            mid = out[:, 1]
            lo = mid - nn.functional.softplus(out[:, 0])
            hi = mid + nn.functional.softplus(out[:, 2])
            return torch.stack([lo, mid, hi], dim=1)  # (n, 3, horizon_steps), scaled deltas

    return Net()


def _library_versions() -> dict[str, str]:
    import safetensors
    import torch

    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "safetensors": safetensors.__version__,
    }


class LSTMForecaster:
    """Implements `infercast.predictors.base.Forecaster` (name "lstm"); band = (P10, P90)."""

    name = "lstm"
    quantiles = (0.1, 0.5, 0.9)

    def __init__(self, params: LSTMParams | None = None, *, progress: bool = True, **overrides: Any) -> None:
        self.params = replace(params or LSTMParams(), **overrides)
        self.progress = progress
        self.net_ = None
        self.x_mean_: np.ndarray | None = None
        self.x_std_: np.ndarray | None = None
        self.meta_: dict[str, Any] = {}

    # ---------------------------------------------------------------- persistence
    @classmethod
    def load(cls, path: Path | str = DEFAULT_MODEL, *, progress: bool = False) -> LSTMForecaster:
        """Load a model file; raises ModelFileError naming the file and the mismatch."""
        import torch

        tensors, meta = modelfile.load(path, F.STEP_CHANNELS, F.SERIES_CHANNELS)
        wpath, mpath = modelfile.paths(path)
        known = {f for f in LSTMParams.__dataclass_fields__}
        hp = meta["hparams"]
        if not isinstance(hp, dict) or set(hp) - known:
            raise ModelFileError(mpath, f"hparams has unknown keys {sorted(set(hp) - known)}")
        try:
            params = LSTMParams(**hp)
        except TypeError as e:
            raise ModelFileError(mpath, f"hparams are invalid ({e})") from e
        if (
            params.step_s != meta["step_s"]
            or params.horizon_s != meta["horizon_s"]
            or params.lookback != meta["lookback"]
        ):
            raise ModelFileError(mpath, "step_s / horizon_s / lookback disagree with hparams")
        self = cls(params, progress=progress)
        net = _build_net(params)
        expected = {k: tuple(v.shape) for k, v in net.state_dict().items()}
        got = {k: tuple(v.shape) for k, v in tensors.items()}
        if expected != got:
            diff = sorted(set(expected.items()) ^ set(got.items()))[:4]
            raise ModelFileError(wpath, f"tensors don't match the network the metadata describes: {diff}")
        net.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in tensors.items()}, strict=True)
        net.eval()
        self.net_ = net
        self.x_mean_ = np.asarray(meta["scaler"]["x_mean"], dtype=np.float32)
        self.x_std_ = np.asarray(meta["scaler"]["x_std"], dtype=np.float32)
        self.meta_ = meta
        _check_calibration(meta.get(CALIBRATION_KEY), params.horizon_steps, mpath)
        return self

    def save(self, path: Path | str, *, extra: dict[str, Any] | None = None) -> None:
        """Write `path.safetensors` + `path.json` (metadata: inputs, scaler, horizon, step, range, versions, scores)."""
        self._check_fitted()
        p = self.params
        tensors = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in self.net_.state_dict().items()}
        meta = {
            **self.meta_,
            **(extra or {}),
            "inputs": list(F.STEP_CHANNELS),
            "series_inputs": list(F.SERIES_CHANNELS),
            "covariates": list(F.COVARIATES),
            "scaler": {"x_mean": [float(v) for v in self.x_mean_], "x_std": [float(v) for v in self.x_std_]},
            "step_s": p.step_s,
            "lookback": p.lookback,
            "horizon_s": p.horizon_s,
            "quantiles": list(self.quantiles),
            "hparams": asdict(p),
            "target": self.meta_.get("target", "kv_cache_usage_ratio"),
            "training_range": self.meta_.get("training_range", {}),
            "library_versions": _library_versions(),
            "scores": self.meta_.get("scores", {}),
        }
        modelfile.save(path, tensors, meta)

    # ---------------------------------------------------------------- training
    def fit(
        self,
        histories: list[History],
        validation: list[History] | None = None,
        weights: list[float] | None = None,
    ) -> LSTMForecaster:
        """Train (or fine-tune, when weights are already loaded) on `histories`.

        Early stopping watches a time-ordered split: the last `val_fraction` of every history (windows whose
        targets lie there; their inputs may reach back before the cut, as they would in production), plus any
        `validation` histories.  `weights` (one per history) make a history's training windows likelier, e.g.
        to give the few twin runs a fair share next to long generated series.  Deterministic under `params.seed`.

        A model that already has weights (loaded or fitted) fine-tunes, and only when handed at least
        `finetune_min_steps` samples in all: on less (an hour-long trace's own past, as the backtest hands it
        every 30 min) it keeps its weights, since a few hundred samples can't improve on the pre-training and
        can easily make it worse.  Either way nothing past the histories' ends is used, so no look-ahead.
        """
        import torch

        p = self.params
        if weights is not None and len(weights) != len(histories):
            raise ValueError(f"{len(weights)} weights for {len(histories)} histories")
        grids = [F.to_grid(h, p.step_s) for h in histories]
        keep = [i for i, h in enumerate(grids) if np.isfinite(h.y).sum() > p.horizon_steps]
        hs = [grids[i] for i in keep]
        w = None if weights is None else [float(weights[i]) for i in keep]
        if self.net_ is not None and sum(len(h.t) for h in hs) < p.finetune_min_steps:
            log.debug("lstm: %d samples < finetune_min_steps; keeping the weights", sum(len(h.t) for h in hs))
            return self
        torch.manual_seed(p.seed)
        rng = np.random.default_rng(p.seed)
        if not hs:
            raise ValueError("fit needs at least one history with more samples than the horizon")
        train_parts, val_parts = _time_split(hs, p)
        windows = functools.partial(F.training_windows, weights=w)
        val_parts += [F.to_grid(h, p.step_s) for h in validation or []]

        fresh = self.net_ is None
        if fresh:
            raw, _ = windows(train_parts, p.lookback, p.horizon_steps, p.windows_per_epoch, rng)
            self._start_fresh(raw)
        net = self.net_
        opt = torch.optim.AdamW(net.parameters(), lr=p.lr if fresh else p.lr / 3, weight_decay=p.weight_decay)
        val = self._validation_tensors(val_parts)
        scores = self._train(opt, windows, train_parts, val, rng)
        if self.meta_.pop(CALIBRATION_KEY, None) is not None:
            log.info("lstm: weights changed; the band calibration no longer applies and is dropped (recalibrate)")
        self.meta_ = {
            **self.meta_,
            "scores": {k: round(float(v), 6) for k, v in scores.items()},
            "training_range": _describe(hs, p.step_s, fine_tuned_from=None if fresh else self.meta_.get("scores")),
        }
        return self

    def _start_fresh(self, raw: dict[str, np.ndarray]) -> None:
        """A new network, and the input scaler from one epoch's worth of training windows `raw`."""
        self.net_ = _build_net(self.params)
        x = F.encode(raw).x.reshape(-1, len(F.STEP_CHANNELS))
        self.x_mean_ = x.mean(axis=0).astype(np.float32)
        std = x.std(axis=0)
        self.x_std_ = np.where(std > 1e-3, std, 1.0).astype(np.float32)

    def _validation_tensors(self, val_parts: list[History]) -> tuple[torch.Tensor, ...] | None:
        """The early-stopping windows, drawn from `val_parts` under a seed of their own; None when there are none."""
        p = self.params
        if not val_parts:
            return None
        vraw, vtar = F.training_windows(
            val_parts, p.lookback, p.horizon_steps, p.val_windows, np.random.default_rng(p.seed + 1)
        )
        return self._tensors(vraw, vtar) if len(vtar) else None

    def _train(
        self,
        opt: torch.optim.Optimizer,
        windows: Windows,
        train_parts: list[History],
        val: tuple[torch.Tensor, ...] | None,
        rng: np.random.Generator,
    ) -> dict[str, float]:
        """Epochs until the validation loss (the training loss without `val`) stops improving for `patience`
        epochs; the net is left at its best epoch's weights.  The scores of that epoch, with `epochs_run`."""
        import torch
        from tqdm import tqdm

        p, net = self.params, self.net_
        best, best_state, bad, epoch = math.inf, None, 0, 0
        scores: dict[str, float] = {}
        bar = tqdm(range(p.max_epochs), desc="lstm", unit="epoch", disable=not self.progress, leave=False)
        for epoch in bar:
            raw, tar = windows(train_parts, p.lookback, p.horizon_steps, p.windows_per_epoch, rng)
            train_loss = self._train_epoch(opt, _drop_covariates(raw, p.cov_dropout, rng), tar, rng)
            if val is None:
                vloss = train_loss
            else:
                net.eval()
                with torch.no_grad():
                    vloss = float(self._loss(net(val[0], val[1]), val[3]))
            bar.set_postfix(train=f"{train_loss:.4f}", val=f"{vloss:.4f}")
            if vloss < best - 1e-5:
                best, bad = vloss, 0
                best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
                scores = {"train_loss": train_loss, "val_loss": vloss, "best_epoch": epoch + 1}
            else:
                bad += 1
                if bad >= p.patience:
                    break
        bar.close()
        if best_state is not None:
            net.load_state_dict(best_state)
        net.eval()
        if val is not None:
            scores.update(self._val_scores(val))
        scores["epochs_run"] = epoch + 1
        return scores

    def _train_epoch(
        self, opt: torch.optim.Optimizer, raw: dict[str, np.ndarray], tar: np.ndarray, rng: np.random.Generator
    ) -> float:
        """One pass over an epoch's windows in shuffled batches; the mean batch loss."""
        import torch

        p, net = self.params, self.net_
        xt, st, _, tt = self._tensors(raw, tar)
        net.train()
        perm = torch.from_numpy(rng.permutation(len(tt)))
        total, nb = 0.0, 0
        for i in range(0, len(perm), p.batch_size):
            b = perm[i : i + p.batch_size]
            loss = self._loss(net(xt[b], st[b]), tt[b])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            total, nb = total + float(loss.detach()), nb + 1
        return total / max(nb, 1)

    def _tensors(self, raw: dict[str, np.ndarray], targets: np.ndarray):
        import torch

        w = F.encode(raw)
        x = (w.x - self.x_mean_) / self.x_std_
        t = (targets - w.y_last[:, None]) / self.params.target_scale
        return (
            torch.from_numpy(x.astype(np.float32)),
            torch.from_numpy(w.s),
            torch.from_numpy(w.y_last),
            torch.from_numpy(t.astype(np.float32)),
        )

    def _loss(self, out, target):
        """Pinball loss at the three quantiles (NaN targets masked) + L1 on the peak of the median path."""
        import torch

        ok = torch.isfinite(target)
        tgt = torch.where(ok, target, torch.zeros_like(target))
        loss = 0.0
        for i, q in enumerate(self.quantiles):
            e = tgt - out[:, i]
            pin = torch.maximum(q * e, (q - 1) * e)
            loss = loss + (pin * ok).sum() / ok.sum().clamp(min=1)
        full = ok.all(dim=1)
        if self.params.peak_weight > 0 and bool(full.any()):
            peak_err = (out[full, 1].max(dim=1).values - tgt[full].max(dim=1).values).abs().mean()
            loss = loss + self.params.peak_weight * peak_err
        return loss

    def evaluate(self, histories: list[History]) -> dict[str, float]:
        """The training loss and validation scores on windows of `histories` (up to `val_windows`, drawn with a
        fixed seed, so two models are compared on the same windows); used to choose between trained candidates."""
        import torch

        self._check_fitted()
        p = self.params
        grids = [F.to_grid(h, p.step_s) for h in histories]
        raw, tar = F.training_windows(
            grids, p.lookback, p.horizon_steps, p.val_windows, np.random.default_rng(p.seed + 2)
        )
        if not len(tar):
            raise ValueError("evaluate: no window of the histories is long enough")
        val = self._tensors(raw, tar)
        self.net_.eval()
        with torch.no_grad():
            loss = float(self._loss(self.net_(val[0], val[1]), val[3]))
        return {
            "loss": round(loss, 6),
            "windows": len(tar),
            **{k: round(v, 6) for k, v in self._val_scores(val).items()},
        }

    def _val_scores(self, val) -> dict[str, float]:
        import torch

        x, s, _, t = val
        with torch.no_grad():
            out = self.net_(x, s).numpy() * self.params.target_scale
        t = t.numpy() * self.params.target_scale
        ok = np.isfinite(t)
        full = ok.all(axis=1)
        cover = ((t >= out[:, 0]) & (t <= out[:, 2]))[ok].mean()
        return {
            "val_mae_at_horizon": float(np.nanmean(np.abs(out[:, 1, -1] - t[:, -1]))),
            "val_peak_mae": float(np.mean(np.abs(out[full, 1].max(axis=1) - t[full].max(axis=1)))),
            "val_band_coverage": float(cover),
        }

    # ---------------------------------------------------------------- inference
    def forecast(self, history: History, horizon_s: float) -> Forecast:
        return self.forecast_many([history], horizon_s)[0]

    def forecast_many(self, histories: list[History], horizon_s: float) -> list[Forecast]:
        """Forecast many series in one batch; each history's own grid (`future_grid`) carries the result."""
        self._check_fitted()
        p = self.params
        if horizon_s > p.horizon_s + 1e-9:
            raise ValueError(f"horizon {horizon_s:g} s is beyond this model's {p.horizon_s:g} s")
        if not histories:
            return []
        grids = []
        for h in histories:
            if not np.isfinite(h.y).any():
                raise ValueError(f"history {h.series_id or '(unnamed)'} has no observed value to forecast from")
            grids.append(F.to_grid(h, p.step_s))
        y_last, raw = self._raw_paths(grids)
        paths = np.clip(self._calibrated(raw), p.y_min, p.y_max)
        model_dt = p.step_s * np.arange(0, p.horizon_steps + 1)
        result = []
        for i, h in enumerate(histories):
            t_future = future_grid(h, horizon_s)
            dt = np.clip(t_future - h.t[-1], 0, p.horizon_s)
            y0 = float(y_last[i])
            lo, mid, hi = (np.interp(dt, model_dt, np.concatenate([[y0], paths[i, k]])) for k in range(3))
            mid = np.clip(mid, lo, hi)
            result.append(Forecast(t_future, mid, lo, hi, band=DEFAULT_BAND, model=self.name))
        return result

    def forecast_windows(
        self, raw: dict[str, np.ndarray], dt: np.ndarray, chunk: int = BATCH_CHUNK, workers: int | None = None
    ) -> np.ndarray:
        """Forecast N series at once from their raw windows, in `F.tail_windows`' layout (the last `lookback` samples
        on the model grid, NaN where missing), at `dt` seconds after each window's last sample (the same offsets for
        every series: a tick's series share one grid).  (N, 3, len(dt)): P10, P50, P90, each series exactly what
        `forecast_many` gives it, calibrated, clipped and interpolated the same way, up to float rounding.

        The windows go through the network `chunk` at a time, so memory stays bounded whatever N is; the chunks are
        spread over `workers` threads (default `forecast_workers()`), each chunk computed as one thread would, so
        the result does not depend on `workers`.
        """
        return self.start_windows(raw, dt, chunk, workers).result()

    def start_windows(
        self, raw: dict[str, np.ndarray], dt: np.ndarray, chunk: int = BATCH_CHUNK, workers: int | None = None
    ) -> WindowsPass:
        """`forecast_windows` with its chunks handed to the worker threads and returned at once: the caller's thread
        is free for work that needs none of the forecasts (the batched tick's band learns from earlier outcomes)
        until `.result()`, which waits for the chunks and gives `forecast_windows`' answer.  With one worker (or one
        chunk) the pass runs here, before returning, as `forecast_windows` always did."""
        self._check_fitted()
        p = self.params
        dt = np.clip(np.asarray(dt, dtype=np.float64), 0, p.horizon_s)
        n = raw["y"].shape[0]
        out = np.empty((n, 3, len(dt)))
        # np.interp(dt, model_dt, path) for every path at once: the same dt, so the same indices and weights
        model_dt = p.step_s * np.arange(0, p.horizon_steps + 1)
        j = np.clip(np.searchsorted(model_dt, dt, side="right") - 1, 0, p.horizon_steps - 1)
        frac = np.clip(dt - model_dt[j], 0.0, model_dt[j + 1] - model_dt[j]) / (model_dt[j + 1] - model_dt[j])
        chunk = max(1, chunk)
        threads = _torch_threads()

        def one(a: int) -> None:
            # torch's intra-op thread count is the calling thread's own (OpenMP's, per thread): a pool thread starts
            # at the machine's default, not at `predictor.torch_threads`.  Unset, a predictor at 1 thread ran its
            # chunks at 2 each (4 threads on 2 cores) and published floats 2e-8 off the one-thread pass
            set_threads(threads)
            y_last, rawp = self._raw_paths_windows({k: v[a : a + chunk] for k, v in raw.items()})
            paths = np.clip(self._calibrated(rawp), p.y_min, p.y_max)
            full = np.concatenate([np.repeat(y_last[:, None, None], 3, axis=1), paths], axis=2)
            left, right = full[..., j], full[..., j + 1]
            part = left + (right - left) * frac
            part[:, 1] = np.clip(part[:, 1], part[:, 0], part[:, 2])
            out[a : a + len(y_last)] = part  # each chunk its own rows: the threads never write the same memory

        starts = range(0, n, chunk)
        workers = forecast_workers() if workers is None else max(1, int(workers))
        if workers == 1 or len(starts) < 2:
            for a in starts:
                one(a)
            return WindowsPass(out, [])
        # (no_grad is per thread: `_raw_paths_windows` enters it in the thread that runs the chunk)
        return WindowsPass(out, [_pool(min(workers, len(starts))).submit(one, a) for a in starts])

    def _raw_paths(self, grids: list[History]) -> tuple[np.ndarray, np.ndarray]:
        """(last KV value (n,), P10/P50/P90 paths (n, 3, horizon_steps)) on the model grid, before calibration and
        clipping, for histories already on the model grid."""
        return self._raw_paths_windows(F.tail_windows(grids, self.params.lookback))

    def _raw_paths_windows(self, raw: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """`_raw_paths` for raw windows in `F.tail_windows`' layout."""
        import torch

        p = self.params
        w = F.encode(raw)
        x = torch.from_numpy(((w.x - self.x_mean_) / self.x_std_).astype(np.float32))
        with torch.no_grad():
            out = self.net_(x, torch.from_numpy(w.s)).numpy().astype(np.float64)
        y_last = w.y_last.astype(np.float64)
        return y_last, y_last[:, None, None] + out * p.target_scale

    # ---------------------------------------------------------------- band calibration
    @property
    def band_factors(self) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) per-step factors on the P50->P10 and P50->P90 offsets; ones when not calibrated."""
        n = self.params.horizon_steps
        cal = self.meta_.get(CALIBRATION_KEY)
        if not cal:
            return np.ones(n), np.ones(n)
        return np.asarray(cal["lower"], dtype=np.float64), np.asarray(cal["upper"], dtype=np.float64)

    def _calibrated(self, paths: np.ndarray) -> np.ndarray:
        """Scale the band's offsets around the median by the stored per-step factors (ordered: factors > 0)."""
        lo_f, hi_f = self.band_factors
        mid = paths[:, 1]
        lo = mid - lo_f[None, :] * (mid - paths[:, 0])
        hi = mid + hi_f[None, :] * (paths[:, 2] - mid)
        return np.stack([lo, mid, hi], axis=1)

    def calibrate(
        self, histories: list[History], warmup_s: float = 600.0, coverage: float = 0.8, source: Any = None
    ) -> dict[str, Any]:
        """Fit the band's per-step widening factors by split conformal prediction on held-out `histories`.

        Every origin after `warmup_s` of every history is forecast as the backtest would (only the past, the
        history's start as the window's start).  At each horizon step k, the upper factor is the conformal
        quantile, at level 1 - (1 - coverage) / 2, of (y - P50) / (P90 - P50) over the origins, and the lower
        factor likewise of (P50 - y) / (P50 - P10): the scaled band then holds y at each side with probability
        (1 - coverage) / 2 on data like `histories`.  The network is not touched.  Deterministic: no sampling.
        Stores the factors in `meta_[CALIBRATION_KEY]` (saved with the model file) and returns that record.
        """
        self._check_fitted()
        p = self.params
        if not 0 < coverage < 1:
            raise ValueError(f"coverage must be in (0, 1), got {coverage}")
        grids = [F.to_grid(h, p.step_s) for h in histories]
        windows, targets = [], []
        for g in grids:
            first = int(np.searchsorted(g.t, g.t[0] + warmup_s, side="left"))
            for i in range(max(first, 1), len(g.t) - 1):
                a = max(0, i + 1 - p.lookback)
                if not np.isfinite(g.y[a : i + 1]).any():
                    continue
                tgt = np.full(p.horizon_steps, np.nan)
                fut = g.y[i + 1 : i + 1 + p.horizon_steps]
                tgt[: len(fut)] = fut
                if not np.isfinite(tgt).any():
                    continue
                windows.append(_slice(g, a, i + 1))
                targets.append(tgt)
        if not windows:
            raise ValueError("calibrate needs histories longer than the warm-up plus one step")
        raw_all = []
        for a in range(0, len(windows), 4096):
            raw_all.append(self._raw_paths(windows[a : a + 4096])[1])
        raw = np.concatenate(raw_all)
        y = np.asarray(targets)
        mid = raw[:, 1]
        eps = 1e-6
        with np.errstate(invalid="ignore"):
            up = (y - mid) / np.maximum(raw[:, 2] - mid, eps)
            down = (mid - y) / np.maximum(mid - raw[:, 0], eps)
        level = 1 - (1 - coverage) / 2
        lower, upper, n_per_step = [], [], []
        for k in range(p.horizon_steps):
            ok = np.isfinite(y[:, k])
            lower.append(_conformal_quantile(down[ok, k], level))
            upper.append(_conformal_quantile(up[ok, k], level))
            n_per_step.append(int(ok.sum()))
        lower_f = np.clip(np.asarray(lower), FACTOR_MIN, FACTOR_MAX)
        upper_f = np.clip(np.asarray(upper), FACTOR_MIN, FACTOR_MAX)

        def cover(lo_f: np.ndarray, hi_f: np.ndarray) -> list[float]:
            band_lo = np.clip(mid - lo_f * (mid - raw[:, 0]), p.y_min, p.y_max)
            band_hi = np.clip(mid + hi_f * (raw[:, 2] - mid), p.y_min, p.y_max)
            inside = (y >= band_lo) & (y <= band_hi)
            ok = np.isfinite(y)
            return [round(float(inside[ok[:, k], k].mean()), 4) for k in range(p.horizon_steps)]

        ones = np.ones(p.horizon_steps)
        record = {
            "method": f"split conformal: per-step quantile {level:g} of the band-offset ratios, each side",
            "coverage_target": coverage,
            "lower": [round(float(v), 4) for v in lower_f],
            "upper": [round(float(v), 4) for v in upper_f],
            "origins": len(windows),
            "series": len(grids),
            "min_origins_per_step": min(n_per_step),
            "coverage_before": cover(ones, ones),
            "coverage_after": cover(np.round(lower_f, 4), np.round(upper_f, 4)),
            "warmup_s": warmup_s,
            "source": source,
        }
        self.meta_ = {**self.meta_, CALIBRATION_KEY: record}
        return record

    def _check_fitted(self) -> None:
        if self.net_ is None:
            raise RuntimeError("LSTMForecaster has no weights: call fit() or LSTMForecaster.load(path)")


def _time_split(hs: list[History], p: LSTMParams) -> tuple[list[History], list[History]]:
    """(training, validation) parts: the last `val_fraction` of each history validates (its windows' inputs may
    reach back before the cut, as in production); a history too short to split trains whole."""
    train_parts, val_parts = [], []
    for h in hs:
        cut = int(len(h.t) * (1 - p.val_fraction))
        if cut > p.horizon_steps + 8 and len(h.t) - cut > p.horizon_steps:
            train_parts.append(_slice(h, 0, cut))
            val_parts.append(_slice(h, max(0, cut - p.lookback), len(h.t)))
        else:
            train_parts.append(h)
    return train_parts, val_parts


def _slice(h: History, a: int, b: int) -> History:
    return History(h.t[a:b], h.y[a:b], {k: v[a:b] for k, v in h.features.items()}, h.series_id)


def _drop_covariates(raw: dict[str, np.ndarray], p: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Hide each covariate of each window with probability p, so the model learns to work without it."""
    if p <= 0:
        return raw
    out = dict(raw)
    n = raw["y"].shape[0]
    for c in F.COVARIATES:
        drop = rng.random(n) < p
        out[c] = np.where(drop[:, None], np.nan, raw[c])
    return out


def _describe(hs: list[History], step_s: float, fine_tuned_from: Any = None) -> dict[str, Any]:
    ids = sorted({h.series_id for h in hs if h.series_id})
    return {
        "n_series": len(hs),
        "n_steps": int(sum(len(h.t) for h in hs)),
        "hours": round(sum(len(h.t) for h in hs) * step_s / 3600, 2),
        "series": ids[:40] + ([f"... {len(ids) - 40} more"] if len(ids) > 40 else []),
        "fine_tuned": fine_tuned_from is not None,
    }


def _conformal_quantile(scores: np.ndarray, level: float) -> float:
    """The split-conformal quantile: the ceil((n + 1) * level)-th smallest score (the largest when n is small)."""
    n = len(scores)
    if n == 0:
        return 1.0
    k = min(n, math.ceil((n + 1) * level))
    return float(np.sort(scores)[k - 1])


def _check_calibration(cal: Any, steps: int, mpath: Path) -> None:
    """A calibration record must hold `steps` finite factors per side within [FACTOR_MIN, FACTOR_MAX]."""
    if cal is None:
        return
    if not isinstance(cal, dict):
        raise ModelFileError(mpath, f"{CALIBRATION_KEY} is not a JSON object")
    for side in ("lower", "upper"):
        v = cal.get(side)
        if not (
            isinstance(v, list)
            and len(v) == steps
            and all(isinstance(f, int | float) and FACTOR_MIN <= f <= FACTOR_MAX for f in v)
        ):
            raise ModelFileError(
                mpath, f"{CALIBRATION_KEY}.{side} must be {steps} factors in [{FACTOR_MIN}, {FACTOR_MAX}]"
            )
