#!/usr/bin/env bash
# qkv generate and qkv steer as a user runs them: every family (qkv init --arch), every format (Hugging
# Face directory, a lone .safetensors, llm.c .bin, GGUF f32 and quantized), greedy tokens the same from a
# directory and its f32 GGUF, sampling reproducible by seed, streamed text = the --json text, --stop,
# steering vectors made and used, and bad input as `qkv: error:` with exit 1 or 2.
# Usage: generate_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1 src=$2
fx=$src/tests/reference/fixtures
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
test_label=generate

# a field of qkv generate --json
field() { /usr/bin/python3 -c 'import json,sys; v=json.load(sys.stdin)[sys.argv[1]]; print(",".join(map(str,v)) if isinstance(v,list) else v)' "$1"; }

for arch in gpt2 llama mistral qwen2 gemma gemma2 gpt_neox phi3 gpt_neo; do
  "$qkv" init --arch "$arch" --preset tiny --out "$tmp/$arch" --set initializer_range=0.2 >/dev/null 2>&1 || bad "init $arch"
  out=$("$qkv" generate --model "$tmp/$arch" --tokens 5,6,7,8 --max-new-tokens 12 --json 2>&1)
  n=$(field tokens <<<"$out" | tr ',' '\n' | grep -c .)
  [ "$n" = 12 ] && ok "$arch: 12 new tokens" || { bad "$arch: $n tokens"; echo "$out" | head -5; }
  case $arch in gpt_neox | gpt_neo) continue ;; esac  # no GGUF writer for these two
  "$qkv" convert --type f32 "$tmp/$arch" "$tmp/$arch.gguf" >/dev/null 2>&1 || bad "convert $arch"
  a=$(field tokens <<<"$out") b=$("$qkv" generate --model "$tmp/$arch.gguf" --tokens 5,6,7,8 --max-new-tokens 12 --json | field tokens)
  [ "$a" = "$b" ] && ok "$arch: the f32 GGUF's greedy tokens are the directory's" || bad "$arch gguf: $a vs $b"
done
"$qkv" convert --type q4_k "$tmp/llama" "$tmp/llama.q4_k.gguf" >/dev/null 2>&1
check gguf-q4_k 0 '"tokens_per_second"' -- generate --model "$tmp/llama.q4_k.gguf" --tokens 5,6,7 --max-new-tokens 4 --json
check no-bandwidth 0 '"bandwidth_fraction": null' -- generate --model "$tmp/llama.q4_k.gguf" --tokens 5,6,7 --max-new-tokens 4 --json
check bandwidth 0 '"triad_gb_per_s": [0-9]' -- generate --model "$tmp/llama.q4_k.gguf" --tokens 5,6,7 --max-new-tokens 4 --json --bandwidth
check llmc-bin 0 '"stop_reason": "max_new_tokens"' -- generate --model "$fx/tiny.bin" --tokens 3,57,14 --max-new-tokens 5 --json
check safetensors-file 0 '"prompt_tokens": 3' -- generate --model "$src/models/induction/model.safetensors" --text "abc" --max-new-tokens 3 --json

# The bundled induction model continues a repeated random string by copying it.
ind=$src/models/induction
check induction 0 '^kq8vz3jw' -- generate --model "$ind" --text "xkq8vz3jw|xkq8vz3jw|x" --max-new-tokens 8
streamed=$("$qkv" generate --model "$ind" --text "abcdefgh abcd" --max-new-tokens 20 2>/dev/null)
json_text=$("$qkv" generate --model "$ind" --text "abcdefgh abcd" --max-new-tokens 20 --json | field text)
[ "$streamed" = "$json_text" ] && ok "streamed text = --json text" || bad "streamed '$streamed' vs json '$json_text'"
check stats-line 0 '\[20 new tokens \(max_new_tokens\) after 13; prefill .* ms, decode .* tokens/s\]' -- generate --model "$ind" --text "abcdefgh abcd" --max-new-tokens 20
check stop-text 0 '"text": "[^"]*xy",' -- generate --model "$ind" --text "abxyabxyabxyab" --max-new-tokens 30 --stop xy --json
check stop-reason 0 '"stop_reason": "stop_text"' -- generate --model "$ind" --text "abxyabxyabxyab" --max-new-tokens 30 --stop xy --json

# Sampling: the same seed, the same tokens; another seed, others.
s1=$("$qkv" generate --model "$tmp/llama" --tokens 1,2,3 --max-new-tokens 20 --temperature 1 --top-k 40 --top-p 0.9 --seed 3 --json | field tokens)
s2=$("$qkv" generate --model "$tmp/llama" --tokens 1,2,3 --max-new-tokens 20 --temperature 1 --top-k 40 --top-p 0.9 --seed 3 --json | field tokens)
s3=$("$qkv" generate --model "$tmp/llama" --tokens 1,2,3 --max-new-tokens 20 --temperature 1 --top-k 40 --top-p 0.9 --seed 4 --json | field tokens)
[ "$s1" = "$s2" ] && ok "same seed, same tokens" || bad "seed 3 twice: $s1 vs $s2"
[ "$s1" != "$s3" ] && ok "another seed, other tokens" || bad "seeds 3 and 4 gave $s1"

