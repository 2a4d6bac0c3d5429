#!/usr/bin/env bash
# The CLI as a user runs it: the seeds' numbers in the text output, JSON keys, and exit codes.
# Usage: example_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1
source "$(dirname "$0")/lib.sh"
check_show=cat
check bank-weights 0 'river +\[0, 2\] +\[1, 0\] +4\.00 +2\.83 +16\.92 +0\.62' -- example bank
check bank-output 0 'output Σ a·v = \[0\.85, 0\.15\]' -- example bank
check bank-all 0 '\[0\.07, 0\.31, 0\.62\]' -- example bank --all-queries
check bank-flip 0 'output Σ a·v = \[0\.23, 0\.77\]' -- example bank --value river=0,1
check bank-json 0 '"weights"' -- example bank --json
check bank-json-A 0 '"A"' -- example bank --json --all-queries
check robot 0 'robot +\[2, 1\] +2\.50 +1\.77 +5\.86 +0\.71' -- example robot
check noscale 0 'turned OFF' -- example bank --no-scale
check gradcheck-json 0 '"ds_row_sum_max_abs"' -- gradcheck --json
check saturate 0 '^1024 ' -- saturate
check bad-query 2 '^qkv: error: --query: expected 2' -- example bank --query 1
check bad-token 2 "^qkv: error: --value: unknown token 'moon'" -- example bank --value moon=1,2
check not-number 2 "^qkv: error: --query: 'x' is not a finite number" -- example bank --query x,1
check no-command 2 '^qkv: error:' --
check bad-heads 2 '^qkv: error: .*does not divide' -- gradcheck --d 5 --H 2
# seed 004's running example "the cat climbed the": the seed's numbers, the reconstruction stated.
check running-last-row 0 '^  \[0\.011, 0\.035, 0\.622, 0\.319, 0\.014\]$' -- example running
check running-noscale 0 '^  \[0\.002, 0\.012, 0\.707, 0\.275, 0\.003\]$' -- example running --no-scale --unmasked
check running-the 0 '^  \[0\.008, 0\.040, 0\.657, 0\.285, 0\.011\]$' -- example running --unmasked
check running-sigma 0 '^␣the +\[-0\.5, -0\.5, -0\.5, 1\.5\] +0\.000 +0\.866 +\[-0\.577, -0\.577, -0\.577, 1\.732\] +the seed.s$' -- example running
check running-reconstructed 0 '^the +\[-0\.5, -0\.5, 0, 1\] .*reconstructed$' -- example running
check running-all-match 0 '^21 of 21 match$' -- example running
check running-row 0 '^␣climb +\[1\.604, -1\.069\] .* 0\.622$' -- example running --row 5 --masked
check running-masked 0 '^ed +.* masked +0\.000$' -- example running --row 1 --masked
check running-head2 0 'head 2 \(columns 3-4' -- example running --head 2
check running-help 0 'Rows 1-4 are reconstructed: the seed prints only the last row of X. Rule: every row' -- example --help
check running-bad-row 2 '^qkv: error: --row' -- example running --row 6
check running-both-masks 2 '^qkv: error: .*excludes' -- example running --masked --unmasked
check running-query 2 "^qkv: error: --query: not an option of 'qkv example running'" -- example running --query 1,2
check shapes 0 '^S +H × n × n +5 × 5 +2 × 5 × 5 +5 × 5 +4 × 5 × 5$' -- example shapes
check shapes-4d2 0 'GPT-2 small \(parameter table\) +768 +2,359,296 +2,359,296 +2,362,368 +2,359,296 \+ 3,072 +matches' -- example shapes
check shapes-held 0 '"roughly 2.4 million" holds$' -- example shapes
check shapes-no-model 1 '^qkv: error: .*does-not-exist' -- example shapes --model "$2/does-not-exist"
# any family: a Qwen2 checkpoint's grouped-query K and V (2 key/value heads for 4 query heads), biases on Q/K/V only
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$qkv" init --arch qwen2 --preset tiny --out "$tmp/qwen2" >/dev/null
check shapes-gqa 0 '^W_K +d × \(n_kv·d_k\) +4 × 2 +4 × 4 +64 × 16 +64 × 32$' -- example shapes --model "$tmp/qwen2"
check shapes-gqa-tensors 0 'qwen2 +64 +16,384 +12,288 +12,416 +12,288 \+ 128 +every layer matches' -- example shapes --model "$tmp/qwen2"
if out=$("$qkv" example running --json) && /usr/bin/python3 - "$out" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
for k in ("X", "u", "tokens", "from_seed", "rule", "checks"): assert k in j, k
assert len(j["heads"]) == 2 and all(set("Q K V S A O".split()) <= set(h) for h in j["heads"])
assert all(c["ok"] for c in j["checks"]) and len(j["checks"]) == 21
a = j["heads"][0]["A"][4]
assert [round(x, 3) for x in a] == [0.011, 0.035, 0.622, 0.319, 0.014], a
assert round(j["heads"][0]["A"][0][2], 2) == 0.66 and j["masked"] is False
PY
then ok "running-json"; else bad "running-json"; fi
if out=$("$qkv" example running --json --masked --no-scale) && /usr/bin/python3 -c '
import json, sys; j = json.loads(sys.argv[1]); A = j["heads"][0]["A"]
assert j["masked"] and not j["scale"] and A[0][1] == 0 and [round(x, 3) for x in A[4]] == [0.002, 0.012, 0.707, 0.275, 0.003]' "$out"
then ok "running-json-masked"; else bad "running-json-masked"; fi
if out=$("$qkv" example shapes --json) && /usr/bin/python3 -c '
import json, sys; j = json.loads(sys.argv[1])
assert j["gpt2_small"]["tensors"]["weights"] == 4 * 768 ** 2 and j["gpt2_small"]["seed_2_4_million"]
assert j["model"]["tensors_match_formula"] and j["toy"]["params"]["total"] == 64' "$out"
then ok "shapes-json"; else bad "shapes-json"; fi
# seed 004's whole matrix: binary without ÷√d_k at a large d_k, soft with it
check matrix 0 '^0 of 11 rows put more than 0.99' -- example matrix
check matrix-binary 0 '^5 of 5 rows put more than 0.99 on one token — the matrix has gone binary$' -- example matrix --text "a b c d e" --score decay --dk 256 --no-scale
check matrix-prev 0 '^c +0\.05 +0\.91 +0\.05 +0\.91$' -- example matrix --text "a b c" --score previous --masked
check matrix-bad-score 2 "^qkv: error: --score" -- example matrix --score sideways
check matrix-bad-dk 2 "^qkv: error: --dk" -- example matrix --dk 0
check matrix-empty 2 "^qkv: error: whole matrix: the sentence has 0 tokens" -- example matrix --text " "
check matrix-row 2 "^qkv: error: --row: not an option of 'qkv example matrix'" -- example matrix --row 2
# Errors go to stderr, nothing to stdout.
if [ -n "$("$qkv" example bank --query 1 2>/dev/null)" ]; then bad "error wrote to stdout"; fi
exit $fail
