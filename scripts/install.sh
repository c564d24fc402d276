#!/usr/bin/env bash
# Set up everything infercast needs on a fresh Debian machine with Python 3.11: the real servers from Debian's
# packages (Prometheus + promtool, Alertmanager + amtool, Redis; python3-venv where `python -m venv` cannot work),
# a virtual environment in .venv with the versions pinned in constraints.txt, and node (Debian's nodejs + npm)
# with the npm package pinned in deploy/kubernetes/crds/npm/package-lock.json, whose validators `infercast k8s
# validate` runs on the Prometheus Operator's ServiceMonitor and AlertmanagerConfig.  Safe to run again: it skips
# what is already there.  Quiet when it works (pip's output goes to .venv/install.log); on a failure it prints
# the log's end and exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3

need_apt=()
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need_apt+=(prometheus-alertmanager)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
# Debian ships venv without ensurepip (it is in python3-venv): `python3 -m venv` fails until that is installed.
if [ ! -x .venv/bin/python ] && ! "$PY" -c "import ensurepip, venv" >/dev/null 2>&1; then
  need_apt+=(python3-venv)
fi
if ((${#need_apt[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "install.sh: installing ${need_apt[*]} from Debian" >&2
  $SUDO apt-get update -qq >/dev/null
  # The Debian packages start system services; we only need the binaries (our scripts start them on loopback).
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  for svc in prometheus prometheus-alertmanager prometheus-node-exporter redis-server; do
    $SUDO systemctl stop "$svc" >/dev/null 2>&1 || $SUDO service "$svc" stop >/dev/null 2>&1 || true
  done
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.infercast-installed
log=.venv/install.log
if [ ! -f "$stamp" ] || [ constraints.txt -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "install.sh: installing the Python packages into .venv (log: $log)" >&2
  .venv/bin/python -m pip install -q --upgrade pip >"$log" 2>&1 || true
  if ! .venv/bin/python -m pip install -q -c constraints.txt -e '.[dev]' >>"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "install.sh: pip install failed; the whole log is in $log" >&2
    exit 1
  fi
  touch "$stamp"
fi
# The operator's CRD validators (deploy/kubernetes/crds/SOURCE.md): exactly the versions in package-lock.json.
npm_dir=deploy/kubernetes/crds/npm
npm_stamp=$npm_dir/node_modules/.infercast-installed
if [ ! -f "$npm_stamp" ] || [ $npm_dir/package-lock.json -nt "$npm_stamp" ] || [ $npm_dir/package.json -nt "$npm_stamp" ]; then
  echo "install.sh: installing the operator's CRD validators into $npm_dir/node_modules (log: $log)" >&2
  if ! npm ci --prefix "$npm_dir" --no-audit --no-fund >>"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "install.sh: npm ci failed; the whole log is in $log" >&2
    exit 1
  fi
  touch "$npm_stamp"
fi
echo "install.sh: ready (.venv/bin/infercast)" >&2
