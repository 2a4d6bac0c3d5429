#!/usr/bin/env bash
# qkv project / scores / swap / heads / circuits / ablate as a user runs them on the fixture models, and
# their argument errors (exit 2, `qkv: error:` naming the argument and the valid range).
# Usage: experiments_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1 src=$2
fx=$src/tests/reference/fixtures
toks=3,57,14,92,0,57,14,92,41,100,7,57
source "$(dirname "$0")/lib.sh"
check project 0 '\[24, 72\] -> 3 × \[24, 24\] -> 3 heads × 8' -- project --model "$fx/tiny" --layer 1 --tokens $toks
check project-json 0 '"ln_trap_rel": 0\.8' -- project --model "$fx/tiny" --layer 1 --tokens $toks --json
check scores 0 'antisymmetric share' -- scores --model "$fx/tiny" --layer 1 --head 2 --tokens $toks
check scores-json 0 '"asym_rel": 1\.72' -- scores --model "$fx/tiny" --layer 1 --head 2 --tokens $toks --json
check swap 0 'matrix and bias +Sᵀ +0\.0e\+00' -- swap --model "$fx/tiny" --layer 0 --head 1 --tokens $toks
check swap-json 0 '"vs_ST_max_abs": 0\.0' -- swap --model "$fx/tiny" --layer 0 --head 1 --tokens $toks --json
check swap-default-input 0 'Q ↔ K' -- swap --model "$fx/tiny_attn_only" --layer 1 --head 3
check heads 0 'induction' -- heads --model "$fx/tiny" --seq-len 6 --seed 1
check heads-json 0 '"heads": \[' -- heads --model "$fx/tiny_attn_only" --tokens $toks --json
check heads-text 0 'text previous' -- heads --model "$fx/tiny" --tokens $toks --top 2
check circuits 0 'K-composition, top' -- circuits --model "$fx/tiny" --top 2
check circuits-json 0 '"composition": \[' -- circuits --model "$fx/tiny_attn_only" --json --samples 4
check ablate 0 'values zeroed .*\(identical\)' -- ablate --model "$fx/tiny" --layer 1 --head 2 --seq-len 6
check ablate-json 0 '"ov_pattern_max_abs_diff": 0\.0' -- ablate --model "$fx/tiny_attn_only" --layer 0 --head 3 --json
# argument errors: exit 2, the argument and its valid range named
check bad-layer 2 '^qkv: error: --layer: 2 is outside \[0, 2\)' -- project --model "$fx/tiny" --layer 2 --tokens $toks
check neg-layer 2 '^qkv: error: --layer: -1 is outside \[0, 2\)' -- scores --model "$fx/tiny" --layer -1 --head 0 --tokens $toks
check bad-head 2 '^qkv: error: --head: 3 is outside \[0, 3\)' -- swap --model "$fx/tiny" --layer 0 --head 3 --tokens $toks
check bad-head-ablate 2 '^qkv: error: --head: 4 is outside \[0, 4\)' -- ablate --model "$fx/tiny_attn_only" --layer 0 --head 4
check bad-seq-len 2 '^qkv: error: --seq-len: 9 is outside \[1, 8\]' -- heads --model "$fx/tiny" --seq-len 9
check bad-seq-len-ablate 2 '^qkv: error: --seq-len: 1 is outside \[2, 8\]' -- ablate --model "$fx/tiny" --layer 0 --head 0 --seq-len 1
check bad-bos 2 '^qkv: error: --bos: 101 is outside \[0, 101\)' -- heads --model "$fx/tiny" --bos 101
check bad-token 2 '^qkv: error: --tokens: id 101' -- scores --model "$fx/tiny" --layer 0 --head 0 --tokens 3,101
check no-model 1 '^qkv: error: ' -- circuits --model "$fx/does-not-exist"
exit $fail
