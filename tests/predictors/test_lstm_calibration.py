"""The LSTM's band calibration: stored per-step factors widen/narrow the P10/P90 offsets around the P50.

A tiny model (as in test_lstm.py) on fluid-model series; the calibration's effect on real coverage is measured by
bench/lstm.py, not here.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from infercast.predictors.base import History
from infercast.predictors.lstm import CALIBRATION_KEY, LSTMForecaster, LSTMParams
from infercast.predictors.modelfile import ModelFileError, paths
from infercast.simulator.replay.pretrain_data import generated_histories
from tests.predictors.shared_lstm import trained_copy

torch = pytest.importorskip("torch")

TINY = LSTMParams(
    lookback=16, hidden=12, head_hidden=16, max_epochs=2, windows_per_epoch=600, val_windows=200, batch_size=128
)
STEPS = TINY.horizon_steps


@pytest.fixture(scope="module")
def data() -> list[History]:
    return generated_histories([], n_series=4, hours=2.0, seed=3)


@pytest.fixture(scope="module")
def stem(data, tmp_path_factory, shared_results):
    """A saved tiny model without calibration (as every file written before the calibration existed)."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("cal") / "m"
    # the same training as test_lstm.py's `model`, once per run (tests/predictors/shared_lstm.py): a copy of its files
    return trained_copy(shared_results, TINY, data, out)


def _with_factors(stem, lower, upper):
    m = LSTMForecaster.load(stem)
    m.meta_[CALIBRATION_KEY] = {"lower": list(lower), "upper": list(upper)}
    return m


def test_old_file_without_factors_loads_with_factors_one(stem, data):
    meta = json.loads(paths(stem)[1].read_text())
    assert CALIBRATION_KEY not in meta
    m = LSTMForecaster.load(stem)
    lo, hi = m.band_factors
    assert np.array_equal(lo, np.ones(STEPS)) and np.array_equal(hi, np.ones(STEPS))
    # Factors of exactly 1 stored explicitly give the very same forecast as no calibration at all.
    h = data[0].upto(data[0].t[200])
    same = _with_factors(stem, [1.0] * STEPS, [1.0] * STEPS).forecast(h, 300)
    f = m.forecast(h, 300)
    assert np.array_equal(f.yhat_lower, same.yhat_lower) and np.array_equal(f.yhat_upper, same.yhat_upper)


def test_stored_factors_widen_the_band_around_the_median(stem, data, tmp_path):
    hs = [d.upto(d.t[150 + 11 * i]) for i, d in enumerate(data)]
    plain = LSTMForecaster.load(stem)
    cal = _with_factors(stem, [2.0] * STEPS, [3.0] * STEPS)
    a, b = plain.forecast_many(hs, 300), cal.forecast_many(hs, 300)
    n_checked = 0
    for f, g in zip(a, b, strict=True):
        # The median is untouched; where nothing is clipped, P90 - P50 is 3x and P50 - P10 2x what it was.
        np.testing.assert_allclose(g.yhat, f.yhat, atol=1e-12)
        up_ok = (g.yhat_upper < 1) & (f.yhat_upper - f.yhat > 1e-4)
        lo_ok = (g.yhat_lower > 0) & (f.yhat - f.yhat_lower > 1e-4)
        np.testing.assert_allclose((g.yhat_upper - g.yhat)[up_ok], 3 * (f.yhat_upper - f.yhat)[up_ok], rtol=1e-6)
        np.testing.assert_allclose((g.yhat - g.yhat_lower)[lo_ok], 2 * (f.yhat - f.yhat_lower)[lo_ok], rtol=1e-6)
        n_checked += int(up_ok.sum() + lo_ok.sum())
        # Ordered and within [0, 1] whatever the factor.
        assert np.all(g.yhat_lower <= g.yhat) and np.all(g.yhat <= g.yhat_upper)
        assert g.yhat_lower.min() >= 0 and g.yhat_upper.max() <= 1
    assert n_checked > 40
    # The factors travel with the model file and give the same bytes back.
    cal.save(tmp_path / "c")
    back = LSTMForecaster.load(tmp_path / "c")
    assert back.meta_[CALIBRATION_KEY]["upper"] == [3.0] * STEPS
    g2 = back.forecast_many(hs, 300)
    assert all(np.array_equal(x.yhat_upper, y.yhat_upper) for x, y in zip(b, g2, strict=True))


@pytest.mark.parametrize(
    ("cal", "reason"),
    [
        ({"lower": [1.0] * 3, "upper": [1.0] * STEPS}, "lower must be 20 factors"),
        ({"lower": [1.0] * STEPS, "upper": [-1.0] * STEPS}, "upper must be 20 factors"),
        ([1.0, 2.0], "not a JSON object"),
    ],
)
def test_bad_factors_are_refused(stem, tmp_path, cal, reason):
    m = LSTMForecaster.load(stem)
    m.meta_[CALIBRATION_KEY] = cal
    m.save(tmp_path / "bad")
    with pytest.raises(ModelFileError, match=reason):
        LSTMForecaster.load(tmp_path / "bad")


def test_calibrate_is_deterministic_and_reaches_its_coverage(stem):
    held_out = generated_histories([], n_series=3, hours=1.5, seed=11)  # other seed than the training data
    a = LSTMForecaster.load(stem)
    rec = a.calibrate(held_out, source="test")
    b = LSTMForecaster.load(stem)
    assert b.calibrate(held_out, source="test") == rec  # same data, same factors: no sampling
    assert len(rec["lower"]) == len(rec["upper"]) == STEPS and rec["origins"] > 500
    assert all(f > 0 for f in rec["lower"] + rec["upper"])
    # On the data it was fitted on, the calibrated band holds ~80% at every step (split-conformal quantiles).
    assert all(0.78 <= c <= 0.86 for c in rec["coverage_after"])
    # The recorded coverage is what forecast_many really gives: score the horizon step by hand, as the backtest
    # does (origins after the 600 s warm-up, the whole past handed in).
    inside = []
    for h in held_out:
        origins = range(40, len(h.t) - STEPS)
        fs = a.forecast_many([h.upto(h.t[i]) for i in origins], 300)
        inside += [f.yhat_lower[-1] <= h.y[i + STEPS] <= f.yhat_upper[-1] for f, i in zip(fs, origins, strict=True)]
    assert np.mean(inside) == pytest.approx(rec["coverage_after"][-1], abs=1e-4)
    assert rec["coverage_before"][-1] < 0.7  # the tiny, two-epoch model's raw band is far too narrow


def test_training_drops_a_stale_calibration(stem, data):
    m = _with_factors(stem, [2.0] * STEPS, [2.0] * STEPS)
    m.params = LSTMParams(**{**TINY.__dict__, "finetune_min_steps": 10, "max_epochs": 1})
    m.fit(data[:1])
    assert CALIBRATION_KEY not in m.meta_ and np.array_equal(m.band_factors[1], np.ones(STEPS))


def test_shipped_model_carries_its_calibration():
    from infercast.predictors.lstm import DEFAULT_MODEL

    m = LSTMForecaster.load(DEFAULT_MODEL)
    cal = m.meta_[CALIBRATION_KEY]
    # Fitted on twin runs, never on the development traces it is scored on.
    assert "seeds 500+" in cal["source"]["data"][0] and cal["origins"] > 1000
    lo, hi = m.band_factors
    assert len(lo) == len(hi) == 20 and np.all(lo > 0) and np.all(hi > 0)  # positive: the band stays ordered
    assert hi[-1] > 1  # at the horizon the twin needs a wider P90 side than training gave
    assert abs(cal["coverage_after"][-1] - 0.8) < 0.01
