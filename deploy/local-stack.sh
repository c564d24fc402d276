#!/usr/bin/env bash
# The docker-compose stack without Docker, on 127.0.0.1: Prometheus + Alertmanager (Debian packages), the alert-log
# webhook, the infercast exporter (over the flash-sale twin) and predictor.  Grafana is not started (see
# docs/dashboards.md).  Usage: deploy/local-stack.sh [--config FLEET.yaml] [--twin-speed N] [--no-services]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash scripts/install.sh
exec .venv/bin/python deploy/local_stack.py "$@"
