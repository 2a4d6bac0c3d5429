#!/usr/bin/env bash
# GGUF as a user meets it: qkv convert (every --type) of a GPT-2 with a tokenizer, then info / run /
# tokenize / dump / tour on the .gguf — f32 files give the Hugging Face directory's outputs byte for byte —
# qkv gguf-info, the error exits, and the independent parser (@huggingface/gguf, npm, pinned in
# tests/gguf/peer) agreeing with qkv on every file qkv wrote and every valid fuzz seed.
# Usage: gguf_test.sh QKV_BINARY SOURCE_DIR   (QKV_GGUF_PEER=0 skips the npm part)
set -uo pipefail
qkv=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") src=$2
fx=$src/tests/reference/fixtures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
test_label=gguf

# A GPT-2 whose rows are whole K-quant blocks (n_embd 256), with the 3,000-merge GPT-2 tokenizer subset.
check init 0 'wrote' -- init --out "$tmp/hf" --preset tiny --n-embd 256 --n-layer 1 --vocab-size 3300 \
  --n-positions 32 --tokenizer "$src/fuzz/data/tokenizer" --seed 4
ntok=$("$qkv" info --model "$tmp/hf" | sed -n 's/^tokenizer *\([0-9]*\) tokens$/\1/p')
[ -n "$ntok" ] && ok "the source model has a $ntok-token tokenizer" || bad "no tokenizer beside $tmp/hf"
text="The quick brown fox jumps over the lazy dog, and the dog sleeps."
for t in f32 f16 bf16 q8_0 q4_0 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs q4_1 q5_0 q5_1; do
  check "convert-$t" 0 "wrote $tmp/$t.gguf .*tokenizer $ntok tokens" -- convert --to gguf --type "$t" "$tmp/hf" "$tmp/$t.gguf"
done
check convert-json 0 '"type": "Q4_K"' -- convert --type q4_k "$tmp/hf" "$tmp/q4_k_json.gguf" --json
check q4k-types 0 'blk.0.attn_qkv.weight +Q4_K' -- gguf-info "$tmp/q4_k.gguf"
check q4k-norm-f32 0 'blk.0.attn_norm.weight +F32' -- gguf-info "$tmp/q4_k.gguf"
check info 0 'GGUF v3, gpt2, Q6_K; tensors .*Q6_K' -- info --model "$tmp/q6_k.gguf"
check q3k-types 0 'blk.0.ffn_up.weight +Q3_K' -- gguf-info "$tmp/q3_k.gguf"
check q2k-run 0 '"token"' -- run --model "$tmp/q2_k.gguf" "$text" --top 3 --json
check info-tokenizer 0 "tokenizer   $ntok tokens" -- info --model "$tmp/q8_0.gguf"
check gguf-info-json 0 '"key": "tokenizer.ggml.merges"' -- gguf-info "$tmp/f32.gguf" --json

# f32: the same outputs as the Hugging Face directory, byte for byte.
same() {  # same NAME ARGS...: `qkv ARGS` on the HF dir and on f32.gguf print the same
  local name=$1; shift
  local a b
  a=$("$qkv" "$@" --model "$tmp/hf" 2>&1) b=$("$qkv" "$@" --model "$tmp/f32.gguf" 2>&1)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "f32 $name equals the HF directory's" || { bad "f32 $name differs"; diff <(echo "$a") <(echo "$b") | head -5; }
}
same run run "$text" --top 5 --json
same tokenize tokenize "$text" --json
"$qkv" dump --model "$tmp/hf" --text "$text" --out "$tmp/d_hf" >/dev/null 2>&1
"$qkv" dump --model "$tmp/f32.gguf" --text "$text" --out "$tmp/d_gguf" >/dev/null 2>&1
n=$(ls "$tmp/d_hf" 2>/dev/null | wc -l)
[ "$n" -gt 10 ] && diff -r "$tmp/d_hf" "$tmp/d_gguf" >/dev/null && ok "f32 dump: $n activation arrays byte-identical" || bad "f32 dump differs ($n arrays)"
# Quantized: they run, and the next-token distribution moves (by an amount tests/model/gguf_family_gpt2_test.cpp bounds).
for t in q8_0 q4_k; do
  check "run-$t" 0 '"top"|"id"' -- run --model "$tmp/$t.gguf" "$text" --top 3 --json
