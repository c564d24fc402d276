"""Name -> forecaster, and which models a backtest or the service runs for a series.

The LSTM is part B's (`infercast.predictors.lstm`): it is included when its module imports and its model file loads;
otherwise it is left out with a note saying why (module missing, file missing, file refused), never silently.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from infercast.predictors.base import DEFAULT_BAND, Forecaster
from infercast.predictors.holt_winters import HoltWinters
from infercast.predictors.kalman import Kalman
from infercast.predictors.linear import PredictLinear
from infercast.predictors.naive import LastValue

log = logging.getLogger(__name__)

BASELINES = ("last_value", "predict_linear", "holt_winters", "kalman")
SERIES = ("kv", "rps")
#: Bounds of each series: KV usage is a ratio; traffic is never negative.
CLIP: dict[str, tuple[float, float]] = {"kv": (0.0, 1.0), "rps": (0.0, float("inf"))}
#: The baseline the service falls back to when the preferred model cannot run, per series.  Chosen from the
#: backtest table in docs/predictors.md (lowest peak_mae over the traces among the baselines).
BEST_BASELINE = {"kv": "kalman", "rps": "kalman"}


def make(
    name: str,
    series: str = "kv",
    band: tuple[float, float] = DEFAULT_BAND,
    events: Sequence = (),
    epoch_s: float = 0.0,
) -> Forecaster:
    """A fresh forecaster by name (`last_value`, `predict_linear`, `holt_winters`, `kalman`, `prophet`,
    `prophet_anchored`, `seasonal_blend`, `local_level`, `combined`)."""
    if series not in SERIES:
        raise ValueError(f"unknown series {series!r}; use one of {SERIES}")
    clip = CLIP[series]
    if name == "last_value":
        return LastValue(band=band, clip=clip)
    if name == "predict_linear":
        return PredictLinear(band=band, clip=clip)
    if name == "holt_winters":
        return HoltWinters(band=band, clip=clip)
    if name == "kalman":
        return Kalman(band=band, clip=clip)
    if name == "prophet":
        from infercast.predictors.prophet_model import ProphetForecaster

        return ProphetForecaster(events=events, band=band, epoch_s=epoch_s)
    if name == "prophet_anchored":
        from infercast.predictors.anchored import AnchoredProphet

        return AnchoredProphet(events=events, band=band, epoch_s=epoch_s)
    if name == "seasonal_blend":
        from infercast.predictors.seasonal import SeasonalBlend

        return SeasonalBlend(band=band, clip=clip)
    if name == "local_level":
        from infercast.predictors.local_level import LocalLevel

        return LocalLevel(shift_sigmas=4.0, band=band, clip=clip)
    if name == "combined":
        from infercast.predictors.combined import traffic_combination

        return traffic_combination(band, clip)
    known = (*BASELINES, "prophet", "prophet_anchored", "seasonal_blend", "local_level", "combined", "lstm")
    raise ValueError(f"unknown model {name!r}; known: {', '.join(known)}")


def load_lstm(path: str | Path | None = None) -> tuple[Forecaster | None, str]:
    """(the LSTM, "") when its module and model file load; (None, why not) otherwise."""
    try:
        from infercast.predictors import lstm
    except ImportError as e:
        return None, f"lstm skipped: infercast.predictors.lstm cannot be imported ({e})"
    model_path = Path(path) if path else lstm.DEFAULT_MODEL
    from infercast.predictors.modelfile import paths

    weights, meta = paths(model_path)
    if not weights.exists() and not meta.exists():
        return None, f"lstm skipped: no model file at {weights} (train one with `infercast train`)"
    try:
        return lstm.LSTMForecaster.load(model_path), ""
    except Exception as e:  # ModelFileError and anything a broken file can raise: refuse, say why
        return None, f"lstm skipped: {e}"


def models_for(
    series: str,
    band: tuple[float, float] = DEFAULT_BAND,
    events: Sequence = (),
    prophet: bool = True,
    lstm: bool | str | Path = True,
) -> tuple[list[Forecaster], list[str]]:
    """The models a backtest scores on `series`, and notes on what was left out and why.

    Prophet and the seasonal blend run on traffic (`rps`), their job; the LSTM on KV usage (it is trained on that
    target).
    """
    models: list[Forecaster] = [make(n, series, band) for n in BASELINES]
    notes: list[str] = []
    if prophet and series == "rps":
        try:
            from infercast.predictors.prophet_model import import_prophet

            import_prophet()
            models.append(make("prophet", series, band, events))
            models.append(make("prophet_anchored", series, band, events))
        except ImportError as e:
            notes.append(f"prophet skipped: not installed ({e})")
    if series == "rps":
        models.append(make("seasonal_blend", series, band))
    if lstm and series == "kv":
        m, note = load_lstm(None if lstm is True else lstm)
        if m is not None:
            models.append(m)
        else:
            notes.append(note)
    return models, notes
