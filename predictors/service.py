"""The predictor service's loop: `PredictorLoop.tick(now, store) -> samples`, pure apart from the store it is handed.

Each tick reads the recent history of the forecast targets from the store (Prometheus or the in-memory store; the
same `query_range` interface), per (pool, version), through a rolling history (`infercast.predictors.rolling`): each
metric's window is read whole on the first tick (so a restarted service forecasts on its first tick when the store has
the history), then only its newest points.  The window is what the model needs (`spans`): the batched LSTM's KV
window and covariates (about 15 min), the whole `history_seconds` for traffic (its models look back an hour or
more; Prophet, when chosen, is fitted on hours) and for the per-series path and baselines.  KV usage comes from the
recording rules `KV_RULES` when they cover the window (`kv_source`), else from the raw metric combined here:
- `kv`: `infercast_kv_cache_usage_ratio`, mean over the pool's instances, and `kv_max`: its fullest instance (what
  breaks first; published as `aggregate="max"`, the series the predictive alert and the actuator act on);
- `rps`: the rate of `infercast_router_requests_total`, summed over the pool's label sets, computed here from the
  raw counter on the step grid with Prometheus' reset rule, over a 4-step window (`counter_rate`).

A series gets no forecast (and `infercast_forecast_skipped{reason}` = 1, plus a log line when the reason changes)
when its input cannot support one:
- `source_down`: the store did not answer (down, slow, error);
- `stale`: the newest sample is older than `stale_after_seconds` (a series that disappeared);
- `nan`: too few finite samples because the values are NaN/Inf;
- `too_short`: fewer than `min_history_points` samples (a series that just appeared);
- `gap`: enough samples in total, but a hole longer than `stale_after_seconds` leaves too few after it;
- `model_error`: the model raised or returned non-finite values (the fallback baseline is tried first).
Nothing is remembered about skipped series except their model state, so a series recovers by itself on the first
tick its data supports a forecast again.

Models (each series its own pipeline from `infercast.predictors.deployed`: the model, its band calibrated online, the
calendar prior for KV): KV usage by the LSTM when `predictor.model_file` loads, else by the best baseline
(`registry.BEST_BASELINE`);
a refused model file is logged once and reported every tick as `infercast_forecast_skipped{series="kv:lstm",
reason="model_error"}` (pool and version empty: it concerns every pool), while the baseline's forecasts are published
with `forecaster="<baseline>_aci"`.  Traffic by the online combination of the simple forecasters
(`infercast.predictors.combined`) with the calendar's announced rates (events from `config.events`, each pool's
share of an event's `expected_rps` set every tick from its share of the traffic now), published as
`forecaster="combined_aci"`; `rps_model` names another (`prophet_anchored`: Prophet anchored to the current level,
refitted every `refit_interval_seconds`).  Forecasts are made every tick.

A tick (`PredictorLoop.tick`) starts its grid and reads (`_start_tick`), takes each series through read, check and
forecast (`_series_samples`), sends the ready KV series through the batched pass, and publishes.  Reading the store
onto the grid is `infercast.predictors.reading`; the batched KV pass, `infercast.predictors.kv_batch`.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from infercast.alertrules.rules import KV_USAGE_AVG, KV_USAGE_MAX, REQ_RATE
from infercast.alertrules.sources import ENGINES, EXPORTER, series_name
from infercast.catalog import (
    KV_CACHE_FRAGMENTATION_RATIO,
    KV_CACHE_USAGE_RATIO,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    ROUTER_REQUESTS_TOTAL,
)
from infercast.config import FleetConfig, PredictorConfig, Thresholds
from infercast.predictors import deployed, registry
from infercast.predictors.base import Forecast, Forecaster, History
from infercast.predictors.conformal import AdaptiveBandBank
from infercast.predictors.kv_batch import BatchedKV, KVJob, RowBlocks
from infercast.predictors.publish import (
    ForecastSample,
    KVLabels,
    breach_eta_sample,
    finite_forecast,
    forecast_samples,
    last_success_sample,
    skipped_sample,
)
from infercast.predictors.reading import (
    ALIGN_CHUNK,
    RATE_WINDOW_STEPS,
    Aligned,
    AlignedMatrix,
    Group,
    TickReads,
    align,
    align_block,
    align_many,
    align_matrix,
    counter_rate,
    series_history,
)
from infercast.predictors.rolling import Block, RollingHistory
from infercast.predictors.timescale import TimeScaled
from infercast.store import Store, StoreError

if TYPE_CHECKING:
    from infercast.predictors.lstm import LSTMForecaster

#: what importers read from here (the tick's reading and batched pass live in `reading` and `kv_batch`)
__all__ = [
    "ALIGN_CHUNK",
    "COVARIATE_METRICS",
    "KV_RULES",
    "KV_SOURCES",
    "RATE_WINDOW_STEPS",
    "SERIES",
    "Aligned",
    "AlignedMatrix",
    "Group",
    "PredictorLoop",
    "RowBlocks",
    "SourceSeries",
    "align",
    "align_block",
    "align_many",
    "align_matrix",
    "check_input",
    "check_inputs",
    "counter_rate",
    "traffic_shares",
]

log = logging.getLogger(__name__)

COVARIATE_METRICS = {
    "running": (REQUESTS_RUNNING, "sum"),
    "waiting": (REQUESTS_WAITING, "sum"),
    "fragmentation": (KV_CACHE_FRAGMENTATION_RATIO, "mean"),
}
#: the KV aggregates -> the recording rule that records the same figure per (pool, version) (alertrules/rules.py)
KV_RULES: dict[str, str] = {"max": KV_USAGE_MAX, "mean": KV_USAGE_AVG}
#: where KV usage is read from: the recording rules, the raw metric, or the rules when they cover what is read
KV_SOURCES = ("auto", "rules", "raw")


@dataclass(frozen=True)
class SourceSeries:
    """The series a tick reads, by the fleet file's `metrics.source` (alertrules/sources.py, the one table):
    - `exporter`: KV usage per instance `infercast_kv_cache_usage_ratio` (its rules `KV_RULES`), traffic the rate
      of the router's `infercast_router_requests_total` computed here;
    - `engines`: KV usage per engine `instance:engine_kv_cache_usage:ratio` (its rules
      `pool_version:engine_kv_cache_usage:max` / `:avg`), traffic the engines' finished requests per second per
      pool and version (`pool_version:engine_requests:rate5m`, already a rate: summed, not differentiated).
    The LSTM's running and waiting covariates follow the same table (the engines' `instance:engine_requests_running
    :count` / `_waiting:count`); fragmentation is the exporter's in both (no engine exports it)."""

    kv: str
    kv_rules: dict[str, str]
    rps: tuple[str, str]  # (metric, how its series are combined)
    covariates: dict[str, tuple[str, str]]

    @classmethod
    def of(cls, source: str = EXPORTER, window: str = "5m") -> SourceSeries:
        rps = (ROUTER_REQUESTS_TOTAL, "rate") if source == EXPORTER else (series_name(REQ_RATE, source, window), "sum")
        return cls(
            kv=series_name(KV_CACHE_USAGE_RATIO, source, window),
            kv_rules={how: series_name(name, source, window) for how, name in KV_RULES.items()},
            rps=rps,
            covariates={
                **{k: (series_name(m, source, window), how) for k, (m, how) in COVARIATE_METRICS.items()},
                "rps": rps,
            },
        )

    def series(self) -> tuple[tuple[str, str, str, str, str], ...]:
        """`SERIES` with these inputs' metrics."""
        return tuple(
            (key, kind, self.kv if kind == "kv" else self.rps[0], how if kind == "kv" else self.rps[1], agg)
            for key, kind, _, how, agg in SERIES
        )


