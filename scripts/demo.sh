#!/usr/bin/env bash
# Set everything up and run the main job: the twin's replay of the seed's 3 AM flash-sale avalanche.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/infercast twin run --scenario flash-sale --control none "$@"
