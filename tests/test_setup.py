"""Set-up (issue 12): `scripts/install.sh` on a Debian without python3-venv, quietly; the packaging metadata; what
git ignores.  install.sh runs for real, in a copy of the repository's set-up files, against stand-ins for apt-get,
sudo, npm and Python that record what they are asked (so nothing is installed on this machine)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tomllib
from pathlib import Path

from tests.conftest import REPO

FAKE_PYTHON = """#!/bin/bash
# a Debian python3.11 without python3-venv (ensurepip missing) until apt-get installs it
case "$*" in
  "-c import ensurepip, venv") [ -f "$STATE/venv-installed" ] && exit 0 || exit 1 ;;
  "-m venv .venv") [ -f "$STATE/venv-installed" ] || { echo "ensurepip is not available" >&2; exit 1; }
                   mkdir -p .venv/bin && cp "$0" .venv/bin/python && exit 0 ;;
  *"pip install"*) for i in $(seq 70); do echo "pip says $i"; echo "WARNING: noise $i" >&2; done
                   if [[ "$*" == *-e* && -n "$FAIL_PIP" ]]; then
                     echo "ERROR: No matching distribution for torch" >&2; exit 1
                   fi
                   exit 0 ;;
esac
exit 0
"""
FAKE_NPM = """#!/bin/bash
# `npm ci --prefix DIR ...`: records the call and leaves DIR/node_modules, as npm would
echo "npm $*" >> "$STATE/calls"
mkdir -p "$3/node_modules"
"""
FAKE_APT = """#!/bin/bash
echo "apt-get $*" >> "$STATE/calls"
[[ "$*" == *python3-venv* ]] && touch "$STATE/venv-installed"
exit 0
"""


def sandbox(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "deploy/kubernetes/crds/npm").mkdir(parents=True)
    for name in (
        "scripts/install.sh",
        "constraints.txt",
        "pyproject.toml",
        "deploy/kubernetes/crds/npm/package.json",
        "deploy/kubernetes/crds/npm/package-lock.json",
    ):
        shutil.copy(REPO / name, repo / name)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    scripts = {
        "python3.11": FAKE_PYTHON,
        "apt-get": FAKE_APT,
        "npm": FAKE_NPM,
        "node": "#!/bin/bash\nexit 0\n",
        "sudo": '#!/bin/bash\nexec "$@"\n',
        "systemctl": "#!/bin/bash\nexit 0\n",
        "service": "#!/bin/bash\nexit 0\n",
        **{b: "#!/bin/bash\nexit 0\n" for b in ("prometheus", "prometheus-alertmanager", "redis-server")},
    }
    for name, text in scripts.items():
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(stat.S_IRWXU)
    state = tmp_path / "state"
    state.mkdir()
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "STATE": str(state), "HOME": str(tmp_path)}
    return repo, env


def test_install_sets_up_python3_venv_when_venv_cannot_work_and_stays_quiet(tmp_path):
    # before: `python3 -m venv` failed on a fresh Debian (no python3-venv) and the install printed ~140 lines
    repo, env = sandbox(tmp_path)
    r = subprocess.run(["bash", "scripts/install.sh"], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    calls = (Path(env["STATE"]) / "calls").read_text()
    assert "install -y -qq --no-install-recommends python3-venv" in calls
    assert "npm ci --prefix deploy/kubernetes/crds/npm" in calls  # the CRD validators, from the lock file
    out = (r.stdout + r.stderr).strip().splitlines()
    assert len(out) <= 4, out  # what the user sees: what is installed, and "ready"
    assert out[-1] == "install.sh: ready (.venv/bin/infercast)"
    assert "pip says 70" in (repo / ".venv" / "install.log").read_text()  # the noise is kept, out of sight
    # run again: nothing to do, one line
    again = subprocess.run(["bash", "scripts/install.sh"], cwd=repo, env=env, capture_output=True, text=True)
    assert again.returncode == 0 and (again.stdout + again.stderr).strip().splitlines() == [out[-1]]


def test_a_failing_pip_install_shows_its_error_and_fails(tmp_path):
    repo, env = sandbox(tmp_path)
    r = subprocess.run(
        ["bash", "scripts/install.sh"], cwd=repo, env={**env, "FAIL_PIP": "1"}, capture_output=True, text=True
    )
    assert r.returncode == 1
    assert "ERROR: No matching distribution for torch" in r.stderr and "pip install failed" in r.stderr


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
