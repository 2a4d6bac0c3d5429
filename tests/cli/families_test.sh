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
cat >"$tmp/claims.py" <<'PY'
import json, sys
j = json.load(open(sys.argv[2]))
c = {x["id"]: x for x in j["claims"]}
for need in ["projections", "swap_full_transposes", "kv_cache_exact", "gradcheck", "induction_head", "k_composition",
             "qk_ov_fail_separately", "bias_trap", "rope_relative", "rope_swap_transposes", "gqa_shared_kv"]:
    assert need in c, need
for x in j["claims"]:
    assert x["applies"] or x["note"], x["id"] + ": n/a without a reason"
    assert not x["applies"] or x["criterion"], x["id"] + ": a verdict without a criterion"
for must in ["projections", "swap_full_transposes", "kv_cache_exact", "gradcheck"]:
    assert c[must]["held"], must
rotary = sys.argv[1] not in ("gpt_neo", "gpt2")
for must in ["rope_relative", "rope_swap_transposes"]:
    assert c[must]["applies"] == rotary and (c[must]["held"] or not rotary), must
PY
for arch in gpt2 llama mistral qwen2 gemma gemma2 gpt_neox phi3 gpt_neo; do
  check "tour-$arch" 0 'applicable claims hold on this .* model .*Report: ' -- tour --model "$tmp/$arch" --out "$tmp/report-$arch" --quiet
  [ -s "$tmp/report-$arch/index.html" ] && ok "tour-$arch report written" || bad "tour-$arch: no report"
  # every claim has a verdict or n/a with its reason; the arithmetic ones hold on every family
  "$qkv" tour --model "$tmp/$arch" --json --quiet --out "$tmp/report-$arch" >"$tmp/tour-$arch.json" 2>&1
  if /usr/bin/python3 "$tmp/claims.py" "$arch" "$tmp/tour-$arch.json"; then ok "tour-$arch claims"; else bad "tour-$arch claims"; fi
done
# two models side by side: the bundled GPT-2 model beside a Llama-shaped one, one report
check tour-compare 0 'rope_relative +n/a +holds' -- tour --model "$src/models/induction" --compare "$tmp/llama" --out "$tmp/cmp" --quiet
grep -q 'Claims, side by side' "$tmp/cmp/index.html" && ok "tour-compare report" || bad "tour-compare: no side-by-side report"
check tour-compare-json 0 '"models": \[' -- tour --model "$tmp/qwen2" --compare "$tmp/gpt_neo" --out "$tmp/cmp2" --json --quiet
check tour-compare-missing 1 'nope' -- tour --model "$tmp/llama" --compare "$tmp/nope" --out "$tmp/cmp3" --quiet

# Every experiment on every family (GPT-2 through its own path, the others over the family engine).
for arch in gpt2 llama mistral qwen2 gemma gemma2 gpt_neox phi3 gpt_neo; do
  check "project-$arch" 0 'max \|diff\| [0-9.e+-]+  \(a wrong cut' -- project --model "$tmp/$arch" --layer 1 --tokens 1,2,3,4,5,6
  check "scores-$arch" 0 'antisymmetric share' -- scores --model "$tmp/$arch" --layer 1 --head 1 --tokens 1,2,3,4,5,6
  check "swap-$arch" 0 'Q ↔ K, matrix and bias.* Sᵀ +0\.0e\+00 +0\.0e\+00' -- swap --model "$tmp/$arch" --layer 0 --head 2 --tokens 1,2,3,4,5,6
  check "heads-$arch" 0 'layer\.head +previous' -- heads --model "$tmp/$arch" --seq-len 8 --batch 2 --top 3
  check "circuits-$arch" 0 'K-composition, top' -- circuits --model "$tmp/$arch" --samples 4 --top 2
  check "ablate-$arch" 0 'OV ablated: .* 0\.0e\+00 \(identical\)' -- ablate --model "$tmp/$arch" --layer 1 --head 1 --seq-len 8 --batch 1
done
check scores-rotated 0 'on the ROTATED q and k' -- scores --model "$tmp/llama" --layer 0 --head 0 --tokens 1,2,3,4
check swap-rotated 0 'ROTATED to their positions' -- swap --model "$tmp/gpt_neox" --layer 0 --head 0 --tokens 1,2,3,4
check swap-no-bias 0 'no biases: = the full swap' -- swap --model "$tmp/llama" --layer 0 --head 0 --tokens 1,2,3,4
check project-phi3 0 "Phi-3's stacked qkv_proj rows" -- project --model "$tmp/phi3" --layer 0 --tokens 1,2,3
check project-neox 0 "GPT-NeoX's per-head interleave" -- project --model "$tmp/gpt_neox" --layer 0 --tokens 1,2,3
check circuits-gqa 0 'ONE number per group' -- circuits --model "$tmp/llama" --samples 4
check circuits-gqa-json 0 '"group_composition"' -- circuits --model "$tmp/qwen2" --samples 2 --json
check scores-json 0 '"rotated": true' -- scores --model "$tmp/gemma" --layer 1 --head 3 --tokens 1,2,3 --json
check ablate-json 0 '"ov_ablation"' -- ablate --model "$tmp/phi3" --layer 0 --head 0 --seq-len 4 --batch 1 --json
check scores-bad-head 2 '--head: 4 is outside \[0, 4\)' -- scores --model "$tmp/llama" --layer 0 --head 4
check project-bad-layer 2 '--layer: 2 is outside \[0, 2\)' -- project --model "$tmp/qwen2" --layer 2
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
check run-beyond-context 2 'the model has 128 positions' -- run --model "$tmp/llama" --tokens "$(seq -s, 0 128)"
exit $fail
