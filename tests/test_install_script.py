"""`scripts/install.sh` on a bare Debian machine: one line per step, the details in .install.log, torch's CPU build
from a local wheel or else the PyTorch CPU index (never PyPI's CUDA build), and the CRD validators installed, or
skipped with a line saying so when node cannot run them.

install.sh runs for real, in a copy of the repository's set-up files, against stand-ins for apt-get, sudo, npm,
node and Python that record what they are asked (so nothing is installed on this machine, and no registry is asked).
What the stand-ins cannot show: a real download from the PyTorch CPU index (this machine cannot reach it) and a real
apt-get (the packages are already here); docs/setup.md says how the script was tried for real."""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
from pathlib import Path

from tests.conftest import REPO

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PIN = next(
    line.split("==")[1] for line in (REPO / "constraints.txt").read_text().splitlines() if line.startswith("torch==")
)

FAKE_PYTHON = r"""#!/bin/bash
# a Debian python3.11 without python3-venv (ensurepip missing) until apt-get installs it; pip records its calls
case "$*" in
  "-c import ensurepip, venv") [ -f "$STATE/venv-installed" ] && exit 0 || exit 1 ;;
  "-m venv .venv") [ -f "$STATE/venv-installed" ] || { echo "ensurepip is not available" >&2; exit 1; }
                   mkdir -p .venv/bin && cp "$0" .venv/bin/python && exit 0 ;;
  "-c import sys; print"*) echo cp311; exit 0 ;;
  "-m pip config get global.find-links") [ -n "$FAKE_FIND_LINKS" ] && echo "$FAKE_FIND_LINKS" && exit 0; exit 1 ;;
  "-c import importlib.metadata"*) [ -f "$STATE/torch" ] && cat "$STATE/torch" && exit 0; exit 1 ;;
  *"pip install"*)
    args="$*"; echo "pip ${args#-m pip }" >> "$STATE/calls"
    for i in $(seq 70); do
      echo "pip says $i"
      echo "Location 'file:///opt/pypi-more/simple' is ignored: it is either a non-existing path or lacks a" \
        "specific scheme." >&2
    done
    if [[ "$*" == *-e* && -n "$FAIL_PIP" ]]; then echo "ERROR: No matching distribution for pandas" >&2; exit 1; fi
    [[ "$*" == *torch* ]] && echo "${PIN}+cpu" > "$STATE/torch"
    exit 0 ;;
esac
exit 0
"""
FAKE_NPM = """#!/bin/bash
# `npm ci --prefix DIR ...`: records the call and leaves DIR/node_modules, as npm would
echo "npm $*" >> "$STATE/calls"
mkdir -p "$3/node_modules"
"""
FAKE_NODE = """#!/bin/bash
# `node --version`, and validate.mjs answering the install script's check (or crashing, as a too old node would)
[ "$1" = --version ] && { echo "${NODE_VERSION:-v22.12.0}"; exit 0; }
echo "node $*" >> "$STATE/calls"
[ -n "$NODE_CRASHES" ] && { echo "SyntaxError: Unexpected token '??='" >&2; exit 1; }
cat > /dev/null
echo '[{"checked":true,"errors":[{"path":"spec/endpoints/0/interval","message":"must be string"}]}]'
"""
FAKE_APT = """#!/bin/bash
echo "apt-get $*" >> "$STATE/calls"
[[ "$*" == *python3-venv* ]] && touch "$STATE/venv-installed"
exit 0
"""
STEP_LINE = re.compile(r"\[[1-6]/6\] .+ \.\.\. (ok|SKIPPED) \(.+\)")