def check_input(t: np.ndarray, a: Aligned, now: float, min_points: int, stale_after: float) -> tuple[str | None, int]:
    """(skip reason or None, index where the usable history starts)."""
    fin = np.isfinite(a.y)
    fresh = now - a.last_raw_t <= stale_after
    if not fin.any():
        return ("nan" if a.raw_nonfinite and fresh else "stale"), 0
    last = t[np.nonzero(fin)[0][-1]]
    if now - last > stale_after:
        # Samples keep coming but are NaN/Inf: say so; nothing at all recently: the series went away.
        return ("nan" if fresh and a.raw_nonfinite else "stale"), 0
    idx = np.nonzero(fin)[0]
    start = 0
    holes = np.nonzero(np.diff(t[idx]) > stale_after)[0]
    if len(holes):
        start = int(idx[holes[-1] + 1])
    usable = int(fin[start:].sum())
    if usable >= min_points:
        return None, start
    if len(holes) and int(fin.sum()) >= min_points:
        return "gap", start
    if a.raw_nonfinite and a.raw_points - a.raw_nonfinite < min_points:
        return "nan", start
    return "too_short", start


def check_inputs(
    t: np.ndarray, am: AlignedMatrix, now: float, min_points: int, stale_after: float, chunk: int = 4096
) -> tuple[list[str | None], np.ndarray]:
    """`check_input` for every row of `am` at once: (skip reason or None per row, start index per row), `chunk`
    rows at a time (the work stays in cache, and memory bounded, on a large fleet)."""
    reasons: list[str | None] = []
    starts = []
    for a in range(0, max(len(am.groups), 1), chunk):
        part = AlignedMatrix(
            am.groups[a : a + chunk],
            am.y[a : a + chunk],
            am.raw_points[a : a + chunk],
            am.raw_nonfinite[a : a + chunk],
            am.last_raw_t[a : a + chunk],
            index={("", ""): 0},  # unused here; skips building the index
        )
        r, st = _check_rows(t, part, now, min_points, stale_after)
        reasons += r
        starts.append(st)
    return reasons, np.concatenate(starts)


