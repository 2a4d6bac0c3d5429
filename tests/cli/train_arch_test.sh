#!/usr/bin/env bash
# qkv train --arch as a user runs it: the induction preset on a Llama-shaped model (reduced) writes a Hugging
# Face Llama directory that the other commands load, deterministically; another family trains on text;
# bad arguments exit 2 with `qkv: error:` naming what is wrong, and write nothing.
# Usage: train_arch_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
test_label=train-arch
small=(--preset induction --arch llama --steps 12 --batch 2 --seq-len 32 --eval-every 6 --threads 1)

"$qkv" train "${small[@]}" --out "$tmp/a" >"$tmp/a.out" 2>"$tmp/a.err"
rc=$?
[ $rc -eq 0 ] && ok "reduced llama preset: exit 0" || { bad "reduced llama preset: exit $rc"; cat "$tmp/a.err"; }
for f in model.safetensors config.json vocab.json merges.txt train.csv loss.svg; do
  [ -s "$tmp/a/$f" ] && ok "wrote $f" || bad "no $f"
done
grep -q '"model_type": "llama"' "$tmp/a/config.json" && ok "config.json: model_type llama" || bad "config.json: $(head -c 300 "$tmp/a/config.json")"
grep -q '"num_key_value_heads": 2' "$tmp/a/config.json" && ok "config.json: 2 key/value heads" || bad "config.json lacks num_key_value_heads 2"
head -c 4096 "$tmp/a/model.safetensors" | grep -aq 'model.layers.1.self_attn.k_proj.weight' && ok "Hugging Face Llama tensor names" || bad "no model.layers.1.self_attn.k_proj.weight"
check "info loads it as a Llama" 0 'grouped-query' -- info --model "$tmp/a"
check "run loads it" 0 '' -- run --model "$tmp/a" "abcabc"
"$qkv" train "${small[@]}" --out "$tmp/b" >/dev/null 2>&1
cmp -s "$tmp/a/model.safetensors" "$tmp/b/model.safetensors" && ok "deterministic: two runs identical" || bad "two runs differ"

# Another family on text: the family's tiny config with a byte vocabulary.
printf 'the cat sat on the mat. %.0s' $(seq 100) >"$tmp/text.txt"
"$qkv" train --arch gemma2 --data "$tmp/text.txt" --steps 4 --batch 2 --seq-len 16 --threads 1 --out "$tmp/g" >"$tmp/g.out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ -s "$tmp/g/model.safetensors" ] && ok "--arch gemma2 --data: trains on text" || { bad "--arch gemma2 --data: exit $rc"; tail -3 "$tmp/g.out"; }
check "info loads the gemma2 model" 0 'soft-capped' -- info --model "$tmp/g"

check "unknown family" 2 "qkv: error: --arch: 'bogus' is not a family" -- train --preset induction --arch bogus --out "$tmp/x1"
check "--config of another family" 2 'qkv: error: .*model_type is "llama" but --arch is gemma' -- train --arch gemma --data "$tmp/text.txt" --config "$tmp/a/config.json" --out "$tmp/x2"
check "GPT-2 shape flags with --arch" 2 'qkv: error: --n-embd' -- train "${small[@]}" --n-embd 32 --out "$tmp/x3"
check "--rope-theta without --arch" 2 'qkv: error: --d-ff, --rope-theta' -- train --preset induction --rope-theta 500 --out "$tmp/x4"
for d in x1 x2 x3 x4; do
  [ ! -e "$tmp/$d/model.safetensors" ] && ok "$d: no model written" || bad "$d: a model was written"
done
exit $fail
