#!/usr/bin/env bash
# Malformed input through the CLI, end to end (docs/robustness.md): exit 1 for bad data, 2 for bad usage,
# 0 for success; on error exactly one line `qkv: error: ...` on stderr naming the file, tensor or argument,
# nothing on stdout, and no partial output file. Malformed checkpoints come from the committed fuzz seeds
# (fuzz/corpus/, made by fuzz/make_corpus.py) and from edits of the reference fixtures.
# Usage: robustness_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1 src=$2
fx=$src/tests/reference/fixtures
seeds=$src/fuzz/corpus
tmp=$(mktemp -d)
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
source "$(dirname "$0")/lib.sh"

# expect NAME EXIT PATTERN -- ARGS...   (PATTERN: extended regex the stderr line must match)
expect() {
  local name=$1 want=$2 pattern=$3; shift 4
  local out err rc
  out=$(timeout 20 "$qkv" "$@" 2>"$tmp/stderr"); rc=$?
  err=$(cat "$tmp/stderr")
  if [ "$rc" -ne "$want" ]; then
    bad "$name: exit $rc, expected $want"; echo "$err" | head -5; return
  fi
  if [ "$want" -ne 0 ]; then
    if [ -n "$out" ]; then bad "$name: wrote to stdout on error: $(head -c 200 <<<"$out")"; return; fi
    local first lines
    first=$(head -n1 <<<"$err")
    lines=$(grep -c '' <<<"$err")
    if ! grep -qE -- '^qkv: error: ' <<<"$first"; then bad "$name: stderr is not 'qkv: error: ...': $err"; return; fi
    # Data errors are one line; a command-line parse error adds "Run 'qkv --help' for usage."
    if [ "$want" -eq 1 ] && [ "$lines" -ne 1 ]; then bad "$name: $lines lines on stderr, expected 1:"; echo "$err"; return; fi
    if ! grep -qE -- "$pattern" <<<"$first"; then bad "$name: stderr lacks /$pattern/: $first"; return; fi
  elif ! grep -qE -- "$pattern" <<<"$out"; then
    bad "$name: stdout lacks /$pattern/"; echo "$out" | head -5; return
  fi
  ok "$name"
}
# no_leftovers NAME DIR [ALLOWED...]: DIR holds nothing but ALLOWED (no temporaries, no partial files)
no_leftovers() {
  local name=$1 dir=$2; shift 2
  local left
  left=$(ls -A "$dir" 2>/dev/null | grep -vxF -f <(printf '%s\n' "$@" "") || true)
  if [ -n "$left" ]; then bad "$name: left behind in $dir: $(tr '\n' ' ' <<<"$left")"; return; fi
  ok "$name: nothing left behind"
}
st() {  # st FILE: a .safetensors copy of a seed under $tmp, printed
  cp "$seeds/$1" "$tmp/$2.safetensors"; echo "$tmp/$2.safetensors"
}
le64() { printf "$(printf '\\x%02x' $(( $1 & 255 )) $(( ($1 >> 8) & 255 )) $(( ($1 >> 16) & 255 )) $(( ($1 >> 24) & 255 )) 0 0 0 0)"; }

# ---- success, for contrast: exit 0, output on stdout ----
expect ok-info 0 'parameters' -- info --model "$fx/tiny"
expect ok-seed 0 'parameters' -- info --model "$(st model_safetensors/ok_full ok)"

