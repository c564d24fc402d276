"""Seed 004's protections as levers of the twin (`protections:` in the fleet file): what an operator sees with each
one switched on, and that each is off unless set."""

from __future__ import annotations

import numpy as np
import pytest

from infercast.config import (
    ApiKeyTiers,
    ConfigError,
    DrfTenant,
    KvPartitions,
    LengthGates,
    load_config,
    parse_config,
)
from infercast.simulator.twin import build_fleet
from infercast.simulator.twin.drf import drf_share
from infercast.simulator.twin.engine import TickSink
from infercast.simulator.twin.layout import protected_layout
from infercast.simulator.twin.requests import Requests


@pytest.fixture(scope="module")
def cfg(repo_root):
    return load_config(repo_root / "examples" / "flash-sale.yaml")


def _with(cfg, **levers):
    return cfg.model_copy(update={"protections": cfg.protections.model_copy(update=levers)})


def _reqs(prompts, prio=1, t=0.0, tenant=0, max_tokens=512) -> Requests:
    prompts = np.asarray(prompts, dtype=np.int64)
    n = len(prompts)
    return Requests.new(
        np.full(n, t),
        prompts,
        np.full(n, 100, dtype=np.int64),
        np.full(n, max_tokens, dtype=np.int64),
        np.full(n, prio, dtype=np.int8),
        tenant,
    )


def _protected(cfg):
    fleet = build_fleet(protected_layout(cfg), seed=0)
    fleet.protect()
    return fleet, fleet.router


def _outcomes(r, outcome: str) -> int:
    return sum(v for (_, _, _, o), v in r.recorder.requests.items() if o == outcome)


def _on_nodes(r, tenant: int | None = None) -> int:
    """Requests the gateway handed to the nodes' queues (of one tenant, or all)."""
    total = 0
    for n in r.nodes:
        waiting = n.queue.drain()
        total += len(waiting) if tenant is None else int((waiting.tenant == tenant).sum())
        n.queue.push(waiting)
    return total


def test_every_lever_is_off_unless_the_fleet_file_sets_it(cfg):
    pr = cfg.protections
    assert (pr.length_gates, pr.api_key_tiers, pr.kv_partitions, pr.max_seq_len, pr.drf_tenants) == (
        None,
        None,
        None,
        None,
        {},
    )
    fleet, r = _protected(cfg)
    assert r.policy.length_gates is None and r.policy.drf is None
    assert r.lane_names == ["shared", "flash-sale"], "no lane beyond the file's own quota lanes"
    assert all(n.control.kv_partitions is None and n.control.max_seq_len is None for n in fleet.nodes)


def test_a_1500_token_prompt_gets_a_429_and_its_retry_is_served_a_3000_token_one_is_dropped_unless_vip(cfg):
    """Seed 004's length gates: >1024 tokens a 429 that keeps the request's metadata (its retry is let in), >2048
    dropped (a 400, no retry), except for the VIP long-text lane's tenants."""
    _, r = _protected(_with(cfg, length_gates=LengthGates(long_text_streams=("regular",))))
    r.set_rate_limit(None)
    regular, flash = r.tenant_names.index("regular"), r.tenant_names.index("flash-sale")
    r.set_lane_rate("flash-sale", None)
    r.route(0.0, 0.25, _reqs([1500], tenant=flash))
    assert _on_nodes(r) == 0 and _outcomes(r, "retried") == 1, "the 1,500-token prompt got a 429 its client retries"
    assert r.rejected_total == 0, "and is not lost"
    t = 0.25
    while _on_nodes(r) == 0 and t < 10.0:  # the client's backoff (1 s +- 50%), then the retry
        r.route(t, t + 0.25, Requests.empty())
        t += 0.25
    assert _on_nodes(r, flash) == 1, "its retry passed the gate: the gateway kept its metadata"
    r.route(t, t + 0.25, _reqs([3000], tenant=flash, t=t))
    assert r.rejected_total == 1 and _on_nodes(r) == 1, "a 3,000-token prompt from a non-VIP tenant is dropped"
    assert r.retrying() == 0, "with a 400: its client does not retry"
    r.route(t + 0.25, t + 0.5, _reqs([3000, 1500], tenant=regular, t=t + 0.25))
    assert _on_nodes(r, regular) == 2, "the VIP tenant's long prompts go through its long-text lane at once"