def sandbox(tmp_path: Path, node: bool = True) -> tuple[Path, dict[str, str]]:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "deploy/kubernetes/crds/npm").mkdir(parents=True)
    for name in (
        "scripts/install.sh",
        "constraints.txt",
        "pyproject.toml",
        "deploy/kubernetes/crds/npm/package.json",
        "deploy/kubernetes/crds/npm/package-lock.json",
        "deploy/kubernetes/crds/npm/validate.mjs",
    ):
        shutil.copy(REPO / name, repo / name)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    scripts = {
        "python3.11": FAKE_PYTHON,
        "apt-get": FAKE_APT,
        "sudo": '#!/bin/bash\nexec "$@"\n',
        "systemctl": "#!/bin/bash\nexit 0\n",
        "service": "#!/bin/bash\nexit 0\n",
        **{b: "#!/bin/bash\nexit 0\n" for b in ("prometheus", "prometheus-alertmanager", "redis-server")},
    }
    if node:
        scripts |= {"npm": FAKE_NPM, "node": FAKE_NODE}
    for name, text in scripts.items():
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(stat.S_IRWXU)
    # only the stand-ins and the basic tools: no python3 or node of this machine's
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("bash", "sed", "head", "tail", "cat", "cp", "mkdir", "touch", "dirname", "id", "seq", "date"):
        (tools / tool).symlink_to(shutil.which(tool))
    state = tmp_path / "state"
    state.mkdir()
    env = {"PATH": f"{bin_}:{tools}", "STATE": str(state), "HOME": str(tmp_path), "PIN": PIN}
    return repo, env


def install(repo: Path, env: dict[str, str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shutil.which("bash"), "scripts/install.sh"],
        cwd=repo,
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=60,
    )


