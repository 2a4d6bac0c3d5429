# Shared by tests/cli/*_test.sh, each of which sources it after `set -uo pipefail` and setting $qkv:
#   source "$(dirname "$0")/lib.sh"
# Every line a test prints is `ok   …` or `FAIL …`; a failure sets fail=1 and the script ends with `exit $fail`.
# Settings a script may change after sourcing:
#   test_label  prefix of every ok/FAIL line, e.g. "serve" gives `ok   serve: …` (default: none)
#   check_show  how check() shows the output of a failing command (default `head -20`; `cat`: all of it)
fail=0
test_label=
check_show='head -20'

ok() { echo "ok   ${test_label:+$test_label: }$*"; }
bad() { echo "FAIL ${test_label:+$test_label: }$*"; fail=1; }

check() {  # check NAME EXPECTED_EXIT PATTERN -- ARGS...: runs $qkv ARGS; the exit and the output (stdout+stderr)
  local name=$1 want=$2 pattern=$3; shift 4
  local out rc
  out=$("$qkv" "$@" 2>&1); rc=$?
  if [ "$rc" -ne "$want" ]; then bad "$name: exit $rc, expected $want"; echo "$out" | $check_show; return; fi
  if ! grep -qE -- "$pattern" <<<"$out"; then bad "$name: output lacks /$pattern/"; echo "$out" | $check_show; return; fi
  ok "$name"
}
