#!/usr/bin/env bash
# qkv info / tokenize / run / dump / init as a user runs them, on the fixtures and on a GPT-2-small-shaped
# random checkpoint written (and deleted) here. Usage: model_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1 src=$2
fx=$src/tests/reference/fixtures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
check info-tiny 0 'parameters  17,304' -- info --model "$fx/tiny"
check info-llmc 0 'llm.c checkpoint, version 3' -- info --model "$fx/tiny.bin"
check info-json 0 '"parameters": 17304' -- info --model "$fx/tiny_prefixed" --json
check run-top 0 '^1 ' -- run --model "$fx/tiny" --tokens 3,57,14 --top 3
check dump 0 'wrote 33 arrays' -- dump --model "$fx/tiny" --tokens 3,57,14 --out "$tmp/dump"
[ -f "$tmp/dump/blocks.1.attn.hook_pattern.npy" ] && [ -f "$tmp/dump/blocks.1.mlp.hook_post.npy" ] && [ -z "$(ls "$tmp/dump" | grep -v '\.npy$')" ] || bad "dump files"
check dump-layers 0 'wrote 18 arrays' -- dump --model "$fx/tiny" --tokens 3,57 --out "$tmp/d2" --layers 1
check bad-token 2 '^qkv: error: --tokens: id 101 at position 1 is outside the vocabulary \[0, 101\)' -- run --model "$fx/tiny" --tokens 3,101
check too-long 2 'has 16 positions' -- run --model "$fx/tiny" --tokens 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1
check no-tokenizer 2 'has no tokenizer' -- run --model "$fx/tiny" "hello"
check missing-model 1 "^qkv: error: $tmp/nope: no such file" -- info --model "$tmp/nope"
check bad-layer 2 'layer 7 is outside' -- dump --model "$fx/tiny" --tokens 3 --out "$tmp/d3" --layers 7
printf 'not a model' > "$tmp/x.bin"
check bad-llmc 1 "^qkv: error: $tmp/x.bin" -- info --model "$tmp/x.bin"
echo file > "$tmp/afile"
check unwritable-out 1 '^qkv: error: ' -- dump --model "$fx/tiny" --tokens 3 --out "$tmp/afile/sub"
# GPT-2 small's shapes: 124,439,808 parameters, with GPT-2's tokenizer beside it when shared/ has it.
tokdir=$src/../shared/gpt2-tokenizer
tokarg=(); [ -f "$tokdir/encoder.json" ] && tokarg=(--tokenizer "$tokdir")
check init-small 0 'wrote .*124439808 parameters' -- init --out "$tmp/small" "${tokarg[@]}"
check info-small 0 'parameters  124,439,808' -- info --model "$tmp/small"
if [ ${#tokarg[@]} -gt 0 ]; then
  check tokenize 0 '"ids": \[' -- tokenize --model "$tmp/small" "Hello world" --json
  check tokenize-ids 0 '15496' -- tokenize --model "$tmp/small" "Hello world"
  check run-text 0 'next token after 2 tokens' -- run --model "$tmp/small" "Hello world" --top 2
fi
rm -rf "$tmp/small"
exit $fail
