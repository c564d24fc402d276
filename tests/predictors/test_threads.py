"""`infercast backtest` runs its models on one math thread (issue 37: an hour of trace in under a minute).

What the user sees: the same scores, sooner.  With a thread per core, each of the thousands of tiny fits (Holt-Winters'
5-parameter L-BFGS-B, the LSTM's 60-step window) woke and joined a thread pool; on a busy 2-core machine an hour of
ServeGen took 98.8 s wall, 28.5 s on one thread (infercast.predictors.threads).
"""

from __future__ import annotations

import numpy as np
import pytest

from infercast.predictors import threads
from infercast.predictors.backtest import run_backtest
from infercast.predictors.base import History
from infercast.predictors.registry import make
from infercast.simulator.replay.evaluate import BacktestOptions, SeriesData, backtest


def _series(n: int = 120, seed: int = 0) -> History:
    t = np.arange(n) * 15.0
    rng = np.random.default_rng(seed)
    y = np.clip(0.5 + 0.3 * np.sin(t / 400) + rng.normal(0, 0.02, n), 0, 1)
    return History(t, y, {"rps": 100 + 10 * y}, "synthetic")


def _blas_threads() -> list[int]:
    return [get() for get, _ in threads._controls()]


class _Recording:
    """A last-value forecaster that records the math thread counts it runs under."""

    name = "recording"

    def __init__(self) -> None:
        self.seen: list[tuple[list[int], int | None]] = []
        self.inner = make("last_value", "kv")

    def fit(self, histories):
        return self

    def forecast(self, history, horizon_s):
        torch = pytest.importorskip("torch")
        self.seen.append((_blas_threads(), torch.get_num_threads()))
        return self.inner.forecast(history, horizon_s)


def test_the_backtest_runs_every_model_on_one_math_thread_and_restores_the_pools_after():
    torch = pytest.importorskip("torch")
    if not threads._controls():
        pytest.skip("no bundled OpenBLAS to steer here")
    torch.set_num_threads(2)
    for _, put in threads._controls():
        put(2)
    before = (_blas_threads(), torch.get_num_threads())
    rec = _Recording()
    data = SeriesData(_series(), "synthetic", "rps")
    backtest(data, BacktestOptions(series="rps", models="recording", no_prophet=True, warmup=300), [rec])
    assert rec.seen, "the recording model never forecast"
    assert all(blas == [1] * len(blas) and t == 1 for blas, t in rec.seen), rec.seen[:3]
    assert (_blas_threads(), torch.get_num_threads()) == before


def test_one_math_thread_changes_no_forecast():
    """Holt-Winters (statsmodels' L-BFGS-B on OpenBLAS) gives the very same forecasts on one thread as on the pool."""
    h = _series()
    runs = []
    for single in (False, True):
        models = [make("holt_winters", "kv"), make("kalman", "kv")]
        if single:
            with threads.one_math_thread():
                runs.append(run_backtest(h, models, 300, warmup_s=600, origin_every_s=60))
        else:
            runs.append(run_backtest(h, models, 300, warmup_s=600, origin_every_s=60))
    a, b = runs
    for name in a:
        assert len(a[name].forecasts) > 10
        for fa, fb in zip(a[name].forecasts, b[name].forecasts, strict=True):
            assert np.array_equal(fa.yhat, fb.yhat), name
            assert np.array_equal(fa.yhat_upper, fb.yhat_upper), name
