"""Prophet for traffic (requests per second): trend, daily and weekly seasonality, and the fleet's event calendar.

prophet is imported lazily (only when a model is fitted), so nothing else pays for it.

- **Time.** `History.t` is seconds from any origin; Prophet needs datetimes, so `ds = epoch_s + t` read as UTC.
  For ServeGen t = 0 is local midnight, so the daily phase is right with `epoch_s = 0`.
- **Seasonality.** Daily when the history spans at least two days, weekly at least two weeks (Prophet's own
  'auto' rule, applied to the span we fit on); `daily=True/False` forces it.
- **Events** (`config.events`: promotions, upgrades).  Prophet's `holidays` are whole days, too coarse for a
  20-minute flash sale, so each event becomes an extra 0/1 regressor that is 1 from `start - lower_window` to
  `end + upper_window` (events sharing a name are one regressor: a recurring promotion).  The calendar is known in
  advance, so the future frame carries it too.  An event absent from the training span is left out (a regressor
  never seen cannot be learned).
- **Band.** Prophet's own interval with `interval_width = upper - lower` (symmetric quantiles), from
  `uncertainty_samples` simulated paths.
- **Refit.** `fit` learns from the history it is given; `forecast` uses the fitted model.  It fits first if it
  was never fitted, or if the history has grown by more than `refit_growth` (25%) of the span the model was fitted
  on: a trend fitted on 5 minutes and extrapolated for 30 is wild (on the 1-hour Azure conv trace, refitting only
  every 1800 s gave a traffic MAE of 7.9 req/s, this rule 1.7).  With the service's 6 h history and 30 min refits
  the rule never fires; the backtest and the service call `fit` on the production refit schedule.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from infercast.predictors.base import DEFAULT_BAND, Forecast, History, future_grid

DAY = 86400.0


@dataclass(frozen=True)
class EventWindow:
    """An event as an absolute time window in the series' seconds."""

    name: str
    start_s: float
    end_s: float


def event_windows(events: Sequence, epoch_s: float = 0.0) -> list[EventWindow]:
    """`config.events` -> windows in series seconds.  `start`/`end` are seconds from the series origin or ISO times."""
    import pandas as pd

    out = []
    for ev in events:
        bounds = []
        for raw in (ev.start, ev.end):
            try:
                bounds.append(float(raw))
            except ValueError:
                try:
                    ts = pd.Timestamp(raw)
                except ValueError:
                    raise ValueError(f"event {ev.name!r}: {raw!r} is neither seconds nor an ISO time") from None
                if ts.tzinfo is None:
                    ts = ts.tz_localize("UTC")
                bounds.append(ts.timestamp() - epoch_s)
        start = bounds[0] - float(getattr(ev, "lower_window_seconds", 0.0))
        end = bounds[1] + float(getattr(ev, "upper_window_seconds", 0.0))
        if end <= start:
            raise ValueError(f"event {ev.name!r} ends before it starts")
        out.append(EventWindow(_regressor_name(ev.name), start, end))
    return out


def import_prophet():
    """The Prophet class, imported quietly (ImportError when prophet is not installed)."""
    # prophet logs an ERROR when plotly is missing (we never plot with it); cmdstanpy logs two INFO lines per fit.
    logging.getLogger("prophet.plot").setLevel(logging.CRITICAL)
    from prophet import Prophet

    try:  # cmdstanpy configures its logger (DEBUG + an INFO handler) on first use; do that now, then quiet it
        from cmdstanpy.utils import get_logger

        get_logger()
    except ImportError:
        pass
    logging.getLogger("cmdstanpy").setLevel(logging.WARNING)
    logging.getLogger("prophet").setLevel(logging.WARNING)
    return Prophet


def _regressor_name(name: str) -> str:
    return "event_" + "".join(c if c.isalnum() else "_" for c in name)


