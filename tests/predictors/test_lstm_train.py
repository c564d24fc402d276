"""`infercast train` and the pre-training data: reproducible files, clear errors, plausible generated series."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from infercast.predictors.lstm import LSTMForecaster
from infercast.predictors.modelfile import paths
from infercast.simulator.replay.pretrain_data import (
    generated_histories,
    load_servegen_slices,
    plan_servegen_slices,
    servegen_slices,
    servegen_source,
    trace_histories,
)
from infercast.tools.cli import main
from tests.conftest import REPO

pytest.importorskip("torch")

TINY = ["--series", "4", "--hours", "1", "--max-epochs", "1", "--windows-per-epoch", "300", "--hidden", "8"]


def test_train_cli_writes_a_loadable_model_reproducibly(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "a"), "--no-progress", *TINY]) == 0
    assert main(["train", "--out", str(tmp_path / "b"), "--no-progress", *TINY]) == 0
    out = capsys.readouterr().out
    assert "wrote" in out and "4 series" in out
    # Same arguments and seed: the same weights, byte for byte.
    assert paths(tmp_path / "a")[0].read_bytes() == paths(tmp_path / "b")[0].read_bytes()
    m = LSTMForecaster.load(tmp_path / "a")
    assert m.params.hidden == 8 and m.meta_["data"]["sources"] == ["synthetic-diurnal"]


def test_train_cli_names_a_bad_servegen_dir(tmp_path):
    with pytest.raises(SystemExit, match=r"no chunk-N-trace\.csv"):
        main(["train", "--out", str(tmp_path / "m"), "--servegen", str(tmp_path), *TINY])


def test_generated_series_are_deterministic_and_cross_the_trigger():
    a = generated_histories([], n_series=6, hours=3.0, seed=5)
    b = generated_histories([], n_series=6, hours=3.0, seed=5)
    assert all(np.array_equal(x.y, y.y, equal_nan=True) for x, y in zip(a, b, strict=True))
    y = np.concatenate([h.y for h in a])
    # KV usage is a ratio, and the pools are sized so that some of the time goes over the 0.75 trigger.
    assert y.min() >= 0 and y.max() <= 1
    assert 0.0 < (y > 0.75).mean() < 0.5
    assert all(len(h.t) == 720 and h.step == 15.0 for h in a)


def test_trace_replay_through_the_fluid_model(data_dir):
    from infercast.simulator.replay.traces import load_trace

    tr = load_trace(data_dir / "traces" / "azure" / "AzureLLMInferenceTrace_conv.csv")
    hs = trace_histories(tr, n_pools=2, seed=0)
    assert len(hs) == 2
    # The pool is sized so that the trace's busiest minutes reach ~0.85 of KV capacity.
    assert 0.5 < max(np.nanmax(h.y) for h in hs) <= 1.0
    assert np.nanmean(hs[0].features["rps"]) == pytest.approx(len(tr) / tr.duration_s, rel=0.2)


def test_calibrate_only_rewrites_the_json_and_keeps_the_weights(tmp_path, capsys):
    from infercast.predictors.lstm import CALIBRATION_KEY

    stem = tmp_path / "m"
    assert main(["train", "--out", str(stem), "--no-progress", *TINY]) == 0
    weights = paths(stem)[0].read_bytes()
    assert CALIBRATION_KEY not in LSTMForecaster.load(stem).meta_
    # One twin run of a surge variant (seed 500, which training never uses), no ServeGen slice: ~15 s.
    argv = ["train", "--out", str(stem), "--calibrate-only", "--calib-variants", "1", "--calib-servegen-hours", "0"]
    assert main(argv) == 0
    assert "coverage at the horizon" in capsys.readouterr().out
    assert paths(stem)[0].read_bytes() == weights  # the weights are not touched
    m = LSTMForecaster.load(stem)
    cal = m.meta_[CALIBRATION_KEY]
    assert len(cal["upper"]) == 20 and "seeds 500+" in cal["source"]["data"][0]
    assert np.array_equal(m.band_factors[1], np.asarray(cal["upper"]))


def test_calibrate_only_names_a_missing_model(tmp_path):
    with pytest.raises(SystemExit, match="metadata file is missing"):
        main(["train", "--out", str(tmp_path / "none"), "--calibrate-only"])


def test_validation_slices_stay_apart_from_the_training_slices(data_dir):
    sg = [data_dir / "traces" / "servegen" / "language" / "m-large"]
    train = plan_servegen_slices(sg, 3, seed=200)
    # Planning draws exactly what the training data always drew (the shipped model's slices stay the same).
    assert [len(x.arrivals_s) for x in servegen_slices(sg, 3, seed=200)] == [
        len(x.arrivals_s) for x in load_servegen_slices(sg, train)
    ]
    assert {x.source for x in train} == {servegen_source(sg[0])} == {"language/m-large"}
    val = plan_servegen_slices(sg, 6, seed=400, avoid=train)
    for v in val:
        assert all(v.end_s <= a.start_s or v.start_s >= a.end_s for a in train), (v, train)


def test_model_choice_uses_only_twin_runs_the_backtest_never_scores(tmp_path, capsys):
    """`infercast train --from-twin --twin-weight 1 4`: two candidates, chosen on validation twin runs (surge
    variant seed 300) that neither training (seed 100) nor the backtest (the scenario's own seed 0, the dev
    traces) uses; the file says what it was trained and validated on, and which twin made the runs."""
    stem = tmp_path / "m"
    # the seed's fleet at a tenth of its base traffic: the variants (and so the twin runs) scale from it, and what is
    # tested here is which runs train, validate and choose, not the runs' size (a full-size pair took a minute)
    fleet = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    fleet["scenario"]["phases"][0]["rps"] /= 10
    (tmp_path / "flash-sale.yaml").write_text(yaml.safe_dump(fleet, sort_keys=False))
    argv = ["train", "--out", str(stem), "--no-progress", "--from-twin", "--twin-variants", "1", "--val-variants", "1"]
    argv += ["--config", str(tmp_path / "flash-sale.yaml")]
    argv += ["--twin-servegen-hours", "0", "--val-servegen-hours", "0", "--twin-weight", "1", "4", *TINY]
    assert main(argv) == 0
    assert "validation twin runs loss" in capsys.readouterr().out
    meta = LSTMForecaster.load(stem).meta_
    data, sel = meta["data"], meta["selection"]
    assert data["twin_runs"]["scenario_variants"]["seeds"] == [100]
    assert data["validation"]["twin_runs"]["scenario_variants"]["seeds"] == [300]
    assert "Azure" in data["validation"]["not_used"] and "seed 0" in data["validation"]["not_used"]
    assert sel["criterion"] == "loss on the validation twin runs"
    losses = {c["twin_weight"]: c["validation_twin"]["loss"] for c in sel["candidates"]}
    assert set(losses) == {1.0, 4.0}
    assert data["twin_weight"] == sel["chosen"]["twin_weight"] == min(losses, key=losses.get)
    # The twin that made the runs: a hash of its sources always, the commit where git can tell.
    assert len(meta["twin"]["twin_sources_sha256"]) == 64 and meta["twin"]["config"] == "flash-sale.yaml"
    # No series of the scored traces anywhere in what it trained on.
    assert not any("Azure" in x or "conversation" in x for x in meta["training_range"]["series"])
