"""`infercast exporter --once`: one scrape of every target printed as a Prometheus exposition."""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys

import pytest
import yaml

from infercast.config import ConfigError
from infercast.exporters import cli
from infercast.exporters.cli import use_nvml
from infercast.exporters.nvml import find_gpus
from tests.exporters.conftest import REPO, good_targets


def args(config_path, *extra):
    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    return p.parse_args(["--config", str(config_path), *extra])


def test_once_prints_the_exposition(fixture_server, tmp_path, capsys):
    data = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    data["targets"] = good_targets(fixture_server)
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(yaml.safe_dump(data))
    assert cli.run(args(cfg, "--once", "--no-nvml")) == 0
    out = capsys.readouterr().out
    assert 'infercast_kv_cache_usage_ratio{instance="vllm-a/0",pool="v4-main",version="v4"} 0.9312' in out
    assert 'infercast_target_up{kind="dcgm",target="dcgm-a"} 1.0' in out
    assert "# TYPE infercast_kv_block_allocation_failures_total counter" in out


def test_once_with_nvml_on_a_machine_without_gpus_still_prints(fixture_server, tmp_path, capsys):
    data = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    data["targets"] = good_targets(fixture_server)[:1]
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(yaml.safe_dump(data))
    assert cli.run(args(cfg, "--once", "--node", "here", "--nvml")) == 0
    out = capsys.readouterr().out
    assert 'infercast_target_up{kind="vllm",target="vllm-a"} 1.0' in out
    # --nvml insists: without a driver up 0 for nvml (with one: its GPUs)
    assert 'infercast_target_up{kind="nvml",target="nvml"} 0.0' in out or "infercast_gpu_memory_total_bytes" in out


def test_nvml_is_read_by_default_only_where_a_gpu_is_found(fixture_server, tmp_path, capsys, caplog):
    """Issue 38 item 3: on a host without GPUs the quickstart's command (no --no-nvml) served
    `infercast_target_up{kind="nvml"} 0` forever, and InfercastTargetDown{kind="nvml"} never cleared."""
    data = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    data["targets"] = good_targets(fixture_server)[:1]
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(yaml.safe_dump(data))
    gpus, why = find_gpus()
    with caplog.at_level(logging.INFO, logger="infercast.exporters.cli"):
        assert cli.run(args(cfg, "--once", "--node", "here")) == 0
    out = capsys.readouterr().out
    assert 'infercast_target_up{kind="vllm",target="vllm-a"} 1.0' in out
    if gpus == 0:  # this host (CI, a laptop): no NVML target at all, and the log says why
        assert 'kind="nvml"' not in out
        assert any("NVML: not reading GPUs" in r.getMessage() and why in r.getMessage() for r in caplog.records)
    else:
        assert "infercast_gpu_memory_total_bytes" in out
    # the decision, on every kind of host
    assert use_nvml(None, find=lambda: (0, "no NVIDIA driver")) is False
    assert use_nvml(None, find=lambda: (2, None)) is True
    assert use_nvml(True, find=lambda: (0, "x")) is True and use_nvml(False, find=lambda: (8, None)) is False


def test_find_gpus_says_why_none():
    from tests.exporters.fakes import fake_pynvml

    assert find_gpus(fake_pynvml(gpus=2)) == (2, None)
    assert find_gpus(fake_pynvml(gpus=0)) == (0, "NVML sees no GPU")
    n, why = find_gpus(fake_pynvml(available=False))
    assert n == 0 and why.startswith("no NVIDIA driver") and "Not Found" in why


def test_bad_listen_and_missing_config_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        cli.run(args(tmp_path / "nope.yaml", "--once"))
    with pytest.raises(ConfigError, match="HOST:PORT"):
        cli._listen("9400")


def test_the_command_line_entry_point(fixture_server, tmp_path):
    data = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    data["targets"] = good_targets(fixture_server)[4:5]  # the Triton server
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(yaml.safe_dump(data))
    r = subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "exporter", "--config", str(cfg), "--once", "--no-nvml"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    assert 'infercast_batch_saturation_ratio{instance="trt-a",pool="v4-main",version="v4"} 0.51171875' in r.stdout


def test_serving_mode_answers_and_stops_on_sigterm(fixture_server, tmp_path):
    import signal
    import time

    import requests

    from infercast.servers import free_port

    data = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    data["targets"] = good_targets(fixture_server)[:2]
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(yaml.safe_dump(data))
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "infercast.tools.cli",
            "exporter",
            "--config",
            str(cfg),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        text = ""
        while time.monotonic() < deadline:
            try:
                text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
                break
            except requests.ConnectionError:
                time.sleep(0.2)
        assert 'infercast_kv_cache_usage_ratio{instance="vllm-b",pool="v3.5-fallback",version="v3.5"} 0.5214' in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_gpus_only_serves_this_nodes_gpus_and_nothing_fleet_wide(tmp_path, capsys, monkeypatch):
    """The per-node DaemonSet (deploy/kubernetes): NVML only.  Router counters preset from the fleet file and the
    derived pool scores are the fleet exporter's; 512 nodes repeating them would multiply those series by 512."""
    from infercast.exporters.nvml import NvmlSource
    from tests.exporters.fakes import fake_pynvml

    monkeypatch.setattr(cli, "NvmlSource", lambda node=None: NvmlSource(fake_pynvml(gpus=2), node=node))
    assert cli.run(args(REPO / "examples" / "flash-sale.yaml", "--once", "--gpus-only", "--node", "gpu-7")) == 0
    out = capsys.readouterr().out
    names = {line.split("{")[0].split(" ")[0] for line in out.splitlines() if line and not line.startswith("#")}
    assert names and all(n.startswith(("infercast_gpu_", "infercast_target_")) for n in names), names
    assert 'infercast_gpu_memory_used_bytes{gpu="1",node="gpu-7",uuid="GPU-fake-1"}' in out
    assert 'infercast_target_up{kind="nvml",target="nvml"} 1.0' in out


def test_a_twin_target_without_the_twin_handed_in_is_refused_with_what_to_run(capsys):
    """The exporter's module never imports the simulator (tests/test_layers.py): the twin's source is handed in by
    the command line (`infercast exporter`, infercast/tools/cli.py).  Run without it, a fleet file with a
    `kind: twin` target is a clear error naming the target, not an import of the simulator by name."""
    from infercast.config import ConfigError

    with pytest.raises(ConfigError, match=r"target 'twin': kind twin is the fleet twin.*infercast exporter"):
        cli.run(args(REPO / "examples" / "flash-sale.yaml", "--once", "--no-nvml"))


def test_the_command_line_hands_the_twin_to_the_exporter(capsys):
    """`infercast exporter --config flash-sale --once`: the command line builds the twin's source and the exporter
    scrapes it like an engine (the user's command is unchanged by the inversion)."""
    from infercast.tools.cli import main

    assert main(["exporter", "--config", str(REPO / "examples" / "flash-sale.yaml"), "--once", "--no-nvml",
                 "--twin-warmup-seconds", "10"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert 'infercast_target_up{kind="twin",target="' in out
