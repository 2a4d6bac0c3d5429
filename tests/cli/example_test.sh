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
# Errors go to stderr, nothing to stdout.
if [ -n "$("$qkv" example bank --query 1 2>/dev/null)" ]; then bad "error wrote to stdout"; fi
exit $fail
