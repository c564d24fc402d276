"""`infercast demo --prometheus URL --alertmanager URL --speed S`: the `predictive` arm through real servers.

Real Prometheus and Alertmanager (Debian packages) on loopback, set up as a user would: Alertmanager with the
generated routes (the actuator's webhook is where the demo listens), Prometheus with the rules generated for S
(`infercast.alertrules.generate --time-scale S`), scraping the demo's exporter and forecasts every 500 ms.  The demo
runs as a user runs it (a subprocess of the command line); the tests say what the user sees.  Skipped only when the
server binaries are missing (tests/skipguard.py fails the run on that skip too); a broken infercast fails them.

The live run is reduced: a 300 s scenario at 10x (the sale from 240 s on, the calendar saying so, the predictor
forecasting from 8 samples), so about 30 s of wall time for the live arm, plus the `none` arm in memory for the
avalanche's reference.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit

import pytest
import requests
import yaml

from infercast.servers import ServerUnavailable, free_port, prometheus_config, start_alertmanager, start_prometheus

SPEED = 10.0
SALE_S, SALE_END_S, END_S = 240, 600, 300
PAGE = "InfercastKVCacheForecastBreach"


def _scenario(repo_root, tmp) -> str:
    data = yaml.safe_load((repo_root / "examples" / "flash-sale.yaml").read_text())
    sc = data["scenario"]
    sc["duration_seconds"] = END_S
    sale = sc["streams"][0]["phases"]
    sale[1]["start_seconds"], sale[2]["start_seconds"] = SALE_S, SALE_END_S  # the run ends during the sale
    data["events"][0].update(start=str(SALE_S), end=str(SALE_END_S))
    data["predictor"] = {"min_history_points": 8}
    path = tmp / "short-sale.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _prometheus(ports: dict, rules: bool = True, alertmanager: bool = True, interval: str = "500ms"):
    from infercast.alertrules.rules import rule_files
    from infercast.alertrules.settings import AlertSettings

    files = {n: yaml.safe_dump(d) for n, d in rule_files(AlertSettings().scaled(SPEED)).items()} if rules else {}
    jobs = {
        "infercast-exporter": f"127.0.0.1:{ports['exporter']}",
        "infercast-predictor": f"127.0.0.1:{ports['forecasts']}",
    }
    config = prometheus_config(
        jobs,
        interval=interval,
        rule_files=tuple(files),
        alertmanager=f"127.0.0.1:{ports['am']}" if alertmanager else None,
    )
    return start_prometheus(config, rule_files=files)


@pytest.fixture(scope="module")
def servers(repo_root, tmp_path_factory):
    """Alertmanager and four Prometheus: `prom` as the demo needs it, `bare` without rules, `mute` sending to no
    Alertmanager, `slow` evaluating every 15 s.  Yields the URLs, the demo's ports and its flags for `prom`."""
    from infercast.alertrules.alertmanager import Receivers, alertmanager_config

    ports = {"exporter": free_port(), "forecasts": free_port(), "webhook": free_port()}
    started = []
    try:
        receivers = Receivers(
            actuator_url=f"http://127.0.0.1:{ports['webhook']}/api/v1/alerts",
            template_dir=str(repo_root / "alertrules" / "templates"),
        )
        am = start_alertmanager(yaml.safe_dump(alertmanager_config(receivers)))
        started.append(am)
        ports["am"] = am.port
        for kwargs in ({}, {"rules": False}, {"alertmanager": False}, {"interval": "15s"}):
            started.append(_prometheus(ports, **kwargs))
    except ServerUnavailable as e:
        for s in started:
            s.close()
        pytest.skip(str(e))
    am, prom, bare, mute, slow = started
    flags = [
        "--alertmanager", am.url, "--speed", f"{SPEED:g}", "--exporter-listen", f"127.0.0.1:{ports['exporter']}",
        "--predictor-listen", f"127.0.0.1:{ports['forecasts']}", "--webhook-listen", f"127.0.0.1:{ports['webhook']}",
    ]  # fmt: skip
    yield {
        "am": am.url, "prom": prom.url, "bare": bare.url, "mute": mute.url, "slow": slow.url, "ports": ports,
        "flags": flags, "scenario": _scenario(repo_root, tmp_path_factory.mktemp("live")),
    }  # fmt: skip
    for s in reversed(started):
        s.close()


