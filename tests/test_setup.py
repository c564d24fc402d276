"""Set-up (issue 12): the packaging metadata; what git ignores (scripts/install.sh: tests/test_install_script.py)."""

from __future__ import annotations

import os
import subprocess
import tomllib

from tests.conftest import REPO


def test_packaging_metadata_uses_an_spdx_license_string():
    # before: `project.license` as a table, which setuptools warns about on every install
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "Apache-2.0"
    assert any(r.replace(" ", "").startswith("setuptools>=77") for r in meta["build-system"]["requires"])


def test_the_local_stack_directory_is_ignored_by_git():
    # before: `deploy/local-stack.sh` left .stack/ (Prometheus data, logs) as untracked files
    assert 'REPO / ".stack"' in (REPO / "deploy" / "local_stack.py").read_text()  # where the stack writes
    r = subprocess.run(
        ["git", "check-ignore", "-q", ".stack/prometheus/data/wal"], cwd=REPO, env={**os.environ}, check=False
    )
    assert r.returncode == 0, "git does not ignore .stack/"


def test_the_install_log_is_ignored_by_git():
    # scripts/install.sh writes every step's details to .install.log in the checkout
    r = subprocess.run(["git", "check-ignore", "-q", ".install.log"], cwd=REPO, check=False)
    assert r.returncode == 0, "git does not ignore .install.log"
