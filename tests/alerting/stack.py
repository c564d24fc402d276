"""Test-only helpers to run the real infercast services (exporter over the twin, predictor) as subprocesses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import REPO

CLI = [sys.executable, "-m", "infercast.cli"]


def services_problem() -> str | None:
    """None when the exporter serves KV series from the twin, else why not.

    A test that needs the services *fails* with this reason (`require_services`): the exporter and predictor are
    infercast's own, so their being broken is infercast's fault, never a reason to skip (the end-to-end and panel
    tests both used to skip when the twin emitted nothing).
    """
    argv = [*CLI, "exporter", "--config", str(REPO / "examples" / "flash-sale.yaml")]
    try:
        res = subprocess.run(
            [*argv, "--once", "--no-nvml", "--twin-warmup-seconds", "30"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "infercast exporter --once did not finish within 120 s"
    if res.returncode != 0:
        return f"infercast exporter --once failed: {res.stderr.strip().splitlines()[-1:]}"
    if "infercast_kv_cache_usage_ratio{" not in res.stdout:
        return "infercast exporter serves no infercast_kv_cache_usage_ratio from the twin yet"
    try:
        import predictors.cli  # noqa: F401
    except ImportError as e:
        return f"infercast predictor is not importable: {e}"
    return None


def require_services() -> None:
    """Fail the calling test, with the reason, unless the exporter and predictor services work."""
    problem = services_problem()
    if problem:
        pytest.fail(f"the exporter and predictor services over the twin do not work: {problem}", pytrace=False)


def fleet_file(tmp: Path, **predictor: float) -> Path:
    """examples/flash-sale.yaml with the given `predictor:` settings, written to `tmp/fleet.yaml`."""
    doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    doc["predictor"] = {**doc.get("predictor", {}), **predictor}
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def spawn(argv: list[str], log: Path) -> subprocess.Popen:
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
