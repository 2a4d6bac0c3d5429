#!/usr/bin/env bash
# qkv serve's HTTP API and limits with curl (no browser): the seed's soft dictionary numbers, attention
# JSON, refusals as JSON 4xx (context, body cap, bad JSON, unknown ids/layers), no files outside the
# embedded page (traversal attempts), loopback by default, a clear error for a busy port, clean stop.
# Usage: serve_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1 src=$2
fx=$src/tests/reference/fixtures
source "$(dirname "$0")/lib.sh"
test_label=serve
command -v curl >/dev/null || { bad "curl is needed (apt-get install -y curl)"; exit 1; }
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT

start() {  # start NAME ARGS... -> sets url
  local name=$1; shift
  "$qkv" serve "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pids+=($!)
  url=
  for _ in $(seq 1 300); do
    url=$(grep -oE 'http://[^ ]+/' "$tmp/$name.out" 2>/dev/null | head -1)
    [ -n "$url" ] && return 0
    sleep 0.1
  done
  bad "$name: no URL printed"; cat "$tmp/$name.err"; return 1
}
# expect NAME STATUS PATTERN -- CURL_ARGS...: status and a body matching PATTERN; JSON for API answers
expect() {
  local name=$1 want=$2 pattern=$3; shift 4
  local out code
  out=$(curl -s -o "$tmp/body" -w '%{http_code} %{content_type}' "$@")
  code=${out%% *}
  if [ "$code" != "$want" ]; then bad "$name: HTTP $code, expected $want: $(head -c 300 "$tmp/body")"; return; fi
  if ! grep -qE -- "$pattern" "$tmp/body"; then bad "$name: body lacks /$pattern/: $(head -c 300 "$tmp/body")"; return; fi
  if [ "$want" -ge 400 ] && ! [[ "$out" == *application/json* ]]; then bad "$name: error is not JSON ($out)"; return; fi
  ok "$name ($code)"
}

bash "$src/tests/web/make_model.sh" "$qkv" "$tmp/model" 2>/dev/null || {
  # without node: the byte-level tokenizer by hand is not available; use the GPT-2-shaped path below
  echo "serve: node missing, model without tokenizer"; "$qkv" init --out "$tmp/model" --preset tiny >/dev/null; }
