"""What each controlled arm is told about the future, and nothing else: every arm reads the present the same way
(the embedded pipeline's store, `StoreInputs`: the live figures and the signals that move first) and decides with
the same logic (`reserve_policy.ReservePolicy` in the control loop); only the forecast fields of its `Outlook`s
differ (the KV forecast's upper peak and breach ETA, the traffic forecast's peak and surge ETA).

- `scheduled`: the calendar alone.  The present from a pipeline that forecasts nothing beyond the last value and
  reads no calendar; then, within a horizon of an event that announces its peak (`events[].expected_rps`), each
  pool's traffic peak is its share of that peak (its rate now over the fleet's) from the event's start.
- `last-value`, `predict-linear`, `predictive`: the pipeline's own forecasts (driver.FORECASTS).
- `perfect-forecast`: the true future (`inputs.TruthInputs`: the run's offered traffic, the KV series of the
  `reactive` run of the same seed) in place of the forecasts, on the same present.
"""

from __future__ import annotations

import dataclasses
import math

from infercast.actuators.admin import Observation
from infercast.actuators.inputs import InputSource, LoopInputs
from infercast.actuators.policy import Outlook
from infercast.config import FleetConfig


class CalendarInputs:
    """The present from `live`, the future from the fleet file's event calendar (the `scheduled` arm)."""

    def __init__(self, live: InputSource, cfg: FleetConfig) -> None:
        from infercast.predictors.prophet_model import event_windows

        self.live = live
        self.trigger = cfg.thresholds.kv_forecast_trigger
        self.horizon = cfg.predictor.horizon_seconds
        self.surge = cfg.policy.traffic_surge_factor
        self.windows = [(w.start_s, w.end_s, w.expected_rps) for w in event_windows(cfg.events)]

    def read(self, now: float, fleet: Observation) -> LoopInputs:
        got = self.live.read(now, fleet)
        fleet_rps = sum(o.rps_now for o in got.outlook.values() if math.isfinite(o.rps_now))
        ahead = [
            (start, peak)
            for start, end, peak in self.windows
            if peak is not None and start - self.horizon <= now < end and fleet_rps > 0
        ]
        start, peak = min(ahead) if ahead else (math.inf, None)
        outlook = {}
        for name, o in got.outlook.items():
            o = present_only(o, self.trigger)
            if peak is not None:
                share = o.rps_now / fleet_rps if math.isfinite(o.rps_now) else 0.0
                upper = max(o.rps_upper_peak, peak * share)
                eta = max(0.0, start - now) if o.rps_now > 0 and upper >= self.surge * o.rps_now else math.inf
                o = dataclasses.replace(
                    o, rps_upper_peak=upper, rps_surge_eta_seconds=min(o.rps_surge_eta_seconds, eta)
                )
            outlook[name] = o
        return told(got, outlook)


def told(got: LoopInputs, outlook: dict[str, Outlook]) -> LoopInputs:
    """`got` with the outlooks told another future, and no forecast age: the pipeline's own forecasts (which need
    minutes of history before the first) are not what such an arm decides on, so their age cannot freeze it."""
    ages = {k: v for k, v in got.ages.items() if k != "forecast"}
    figures = {k: v for k, v in got.figures.items() if not k.endswith(".kv_upper")}
    return dataclasses.replace(got, outlook=outlook, ages=ages, figures=figures)


def present_only(o: Outlook, trigger: float) -> Outlook:
    """An outlook told nothing about the future: the forecasts' fields from the present alone (the KV now, and a
    breach now only if it is over the trigger now; the traffic now, and a surge only if one has started: `onset`)."""
    kv = o.kv_now if math.isfinite(o.kv_now) else 0.0
    rps = o.rps_now if math.isfinite(o.rps_now) else 0.0
    surge = o.onset != ""
    return dataclasses.replace(
        o,
        kv_upper_peak=kv,
        kv_breach_eta_seconds=0.0 if kv >= trigger else math.inf,
        rps_upper_peak=max(rps, o.arrivals_rps) if surge and math.isfinite(o.arrivals_rps) else rps,
        rps_surge_eta_seconds=0.0 if surge else math.inf,
    )


class TruthOverlay:
    """The present from `live`, the future from `truth` (`inputs.TruthInputs`): the `perfect-forecast` arm.  The
    true traffic is the offered rate; its peak reaches the outlook as the live rate scaled by the true rise."""

    def __init__(self, live: InputSource, truth: InputSource, cfg: FleetConfig) -> None:
        self.live, self.truth = live, truth
        self.trigger = cfg.thresholds.kv_forecast_trigger

    def read(self, now: float, fleet: Observation) -> LoopInputs:
        got = self.live.read(now, fleet)
        truth = self.truth.read(now, fleet).outlook
        outlook = {}
        for name, o in got.outlook.items():
            t = truth.get(name)
            if t is None:
                outlook[name] = o
                continue
            o = present_only(o, self.trigger)
            rise = t.rps_upper_peak / t.rps_now if t.rps_now > 0 else 1.0
            outlook[name] = dataclasses.replace(
                o,
                kv_upper_peak=max(t.kv_upper_peak, o.kv_now),
                kv_breach_eta_seconds=min(t.kv_breach_eta_seconds, o.kv_breach_eta_seconds),
                rps_upper_peak=max(o.rps_now * rise, o.rps_upper_peak),
                rps_surge_eta_seconds=min(t.rps_surge_eta_seconds, o.rps_surge_eta_seconds),
            )
        return told(got, outlook)
