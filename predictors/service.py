"""The predictor service's loop: `PredictorLoop.tick(now, store) -> samples`, pure apart from the store it is handed.

Each tick reads the recent history of the forecast targets from the store (Prometheus or the in-memory store; the
same `query_range` interface), per (pool, version); the whole `history_seconds` every tick, so a restarted service
forecasts on its first tick when the store has the history:
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

Models (each series its own pipeline from `predictors.deployed`: the model, its band calibrated online, the calendar
prior for KV): KV usage by the LSTM when `predictor.model_file` loads, else by the best baseline
(`registry.BEST_BASELINE`);
a refused model file is logged once and reported every tick as `infercast_forecast_skipped{series="kv:lstm",
reason="model_error"}` (pool and version empty: it concerns every pool), while the baseline's forecasts are published
with `model="<baseline>_aci"`.  Traffic by Prophet anchored to the current level (events from `config.events`), else
the best baseline.  Prophet is
refitted every `refit_interval_seconds`; forecasts are made every tick.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from infercast.catalog import (
    KV_CACHE_FRAGMENTATION_RATIO,
    KV_CACHE_USAGE_RATIO,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    ROUTER_REQUESTS_TOTAL,
)
from infercast.config import FleetConfig, PredictorConfig
from infercast.store import Series, Store, StoreError
from predictors import deployed, registry
from predictors.base import Forecast, Forecaster, History
from predictors.publish import (
    ForecastSample,
    breach_eta_sample,
    finite_forecast,
    forecast_samples,
    last_success_sample,
    skipped_sample,
)
from predictors.timescale import TimeScaled

log = logging.getLogger(__name__)

COVARIATE_METRICS = {
    "running": (REQUESTS_RUNNING, "sum"),
    "waiting": (REQUESTS_WAITING, "sum"),
    "fragmentation": (KV_CACHE_FRAGMENTATION_RATIO, "mean"),
}
Group = tuple[str, str]  # (pool, version)


@dataclass
class Aligned:
    """One (pool, version)'s series on the tick's grid; `raw_nonfinite` counts NaN/Inf values the store returned."""

    y: np.ndarray
    raw_points: int = 0
    raw_nonfinite: int = 0
    last_raw_t: float = -math.inf  # newest time the store returned anything for this group, NaN included


def align(series: list[Series], g0: float, step: float, n: int, how: str) -> dict[Group, Aligned]:
    """Series -> per (pool, version) arrays on the grid `g0 + k*step`, k < n.

    `how`: `mean`, `max` or `sum` of gauges over instances, or `rate` (per-second increase of counters,
    reset-aware, summed over label sets).  NaN where no instance has a value.
    """
    acc: dict[Group, list[np.ndarray]] = {}
    stats: dict[Group, list[float]] = {}
    for s in series:
        pool, version = s.labels.get("pool"), s.labels.get("version", "")
        if not pool:
            continue
        key = (pool, version)
        arr = np.full(n, np.nan)
        k = np.rint((s.t - g0) / step).astype(int)
        ok = (k >= 0) & (k < n)
        arr[k[ok]] = s.v[ok]
        st = stats.setdefault(key, [0, 0, -math.inf])
        st[0] += int(ok.sum())
        st[1] += int((~np.isfinite(s.v[ok])).sum())
        if ok.any():
            st[2] = max(st[2], float(s.t[ok].max()))
        arr[~np.isfinite(arr)] = np.nan
        if how == "rate":
            arr = counter_rate(arr, step)
        acc.setdefault(key, []).append(arr)
    out = {}
    for key, arrs in acc.items():
        m = np.vstack(arrs)
        have = np.isfinite(m).any(axis=0)
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: handled by `have` below
            if how == "mean":
                y = np.nanmean(m, axis=0)
            elif how == "max":
                y = np.nanmax(m, axis=0)
            else:
                y = np.nansum(m, axis=0)
        y = np.where(have, y, np.nan)
        n_raw, n_bad, last = stats[key]
        out[key] = Aligned(y, int(n_raw), int(n_bad), last)
    return out


RATE_WINDOW_STEPS = 4


def counter_rate(v: np.ndarray, step: float, window: int = RATE_WINDOW_STEPS) -> np.ndarray:
    """Per-second rate of a counter sampled on a grid, like PromQL's `rate(x[window*step])`.

    Increases between neighbouring grid points are reset-aware (a decrease means the counter restarted from 0, so
    the increase is the new value), then averaged over the last `window` intervals that have both ends, so a
    scrape that lands in the next grid interval (a 0 then a double increase) does not read as a traffic dip.
    """
    inc = np.full(len(v), np.nan)
    d = v[1:] - v[:-1]
    inc[1:] = np.where(d < 0, v[1:], d)
    ok = np.isfinite(inc)
    csum = np.concatenate([[0.0], np.cumsum(np.where(ok, inc, 0.0))])
    cnt = np.concatenate([[0], np.cumsum(ok)])
    lo = np.maximum(np.arange(len(v)) + 1 - window, 0)
    total = csum[1:] - csum[lo]
    n = cnt[1:] - cnt[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(n > 0, total / (n * step), np.nan)
    rate[~ok] = np.nan  # no rate where the newest interval itself is missing
    return rate


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


@dataclass
class PredictorLoop:
    """Forecast every (pool, version) each tick; see the module docstring for what is read and published."""

    config: PredictorConfig
    threshold: float = 0.75
    events: Sequence = ()
    lstm: Forecaster | None = None
    lstm_error: str | None = None
    rps_model: str = "prophet"
    kv_model: str | None = None  # None: the LSTM when it loaded, else the best baseline; or a baseline by name
    timer: Callable[[], float] = time.perf_counter
    _models: dict[tuple[str, Group], SeriesModel] = field(default_factory=dict)
    _last_success: dict[str, float] = field(default_factory=dict)
    _last_reason: dict[tuple[str, Group], str | None] = field(default_factory=dict)
    _failing: set[tuple[str, str, Group]] = field(default_factory=set)
    _store_errors: dict[str, str] = field(default_factory=dict)
    _known: dict[str, set[Group]] = field(default_factory=dict)

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
        if rps_model is None:
            try:
                from predictors.prophet_model import import_prophet

                import_prophet()
                rps_model = "prophet"
            except ImportError:
                rps_model = registry.BEST_BASELINE["rps"]
                log.warning("predictor: prophet is not installed; forecasting traffic with %s", rps_model)
        return cls(
            cfg.predictor,
            threshold=cfg.thresholds.kv_forecast_trigger,
            events=cfg.events,
            lstm=lstm,
            lstm_error=err,
            rps_model=rps_model,
            **kw,
        )

    # ------------------------------------------------------------------ models
    def _model(self, key: str, kind: str, group: Group) -> SeriesModel:
        """The series' pipeline (`predictors.deployed`): one per series, pool and version, holding its band state."""
        if (key, group) not in self._models:
            if kind == "kv":
                lstm = self.lstm if self.kv_model in (None, "lstm") else None
                m = deployed.service_forecaster(
                    "kv", self.config, lstm=lstm, events=self.events, model=None if lstm else self.kv_model
                )
                fits = lstm is None
            else:
                name = None if self.rps_model == "prophet" else self.rps_model
                m = deployed.service_forecaster("rps", self.config, events=self.events, model=name)
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
            if (model.name, series, group) not in self._failing:
                log.warning(
                    "predictor: %s for %s %s/%s failed: %s; using %s",
                    model.name,
                    series,
                    *group,
                    e,
                    registry.BEST_BASELINE[series],
                )
                self._failing.add((model.name, series, group))
            failed.append(model.name)
        fallback = registry.make(registry.BEST_BASELINE[series], series, self.config.band)
        if fallback.name == model.name:
            return None, failed
        try:
            fc = fallback.forecast(h, self.config.horizon_seconds)
            return (fc if finite_forecast(fc) else None), failed
        except Exception as e:
            log.warning("predictor: fallback %s for %s %s/%s failed: %s", fallback.name, series, *group, e)
            return None, [*failed, fallback.name]

    # ------------------------------------------------------------------ the tick
    def tick(self, now: float, store: Store) -> list[ForecastSample]:
        cfg = self.config
        step = cfg.step_seconds
        g0 = math.floor((now - cfg.history_seconds) / step) * step
        n = math.floor((now - g0) / step + 1e-9) + 1
        t = g0 + step * np.arange(n)
        out: list[ForecastSample] = []
        succeeded: set[str] = set()
        if self.lstm_error:
            out.append(skipped_sample("", "", "kv:lstm", "model_error"))
        raws: dict[str, list[Series] | StoreError] = {}
        covs: dict[str, dict[Group, np.ndarray]] | None = None
        for series, kind, metric, how, aggregate in SERIES:
            if metric not in raws:
                try:
                    raws[metric] = store.query_range(metric, None, float(t[0]), float(t[-1]), step)
                except StoreError as e:
                    raws[metric] = e
                    if self._store_errors.get(metric) != str(e):  # once per outage (and per new kind of error)
                        log.warning("predictor: cannot read %s: %s", metric, e)
                    self._store_errors[metric] = str(e)
                else:
                    if self._store_errors.pop(metric, None) is not None:
                        log.info("predictor: reading %s again", metric)
            raw = raws[metric]
            if isinstance(raw, StoreError):
                for group in self._known.get(series) or {("", "")}:
                    out.append(skipped_sample(*group, series, "source_down"))
                    self._note(series, group, "source_down")
                continue
            groups = align(raw, g0, step, n, how)
            self._known[series] = set(groups)
            if kind == "kv" and self.lstm is not None and self.kv_model in (None, "lstm") and covs is None:
                covs = self._covariates(store, g0, step, n)
            for group in sorted(groups):
                reason, start = check_input(t, groups[group], now, cfg.min_history_points, cfg.stale_after_seconds)
                if reason is None:
                    feats = {k: v[group][start:] for k, v in (covs or {}).items() if group in v} if kind == "kv" else {}
                    h = History(t[start:], groups[group].y[start:], feats, f"{series}/{group[0]}/{group[1]}")
                    fc, failed = self._forecast(series, kind, group, h, now)
                    for name in failed:
                        out.append(skipped_sample(*group, f"{series}:{name}", "model_error"))
                    if fc is None:
                        reason = "model_error"
                    else:
                        out.extend(forecast_samples(kind, *group, fc, cfg.horizon_seconds, aggregate or "mean"))
                        if kind == "kv":
                            eta = fc.breach_eta(self.threshold, now)
                            out.append(breach_eta_sample(*group, self.threshold, eta, aggregate))
                        succeeded.add(fc.model)
                if reason is not None:
                    out.append(skipped_sample(*group, series, reason))
                self._note(series, group, reason)
        for m in succeeded:
            self._last_success[m] = now
        out.extend(last_success_sample(m, ts) for m, ts in sorted(self._last_success.items()))
        return out

    def _covariates(self, store: Store, g0: float, step: float, n: int) -> dict[str, dict[Group, np.ndarray]]:
        """LSTM covariates per group; a covariate the store cannot give is left out (the model masks it)."""
        out: dict[str, dict[Group, np.ndarray]] = {}
        t_end = g0 + step * (n - 1)
        for name, (metric, how) in COVARIATE_METRICS.items():
            try:
                raw = store.query_range(metric, None, g0, t_end, step)
            except StoreError:
                continue
            out[name] = {g: a.y for g, a in align(raw, g0, step, n, how).items()}
        try:
            raw = store.query_range(ROUTER_REQUESTS_TOTAL, None, g0, t_end, step)
            out["rps"] = {g: a.y for g, a in align(raw, g0, step, n, "rate").items()}
        except StoreError:
            pass
        return out

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