def test_api_key_tiers_give_each_tenant_its_tiers_rate_with_a_burst_of_five_times_it(cfg):
    tiers = ApiKeyTiers(streams={"flash-sale": "standard", "regular": "gold"})
    _, r = _protected(_with(cfg, api_key_tiers=tiers))
    assert r.lane_names == ["shared", "flash-sale", "regular"], "the file's flash-sale lane now has its tier's rate"
    flash_lane = r.lanes[r.lane_index("flash-sale")].bucket
    assert (flash_lane.rate, flash_lane.burst) == (100.0, 500.0), "standard tier: 100 QPS, burst 5 x 100"
    gold = r.lanes[r.lane_index("regular")].bucket
    assert (gold.rate, gold.burst) == (500.0, 2500.0)
    flash = r.tenant_names.index("flash-sale")
    dt, through = 0.25, []
    for k in range(80):  # 20 s at 1,000 urgent req/s from a standard-tier key
        out = r._rate_limit(_reqs([500] * 250, prio=0, t=k * dt, tenant=flash), k * dt, dt)
        through.append(len(out))
    assert sum(through[:1]) == 250 and sum(through[:4]) <= 500 + 100, "the burst covers 5 s of its rate at once"
    rate = sum(through[40:]) / (40 * dt)
    assert rate == pytest.approx(100.0, rel=0.05), f"then it gets its tier's 100 QPS ({rate:.0f} req/s)"


def test_kv_partitions_keep_the_real_time_share_for_urgent_requests(cfg):
    """Seed 004's 70/25/5 partitions: normal work alone fills no more than its 25% share plus the idle 5% degraded
    share of a node's KV, so urgent requests that come later still find their 70% free."""
    fleet = build_fleet(_with(cfg, kv_partitions=KvPartitions()), seed=0)
    fleet.protect()
    node = next(n for n in fleet.nodes if n.pool == "v4-main")
    # the memory breaker and fragmentation release aside: the partition alone decides
    node.control.stop_admit_memory = node.control.release_fragmentation = None
    node.enqueue(_reqs([2000] * 120, prio=1))
    node.step(0.0, 0.25, TickSink(), 30.0)
    normal = node.kv.slot_tokens()[node.active].sum() / node.kv_capacity_tokens
    # (judged at admission: the tokens decoded since then add a block here and there)
    assert 0.25 < normal <= 0.305, f"normal work holds {normal:.1%} of the KV: its 25% and the idle degraded 5%"
    assert node.running < node.max_batch and node.waiting > 0, "slots were free: the partition held the rest back"
    node.enqueue(_reqs([2000] * 40, prio=0))
    node.step(0.25, 0.5, TickSink(), 30.0)
    urgent = int((node.prio[node.active] == 0).sum())
    assert urgent == 40, f"all 40 urgent prompts were admitted into the real-time share ({urgent})"
    low = build_fleet(_with(cfg, kv_partitions=KvPartitions()), seed=0)
    low.protect()
    n2 = next(n for n in low.nodes if n.pool == "v4-main")
    n2.control.stop_admit_memory = n2.control.release_fragmentation = None
    n2.enqueue(_reqs([2000] * 60, prio=2))
    n2.step(0.0, 0.25, TickSink(), 30.0)
    held = n2.kv.slot_tokens()[n2.active].sum() / n2.kv_capacity_tokens
    assert 0 < held <= 0.05, f"low work stays within the degraded 5% ({held:.1%})"


def test_max_seq_len_refuses_a_prompt_whose_prompt_plus_max_tokens_exceeds_it_with_a_400(cfg):
    fleet = build_fleet(_with(cfg, max_seq_len=4096), seed=0)
    fleet.protect()
    node = next(n for n in fleet.nodes if n.pool == "v4-main")
    node.enqueue(_reqs([3700], max_tokens=512))  # 4,212 > 4,096
    node.enqueue(_reqs([3500], max_tokens=512))  # 4,012 fits
    sink = TickSink()
    node.step(0.0, 0.25, sink, 30.0)
    refused = [(len(reqs), reason) for reqs, reason in sink.failed]
    assert refused == [(1, "too_long")], "the engine answers 400 to the 3,700 + 512 request (as vLLM does)"
    assert node.running == 1, "and serves the 3,500 + 512 one"
    r = fleet.router
    r.collect(0.25, {node.name: sink})
    assert r.rejected_total == 1 and r.retrying() == 0, "a 400: rejected, never retried"


