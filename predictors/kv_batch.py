"""The batched KV pass of the predictor's tick: every KV series that is ready, both aggregates, through one LSTM
pass (`forecast_windows`), the online band in arrays (`AdaptiveBandBank`) and the calendar prior
(`prior_upper_many`), instead of series by series; the same forecasts to float rounding
(`tests/predictors/test_service_batch.py`).  `BatchedKV` is the part of `PredictorLoop` that does it."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from infercast.config import PredictorConfig
from infercast.predictors import deployed
from infercast.predictors.base import Forecast, Forecaster, History
from infercast.predictors.calendar import prior_upper_many
from infercast.predictors.conformal import AdaptiveBandBank
from infercast.predictors.publish import (
    ForecastSample,
    KVLabels,
    breach_eta_sample,
    forecast_samples,
    kv_forecast_samples_many,
    skipped_sample,
)
from infercast.predictors.reading import RATE_WINDOW_STEPS, AlignedMatrix, Group, series_history
from infercast.predictors.timescale import RATE_FEATURES, TimeScaled

if TYPE_CHECKING:
    from infercast.predictors.lstm import LSTMForecaster

log = logging.getLogger(__name__)


class RowBlocks:
    """Chosen rows of several matrices read as one matrix, without copying them: the batched tick's KV series of
    both aggregates, each aggregate's rows in its own aligned matrix (which, for one-instance pools, is the same)."""

    def __init__(self, blocks: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.blocks = blocks  # (matrix, the rows of it taken, in order)
        self.ends = np.cumsum([len(idx) for _, idx in blocks])

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def _where(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.ends, rows, side="right")

    def row(self, r: int) -> np.ndarray:
        b = int(self._where(np.asarray([r]))[0])
        m, idx = self.blocks[b]
        return m[idx[r - (self.ends[b - 1] if b else 0)]]

    def tail(self, w: int) -> np.ndarray:
        """The last `w` columns of every row, stacked (small: the model's window)."""
        return np.concatenate([m[idx, m.shape[1] - w :] for m, idx in self.blocks])

    def at(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """`matrix[rows, cols]` elementwise, as if the rows were stacked."""
        out = np.empty(len(rows))
        which = self._where(rows)
        for b, (m, idx) in enumerate(self.blocks):
            on = which == b
            if on.any():
                local = rows[on] - (self.ends[b - 1] if b else 0)
                out[on] = m[idx[local], cols[on]]
        return out


def same_windows(groups: list[Group], y: np.ndarray, memo: dict | None = None) -> np.ndarray:
    """For each row, the first row of the same (pool, version) whose KV window is the same bits (NaN where it is
    NaN), else the row itself.  A pool of one instance has its mean and its fullest instance equal: the network would
    be handed the same window (and the same covariates, which are the group's) twice; the batched pass forecasts it
    once and gives both rows its forecast.  Rows are not compared otherwise: two groups' equal windows still differ in
    their covariates.  `memo` (a dict the caller keeps): each row's group's first row, kept for the next call with
    the same groups (a steady tick's), instead of a dict lookup per row."""
    rows = len(groups)
    every = np.arange(rows)
    if memo is not None and memo.get("groups") == groups:
        cand = memo["first"]
    else:
        ids: dict[Group, int] = {}
        gid = np.fromiter((ids.setdefault(g, len(ids)) for g in groups), dtype=np.int64, count=rows)
        cand = None
        if len(ids) < rows:
            _, first_at = np.unique(gid, return_index=True)  # the first row of each group
            cand = first_at[gid]
        if memo is not None:
            memo.update(groups=list(groups), first=cand)
    if cand is None:  # every row its own group
        return every
    maybe = np.flatnonzero(cand != every)
    bits = np.ascontiguousarray(y).view(np.int64)
    equal = (bits[maybe] == bits[cand[maybe]]).all(axis=1)
    out = every.copy()
    out[maybe[equal]] = cand[maybe[equal]]
    return out


@dataclass
class KVJob:
    """One KV series kind's rows waiting for the batched pass, and where its samples go."""

    series: str
    aggregate: str
    am: AlignedMatrix
    reasons: list[str | None]
    starts: np.ndarray
    slot: list[ForecastSample]


@dataclass
class _BatchOut:
    """What the batched pass made: samples per (series, group), the failed models' skips, the models that forecast."""

    results: dict[tuple[str, Group], list[ForecastSample]] = field(default_factory=dict)
    whole: dict[str, list[ForecastSample]] = field(default_factory=dict)  # series -> every group's, in order
    failed: dict[tuple[str, Group], list[ForecastSample]] = field(default_factory=dict)
    succeeded: set[str] = field(default_factory=set)


class BatchedKV:
    """The batched KV pass, as methods of `PredictorLoop` (which holds the state they read and keep: the model, the
    band bank, the event windows, the failing models)."""

    config: PredictorConfig
    trigger: float
    events: Sequence
    lstm: Forecaster | None
    kv_model: str | None
    batched: bool
    _failing: set[tuple[str, str, Group]]
    _last_reason: dict[tuple[str, Group], str | None]
    _kv_bank: AdaptiveBandBank | None
    _kv_labels: dict[str, KVLabels]  # series -> its samples' label tuples, kept from tick to tick
    _same_memo: dict  # `same_windows`' groups and their first rows, kept from tick to tick
    _event_windows: list | None
    _g0: float

    if TYPE_CHECKING:  # the per-series path's, in PredictorLoop

        def _fallback(
            self, series: str, group: Group, name: str, h: History, error: object
        ) -> tuple[Forecast | None, list[str]]: ...

        def _note(self, series: str, group: Group, reason: str | None) -> None: ...

    def _batch_model(self) -> tuple[LSTMForecaster, float] | None:
        """(the LSTM, its time scale) when the KV series go through one batched pass (`_kv_batch`), else None: the
        loop is not `batched`, KV is not forecast by the LSTM, or the model would not read the tick's grid as it is
        (its step or horizon differ: the per-series path then resamples it, or refuses the model)."""
        if not self.batched or self.lstm is None or self.kv_model not in (None, "lstm"):
            return None
        inner, scale = self.lstm, 1.0
        if isinstance(inner, TimeScaled):
            inner, scale = inner.inner, inner.scale
        from infercast.predictors.lstm import LSTMForecaster

        if not isinstance(inner, LSTMForecaster) or inner.net_ is None:
            return None
        p, cfg = inner.params, self.config
        if abs(cfg.step_seconds * scale - p.step_s) > 0.01 * p.step_s or cfg.horizon_seconds * scale > p.horizon_s:
            return None
        if cfg.min_history_points < 2:  # a one-sample history has no step: the per-series path says so
            return None
        return inner, scale

    def _kv_batch(
        self,
        now: float,
        t: np.ndarray,
        jobs: list[KVJob],
        covs: dict[str, AlignedMatrix],
        lstm: LSTMForecaster,
        scale: float,
    ) -> set[str]:
        """Forecast every KV series that is ready, both aggregates, through the deployed pipeline at once: one LSTM
        pass (`start_windows`: `forecast_windows`' chunks on the worker threads), the online band
        (`AdaptiveBandBank`, the per-series `AdaptiveBand`'s state in arrays; it learns from the earlier forecasts'
        outcomes while the pass runs), the calendar prior (`prior_upper_many`), then the samples.  The same forecasts
        as the per-series path (`batched=False`) to float rounding (`tests/predictors/test_service_batch.py`)."""
        picks = [np.asarray([i for i, r in enumerate(job.reasons) if r is None], dtype=np.int64) for job in jobs]
        keys = [(job.series, job.am.groups[i]) for job, idx in zip(jobs, picks, strict=True) for i in idx.tolist()]
        out = _BatchOut()
        if keys:
            self._forecast_rows(now, t, jobs, picks, keys, covs, lstm, scale, out)
        self._fill_slots(jobs, out)
        return out.succeeded

    def _forecast_rows(
        self,
        now: float,
        t: np.ndarray,
        jobs: list[KVJob],
        picks: list[np.ndarray],
        keys: list[tuple[str, Group]],
        covs: dict[str, AlignedMatrix],
        lstm: LSTMForecaster,
        scale: float,
        out: _BatchOut,
    ) -> None:
        """The ready rows (`picks` of each job, `keys` in order) through the pipeline, their samples into `out`; a
        row whose forecast is not finite goes to the best baseline, as the per-series path's would."""
        cfg = self.config
        model_name = f"{self.lstm.name}_aci" if cfg.band_adaptation > 0 else self.lstm.name  # type: ignore[union-attr]
        y = RowBlocks([(job.am.y, idx) for job, idx in zip(jobs, picks, strict=True)])
        start = np.concatenate([job.starts[idx] for job, idx in zip(jobs, picks, strict=True)])
        yhat, lower, upper, t_future = self._kv_paths(t, y, start, keys, covs, lstm, scale)
        ok = np.isfinite(yhat[:, -1]) & np.isfinite(lower[:, -1]) & np.isfinite(upper[:, -1])
        hit = upper >= self.trigger
        eta = np.where(hit.any(axis=1), t_future[np.argmax(hit, axis=1)] - now, math.inf)
        at_h = np.stack([yhat[:, -1], lower[:, -1], upper[:, -1]], axis=1)
        row = 0
        for job, idx in zip(jobs, picks, strict=True):
            m = len(idx)
            sel = np.arange(row, row + m)[ok[row : row + m]]
            groups = [keys[r][1] for r in sel.tolist()]
            labels = self._kv_labels.setdefault(job.series, KVLabels())
            samples = kv_forecast_samples_many(
                groups, model_name, at_h[sel], cfg.horizon_seconds, job.aggregate, self.trigger, eta[sel], labels
            )
            if groups:
                out.succeeded.add(model_name)
            if m == len(job.am.groups) and len(sel) == m:
                # every group of the job ready and forecast (a steady tick): its samples are the slot's, in order
                out.whole[job.series] = samples
                if self._failing:
                    for g in groups:
                        if (model_name, "kv", g) in self._failing:
                            log.info("predictor: %s for %s %s/%s works again", model_name, "kv", *g)
                            self._failing.discard((model_name, "kv", g))
                row += m
                continue
            for j, g in enumerate(groups):
                out.results[(job.series, g)] = samples[4 * j : 4 * j + 4]
            for r in range(row, row + m):
                key = keys[r]
                if ok[r]:
                    if self._failing and (model_name, "kv", key[1]) in self._failing:
                        log.info("predictor: %s for %s %s/%s works again", model_name, "kv", *key[1])
                        self._failing.discard((model_name, "kv", key[1]))
                    continue
                # the baseline reads no covariates (and these are the window's only)
                h = series_history(key[0], "kv", key[1], t, y.row(r), int(start[r]), None)
                self._baseline_row(now, key, h, model_name, job.aggregate, out)
            row += m

    def _baseline_row(
        self, now: float, key: tuple[str, Group], h: History, model_name: str, aggregate: str, out: _BatchOut
    ) -> None:
        """A row the model failed: the best baseline's forecast (or none), and the failed models' skips."""
        fc, names = self._fallback("kv", key[1], model_name, h, "non-finite forecast")
        out.failed[key] = [skipped_sample(*key[1], f"{key[0]}:{nm}", "model_error") for nm in names]
        if fc is not None:
            out.results[key] = [
                *forecast_samples("kv", *key[1], fc, self.config.horizon_seconds, aggregate),
                breach_eta_sample(*key[1], self.trigger, fc.breach_eta(self.trigger, now), aggregate),
            ]
            out.succeeded.add(fc.model)

    def _fill_slots(self, jobs: list[KVJob], out: _BatchOut) -> None:
        """Each job's samples into its slot, in its groups' order: the forecast's, or the reason it has none."""
        for job in jobs:
            whole = out.whole.get(job.series)
            if whole is not None:  # every group forecast, none failed: its samples in its groups' order
                job.slot.extend(whole)
                last, series = self._last_reason, job.series
                for group in job.am.groups:
                    if last.get((series, group), "unseen") is not None:  # else `_note` would change nothing
                        self._note(series, group, None)
                continue
            for i, group in enumerate(job.am.groups):
                key = (job.series, group)
                reason = job.reasons[i]
                if reason is None:
                    job.slot.extend(out.failed.get(key, ()))
                    got = out.results.get(key)
                    if got is None:
                        reason = "model_error"
                    else:
                        job.slot.extend(got)
                if reason is not None:
                    job.slot.append(skipped_sample(*group, job.series, reason))
                self._note(job.series, group, reason)

    def _kv_paths(
        self,
        t: np.ndarray,
        y: RowBlocks,
        start: np.ndarray,
        keys: list[tuple[str, Group]],
        covs: dict[str, AlignedMatrix],
        lstm: LSTMForecaster,
        scale: float,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(yhat, lower, upper, t_future) of the KV pipeline for rows `y[i, start[i]:]` on grid `t`."""
        cfg = self.config
        rows, n = len(y), len(t)
        lookback = lstm.params.lookback
        w = min(lookback, n)
        live = np.arange(n - w, n)[None, :] >= start[:, None]  # the window's samples inside each row's history

        def window(tail: np.ndarray, on: np.ndarray) -> np.ndarray:
            """The last `w` grid columns of rows `on` -> their raw windows (NaN before the start, front-padded)."""
            out = np.full((len(on), lookback), np.nan)
            out[:, lookback - w :] = np.where(live[on], tail, np.nan)
            return out

        every = np.arange(rows)
        y_win = window(y.tail(w), every)
        groups = [g for _, g in keys]
        src = same_windows(groups, y_win, self._same_memo) if self.dedupe_windows else every
        uniq = np.flatnonzero(src == every)  # the rows the network sees; the others copy the row they equal
        raw = {"y": y_win if len(uniq) == rows else y_win[uniq]}
        ugroups = groups if len(uniq) == rows else [groups[i] for i in uniq.tolist()]
        for name, cm in covs.items():
            if not cm.groups:
                continue  # the store has none of it: the model masks it, as for a series without it
            if cm.groups == ugroups:  # (a steady fleet) every group has it, in the same order: its rows as they are
                tail = cm.y[:, cm.y.shape[1] - w :]
            else:
                at = np.fromiter((cm.index.get(g, -1) for g in ugroups), dtype=np.int64, count=len(ugroups))
                tail = np.full((len(ugroups), w), np.nan)
                tail[at >= 0] = cm.y[at[at >= 0], cm.y.shape[1] - w :]
            if scale != 1.0 and name in RATE_FEATURES:
                tail = tail / scale
            raw[name] = window(tail, uniq)
        # the future grid as `future_grid` makes it for each series, in the model's time
        tm = t * scale if scale != 1.0 else t
        step_m = float(np.median(np.diff(tm)))
        tf = tm[-1] + step_m * np.arange(1, max(1, round(cfg.horizon_seconds * scale / step_m)) + 1)
        pending = lstm.start_windows(raw, tf - tm[-1])
        if self._kv_bank is None:
            self._kv_bank = deployed.kv_band_bank(cfg, self.lstm)
        bank = self._kv_bank
        try:
            # while the network makes this tick's forecasts (its threads release the GIL), the band learns from the
            # outcomes of those made earlier: `AdaptiveBandBank.forecast` in two halves, the same work in its order
            band_rows = None if bank is None else bank.learn(keys, t, y.at, start)
        except Exception:
            with contextlib.suppress(Exception):
                pending.result()  # no chunk still running when the error leaves the tick
            raise
        paths = pending.result()
        if len(uniq) < rows:
            at_uniq = np.empty(rows, dtype=np.int64)
            at_uniq[uniq] = np.arange(len(uniq))
            paths = paths[at_uniq[src]]
        t_future = tf / scale if scale != 1.0 else tf
        lower, yhat, upper = paths[:, 0], paths[:, 1], paths[:, 2]
        if bank is not None and band_rows is not None:
            yhat, lower, upper = bank.widen(band_rows, t_future, lower, yhat, upper)
        windows = self._windows()
        if windows:
            prior = deployed.kv_event_prior(cfg, windows, lstm)
            if prior is not None:
                # the prior asks whether an earlier occurrence of the event lies inside the series' history: the
                # tick reads only the model's window, so a history starting with it reaches back to `history_seconds`
                # (the grid a full read would have had); one starting later (a hole in the window) starts there
                t0 = np.where(start > 0, t[start], min(self._g0, float(t[0])))
                upper = prior_upper_many(prior, t0, float(t[-1]), t_future, upper, cfg.horizon_seconds)
        return yhat, lower, upper, t_future

    #: forecast a window the tick holds twice (a one-instance pool's mean and max) once (`same_windows`)
    dedupe_windows: bool = True

    def _windows(self) -> list:
        if self._event_windows is None:
            self._event_windows = deployed.service_windows(self.events)
        return self._event_windows

    def kv_window(self, lstm: LSTMForecaster) -> int:
        """Grid points of KV usage the batched pass needs: the model's window (`lookback`) and the rate's few
        points before it, at least `min_history_points` (the skip check) and a horizon and a step (the band learns
        from the outcome of the forecast made one horizon ago)."""
        cfg = self.config
        horizon_steps = math.ceil(cfg.horizon_seconds / cfg.step_seconds - 1e-9)
        return max(lstm.params.lookback + RATE_WINDOW_STEPS, cfg.min_history_points + 1, horizon_steps + 2)

    def series_span(self, kind: str, n: int, batch_model: tuple[LSTMForecaster, float] | None) -> int:
        """Grid points a series kind is read over: KV through the batched LSTM pass, its window; the rest (traffic,
        whose models look back an hour or more; the per-series path and the baselines), the whole `history_seconds`."""
        if kind == "kv" and batch_model is not None:
            return min(n, self.kv_window(batch_model[0]))
        return n

    def covariate_span(self, n: int, batch_model: tuple[LSTMForecaster, float]) -> int:
        return min(n, batch_model[0].params.lookback + RATE_WINDOW_STEPS)
