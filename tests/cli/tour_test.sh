#!/usr/bin/env bash
# qkv tour as a user runs it on the fixture models: the JSON (every claim id, held booleans), the report file,
# the text table, and the error exits (2 for usage, 1 for data; no partial report).
# Usage: tour_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1 src=$2
fx=$src/tests/reference/fixtures
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
check_show='tail -3'

ids="projections ln_trap bias_trap multi_head_slices scores_asymmetric swap_full_transposes swap_matrices_only_neither softmax_breaks_transpose previous_token_head induction_head k_composition qk_ov_fail_separately soft_dictionary_example running_example attn_params_4d2 sqrt_dk gradcheck"
for m in tiny tiny_attn_only; do
  out=$tmp/$m
  "$qkv" tour --model "$fx/$m" --out "$out" --json >"$tmp/$m.json" 2>"$tmp/$m.err"
  rc=$?
  [ $rc -eq 0 ] && ok "$m: exit 0" || { bad "$m: exit $rc"; cat "$tmp/$m.err"; continue; }
  [ -s "$out/index.html" ] && ok "$m: index.html written" || bad "$m: no index.html"
  [ "$(ls "$out")" = "index.html" ] && ok "$m: only index.html in the directory" || bad "$m: stray files: $(ls "$out")"
  grep -q '^\[1/' "$tmp/$m.err" && ok "$m: progress on stderr" || bad "$m: no progress on stderr"
  python3 - "$tmp/$m.json" $ids <<'PY' && ok "$m: JSON has every claim id with a boolean held, measured, criterion, seed" || bad "$m: JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["model"].endswith(sys.argv[1].split("/")[-1][:-5]) or j["model"], j["model"]
claims = {c["id"]: c for c in j["claims"]}
for i in sys.argv[2:]:
    c = claims[i]
    assert isinstance(c["held"], bool), i
    assert isinstance(c["measured"], dict) and c["measured"], i
    assert c["criterion"] and c["seed"], i
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
assert claims["running_example"]["held"] and m("running_example")["matching"] == m("running_example")["stated"] == 21
p = m("attn_params_4d2")
assert claims["attn_params_4d2"]["held"] and p["weights_from_tensors"] == 4 * p["d"] ** 2 and p["gpt2_small_millions"] == 2.362368
assert j["held"] == sum(c["held"] for c in j["claims"])
PY
  if grep -qiE 'https?://[^w]|<script' "$out/index.html"; then bad "$m: network reference or script in the report"; else ok "$m: self-contained"; fi
done

# The text table: every claim with a verdict and its criterion.
out=$("$qkv" tour --model "$fx/tiny" --out "$tmp/text" --quiet 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -q 'DOES NOT HOLD' <<<"$out" && grep -q 'criterion: holds when' <<<"$out" &&
   grep -qE 'claims hold on this model' <<<"$out"; then ok "text table"; else bad "text table (exit $rc)"; echo "$out" | tail -5; fi
"$qkv" tour --model "$fx/tiny" --out "$tmp/text2" --quiet --tokens 3,57,14,92,3,57,14,92 >/dev/null 2>&1 && ok "--tokens" || bad "--tokens"

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