# ---- safetensors: every malformed header and data layout is exit 1 naming the file ----
: >"$tmp/empty.safetensors"
expect st-empty 1 "empty.safetensors: file is 0 bytes, expected at least 8" -- info --model "$tmp/empty.safetensors"
printf 'abc' >"$tmp/tiny.safetensors"
expect st-tiny 1 "tiny.safetensors: file is 3 bytes" -- info --model "$tmp/tiny.safetensors"
expect st-len-past-end 1 'header length is 1000 bytes, but only 2 bytes follow' -- info --model "$(st safetensors/bad_len_past_end a)"
expect st-len-2-63 1 'header length is 9223372036854775808 bytes, expected at most 100000000' -- info --model "$(st safetensors/bad_len_2_63 b)"
expect st-not-utf8 1 'header is not valid UTF-8' -- info --model "$(st safetensors/bad_not_utf8 c)"
expect st-not-json 1 'header is not valid JSON' -- info --model "$(st safetensors/bad_not_json d)"
expect st-not-object 1 "header must be a JSON object starting with '\{', found byte '\['" -- info --model "$(st safetensors/bad_not_object e)"
expect st-dtype 1 'tensor "a": unknown dtype "F12", expected F32, F16 or BF16' -- info --model "$(st safetensors/bad_dtype f)"
expect st-past-end 1 'tensor "a": data_offsets \[0, 8\] reach past the end of the data section, which is 4 bytes' -- info --model "$(st safetensors/bad_past_end g)"
expect st-overlap 1 'tensor "b": data_offsets \[4, 12\] overlap tensor "a"' -- info --model "$(st safetensors/bad_overlap h)"
expect st-hole 1 'tensor "b": data_offsets \[8, 12\] leave a hole' -- info --model "$(st safetensors/bad_hole i)"
expect st-shape-bytes 1 'span 8 bytes, expected 12 \(shape \[3\] of F32\)' -- info --model "$(st safetensors/bad_shape_bytes j)"
expect st-negative 1 'tensor "a": shape\[0\] is number -1, expected a non-negative integer' -- info --model "$(st safetensors/bad_negative_shape k)"
expect st-overflow 1 'shape \[4294967296, 4294967296\] of F32 overflows' -- info --model "$(st safetensors/bad_overflow_shape l)"
expect st-trailing 1 '4 trailing bytes after tensor "a"' -- info --model "$(st safetensors/bad_trailing m)"
head -c -3 "$fx/tiny/model.safetensors" >"$tmp/trunc.safetensors"
cp "$fx/tiny/config.json" "$tmp/config.json"
expect st-truncated 1 'trunc.safetensors: tensor "[^"]+": data_offsets .* reach past the end of the data section' -- info --model "$tmp/trunc.safetensors"
rm "$tmp/config.json"

# ---- the checkpoint against GPT-2's table and its config ----
expect missing-tensor 1 'missing_tensor.safetensors: tensor h.0.attn.c_proj.weight is missing \(expected shape \[4, 4\]' -- info --model "$(st model_safetensors/bad_missing_tensor missing_tensor)"
expect shape-vs-config 1 'tensor h.0.attn.c_attn.weight has shape \[12, 4\], expected \[4, 12\] from the config' -- info --model "$(st model_safetensors/bad_shape_vs_config shape)"
expect unexpected-tensor 1 'unexpected tensor h.7.foo \[2\]' -- info --model "$(st model_safetensors/bad_unexpected_tensor unexpected)"
expect no-config 1 'no_config.safetensors: no config' -- info --model "$(st model_safetensors/bad_no_config no_config)"
expect nan 1 'nan.safetensors: tensor h.0.attn.c_attn.bias holds NaN at flat index 0' -- info --model "$(st model_safetensors/bad_nan nan)"
expect inf 1 'inf.safetensors: tensor wte.weight holds Inf at flat index 0' -- info --model "$(st model_safetensors/bad_inf inf)"
# A config claiming a model far larger than the file: rejected from the file's tensors, not by trying
# to allocate what the config claims (which is "out of memory", or an ASan abort, without the file's name).
huge=$tmp/huge
mkdir -p "$huge"
cp "$fx/tiny/model.safetensors" "$huge/"
printf '{"vocab_size": 16777216, "n_positions": 1048576, "n_embd": 65536, "n_layer": 1024, "n_head": 1}' >"$huge/config.json"
expect huge-config 1 "huge/model.safetensors: tensor wte.weight" -- info --model "$huge"