def test_drf_splits_a_saturated_pools_room_by_weight_with_floors_and_caps(cfg):
    """Seed 004's example: vip weight 3, min quota 20%; normal weight 1, max quota 80%."""
    want = np.array([1000, 1000])
    give = drf_share(want, 100, np.ones(2), np.array([3.0, 1.0]), np.array([0.2, 0.0]), np.array([1.0, 0.8]))
    assert give.tolist() == [75, 25], "both want more than the room: 3 : 1 by weight"
    give = drf_share(np.array([5, 1000]), 100, np.ones(2), np.array([3.0, 1.0]), np.zeros(2), np.array([1.0, 0.8]))
    assert give.tolist() == [5, 80], "the normal tenant never passes its 80% cap, even with room left"
    give = drf_share(want, 100, np.array([1.0, 2.0]), np.ones(2), np.zeros(2), np.ones(2))
    assert give.tolist() == [50, 25], "a tenant whose prompts take twice the KV gets half the requests"
    give = drf_share(want, 100, np.ones(2), np.array([1.0, 9.0]), np.array([0.2, 0.0]), np.ones(2))
    assert give[0] >= 20, "a floor holds against a heavier weight"
    # at the gateway: a saturated pool's room goes 3 : 1 to the VIP tenant
    tenants = {"regular": DrfTenant(weight=3.0, min_quota=0.2), "flash-sale": DrfTenant(weight=1.0, max_quota=0.8)}
    _, r = _protected(_with(cfg, drf_tenants=tenants))
    r.set_rate_limit(None)
    r.set_lane_rate("flash-sale", None)
    regular, flash = r.tenant_names.index("regular"), r.tenant_names.index("flash-sale")
    r.route(0.0, 0.25, Requests.concat([_reqs([2000] * 3000, tenant=flash), _reqs([2000] * 3000, tenant=regular)]))
    vip, other = _on_nodes(r, regular), _on_nodes(r, flash)
    assert r.flow_waiting("v4-short") > 0, "more wanted the pool than it had room for"
    assert vip == pytest.approx(3 * other, rel=0.05), f"the room went {vip} : {other}"


def test_bad_lever_settings_get_clear_errors(cfg):
    bad = {
        "api_key_tiers": ({"streams": {"flash-sale": "diamond"}}, "unknown tier"),
        "kv_partitions": ({"urgent": 0.7, "normal": 0.3, "low": 0.05}, "add up to 1"),
        "length_gates": ({"retry_above_tokens": 4096, "drop_above_tokens": 2048}, "drop_above_tokens"),
    }
    for lever, (value, message) in bad.items():
        data = cfg.model_dump(mode="json")
        data["protections"][lever] = value
        with pytest.raises(ConfigError, match=message):
            parse_config(data)


def test_a_lever_naming_a_stream_the_scenario_lacks_is_a_config_error_saying_where(cfg):
    """A typo in a tenant's name would leave the lever silently off for it: the fleet file is refused instead, each
    place named with the streams the scenario has."""
    data = cfg.model_dump(mode="json")
    data["protections"]["length_gates"] = {"long_text_streams": ["regular", "vip-typo"]}
    data["protections"]["api_key_tiers"] = {"streams": {"flash-sale": "platinum", "golden": "gold"}}
    data["protections"]["drf_tenants"] = {"nobody": {"weight": 2.0}}
    with pytest.raises(ValueError) as e:
        parse_config(data)
    msg = str(e.value)
    assert "protections.length_gates.long_text_streams: unknown stream 'vip-typo'" in msg
    assert "protections.api_key_tiers.streams: unknown stream 'golden'" in msg
    assert "protections.drf_tenants: unknown stream 'nobody'" in msg
    assert "'regular'" in msg and "unknown stream 'regular'" not in msg  # the streams it has are listed, not refused