def calls(env: dict[str, str]) -> list[str]:
    path = Path(env["STATE"]) / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_a_bare_machine_gets_torch_from_the_cpu_index_one_line_per_step_and_nothing_twice(tmp_path):
    repo, env = sandbox(tmp_path)
    r = install(repo, env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    # what the user sees: six step lines and "ready", nothing else (pip's and npm's output is in the log)
    assert len(lines) == 7 and r.stderr == "", r.stdout + r.stderr
    assert all(STEP_LINE.fullmatch(line) for line in lines[:6]), lines
    assert lines[0].startswith("[1/6] Debian packages") and "installed python3-venv" in lines[0]
    assert lines[2].startswith(f"[3/6] torch {PIN}, CPU build ... ok (from {CPU_INDEX}, ")
    assert lines[-1] == "install.sh: ready (.venv/bin/infercast; details in .install.log)"
    made = calls(env)
    assert any("install -y -qq --no-install-recommends python3-venv" in c for c in made)
    # torch alone from the CPU index, pinned by constraints.txt; then everything else from the usual indexes
    torch_call, rest_call = (c for c in made if c.startswith("pip install -c constraints.txt"))
    assert torch_call == f"pip install -c constraints.txt --index-url {CPU_INDEX} torch"
    assert rest_call == "pip install -c constraints.txt -e .[dev]"
    assert "npm ci --prefix deploy/kubernetes/crds/npm --no-audit --no-fund" in made
    log = (repo / ".install.log").read_text()
    assert "pip says 70" in log and "Location '" not in log  # the details kept, without the find-links noise

    # again: every step finds its result there and says so; nothing is installed twice
    again = install(repo, env)
    assert again.returncode == 0, again.stdout
    assert [line.split(" ... ")[1] for line in again.stdout.splitlines()[:6]] == [
        "ok (already there)",
        "ok (already there)",
        f"ok (torch {PIN}+cpu already there)",
        "ok (up to date)",
        "ok (node v22.12.0)",
        "ok (up to date)",
    ]
    assert calls(env) == made


def test_a_local_torch_wheel_in_pips_find_links_is_installed_instead_of_the_index(tmp_path):
    repo, env = sandbox(tmp_path)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = wheels / f"torch-{PIN}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.touch()
    (wheels / f"torch-{PIN}+cpu-cp312-cp312-manylinux_2_28_x86_64.whl").touch()  # another Python's: not taken
    r = install(repo, env, FAKE_FIND_LINKS=f"file://{wheels}")  # as pip.conf's find-links
    assert r.returncode == 0, r.stdout
    assert f"[3/6] torch {PIN}, CPU build ... ok (from {wheels}, " in r.stdout
    assert f"pip install -c constraints.txt {wheel}" in calls(env)
    assert not any(CPU_INDEX in c for c in calls(env))


def test_a_wheel_of_another_torch_version_is_not_taken_and_pip_find_links_from_the_environment_count(tmp_path):
    repo, env = sandbox(tmp_path)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.0.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    r = install(repo, env, PIP_FIND_LINKS=str(wheels))
    assert r.returncode == 0 and f"--index-url {CPU_INDEX} torch" in "\n".join(calls(env))
    (wheels / f"torch-{PIN}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    (Path(env["STATE"]) / "torch").unlink()  # torch gone: step 3 runs again, now finding the wheel
    r = install(repo, env, PIP_FIND_LINKS=str(wheels))
    assert f"from {wheels}," in r.stdout


def test_a_failing_step_prints_the_log_end_and_its_path_and_fails(tmp_path):
    repo, env = sandbox(tmp_path)
    r = install(repo, env, FAIL_PIP="1")
    assert r.returncode == 1
    assert "[4/6] Python packages (constraints.txt) ... FAILED" in r.stdout
    assert "ERROR: No matching distribution for pandas" in r.stdout  # the end of the log, shown
    assert r.stdout.rstrip().endswith(
        "install.sh: step 4 (Python packages (constraints.txt)) failed; the whole log is in .install.log"
    )
    assert "Location '" not in r.stdout
    assert "[5/6]" not in r.stdout  # nothing after the failed step


def test_an_old_node_that_runs_the_validators_is_used_and_says_so(tmp_path):
    repo, env = sandbox(tmp_path)
    r = install(repo, env, NODE_VERSION="v18.19.0")  # Debian bookworm's node
    assert r.returncode == 0, r.stdout
    lines = r.stdout.splitlines()
    assert "node v18.19.0, older than the 22 the validators ask for: step 6 tries them on it" in lines[4]
    assert re.fullmatch(
        r"\[6/6\] CRD validators \(deploy/kubernetes/crds/npm\) \.\.\. ok \(node v18\.19\.0, \d+ s\)", lines[5]
    )
    assert any(c.startswith("node deploy/kubernetes/crds/npm/validate.mjs") for c in calls(env))


def test_a_node_that_cannot_run_the_validators_skips_them_with_one_clear_line(tmp_path):
    repo, env = sandbox(tmp_path)
    r = install(repo, env, NODE_VERSION="v16.20.2", NODE_CRASHES="1")
    assert r.returncode == 0, r.stdout  # the rest of infercast works without them
    line = r.stdout.splitlines()[5]
    assert line.startswith("[6/6] CRD validators (deploy/kubernetes/crds/npm) ... SKIPPED (node v16.20.2 cannot run")
    assert "`infercast k8s validate` reports the ServiceMonitor and AlertmanagerConfig as not checked" in line
    assert "until node >= 22 and npm are on PATH and this script runs again" in line
    assert "SyntaxError" in (repo / ".install.log").read_text()  # why, in the log
    # again: the same line, without running npm again
    npm_calls = [c for c in calls(env) if c.startswith("npm ")]
    again = install(repo, env, NODE_VERSION="v16.20.2", NODE_CRASHES="1")
    assert again.stdout.splitlines()[5] == line
    assert [c for c in calls(env) if c.startswith("npm ")] == npm_calls
    # a newer node: the validators are installed and checked again
    newer = install(repo, env, NODE_VERSION="v22.12.0")
    assert newer.stdout.splitlines()[5].startswith("[6/6] CRD validators (deploy/kubernetes/crds/npm) ... ok (node v22")


def test_no_node_at_all_skips_the_validators_and_asks_debian_for_node(tmp_path):
    repo, env = sandbox(tmp_path, node=False)  # and apt-get's nodejs does not bring one (a stand-in)
    r = install(repo, env)
    assert r.returncode == 0, r.stdout
    lines = r.stdout.splitlines()
    assert "installed nodejs npm python3-venv" in lines[0]
    assert lines[4] == "[5/6] node for the CRD validators ... ok (none: no node or npm on PATH)"
    assert lines[5].startswith("[6/6] CRD validators (deploy/kubernetes/crds/npm) ... SKIPPED (no node; ")


def test_the_script_is_valid_bash_and_executable_by_bash():
    r = subprocess.run(["bash", "-n", str(REPO / "scripts" / "install.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