def _check_rows(
    t: np.ndarray, am: AlignedMatrix, now: float, min_points: int, stale_after: float
) -> tuple[list[str | None], np.ndarray]:
    y = am.y
    g, n = y.shape
    if not g:
        return [], np.zeros(0, dtype=np.int64)
    fin = np.isfinite(y)
    cols = np.arange(n, dtype=np.int32)
    fresh = now - am.last_raw_t <= stale_after
    anyfin = fin.any(axis=1)
    last = n - 1 - np.argmax(fin[:, ::-1], axis=1)
    gone = ~anyfin | (now - t[last] > stale_after)
    prev = np.maximum.accumulate(np.where(fin, cols, np.int32(-1)), axis=1)  # the newest finite index at or before
    before = np.concatenate([np.full((g, 1), -1, dtype=np.int32), prev[:, :-1]], axis=1)
    hole = fin & (before >= 0) & (t[None, :] - t[np.maximum(before, 0)] > stale_after)
    has_hole = hole.any(axis=1)
    start = np.where(has_hole, n - 1 - np.argmax(hole[:, ::-1], axis=1), 0)
    csum = np.cumsum(fin, axis=1, dtype=np.int32)
    total = csum[:, -1]
    usable = total - np.where(start > 0, csum[np.arange(g), np.maximum(start - 1, 0)], 0)
    nan_like = (am.raw_nonfinite > 0) & (am.raw_points - am.raw_nonfinite < min_points)
    gap = has_hole & (total >= min_points)
    ok = ~gone & (usable >= min_points)
    reasons: list[str | None] = [None] * g
    for i in np.nonzero(~ok)[0].tolist():  # the few that are skipped, in the order `check_input` asks
        if gone[i]:
            reasons[i] = "nan" if am.raw_nonfinite[i] and fresh[i] else "stale"
        else:
            reasons[i] = "gap" if gap[i] else "nan" if nan_like[i] else "too_short"
    return reasons, np.where(gone, 0, start).astype(np.int64)


def _load_lstm(pc: PredictorConfig) -> tuple[Forecaster | None, str | None]:
    """(model, None), (None, why it was refused), or (None, None) when there is simply no model file."""
    lstm, note = registry.load_lstm(pc.model_file)
    if lstm is None and pc.model_file is None and "no model file" in note:
        log.info("predictor: %s; forecasting KV usage with %s", note, registry.BEST_BASELINE["kv"])
        return None, None
    scale = pc.time_scale  # the model's step and horizon are in the fleet's own time
    at = f" (x time_scale {scale:g})" if scale != 1.0 else ""
    if lstm is not None:
        params = getattr(lstm, "params", None)
        step, horizon = getattr(params, "step_s", None), getattr(params, "horizon_s", None)
        if step is not None and abs(step - pc.step_seconds * scale) > 1e-9:
            note = f"lstm skipped: trained at a {step:g} s step, predictor.step_seconds is {pc.step_seconds:g}{at}"
            lstm = None
        elif horizon is not None and horizon + 1e-9 < pc.horizon_seconds * scale:
            note = (
                f"lstm skipped: forecasts {horizon:g} s ahead, predictor.horizon_seconds is {pc.horizon_seconds:g}{at}"
            )
            lstm = None
    if lstm is None:
        log.warning(
            "predictor: %s; forecasting KV usage with the baseline %s instead", note, registry.BEST_BASELINE["kv"]
        )
        return None, note
    # a fleet on a faster clock: the model reads it in its own time
    return (TimeScaled(lstm, scale) if scale != 1.0 else lstm), None


@dataclass
class SeriesModel:
    model: Forecaster
    last_fit: float | None = None
    fits: bool = True  # False for the pre-trained LSTM: the service never retrains it


#: What the loop forecasts: (series key, kind, metric, how the instances are combined, KV aggregate label).
SERIES: tuple[tuple[str, str, str, str, str], ...] = (
    ("kv", "kv", KV_CACHE_USAGE_RATIO, "mean", "mean"),
    ("kv_max", "kv", KV_CACHE_USAGE_RATIO, "max", "max"),
    ("rps", "rps", ROUTER_REQUESTS_TOTAL, "rate", ""),
)


#: `metrics.source` -> where its traffic series comes from (what the predictor's log names)
TRAFFIC_SOURCES = {
    EXPORTER: "the router's counters, through the exporter's /ingest/router or the fleet twin",
    ENGINES: "the engines' finished requests, their recording rule",
}