# ---- config.json ----
mkcfg() {  # mkcfg NAME CONTENT: a model directory with the tiny weights and this config.json
  mkdir -p "$tmp/$1"; cp "$fx/tiny/model.safetensors" "$tmp/$1/"; printf '%s' "$2" >"$tmp/$1/config.json"; echo "$tmp/$1"
}
expect cfg-empty 1 'cfg_empty/config.json: not valid JSON' -- info --model "$(mkcfg cfg_empty '')"
expect cfg-not-json 1 'cfg_not_json/config.json: not valid JSON' -- info --model "$(mkcfg cfg_not_json '{"n_embd": 24,')"
expect cfg-not-object 1 'config: expected a JSON object, found array' -- info --model "$(mkcfg cfg_array '[24]')"
expect cfg-wrong-type 1 'config key "n_embd": expected an integer, found string "24"' -- info --model "$(mkcfg cfg_type '{"n_embd": "24"}')"
expect cfg-heads 1 'cfg_heads/config.json: n_head 5 does not divide n_embd 24' -- info --model "$(mkcfg cfg_heads '{"n_embd": 24, "n_head": 5}')"
expect cfg-range 1 'n_layer is 0, expected 1 .. 1024' -- info --model "$(mkcfg cfg_range '{"n_layer": 0}')"
expect cfg-vs-weights 1 'cfg_small/model.safetensors: tensor wte.weight has shape \[101, 24\], expected \[101, 12\]' -- info --model "$(mkcfg cfg_small '{"vocab_size": 101, "n_positions": 16, "n_embd": 12, "n_layer": 2, "n_head": 3}')"

# ---- llm.c .bin ----
bin() { cp "$seeds/llmc/$1" "$tmp/$1.bin"; echo "$tmp/$1.bin"; }
: >"$tmp/empty.bin"
expect llmc-empty 1 'empty.bin: file is 0 bytes, expected at least 1024' -- info --model "$tmp/empty.bin"
expect llmc-magic 1 'bad_magic.bin: bad magic 12345, expected 20240326' -- info --model "$(bin bad_magic)"
expect llmc-version 1 'bad_version.bin: unknown version 4, expected 3 \(fp32\) or 5 \(bf16\)' -- info --model "$(bin bad_version)"
expect llmc-zero-heads 1 'bad_zero_heads.bin: header\[5\] num_heads is 0, expected a positive value' -- info --model "$(bin bad_zero_heads)"
expect llmc-truncated 1 'bad_truncated.bin: file is [0-9]+ bytes, expected [0-9]+ .*truncated' -- info --model "$(bin bad_truncated)"
expect llmc-trailing 1 'bad_trailing.bin: .*4 trailing bytes' -- info --model "$(bin bad_trailing)"
expect llmc-huge 1 'bad_huge_dims.bin: ' -- info --model "$(bin bad_huge_dims)"
expect llmc-ok 0 'llm.c checkpoint, version 3' -- info --model "$(bin ok_v3)"

# ---- not a file, no file, unknown kind of file ----
expect missing 1 "nope.safetensors: no such file or directory" -- info --model "$tmp/nope.safetensors"
mkdir -p "$tmp/adir.safetensors/x"
expect dir-as-model 1 'adir.safetensors: a model directory needs model.safetensors' -- info --model "$tmp/adir.safetensors"
mkfifo "$tmp/fifo.safetensors" "$tmp/fifo.bin"
expect fifo-safetensors 1 'fifo.safetensors: not a regular file' -- info --model "$tmp/fifo.safetensors"
expect fifo-llmc 1 'fifo.bin: not a regular file' -- info --model "$tmp/fifo.bin"
mkdir -p "$tmp/fifo_cfg"; cp "$fx/tiny/model.safetensors" "$tmp/fifo_cfg/"; mkfifo "$tmp/fifo_cfg/config.json"
expect fifo-config 1 'fifo_cfg/config.json: not a regular file' -- info --model "$tmp/fifo_cfg"
printf 'x' >"$tmp/model.txt"
expect unknown-format 2 'model.txt: unknown model format' -- info --model "$tmp/model.txt"

# ---- token input ----
expect id-past-vocab 2 '--tokens: id 101 at position 1 is outside the vocabulary \[0, 101\)' -- run --model "$fx/tiny" --tokens 3,101
expect id-negative 2 '--tokens: id -1 at position 0 is outside the vocabulary' -- run --model "$fx/tiny" --tokens -1
expect id-not-int 2 "--tokens: '2\\.5(00000)?' is not an integer" -- run --model "$fx/tiny" --tokens 2.5
expect id-not-number 2 "--tokens: 'x' is not a finite number" -- run --model "$fx/tiny" --tokens 1,x
expect empty-input 2 'no input: give --text or --tokens' -- run --model "$fx/tiny"
expect empty-tokens 2 'no input: give --text or --tokens' -- run --model "$fx/tiny" --tokens ''
expect too-many-tokens 2 'the input is 17 tokens but the model has 16 positions' -- run --model "$fx/tiny" --tokens 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1
expect bad-option 2 'unknown|extra|not expected|The following argument' -- run --model "$fx/tiny" --no-such-option
expect bad-top 2 '--top' -- run --model "$fx/tiny" --tokens 1 --top 0
expect bad-command 2 '' -- no-such-command

