#!/usr/bin/env bash
# qkv train as a user runs it: a reduced induction preset writes every output file and a model the other
# commands load; --init continues from a checkpoint; --data trains on text; bad arguments exit 2 and bad
# files exit 1, with `qkv: error:` and no output directory left half-written.
# Usage: train_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1 src=$2
fx=$src/tests/reference/fixtures
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
test_label=train
small=(--preset induction --n-embd 32 --n-head 2 --steps 30 --batch 4 --seq-len 32 --eval-every 10 --threads 1)

"$qkv" train "${small[@]}" --mix skip=1,recall=1 --out "$tmp/a" >"$tmp/a.out" 2>"$tmp/a.err"
rc=$?
[ $rc -eq 0 ] && ok "reduced preset: exit 0" || { bad "reduced preset: exit $rc"; cat "$tmp/a.err"; }
for f in model.safetensors config.json vocab.json merges.txt train.csv loss.svg; do
  [ -s "$tmp/a/$f" ] && ok "wrote $f" || bad "no $f"
done
grep -q '^step ' "$tmp/a.err" && ok "progress on stderr" || bad "no progress line on stderr"
[ "$(wc -l <"$tmp/a/train.csv")" -eq 31 ] && ok "train.csv: a header and 30 steps" || bad "train.csv has $(wc -l <"$tmp/a/train.csv") lines"
check "info loads the trained model" 0 'attention-only|attn_only' -- info --model "$tmp/a"
check "heads runs on it" 0 'previous' -- heads --model "$tmp/a" --seq-len 10
head -c 8192 "$tmp/a/model.safetensors" | grep -aq 'probe=0,copies=0,skip=1,periodic=0,recall=1' && ok "__metadata__ records the mix" || bad "__metadata__ lacks the mix"

# --init: continue from the model just written; the same seed and steps from the same start are identical.
"$qkv" train "${small[@]}" --init "$tmp/a" --out "$tmp/b" >/dev/null 2>&1 && "$qkv" train "${small[@]}" --init "$tmp/a" --out "$tmp/c" >/dev/null 2>&1
cmp -s "$tmp/b/model.safetensors" "$tmp/c/model.safetensors" && ok "--init: deterministic" || bad "--init: two runs differ"
first=$(sed -n 2p "$tmp/b/train.csv" | cut -d, -f3) scratch=$(sed -n 2p "$tmp/a/train.csv" | cut -d, -f3)
[ "$first" != "$scratch" ] && ok "--init: starts from the checkpoint's weights (step-1 loss $first, not $scratch)" || bad "--init: step 1 as from scratch"

# Errors: usage exits 2, bad data 1; nothing is written.
check "neither --preset nor --data" 2 'qkv: error: .*--preset' -- train --out "$tmp/x1"
check "bad --mix" 2 "qkv: error: --mix: 'bogus=1'" -- train "${small[@]}" --mix bogus=1 --out "$tmp/x2"
echo '{"model_type": "gpt2", "n_embd": ' >"$tmp/broken.json"
check "--config that is not JSON" 1 "qkv: error: .*broken.json: not a JSON object" -- train --data "$fx/../README.md" --config "$tmp/broken.json" --out "$tmp/x3"
check "--init missing" 1 "qkv: error: .*$tmp/nowhere" -- train "${small[@]}" --init "$tmp/nowhere" --out "$tmp/x4"
check "--init of another shape" 1 "qkv: error: .*--init's shape" -- train --preset induction --steps 2 --init "$tmp/a" --out "$tmp/x5"
for d in x1 x2 x3 x4 x5; do
  [ ! -e "$tmp/$d/model.safetensors" ] && ok "$d: no model written" || bad "$d: a model was written"
done

# --data: a user's text, byte tokenizer, a model shape from config.json.
printf 'the cat sat on the mat. %.0s' $(seq 200) >"$tmp/text.txt"
"$qkv" train --data "$tmp/text.txt" --config "$tmp/a/config.json" --steps 20 --batch 4 --seq-len 32 --threads 1 --out "$tmp/t" >"$tmp/t.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ -s "$tmp/t/model.safetensors" ] && ok "--data: trains on text" || { bad "--data: exit $rc"; tail -3 "$tmp/t.out"; }
exit $fail
