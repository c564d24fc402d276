"""What the control loop decides on: per pool, an `Outlook` (live figures and the forecasts' upper bands), plus the
figures and their ages that the guardrails check before anything is decided.

Two sources give the same `LoopInputs`:
- `StoreInputs` reads the metric store (Prometheus, or the in-memory store of the embedded pipeline): the fullest
  instance's KV usage, the published KV forecast's upper band and breach ETA, the request rate and its forecast.
  The daemon and the `predictive` arm use it.
- `TruthInputs` reads the true future instead of forecasts: the `perfect-forecast` arm (the simulator's
  `control/arms.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from infercast.actuators.admin import Observation, PoolState
from infercast.actuators.policy import Outlook, serves_lengths
from infercast.actuators.signals import arrivals, increases, latency, onset
from infercast.alertrules.recorded import REQ_RATE
from infercast.alertrules.slo import VLLM_TTFT
from infercast.alertrules.sources import ENGINES, series_name
from infercast.catalog import (
    FORECAST_BREACH_ETA_SECONDS,
    FORECAST_KV_CACHE_USAGE_RATIO,
    FORECAST_REQUESTS_PER_SECOND,
    KV_CACHE_USAGE_RATIO,
    REQUESTS_WAITING,
    ROUTER_REQUESTS_TOTAL,
    breach_threshold_label,
)
from infercast.config import FleetConfig
from infercast.store import Store, StoreError, grid

#: the arrivals' baseline is the median scrape interval over this long before the last one
BASELINE_SECONDS = 600.0


class InputError(Exception):
    """The inputs cannot be read (the store is down or answers garbage): the loop freezes and says why."""


@dataclass(frozen=True)
class LoopInputs:
    """What one tick of the control loop decides on, as read at `at`."""

    at: float
    outlook: dict[str, Outlook]
    figures: dict[str, float] = field(default_factory=dict)  # every number the decision rests on (freeze check)
    ages: dict[str, float] = field(default_factory=dict)  # "live" / "forecast" -> seconds since the newest value


class InputSource(Protocol):
    def read(self, now: float, fleet: Observation) -> LoopInputs: ...


def serving(fleet: Observation) -> list[PoolState]:
    return [p for p in fleet.pools if not p.standby and p.weight > 0]


def surge_due(rps_now: float, rps_upper: float, factor: float) -> bool:
    """A traffic surge is judged due when the forecast's upper band reaches `factor` times the traffic now (none is
    judged against no traffic at all)."""
    return rps_now > 0 and rps_upper >= factor * rps_now


def _latest(series, now: float) -> tuple[float, float]:
    """(value, time) of the newest sample at or before now among `series`; (nan, -inf) if none.  Prometheus rounds
    a query's times to the millisecond, so a point may come back a hair after `now`: up to a second is `now`."""
    best_t, best_v = -math.inf, math.nan
    for s in series:
        ok = s.t <= now + 1.0
        if ok.any():
            i = int(np.flatnonzero(ok)[-1])
            if s.t[i] > best_t:
                best_t, best_v = float(s.t[i]), float(s.v[i])
    return best_v, best_t


