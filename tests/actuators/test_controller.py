"""The control loop on the real twin's admin API, with scripted inputs: freezes, guardrails, advisory mode,
verification and rollback, and retries when the backend fails.

`ScriptedInputs` is a test double for the metric store (it hands the loop the outlook a test scripts); the fleet,
its admin API, the policy and the guardrails are the real ones."""

from __future__ import annotations

import math

import pytest

from infercast.actuators.actions import ScalePool, SetAdmission, SetPoolWeight
from infercast.actuators.admin import BackendError
from infercast.actuators.controller import ControlLoop
from infercast.actuators.guardrails import Guardrails, input_freeze
from infercast.actuators.inputs import InputError, LoopInputs
from infercast.actuators.policy import Decision, Outlook
from infercast.config import GuardrailConfig
from infercast.simulator.twin.admin import TwinAdmin
from tests.actuators.shared_fleet import protected_flash_sale


class ScriptedInputs:
    """Test double: returns what the test sets, or raises what it sets."""

    def __init__(self) -> None:
        self.outlook: dict[str, Outlook] = {}
        self.ages = {"live": 0.0, "forecast": 0.0}
        self.figures: dict[str, float] = {}
        self.error: Exception | None = None

    def read(self, now, fleet):
        if self.error is not None:
            raise self.error
        return LoopInputs(now, dict(self.outlook), dict(self.figures), dict(self.ages))


@pytest.fixture()
def setup(repo_root, shared_results):
    # the protected fleet 30 s in, built once per run; this test's own copy (tests/actuators/shared_fleet.py)
    cfg, fleet = protected_flash_sale(shared_results, repo_root / "examples" / "flash-sale.yaml")
    admin = TwinAdmin(fleet)
    inputs = ScriptedInputs()
    calm = {p: Outlook(p, 0.3, 0.3) for p in ("v4-short", "v4-long")}
    inputs.outlook = dict(calm)
    return cfg, fleet, admin, inputs, calm


def test_a_calm_fleet_gets_no_action(setup):
    cfg, fleet, admin, inputs, _ = setup
    loop = ControlLoop(cfg, admin, inputs)
    for k in range(4):
        assert loop.tick(fleet.now + 15 * k).outcomes == []
    assert loop.frozen is None and not fleet.actions


@pytest.mark.parametrize(
    ("what", "expected"),
    [
        ({"figures": {"v4-long.kv_now": math.nan}}, "input v4-long.kv_now is nan"),
        ({"figures": {"v4-long.kv_upper": math.inf}}, "input v4-long.kv_upper is inf"),
        ({"figures": {"v4-long.kv_now": -0.1}}, "input v4-long.kv_now is negative"),
        ({"ages": {"live": 0.0, "forecast": 400.0}}, "input forecast is stale (400 s old, limit 120 s)"),
        ({"error": InputError("the store did not answer")}, "the store did not answer"),
    ],
)
def test_bad_inputs_freeze_the_loop_and_say_why(setup, what, expected):
    cfg, fleet, admin, inputs, _ = setup
    for k, v in what.items():
        setattr(inputs, k, v)
    inputs.outlook["v4-long"] = Outlook("v4-long", 0.6, 0.95, 30.0)  # a breach it would otherwise act on
    loop = ControlLoop(cfg, admin, inputs)
    report = loop.tick(fleet.now)
    assert report.frozen is not None and expected in report.frozen
    assert report.frozen_code in ("bad_value", "forecaster_down", "store_down")
    assert report.outcomes == [] and not fleet.actions, "a frozen loop changes nothing"
    assert not loop.applying_now
    # the inputs come back: it unfreezes and acts
    inputs.error, inputs.figures, inputs.ages = None, {}, {"live": 0.0, "forecast": 0.0}
    assert loop.tick(fleet.now + 15).outcomes and loop.frozen is None


def test_an_unreachable_backend_freezes_too(setup):
    cfg, fleet, _admin, inputs, _ = setup

    class Down(TwinAdmin):
        def observe(self):
            raise BackendError("connection refused")

    loop = ControlLoop(cfg, Down(fleet), inputs)
    report = loop.tick(fleet.now)
    assert "connection refused" in report.frozen and report.frozen_code == "backend_down"


def test_advisory_mode_decides_and_records_but_touches_nothing(setup):
    cfg, fleet, admin, inputs, _ = setup
    inputs.outlook["v4-long"] = Outlook("v4-long", 0.6, 0.95, 30.0)
    loop = ControlLoop(cfg, admin, inputs, mode="advisory")
    report = loop.tick(fleet.now)
    assert {o for _, o, _ in report.outcomes} == {"advisory"}
    assert not fleet.actions
    assert all(detail == "advisory mode" for _, _, detail in report.outcomes)
    follower = ControlLoop(cfg, admin, inputs, is_leader=lambda: False)
    assert {d for _, _, d in follower.tick(fleet.now).outcomes} == {"not the leader"}
    assert not fleet.actions


def test_active_mode_applies_through_the_admin_api_within_the_guardrails(setup):
    cfg, fleet, admin, inputs, _ = setup
    inputs.outlook["v4-long"] = Outlook("v4-long", 0.6, 0.95, 30.0)
    loop = ControlLoop(cfg, admin, inputs)
    first = loop.tick(fleet.now)
    applied = [d.action for d, o, _ in first.outcomes if o == "applied"]
    assert any(isinstance(a, ScalePool) for a in applied)
    assert len(fleet.actions) == len(applied)
    assert fleet.router.pool_replicas("v4-long") == next(a.replicas for a in applied if isinstance(a, ScalePool))
    # 15 s later the same warning: the scale-up is in its cooldown, the next admission step is too
    second = loop.tick(fleet.now + 15)
    refused = [(d.action.kind, why) for d, o, why in second.outcomes if o == "refused"]
    assert refused and all("cooldown" in why for _, why in refused)


