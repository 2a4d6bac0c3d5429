#!/usr/bin/env bash
# qkv serve in a real browser and under load: installs what is missing (Debian's chromium, the npm
# playwright-core pinned in tests/web/package-lock.json), makes a tiny byte-level model, starts
# `qkv serve` on a free loopback port, runs tests/web/browser_test.js (Playwright) and
# tests/web/load_test.js (8 clients × 10 s), then tests/web/patch_test.js (the patching view on the bundled
# model, the rotary panels on a tiny llama checkpoint; two more servers), stops them, and keeps the screenshots and exports in
# $QKV_ARTIFACTS (default: web-artifacts/ beside the binary). Usage: web_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") src=$2
web=$src/tests/web
art=${QKV_ARTIFACTS:-$(cd "$(dirname "$qkv")" && pwd)/web-artifacts}
mkdir -p "$art" && rm -f "$art"/qkv-*
source "$(dirname "$0")/lib.sh"
test_label=web

if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "web: installing chromium (apt-get)"
    { apt-get install -y chromium || { apt-get update && apt-get install -y chromium; }; } >/dev/null 2>&1
  fi
fi
[ -x /usr/bin/chromium ] || { bad "chromium is not installed and could not be (apt-get install -y chromium)"; exit 1; }
command -v node >/dev/null && command -v npm >/dev/null || { bad "node and npm are needed (apt-get install -y nodejs npm)"; exit 1; }
bash "$src/tests/npm_ci.sh" "$web" "$web" playwright-core/package.json || { bad "npm ci in $web failed"; exit 1; }
ok "chromium $(/usr/bin/chromium --version 2>/dev/null | grep -oE '[0-9]+(\.[0-9]+)+' | head -1), node $(node --version), playwright-core $(node -p "require('$web/node_modules/playwright-core/package.json').version")"

tmp=$(mktemp -d)
pid=
extra=()
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; for p in "${extra[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
bash "$web/make_model.sh" "$qkv" "$tmp/model" || { bad "could not make the test model"; exit 1; }

"$qkv" serve --model "$tmp/model" --port 0 >"$tmp/serve.out" 2>"$tmp/serve.err" &
pid=$!
url=
for _ in $(seq 1 300); do
  url=$(grep -oE 'http://127\.0\.0\.1:[0-9]+/' "$tmp/serve.out" 2>/dev/null | head -1)
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$url" ]; then bad "qkv serve did not print its URL"; cat "$tmp/serve.out" "$tmp/serve.err"; exit 1; fi
ok "qkv serve listening at $url"

(cd "$web" && node browser_test.js "$url" "$qkv" "$tmp/model" "$art") || bad "browser test (see the lines above; screenshots in $art)"
(cd "$web" && node load_test.js "$url" 8 10) || bad "load test"

# the patching view (on the bundled GPT-2 model: the seeds' picture) and the rotary panels (on a tiny
# Llama-shaped checkpoint with the byte-level tokenizer beside it): tests/web/patch_test.js
"$qkv" init --arch llama --preset tiny --out "$tmp/llama" >/dev/null && cp "$tmp/model/vocab.json" "$tmp/model/merges.txt" "$tmp/llama/"
extra=()
start_extra() {  # start_extra NAME MODEL -> sets xurl
  "$qkv" serve --model "$2" --port 0 >"$tmp/$1.out" 2>"$tmp/$1.err" &
  extra+=($!)
  xurl=
  for _ in $(seq 1 300); do
    xurl=$(grep -oE 'http://127\.0\.0\.1:[0-9]+/' "$tmp/$1.out" 2>/dev/null | head -1)
    [ -n "$xurl" ] && return 0
    sleep 0.1
  done
  bad "qkv serve --model $2 did not print its URL"; cat "$tmp/$1.err"; return 1
}
"$qkv" init --arch qwen2 --preset tiny --out "$tmp/qwen2" >/dev/null  # no tokenizer beside it: ids
if start_extra induction "$src/models/induction" && gurl=$xurl && start_extra qwen2 "$tmp/qwen2" && nurl=$xurl &&
  start_extra llama "$tmp/llama"; then
  ok "qkv serve on models/induction ($gurl), a llama checkpoint ($xurl) and a qwen2 one without a tokenizer ($nurl)"
  (cd "$web" && node patch_test.js "$qkv" "$art" "$gurl" "$src/models/induction" "$xurl" "$tmp/llama" "$nurl" "$tmp/qwen2") ||
    bad "patching/rotary browser test (see the lines above; screenshots in $art)"
  (cd "$web" && node generate_test.js "$qkv" "$art" "$gurl" "$src/models/induction" "$xurl" "$tmp/llama") ||
    bad "generation view browser test (see the lines above; screenshots in $art)"
fi
for p in "${extra[@]}"; do
  kill -TERM "$p"; wait "$p"; rc=$?
  [ "$rc" -eq 0 ] && ok "extra server $p stops cleanly" || bad "extra server $p exit $rc on SIGTERM"
done

kill -TERM "$pid"
wait "$pid"; rc=$?
pid=
if [ "$rc" -eq 0 ] && grep -q 'qkv serve: stopped' "$tmp/serve.out"; then ok "qkv serve stops cleanly on SIGTERM"; else bad "qkv serve exit $rc on SIGTERM"; cat "$tmp/serve.err"; fi
if [ -f "$art/qkv-serve.png" ]; then ok "artifacts: $(ls "$art" | tr '\n' ' ')in $art"; else bad "no screenshot in $art"; fi
exit $fail
