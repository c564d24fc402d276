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

The stack watches the fleet once it is running and the predictor has the history it has in production. Started
from nothing, two transients paged the actuator (`InfercastKVCacheForecastBreach`) in about half the runs, with the
fullest instance at 0.3-0.5: a fleet booting from empty climbs to its level in about 90 s, and a fresh Prometheus
gives the LSTM a window shorter than its 15 minutes, for which its 5-minute upper band is wide (0.90 with the point
at 0.47: a short context is uncertain, and the band has not yet learned from one outcome). So the twin runs 5
simulated minutes before the stack starts (`WARMUP_S`), the stack runs the LSTM's window (`SETTLE_S`) before the
watch, and the watch is 30 minutes. docs/alerting.md says what a user sees in a new series' first 15 minutes.
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
WARMUP_S = 300.0  # simulated seconds the twin runs before the stack starts (the docstring says why)
SETTLE_S = 900.0  # simulated seconds the stack runs before the watch: the LSTM's 15-minute window


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


def what_fired(stack, firing: list) -> str:
    """What a reader of a failure needs: when (simulated seconds) each alert fired, and the fullest instance's
    usage with the forecast's point and upper band (300 s ahead) at the first firing."""
    first = min(t for _, t, _ in firing)
    when = sorted({(m["alertname"], m.get("pool", ""), round(stack.sim(t))) for m, t, _ in firing})
    at = {}
    for name, expr in {
        "usage": "max(infercast_kv_cache_usage_ratio)",
        "point": 'max(infercast_forecast_kv_cache_usage_ratio{aggregate="max",band="point"})',
        "upper": 'max(infercast_forecast_kv_cache_usage_ratio{aggregate="max",band="upper"})',
    }.items():
        rows = stack.query_range(expr, first - 3.0, first, 0.5)
        at[name] = [round(v, 3) for _, _, v in rows]
    return f"firing at (alert, pool, sim s) {when[:6]}; over the 3 wall s before the first: {at}"


@pytest.mark.servers
@pytest.mark.slow
def test_thirty_calm_minutes_page_nobody(tmp_path):
    require_services()
    try:
        with running_stack(tmp_path, calm_fleet(), SPEED, warmup=WARMUP_S) as stack:
            watch = stack.started + SETTLE_S / SPEED
            deadline = watch + CALM_SIM_S / SPEED
            while time.time() < deadline:
                stack.check_alive()
                time.sleep(1)
            end = time.time()
            assert stack.sim(end) >= WARMUP_S + SETTLE_S + CALM_SIM_S
            # the twin really ran calm and was forecast: the fullest instance below the trigger, forecasts published
            kv = stack.query_range("max(infercast_kv_cache_usage_ratio)", watch, end, 2.0)
            assert kv and max(v for _, _, v in kv) < 0.75, "not a calm run: some instance crossed 0.75"
            forecasts = stack.query_range(
                'count(infercast_forecast_kv_cache_usage_ratio{aggregate="max"})', watch, end, 2.0
            )
            assert forecasts, f"the predictor published no forecast: {stack.logs()}"
            # the Watchdog always fires (a dead man's switch): everything else must stay quiet
            firing = stack.query_range('ALERTS{alertstate="firing",alertname!="InfercastWatchdog"}', watch, end, 1.0)
            fired = sorted({(m["alertname"], m.get("kind", "plain")) for m, _, _ in firing})
            assert fired == [], f"alerts fired on a calm fleet: {fired}; {what_fired(stack, firing)}"
            models = stack.query_range(
                'count by (forecaster) (infercast_forecast_kv_cache_usage_ratio{aggregate="max"})',
                watch,
                end,
                5.0,
            )
            assert {m["forecaster"] for m, _, _ in models} == {"lstm_aci"}, (
                "the calm fleet was not forecast by the LSTM"
            )
            time.sleep(2)  # a notification already on its way
            received = [
                (n.path, n.alertnames, round(stack.sim(n.received_at)))
                for n in stack.hook.received()
                if n.path != "/watchdog" and n.received_at >= watch
            ]
            assert any(n.path == "/watchdog" for n in stack.hook.received()), "the dead man's switch never arrived"
            assert received == [], f"a calm fleet notified: {received}"
    except ServerUnavailable as e:
        pytest.skip(str(e))
