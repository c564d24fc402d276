"""Issue 38 item 5: an advisory actuator a human reads.

What the user saw before: the advisory daemon repeated the same three proposals every 15 s; said a pool "crosses
0.80 in 3 s" when its usage was already 0.97; and proposed `set_pool_weight pool=v3.5-fallback weight=1.2935` (a
weight above 1 for a fallback pool on another model version) with no word of why that was safe.  Now a proposal is
logged once when it appears and again when it changes; a pool already over the trigger is said to be over it; each
proposal names the forecast it read, the policy's bound and the guardrails'; a weight shift shows the traffic
shares after it, summing to 1 by version.  The real control loop in advisory mode on the real file backend
(tests/actuators/steady_rig.py)."""

from __future__ import annotations

import logging
import re

from infercast.actuators.controller import ControlLoop
from tests.actuators.steady_rig import ScriptedInputs, breach_outlook, calm_outlook, fleet_config, rig

LOGGER = "infercast.actuators.controller"


def _advisory(r, caplog, now: float) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        r.tick(now)
    return [x.getMessage() for x in caplog.records if x.name == LOGGER and x.getMessage().startswith("advisory ")]


def _advisory_rig(tmp_path):
    cfg = fleet_config(pools={"v3.5-fallback": {**fleet_config().pools["v3.5-fallback"].model_dump(
        exclude_defaults=True), "weight": 0.5}})  # fmt: skip
    r = rig(tmp_path, cfg, admission={"memory_limit": 0.8, "max_context_tokens": 24000,
                                      "normal_queue_seconds": 5.0, "low_queue_seconds": 30.0})  # fmt: skip
    r.loop = ControlLoop(cfg, r.admin, r.inputs, mode="advisory")
    return r


def test_a_proposal_is_logged_once_when_it_appears_and_again_when_it_changes(tmp_path, caplog):
    r = _advisory_rig(tmp_path)
    r.inputs.outlook["v4-main"] = breach_outlook("v4-main", 30.0)
    first = _advisory(r, caplog, 0.0)
    assert len(first) == 3, first  # tighten, and the shift's two weights
    for t in (15.0, 30.0, 45.0):
        assert _advisory(r, caplog, t) == [], "the same proposals, not logged again every tick"
    r.inputs.outlook["v4-main"] = breach_outlook("v4-main", 30.0, peak=0.99, kv=0.7)
    r.inputs.outlook["v3.5-fallback"] = calm_outlook("v3.5-fallback", 0.5)  # less headroom: a smaller shift
    changed = _advisory(r, caplog, 60.0)
    assert {m.split(" (")[0] for m in changed} == {m.split(" (")[0] for m in changed if "set_pool_weight" in m}
    assert len(changed) == 2, changed  # the tightening is the same step: only the weights changed
    r.inputs.outlook = ScriptedInputs().outlook  # calm: nothing proposed
    assert _advisory(r, caplog, 75.0) == []
    r.inputs.outlook["v4-main"] = breach_outlook("v4-main", 30.0)
    assert len(_advisory(r, caplog, 90.0)) == 3, "back again: logged again"


def test_a_pool_already_over_the_trigger_is_said_to_be_over_it_not_to_cross_it_in_seconds(tmp_path, caplog):
    r = _advisory_rig(tmp_path)
    r.inputs.outlook["v4-main"] = breach_outlook("v4-main", 3.0, peak=0.98, kv=0.97)
    said = _advisory(r, caplog, 0.0)
    assert said and all("crosses" not in m for m in said), said
    assert all("KV usage 0.97 is over 0.75 now (forecast upper band peaks at 0.98)" in m for m in said)


def test_each_proposal_says_why_and_a_weight_shift_shows_shares_summing_to_one_by_version(tmp_path, caplog):
    r = _advisory_rig(tmp_path)
    r.inputs.outlook["v4-main"] = breach_outlook("v4-main", 30.0)
    said = _advisory(r, caplog, 0.0)
    assert all("guardrails: one " in m and "changes an hour used" in m for m in said)
    shifts = [m for m in said if m.startswith("advisory set_pool_weight")]
    assert len(shifts) == 2
    for m in shifts:
        assert "KV forecast upper band 0.95 crosses 0.75 in 30 s" in m
        assert "policy.max_weight_shift" in m and "forecast headroom" in m
        shares = re.search(r"traffic shares after: (.*?); ", m).group(1)
        by_version = dict(re.findall(r"(v[\d.]+) ([\d.]+) \(", shares))
        assert set(by_version) == {"v4", "v3.5"}
        assert abs(sum(float(v) for v in by_version.values()) - 1.0) < 0.011, shares
