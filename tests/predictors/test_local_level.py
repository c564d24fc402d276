"""The local-level traffic model: its smoothing read off the series, so it is the last value on a walk and an
average on noise around a level, and a surge restarts it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infercast.predictors.backtest import run_backtest, score_runs
from infercast.predictors.base import History
from infercast.predictors.local_level import LocalLevel, diff_autocorrelation, smooth, steady_gain
from infercast.predictors.naive import LastValue


def test_the_gain_goes_from_the_mean_to_the_last_value():
    assert steady_gain(0.1) == 1.0  # no noise to filter: the last value
    assert steady_gain(-0.5) == 0.0  # noise around a fixed level: the mean
    gains = [steady_gain(r) for r in (-0.49, -0.4, -0.3, -0.1)]
    assert gains == sorted(gains) and 0 < gains[0] < gains[-1] < 1


def _walk_plus_noise(q: float, n: int = 4000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 100.0 + np.cumsum(rng.normal(0, math.sqrt(q), n)) + rng.normal(0, 1.0, n)


def test_the_autocorrelation_gives_back_the_models_ratio():
    # rho = -1 / (q + 2): q = 0.5 gives -0.4
    assert diff_autocorrelation(_walk_plus_noise(0.5)) == pytest.approx(-0.4, abs=0.04)


def test_on_noise_around_a_level_it_beats_the_last_value_and_on_a_walk_it_is_the_last_value():
    t = np.arange(0.0, 2000 * 15.0, 15.0)
    noisy = History(t, _walk_plus_noise(0.005, len(t)))  # its bound: 0.75x the last value's RMS error at 20 steps
    runs = run_backtest(noisy, [LocalLevel(), LastValue()], 300.0, warmup_s=3600.0, origin_every_s=150.0)
    s = score_runs(noisy, runs, 300.0)
    assert s["local_level"]["mae"] < 0.9 * s["last_value"]["mae"]
    rng = np.random.default_rng(1)
    walk = History(t, 100.0 + np.cumsum(rng.normal(0, 1.0, len(t))))
    m = LocalLevel()
    fc = m.forecast(walk, 300.0)
    assert m.gain_ > 0.9 and fc.yhat[0] == pytest.approx(walk.y[-1], abs=1.0)


def test_a_surge_restarts_the_level():
    rng = np.random.default_rng(2)
    y = 200.0 + rng.normal(0, 20.0, 240)
    y[200:] += 5000.0
    assert smooth(y, 0.05, shift_sigmas=4.0)[205] > 4900.0
    assert smooth(y, 0.05, shift_sigmas=None)[205] < 2000.0  # a small gain alone follows a surge slowly
