"""`infercast train --from-prometheus URL` against a real Prometheus loaded with four hours of a fleet's history
(backfilled with `promtool tsdb create-blocks-from openmetrics`): it trains, scores the held-out tail against
predict_linear and writes a model the predictor loads; it refuses, with rc 2 and the reason, a history too short,
a Prometheus that does not answer and a series that is not there."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest

from infercast.alertrules.rules import KV_USAGE_AVG, KV_USAGE_MAX
from infercast.catalog import (
    KV_CACHE_USAGE_RATIO,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    ROUTER_REQUESTS_TOTAL,
)
from infercast.predictors import history as H
from infercast.predictors.lstm import DEFAULT_MODEL, LSTMForecaster
from infercast.predictors.modelfile import paths
from infercast.servers import free_port
from infercast.store.prometheus import PrometheusStore
from infercast.tools.cli import main
from tests.predictors.conftest import openmetrics, start_backfilled

pytest.importorskip("torch")

STEP = 15.0
HOURS = 4.0
#: pool -> instances; two pools, one of them with two instances (its mean and max differ)
POOLS = {"chat": 2, "code": 1}
TINY = ["--max-epochs", "2", "--windows-per-epoch", "400", "--hidden", "8", "--no-progress"]


def _fleet(now: float, hours: float = HOURS) -> str:
    """KV usage with a 40-minute cycle and surges over 0.75, the recording rules' series beside the raw metric
    (as if `promtool tsdb create-blocks-from rules` had backfilled them), running/waiting and the router's counter."""
    rng = np.random.default_rng(7)
    t = np.arange(now - hours * 3600, now - 30, STEP)
    series = []
    for p_i, (pool, n_inst) in enumerate(POOLS.items()):
        base = 0.45 + 0.15 * np.sin(2 * math.pi * t / 2400 + p_i)
        surge = np.zeros_like(t)
        for c in rng.uniform(t[0], t[-1], 6):
            surge += 0.3 * np.exp(-0.5 * ((t - c) / 240) ** 2)
        rps = 50 * (1 + base + surge)
        ys = []
        for i in range(n_inst):
            y = np.clip(base + surge + 0.05 * i + rng.normal(0, 0.01, len(t)), 0, 1)
            ys.append(y)
            lab = {"pool": pool, "version": "v1", "instance": f"{pool}-{i}"}
            series.append((KV_CACHE_USAGE_RATIO, "gauge", lab, list(zip(t, y, strict=True))))
            series.append((REQUESTS_RUNNING, "gauge", lab, list(zip(t, 20 * y, strict=True))))
            series.append((REQUESTS_WAITING, "gauge", lab, list(zip(t, np.maximum(0, 40 * (y - 0.7)), strict=True))))
        grp = {"pool": pool, "version": "v1"}
        series.append((KV_USAGE_MAX, "gauge", grp, list(zip(t, np.max(ys, axis=0), strict=True))))
        series.append((KV_USAGE_AVG, "gauge", grp, list(zip(t, np.mean(ys, axis=0), strict=True))))
        count = np.cumsum(rps * STEP)
        lab = {**grp, "priority": "normal", "outcome": "ok"}
        series.append((ROUTER_REQUESTS_TOTAL, "counter", lab, list(zip(t, count, strict=True))))
    return openmetrics(series)


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    now = time.time()
    with start_backfilled(tmp_path_factory.mktemp("prom"), _fleet(now)) as p:
        yield p


