"""CI fails on an unexplained skip (issue 12): a run whose only problem is a skip exits non-zero and names it."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

TESTS = """
import pytest

def test_runs():
    assert 1 + 1 == 2

def test_needs_gpu():
    pytest.skip("needs a GPU: NVML on real hardware")

@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False
"""


def run(tmp_path, extra: str = "") -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(TESTS + extra)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.skipguard", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )


def test_a_gpu_skip_and_an_xfail_pass(tmp_path):
    r = run(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skips that fail this run" not in r.stdout


def test_any_other_skip_fails_the_run_and_is_named(tmp_path):
    extra = """
def test_guarded():
    pytest.skip("Prometheus is not installed")

import shutil
@pytest.mark.skipif(shutil.which("sh") is not None, reason="scaffolding guard")
def test_marked():
    pass
"""
    r = run(tmp_path, extra)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "skips that fail this run" in r.stdout
    assert "test_sample.py::test_guarded: Prometheus is not installed" in r.stdout
    assert "test_sample.py::test_marked: scaffolding guard" in r.stdout
    assert "test_needs_gpu" not in r.stdout.split("skips that fail this run")[1]


def test_a_module_level_importorskip_fails_the_run(tmp_path):
    (tmp_path / "test_scaffold.py").write_text('import pytest\npytest.importorskip("infercast.no_such_module")\n')
    r = run(tmp_path)
    assert r.returncode == 1 and "test_scaffold.py" in r.stdout and "infercast.no_such_module" in r.stdout