done

# tour on a fixture model converted to GGUF: the same claims and measurements as from its directory.
check convert-fixture 0 'wrote' -- convert --type f32 "$fx/tiny" "$tmp/tiny.gguf"
"$qkv" tour --model "$fx/tiny" --out "$tmp/tour_a" --json --quiet >"$tmp/tour_a.json" 2>/dev/null
"$qkv" tour --model "$tmp/tiny.gguf" --out "$tmp/tour_b" --json --quiet >"$tmp/tour_b.json" 2>/dev/null
# The one difference: the weight's stored shape (GGUF keeps c_attn as [3d, d], llama.cpp's layout).
/usr/bin/python3 - "$tmp/tour_a.json" "$tmp/tour_b.json" <<'PY' && ok "tour: same claims and measurements from .gguf (c_attn stored transposed)" || bad "tour differs"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
def shapes(r):
    out = []
    for c in r["claims"]:
        s = c.get("measured", {}).pop("weight_shape", None) if isinstance(c.get("measured"), dict) else None
        if s:
            out.append(s)
            c["summary"] = c.get("summary", "").replace(s, "SHAPE")
    return out
# kv_cache_exact's one-token steps go through gemv, whose summation order follows the stored layout
# (transposed in the GGUF): its measured differences agree to rounding, its verdict exactly.
def steps(r):
    out = []
    for c in r["claims"]:
        if c.get("id") == "kv_cache_exact":
            out.append((c.get("held"), c["measured"]["logits_rel_diff"]))
            c.pop("measured"), c.pop("summary", None)
    return out
ka, kb = steps(a), steps(b)
assert len(ka) == len(kb) == 1 and ka[0][0] == kb[0][0] and abs(ka[0][1] - kb[0][1]) < 1e-6, (ka, kb)
sa, sb = shapes(a), shapes(b)
assert sa and [list(reversed(json.loads(x))) for x in sa] == [json.loads(x) for x in sb], (sa, sb)
assert a["claims"] and a["claims"] == b["claims"], "claims differ"
PY
# The bundled attention-only model, with its byte-level tokenizer.
check convert-bundled 0 'tokenizer 256 tokens' -- convert --type q8_0 "$src/models/induction" "$tmp/ind.gguf"
check run-bundled 0 'next token' -- run --model "$tmp/ind.gguf" "abcabc" --top 2

# quant-effect: the f32 file moves nothing; a q4_k file moves every head's lenses and the next-token distribution.
"$qkv" quant-effect --model "$tmp/f32.gguf" --reference "$tmp/hf" --text "$text" --json >"$tmp/qe0.json" 2>&1
"$qkv" quant-effect --model "$tmp/q4_k.gguf" --reference "$tmp/hf" --text "$text" --json --svg "$tmp/qe.svg" >"$tmp/qe4.json" 2>&1
/usr/bin/python3 - "$tmp/qe0.json" "$tmp/qe4.json" <<'PY' && ok "quant-effect: f32 all zero; q4_k every error in (0, 1) and KL > 0" || bad "quant-effect"
import json, sys
z, q = (json.load(open(p)) for p in sys.argv[1:])
keys = ["q", "k", "v", "scores", "pattern"]
assert all(h[k] == 0 for h in z["heads"] for k in keys) and z["kl_next_token"]["mean"] == 0, "f32 moved"
assert len(q["heads"]) == 4 and all(0 < h[k] < 1 for h in q["heads"] for k in keys), q["heads"]
assert q["kl_next_token"]["mean"] > 0
PY
grep -q '<svg' "$tmp/qe.svg" 2>/dev/null && ok "quant-effect --svg wrote the heatmaps" || bad "quant-effect --svg"
check quant-effect-table 0 'KL\(reference ‖ model\)' -- quant-effect --model "$tmp/q8_0.gguf" --reference "$tmp/hf" --text "$text"
check quant-effect-shape 2 '^qkv: error: --reference .* has another shape' -- quant-effect --model "$tmp/q8_0.gguf" --reference "$fx/tiny" --tokens 1,2