class StoreInputs:
    """Live figures and forecasts from the metric store, as Prometheus holds them."""

    def __init__(self, store: Store, cfg: FleetConfig, step_seconds: float = 15.0) -> None:
        self.store = store
        self.cfg = cfg
        self.step = step_seconds
        self.trigger = cfg.thresholds.kv_forecast_trigger
        self.surge = cfg.policy.traffic_surge_factor
        self.horizon = cfg.predictor.horizon_seconds
        # `metrics.source: engines`: live KV usage from the engines' own per-engine rule (the exporter does not
        # emit its copy then), traffic from the engines' finished requests per second (alertrules/sources.py)
        m = cfg.metrics
        self.engines = m.source == ENGINES
        self.kv_metric = series_name(KV_CACHE_USAGE_RATIO, m.source, m.rate_window)
        self.rate_metric = series_name(REQ_RATE, m.source, m.rate_window)
        # the queue per engine: the exporter's copy, or the engines' own rule (the exporter does not emit it then)
        self.waiting_metric = series_name(REQUESTS_WAITING, m.source, m.rate_window)

    def _q(self, metric: str, matchers: dict[str, str], start: float, end: float):
        try:
            return self.store.query_range(metric, matchers, start, end, self.step)
        except StoreError as e:
            raise InputError(f"the store did not answer for {metric}: {e}") from None

    def read(self, now: float, fleet: Observation) -> LoopInputs:
        start = now - 4 * self.step
        outlook, figures = {}, {}
        live_t, fc_t = -math.inf, -math.inf
        for p in serving(fleet):
            kv_series = self._q(self.kv_metric, {"pool": p.name}, start, now)
            latest = [(_latest([s], now)) for s in kv_series]
            fresh = [v for v, t in latest if t >= now - 2 * self.step]
            kv_now = max(fresh) if fresh else math.nan
            live_t = max([live_t] + [t for _, t in latest])
            upper, t_u = _latest(
                self._q(FORECAST_KV_CACHE_USAGE_RATIO, {"pool": p.name, "band": "upper"}, start, now), now
            )
            eta, _ = _latest(
                self._q(
                    FORECAST_BREACH_ETA_SECONDS,
                    {"pool": p.name, "threshold": breach_threshold_label(self.trigger)},
                    start,
                    now,
                ),
                now,
            )
            rps_now, served_now = self._rates(p.name, now)
            rps_upper, _ = _latest(
                self._q(FORECAST_REQUESTS_PER_SECOND, {"pool": p.name, "band": "upper"}, start, now), now
            )
            fc_t = max(fc_t, t_u)
            surge_eta = self.horizon if surge_due(rps_now, rps_upper, self.surge) else math.inf
            first = self._first_signals(p.name, now)
            if first["onset"]:  # a surge is here: announced now, whatever the forecasts say
                surge_eta = 0.0
            outlook[p.name] = Outlook(
                p.name,
                kv_now,
                max(upper, kv_now) if math.isfinite(upper) else kv_now,
                eta if math.isfinite(eta) or eta == math.inf else math.inf,
                rps_now,
                max(rps_upper if math.isfinite(rps_upper) else rps_now, first["arrivals_rps"] if first["onset"] else 0),
                surge_eta,
                served_now,
                **first,
            )
            figures[f"{p.name}.kv_now"] = kv_now
            if math.isfinite(t_u):  # a forecast was published (a missing one shows as the forecast's age)
                figures[f"{p.name}.kv_upper"] = upper
        ages = {"live": now - live_t, "forecast": now - fc_t} if outlook else {}
        return LoopInputs(now, outlook, figures, ages)

    def _first_signals(self, pool: str, now: float) -> dict:
        """The signals that move first (`actuators/signals.py`): the router's arrivals for the pool over the last
        scrape interval and their baseline, the urgent share, the engines' queue now and one interval before, the
        engines' mean time to first token over the last interval and its baseline (the latency SLO's histogram, as
        Prometheus scrapes it from the engines), and whether a surge started in that interval."""
        g = grid(now - BASELINE_SECONDS, now, self.step)
        # requests, not attempts: an attempt the client will retry (`outcome="retried"`) comes back as another, so
        # counting both reads a retry storm (a bucket refusing a burst, each refusal retried) as new demand
        sent = [
            (s.t, s.v, s.labels)
            for s in self._q(ROUTER_REQUESTS_TOTAL, {"pool": pool}, g[0], g[-1])
            if s.labels.get("outcome") != "retried"
        ]
        a = arrivals(
            increases(((t, v) for t, v, _ in sent), g),
            increases(((t, v) for t, v, lab in sent if lab.get("priority") == "urgent"), g),
            self.step,
        )
        queue = [0.0, 0.0]
        for s in self._q(self.waiting_metric, {"pool": pool}, now - self.step, now):
            for i, at in enumerate((now - self.step, now)):
                hit = np.flatnonzero(np.isclose(s.t, at))
                if len(hit) and math.isfinite(s.v[hit[-1]]):
                    queue[i] += float(s.v[hit[-1]])
        ttft = latency(
            increases(((s.t, s.v) for s in self._q(f"{VLLM_TTFT}_sum", {"pool": pool}, g[0], g[-1])), g),
            increases(((s.t, s.v) for s in self._q(f"{VLLM_TTFT}_count", {"pool": pool}, g[0], g[-1])), g),
        )
        why = onset(a, queue[1], queue[0], ttft, self.surge)
        return {
            "arrivals_rps": a.last_rps,
            "baseline_rps": a.baseline_rps,
            "urgent_share": a.urgent_share,
            "waiting": queue[1],
            "waiting_growth_rps": (queue[1] - queue[0]) / self.step,
            "onset": why,
        }

    def _rates(self, pool: str, now: float) -> tuple[float, float]:
        """Requests per second the router sent the pool over the last minute (counter increase, reset-aware), and
        those of them it answered (`outcome="ok"`): one query, split by the outcome label.  With `metrics.source:
        engines`, the engines' own rate of finished requests, both: an engine never sees what a gateway refused."""
        if self.engines:
            rate, t = _latest(self._q(self.rate_metric, {"pool": pool}, now - 60.0, now), now)
            rate = rate if math.isfinite(rate) and t >= now - 60.0 else 0.0
            return rate, rate
        sent = answered = 0.0
        for s in self._q(ROUTER_REQUESTS_TOTAL, {"pool": pool}, now - 60.0, now):
            if len(s.v) < 2:
                continue
            d = np.diff(s.v)
            rate = float(np.where(d >= 0, d, s.v[1:]).sum()) / max(s.t[-1] - s.t[0], 1e-9)
            sent += rate
            if s.labels.get("outcome") == "ok":
                answered += rate
        return sent, answered


