#!/usr/bin/env bash
# Renders an HTML page to a PNG with Debian's headless Chromium (offline: no network services).
#   bash scripts/screenshot.sh IN.html OUT.png [WIDTHxHEIGHT]     (default 1200x2400)
# Installs the `chromium` package with apt-get if no browser is found (needs root).
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: bash scripts/screenshot.sh IN.html OUT.png [WIDTHxHEIGHT]" >&2
  exit 2
fi
in=$1 out=$2 size=${3:-1200x2400}
if [[ ! $size =~ ^([0-9]+)x([0-9]+)$ ]]; then
  echo "screenshot: size must be WIDTHxHEIGHT, e.g. 1200x2400 (got '$size')" >&2
  exit 2
fi
w=${BASH_REMATCH[1]} h=${BASH_REMATCH[2]}
[[ -f $in ]] || { echo "screenshot: $in: no such file" >&2; exit 1; }

browser=""
for b in chromium chromium-browser; do
  if command -v "$b" >/dev/null 2>&1; then browser=$b; break; fi
done
if [[ -z $browser ]]; then
  echo "screenshot: installing chromium (apt-get)" >&2
  apt-get install -y chromium >/dev/null || { apt-get update >/dev/null && apt-get install -y chromium >/dev/null; }
  browser=chromium
fi

in_abs=$(realpath "$in")
out_abs=$(realpath -m "$out")
mkdir -p "$(dirname "$out_abs")"
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
rm -f "$out_abs"

"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --hide-scrollbars --force-device-scale-factor=1 \
  --user-data-dir="$profile" --screenshot="$out_abs" --window-size="$w,$h" \
  "file://$in_abs" >"$profile/log" 2>&1 || true

if [[ ! -s $out_abs ]]; then
  echo "screenshot: $browser did not write $out" >&2
  tail -20 "$profile/log" >&2
  exit 1
fi
echo "$out"
