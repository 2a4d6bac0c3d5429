#!/usr/bin/env bash
# A checkpoint costs its size once (docs/performance.md, "Memory"): the peak RSS of `qkv run` over 1024
# tokens stays within 1.15 × the file + 50 MB, for a GPT-2-shaped checkpoint of 2 layers (50257-token
# vocabulary, d = 768: a 216 MB f32 file) as aligned f32 safetensors, as f32 and bf16 safetensors whose
# header length is odd (every tensor unaligned: copied piece by piece, each piece's mapped pages
# released), and as a q8_0 GGUF (58 MB: the 1024 tokens' activations take most of its allowance). Before
# the fixes the unaligned f32 file peaked at twice its size and the q8_0 file at 2.5 ×: this fails then.
# Skipped under AddressSanitizer, whose shadow memory and quarantine make RSS meaningless.
# Usage: memory_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
test_label=memory
py=/usr/bin/python3

if grep -qa '__asan_init' "$qkv"; then
  ok "skipped: $qkv is built with AddressSanitizer (RSS means nothing there)"
  exit 0
fi
[ -x /usr/bin/time ] || { bad "/usr/bin/time is missing (apt-get install time)"; exit 1; }

"$qkv" init --arch gpt2 --preset small --set n_layer=2 --out "$tmp/f32" >/dev/null 2>&1 || { bad "qkv init failed"; exit 1; }
"$qkv" init --arch gpt2 --preset small --set n_layer=2 --dtype bf16 --out "$tmp/bf16" >/dev/null 2>&1 || { bad "qkv init --dtype bf16 failed"; exit 1; }
"$qkv" convert "$tmp/f32" "$tmp/q8_0.gguf" --type q8_0 >/dev/null 2>&1 || { bad "qkv convert --type q8_0 failed"; exit 1; }
# The same tensors behind a header one byte longer than a multiple of 8 (JSON allows the trailing space).
for d in f32 bf16; do
  $py - "$tmp/$d" "$tmp/${d}_odd" <<'EOF' || bad "could not write the unaligned copy of $d"
import os, shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst)
shutil.copy(os.path.join(src, "config.json"), dst)
with open(os.path.join(src, "model.safetensors"), "rb") as f, open(os.path.join(dst, "model.safetensors"), "wb") as g:
    n = struct.unpack("<Q", f.read(8))[0]
    h = f.read(n) + b" "
    assert len(h) % 2 == 1
    g.write(struct.pack("<Q", len(h)))
    g.write(h)
    shutil.copyfileobj(f, g, 1 << 24)
EOF
done
ids=$($py -c "print(','.join(str(i * 7919 % 50257) for i in range(1024)))")

for m in f32 f32_odd bf16_odd q8_0.gguf; do
  f=$tmp/$m
  [ -d "$f" ] && file=$f/model.safetensors || file=$f
  bytes=$(stat -c %s "$file")
  /usr/bin/time -f '%M' -o "$tmp/rss" "$qkv" run --model "$f" --tokens "$ids" >/dev/null 2>"$tmp/err" ||
    { bad "$m: qkv run failed"; cat "$tmp/err"; continue; }
  kb=$(tail -1 "$tmp/rss")
  read -r peak limit verdict < <(awk -v b="$bytes" -v k="$kb" 'BEGIN {
    peak = k * 1024 / 1e6; limit = 1.15 * b / 1e6 + 50; printf "%.1f %.1f %s\n", peak, limit, peak <= limit ? "ok" : "over" }')
  msg="$m ($(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }') MB): peak RSS $peak MB over 1024 tokens, limit 1.15 × file + 50 = $limit MB"
  [ "$verdict" = ok ] && ok "$msg" || bad "$msg"
done
exit $fail
