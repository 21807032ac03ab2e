#!/usr/bin/env bash
# Render an `rmjudge report` page in a real headless browser and save a screenshot to look at.
#
#   examples/check_report.sh TABLE [SCREENSHOT.png]
#
# TABLE is a judged output (x.duckdb, x.parquet or x.jsonl). The report is written next to it
# (NAME.report.html) and rendered by Chromium with networking off, so anything the page tried
# to fetch from outside would be missing from the screenshot. Needs Chromium
# (Debian: apt-get install -y chromium); not part of CI, which does not guarantee a browser.
# tests/test_analysis.py checks the same page without a browser (embedded, decodable PNGs).
set -euo pipefail

table=${1:?usage: examples/check_report.sh TABLE [SCREENSHOT.png]}
shot=${2:-/tmp/report.png}
html="${table%.*}.report.html"

rmjudge report "$table" -o "$html"

browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "no Chromium found: apt-get install -y chromium (Debian) and rerun" >&2
  exit 1
fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --screenshot="$shot" --window-size=1200,6000 \
  "file://$(realpath "$html")" 2>/dev/null
echo "screenshot of $html -> $shot"