def test_guardrails_bound_steps_and_spend_a_budget():
    g = Guardrails(GuardrailConfig(max_replicas_step=2, change_budget_per_hour=3, cooldown_seconds=0))
    from infercast.actuators.admin import Admission, Observation, PoolState

    fleet = Observation(0.0, (PoolState("p", "v4", 4, 4, 1.0, spare=3),), Admission())
    big = Decision(ScalePool("p", 7), "x")
    beyond = Decision(ScalePool("p", 8), "x")
    ok = Decision(ScalePool("p", 6), "x")
    judged = g.judge(0.0, [big, beyond, ok], fleet)
    assert [j.allowed for j in judged] == [False, False, True]
    assert "more than 2 replicas at once" in judged[0].reason and "beyond its reach" in judged[1].reason
    for t in (1.0, 2.0, 3.0):
        g.record_applied(t, SetPoolWeight("p", 0.5))
    assert "change budget spent" in g.judge(4.0, [ok], fleet)[0].reason
    assert g.judge(3601.5, [ok], fleet)[0].allowed, "the budget is a rolling hour"
    assert input_freeze(0.0, {"a": 0.5}, {"live": 5.0}, GuardrailConfig()) is None


def test_a_shift_that_makes_the_pool_worse_is_rolled_back(setup):
    cfg, fleet, admin, inputs, _calm = setup
    loop = ControlLoop(cfg, admin, inputs)
    d = Decision(SetPoolWeight("v4-long", 0.5), "test shift", {}, "shift")

    class One:
        def __init__(self, ds):
            self.ds = ds
            self.rolled = []

        def decide(self, now, fleet_state, outlook):
            out, self.ds = self.ds, []
            return out

        def note_applied(self, d, prev):
            pass

        def note_rolled_back(self, d, *_):
            self.rolled.append(d)

    loop.policy = One([d])
    t0 = fleet.now
    assert [o for _, o, _ in loop.tick(t0).outcomes] == ["applied"]
    assert fleet.router.weights["v4-long"] == 0.5
    # a verification window later the pool it concerns is over the trigger and hotter than before: undone
    inputs.outlook["v4-long"] = Outlook("v4-long", 0.9, 0.95)
    report = loop.tick(t0 + cfg.guardrails.verify_window_seconds)
    assert [(v, o) for (_, v, _), (_, o, _) in zip(report.verdicts, report.outcomes, strict=True)] == [
        ("worse", "rolled_back")
    ]
    assert fleet.router.weights["v4-long"] == 1.0
    assert loop.policy.rolled == [d]


def test_backend_failures_are_retried_then_recorded_as_failed(setup):
    cfg, fleet, _, inputs, _ = setup
    calls = []

    class Flaky(TwinAdmin):
        def apply(self, action):
            calls.append(action)
            raise BackendError("HTTP 503")

    inputs.outlook["v4-long"] = Outlook("v4-long", 0.6, 0.95, 30.0)
    loop = ControlLoop(cfg, Flaky(fleet), inputs)
    report = loop.tick(fleet.now)
    assert {o for _, o, _ in report.outcomes} == {"failed"}
    assert all("gave up after 3 attempts: HTTP 503" in d for _, _, d in report.outcomes)
    assert len(calls) == 3 * len(report.outcomes)
    assert not fleet.actions


def test_a_step_the_guardrails_refuse_is_applied_once_they_allow_it_not_skipped(setup):
    """The loop changed admission 30 s ago (say a relaxing step) when a breach is forecast: the first tightening
    step is refused on the cooldown, and so is the next tick's.  Once the cooldown is over the loop applies that
    first step (the gateway waits shortened), then a cooldown later the next one (the memory threshold).  The policy
    used to count each proposed step as taken: both were refused, and the operator saw no tightening at all."""
    cfg, fleet, admin, inputs, _ = setup
    loop = ControlLoop(cfg, admin, inputs)
    t0 = fleet.now
    loop.guard.record_applied(t0 - 30.0, SetAdmission(low_queue_seconds=15.0))
    inputs.outlook["v4-long"] = Outlook("v4-long", 0.6, 0.95, 30.0)  # KV heading over the trigger in 30 s
    admission = []
    for k in range(7):  # every 15 s for 90 s
        report = loop.tick(t0 + 15.0 * k)
        admission += [(k, o, d.action) for d, o, _ in report.outcomes if isinstance(d.action, SetAdmission)]
    applied = [(k, a) for k, o, a in admission if o == "applied"]
    assert [o for _, o, _ in admission[:2]] == ["refused", "refused"]
    assert admission[0][2] == admission[1][2], "the refused step is proposed again"
    queues = SetAdmission(normal_queue_seconds=cfg.policy.tightened_normal_queue_seconds,
                          low_queue_seconds=cfg.policy.tightened_low_queue_seconds)  # fmt: skip
    memory = SetAdmission(memory_limit=cfg.policy.tightened_memory_limit)
    assert applied == [(2, queues), (6, memory)], "each step once the cooldown allows it, in order"
    assert fleet.router.admission()["normal_queue_seconds"] == cfg.policy.tightened_normal_queue_seconds
    assert fleet.router.admission()["memory_limit"] == cfg.policy.tightened_memory_limit