class TruthInputs:
    """The true future in place of forecasts (the `perfect-forecast` arm): the realised KV series of a reference run
    of the same seed (the fullest instance per pool) and the requests per second the traffic will offer each pool."""

    def __init__(self, cfg: FleetConfig, fleet, traffic, reference: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        self.cfg = cfg
        self.fleet = fleet  # the live figures come from the twin itself
        self.traffic = traffic
        self.reference = reference
        self.horizon = cfg.predictor.horizon_seconds
        self.trigger = cfg.thresholds.kv_forecast_trigger
        self.surge = cfg.policy.traffic_surge_factor
        self.step = 5.0

    def offered(self, p: PoolState, fleet: Observation, t: float) -> float:
        """Requests per second the traffic offers this pool at t: the requests of the prompt lengths it takes,
        shared with the other pools taking the same.  Requests, not tokens: the live path's `rps_now` is the
        router's request count, and the policy compares pools by the requests a node serves."""
        kind = serves_lengths(p)
        siblings = [q for q in serving(fleet) if serves_lengths(q) == kind]
        return request_rate_at(self.traffic, t, *kind) / max(1, len(siblings))

    def read(self, now: float, fleet: Observation) -> LoopInputs:
        live = self.fleet.live()
        ahead = now + np.arange(self.step, self.horizon + 1e-9, self.step)
        out = {}
        for p in serving(fleet):
            t, kv = self.reference.get(p.name, (np.empty(0), np.empty(0)))
            kv_ahead = np.nan_to_num(np.interp(ahead, t, kv)) if len(t) else np.zeros(len(ahead))
            over = np.flatnonzero(kv_ahead >= self.trigger)
            rps_now = self.offered(p, fleet, now)
            rps = np.array([self.offered(p, fleet, x) for x in ahead])
            peak = np.flatnonzero(rps >= self.surge * rps_now) if rps_now > 0 else np.empty(0, dtype=int)
            out[p.name] = Outlook(
                p.name,
                live[p.name].kv_usage_max,
                float(kv_ahead.max()),
                float(ahead[over[0]] - now) if len(over) else math.inf,
                rps_now,
                float(rps.max()),
                float(ahead[peak[0]] - now) if len(peak) else math.inf,
            )
        return LoopInputs(now, out, {}, {})


def request_rate_at(traffic, t: float, short: bool = True, long: bool = True) -> float:
    """Requests per second the traffic offers at t, of short (<= 8k) prompts, long ones, or both."""
    rate, share = traffic.rate_at(t), traffic.long_share_at(t)
    return rate * ((1.0 - share) * short + share * long)


def reference_series(timeseries) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """pool -> (t, fullest instance's KV usage) from a twin run's time series (what perfect-forecast reads ahead)."""
    out = {}
    for pool, df in timeseries.groupby("pool"):
        df = df.sort_values("t")
        out[str(pool)] = (df["t"].to_numpy(dtype=float), df["kv_usage_max"].to_numpy(dtype=float))
    return out
