"""A calm fleet pages nobody: 30 simulated minutes of the flash-sale fleet's regular traffic (0.8x its 200 req/s, no
sale, no calendar event) through the real exporter, predictor (the shipped LSTM, reading the accelerated fleet in
its own time: `predictor.time_scale`), Prometheus (the generated rules, every `for:` scaled to the twin's speed)
and Alertmanager (the generated routes): no alert fires, predictive or plain, and nothing notifies any team.

Until the predictor read an accelerated fleet in its own time, it refused the LSTM here (trained at a 15 s step,
offered 0.75 s) and ran the Kalman fallback, whose online band grew to the ceiling on the spiky fullest-instance
series and notified the serving chat in some runs.

The plain alerts' thresholds were reviewed against this run (docs/alerting.md): on a calm twin the fullest v4
instance's fragmentation spends minutes above 0.20 while the pool's mean stays under it, which paged the serving team
2.5 minutes into `deploy/local-stack.sh`; the fragmentation alerts now read the pool's mean, as the seed's "average
fragmentation" does.
"""

from __future__ import annotations

import os
import time

import pytest
import yaml

from infercast.servers import ServerUnavailable

from .conftest import REPO
from .stack import require_services, running_stack

# 20x: 90 s of wall time; the stack keeps up on 2 cores (the predictor forecasts every 0.75 s, Prometheus scrapes
# and evaluates every 0.5 s, 10 simulated seconds); INFERCAST_CALM_SPEED=10 runs it at half the speed
SPEED = float(os.environ.get("INFERCAST_CALM_SPEED", "20"))
CALM_SIM_S = 1800.0


def calm_fleet() -> dict:
    """examples/flash-sale.yaml without the flash-sale customer: its regular stream alone at 0.8x its rate, and no
    calendar.  At the full 200 req/s the fullest of the 12 v4 instances touches 0.75 in some runs (the twin's KV
    series are spiky and the stack's twin runs on the wall clock, so runs differ), and then a predictive page is
    right, not noise; at 160 req/s the run is calm by the test's own check (no instance over 0.75)."""
    doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    doc["scenario"]["streams"] = []
    doc["scenario"]["phases"] = [{**ph, "rps": ph["rps"] * 0.8} for ph in doc["scenario"]["phases"]]
    doc["scenario"]["seed"] = 730  # an arrival seed no bench and no tuning run uses
    doc["events"] = []
    doc["protections"]["quota_lanes"] = {}
    return doc


@pytest.mark.servers
@pytest.mark.slow
def test_thirty_calm_minutes_page_nobody(tmp_path):
    require_services()
    try:
        with running_stack(tmp_path, calm_fleet(), SPEED, warmup=0.0) as stack:
            deadline = stack.started + CALM_SIM_S / SPEED
            while time.time() < deadline:
                stack.check_alive()
                time.sleep(1)
            end = time.time()
            assert stack.sim(end) >= CALM_SIM_S
            # the twin really ran calm and was forecast: the fullest instance below the trigger, forecasts published
            kv = stack.query_range("max(infercast_kv_cache_usage_ratio)", stack.started, end, 2.0)
            assert kv and max(v for _, _, v in kv) < 0.75, "not a calm run: some instance crossed 0.75"
            forecasts = stack.query_range(
                'count(infercast_forecast_kv_cache_usage_ratio{aggregate="max"})', stack.started, end, 2.0
            )
            assert forecasts, f"the predictor published no forecast: {stack.logs()}"
            # the Watchdog always fires (a dead man's switch): everything else must stay quiet
            firing = stack.query_range(
                'ALERTS{alertstate="firing",alertname!="InfercastWatchdog"}', stack.started, end, 1.0
            )
            fired = sorted({(m["alertname"], m.get("kind", "plain")) for m, _, _ in firing})
            assert fired == [], f"alerts fired on a calm fleet: {fired}"
            models = stack.query_range(
                'count by (forecaster) (infercast_forecast_kv_cache_usage_ratio{aggregate="max"})',
                stack.started,
                end,
                5.0,
            )
            assert {m["forecaster"] for m, _, _ in models} == {"lstm_aci"}, (
                "the calm fleet was not forecast by the LSTM"
            )
            time.sleep(2)  # a notification already on its way
            received = [(n.path, n.alertnames) for n in stack.hook.received() if n.path != "/watchdog"]
            assert any(n.path == "/watchdog" for n in stack.hook.received()), "the dead man's switch never arrived"
            assert received == [], f"a calm fleet notified: {received}"
    except ServerUnavailable as e:
        pytest.skip(str(e))
