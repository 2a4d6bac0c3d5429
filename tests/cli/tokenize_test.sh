#!/usr/bin/env bash
# qkv tokenize on a tokenizer.json as a user runs it: a directory holding only a small SentencePiece-
# style tokenizer (Prepend + Replace normalizer, byte fallback, <s>/</s>, add_bos_token) written here;
# --bos auto|yes|no and what the table and JSON say about it; --decode; --texts; and the errors
# (malformed and unsupported files name the file and the key). Usage: tokenize_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
test_label=tokenize

# vocab: <unk> <s> </s>, the 256 byte tokens <0x00>..<0xFF> (ids 3..258), then ▁ a b h i ▁a ab ▁ab hi ▁hi
tj() {  # tj MODEL_TYPE PRE_TOKENIZER_JSON: a tokenizer.json on stdout
  local v='"<unk>": 0, "<s>": 1, "</s>": 2' i
  for i in $(seq 0 255); do v+=$(printf ', "<0x%02X>": %d' "$i" $((i + 3))); done
  v+=', "▁": 259, "a": 260, "b": 261, "h": 262, "i": 263, "▁a": 264, "ab": 265, "▁ab": 266, "hi": 267, "▁hi": 268'
  cat <<JSON
{"version": "1.0", "truncation": null, "padding": null,
 "added_tokens": [
  {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
  {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
  {"id": 2, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
 "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
 "pre_tokenizer": $2,
 "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
   "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
 "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
 "model": {"type": "$1", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null, "end_of_word_suffix": null,
   "fuse_unk": true, "byte_fallback": true, "vocab": {$v},
   "merges": ["▁ a", "a b", "▁a b", "h i", "▁ hi"]}}
JSON
}
d=$tmp/sp
mkdir -p "$d"
tj BPE null >"$d/tokenizer.json"
echo '{"add_bos_token": true, "add_eos_token": false, "bos_token": "<s>", "eos_token": "</s>", "tokenizer_class": "LlamaTokenizer"}' >"$d/tokenizer_config.json"

check auto-adds-bos 0 'BOS +added <s> \(id 1, as the tokenizer' -- tokenize --model "$d" "ab hi"
check auto-json 0 '"bos_added": true' -- tokenize --model "$d" --json "ab hi"
out=$("$qkv" tokenize --model "$d" --json "ab hi" | tr -d ' \n')
[[ $out == *'"ids":[1,266,268]'* ]] && ok "ids [1, 266, 268] for 'ab hi'" || bad "ids for 'ab hi': $out"
out=$("$qkv" tokenize --model "$d" --bos no --json "ab hi" | tr -d ' \n')
[[ $out == *'"bos_added":false'*'"ids":[266,268]'* ]] && ok "--bos no leaves <s> out" || bad "--bos no: $out"
check bos-no-table 0 'BOS +not added \(--bos no; --bos yes adds <s>\)' -- tokenize --model "$d" --bos no "ab"
out=$("$qkv" tokenize --model "$d" --json "é<s>ab" | tr -d ' \n')
[[ $out == *'"ids":[1,259,198,172,1,266]'* ]] && ok "byte fallback (é = <0xC3><0xA9>) and <s> in the text (the piece after it gets its ▁, as HF's legacy Llama)" || bad "byte fallback / added token: $out"
check decode 0 '^ab hi$' -- tokenize --model "$d" --decode 266,268
check decode-special 0 '^<s> ab hi$' -- tokenize --model "$d" --decode 1,266,268
check decode-bytes 0 '^é$' -- tokenize --model "$d" --decode 259,198,172
check decode-range 2 'token id 999 is outside \[0, 269\)' -- tokenize --model "$d" --decode 1,999
printf '["ab", "", "hi hi"]' >"$tmp/texts.json"
check texts 0 '^\[\{"bos_added":true,"ids":\[1,266\]\},\{"bos_added":true,"ids":\[1\]\},\{"bos_added":true,"ids":\[1,268,268\]\}\]$' -- tokenize --model "$d" --texts "$tmp/texts.json"
printf '["ab", 3]' >"$tmp/bad.json"
check texts-not-string 1 "bad.json: \[1\]: expected a string" -- tokenize --model "$d" --texts "$tmp/bad.json"
check bos-bad-value 2 'bos' -- tokenize --model "$d" --bos maybe "ab"
check invalid-utf8 1 'not valid UTF-8 at byte 1' -- tokenize --model "$d" $'a\xff'

# No add_bos_token and no template: nothing added, and --bos yes has nothing to add.
n=$tmp/nobos
mkdir -p "$n"
tj BPE null | sed 's/"post_processor": {.*/"post_processor": null,/; /"pair": \[\], "special_tokens"/d' >"$n/tokenizer.json"
check no-bos 0 'BOS +not added \(the tokenizer has no BOS token\)' -- tokenize --model "$n" "ab"
check bos-yes-without-bos 2 '^qkv: error: --bos yes: the tokenizer has no BOS token' -- tokenize --model "$n" --bos yes "ab"

# Errors name the file and the key.
u=$tmp/unigram; mkdir -p "$u"; tj Unigram null >"$u/tokenizer.json"
check unsupported-model 1 "^qkv: error: $u/tokenizer.json: model.type: unsupported model type \"Unigram\"" -- tokenize --model "$u" "ab"
w=$tmp/wordpiece-pre; mkdir -p "$w"; tj BPE '{"type": "BertPreTokenizer"}' >"$w/tokenizer.json"
check unsupported-pre-tokenizer 1 "^qkv: error: $w/tokenizer.json: pre_tokenizer.type: unsupported pre-tokenizer \"BertPreTokenizer\"" -- tokenize --model "$w" "ab"
m=$tmp/badmerge; mkdir -p "$m"; tj BPE null | sed 's/"h i", "▁ hi"/"h i", "▁ zz"/' >"$m/tokenizer.json"
check unknown-merge-token 1 "^qkv: error: $m/tokenizer.json: model.merges\[4\]: unknown token, expected a token of model.vocab, found \"zz\"" -- tokenize --model "$m" "ab"
t=$tmp/truncated; mkdir -p "$t"; tj BPE null | head -c 300 >"$t/tokenizer.json"
check truncated-json 1 "^qkv: error: $t/tokenizer.json: not valid JSON" -- tokenize --model "$t" "ab"
c=$tmp/badconfig; mkdir -p "$c"; tj BPE null >"$c/tokenizer.json"; echo '{"add_bos_token": "yes"}' >"$c/tokenizer_config.json"
check bad-config 1 "^qkv: error: $c/tokenizer_config.json: add_bos_token: expected true or false, found the string \"yes\"" -- tokenize --model "$c" "ab"
check no-tokenizer 2 'has no tokenizer beside it' -- tokenize --model "$tmp" "ab"
check missing-dir 1 "^qkv: error: $tmp/nope: no such file or directory" -- tokenize --model "$tmp/nope" "ab"
exit $fail
