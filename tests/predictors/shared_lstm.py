"""The tiny LSTM training that tests/predictors/test_lstm.py and test_lstm_calibration.py both start from, done once
per test run (`tests/shared_cache.py`) and shared as the saved model file: the network is a local class, so the
fitted object does not pickle, and a loaded copy forecasts byte for byte what the fitted object does."""

from __future__ import annotations

import shutil
from pathlib import Path

from infercast.predictors.base import History
from infercast.predictors.lstm import LSTMForecaster, LSTMParams
from infercast.predictors.modelfile import paths
from tests.shared_cache import SharedCache


def trained_stem(shared: SharedCache, params: LSTMParams, data: list[History]) -> Path:
    """The stem of the saved model `LSTMForecaster(params).fit(data)`, trained on torch's current thread count (the
    fixtures set it).  Shared by every test of the run: read it, or write to a `trained_copy`."""
    import torch  # here, not above: the test modules skip on a missing torch before they call this

    def fit_and_save(folder: Path) -> Path:
        LSTMForecaster(params, progress=False).fit(data).save(folder / "m")
        return folder / "m"

    key = (params, data, torch.__version__, torch.get_num_threads())
    return shared.get("lstm-tiny", key, fit_and_save)


def trained_copy(shared: SharedCache, params: LSTMParams, data: list[History], out: Path) -> Path:
    """The files of `trained_stem` copied to the stem `out` (byte for byte what `fit(data).save(out)` writes)."""
    for src, dst in zip(paths(trained_stem(shared, params, data)), paths(out), strict=True):
        shutil.copyfile(src, dst)
    return out