@pytest.mark.servers
def test_trains_on_the_fleets_history_and_scores_the_held_out_tail(prom, tmp_path, capsys):
    out = tmp_path / "mine"
    argv = ["train", "--from-prometheus", prom.url, "--since", "5h", "--min-history", "3h", "--out", str(out), *TINY]
    assert main(argv) == 0
    cap = capsys.readouterr()
    # progress on stderr, the table and where it wrote on stdout
    assert "reading 5.0 h of KV usage" in cap.err and "recording rules" in cap.err
    assert "trained in" in cap.err and "epochs" in cap.err
    assert "held-out KV usage, fullest instance per pool (what pages)" in cap.out
    table = cap.out.split("held-out KV usage, mean")[0]
    for model in ("lstm (new)", "lstm (shipped)", "predict_linear", "last_value"):
        assert model in table, cap.out
    assert "held-out traffic" in cap.out and "combined_aci" in cap.out and "prophet_anchored" in cap.out
    # the same format as the shipped model: the predictor's loader takes it
    model = LSTMForecaster.load(out)
    assert model.params.step_s == STEP and model.params.hidden == 8
    meta = json.loads(paths(out)[1].read_text())
    src = meta["data"]["prometheus"]
    assert src["source"] == "rules" and src["series"]["kv_max"] == KV_USAGE_MAX
    assert src["pool_version_series"] == 2 and src["seed"] == 0 and src["url"] == prom.url
    # chat's mean differs from its max and trains too; code has one instance, its mean is its max: counted once
    assert src["training_series"] == 3
    split = src["split"]
    assert split["train"][1] == split["validation"][0] and split["validation"][1] == split["held_out"][0]
    kv = meta["held_out_scores"]["kv"]["max"]
    assert set(kv) >= {"lstm (new)", "predict_linear", "last_value"}
    for row in kv.values():
        assert row["series"] == 2 and row["n_origins"] > 40 and row["peak_mae"] is not None
    assert kv["lstm (new)"]["breach"]["origins_crossing"] == kv["predict_linear"]["breach"]["origins_crossing"]
    assert meta["held_out_scores"]["rps"]["prophet_anchored"]["n_origins"] > 0
    assert meta["held_out_scores"]["rps"]["combined_aci"]["n_origins"] > 0  # the service's traffic pipeline
    # never over the shipped model
    assert paths(DEFAULT_MODEL)[0].resolve() != paths(out)[0].resolve()


@pytest.mark.servers
def test_raw_metric_reads_as_the_predictor_combines_it(prom):
    end = time.time()
    store = PrometheusStore(prom.url)
    rules = H.fetch(store, end - 3600, end, STEP, source="rules")
    raw = H.fetch(store, end - 3600, end, STEP, source="raw")
    assert rules.source == "rules" and raw.source == "raw"
    for how in ("max", "mean"):
        a = {h.series_id: h.y for h in rules.kv[how]}
        b = {h.series_id: h.y for h in raw.kv[how]}
        assert a.keys() == b.keys() and len(a) == 2
        for k in a:
            ok = np.isfinite(a[k]) & np.isfinite(b[k])
            assert ok.sum() > 200 and np.allclose(a[k][ok], b[k][ok], atol=1e-9)
    covs = raw.kv["max"][0].features
    assert {"running", "waiting", "rps"} <= covs.keys() and "fragmentation" not in covs  # absent: masked


@pytest.mark.servers
def test_refuses_a_history_too_short_saying_how_much_there_is(prom, tmp_path, capsys):
    out = tmp_path / "short"
    assert main(["train", "--from-prometheus", prom.url, "--since", "1h", "--out", str(out), *TINY]) == 2
    err = capsys.readouterr().err
    assert "infercast train: the history at" in err and "is too short: 1.0 h of" in err
    assert "2 pool/version series" in err and "needs at least 6.0 h" in err and "--min-history 6h" in err
    assert not paths(out)[0].exists()


@pytest.mark.servers
def test_refuses_series_that_are_not_there(prom, tmp_path, capsys):
    argv = ["train", "--from-prometheus", prom.url, "--matchers", "pool=nope", "--out", str(tmp_path / "m"), *TINY]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"Prometheus has no series of {KV_CACHE_USAGE_RATIO}" in err and "{'pool': 'nope'}" in err


def test_refuses_an_unreachable_prometheus(tmp_path, capsys):
    url = f"http://user:secret@127.0.0.1:{free_port()}"
    assert main(["train", "--from-prometheus", url, "--out", str(tmp_path / "m"), *TINY]) == 2
    err = capsys.readouterr().err
    assert "infercast train: cannot read the history from Prometheus: cannot connect to Prometheus at" in err
    assert "secret" not in err
    assert not paths(tmp_path / "m")[0].exists()


def test_other_train_modes_still_need_out(capsys):
    assert main(["train", "--max-epochs", "1"]) == 2
    assert "--out is required" in capsys.readouterr().err


def test_the_token_is_sent_and_never_written(monkeypatch):
    from infercast.predictors import train_prometheus as T

    store = T.store_for("http://127.0.0.1:9", "s3cret", 5.0)
    assert store._http.headers["Authorization"] == "Bearer s3cret"
    argv = ["infercast", "train", "--from-prometheus", "http://u:pw@prom:9090", "--token", "s3cret", "--token=s3cret"]
    monkeypatch.setattr("sys.argv", argv)
    line = T.command_line() or ""
    assert "s3cret" not in line and "pw" not in line and line.count("***") >= 2
