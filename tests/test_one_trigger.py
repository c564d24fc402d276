"""One owner per setting (issue 39 item 2): the KV forecast trigger a user writes in the fleet file
(`thresholds.kv_forecast_trigger`) is the one value the actuator's policy, its reserve plan and its rollback check,
the predictor, the alert rules and the published breach label all use; `policy.traffic_surge_factor` is the one
factor both the traffic forecast's peak and the arrivals' onset are judged by.

What a user sees: a fleet file with `kv_forecast_trigger: 0.7` gets alerts at 0.7, forecasts of the time to 0.7
under `threshold="0.7"`, and an actuator that reads exactly those (not a 0.75 left in a default, nor a label it
spells by hand).  A fleet file with `traffic_surge_factor: 2.0` is not told a surge began at 1.7x the arrivals."""

from __future__ import annotations

import math

from infercast.actuators.admin import Observation, PoolState
from infercast.actuators.inputs import StoreInputs
from infercast.actuators.policy import PredictivePolicy
from infercast.actuators.reserve_policy import reserve_settings
from infercast.actuators.signals import Arrivals, onset
from infercast.alertrules.rules import alerting_rules
from infercast.alertrules.settings import AlertSettings
from infercast.catalog import FORECAST_BREACH_ETA_SECONDS, ROUTER_REQUESTS_TOTAL, breach_threshold_label
from infercast.config import FleetConfig, load_config
from infercast.predictors.publish import breach_eta_sample
from infercast.predictors.service import PredictorLoop
from infercast.store import grid
from infercast.store.memory import MemoryStore
from tests.conftest import REPO

NOW = 10_000.0
STEP = 15.0


def _fleet(tmp_path, **replace: str) -> FleetConfig:
    text = (REPO / "examples" / "flash-sale.yaml").read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return load_config(path)


def _main_pool() -> Observation:
    return Observation(NOW, (PoolState("v4-main", "v4", 4, 4, 1.0),))


def test_a_trigger_of_0_7_reaches_the_policy_the_predictor_the_rules_and_the_label(tmp_path):
    cfg = _fleet(tmp_path, **{"kv_forecast_trigger: 0.75": "kv_forecast_trigger: 0.7"})
    assert cfg.thresholds.kv_forecast_trigger == 0.7

    policy = PredictivePolicy(cfg)
    assert policy.trigger == 0.7, "the policy acts on the file's trigger"
    assert reserve_settings(cfg).kv_trigger == 0.7, "the reserve plan asks for nodes from the file's trigger"
    predictor = PredictorLoop.from_config(cfg, load_lstm=False)
    assert predictor.trigger == 0.7, "the predictor forecasts the time to the file's trigger"

    rules = {r["alert"]: r for g in alerting_rules(AlertSettings.from_fleet(cfg)) for r in g["rules"]}
    breach = rules["InfercastKVCacheForecastBreach"]
    assert breach["expr"].endswith("> 0.7"), breach["expr"]
    assert "0.75" not in breach["expr"] and "70%" in breach["annotations"]["summary"]

    # the predictor publishes the breach ETA under the label of its trigger; the actuator reads that very series
    published = breach_eta_sample("v4-main", "v4", predictor.trigger, 40.0, "max")
    assert dict(published.labels)["threshold"] == "0.7" == breach_threshold_label(policy.trigger)
    store = MemoryStore()
    store.write(published.name, dict(published.labels), NOW, published.value)
    outlook = StoreInputs(store, cfg, STEP).read(NOW, _main_pool()).outlook["v4-main"]
    assert outlook.kv_breach_eta_seconds == 40.0, "the actuator found the predictor's series for trigger 0.7"


def test_a_forecast_for_another_trigger_is_not_read_as_this_fleets():
    """A series published for 0.75 (another predictor's, or one from before the file changed) is not the breach of
    a fleet whose trigger is 0.7: the actuator sees no breach coming rather than the wrong one."""
    cfg = FleetConfig.model_validate(
        {
            "versions": {"v4": {"model": {"name": "chat-v4"}}},
            "pools": {"v4-main": {"version": "v4", "nodes": 4}},
            "thresholds": {"kv_forecast_trigger": 0.7},
        }
    )
    store = MemoryStore()
    other = breach_eta_sample("v4-main", "v4", 0.75, 40.0, "max")
    store.write(FORECAST_BREACH_ETA_SECONDS, dict(other.labels), NOW, other.value)
    outlook = StoreInputs(store, cfg, STEP).read(NOW, _main_pool()).outlook["v4-main"]
    assert outlook.kv_breach_eta_seconds == math.inf


def _arrivals_store(last_interval_factor: float) -> MemoryStore:
    """The router's counter for v4-main: 100 requests per 15 s for ten minutes, then one interval at `factor` x."""
    store = MemoryStore()
    g = grid(NOW - 600.0, NOW, STEP)
    per = [100.0] * (len(g) - 1) + [100.0 * last_interval_factor]
    total, counts = 0.0, []
    for n in per:
        total += n
        counts.append(total)
    labels = {"pool": "v4-main", "version": "v4", "priority": "normal", "outcome": "ok"}
    store.write_many(ROUTER_REQUESTS_TOTAL, labels, g, counts)
    return store


def test_the_arrivals_onset_uses_the_fleet_files_surge_factor(tmp_path):
    a = Arrivals(last_rps=170 / STEP, baseline_rps=100 / STEP, urgent_last_rps=0.0, interval_seconds=STEP, history=39)
    assert onset(a, 0.0, 0.0).startswith("arrivals"), "1.7x is a surge at the default factor (1.5)"
    assert onset(a, 0.0, 0.0, surge_factor=2.0) == ""

    default = load_config(REPO / "examples" / "flash-sale.yaml")
    strict = _fleet(tmp_path, **{"thresholds:\n": "policy:\n  traffic_surge_factor: 2.0\nthresholds:\n"})
    assert strict.policy.traffic_surge_factor == 2.0
    store = _arrivals_store(1.7)
    assert StoreInputs(store, default, STEP)._first_signals("v4-main", NOW)["onset"].startswith("arrivals")
    assert StoreInputs(store, strict, STEP)._first_signals("v4-main", NOW)["onset"] == "", (
        "a fleet that calls a surge 2x the traffic is not told one started at 1.7x"
    )


def test_training_on_prometheus_scores_breaches_at_the_fleet_files_trigger(tmp_path):
    """`infercast train --from-prometheus` judges its held-out breach scores at the `--config` file's trigger unless
    `--threshold` says otherwise."""
    import argparse

    from infercast.predictors import train_prometheus

    _fleet(tmp_path, **{"kv_forecast_trigger: 0.75": "kv_forecast_trigger: 0.7"})
    p = argparse.ArgumentParser()
    p.add_argument("--config")
    train_prometheus.add_arguments(p)
    for argv, want in ((["--config", str(tmp_path / "fleet.yaml")], 0.7), ([], 0.75), (["--threshold", "0.6"], 0.6)):
        args = p.parse_args(argv)
        assert train_prometheus._threshold(args, train_prometheus._fleet(args)) == want, argv