@dataclass
class _Tick:
    """One tick's working state: its time and grid, the KV model and source, what it read and placed on the grid,
    the LSTM's covariates, the KV series waiting for the batched pass, and the models that forecast."""

    now: float
    t: np.ndarray
    batch_model: tuple[LSTMForecaster, float] | None
    rules: bool
    reads: TickReads
    placed: dict[tuple[str, str], AlignedMatrix] = field(default_factory=dict)
    covs: dict[str, AlignedMatrix] | None = None
    batch: list[KVJob] = field(default_factory=list)
    succeeded: set[str] = field(default_factory=set)
    _checked: tuple | None = None  # the last `check`'s inputs and answer

    def check(self, w: int, am: AlignedMatrix, min_points: int, stale_after: float) -> tuple[list, np.ndarray]:
        """`check_inputs` on the last `w` grid points of `am`, worked out once for two series that read the same
        arrays (a fleet of one-instance pools: `align_block` shares the mean's and the max's); copies, as the
        callers amend them."""
        last = self._checked
        same = (
            last is not None and last[0] == w and all(a is b for a, b in zip(last[1], _check_arrays(am), strict=True))
        )
        if not same:
            reasons, starts = check_inputs(self.t[self.n - w :], am, self.now, min_points, stale_after)
            self._checked = last = (w, _check_arrays(am), reasons, starts)
        return list(last[2]), last[3].copy()

    @property
    def n(self) -> int:
        return len(self.t)

    def aligned(self, metric: str, how: str, raw: Block, w: int, inputs: Sequence[tuple[str, ...]]) -> AlignedMatrix:
        """`metric` combined `how` on the last `w` grid points; KV's mean and max share one placement on the grid."""
        if (metric, how) not in self.placed:
            hows = tuple(h for _, _, m, h, _ in inputs if m == metric) or (how,)
            self.placed.update({(metric, h): a for h, a in align_block(raw.tail(w), hows).items()})
        return self.placed[(metric, how)]


