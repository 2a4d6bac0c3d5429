#!/usr/bin/env bash
# A small test model for the web tests: GPT-2's tiny preset (2 layers × 4 heads, context 128) with the
# byte-level tokenizer (256 tokens, id = byte) written beside it. Usage: make_model.sh QKV_BINARY OUT_DIR
set -euo pipefail
qkv=$1 out=$2
tok=$(mktemp -d)
trap 'rm -rf "$tok"' EXIT
node -e '
const fs = require("fs"), dir = process.argv[1];
const bs = [];
for (let b = 33; b <= 126; b++) bs.push(b);
for (let b = 161; b <= 172; b++) bs.push(b);
for (let b = 174; b <= 255; b++) bs.push(b);
const cs = bs.slice();
let n = 0;
for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
const vocab = {};
bs.map((b, i) => [b, String.fromCodePoint(cs[i])]).sort((x, y) => x[0] - y[0]).forEach(([b, s]) => { vocab[s] = b; });
fs.writeFileSync(dir + "/vocab.json", JSON.stringify(vocab));
fs.writeFileSync(dir + "/merges.txt", "#version: 0.2\n");
' "$tok"
"$qkv" init --out "$out" --preset tiny --tokenizer "$tok" --seed 7 >/dev/null