def _demo(repo_root, servers, out, *extra: str, prometheus: str | None = None, **popen):
    # -X faulthandler: a demo that hangs dumps every thread's stack on SIGABRT (`_wait_or_dump`)
    argv = [sys.executable, "-X", "faulthandler", "-m", "infercast.tools.cli", "demo",
            "--scenario", servers["scenario"], "--out", str(out), "--no-progress",
            "--prometheus", prometheus or servers["prom"], *servers["flags"], *extra]  # fmt: skip
    if popen:
        return subprocess.Popen(argv, cwd=repo_root, text=True, **popen)
    return subprocess.run(argv, cwd=repo_root, capture_output=True, text=True, timeout=300)


def _wait_or_dump(proc: subprocess.Popen, log, timeout: float) -> int:
    """The demo's exit status; if it has not exited within `timeout`, a failure carrying every thread's stack
    (faulthandler, on SIGABRT) and the end of what it printed."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        proc.wait(timeout=30)
        pytest.fail(f"the demo did not exit within {timeout:g} s; its stacks and output:\n{log.read_text()[-6000:]}")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.servers
@pytest.mark.slow
def test_the_live_arm_pages_through_alertmanager_and_its_lead_is_read_from_the_notification(
    repo_root, servers, tmp_path
):
    t0 = time.perf_counter()
    r = _demo(repo_root, servers, tmp_path, "--arms", "none,predictive", "--json")
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    live, arms = summary["live"], summary["arms"]
    page = live["page"]
    print(f"\nlive demo: {wall:.0f} s wall ({live['wall_seconds']} s live), page delivered at "
          f"{page.get('delivered_sim_seconds')} sim s, lead {arms['predictive']['alert_lead_seconds']} s, "
          f"behind {live['behind_seconds']} sim s")  # fmt: skip
    # the page is the notification Alertmanager delivered to the demo (the actuator's receiver), not a computation
    assert arms["predictive"]["alert_source"] == "alertmanager" and arms["none"]["alert_source"] == "computed"
    assert page["alertname"] == PAGE and page["receiver"] == "infercast-actuator", page
    assert page["labels"]["kind"] == "predictive" and page["labels"]["horizon"] == "300s"
    assert arms["predictive"]["alert_lead_seconds"] == round(
        summary["avalanche_seconds"] - page["delivered_sim_seconds"], 1
    )
    # it came before the unprotected fleet crossed the trigger, after Prometheus fired it
    assert arms["predictive"]["alert_lead_seconds"] > 0
    assert page["fired_sim_seconds"] <= page["delivered_sim_seconds"]
    # it was sent by that Alertmanager, for an alert Prometheus fired (its ALERTS series)
    assert urlsplit(page["sent_by"]).port == urlsplit(servers["am"]).port, page
    fired = requests.get(
        f"{servers['prom']}/api/v1/query",
        timeout=5,
        params={"query": f'max_over_time(ALERTS{{alertname="{PAGE}",alertstate="firing"}}[5m])'},
    ).json()["data"]["result"]
    assert fired, "Prometheus' ALERTS has no firing InfercastKVCacheForecastBreach"
    # what the user reads: the arm marked live in the report, the live record kept beside its series
    assert "predictive (live)" in (tmp_path / "report.html").read_text()
    assert json.loads((tmp_path / "predictive" / "live.json").read_text())["page"]["alertname"] == PAGE
    assert "runs live through Prometheus" in r.stderr
    # the demo stopped serving when its live arm was done
    assert not any(_listening(servers["ports"][k]) for k in ("exporter", "forecasts", "webhook"))


@pytest.mark.servers
def test_a_wrong_or_unreachable_server_is_refused_at_once_with_what_is_wrong(repo_root, servers, tmp_path):
    from infercast.simulator.demo.live_check import expected_rules

    nowhere = f"http://127.0.0.1:{free_port()}"
    n = len(expected_rules(SPEED))
    cases = [
        (nowhere, [], f"cannot connect to Prometheus at {nowhere}"),
        (servers["am"], [], f"--prometheus {servers['am']} is not a Prometheus: GET /api/v1/status/buildinfo answered "
                            "HTTP 404"),
        (servers["prom"], ["--alertmanager", servers["prom"]], f"--alertmanager {servers['prom']} is not an "
                                                               "Alertmanager: GET /api/v2/status answered HTTP 404"),
        (servers["bare"], [], f"lacks {n} of infercast's {n} rules ("),
        (servers["prom"], ["--speed", "5"], "holds infercast's rules with other durations than --speed 5 needs: "
                                            "InfercastAvailabilityBurnRateFast has for: 12s where the rules for 5x "
                                            "say 24s"),
        (servers["prom"], ["--webhook-listen", f"127.0.0.1:{free_port()}"], "has no webhook at 127.0.0.1:"),
        (servers["slow"], [], "evaluates infercast's rules every 15 s, 150 simulated seconds at --speed 10: the demo "
                              "needs 1.5 s or less (one 15 s step); set its evaluation_interval, or run at a lower "),
    ]  # fmt: skip
    for prometheus, extra, said in cases:
        r = _demo(repo_root, servers, tmp_path, *extra, prometheus=prometheus)
        assert r.returncode == 2 and said in r.stderr, (said, r.stderr[-2000:])
        assert "] running ..." not in r.stderr, said  # refused before any arm ran (how fast: not a test's figure)
    # the rules message says how to get them
    assert (
        "python -m infercast.alertrules.generate --out DIR --time-scale 10"
        in _demo(repo_root, servers, tmp_path, prometheus=servers["bare"]).stderr
    )
    assert not list(tmp_path.iterdir()), "nothing is written when the servers are refused"


@pytest.mark.servers
def test_a_prometheus_that_does_not_scrape_the_demo_or_send_to_the_alertmanager_is_found_within_seconds(
    repo_root, servers, tmp_path
):
    elsewhere = f"127.0.0.1:{free_port()}"
    r = _demo(repo_root, servers, tmp_path, "--exporter-listen", elsewhere)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "demo: [none] running" not in r.stderr  # found while checking the servers, before any replay
    assert f"does not scrape the demo's exporter at {elsewhere} (its targets: infercast-exporter: " in r.stderr
    assert "deploy/prometheus.local.yml has infercast-exporter on 127.0.0.1:9400" in r.stderr
    r = _demo(repo_root, servers, tmp_path, prometheus=servers["mute"])
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"sends its alerts to no Alertmanager, not to the Alertmanager at {servers['am']}" in r.stderr
    assert "demo: [none] running" not in r.stderr
    # a port the demo needs is taken: said, and nothing else started
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the earlier runs' TIME_WAIT connections
        taken.bind(("127.0.0.1", servers["ports"]["webhook"]))
        taken.listen()
        r = _demo(repo_root, servers, tmp_path)
    assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{servers['ports']['webhook']}" in r.stderr
    assert "--webhook-listen HOST:PORT" in r.stderr


@pytest.mark.servers
def test_ctrl_c_mid_run_stops_what_the_demo_started_and_leaves_the_servers_running(repo_root, servers, tmp_path):
    log = tmp_path / "stderr.txt"
    with open(log, "w") as err:
        # SIGINT as a terminal delivers it: a suite started in the background (`cmd &`) has SIGINT ignored, which
        # the demo would inherit, and Python then never raises KeyboardInterrupt
        proc = _demo(repo_root, servers, tmp_path / "out", stdout=subprocess.DEVNULL, stderr=err,
                     start_new_session=True,
                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
        deadline = time.monotonic() + 90
        while "demo: [predictive] running" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-2000:]
            time.sleep(0.2)
        assert _listening(servers["ports"]["exporter"]), "the live arm serves its exporter"
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: the whole foreground group
        assert _wait_or_dump(proc, log, 60) == 130  # a guard against a hang, sized for a busy machine
    said = log.read_text()
    assert "infercast demo: interrupted; stopped the demo's forecasts on 127.0.0.1:" in said, said[-2000:]
    assert "Prometheus and Alertmanager are left as they were; no arm had finished: nothing was written" in said
    assert not any(_listening(servers["ports"][k]) for k in ("exporter", "forecasts", "webhook"))
    assert subprocess.run(["ps", "--no-headers", "-g", str(proc.pid)], capture_output=True, text=True).stdout == ""
    for url in (servers["prom"], servers["am"]):
        assert requests.get(f"{url}/-/ready", timeout=5).ok
    assert not (tmp_path / "out").exists()