# Steering: a vector made by qkv steer changes the continuation; coefficient 0 changes nothing.
hook=blocks.1.hook_resid_pre
check steer-make 0 "wrote $tmp/v.npy: $hook, 128 values, norm" -- steer --model "$ind" --positive "aaaa aaaa" "bbbb" --negative "zzzz" "yyyy yyyy" --hook "$hook" --out "$tmp/v.npy"
check steer-json 0 '"width": 64' -- steer --model "$tmp/llama" --positive-tokens 1,2,3 --negative-tokens 4,5 6,7,8 --hook blocks.0.hook_resid_post --out "$tmp/w.npy" --json
plain=$("$qkv" generate --model "$ind" --text "abcdefgh abcd" --max-new-tokens 16 --json | field tokens)
zero=$("$qkv" generate --model "$ind" --text "abcdefgh abcd" --max-new-tokens 16 --steer "$hook:$tmp/v.npy:0" --json | field tokens)
steered=$("$qkv" generate --model "$ind" --text "abcdefgh abcd" --max-new-tokens 16 --steer "$hook:$tmp/v.npy:8" --json | field tokens)
[ "$plain" = "$zero" ] && ok "steering × 0 = no steering" || bad "× 0 changed the tokens"
[ "$plain" != "$steered" ] && ok "steering × 8 changes the continuation" || bad "steering changed nothing"
check steer-echo 0 '"coef": 8' -- generate --model "$ind" --text "hi" --max-new-tokens 2 --steer "$hook:$tmp/v.npy:8" --json

# Many prompts (--prompts / --prompt-ids, one per line, in batches): each line continues as it does alone.
printf 'xkq8vz3jw|xkq8vz3jw|x\nabcdefgh abcd\r\n\n  \nabxyabxyabxyab\n' >"$tmp/prompts.txt"
lines=('xkq8vz3jw|xkq8vz3jw|x' 'abcdefgh abcd' 'abxyabxyabxyab')
seq_field() { /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin)["sequences"]; print("\n".join(",".join(map(str,s["tokens"])) if sys.argv[1]=="tokens" else str(s[sys.argv[1]]) for s in d))' "$1"; }
for bs in 1 2 8; do
  batched=$("$qkv" generate --model "$ind" --prompts "$tmp/prompts.txt" --batch-size $bs --max-new-tokens 12 --temperature 1 --seed 5 --json 2>/dev/null | seq_field tokens)
  alone=$(for l in "${lines[@]}"; do "$qkv" generate --model "$ind" --text "$l" --max-new-tokens 12 --temperature 1 --seed 5 --json | field tokens; done)
  [ -n "$alone" ] && [ "$batched" = "$alone" ] && ok "--prompts --batch-size $bs: every line's sampled tokens are its own run's" || bad "--prompts --batch-size $bs: '$batched' vs '$alone'"
