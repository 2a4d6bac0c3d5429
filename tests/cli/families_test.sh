#!/usr/bin/env bash
# Every model family as a user meets it: qkv init --arch writes each family's Hugging Face layout, and
# info, run and dump take it (bf16 and sharded too); bad checkpoints get `qkv: error:` naming the file
# and key, with exit 1 (data) or 2 (usage), and nothing crashes. Usage: families_test.sh QKV SOURCE_DIR
set -uo pipefail
qkv=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"

for arch in gpt2 llama mistral qwen2 gemma gemma2 gpt_neox phi3 gpt_neo; do
  check "init-$arch" 0 "wrote .*\\($arch, [0-9]+ parameters, f32\\)" -- init --arch "$arch" --preset tiny --out "$tmp/$arch"
  check "info-$arch" 0 "family      $arch" -- info --model "$tmp/$arch"
  check "run-$arch" 0 '^1 ' -- run --model "$tmp/$arch" --tokens 1,2,3,4,5 --top 2
  check "dump-$arch" 0 'wrote [0-9]+ arrays' -- dump --model "$tmp/$arch" --tokens 1,2,3,4,5 --out "$tmp/dump-$arch"
done
for arch in llama gemma2 gpt_neox gpt_neo phi3; do
  check "tour-$arch" 0 'applicable claims hold on this .* model .*Report: ' -- tour --model "$tmp/$arch" --out "$tmp/report-$arch" --quiet
  [ -s "$tmp/report-$arch/index.html" ] && ok "tour-$arch report written" || bad "tour-$arch: no report"
done
check tour-json 0 '"applies": false' -- tour --model "$tmp/llama" --json --quiet --out "$tmp/rj"
[ -f "$tmp/dump-llama/blocks.1.attn.hook_rot_k.npy" ] && ok "dump-llama has hook_rot_k" || bad "dump-llama lacks hook_rot_k"
check info-gqa 0 'grouped-query: 2 K/V heads, each shared by 2 query heads' -- info --model "$tmp/llama"
check info-neox 0 'partial: 4 of 16 dims' -- info --model "$tmp/gpt_neox"
check info-neo 0 'not divided by √d_k' -- info --model "$tmp/gpt_neo"
check init-bf16-sharded 0 'bf16, 3 shards' -- init --arch qwen2 --preset tiny --dtype bf16 --shards 3 --out "$tmp/q3"
check info-sharded 0 '3 shards \(model.safetensors.index.json\), BF16' -- info --model "$tmp/q3"
check run-sharded 0 '^1 ' -- run --model "$tmp/q3" --tokens 7,8,9 --top 1
check init-set 0 'wrote' -- init --arch llama --preset tiny --set num_key_value_heads=1 --out "$tmp/mqa"
check info-mqa 0 'multi-query' -- info --model "$tmp/mqa"

# Bad usage (exit 2) and bad checkpoints (exit 1), each named.
check init-unknown-arch 2 "--arch: 'bert' is not a family" -- init --arch bert --out "$tmp/x"
check init-bad-set 2 'num_key_value_heads 3 does not divide num_attention_heads 4' -- init --arch llama --preset tiny --set num_key_value_heads=3 --out "$tmp/x"
check init-bad-preset 2 'the presets are tiny and small' -- init --arch llama --preset xl --out "$tmp/x"
cp -r "$tmp/llama" "$tmp/kv"
sed -i 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' "$tmp/kv/config.json"
check wrong-kv-heads 1 'kv/model.safetensors: tensor model.layers.0.self_attn.k_proj.weight has shape \[32, 64\], expected \[64, 64\]' -- info --model "$tmp/kv"
cp -r "$tmp/gemma" "$tmp/hd"
sed -i 's/"head_dim": 32/"head_dim": 16/' "$tmp/hd/config.json"
check head-dim-mismatch 1 'q_proj.weight has shape \[128, 64\], expected \[64, 64\]' -- info --model "$tmp/hd"
cp -r "$tmp/llama" "$tmp/mt"
sed -i 's/"model_type": "llama"/"model_type": "mamba"/' "$tmp/mt/config.json"
check unknown-model-type 1 'mt/config.json: config key "model_type" is "mamba", which qkv does not support' -- run --model "$tmp/mt" --tokens 1
cp -r "$tmp/llama" "$tmp/rs"
sed -i 's/"rope_scaling": null/"rope_scaling": {"rope_type": "yarn", "factor": 4.0}/' "$tmp/rs/config.json"
check unsupported-rope-scaling 1 'rs/config.json: config key "rope_scaling" has type "yarn", which qkv does not support' -- info --model "$tmp/rs"
cp -r "$tmp/q3" "$tmp/ms"
rm "$tmp/ms/model-00002-of-00003.safetensors"
check missing-shard 1 'model.safetensors.index.json: shard model-00002-of-00003.safetensors \(holding .*\) is missing' -- info --model "$tmp/ms"
cp -r "$tmp/llama" "$tmp/wt"
sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": "two"/' "$tmp/wt/config.json"
check wrong-type 1 'config key "num_hidden_layers": expected an integer, found string' -- info --model "$tmp/wt"
check experiment-on-llama 2 'a llama model; this command measures GPT-2 checkpoints so far' -- heads --model "$tmp/llama"
check run-beyond-context 2 'the model has 128 positions' -- run --model "$tmp/llama" --tokens "$(seq -s, 0 128)"
exit $fail
