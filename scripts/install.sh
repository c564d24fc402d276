#!/usr/bin/env bash
# Set up everything infercast needs on a fresh Debian machine with Python 3.11: the real servers from Debian's
# packages (Prometheus + promtool, Alertmanager + amtool, Redis) and a virtual environment in .venv with the
# versions pinned in constraints.txt.  Safe to run again: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need_apt+=(prometheus-alertmanager)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
if ((${#need_apt[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "install.sh: installing ${need_apt[*]} from Debian" >&2
  $SUDO apt-get update -qq
  # The Debian packages start system services; we only need the binaries (our scripts start them on loopback).
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  for svc in prometheus prometheus-alertmanager prometheus-node-exporter redis-server; do
    $SUDO systemctl stop "$svc" >/dev/null 2>&1 || $SUDO service "$svc" stop >/dev/null 2>&1 || true
  done
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.infercast-installed
if [ ! -f "$stamp" ] || [ constraints.txt -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q -c constraints.txt -e '.[dev]'
  touch "$stamp"
fi
echo "install.sh: ready (.venv/bin/infercast)" >&2
