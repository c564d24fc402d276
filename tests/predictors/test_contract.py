"""One contract for every forecaster, then a small accuracy budget per model on series where the answer is known."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.predictors.base import Forecaster, History, future_grid
from infercast.predictors.holt_winters import HoltWinters
from infercast.predictors.kalman import Kalman
from infercast.predictors.linear import PredictLinear
from infercast.predictors.naive import MIN_RESIDUALS, LastValue, SeasonalNaive, column_quantile, residual_band
from infercast.predictors.registry import BASELINES, make

T = np.arange(0, 3600, 15.0)


def _walk(seed: int = 0, n: int = len(T)) -> np.ndarray:
    return 0.4 + np.cumsum(np.random.default_rng(seed).normal(0, 0.005, n))


@pytest.mark.parametrize("name", BASELINES)
def test_contract(name):
    m = make(name, "kv")
    assert isinstance(m, Forecaster)
    h = History(T, _walk())
    assert m.fit([h]) is m
    f = m.forecast(h, 300)
    # The grid a user gets: 20 points, one step after the last sample up to the horizon.
    assert np.array_equal(f.t, future_grid(h, 300)) and len(f.t) == 20
    assert f.model == name and f.band == (0.1, 0.9)
    assert np.all(f.yhat_lower <= f.yhat) and np.all(f.yhat <= f.yhat_upper)
    assert np.all((f.yhat_lower >= 0) & (f.yhat_upper <= 1))  # KV usage is clipped to its range
    # Forecasting twice from the same history gives the same answer (no hidden state between calls).
    g = m.forecast(h, 300)
    assert np.array_equal(f.yhat, g.yhat) and np.array_equal(f.yhat_upper, g.yhat_upper)


@pytest.mark.parametrize("name", BASELINES)
def test_missing_samples_are_skipped_not_propagated(name):
    y = _walk(1)
    y[100:110] = np.nan
    y[-1] = np.nan  # the newest scrape failed
    f = make(name, "kv").forecast(History(T, y), 300)
    assert np.isfinite(f.yhat).all() and np.isfinite(f.yhat_upper).all()
    assert f.t[0] == T[-1] + 15  # still anchored at the end of the history


# Holt's budget is wider: its damped trend (phi <= 0.98) undershoots a perfect ramp by ~4 steps of slope.
@pytest.mark.parametrize(("name", "budget"), [("predict_linear", 1e-9), ("kalman", 5e-3), ("holt_winters", 1e-2)])
def test_missing_samples_keep_their_place_in_time(name, budget):
    # A ramp with a 5-minute hole and the last minute missing: the forecast is still the ramp's continuation at
    # the right times (a model that closed the gaps up would think less time had passed).
    y = 0.2 + 0.3 * T / T[-1]
    y[100:120] = np.nan
    y[-4:] = np.nan
    f = make(name, "kv").forecast(History(T, y), 300)
    assert abs(f.yhat[-1] - (0.2 + 0.3 * (T[-1] + 300) / T[-1])) <= budget


@pytest.mark.parametrize(
    ("model", "budget"),
    [(LastValue(), 1e-12), (PredictLinear(), 1e-9), (HoltWinters(damped=False), 1e-3), (Kalman(), 2e-3)],
)
def test_accuracy_budget_on_a_ramp(model, budget):
    # A clean ramp 0.2 -> 0.5: everything with a trend must land on it; last value is exact on a flat line.
    y = np.full(len(T), 0.3) if isinstance(model, LastValue) else 0.2 + 0.3 * T / T[-1]
    f = model.forecast(History(T, y), 300)
    truth = y[-1] if isinstance(model, LastValue) else 0.2 + 0.3 * (T[-1] + 300) / T[-1]
    assert abs(f.yhat[-1] - truth) <= budget


@pytest.mark.parametrize("name", BASELINES)
def test_residual_band_covers_about_its_nominal_share_on_a_random_walk(name):
    # On a random walk (where the errors are stationary), the P10-P90 band should hold ~80% of outcomes.
    hits = []
    for seed in range(6):
        y = _walk(seed, 480)
        t = np.arange(480) * 15.0
        m = make(name, "kv")
        for o in range(300, 460, 8):
            f = m.forecast(History(t[: o + 1], y[: o + 1]), 300)
            hits.append(f.yhat_lower[-1] <= y[o + 20] <= f.yhat_upper[-1])
    assert 0.6 <= np.mean(hits) <= 0.95


def test_residual_band_quantiles_are_the_in_sample_errors():
    y = np.arange(50.0)  # path always forecasts the origin's value; errors at step k are exactly k
    origins = np.arange(10, 40)
    paths = np.repeat(y[origins][:, None], 3, axis=1)
    lo, hi = residual_band(y, origins, paths, (0.1, 0.9))
    assert lo.tolist() == [0.0, 0.0, 0.0]  # never above 0: the band contains its centre
    assert hi.tolist() == [1.0, 2.0, 3.0]


def _band_one_step_at_a_time(y, origins, paths, band):
    """The band as it was computed before `column_quantile`: two `np.quantile` calls per step ahead."""
    n = paths.shape[1]
    lo, hi = np.full(n, np.nan), np.full(n, np.nan)
    target = origins[:, None] + np.arange(1, n + 1)[None, :]
    actual = np.where(target < len(y), y[np.minimum(target, len(y) - 1)], np.nan)
    err = actual - paths
    for k in range(n):
        e = err[:, k][np.isfinite(err[:, k])]
        if len(e) >= MIN_RESIDUALS:
            lo[k], hi[k] = np.quantile(e, band[0]), np.quantile(e, band[1])
    return lo, hi


_values = st.floats(-1e6, 1e6, allow_nan=False) | st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_values, min_size=2, max_size=60),
    st.integers(1, 12),
    st.integers(0, 2**32 - 1),
    st.sampled_from([(0.05, 0.95), (0.1, 0.9), (0.0, 1.0), (0.025, 0.975), (0.5, 0.5)]),
)
def test_residual_band_is_numpys_quantile_to_the_bit(ys, n, seed, band):
    """Whatever the window (NaN and infinite samples, ties, short columns), the band's quantiles are exactly
    `np.quantile`'s of each step's finite errors: the vectorised band changes no forecast.  (Equal as numbers: where
    the quantile is a zero, which of -0.0 and 0.0 comes out depends on how numpy's partition and sort order ties.)"""
    y = np.array(ys)
    rng = np.random.default_rng(seed)
    origins = np.arange(len(y))[-min(len(y), 40) :]
    paths = np.where(rng.random((len(origins), n)) < 0.1, np.nan, rng.normal(0, 100, (len(origins), n)))
    want_lo, want_hi = _band_one_step_at_a_time(y, origins, paths, band)
    with np.errstate(invalid="ignore"):
        got_lo, got_hi = residual_band(y, origins, paths, band)
    filled = np.isfinite(want_lo)
    # where the old loop found enough errors the new band equals np.quantile's value (then clipped at 0) to the bit
    assert np.array_equal(got_lo[filled], np.minimum(want_lo[filled], 0.0))
    assert np.array_equal(got_hi[filled], np.maximum(want_hi[filled], 0.0))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.floats(-1e9, 1e9, allow_nan=False), min_size=1, max_size=30), min_size=1, max_size=8),
       st.floats(0.0, 1.0))  # fmt: skip
def test_column_quantile_matches_numpy(columns, q):
    rows = max(len(c) for c in columns)
    ranked = np.full((rows, len(columns)), np.nan)
    for j, c in enumerate(columns):
        ranked[: len(c), j] = np.sort(c)
    got = column_quantile(ranked, np.array([len(c) for c in columns]), q)
    want = np.array([np.quantile(np.array(c), q) for c in columns])
    assert np.array_equal(got, want)  # non-zero values equal to the bit; a zero's sign may differ (see above)


def test_seasonal_naive_repeats_yesterday():
    t = np.arange(0, 3 * 86400, 600.0)
    y = 100 + 50 * np.sin(2 * np.pi * t / 86400)
    f = SeasonalNaive(86400).forecast(History(t, y), 3600)
    assert f.model == "seasonal_naive_day"
    assert np.allclose(f.yhat, 100 + 50 * np.sin(2 * np.pi * f.t / 86400))


def test_unknown_model_name_is_refused():
    with pytest.raises(ValueError, match="unknown model 'arima'"):
        make("arima")
