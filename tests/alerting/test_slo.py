"""SLOs as configuration: the fleet file's objectives reach the burn-rate rules per pool, for every fleet file."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.alertrules.rules import rule_files
from infercast.alertrules.settings import AlertSettings
from infercast.alertrules.slo import le_matcher, pool_groups, slo_recording_rules
from infercast.config import SLO_BURN_FAST, TTFT_BUCKET_BOUNDS, ConfigError, SloConfig, parse_config

from .conftest import REPO, run

OBJECTIVE = st.floats(min_value=0.94, max_value=0.9999).map(lambda x: round(x, 4))
POOL = st.from_regex(r"[a-z][a-z0-9.\-]{0,12}", fullmatch=True)


def _matches(matcher: str, pool: str) -> bool:
    """Whether a PromQL pool matcher (as pool_groups writes it) selects a series of `pool`."""
    ok = True
    for _name, op, value in re.findall(r'(\w+)(!~|=~|!=|=)"((?:[^"\\]|\\.)*)"', matcher):
        value = value.replace("\\\\", "\\")
        if op == "=":
            ok &= pool == value
        elif op == "!=":
            ok &= pool != value
        elif op == "=~":
            ok &= re.fullmatch(value, pool) is not None
        else:
            ok &= re.fullmatch(value, pool) is None
    return ok


@settings(max_examples=200, deadline=None)
@given(
    fleet=OBJECTIVE,
    own=st.dictionaries(POOL, st.one_of(st.none(), OBJECTIVE), max_size=5),
    others=st.lists(POOL, max_size=5),
)
def test_every_pool_burns_against_its_own_objective_exactly_once(fleet, own, others):
    """For any fleet file: each pool (named in `slo.pools` or not) is selected by exactly one burn-rate group, whose
    objective is its own where set, else the fleet's; a pool is never counted twice nor left out."""
    slo = SloConfig(availability=fleet, pools={p: {"availability": a} for p, a in own.items()})
    groups = pool_groups(slo, lambda o: o[0])
    for pool in {*own, *others}:
        hits = [v for matcher, v in groups if _matches(matcher, pool)]
        want = own.get(pool) if own.get(pool) is not None else fleet
        assert hits == [want], (pool, groups)


@pytest.mark.parametrize("bound", TTFT_BUCKET_BOUNDS)
def test_the_le_matcher_matches_the_bucket_however_it_is_written(bound):
    """vLLM (prometheus_client) writes `2.5`, `1.0`; the twin `repr(float)`; Prometheus 3 may normalise: each form of
    the target bound matches, and no other bound does."""
    regex = re.fullmatch(r'le=~"(.*)"', le_matcher(bound)).group(1).replace("\\\\", "\\")
    short = f"{bound:g}"
    for text in (repr(float(bound)), short, short + ("0" if "." in short else ".0")):
        assert re.fullmatch(regex, text), (bound, text)
    for other in TTFT_BUCKET_BOUNDS:
        if other != bound:
            assert not re.fullmatch(regex, repr(float(other))), (bound, other)


def test_objectives_that_could_never_page_are_refused_with_the_reason():
    doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    doc["slo"] = {"availability": 0.9, "pools": {"v4-main": {"ttft_seconds": 3}}}
    with pytest.raises(ConfigError) as e:
        parse_config(doc)
    assert f"the fast page fires at {SLO_BURN_FAST:g} x the error budget" in str(e.value)
    assert "ttft_seconds 3.0 is not a bucket bound" in str(e.value)
    doc["slo"] = {"pools": {"nowhere": {"availability": 0.999}}}
    with pytest.raises(ConfigError, match=r"slo\.pools: unknown pool 'nowhere'"):
        parse_config(doc)


def test_a_pools_own_objective_pages_it_while_the_fleets_does_not(tmp_path, promtool):
    """v4-main promises 0.999 (budget 0.1%), the fleet 0.99: the same 2% of failed requests is a 20x burn for
    v4-main (the fast page) and a 2x burn elsewhere (no page) - real promtool on rules generated from the fleet file."""
    doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    doc["slo"] = {"availability": 0.99, "pools": {"v4-main": {"availability": 0.999, "ttft_seconds": 1.0}}}
    cfg = parse_config(doc)
    settings_ = AlertSettings.from_fleet(cfg)
    for name, d in rule_files(settings_).items():
        (tmp_path / name).write_text(yaml.safe_dump(d, sort_keys=False))
    rules = "\n".join(r["expr"] for g in slo_recording_rules(settings_) for r in g["rules"])
    assert 'pool="v4-main",le=~"1(\\\\.0*)?"' in rules  # its own TTFT target
    series = []
    for pool, version in (("v4-main", "v4"), ("v3.5-fallback", "v3.5")):
        lbl = f'pool="{pool}",version="{version}",priority="normal"'
        series += [
            {"series": f'infercast_router_requests_total{{{lbl},outcome="ok"}}', "values": "0+98x20"},
            {"series": f'infercast_router_requests_total{{{lbl},outcome="error"}}', "values": "0+2x20"},
        ]
    test = {
        "rule_files": ["recording.yml", "alerts.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "10m",
                        "alertname": "InfercastAvailabilityBurnRateFast",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "team": "serving",
                                    "slo": "availability",
                                    "pool": "v4-main",
                                    "version": "v4",
                                },
                                "exp_annotations": {
                                    "summary": "A pool spends its availability error budget 14.4x as fast as it "
                                    "accrues, or faster.",
                                    "description": "v4 in pool v4-main burns its availability error budget 20.0 "
                                    "times as fast as it accrues over the last 1h (and over 5m; page at 14.4): "
                                    "requests ending in error, timeout, rejected or shed.",
                                    "runbook_url": f"{settings_.runbook_base_url}/InfercastAvailabilityBurnRateFast.md",
                                },
                            }
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "override.test.yml").write_text(yaml.safe_dump(test))
    res = run([promtool, "test", "rules", str(tmp_path / "override.test.yml")])
    assert res.returncode == 0, res.stdout + res.stderr


def test_engines_mode_checks_the_vllm_counters_only_where_engines_are_vllm():
    """With `metrics.source: engines`, InfercastPageInputAbsent pages when vLLM's finished-request counter or TTFT
    histogram is absent - but only for a fleet with vLLM engines: an SGLang fleet has no such counter, and a page
    for its absence would wake someone every night for nothing."""
    from infercast.alertrules.rules import alerting_rules

    def absent_expr(kind: str) -> str:
        doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
        doc["metrics"] = {"source": "engines"}
        for pool in doc["pools"].values():
            pool["engines"] = {"kind": kind}
        s = AlertSettings.from_fleet(parse_config(doc))
        return next(
            r["expr"] for g in alerting_rules(s) for r in g["rules"] if r["alert"] == "InfercastPageInputAbsent"
        )

    assert "vllm:request_success_total" in absent_expr("vllm")
    assert "vllm:time_to_first_token_seconds_count" in absent_expr("vllm")
    assert "vllm:" not in absent_expr("sglang") and 'absent(up{pool!=""})' in absent_expr("sglang")
