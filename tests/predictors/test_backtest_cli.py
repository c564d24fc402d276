"""`infercast backtest` on every trace format (test slices under tests/data/traces) and on a scenario."""

from __future__ import annotations

import json

import yaml

from infercast.tools.cli import main

SCORE_KEYS = {"mae", "peak_mae", "coverage", "coverage_nominal", "pinball", "fit_seconds", "predict_seconds_per_series"}
BREACH_KEYS = {
    "origin_f1",
    "origin_precision",
    "origin_recall",
    "event_recall",
    "median_lead_seconds",
    "false_alarms_per_hour",
    "breaches",
    "lead_share",
    "possible_lead_median_seconds",
    "calm_breaches",
    "calm_detected",
    "calm_median_lead_seconds",
}


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(["backtest", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_kv_series_from_an_azure_csv_through_the_twin_with_a_plot(capsys, data_dir, tmp_path):
    png = tmp_path / "kv.png"
    trace = data_dir / "traces" / "azure" / "AzureLLMInferenceTrace_code.csv"
    rc, out, err = _run(
        capsys,
        "--trace",
        str(trace),
        "--series",
        "kv",
        "--horizon",
        "60",
        "--warmup",
        "120",
        "--json",
        "--plot",
        str(png),
    )
    assert rc == 0, err
    res = json.loads(out)
    assert res["series"] == "kv" and res["threshold"] == 0.75 and res["horizon_s"] == 60
    # The fleet was sized as an operator sizes one: the trace's median load at <= 0.6 KV usage (issue 37).
    assert res["meta"]["sizing"]["realised_median_kv"] <= 0.6
    # Every model's alert is scored as a page for the replay's harm, under the keys the issue names; the page that
    # never fires pages no time and none falsely, the one that always fires is paged all the time.
    assert res["meta"]["harm"]["episodes"] >= 0
    for name in ("last_value", "predict_linear", "holt_winters", "kalman", "always_alarm", "never_alarm"):
        h = res["models"][name]["harm"]
        assert set(h) >= {"episodes", "recall", "median_lead_seconds", "false_pages_per_day", "paged_fraction"}
    never_h, always_h = res["models"]["never_alarm"]["harm"], res["models"]["always_alarm"]["harm"]
    assert never_h["paged_fraction"] == 0 and never_h["false_pages_per_day"] == 0
    assert always_h["paged_fraction"] == 1
    if never_h["episodes"]:
        assert never_h["recall"] == 0 and always_h["recall"] == 1
    # The page built for harm (issue 37 item 4) is scored beside them, on the deployed forecaster's band, and names
    # its setting; it is a page, not a forecaster, so it has harm scores only.
    if res["service_model"] in res["models"]:
        page = res["models"]["harm_page"]
        assert page["on"] == res["service_model"] and page["page"].startswith("band >= ")
        assert set(page["harm"]) >= {"episodes", "recall", "median_lead_seconds", "false_pages_per_day"}
        assert "mae" not in page
    for name in ("last_value", "predict_linear", "holt_winters", "kalman"):
        s = res["models"][name]
        assert set(s) >= SCORE_KEYS and set(s["breach"]) >= BREACH_KEYS
        assert 0 <= s["coverage"] <= 1 and s["peak_mae"] >= 0 and s["n_origins"] > 20
    # The LSTM is in the table when part B's model file loads, otherwise a note says why not.
    assert "lstm" in res["models"] or any(n.startswith("lstm skipped") for n in res["notes"])
    # The two references are scored on the same origins: one pages at every origin below the threshold, the
    # other never does.
    always, never = res["models"]["always_alarm"]["breach"], res["models"]["never_alarm"]["breach"]
    assert always["origins_scored"] == never["origins_scored"] == res["models"]["kalman"]["breach"]["origins_scored"]
    assert always["alarms"] == always["origins_scored"] > 0 and always["origin_recall"] == 1.0
    assert never["alarms"] == 0 and never["false_alarms_per_hour"] == 0.0
    # The lead against what was possible: all of it for the pager that always pages, none for the one that never does.
    if always["breaches"]:
        assert always["lead_share"] == 1.0 and never["lead_share"] == 0.0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rps_series_from_mooncake_prints_the_table(capsys, data_dir):
    trace = data_dir / "traces" / "mooncake" / "conversation_trace.jsonl"
    rc, out, err = _run(capsys, "--trace", str(trace), "--series", "rps", "--horizon", "60", "--warmup", "90")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("# mooncake series=rps horizon=60s step=15s")
    header = lines[1].split()
    assert header[:5] == ["model", "mae", "peak_mae", "coverage", "pinball"]
    assert {line.split()[0] for line in lines[2:7]} == {
        "last_value",
        "predict_linear",
        "holt_winters",
        "kalman",
        "prophet",
    }


def test_rps_series_from_a_servegen_directory_uses_its_windows(capsys, data_dir):
    rc, out, err = _run(
        capsys,
        "--trace",
        str(data_dir / "traces" / "servegen" / "language" / "m-large"),
        "--series",
        "rps",
        "--refit",
        "86400",
        "--warmup",
        "86400",
        "--models",
        "last_value,kalman,prophet",
        "--json",
    )
    assert rc == 0, err
    res = json.loads(out)
    assert res["step_s"] == 600.0 and res["horizon_s"] == 600.0  # one 600 s window at least
    assert "horizon raised to one sample step (600 s)" in res["notes"]
    assert set(res["models"]) == {"last_value", "kalman", "prophet"}
    assert res["models"]["prophet"]["fits"] == 1 and res["models"]["prophet"]["mae"] > 0


def test_a_scenario_is_a_trace_too(capsys, repo_root, tmp_path):
    # The flash-sale fleet with a shorter, smaller surge (the full scenario is bench/forecast.py's job).
    data = yaml.safe_load((repo_root / "examples" / "flash-sale.yaml").read_text())
    data["scenario"] = {
        "duration_seconds": 900,
        "seed": 0,
        "phases": [
            {"start_seconds": 0, "rps": 20, "long_share": 0.15},
            {"start_seconds": 450, "ramp_seconds": 60, "rps": 400, "long_share": 0.6},
        ],
    }
    data["pools"]["v4-main"]["nodes"] = 2
    data.pop("protections")  # the seeds' layout needs the flash sale's streams and more nodes; `none` ignores it
    path = tmp_path / "small-sale.yaml"
    path.write_text(yaml.safe_dump(data))
    rc, out, err = _run(
        capsys, "--trace", f"scenario:{path}", "--series", "kv", "--warmup", "150", "--no-lstm", "--json"
    )
    assert rc == 0, err
    res = json.loads(out)
    assert res["trace"] == f"scenario:{path}" and res["samples"] >= 59
    assert res["models"]["kalman"]["n_origins"] > 40
    # the series the predictive alert pages on, and the model the service would run on it, scored as deployed
    assert res["meta"]["aggregate"] == "max"
    assert res["service_model"] == "kalman_aci"
    assert res["models"]["kalman_aci"]["alarm"]["policy"] == {"persistence": 3, "hysteresis": 0.0}  # for: 30s


def test_bad_trace_is_a_clear_error(capsys, tmp_path):
    rc, _, err = _run(capsys, "--trace", str(tmp_path / "missing.csv"), "--series", "rps")
    assert rc == 2 and "missing.csv" in err
    junk = tmp_path / "junk.csv"
    junk.write_text("hello,world\n1,2\n")
    rc, _, err = _run(capsys, "--trace", str(junk), "--series", "rps")
    assert rc == 2 and "junk.csv" in err


def test_the_table_prints_the_lead_share_and_the_calm_lead_with_the_alert_as_deployed():
    """`infercast backtest`'s table (issue 27): lead share and the calm crossings' median lead per model, and the
    service's model once more as its alert pages (`[alert]`)."""
    from infercast.simulator.replay.evaluate import table

    def breach(share, calm_lead, calm_n):
        return {
            "threshold": 0.75,
            "origins_scored": 100,
            "origins_crossing": 30,
            "breaches": 4,
            "calm_breaches": calm_n,
            "possible_lead_median_seconds": 150.0,
            "lead_share": share,
            "calm_median_lead_seconds": calm_lead,
        }

    res = {
        "trace": "t",
        "series": "kv",
        "horizon_s": 300.0,
        "step_s": 15.0,
        "samples": 240,
        "threshold": 0.75,
        "notes": [],
        "models": {
            "kalman_aci": {"breach": breach(0.5, 120.0, 2), "alarm": breach(0.25, 90.0, 2)},
            "always_alarm": {"breach": breach(1.0, 300.0, 2)},
            "never_alarm": {"breach": breach(0.0, 0.0, 2)},
        },
    }
    lines = table(res).splitlines()
    assert "2 of them after 5 calm minutes; median possible lead 150 s" in lines[1]
    header = lines[3].split()
    assert header[header.index("lead_s") + 1 : header.index("lead_s") + 3] == ["share", "calm_lead"]
    rows = {line.split("  ")[0].strip(): line.split() for line in lines[4:]}
    assert list(rows) == ["kalman_aci", "kalman_aci [alert]", "always_alarm", "never_alarm"]
    assert rows["kalman_aci [alert]"][-6:-3] == ["0.25", "90", "(2)"]
    assert rows["always_alarm"][-6:-3] == ["1", "300", "(2)"]


def test_the_same_backtest_prints_the_same_prophet_scores_twice(capsys, data_dir):
    # Prophet's band is sampled: a user rerunning a backtest to compare a change gets the same figures, not noise
    trace = data_dir / "traces" / "mooncake" / "conversation_trace.jsonl"
    args = ("--trace", str(trace), "--series", "rps", "--horizon", "60", "--warmup", "90", "--json")
    first, second = (_run(capsys, *args) for _ in range(2))
    assert first[0] == second[0] == 0, first[2]
    timings = ("fit_seconds", "predict_seconds_per_series")  # wall-clock times: the only figures that may differ
    scores = [
        {k: v for k, v in json.loads(out)["models"]["prophet"].items() if k not in timings}
        for _, out, _ in (first, second)
    ]
    assert scores[0] == scores[1] and scores[0]["coverage"] is not None and scores[0]["pinball"] > 0