# Errors: usage exits 2, bad data exits 1, each naming the argument or the file.
check bad-type 2 '^qkv: error: --type q8_k' -- convert --type q8_k "$tmp/hf" "$tmp/x.gguf"
check bad-to 2 '^qkv: error: --to onnx' -- convert --to onnx "$tmp/hf" "$tmp/x.gguf"
check bad-ext 2 'must end in .gguf' -- convert "$tmp/hf" "$tmp/x.bin"
check missing-in 1 "^qkv: error: $tmp/nope: no such file" -- convert "$tmp/nope" "$tmp/x.gguf"
[ ! -e "$tmp/x.gguf" ] && ok "no output after a failed convert" || bad "a failed convert left $tmp/x.gguf"
head -c 1000 "$tmp/q8_0.gguf" > "$tmp/cut.gguf"
check truncated 1 "^qkv: error: $tmp/cut.gguf: key 'tokenizer.ggml.tokens': array of [0-9]+ STRING values cannot fit" -- info --model "$tmp/cut.gguf"
printf 'GGUF\004\000\000\000' > "$tmp/v4.gguf"
check bad-version 1 "^qkv: error: $tmp/v4.gguf: GGUF version 4" -- gguf-info "$tmp/v4.gguf"
head -c 300 "$tmp/q8_0.gguf" > "$tmp/cut40.gguf"
check truncated-key 1 "^qkv: error: $tmp/cut40.gguf: tensor count 16 cannot fit in the 276 bytes left" -- info --model "$tmp/cut40.gguf"
cp "$src/fuzz/corpus/gguf/ok_every_tensor_type" "$tmp/x_arch.gguf"
check bad-arch 1 "^qkv: error: $tmp/x_arch.gguf: key 'general.architecture' is 'x'; qkv loads GGUF files of architecture gpt2, llama, qwen2, gemma, gemma2 and phi3" -- info --model "$tmp/x_arch.gguf"
cp "$src/fuzz/corpus/gguf/bad_overlap" "$tmp/overlap.gguf"
check overlap 1 "tensors 'a' .* and 'b' .* overlap" -- info --model "$tmp/overlap.gguf"

# The independent parser.
if [ "${QKV_GGUF_PEER:-1}" = 0 ]; then
  echo "skip @huggingface/gguf (QKV_GGUF_PEER=0)"
elif ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  bad "node and npm are needed for the @huggingface/gguf check (apt-get install -y nodejs npm)"
else
  peer=$src/tests/gguf/peer
  bash "$src/tests/npm_ci.sh" "$peer" "$peer" @huggingface/gguf/package.json || bad "npm ci in $peer failed"
  mkdir -p "$tmp/peer"
  for f in "$tmp"/{f32,f16,bf16,q8_0,q4_0,q2_k,q3_k,q4_k,q5_k,q6_k,iq4_nl,iq4_xs,q4_1,q5_0,q5_1,tiny,ind}.gguf; do cp "$f" "$tmp/peer/"; done
  for f in "$src"/fuzz/corpus/gguf/ok_*; do cp "$f" "$tmp/peer/seed_$(basename "$f").gguf"; done
  out=$(cd "$peer" && node check.mjs "$qkv" "$tmp"/peer/*.gguf 2>&1); rc=$?
  echo "$out" | sed 's/^/     /' | grep -v '^     ok' || true
  n=$(grep -c '^ok' <<<"$out")
  [ $rc -eq 0 ] && ok "@huggingface/gguf $(node -p "require('$peer/node_modules/@huggingface/gguf/package.json').version") agrees with qkv on $n files" || bad "@huggingface/gguf disagrees (exit $rc)"
fi
exit $fail