start main --model "$tmp/model" --port 0 || exit 1
[[ "$url" == http://127.0.0.1:* ]] && ok "binds loopback by default: $url" || bad "default host is not 127.0.0.1: $url"
post=(-X POST -H 'Content-Type: application/json')

expect page 200 '<title>qkv' -- "$url"
expect app.js 200 'soft dictionary' -- "${url}app.js"
expect info 200 '"n_layer":2' -- "${url}api/info"
expect tokenize 200 '"ids":\[104,105\]' -- "${post[@]}" -d '{"text":"hi"}' "${url}api/tokenize"
expect soft-dictionary-example 200 '"names":\["sat","bank","river"\]' -- "${url}api/soft-dictionary"
expect soft-dictionary-seed 200 '"output":\[\[0\.847152' -- "${post[@]}" -d '{"Q":[[1,2]],"K":[[1,0],[1,1],[0,2]],"V":[[1,0],[0.5,0.5],[1,0]]}' "${url}api/soft-dictionary"
expect soft-dictionary-noscale 200 '"weights":\[\[0\.0351' -- "${post[@]}" -d '{"Q":[[1,2]],"K":[[1,0],[1,1],[0,2]],"scale":false}' "${url}api/soft-dictionary"
expect soft-dictionary-ragged 400 'every row needs 2 numbers' -- "${post[@]}" -d '{"Q":[[1,2]],"K":[[1,0],[1]]}' "${url}api/soft-dictionary"
expect soft-dictionary-dk 400 'same length d_k' -- "${post[@]}" -d '{"Q":[[1,2,3]],"K":[[1,0]]}' "${url}api/soft-dictionary"
# seed 004's running example and whole-matrix panels
expect running-get 200 '"checks":\[' -- "${url}api/running-example"
expect running-seed-row 200 '"A":\[\[0\.00843[0-9]*,.*\[0\.01064[0-9]*,0\.03518[0-9]*,0\.62176' -- "${post[@]}" -d '{"scale":true}' "${url}api/running-example"
expect running-masked 200 '"masked":true' -- "${post[@]}" -d '{"masked":true,"scale":false}' "${url}api/running-example"
expect running-bad-key 400 'unknown key \\"row\\"' -- "${post[@]}" -d '{"row":3}' "${url}api/running-example"
expect running-bad-scale 400 '"scale\\" must be true or false' -- "${post[@]}" -d '{"scale":1}' "${url}api/running-example"
expect whole-matrix 200 '"binary_rows":5' -- "${post[@]}" -d '{"text":"a b c d e","score":"decay","d_k":256,"scale":false}' "${url}api/whole-matrix"
expect whole-matrix-scaled 200 '"binary_rows":0' -- "${post[@]}" -d '{"text":"a b c d e","score":"decay","d_k":256}' "${url}api/whole-matrix"
expect whole-matrix-score 400 "expected content, previous, decay or mix" -- "${post[@]}" -d '{"text":"a b","score":"nope"}' "${url}api/whole-matrix"
expect whole-matrix-dk 400 '"d_k\\" is 0, outside \[1, 4096\]' -- "${post[@]}" -d '{"text":"a b","d_k":0}' "${url}api/whole-matrix"
expect whole-matrix-empty 400 'sentence is empty' -- "${post[@]}" -d '{"text":"   "}' "${url}api/whole-matrix"
expect attention 200 '"focus":\{.*"pattern":\[\[1\.0,0\.0,0\.0\]' -- "${post[@]}" -d '{"text":"abc","layer":1,"head":3}' "${url}api/attention"
expect attention-grid 200 '"grid":\{"exact":true,"layers":\[\[\[\[' -- "${post[@]}" -d '{"text":"abc"}' "${url}api/attention"
expect attention-ids 200 '"tokens":\["a","b"\]' -- "${post[@]}" -d '{"ids":[97,98],"grid":false}' "${url}api/attention"
expect attention-noscale 200 '"scale":false' -- "${post[@]}" -d '{"text":"abc","scale":false,"grid":false}' "${url}api/attention"
long=$(printf 'x%.0s' $(seq 1 129))
expect context 400 "129 tokens but the model's context is 128 tokens; shorten it \(nothing is truncated\)" -- "${post[@]}" -d "{\"text\":\"$long\"}" "${url}api/attention"
head -c 70000 /dev/zero | tr '\0' a >"$tmp/big"
expect body-cap 413 'too large \(the limit is 65536 bytes\)' -- "${post[@]}" --data-binary @"$tmp/big" "${url}api/attention"
expect bad-json 400 'not valid JSON' -- "${post[@]}" -d '{"text":' "${url}api/attention"
expect no-input 400 'give \\"text\\"' -- "${post[@]}" -d '{}' "${url}api/attention"
expect empty-text 400 'empty' -- "${post[@]}" -d '{"text":""}' "${url}api/attention"
expect bad-id 400 'outside the vocabulary \[0, 256\)' -- "${post[@]}" -d '{"ids":[1,256]}' "${url}api/attention"
expect bad-layer 400 'layer.. is 2, outside \[0, 1\]' -- "${post[@]}" -d '{"text":"ab","layer":2}' "${url}api/attention"
expect bad-scale 400 'scale.. must be true or false' -- "${post[@]}" -d '{"text":"ab","scale":"no"}' "${url}api/attention"
expect not-object 400 'JSON object' -- "${post[@]}" -d '[1,2]' "${url}api/attention"
expect unknown 404 'not found' -- "${url}api/nope"
expect traversal 404 'not found' -- --path-as-is "${url}../../etc/passwd"
expect traversal-encoded 404 'not found' -- --path-as-is "${url}%2e%2e/%2e%2e/etc/passwd"
expect traversal-asset 404 'not found' -- --path-as-is "${url}web/../CMakeLists.txt"
expect source-file 404 'not found' -- "${url}CMakeLists.txt"
expect heads 200 '"induction":' -- "${url}api/heads"
expect heads-text 200 '"text_previous_token":' -- "${post[@]}" -d '{"text":"abcabc"}' "${url}api/heads"
expect circuits 200 '"compositions":\[\{' -- "${url}api/circuits"

# the patching view's API (docs/patching.md "In qkv serve"): the same sweep as qkv patch --json; refusals
expect patch 200 '"kind":"heads".*"sites":\[\{' -- "${post[@]}" -d '{"repeated":6,"hook":"attn.hook_v"}' "${url}api/patch"
cli=$("$qkv" patch --model "$tmp/model" --repeated 6 --hook attn.hook_v --json | tr -d ' \n' | grep -oE '"clean":[-0-9.e]+' | head -1)
api=$(curl -s "${post[@]}" -d '{"repeated":6,"hook":"attn.hook_v"}' "${url}api/patch" | grep -oE '"clean":[-0-9.e]+' | head -1)
[ -n "$cli" ] && [ "$cli" = "$api" ] && ok "patch: API's clean metric = qkv patch --json's ($api)" || bad "patch: API $api vs CLI $cli"
expect patch-site 200 '"max_abs_change":0\.0,' -- "${post[@]}" -d '{"repeated":6,"hook":"attn.hook_v","layer":0,"head":1}' "${url}api/patch-site"
expect patch-bad-hook 400 "no hook point 'blocks.0.attn.hook_nope'" -- "${post[@]}" -d '{"repeated":6,"hook":"attn.hook_nope"}' "${url}api/patch"
expect patch-no-hook 400 'hook.. is missing' -- "${post[@]}" -d '{"repeated":6}' "${url}api/patch"
expect patch-empty 400 'clean.. is empty' -- "${post[@]}" -d '{"clean":"","corrupt":"ab","hook":"attn.hook_v","loss_positions":[0]}' "${url}api/patch"
expect patch-unequal 400 'equal length in tokens' -- "${post[@]}" -d '{"clean":"abc","corrupt":"ab","hook":"attn.hook_v","loss_positions":[0]}' "${url}api/patch"
expect patch-long 400 '129 tokens; patching takes at most 128' -- "${post[@]}" -d "{\"clean\":\"$long\",\"corrupt\":\"$long\",\"hook\":\"attn.hook_v\",\"loss_positions\":[0]}" "${url}api/patch"
expect patch-unknown-key 400 'unknown key \\"hoook\\"' -- "${post[@]}" -d '{"repeated":6,"hoook":"attn.hook_v"}' "${url}api/patch"
expect path-patch 200 '"fraction_of_receiver_effect":' -- "${post[@]}" -d '{"repeated":6,"path":"0.1:1.0:k"}' "${url}api/path-patch"
expect path-patch-order 400 'must come before the receiver' -- "${post[@]}" -d '{"repeated":6,"path":"1.0:1.1:k"}' "${url}api/path-patch"
expect path-patch-bad 400 'is not SENDER:RECEIVER' -- "${post[@]}" -d '{"repeated":6,"path":"0.1-1.0"}' "${url}api/path-patch"
expect attribute 200 '"sum_terms":' -- "${post[@]}" -d '{"text":"abcab","answer":"c","wrong":"d"}' "${url}api/attribute"
expect attribute-two-tokens 400 'is 2 tokens, not one' -- "${post[@]}" -d '{"text":"abcab","answer":"cd","wrong":"d"}' "${url}api/attribute"
expect patch-progress 200 '"running":false' -- "${post[@]}" -d '{"job":"nothing"}' "${url}api/patch-progress"
expect rope-gpt2 400 'learned positions' -- "${post[@]}" -d '{"text":"ab"}' "${url}api/rope"
expect swap-gpt2 200 '"transposes":true' -- "${post[@]}" -d '{"text":"abcab","layer":1,"head":2,"grid":false,"swap_check":true}' "${url}api/attention"

# family checkpoints (no tokenizer: ids): rotated S, the swap, the offset chart, patching, heads and circuits
ids='[1,2,3,4,5,6,7,8,9,10,11,12]'
for arch in llama qwen2 gemma gpt_neox; do
  "$qkv" init --arch "$arch" --preset tiny --out "$tmp/$arch" >/dev/null || { bad "init --arch $arch"; continue; }
  start "$arch" --model "$tmp/$arch" --port 0 || continue
  expect "$arch-info" 200 "\"rotary\":true.*\"model_type\":\"$arch\"" -- "${url}api/info"
  expect "$arch-rotated-S" 200 'ROTATED q and k.*"transposes":true' -- "${post[@]}" -d "{\"ids\":$ids,\"layer\":1,\"head\":3,\"grid\":false,\"swap_check\":true}" "${url}api/attention"
  expect "$arch-rope" 200 '"max_abs_shift_diff":[0-9.]+e-(0[7-9]|[1-9][0-9])' -- "${post[@]}" -d "{\"ids\":$ids,\"layer\":1,\"head\":3,\"i\":11,\"j\":2}" "${url}api/rope"
  expect "$arch-patch" 200 '"sites":\[\{' -- "${post[@]}" -d '{"repeated":5,"hook":"attn.hook_rot_k"}' "${url}api/patch"
  expect "$arch-heads" 200 '"induction":' -- "${url}api/heads"
  expect "$arch-circuits" 200 '"compositions":\[\{.*"n_kv_head":' -- "${url}api/circuits"
done

# a model without a tokenizer: text refused with a message naming it, ids accepted
start notok --model "$fx/tiny" --port 0 || exit 1
expect no-tokenizer 400 'has no tokenizer beside it' -- "${post[@]}" -d '{"text":"ab"}' "${url}api/attention"
expect no-tokenizer-ids 200 '"T":3' -- "${post[@]}" -d '{"ids":[3,57,14],"grid":false}' "${url}api/attention"
port=${url##*:}; port=${port%/}

# a busy port and a missing model are clear errors (exit 2 and 1)
out=$("$qkv" serve --model "$tmp/model" --port "$port" 2>&1); rc=$?
[ "$rc" -eq 2 ] && grep -q "cannot listen on 127.0.0.1:$port" <<<"$out" && ok "busy port: exit 2, $out" || bad "busy port: exit $rc: $out"
out=$("$qkv" serve --model "$tmp/nope" --port 0 2>&1); rc=$?
[ "$rc" -eq 1 ] && grep -q '^qkv: error: ' <<<"$out" && ok "missing model: exit 1" || bad "missing model: exit $rc: $out"

# SIGTERM stops the server cleanly
for i in "${!pids[@]}"; do
  kill -TERM "${pids[$i]}"; wait "${pids[$i]}"; rc=$?
  [ "$rc" -eq 0 ] && ok "stops on SIGTERM (server $i)" || bad "server $i exit $rc on SIGTERM"
done
pids=()
exit $fail