@dataclass
class PredictorLoop(BatchedKV):
    """Forecast every (pool, version) each tick; see the module docstring for what is read and published."""

    config: PredictorConfig
    trigger: float = Thresholds().kv_forecast_trigger  # thresholds.kv_forecast_trigger (from_config gives the file's)
    events: Sequence = ()
    lstm: Forecaster | None = None
    lstm_error: str | None = None
    rps_model: str | None = None  # None: the service's traffic model (`deployed.TRAFFIC_MODEL`); or a model by name
    kv_model: str | None = None  # None: the LSTM when it loaded, else the best baseline; or a baseline by name
    timer: Callable[[], float] = time.perf_counter
    _models: dict[tuple[str, Group], SeriesModel] = field(default_factory=dict)
    _last_success: dict[str, float] = field(default_factory=dict)
    _last_reason: dict[tuple[str, Group], str | None] = field(default_factory=dict)
    _failing: set[tuple[str, str, Group]] = field(default_factory=set)
    _store_errors: dict[str, str] = field(default_factory=dict)
    _known: dict[str, set[Group]] = field(default_factory=dict)
    kv_source: str = "auto"  # KV_SOURCES: see `_kv_from_rules`
    metrics_source: str = EXPORTER  # the fleet file's `metrics.source`: what `SourceSeries` the tick reads
    rate_window: str = "5m"  # the fleet file's `metrics.rate_window` (the engine rules' names)
    batched: bool = True  # KV through one LSTM pass per tick (`_kv_batch`); False: series by series, the reference
    _kv_bank: AdaptiveBandBank | None = None
    _kv_labels: dict[str, KVLabels] = field(default_factory=dict)  # the KV samples' labels per series (`KVLabels`)
    _same_memo: dict = field(default_factory=dict)  # the batched pass' rows per group (`kv_batch.same_windows`)
    _event_windows: list | None = None
    _rolling: RollingHistory = field(default_factory=RollingHistory)  # the history kept between ticks
    # series -> group -> the newest time it had data / a finite value (what a window shorter than the history
    # forgets: `_gone_stale`, `_hole_before_window`)
    _last_data: dict[str, dict[Group, float]] = field(default_factory=dict)
    _last_finite: dict[str, dict[Group, float]] = field(default_factory=dict)
    _hole_ends: dict[str, dict[Group, float]] = field(default_factory=dict)  # ... and where its history restarted
    _rules_checked: float | None = None  # when `auto` last looked whether the rules cover the window
    _rules_on: bool = False
    _g0: float = -math.inf  # this tick's `history_seconds` grid start (the calendar prior's view of the history)
    _traffic_found: bool | None = None  # whether the traffic series had any (pool, version) last tick (`_say_traffic`)
    inputs: SourceSeries = field(init=False)

    def __post_init__(self) -> None:
        self.inputs = SourceSeries.of(self.metrics_source, self.rate_window)

    @classmethod
    def from_config(cls, cfg: FleetConfig, **kw) -> PredictorLoop:
        """The loop for a fleet file; loads the LSTM (refusing a bad or mismatched one and saying so).

        `predictor.model_file` names the model; unset, the shipped model (`predictors/models/lstm_kv`) is used when
        it is there.  A model trained at another step or for a shorter horizon than `predictor` asks for is refused
        too.  Refused: logged once, reported every tick as `skipped{series="kv:lstm",reason="model_error"}`, and KV
        usage is forecast by the best baseline.  Absent (no file configured, none shipped): the baseline, logged.
        """
        lstm, err = None, None
        if kw.pop("load_lstm", True) and kw.get("kv_model") in (None, "lstm"):
            lstm, err = _load_lstm(cfg.predictor)
        rps_model = kw.pop("rps_model", None)
        kw.setdefault("metrics_source", cfg.metrics.source)
        kw.setdefault("rate_window", cfg.metrics.rate_window)
        return cls(
            cfg.predictor,
            trigger=cfg.thresholds.kv_forecast_trigger,
            events=cfg.events,
            lstm=lstm,
            lstm_error=err,
            rps_model=rps_model,
            **kw,
        )

    # ------------------------------------------------------------------ models
    def _model(self, key: str, kind: str, group: Group) -> SeriesModel:
        """The series' pipeline (`infercast.predictors.deployed`): one per series, pool and version, holding its band
        state."""
        if (key, group) not in self._models:
            if kind == "kv":
                lstm = self.lstm if self.kv_model in (None, "lstm") else None
                m = deployed.service_forecaster(
                    "kv", self.config, lstm=lstm, events=self.events, model=None if lstm else self.kv_model
                )
                fits = lstm is None
            else:
                m = deployed.service_forecaster("rps", self.config, events=self.events, model=self.rps_model)
                fits = True
            self._models[(key, group)] = SeriesModel(m, fits=fits)
        return self._models[(key, group)]

    def _forecast(self, key: str, kind: str, group: Group, h: History, now: float) -> tuple[Forecast | None, list[str]]:
        """Forecast with the series' model, falling back to the best baseline; (forecast, failed model names)."""
        sm = self._model(key, kind, group)
        series = kind
        failed = []
        model = sm.model
        try:
            if sm.fits and (sm.last_fit is None or now - sm.last_fit >= self.config.refit_interval_seconds):
                model.fit([h])
                sm.last_fit = now
            fc = model.forecast(h, self.config.horizon_seconds)
            if not finite_forecast(fc):
                raise ValueError("non-finite forecast")
            if (model.name, series, group) in self._failing:
                log.info("predictor: %s for %s %s/%s works again", model.name, series, *group)
                self._failing.discard((model.name, series, group))
            return fc, failed
        except Exception as e:  # any model failure: say so (once per run of failures), then try the baseline
            return self._fallback(series, group, model.name, h, e)

    def _fallback(
        self, series: str, group: Group, name: str, h: History, error: object
    ) -> tuple[Forecast | None, list[str]]:
        """After model `name` failed on a series: say so (once per run of failures), then forecast with the best
        baseline; (forecast or None, failed model names)."""
        if (name, series, group) not in self._failing:
            log.warning(
                "predictor: %s for %s %s/%s failed: %s; using %s",
                name,
                series,
                *group,
                error,
                registry.BEST_BASELINE[series],
            )
            self._failing.add((name, series, group))
        failed = [name]
        fallback = registry.make(registry.BEST_BASELINE[series], series, self.config.band)
        if fallback.name == name:
            return None, failed
        try:
            fc = fallback.forecast(h, self.config.horizon_seconds)
            return (fc if finite_forecast(fc) else None), failed
        except Exception as e:
            log.warning("predictor: fallback %s for %s %s/%s failed: %s", fallback.name, series, *group, e)
            return None, [*failed, fallback.name]

    # ------------------------------------------------------------------ the tick
    def tick(self, now: float, store: Store) -> list[ForecastSample]:
        """Every series' samples this tick: read each from the store, check it, forecast it (KV in one batched pass
        when the LSTM can take it), then the models' last successes."""
        with collector_paused():
            tick = self._start_tick(now, store)
            slots = [self._series_samples(tick, *spec) for spec in self.inputs.series()]  # in SERIES order
            if tick.batch and tick.batch_model is not None:
                kv_t = tick.t[tick.n - self.series_span("kv", tick.n, tick.batch_model) :]
                tick.succeeded |= self._kv_batch(now, kv_t, tick.batch, tick.covs or {}, *tick.batch_model)
            return self._publish(now, slots, tick.succeeded)

    def _start_tick(self, now: float, store: Store) -> _Tick:
        """The tick's grid (`history_seconds` back from `now`, on `step_seconds`), its model and its reads."""
        cfg = self.config
        step = cfg.step_seconds
        g0 = math.floor((now - cfg.history_seconds) / step) * step
        n = math.floor((now - g0) / step + 1e-9) + 1
        t = g0 + step * np.arange(n)
        batch_model = self._batch_model()
        rules = self._kv_from_rules(store, now, t, self.series_span("kv", n, batch_model))
        reads = TickReads(store, self._rolling, t, self.spans(n, batch_model, rules), step)
        self._g0 = float(t[0])
        return _Tick(now, t, batch_model, rules, reads)

    def _series_samples(self, tick: _Tick, series: str, kind: str, metric: str, how: str, aggregate: str) -> list:
        """One series' samples for every (pool, version) it has, or why it has none; the KV series that go through
        the batched pass get theirs there (the list is filled in place)."""
        slot: list[ForecastSample] = []
        if kind == "kv" and tick.rules:  # the recorded figure per (pool, version): a series per group
            metric, how = self.inputs.kv_rules[how], "max"
        fresh = metric not in tick.reads
        raw = tick.reads.read(metric)
        if fresh:
            self._say_store(metric, raw)
        if isinstance(raw, StoreError):
            for group in self._known.get(series) or {("", "")}:
                slot.append(skipped_sample(*group, series, "source_down"))
                self._note(series, group, "source_down")
            return slot
        n = tick.n
        w = self.series_span(kind, n, tick.batch_model)
        ts = tick.t[n - w :]  # this series' grid: the last `w` points of the tick's
        am = tick.aligned(metric, how, raw, w, self.inputs.series())
        self._known[series] = set(am.groups)
        if kind == "rps":
            self._say_traffic(metric, bool(am.groups))
        if w < n:
            self._gone_stale(series, am, float(tick.t[0]), slot)
        if kind == "kv" and self.lstm is not None and self.kv_model in (None, "lstm") and tick.covs is None:
            # the batched pass reads only the model's window of them: it asks the store for no more
            tail = None if tick.batch_model is None else self.covariate_span(n, tick.batch_model)
            tick.covs = self._covariates(tick.reads.read, w if tail is None else tail)
        cfg = self.config
        reasons, starts = tick.check(w, am, cfg.min_history_points, cfg.stale_after_seconds)
        if w < n:
            self._hole_before_window(series, ts, am, reasons, starts, float(tick.t[0]))
        if kind == "kv" and tick.batch_model is not None:
            tick.batch.append(KVJob(series, aggregate, am, reasons, starts, slot))
        else:
            self._forecast_each(tick, series, kind, aggregate, ts, am, reasons, starts, slot)
        return slot

    def _forecast_each(
        self,
        tick: _Tick,
        series: str,
        kind: str,
        aggregate: str,
        ts: np.ndarray,
        am: AlignedMatrix,
        reasons: list[str | None],
        starts: np.ndarray,
        slot: list[ForecastSample],
    ) -> None:
        """The per-series path: each ready (pool, version) through its own model, its samples into `slot`."""
        cfg, now = self.config, tick.now
        shares = traffic_shares(am.y) if kind == "rps" else None
        for i, group in enumerate(am.groups):
            reason, start = reasons[i], int(starts[i])
            if reason is None:
                h = series_history(series, kind, group, ts, am.y[i], start, tick.covs)
                if shares is not None:  # the calendar's fleet-wide expected rates, spread as today's traffic is
                    deployed.set_traffic_share(self._model(series, kind, group).model, float(shares[i]))
                fc, failed = self._forecast(series, kind, group, h, now)
                for name in failed:
                    slot.append(skipped_sample(*group, f"{series}:{name}", "model_error"))
                if fc is None:
                    reason = "model_error"
                else:
                    slot.extend(forecast_samples(kind, *group, fc, cfg.horizon_seconds, aggregate or "mean"))
                    if kind == "kv":
                        eta = fc.breach_eta(self.trigger, now)
                        slot.append(breach_eta_sample(*group, self.trigger, eta, aggregate))
                    tick.succeeded.add(fc.model)
            if reason is not None:
                slot.append(skipped_sample(*group, series, reason))
            self._note(series, group, reason)

    def _publish(self, now: float, slots: list[list[ForecastSample]], succeeded: set[str]) -> list[ForecastSample]:
        """The tick's samples in their order: a refused LSTM's skip, each series', then each model's last success."""
        out: list[ForecastSample] = []
        if self.lstm_error:
            out.append(skipped_sample("", "", "kv:lstm", "model_error"))
        for slot in slots:
            out.extend(slot)
        for m in succeeded:
            self._last_success[m] = now
        out.extend(last_success_sample(m, ts) for m, ts in sorted(self._last_success.items()))
        return out

    def _say_store(self, metric: str, raw: Block | StoreError) -> None:
        """Log a store that stopped answering for `metric` (once per outage and per new error), and its return."""
        if isinstance(raw, StoreError):
            if self._store_errors.get(metric) != str(raw):
                log.warning("predictor: cannot read %s: %s", metric, raw)
            self._store_errors[metric] = str(raw)
        elif self._store_errors.pop(metric, None) is not None:
            log.info("predictor: reading %s again", metric)

    def _covariates(self, read: Callable[[str], Block | StoreError], tail: int) -> dict[str, AlignedMatrix]:
        """LSTM covariates per group on the grid's last `tail` points (the batched pass reads the model's window and
        the few points before it a rate needs; the per-series path the KV series' whole grid); a covariate the store
        cannot give is left out (the model masks it)."""
        out: dict[str, AlignedMatrix] = {}
        for name, (metric, how) in self.inputs.covariates.items():
            b = read(metric)
            if not isinstance(b, StoreError):
                out[name] = align_block(b.tail(tail), (how,))[how]
        return out

    def _gone_stale(self, series: str, am: AlignedMatrix, g0: float, slot: list[ForecastSample]) -> None:
        """A series read over a window shorter than `history_seconds` that left it is still reported `stale` until
        its last data is older than `history_seconds`, as a read of the whole history would: a pool that went away
        reads the same whatever window its model needs."""
        seen = self._last_data.setdefault(series, {})
        have = np.flatnonzero(am.last_raw_t > -math.inf)
        # in row order, as a loop over the rows would
        seen.update(zip(_rows(am.groups, have), am.last_raw_t[have].tolist(), strict=True))
        if len(seen) == len(have) and (not len(have) or float(am.last_raw_t[have].min()) >= g0):
            return  # (a steady tick) every group remembered has data in the window: none gone, none forgotten
        for group, last in list(seen.items()):
            if last < g0:
                del seen[group]  # older than the history: forgotten, as the whole history would have it
            elif group not in am.index:
                slot.append(skipped_sample(*group, series, "stale"))
                self._note(series, group, "stale")

    def _hole_before_window(
        self,
        series: str,
        t: np.ndarray,
        am: AlignedMatrix,
        reasons: list[str | None],
        starts: np.ndarray,
        g0: float,
    ) -> None:
        """`check_inputs` on a window sees a hole only when the window holds the value before it; a series whose
        window begins with NaN after a value older than the window (remembered from earlier ticks) has a hole there:
        its history starts at its first value in the window, as a read of the whole history would say (`gap`
        instead of `too_short` while that is too short); so does one whose hole, seen on an earlier tick, began
        before the window.  In place; then remembers each series' newest value and where its history restarted."""
        cfg = self.config
        fin = np.isfinite(am.y)
        anyfin = fin.any(axis=1)
        first = np.argmax(fin, axis=1)
        last = len(t) - 1 - np.argmax(fin[:, ::-1], axis=1)
        prev = self._last_finite.setdefault(series, {})
        holes = self._hole_ends.setdefault(series, {})
        for i in np.nonzero(anyfin & (first > 0) & (starts == 0))[0].tolist():
            group = am.groups[i]
            s_at, p = holes.get(group), prev.get(group)
            if s_at is not None and s_at > t[0]:
                starts[i] = int(np.searchsorted(t, s_at - 1e-9))  # a hole seen earlier, its start now out of the window
            elif p is not None and p < t[0] and t[first[i]] - p > cfg.stale_after_seconds:
                starts[i] = first[i]  # a series back in the window after a hole longer than it
            else:
                continue
            if reasons[i] == "too_short":
                reasons[i] = "gap"
        # each group's newest value, and where a history restarted, in row order (as a loop over the rows would)
        rows = np.flatnonzero(anyfin)
        prev.update(zip(_rows(am.groups, rows), t[last[rows]].tolist(), strict=True))
        restarted = rows[starts[rows] > 0]
        holes.update(zip(_rows(am.groups, restarted), t[starts[restarted]].tolist(), strict=True))
        for d in (prev, holes):
            if d and min(d.values()) < g0:
                for group in [g for g, at in d.items() if at < g0]:
                    del d[group]

    # ------------------------------------------------------------------ what a tick reads
    def _kv_from_rules(self, store: Store, now: float, t: np.ndarray, w: int) -> bool:
        """Whether KV usage is read from the recording rules this tick (`kv_source`): `rules` always, `raw` never,
        `auto` when the fullest-instance rule has series that reach back to the window's start (rules are not
        evaluated retroactively: a rule loaded ten minutes ago cannot fill a fifteen-minute window), looked at on
        the first tick and again every `refit_interval_seconds` (one query), else the raw metric combined here."""
        if self.kv_source in ("rules", "raw"):
            return self.kv_source == "rules"
        if self._rules_checked is not None and now - self._rules_checked < self.config.refit_interval_seconds:
            return self._rules_on
        start, end, step = float(t[len(t) - w]), float(t[-1]), self.config.step_seconds
        try:
            probe = store.query_range(self.inputs.kv_rules["max"], None, start, end, step)
        except StoreError:
            return self._rules_on  # asked again next tick
        self._rules_checked = now
        on = any(len(s.t) and s.labels.get("pool") and s.t[0] <= start + step / 2 for s in probe)
        if on != self._rules_on:
            src = " and ".join(self.inputs.kv_rules.values()) if on else self.inputs.kv
            log.info("predictor: reading KV usage from %s", src)
        self._rules_on = on
        return on

    def spans(self, n: int, batch_model: tuple[LSTMForecaster, float] | None, rules: bool = False) -> dict[str, int]:
        """metric -> grid points this tick reads of it (the longest of its uses): what the rolling history holds.
        `rules`: KV usage from its recording rules (`KV_RULES`) instead of the raw metric."""
        out: dict[str, int] = {}
        for _, kind, metric, how, _ in self.inputs.series():
            if kind == "kv" and rules:
                metric = self.inputs.kv_rules[how]
            out[metric] = max(out.get(metric, 0), self.series_span(kind, n, batch_model))
        if self.lstm is not None and self.kv_model in (None, "lstm"):
            cov = self.series_span("kv", n, batch_model) if batch_model is None else self.covariate_span(n, batch_model)
            for metric, _ in self.inputs.covariates.values():
                out[metric] = max(out.get(metric, 0), cov)
        self._rolling.forget(set(out))
        return out

    def _say_traffic(self, metric: str, found: bool) -> None:
        """Name the traffic series this loop reads, once when it has series and once when it has none (no router
        reporting to the exporter, say): then traffic is not forecast at all, never forecast as 0 req/s."""
        if self._traffic_found is found:
            return
        self._traffic_found = found
        if found:
            log.info("predictor: traffic from %s (%s)", metric, TRAFFIC_SOURCES.get(self.metrics_source, ""))
        else:
            log.warning(
                "predictor: no traffic forecast: %s has no series (%s); with no router reporting, set "
                "metrics.source: engines to read the engines' own request rates (docs/quickstart-prometheus.md)",
                metric,
                TRAFFIC_SOURCES.get(self.metrics_source, ""),
            )

    def _note(self, series: str, group: Group, reason: str | None) -> None:
        """Log when a series' state changes (skipped for a reason, or forecast again), not on every tick."""
        key = (series, group)
        prev = self._last_reason.get(key, "unseen")
        if prev != reason:
            if reason is None:
                log.info("predictor: forecasting %s for %s/%s", series, *group)
            else:
                log.warning("predictor: no forecast for %s %s/%s: %s", series, *group, reason)
        self._last_reason[key] = reason


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The garbage collector off for the block (a tick), on again after if it was.  A 50,000-series tick builds some
    two million objects (samples, their labels, the store's answers), none of them garbage in a cycle; with the
    collector on they set off about six full collections per tick, each walking every object the process holds
    (measured at 50,000 series on 2 shared cores: 1.2 s of a 6 s tick, 0.15 s a collection, 4x the 10,000-series
    figure: the main reason the tick grew faster than the fleet).  Paused, what the tick leaves is walked by one
    young-generation collection after it (about 0.27 s at 50,000; bench/scale.py counts it in the tick's time)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _check_arrays(am: AlignedMatrix) -> tuple[np.ndarray, ...]:
    """What `check_inputs` reads of `am` (with the grid and the settings)."""
    return am.y, am.raw_points, am.raw_nonfinite, am.last_raw_t


def _rows(groups: list[Group], idx: np.ndarray) -> list[Group]:
    """`groups[i] for i in idx`; `groups` itself when `idx` is every row in order."""
    if len(idx) == len(groups):
        return groups
    return [groups[i] for i in idx.tolist()]


def traffic_shares(y: np.ndarray) -> np.ndarray:
    """Each row's share of the rows' total traffic, from each row's newest finite rate (equal shares when the total
    is 0 or unknown)."""
    rows = y.shape[0]
    last = np.zeros(rows)
    for i in range(rows):
        ok = np.flatnonzero(np.isfinite(y[i]))
        last[i] = max(float(y[i, ok[-1]]), 0.0) if len(ok) else 0.0
    total = float(last.sum())
    return last / total if total > 0 else np.full(rows, 1.0 / max(rows, 1))
