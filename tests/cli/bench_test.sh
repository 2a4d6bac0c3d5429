#!/usr/bin/env bash
# qkv bench as a user runs it, on tiny shapes (the numbers are not checked, only what is reported):
# the attention path it ran (forced with --path; a path this CPU cannot run is a usage error), the
# per-op profile of the forward, and exit codes.
# Usage: bench_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1
source "$(dirname "$0")/lib.sh"
test_label=bench
check_show=cat
# --peak skips the 2048³ SGEMM peak measurement.
check attention-path 0 'attention path (portable|avx2|avx512|neon)' -- bench attention --T 64 --H 2 --repeats 1 --peak 100
check attention-portable-json 0 '"attention_path": "portable"' -- bench attention --T 33 --H 2 --dh 7 --repeats 1 --peak 100 --path portable --json
check attention-backward 0 '"case": "attention fwd\+bwd"' -- bench attention --T 50 --H 3 --backward --repeats 1 --peak 100 --path portable --json
check bad-path 2 "^qkv: error: flash attention path 'sse': expected auto, portable, avx2, avx512 or neon" -- bench attention --T 8 --repeats 1 --peak 100 --path sse
# QKV_ISA picks the kernel path of the whole process; an unknown name or one this CPU cannot run: exit 2.
QKV_ISA=portable check isa-portable 0 '"attention_path": "portable"' -- bench attention --T 33 --H 2 --repeats 1 --peak 100 --json
QKV_ISA=sse check bad-isa 2 "^qkv: error: QKV_ISA=sse: expected auto, portable, avx2, avx512 or neon" -- bench attention --T 8 --repeats 1 --peak 100
# Some path is always missing here: neon on x86-64, the x86 ones on aarch64.
if [ "$(uname -m)" = x86_64 ]; then missing=neon; else missing=avx2; fi
QKV_ISA=$missing check unsupported-isa 2 "^qkv: error: QKV_ISA=$missing: this CPU cannot run the $missing kernels" -- bench attention --T 8 --repeats 1 --peak 100
check unsupported-path 2 "^qkv: error: flash attention: the $missing path cannot run on this CPU" -- bench attention --T 8 --repeats 1 --peak 100 --path $missing
# The profile: every op of the forward, the GEMMs and attention among them.
out=$("$qkv" bench forward --T 16 --repeats 1 --peak 100 --profile 2>&1); rc=$?
if [ $rc -ne 0 ]; then bad "forward-profile: exit $rc"; echo "$out"; else
  missing_ops=""
  for op in embedding norm "q, k, v projections" "attention \(flash\)" W_O "mlp block" "logits \(unembedding\)"; do
    grep -qE "^$op +[0-9]" <<<"$out" || missing_ops+=" [$op]"
  done
  if [ -z "$missing_ops" ]; then ok "forward-profile"; else bad "forward-profile: no row for$missing_ops"; echo "$out"; fi
fi
check forward-profile-json 0 '"fraction_of_forward"' -- bench forward --T 8 --repeats 1 --peak 100 --profile --json
exit $fail
