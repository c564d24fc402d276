#!/usr/bin/env bash
# Set everything up and run the main job: `infercast demo` replays the seed's 3 AM flash-sale avalanche on the twin
# under every control (none, basic, reactive, predictive, oracle) and writes runs/demo/report.html.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/infercast demo "$@"
