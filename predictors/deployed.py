"""What the predictor service runs for a series, built in one place so the backtest scores it as deployed.  Pure.

- KV usage (`kv`, both aggregates: the pool's mean and its fullest instance): the LSTM when its model file loads,
  else the best baseline (`registry.BEST_BASELINE`); its band calibrated online per series
  (`infercast.predictors.conformal.AdaptiveBand`); then the calendar prior (`infercast.predictors.calendar.EventPrior`)
  for scheduled events never seen before.
- Traffic (`rps`): the online combination of the last value, predict_linear, Holt-Winters and the local level
  (`infercast.predictors.combined.traffic_combination`: per series, the member with the lowest recent error at the
  horizon; it replaced Prophet anchored, which needs Prophet and lost to it on the traffic protocol's training runs);
  then the calendar's announced rates (`events[].expected_rps`, `infercast.predictors.announced.AnnouncedTraffic`);
  band calibrated online the same way.  `model="prophet_anchored"` (or any registry name) runs another.

`alarm_policy(thresholds, step)` is the predictive alert's logic (`infercast.predictors.alarm`) with the fleet file's
numbers, as `alertrules` writes it for Prometheus.
"""

from __future__ import annotations

from collections.abc import Sequence

from infercast.config import PredictorConfig, Thresholds
from infercast.predictors import registry
from infercast.predictors.alarm import AlarmPolicy
from infercast.predictors.announced import AnnouncedTraffic
from infercast.predictors.base import DEFAULT_BAND, Forecaster
from infercast.predictors.calendar import EventPrior
from infercast.predictors.conformal import AdaptiveBand, AdaptiveBandBank
from infercast.predictors.prophet_model import EventWindow, event_windows

#: The minimum band half-width the online calibration scales, per series (a flat band must still be able to grow).
MIN_WIDTH = {"kv": 0.005, "rps": 1e-3}


#: The service's traffic model (`registry.make` name).
TRAFFIC_MODEL = "combined"


def inner_name(series: str, lstm: Forecaster | None) -> str:
    if series == "kv":
        return "lstm" if lstm is not None else registry.BEST_BASELINE["kv"]
    return TRAFFIC_MODEL


def service_forecaster(
    series: str,
    config: PredictorConfig,
    *,
    lstm: Forecaster | None = None,
    events: Sequence = (),
    epoch_s: float = 0.0,
    model: str | None = None,
) -> Forecaster:
    """A fresh pipeline for one series (it holds that series' online calibration state).

    `model` names another inner model than the default (a baseline, `prophet_anchored`, or `prophet` for Prophet as
    it is).
    """
    name = model or inner_name(series, lstm)
    windows = service_windows(events, epoch_s)
    if name == "lstm":
        inner: Forecaster = lstm  # type: ignore[assignment]
    elif name == "prophet_anchored":
        from infercast.predictors.anchored import AnchoredProphet

        inner = AnchoredProphet(windows, config.band, bound_factor=config.traffic_bound_factor)
    elif name == "combined":
        from infercast.predictors.combined import traffic_combination

        inner = traffic_combination(config.band, registry.CLIP[series], config.traffic_bound_factor)
    else:
        inner = registry.make(name, series, config.band, windows)
    out: Forecaster = inner
    if series == "rps" and any(w.expected_rps is not None for w in windows):
        out = AnnouncedTraffic(out, windows)
    if config.band_adaptation > 0:
        out = AdaptiveBand(out, config.band_adaptation, registry.CLIP[series], MIN_WIDTH[series])
    if series == "kv" and windows:
        out = EventPrior(out, windows, ceiling=registry.CLIP["kv"][1], onset_s=config.event_onset_seconds)
    return out


def set_traffic_share(model: Forecaster, share: float) -> None:
    """Tell a traffic pipeline its series' share of the fleet's traffic (what the calendar's expected rates are
    spread by); a pipeline without announced rates ignores it."""
    while model is not None:
        if isinstance(model, AnnouncedTraffic):
            model.share = share
            return
        model = getattr(model, "inner", None)  # type: ignore[assignment]


def service_windows(events: Sequence = (), epoch_s: float = 0.0) -> list[EventWindow]:
    """The calendar as the pipelines read it: `config.events` (or windows already) -> `EventWindow`s."""
    return list(events) if events and isinstance(events[0], EventWindow) else event_windows(events, epoch_s)


def kv_band_bank(config: PredictorConfig, lstm: Forecaster | None) -> AdaptiveBandBank | None:
    """The KV pipeline's online band calibration for many series at once (the batched tick); None when it is off.
    Row for row the `AdaptiveBand` that `service_forecaster("kv", config, lstm=lstm)` builds."""
    if config.band_adaptation <= 0:
        return None
    band = getattr(lstm, "band", DEFAULT_BAND)
    return AdaptiveBandBank(config.band_adaptation, registry.CLIP["kv"], MIN_WIDTH["kv"], band)


def kv_event_prior(config: PredictorConfig, windows: Sequence[EventWindow], inner: Forecaster) -> EventPrior | None:
    """The KV pipeline's calendar prior (as `service_forecaster` wraps it), or None without events."""
    if not windows:
        return None
    return EventPrior(inner, windows, ceiling=registry.CLIP["kv"][1], onset_s=config.event_onset_seconds)


def alarm_policy(thresholds: Thresholds, step_seconds: float) -> AlarmPolicy:
    """The predictive alert at evaluations `step_seconds` apart: `for:` -> consecutive evaluations, hysteresis."""
    return AlarmPolicy(
        thresholds.kv_forecast_trigger,
        persistence=1 + round(thresholds.kv_forecast_for_seconds / step_seconds),
        hysteresis=thresholds.kv_forecast_hysteresis,
    )
