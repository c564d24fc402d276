"""The online combination: the member that has been right on this series lately gets the weight."""

from __future__ import annotations

import numpy as np
import pytest

from infercast.predictors.base import DEFAULT_BAND, Forecast, History, future_grid
from infercast.predictors.combined import OnlineCombination


class Constant:
    """A member that always forecasts `value` (and fails when `fail` is set)."""

    def __init__(self, name: str, value: float, fail: bool = False) -> None:
        self.name, self.value, self.fail, self.band = name, value, fail, DEFAULT_BAND

    def fit(self, histories):
        return self

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        if self.fail:
            raise ValueError("broken")
        t = future_grid(history, horizon_s)
        y = np.full(len(t), self.value)
        return Forecast(t, y, y - 1, y + 1, self.band, self.name)


def _run(model, n: int = 60) -> Forecast:
    t = np.arange(0.0, 15.0 * n, 15.0)
    y = np.full(n, 100.0)  # the truth: 100, which "right" forecasts
    fc = None
    for i in range(20, n):
        fc = model.forecast(History(t[: i + 1], y[: i + 1]), 60.0)
    return fc


@pytest.mark.parametrize("mode", ["inverse", "best"])
def test_the_member_that_has_been_right_gets_the_weight(mode):
    m = OnlineCombination([Constant("right", 100.0), Constant("wrong", 130.0)], mode=mode)
    fc = _run(m)
    assert m.outcomes > 10
    assert fc.yhat[-1] == pytest.approx(100.0, abs=0.01)


def test_until_outcomes_are_known_the_members_weigh_the_same():
    m = OnlineCombination([Constant("a", 100.0), Constant("b", 130.0)])
    fc = m.forecast(History(np.arange(0.0, 300.0, 15.0), np.full(20, 100.0)), 60.0)
    assert fc.yhat[-1] == pytest.approx(115.0)


def test_a_failing_member_is_left_out_and_all_failing_says_why():
    ok = OnlineCombination([Constant("right", 100.0), Constant("broken", 0.0, fail=True)])
    assert _run(ok).yhat[-1] == pytest.approx(100.0)
    dead = OnlineCombination([Constant("broken", 0.0, fail=True)])
    with pytest.raises(ValueError, match=r"no member could forecast.*broken"):
        dead.forecast(History(np.arange(0.0, 300.0, 15.0), np.full(20, 100.0)), 60.0)


def test_a_history_that_goes_back_in_time_starts_afresh():
    m = OnlineCombination([Constant("right", 100.0), Constant("wrong", 130.0)])
    _run(m)
    m.forecast(History(np.arange(0.0, 300.0, 15.0), np.full(20, 100.0)), 60.0)
    assert m.outcomes == 0


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="mode"):
        OnlineCombination([Constant("a", 1.0)], mode="median")
    with pytest.raises(ValueError, match="no member"):
        OnlineCombination([])


def test_the_traffic_model_never_forecasts_past_half_again_the_highest_rate_seen():
    from infercast.predictors.combined import traffic_combination

    t = np.arange(0.0, 3600.0, 15.0)
    ramp = History(t, np.where(t < 3000, 10.0, 10.0 + (t - 3000) * 2.0))  # a steep ramp in the last 10 minutes
    fc = traffic_combination(bound_factor=1.5).forecast(ramp, 300.0)
    assert fc.yhat_upper.max() <= 1.5 * ramp.y.max() + 1e-9
    assert fc.yhat.max() > ramp.y.max()  # the bound caps the extrapolation; it does not flatten it
