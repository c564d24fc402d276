"""What each controlled arm is told about the future (`infercast.actuators.futures`): the same present, another
future.  What a reader of the bench relies on: `scheduled` differs from the others only by the calendar's announced
peak, from a horizon before the event; `perfect-forecast` only by the true future; and neither is frozen by the age
of forecasts it does not read."""

from __future__ import annotations

import math

import pytest

from infercast.actuators.admin import Admission, Observation, PoolState
from infercast.actuators.futures import CalendarInputs, TruthOverlay, present_only
from infercast.actuators.inputs import LoopInputs
from infercast.actuators.policy import Outlook
from infercast.config import load_config

FLEET = Observation(
    0.0,
    (
        PoolState("v4-short", "v4", 7, 7, 1.0, None, False, 0, 8192, 4),
        PoolState("v4-long", "v4", 5, 5, 1.0, None, False, 8193, None, 4),
    ),
    Admission(0.8, 24_000, 2.5, 15.0),
)


class Fixed:
    def __init__(self, outlook: dict[str, Outlook]) -> None:
        self.outlook = outlook

    def read(self, now: float, fleet: Observation) -> LoopInputs:
        return LoopInputs(now, self.outlook, {"v4-short.kv_upper": 0.9}, {"live": 5.0, "forecast": 9999.0})


def live() -> dict[str, Outlook]:
    # the pipeline's own forecasts (upper bands 0.9 / 400 req/s) that `scheduled` and `perfect-forecast` must not read
    return {
        "v4-short": Outlook("v4-short", 0.35, 0.9, 60.0, 170.0, 400.0, 300.0, 170.0),
        "v4-long": Outlook("v4-long", 0.5, 0.9, 60.0, 30.0, 400.0, 300.0, 30.0),
    }


@pytest.fixture()
def cfg(repo_root):
    return load_config(repo_root / "examples" / "flash-sale.yaml")  # the sale at 600 s, announced at 12,000 req/s


def test_scheduled_is_told_the_calendar_and_nothing_else(cfg):
    inputs = CalendarInputs(Fixed(live()), cfg)
    before = inputs.read(200.0, FLEET)  # more than a horizon (300 s) ahead of the sale: the present alone
    assert before.outlook["v4-short"] == present_only(live()["v4-short"], 0.75)
    assert before.outlook["v4-short"].kv_upper_peak == 0.35 and math.isinf(
        before.outlook["v4-short"].rps_surge_eta_seconds
    )
    assert "forecast" not in before.ages, "an arm that reads no forecast was frozen by the forecasts' age"
    ahead = inputs.read(480.0, FLEET).outlook
    assert ahead["v4-short"].rps_upper_peak == pytest.approx(12_000 * 170 / 200)
    assert ahead["v4-short"].rps_surge_eta_seconds == 120.0
    assert ahead["v4-long"].rps_upper_peak == pytest.approx(12_000 * 30 / 200)


def test_perfect_forecast_is_told_the_truth_on_the_same_present(cfg):
    truth = {
        "v4-short": Outlook("v4-short", 0.2, 0.5, math.inf, 100.0, 5000.0, 90.0),
        "v4-long": Outlook("v4-long", 0.2, 0.95, 45.0, 20.0, 20.0, math.inf),
    }
    got = TruthOverlay(Fixed(live()), Fixed(truth), cfg).read(510.0, FLEET).outlook
    short, long_ = got["v4-short"], got["v4-long"]
    assert (short.kv_now, short.rps_now) == (0.35, 170.0), "the present is the store's, as for every arm"
    assert short.rps_upper_peak == pytest.approx(170.0 * 50) and short.rps_surge_eta_seconds == 90.0
    assert (long_.kv_upper_peak, long_.kv_breach_eta_seconds) == (0.95, 45.0)
    assert math.isinf(long_.rps_surge_eta_seconds)
