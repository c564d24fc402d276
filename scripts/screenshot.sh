#!/usr/bin/env bash
# Render a page (the demo's report by default) in headless Chromium to a PNG, as a reader would see it.
#   bash scripts/screenshot.sh [PAGE.html] [OUT.png] [HEIGHT]
# Installs Debian's `chromium` if it is missing (run as root or with sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
page="${1:-runs/demo/report.html}"
out="${2:-docs/img/demo-report.png}"
height="${3:-2400}"
[ -f "$page" ] || { echo "screenshot: no page at $page (run: .venv/bin/infercast demo)" >&2; exit 2; }
if ! command -v chromium >/dev/null; then
    sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo"
    $sudo_ apt-get install -y -q chromium >/dev/null
fi
mkdir -p "$(dirname "$out")"
# --no-sandbox: CI containers run as root, where Chromium's sandbox refuses to start
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
    --window-size=1200,"$height" --screenshot="$out" "file://$(realpath "$page")" 2>/dev/null
echo "screenshot: $out"
