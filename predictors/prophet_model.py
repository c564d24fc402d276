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
- **Fast forecast.** After a fit, `predict_at` computes Prophet's forecast in numpy from the fitted parameters
  (`ProphetPlan`: the trend's changepoints, the Fourier terms' coefficients, the regressors'), instead of
  `Prophet.predict`, which rebuilds the design matrix through pandas on every call (about 16 ms a forecast, issue
  25).  The point forecast is Prophet's to rounding; the band is drawn exactly as Prophet draws it (same random
  calls, in the same order, on numpy's global generator), so it has the same distribution and, from the same seed,
  the same values.  Models the plan does not cover (logistic or flat growth, MCMC fits, holidays, conditional
  seasonalities) go through `Prophet.predict`; `fast=False` forces that path.
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
    #: the organisers' expected requests per second at the event's peak, fleet-wide (`events[].expected_rps`)
    expected_rps: float | None = None


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
        expected = getattr(ev, "expected_rps", None)
        out.append(EventWindow(_regressor_name(ev.name), start, end, None if expected is None else float(expected)))
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
        fast: bool = True,
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
        self.fast = fast
        self.model_ = None
        self.plan_: ProphetPlan | None = None
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
        self.plan_ = ProphetPlan.of(m) if self.fast else None
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
        times = np.asarray(times, dtype=float)
        _, yhat, lo, hi = self.components_at(times)
        if self.nonnegative:
            yhat, lo, hi = np.maximum(yhat, 0.0), np.maximum(lo, 0.0), np.maximum(hi, 0.0)
        return Forecast(times, yhat, np.minimum(lo, yhat), np.maximum(hi, yhat), self.band, self.name)

    def components_at(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(trend, yhat, yhat_lower, yhat_upper) at `times` (sorted series seconds), unclipped: Prophet's columns.
        With uncertainty_samples=0 Prophet gives no interval: the band is then the point itself."""
        if self.model_ is None:
            raise RuntimeError("prophet: fit() first")
        times = np.asarray(times, dtype=float)
        regressors = {name: self._indicator(name, times) for name in self.regressors_}
        if self.plan_ is not None and not np.any(np.diff(times) < 0):  # the plan reads the future as the tail
            return self.plan_.predict(self.epoch_s + times, regressors)
        pred = self.model_.predict(self._frame(times))
        yhat = pred["yhat"].to_numpy()
        lo = pred["yhat_lower"].to_numpy() if "yhat_lower" in pred else yhat
        hi = pred["yhat_upper"].to_numpy() if "yhat_upper" in pred else yhat
        return pred["trend"].to_numpy(), yhat, lo, hi


@dataclass(frozen=True)
class ProphetPlan:
    """What a fitted Prophet (MAP fit, linear growth, Fourier seasonalities and extra regressors) needs to forecast,
    as arrays: `predict` is `Prophet.predict`'s yhat, trend and interval without pandas.

    The design matrix's column layout is read once from Prophet's own `make_all_seasonality_features`, so the plan
    follows Prophet's column order and its additive/multiplicative split rather than restating them.
    """

    start_ns: int
    t_scale_ns: int
    y_scale: float
    floor: float
    k: float
    m: float
    deltas: np.ndarray
    changepoints_t: np.ndarray
    #: per design-matrix column: cycles per day (0 for a regressor), sin (True) or cos, and the regressor's name
    cycles_per_day: np.ndarray
    is_sin: np.ndarray
    regressor_cols: tuple[tuple[int, str, float, float], ...]  # (column, name, mu, std)
    beta_additive: np.ndarray  # beta * additive indicator * y_scale
    beta_multiplicative: np.ndarray
    sigma_obs: float
    history_step_t: float  # mean step of the fitted history in Prophet's scaled time
    uncertainty_samples: int
    interval_width: float

    @classmethod
    def of(cls, model) -> ProphetPlan | None:
        """The plan of a fitted Prophet, or None when it uses something the plan does not cover."""
        if (
            model.growth != "linear"
            or model.mcmc_samples
            or model.params["k"].shape[0] != 1
            or model.holidays is not None
            or model.country_holidays is not None
            or any(p["condition_name"] is not None for p in model.seasonalities.values())
            or any(p.get("predictor") is not None for p in model.extra_regressors.values())
        ):
            return None
        probe = model.history.iloc[:1].copy()
        features, _, component_cols, _ = model.make_all_seasonality_features(probe)
        n = features.shape[1]
        cycles, is_sin, regs = np.zeros(n), np.zeros(n, dtype=bool), []
        for j, col in enumerate(features.columns):
            if col in model.extra_regressors:
                props = model.extra_regressors[col]
                regs.append((j, col, float(props["mu"]), float(props["std"])))
            elif "_delim_" in col:
                season, idx = col.rsplit("_delim_", 1)
                i = int(idx) - 1  # columns are sin(1), cos(1), sin(2), cos(2), ...
                cycles[j] = (i // 2 + 1) / model.seasonalities[season]["period"]
                is_sin[j] = i % 2 == 0
            elif col != "zeros":  # Prophet's dummy column when there is no feature at all: always 0
                return None
        beta = np.asarray(model.params["beta"][0], dtype=float)
        floor = 0.0 if model.scaling == "absmax" else float(model.y_min)
        return cls(
            start_ns=int(model.start.as_unit("ns").value),
            t_scale_ns=int(model.t_scale.as_unit("ns").value),
            y_scale=float(model.y_scale),
            floor=floor,
            k=float(np.ravel(model.params["k"])[0]),
            m=float(np.ravel(model.params["m"])[0]),
            deltas=np.asarray(model.params["delta"][0], dtype=float),
            changepoints_t=np.asarray(model.changepoints_t, dtype=float),
            cycles_per_day=cycles,
            is_sin=is_sin,
            regressor_cols=tuple(regs),
            beta_additive=beta * component_cols["additive_terms"].to_numpy() * float(model.y_scale),
            beta_multiplicative=beta * component_cols["multiplicative_terms"].to_numpy(),
            sigma_obs=float(np.ravel(model.params["sigma_obs"])[0]),
            history_step_t=float(np.diff(model.history["t"].to_numpy()).mean()),
            uncertainty_samples=int(model.uncertainty_samples or 0),
            interval_width=float(model.interval_width),
        )

    def design(self, ns: np.ndarray, regressors: dict[str, np.ndarray]) -> np.ndarray:
        """Prophet's seasonal design matrix at `ns` (UTC nanoseconds): sin/cos of days since 1970 x 2 pi x cycles."""
        days = (ns / 1e9) / 86400.0
        arg = (2 * np.pi * days)[:, None] * self.cycles_per_day[None, :]
        x = np.where(self.is_sin[None, :], np.sin(arg), np.cos(arg))
        for j, name, mu, std in self.regressor_cols:
            x[:, j] = (regressors[name] - mu) / std
        return x

    def predict(
        self, seconds: np.ndarray, regressors: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(trend, yhat, lower, upper) at `seconds` (UTC epoch seconds, sorted)."""
        import pandas as pd

        # The same float -> nanosecond conversion as the frame Prophet was fitted on, so the scaled time (and
        # which points count as future, t > 1) is Prophet's to the nanosecond.
        ns = pd.to_datetime(seconds, unit="s").as_unit("ns").asi8
        t = (ns - self.start_ns) / self.t_scale_ns
        trend_scaled = _piecewise_linear(t, self.deltas, self.k, self.m, self.changepoints_t)
        trend = trend_scaled * self.y_scale + self.floor
        x = self.design(ns, regressors)
        additive, multiplicative = x @ self.beta_additive, x @ self.beta_multiplicative
        yhat = trend * (1 + multiplicative) + additive
        if not self.uncertainty_samples:
            return trend, yhat, yhat, yhat
        sims = self._sample_trends(t, trend_scaled) * (1 + multiplicative) + additive
        # Prophet's observation noise: the same draw (shape, order) as `Prophet.sample_model_vectorized`.
        sims += np.random.normal(0, self.sigma_obs, sims.shape) * self.y_scale
        lo_p, hi_p = 100 * (1.0 - self.interval_width) / 2, 100 * (1.0 + self.interval_width) / 2
        pct = np.nanpercentile if np.isnan(sims).any() else np.percentile
        return trend, yhat, pct(sims, lo_p, axis=0), pct(sims, hi_p, axis=0)

    def _sample_trends(self, t: np.ndarray, trend_scaled: np.ndarray) -> np.ndarray:
        """Future trend paths, as `Prophet.sample_predictive_trend_vectorized` draws them for linear growth: slope
        changes after the fitted span (t > 1) at the fit's changepoint rate, Laplace-sized like the fitted ones."""
        n = self.uncertainty_samples
        unc = np.zeros((n, len(t)))
        future = t > 1
        length = int(future.sum())
        if length:
            step = float(np.diff(t[future]).mean()) if length > 1 else self.history_step_t
            likelihood = len(self.changepoints_t) * step
            mean_delta = float(np.mean(np.abs(self.deltas))) + 1e-8
            change = np.random.uniform(size=(n, length)) < likelihood
            shifts = np.random.laplace(0, mean_delta, size=change.shape) * change
            shifts = (np.hstack([np.zeros((n, 1)), shifts])[:, :-1] + shifts) / 2
            unc[:, len(t) - length :] = shifts.cumsum(axis=1).cumsum(axis=1) * step
        return (trend_scaled[None, :] + unc) * self.y_scale + self.floor


def _piecewise_linear(t: np.ndarray, deltas: np.ndarray, k: float, m: float, changepoints: np.ndarray) -> np.ndarray:
    """Prophet's linear trend: slope k + the deltas of the changepoints passed, offset kept continuous."""
    past = changepoints[None, :] <= t[:, None]
    return (k + (past * deltas).sum(axis=1)) * t + (m + (past * deltas * -changepoints).sum(axis=1))
