"""The LSTM forecaster: contract, determinism, model files, missing covariates, step handling, no look-ahead.

Small on purpose (a 12-unit LSTM, a 16-step lookback, two short epochs on fluid-model series) so that the whole
file runs in well under a minute on two shared cores; accuracy is measured by bench/lstm.py, not here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from infercast.predictors import features as F
from infercast.predictors import modelfile
from infercast.predictors.base import Forecaster, History, future_grid
from infercast.predictors.lstm import DEFAULT_MODEL, LSTMForecaster, LSTMParams
from infercast.predictors.modelfile import ModelFileError
from infercast.simulator.replay.pretrain_data import generated_histories
from tests.predictors.shared_lstm import trained_stem

torch = pytest.importorskip("torch")

TINY = LSTMParams(
    lookback=16, hidden=12, head_hidden=16, max_epochs=2, windows_per_epoch=600, val_windows=200, batch_size=128
)


@pytest.fixture(scope="module")
def data() -> list[History]:
    return generated_histories([], n_series=4, hours=2.0, seed=3)


@pytest.fixture(scope="module")
def model(data, shared_results) -> LSTMForecaster:
    torch.set_num_threads(1)
    # the same training as test_lstm_calibration.py's `stem`, once per run (tests/predictors/shared_lstm.py)
    return LSTMForecaster.load(trained_stem(shared_results, TINY, data))


def _bytes(f) -> bytes:
    return b"".join(a.tobytes() for a in (f.t, f.yhat, f.yhat_lower, f.yhat_upper))


def test_contract_shapes_band_and_grid(model, data):
    assert isinstance(model, Forecaster) and model.name == "lstm"
    h = data[0].upto(data[0].t[200])
    f = model.forecast(h, 300)
    # What the user sees: 20 points at 15 s after the last sample, ordered P10 <= P50 <= P90, within [0, 1].
    assert np.array_equal(f.t, future_grid(h, 300)) and len(f.t) == 20
    assert f.model == "lstm" and f.band == (0.1, 0.9)
    assert np.all(f.yhat_lower <= f.yhat) and np.all(f.yhat <= f.yhat_upper)
    assert np.all(f.yhat_lower >= 0) and np.all(f.yhat_upper <= 1)
    assert np.isfinite(f.yhat).all()
    # A shorter horizon gives the first points of the same grid.
    g = model.forecast(h, 60)
    assert np.array_equal(g.t, f.t[:4])


def test_forecast_many_matches_forecast_one_by_one(model, data):
    hs = [d.upto(d.t[150 + 7 * i]) for i, d in enumerate(data)]
    many = model.forecast_many(hs, 300)
    for h, f in zip(hs, many, strict=True):
        one = model.forecast(h, 300)
        np.testing.assert_allclose(f.yhat, one.yhat, atol=1e-6)
        np.testing.assert_allclose(f.yhat_upper, one.yhat_upper, atol=1e-6)


def test_same_seed_same_bytes_other_seed_differs(data):
    torch.set_num_threads(1)
    h = data[1].upto(data[1].t[300])
    a = LSTMForecaster(TINY, progress=False).fit(data).forecast(h, 300)
    b = LSTMForecaster(TINY, progress=False).fit(data).forecast(h, 300)
    c = LSTMForecaster(TINY, progress=False, seed=1).fit(data).forecast(h, 300)
    assert _bytes(a) == _bytes(b)
    assert _bytes(a) != _bytes(c)


def test_save_load_round_trip(model, data, tmp_path):
    model.save(tmp_path / "m")
    back = LSTMForecaster.load(tmp_path / "m")
    h = data[2].upto(data[2].t[250])
    assert _bytes(back.forecast(h, 300)) == _bytes(model.forecast(h, 300))
    meta = json.loads((tmp_path / "m.json").read_text())
    # The metadata a reader needs: inputs, scaler, horizon, step, training range, library versions, scores.
    assert meta["inputs"] == list(F.STEP_CHANNELS) and meta["covariates"] == list(F.COVARIATES)
    assert len(meta["scaler"]["x_mean"]) == len(F.STEP_CHANNELS)
    assert meta["horizon_s"] == 300 and meta["step_s"] == 15 and meta["quantiles"] == [0.1, 0.5, 0.9]
    assert meta["training_range"]["n_series"] == 4 and meta["training_range"]["hours"] > 7
    assert meta["library_versions"]["torch"] == torch.__version__
    assert 0 <= meta["scores"]["val_band_coverage"] <= 1 and meta["scores"]["epochs_run"] >= 1


@pytest.fixture()
def saved(model, tmp_path) -> Path:
    model.save(tmp_path / "m")
    return tmp_path / "m"


def _meta(stem: Path) -> dict:
    return json.loads(stem.with_suffix(".json").read_text())


def test_truncated_weights_are_refused(saved):
    w = saved.with_suffix(".safetensors")
    w.write_bytes(w.read_bytes()[:-100])
    with pytest.raises(ModelFileError, match="SHA-256") as e:
        LSTMForecaster.load(saved)
    assert str(w) in str(e.value) and "truncated" in str(e.value)


def test_unreadable_weights_with_matching_hash_are_refused(saved):
    w = saved.with_suffix(".safetensors")
    w.write_bytes(b"\x00" * 64)
    meta = _meta(saved)
    meta["weights_sha256"] = modelfile._sha256(w)
    saved.with_suffix(".json").write_text(json.dumps(meta))
    with pytest.raises(ModelFileError, match="not a readable safetensors file"):
        LSTMForecaster.load(saved)


def test_corrupt_metadata_is_refused(saved):
    saved.with_suffix(".json").write_text('{"format": "infercast-lstm", ')
    with pytest.raises(ModelFileError, match="not valid JSON") as e:
        LSTMForecaster.load(saved)
    assert e.value.path.endswith("m.json")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda m: m.update(inputs=[*m["inputs"][:-1], "gpu_temp"]), "inputs"),
        (lambda m: m.pop("scaler"), "lacks scaler"),
        (lambda m: m.update(format_version=99), "format_version 99"),
        (lambda m: m.update(step_s=-15), "step_s must be a positive number"),
        (lambda m: m.update(quantiles=[0.9, 0.5, 0.1]), "quantiles"),
        (lambda m: m["hparams"].update(hidden=13), "tensors don't match"),
        (lambda m: m["hparams"].update(dropout=0.5), "unknown keys"),
    ],
)
def test_mismatched_metadata_is_refused_with_the_reason(saved, change, reason):
    meta = _meta(saved)
    change(meta)
    saved.with_suffix(".json").write_text(json.dumps(meta))
    with pytest.raises(ModelFileError, match=reason):
        LSTMForecaster.load(saved)


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(ModelFileError, match="metadata file is missing"):
        LSTMForecaster.load(tmp_path / "nothing")


def test_missing_covariates_are_masked_not_invented(model, data):
    full = data[0].upto(data[0].t[200])
    # A source without fragmentation, and one whose rate scrape failed for the last 10 samples.
    no_frag = History(full.t, full.y, {k: v for k, v in full.features.items() if k != "fragmentation"})
    rps = full.features["rps"].copy()
    rps[-10:] = np.nan
    gap = History(full.t, full.y, {**full.features, "rps": rps})
    for h in (no_frag, gap):
        f = model.forecast(h, 300)
        assert np.isfinite(f.yhat).all() and np.all(f.yhat_lower <= f.yhat_upper)
    raw = F.tail_windows([no_frag, gap], 16)
    w = F.encode(raw)
    frag_v, frag_m = F.STEP_CHANNELS.index("fragmentation"), F.STEP_CHANNELS.index("fragmentation_mask")
    rps_v, rps_m = F.STEP_CHANNELS.index("rps_logratio"), F.STEP_CHANNELS.index("rps_mask")
    assert np.all(w.x[0, :, frag_m] == 0) and np.all(w.x[0, :, frag_v] == 0)
    assert np.all(w.x[1, -10:, rps_m] == 0) and np.all(w.x[1, -10:, rps_v] == 0)
    assert np.all(w.x[1, :-10, rps_m] == 1)
    assert w.s[0, F.SERIES_CHANNELS.index("fragmentation_present")] == 0
    # Only KV usage, nothing else: still a forecast.
    bare = model.forecast(History(full.t, full.y), 300)
    assert np.isfinite(bare.yhat).all()


def test_no_look_ahead(model, data):
    h = data[3]
    t0 = h.t[220]
    changed = {k: v.copy() for k, v in h.features.items()}
    y2 = h.y.copy()
    y2[221:] = 1.0 - y2[221:]
    for v in changed.values():
        v[221:] *= 7
    other = History(h.t, y2, changed)
    a = model.forecast(h.upto(t0), 300)
    b = model.forecast(other.upto(t0), 300)
    assert _bytes(a) == _bytes(b)
    # Resampling a finer history onto the model grid uses only samples at or before the last one.
    fine_t = np.arange(0, 3600, 5.0)
    fine = History(fine_t, 0.3 + 0.1 * np.sin(fine_t / 300))
    fine2 = History(fine_t, np.where(fine_t > 3000, 0.9, fine.y))
    assert _bytes(model.forecast(fine.upto(3000), 300)) == _bytes(model.forecast(fine2.upto(3000), 300))


def test_other_steps_are_resampled_or_refused(model):
    t5 = np.arange(0, 1800, 5.0)
    f = model.forecast(History(t5, 0.3 + 0.0001 * t5), 300)
    assert len(f.t) == 60 and f.t[0] == t5[-1] + 5  # on the history's own grid
    assert np.all(np.diff(f.yhat_upper) > -0.2)
    t300 = np.arange(0, 36000, 300.0)
    with pytest.raises(F.StepMismatchError, match="300 s step, more than 4x the model's 15 s step"):
        model.forecast(History(t300, np.full(len(t300), 0.5)), 300)
    with pytest.raises(ValueError, match="beyond this model's 300 s"):
        model.forecast(History(t5, np.full(len(t5), 0.5)), 600)
    with pytest.raises(ValueError, match="no observed value"):
        model.forecast(History(t5, np.full(len(t5), np.nan)), 300)


def test_pretrained_model_keeps_weights_on_a_short_past(model, data):
    before = {k: v.clone() for k, v in model.net_.state_dict().items()}
    model.fit([data[0].upto(data[0].t[100])])  # 101 samples < finetune_min_steps
    after = model.net_.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_unfitted_model_says_so():
    with pytest.raises(RuntimeError, match=r"call fit\(\) or LSTMForecaster.load"):
        LSTMForecaster(TINY).forecast(History(np.arange(3.0) * 15, np.zeros(3)), 300)


def test_shipped_model_loads_and_is_small():
    w, m = modelfile.paths(DEFAULT_MODEL)
    assert w.stat().st_size + m.stat().st_size < 2 * 1024 * 1024
    lstm = LSTMForecaster.load(DEFAULT_MODEL)
    t = np.arange(0, 1800, 15.0)
    rps = np.where(t > 1500, 400.0, 100.0)
    h = History(t, np.where(t > 1500, 0.6, 0.3), {"rps": rps, "long_share": np.full(len(t), 0.3)})
    f = lstm.forecast(h, 300)
    assert np.all(f.yhat_lower <= f.yhat) and np.all(f.yhat <= f.yhat_upper)
    assert lstm.meta_["scores"]["val_peak_mae"] < 0.2