class ProphetForecaster:
    name = "prophet"

    def __init__(
        self,
        events: Sequence = (),
        band: tuple[float, float] = DEFAULT_BAND,
        epoch_s: float = 0.0,
        daily: bool | None = None,
        weekly: bool | None = None,
        seasonality_mode: str = "additive",
        changepoint_prior_scale: float = 0.05,
        uncertainty_samples: int = 200,
        nonnegative: bool = True,
        fit_window_s: float | None = None,
        growth: str = "linear",
        refit_growth: float | None = 0.25,
    ) -> None:
        self.events = event_windows(events, epoch_s) if events and not isinstance(events[0], EventWindow) else events
        self.band = band
        self.epoch_s = epoch_s
        self.daily, self.weekly = daily, weekly
        self.seasonality_mode = seasonality_mode
        self.changepoint_prior_scale = changepoint_prior_scale
        self.uncertainty_samples = uncertainty_samples
        self.nonnegative = nonnegative
        self.fit_window_s = fit_window_s
        self.growth = growth
        self.refit_growth = refit_growth
        self.model_ = None
        self.fitted_span_: float = 0.0
        self.regressors_: list[str] = []
        self.fitted_until_: float | None = None

    def _frame(self, t: np.ndarray, y: np.ndarray | None = None):
        import pandas as pd

        df = pd.DataFrame({"ds": pd.to_datetime(self.epoch_s + t, unit="s")})
        if y is not None:
            df["y"] = y
        for name in self.regressors_:
            df[name] = self._indicator(name, t)
        return df

    def _indicator(self, name: str, t: np.ndarray) -> np.ndarray:
        """1 inside any window of the event `name` (a recurring event is one regressor), else 0."""
        on = np.zeros(len(t), dtype=bool)
        for ev in self.events:
            if ev.name == name:
                on |= (t >= ev.start_s) & (t <= ev.end_s)
        return on.astype(float)

    def fit(self, histories: list[History]) -> ProphetForecaster:
        """Fit one Prophet model on the first history (one forecaster per series, as Prophet is a local model)."""
        if not histories:
            raise ValueError("prophet: nothing to fit on")
        h = histories[0]
        ok = np.isfinite(h.y)
        t, y = h.t[ok], h.y[ok]
        if self.fit_window_s is not None:
            keep = t >= h.t[-1] - self.fit_window_s
            t, y = t[keep], y[keep]
        if len(t) < 3:
            raise ValueError(f"prophet: needs at least 3 finite samples, got {len(t)}")
        Prophet = import_prophet()

        span = float(t[-1] - t[0])
        daily = self.daily if self.daily is not None else span >= 2 * DAY
        weekly = self.weekly if self.weekly is not None else span >= 14 * DAY
        m = Prophet(
            growth=self.growth,
            daily_seasonality=daily,
            weekly_seasonality=weekly,
            yearly_seasonality=False,
            seasonality_mode=self.seasonality_mode,
            changepoint_prior_scale=self.changepoint_prior_scale,
            interval_width=self.band[1] - self.band[0],
            uncertainty_samples=self.uncertainty_samples,
        )
        self.regressors_ = []
        for name in dict.fromkeys(ev.name for ev in self.events):
            inside = self._indicator(name, t)
            if inside.any() and not inside.all():
                self.regressors_.append(name)
                m.add_regressor(name, standardize=False)
        m.fit(self._frame(t, y))
        self.model_ = m
        self.fitted_until_ = float(h.t[-1])
        self.fitted_span_ = span
        return self

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        grown = (
            self.refit_growth is not None
            and self.fitted_until_ is not None
            and history.t[-1] - self.fitted_until_ > self.refit_growth * max(self.fitted_span_, history.step)
        )
        if self.model_ is None or grown:
            self.fit([history])
        return self.predict_at(future_grid(history, horizon_s))

    def predict_at(self, times: np.ndarray) -> Forecast:
        """The fitted model's forecast at any times (series seconds), with the event calendar applied."""
        if self.model_ is None:
            raise RuntimeError("prophet: fit() first")
        pred = self.model_.predict(self._frame(np.asarray(times, dtype=float)))
        yhat = pred["yhat"].to_numpy()
        # With uncertainty_samples=0 Prophet gives no interval: the band is then the point itself.
        lo = pred["yhat_lower"].to_numpy() if "yhat_lower" in pred else yhat
        hi = pred["yhat_upper"].to_numpy() if "yhat_upper" in pred else yhat
        if self.nonnegative:
            yhat, lo, hi = np.maximum(yhat, 0.0), np.maximum(lo, 0.0), np.maximum(hi, 0.0)
        return Forecast(
            np.asarray(times, dtype=float), yhat, np.minimum(lo, yhat), np.maximum(hi, yhat), self.band, self.name
        )