# A model with a tokenizer beside it (the committed GPT-2 subset in fuzz/data/tokenizer).
tok=$tmp/withtok
expect init-with-tokenizer 0 'wrote' -- init --out "$tok" --preset tiny --vocab-size 3256 --tokenizer "$src/fuzz/data/tokenizer"
expect tokenize-ok 0 '"ids": \[' -- tokenize --model "$tok" --json 'Hello world'
expect tokenize-empty 2 'tokenize: give a TEXT or --file' -- tokenize --model "$tok" ''
expect text-empty-after-tokenization 2 'no input|empty' -- run --model "$tok" ''
expect tokenize-missing-file 1 'nope.txt' -- tokenize --model "$tok" --file "$tmp/nope.txt"
mkdir -p "$tmp/textdir"
expect tokenize-dir-as-file 1 'textdir' -- tokenize --model "$tok" --file "$tmp/textdir"
mkfifo "$tmp/text.fifo"
expect tokenize-fifo-as-file 1 'text.fifo' -- tokenize --model "$tok" --file "$tmp/text.fifo"

# ---- output: unwritable or full directories leave nothing behind ----
echo file >"$tmp/afile"
expect out-under-a-file 1 'afile/sub: cannot create the output directory' -- dump --model "$fx/tiny" --tokens 3 --out "$tmp/afile/sub"
ro=$tmp/ro full=$tmp/full
mkdir -p "$ro" "$full"
if [ "$(id -u)" -eq 0 ] && mount -t tmpfs -o size=16k,mode=0755 tmpfs "$full" 2>/dev/null; then
  mounts+=("$full")
  mount -t tmpfs -o ro tmpfs "$ro" 2>/dev/null && mounts+=("$ro")
  # dump: tokens.npy and the first arrays fit in 16 KiB, then the file system is full.
  expect dump-full 1 "full/d/[^ ]+\.npy: write failed: No space left on device" -- dump --model "$fx/tiny" --tokens 3,57,14,3,57,14,3,57,14 --out "$full/d"
  no_leftovers dump-full-no-temporaries "$full/d" $(cd "$full/d" 2>/dev/null && ls | grep -v '^\.' )
  no_leftovers dump-full-no-partial-set "$full/d"
  rm -rf "${full:?}"/*
  expect init-full 1 "full/m/model.safetensors: write failed: No space left on device" -- init --out "$full/m" --preset tiny
  no_leftovers init-full-no-partial-model "$full/m"
  # 80 KiB: config.json and model.safetensors fit, the tokenizer's vocab.json does not.
  full2=$tmp/full2; mkdir -p "$full2"
  if mount -t tmpfs -o size=80k tmpfs "$full2" 2>/dev/null; then
    mounts+=("$full2")
    expect tokenizer-write-full 1 'full2/t/vocab.json.*No space left on device' -- init --out "$full2/t" --preset tiny --n-embd 4 --n-head 1 --n-layer 1 --vocab-size 3256 --n-positions 4 --tokenizer "$src/fuzz/data/tokenizer"
    no_leftovers tokenizer-write-full-nothing-left "$full2/t"
  fi
  if grep -q " $ro " /proc/mounts; then
    expect dump-readonly 1 "ro/d: cannot create the output directory" -- dump --model "$fx/tiny" --tokens 3 --out "$ro/d"
    expect dump-readonly-file 1 "ro/tokens.npy: cannot write" -- dump --model "$fx/tiny" --tokens 3 --out "$ro"
    no_leftovers dump-readonly-nothing-left "$ro"
  fi
else
  echo "skip full/read-only file system checks: not root or cannot mount tmpfs (covered by the unit tests" \
       "AtomicFile.WriteErrorsAreReported (/dev/full) and NpyWrite.UnwritableDirectoryLeavesNoFile)"
  chmod 555 "$ro"
  if ! touch "$ro/probe" 2>/dev/null; then
    expect dump-readonly-file 1 "ro/tokens.npy: cannot write" -- dump --model "$fx/tiny" --tokens 3 --out "$ro"
    no_leftovers dump-readonly-nothing-left "$ro"
  fi
fi

exit $fail
