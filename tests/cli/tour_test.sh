#!/usr/bin/env bash
# qkv tour as a user runs it on the fixture models and the two bundled ones: the JSON (every claim id in the one
# order, a verdict or an n/a with its reason), the report file, the text table, --compare, and the error exits
# (2 for usage, 1 for data; no partial report).
# Usage: tour_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1 src=$2
fx=$src/tests/reference/fixtures
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
check_show='tail -3'

ids="projections ln_trap rmsnorm_trap bias_trap multi_head_slices scores_asymmetric swap_full_transposes rope_swap_transposes swap_matrices_only_neither softmax_breaks_transpose rope_relative qk_circuit_position_dependent gqa_shared_kv kv_cache_exact previous_token_head induction_head k_composition qk_ov_fail_separately soft_dictionary_example running_example attn_params_4d2 sqrt_dk no_scale_saturates gradcheck gradcheck_model qk_where_v_what k_composition_causal ov_fault_separate"
for m in tiny tiny_attn_only; do
  out=$tmp/$m
  "$qkv" tour --model "$fx/$m" --out "$out" --json >"$tmp/$m.json" 2>"$tmp/$m.err"
  rc=$?
  [ $rc -eq 0 ] && ok "$m: exit 0" || { bad "$m: exit $rc"; cat "$tmp/$m.err"; continue; }
  [ -s "$out/index.html" ] && ok "$m: index.html written" || bad "$m: no index.html"
  [ "$(ls "$out")" = "index.html" ] && ok "$m: only index.html in the directory" || bad "$m: stray files: $(ls "$out")"
  grep -q '^\[1/' "$tmp/$m.err" && ok "$m: progress on stderr" || bad "$m: no progress on stderr"
  python3 - "$tmp/$m.json" $ids <<'PY' && ok "$m: JSON has every claim id in order, each a verdict (measured, criterion) or n/a with its reason" || bad "$m: JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["model"] and j["family"] == "gpt2", j["model"]
assert [c["id"] for c in j["claims"]] == sys.argv[2:], [c["id"] for c in j["claims"]]
claims = {c["id"]: c for c in j["claims"]}
for i in sys.argv[2:]:
    c = claims[i]
    assert isinstance(c["held"], bool) and isinstance(c["applies"], bool), i
    assert c["seed"], i
    if c["applies"]:
        assert isinstance(c["measured"], dict) and c["measured"] and c["criterion"], i
    else:
        assert c["note"] and not c["held"], i
# GPT-2: learned positions, LayerNorm, MHA, ÷√d_k; random weights: no induction head to patch
moot = {"rmsnorm_trap", "rope_swap_transposes", "rope_relative", "qk_circuit_position_dependent", "gqa_shared_kv",
        "no_scale_saturates", "qk_where_v_what", "k_composition_causal", "ov_fault_separate"}
assert {i for i, c in claims.items() if not c["applies"]} == moot, [i for i, c in claims.items() if not c["applies"]]
# verdicts consistent with the numbers
m = lambda i: claims[i]["measured"]
assert claims["swap_full_transposes"]["held"] == (m("swap_full_transposes")["full_vs_ST_rel"] <= 1e-9)
assert claims["induction_head"]["held"] == (m("induction_head")["score"] >= 0.8)
assert claims["previous_token_head"]["held"] == (m("previous_token_head")["score"] >= 0.8)
g = m("gradcheck")
assert claims["gradcheck"]["held"] == (g["max_abs_error"] < 1e-6 and g["ds_row_sum_max_abs"] <= 1e-12)
a = m("qk_ov_fail_separately")
assert claims["qk_ov_fail_separately"]["held"] == (a["loss_qk_ablated"] - a["loss_intact"] >= 0.01 and a["loss_ov_ablated"] - a["loss_intact"] >= 0.01 and a["ov_pattern_max_abs_diff"] == 0)
# random weights: no induction head, and the identities hold
assert not claims["induction_head"]["held"] and claims["swap_full_transposes"]["held"] and claims["gradcheck"]["held"]
assert claims["kv_cache_exact"]["held"] and claims["gradcheck_model"]["held"]
assert claims["running_example"]["held"] and m("running_example")["matching"] == m("running_example")["stated"] == 21
p = m("attn_params_4d2")
assert claims["attn_params_4d2"]["held"] and p["weights_from_tensors"] == 4 * p["d"] ** 2 and p["gpt2_small_millions"] == 2.362368
assert j["held"] == sum(c["held"] for c in j["claims"]) and j["applicable"] == len(j["claims"]) - len(moot)
PY
  if grep -qiE 'https?://[^w]|<script' "$out/index.html"; then bad "$m: network reference or script in the report"; else ok "$m: self-contained"; fi
done