done
check prompts-text 0 '^== 3 \(stop_text\)' -- generate --model "$ind" --prompts "$tmp/prompts.txt" --max-new-tokens 20 --stop xy
check prompts-line 0 '^abxyabxyabxyabxy$' -- generate --model "$ind" --prompts "$tmp/prompts.txt" --max-new-tokens 20 --stop xy
piped=$(printf 'abab\nxyzxyz\n' | "$qkv" generate --model "$ind" --prompts - --max-new-tokens 6 2>/dev/null | grep -v '^==')
[ "$piped" = $'ababababab\nxyzxyzxyzxyz' ] && ok "--prompts - reads stdin" || bad "--prompts -: '$piped'"
check prompts-progress 0 '^generate: 3/3 prompts, [0-9]+ new tokens, .* tokens/s end to end' -- generate --model "$ind" --prompts "$tmp/prompts.txt" --max-new-tokens 4 --batch-size 1
check prompts-stats 0 '\[3 prompts in batches of 2: ' -- generate --model "$ind" --prompts "$tmp/prompts.txt" --max-new-tokens 4 --batch-size 2
printf '5,6,7,8\n9\n1,2\n' >"$tmp/ids.txt"
batched=$("$qkv" generate --model "$tmp/llama" --prompt-ids "$tmp/ids.txt" --batch-size 2 --max-new-tokens 8 --json 2>/dev/null | seq_field tokens)
alone=$(for t in 5,6,7,8 9 1,2; do "$qkv" generate --model "$tmp/llama" --tokens $t --max-new-tokens 8 --json | field tokens; done)
[ "$batched" = "$alone" ] && ok "--prompt-ids: greedy tokens of every line = alone" || bad "--prompt-ids: '$batched' vs '$alone'"
check prompts-ids-text 0 '^9 \| [0-9]+ ' -- generate --model "$tmp/llama" --prompt-ids "$tmp/ids.txt" --max-new-tokens 3
: >"$tmp/empty.txt"
printf '1,2\n3,x\n' >"$tmp/bad-ids.txt"
printf '1,2\n3,99999\n' >"$tmp/big-ids.txt"
check prompts-empty 2 "^qkv: error: --prompts: $tmp/empty.txt has no prompt" -- generate --model "$ind" --prompts "$tmp/empty.txt"
check prompts-missing 1 "^qkv: error: $tmp/nope.txt" -- generate --model "$ind" --prompts "$tmp/nope.txt"
check prompts-no-tokenizer 2 '^qkv: error: --prompts: .* has no tokenizer beside it; give --prompt-ids' -- generate --model "$tmp/llama" --prompts "$tmp/prompts.txt"
check prompts-bad-id 2 "^qkv: error: --prompt-ids: $tmp/bad-ids.txt line 2" -- generate --model "$tmp/llama" --prompt-ids "$tmp/bad-ids.txt"
check prompts-big-id 2 "line 2: id 99999 is outside the vocabulary" -- generate --model "$tmp/llama" --prompt-ids "$tmp/big-ids.txt"
check prompts-and-text 2 'excludes' -- generate --model "$ind" --prompts "$tmp/prompts.txt" --text hi
check prompts-batch-0 2 '^qkv: error: --batch-size: 0' -- generate --model "$ind" --prompts "$tmp/prompts.txt" --batch-size 0
"$qkv" init --arch llama --preset tiny --out "$tmp/long-llama" --set max_position_embeddings=1000000 >/dev/null 2>&1
for i in $(seq 1000); do echo 1,2,3; done >"$tmp/1000.txt"
check prompts-batch-memory 2 '^qkv: error: --batch-size 1000: the K/V cache of a batch would take 244142 MiB, more than half' -- generate --model "$tmp/long-llama" --prompt-ids "$tmp/1000.txt" --batch-size 1000 --max-new-tokens 500000
check prompts-too-long 2 "^qkv: error: --prompts: $tmp/prompts.txt line 1 is 21 tokens and --max-new-tokens 120 more, but the model's context is 128 positions" -- generate --model "$ind" --prompts "$tmp/prompts.txt" --max-new-tokens 120

# Bad input: usage (2) or data (1), never a crash.
check bad-hook 2 "^qkv: error: --steer: 'blocks.7.hook_resid_pre' is not a hook point" -- generate --model "$ind" --text hi --steer "blocks.7.hook_resid_pre:$tmp/v.npy:1"
check bad-length 1 "^qkv: error: $tmp/w.npy: 64 values, but $hook has 128 per position" -- generate --model "$ind" --text hi --steer "$hook:$tmp/w.npy:1"
check pattern-hook 2 'not one row per position' -- generate --model "$ind" --text hi --steer "blocks.0.attn.hook_pattern:$tmp/v.npy:1"
check bad-steer-form 2 'expected HOOK:FILE.npy:COEF' -- generate --model "$ind" --text hi --steer "$hook:$tmp/v.npy"
check bad-coef 2 "is not a finite number" -- generate --model "$ind" --text hi --steer "$hook:$tmp/v.npy:big"
check missing-npy 1 "^qkv: error: $tmp/nope.npy" -- generate --model "$ind" --text hi --steer "$hook:$tmp/nope.npy:1"
check too-long 2 "^qkv: error: the prompt is 3 tokens and --max-new-tokens 126 more, but the model's context is 128" -- generate --model "$ind" --tokens 1,2,3 --max-new-tokens 126
check fits 0 '"tokens"' -- generate --model "$ind" --tokens 1,2,3 --max-new-tokens 125 --json
check bad-temperature 2 '^qkv: error: --temperature' -- generate --model "$ind" --text hi --temperature -1
check bad-top-p 2 '^qkv: error: --top-p' -- generate --model "$ind" --text hi --temperature 1 --top-p 0
check bad-top-k 2 '^qkv: error: --top-k' -- generate --model "$ind" --text hi --temperature 1 --top-k -2
check bad-max 2 '^qkv: error: --max-new-tokens' -- generate --model "$ind" --text hi --max-new-tokens 0
check no-input 2 '^qkv: error: no input' -- generate --model "$ind"
check stop-no-tokenizer 2 '^qkv: error: --stop: .* has no tokenizer' -- generate --model "$tmp/llama" --tokens 1,2 --stop x
check steer-no-texts 2 '^qkv: error: --negative: no texts' -- steer --model "$ind" --positive a --hook "$hook" --out "$tmp/x.npy"
check steer-bad-hook 2 "^qkv: error: --hook: 'nope' is not a hook point" -- steer --model "$ind" --positive a --negative b --hook nope --out "$tmp/x.npy"
[ ! -e "$tmp/x.npy" ] && ok "no file written on error" || bad "x.npy written"
check help 0 'HOOK:FILE.npy:COEF' -- generate --help
exit $fail
