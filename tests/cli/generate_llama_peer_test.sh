#!/usr/bin/env bash
# qkv generate's greedy tokens on f32 GGUF files = llama.cpp's (node-llama-cpp 3.21.1's prebuilt CPU library,
# tests/gguf/llama), on random checkpoints of the families llama.cpp runs from qkv convert's files:
# GPT-2, Llama, Qwen2, Gemma, Gemma 2, and Mistral within its window (llama.cpp's `llama` architecture
# ignores a sliding window, docs/gguf.md). Phi-3 is left out: this llama.cpp refuses the 256-token vocabulary
# ("error loading model vocabulary: _Map_base::at"). QKV_LLAMA_PEER=0 skips (no npm registry);
# QKV_LLAMA_PEER_DIR says where npm installs it (default SOURCE_DIR/build/llama-peer).
# Usage: generate_llama_peer_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
test_label=llama-peer
if [ "${QKV_LLAMA_PEER:-1}" = 0 ] || ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "skip: QKV_LLAMA_PEER=0, or no node/npm"
  exit 0
fi
dest=${QKV_LLAMA_PEER_DIR:-$src/build/llama-peer}  # shared with llama_peer_test.sh: one lock, one install
peer=$src/tests/gguf/llama
# Only the linux-x64 CPU binaries (no CUDA/Vulkan builds), and no install script (it would try to build).
bash "$src/tests/npm_ci.sh" "$peer" "$dest" node-llama-cpp/package.json --omit=optional --ignore-scripts ||
  { bad "npm ci of node-llama-cpp into $dest failed"; exit 1; }
cp "$peer/greedy.mjs" "$dest/greedy.mjs"

# A byte-level BPE tokenizer.json (the bundled models' 256 byte tokens, no merges), for the families whose
# GGUF tokenizer qkv convert takes from a tokenizer.json; GPT-2 takes vocab.json + merges.txt.
/usr/bin/python3 - "$src/models/induction/vocab.json" "$tmp/tokenizer.json" <<'PY'
import json, sys
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
json.dump({"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": bl, "post_processor": None,
           "decoder": bl, "model": {"type": "BPE", "vocab": json.load(open(sys.argv[1])), "merges": []}},
          open(sys.argv[2], "w"))
PY
ids=5,6,7,8,9,10
for spec in gpt2:20:0.2 llama:20:0.2 qwen2:20:0.2 gemma:20:0.2 gemma2:20:0.02 mistral:10:0.2; do
  IFS=: read -r arch n range <<<"$spec"
  "$qkv" init --arch "$arch" --preset tiny --out "$tmp/$arch" --set vocab_size=256 --set initializer_range="$range" >/dev/null 2>&1 ||
    { bad "$arch: init"; continue; }
  if [ "$arch" = gpt2 ]; then cp "$src/models/induction/vocab.json" "$src/models/induction/merges.txt" "$tmp/$arch/"
  else cp "$tmp/tokenizer.json" "$tmp/$arch/"; fi
  "$qkv" convert --type f32 "$tmp/$arch" "$tmp/$arch.gguf" >/dev/null 2>&1 || { bad "$arch: convert"; continue; }
  a=$("$qkv" generate --model "$tmp/$arch.gguf" --tokens $ids --max-new-tokens "$n" --json | tr -d ' \n' | grep -o '"tokens":\[[0-9,]*\]')
  b=$(cd "$dest" && timeout 300 node greedy.mjs "$tmp/$arch.gguf" $ids "$n" 2>"$tmp/$arch.err" | tr -d ' \n')
  distinct=$(grep -o '[0-9]\+' <<<"$a" | sort -u | wc -l)
  if [ -n "$a" ] && [ "{$a}" = "$b" ] && [ "$distinct" -ge 3 ]; then ok "$arch: $n greedy tokens = llama.cpp's"
  else bad "$arch: qkv $a, llama.cpp $b ($distinct distinct)"; head -5 "$tmp/$arch.err"; fi
done
exit $fail