# The text table: every claim with a verdict and its criterion.
out=$("$qkv" tour --model "$fx/tiny" --out "$tmp/text" --quiet 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q 'DOES NOT HOLD' <<<"$out" && grep -q 'criterion: holds when' <<<"$out" &&
   grep -qE 'applicable claims hold on this gpt2 model \(9 n/a' <<<"$out" && grep -qE '^rmsnorm_trap +n/a$' <<<"$out" &&
   grep -q 'note:      this model uses LayerNorm' <<<"$out"; then ok "text table"; else bad "text table (exit $rc)"; echo "$out" | tail -5; fi
"$qkv" tour --model "$fx/tiny" --out "$tmp/text2" --quiet --tokens 3,57,14,92,3,57,14,92 >/dev/null 2>&1 && ok "--tokens" || bad "--tokens"

# The bundled models, as the README says: every applicable claim holds on the GPT-2 (the K/V cache and its own
# backward among them); on the Llama all but rmsnorm_trap and attn_params_4d2 (GQA), and the rotary claims hold.
"$qkv" tour --out "$tmp/bundled" --json --quiet >"$tmp/bundled.json" 2>"$tmp/bundled.err"
"$qkv" tour --model "$src/models/induction-llama" --out "$tmp/llama" --json --quiet >"$tmp/llama.json" 2>"$tmp/llama.err"
python3 - "$tmp/bundled.json" "$tmp/llama.json" <<'PY' && ok "bundled models: 22 of 22 and 22 of 24 applicable claims hold" || bad "bundled models' verdicts"
import json, sys
g, l = (json.load(open(p)) for p in sys.argv[1:])
assert (g["held"], g["applicable"], g["total"]) == (22, 22, 28), (g["held"], g["applicable"])
assert g["text"]["text"] == "The cat sat on the mat. The cat sat on the mat.", g["text"]
assert (l["held"], l["applicable"], l["total"]) == (22, 24, 28), (l["held"], l["applicable"])
failed = sorted(c["id"] for c in l["claims"] if c["applies"] and not c["held"])
assert failed == ["attn_params_4d2", "rmsnorm_trap"], failed
assert all(c["held"] for c in l["claims"] if c["id"] in ("rope_relative", "gqa_shared_kv", "kv_cache_exact", "qk_where_v_what"))
PY
grep -q 'One q, k pair at every offset' "$tmp/llama/index.html" && ok "llama report: the offset chart" || bad "llama report: no offset chart"
out=$("$qkv" tour --model "$src/models/induction" --compare "$src/models/induction-llama" --out "$tmp/cmp" --quiet 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qE '^rope_relative +n/a +holds$' <<<"$out" && grep -qE '^kv_cache_exact +holds +holds$' <<<"$out" &&
   grep -q 'Claims, side by side' "$tmp/cmp/index.html"; then ok "--compare: both verdicts per claim, one report"; else bad "--compare (exit $rc)"; echo "$out" | tail -5; fi

check no-model 1 '^qkv: error: ' -- tour --model "$fx/does-not-exist" --out "$tmp/x"
check bad-token 2 '^qkv: error: --tokens: id 101' -- tour --model "$fx/tiny" --out "$tmp/x" --tokens 3,101
check too-long 2 '^qkv: error: .*16 positions' -- tour --model "$fx/tiny" --out "$tmp/x" --tokens 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17
check one-token 2 '^qkv: error: .*at least 2 tokens' -- tour --model "$fx/tiny" --out "$tmp/x" --tokens 5
check bad-seq-len 2 '^qkv: error: --seq-len: 9 is outside \[2, 8\]' -- tour --model "$fx/tiny" --out "$tmp/x" --seq-len 9
check text-no-tokenizer 2 '^qkv: error: .*no tokenizer' -- tour --model "$fx/tiny" --out "$tmp/x" --text "hello"
check bad-flag 2 '^qkv: error: ' -- tour --model "$fx/tiny" --nope
[ ! -e "$tmp/x" ] && ok "no report directory after errors" || bad "a report directory was made despite the errors"
touch "$tmp/afile"
check out-is-file 1 '^qkv: error: .*afile' -- tour --model "$fx/tiny" --out "$tmp/afile" --quiet
mkdir -p "$tmp/ro"
chmod 555 "$tmp/ro"
if [ "$(id -u)" -ne 0 ]; then
  check out-unwritable 1 '^qkv: error: ' -- tour --model "$fx/tiny" --out "$tmp/ro" --quiet
  [ -z "$(ls -A "$tmp/ro")" ] && ok "no partial file in the unwritable directory" || bad "files left in $tmp/ro"
fi
check out-under-file 1 '^qkv: error: ' -- tour --model "$fx/tiny" --out "$tmp/afile/sub" --quiet
exit $fail
