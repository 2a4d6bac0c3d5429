#!/usr/bin/env bash
# qkv sweep as a user runs it (docs/sweep.md), on the bundled model and a corpus of repeated random
# tokens: mpirun -np 2 gives the same files as one process byte for byte; a sweep stopped by SIGTERM,
# or with one MPI rank SIGKILLed, resumes to the same files again; the shards hold exactly what
# `qkv dump` writes for the same windows (tests/python/test_store.py, which also reads bf16 stores);
# the corpus scores rank the bundled model's heads as `qkv heads` does; errors exit 1/2 before work.
# Usage: sweep_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
test_label=sweep
py=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# 200 windows of 128 tokens: 64 random bytes, then the same 64 again (TransformerLens's probe as a corpus).
$py - "$tmp/rep.u16" <<'EOF'
import sys, numpy as np
rng = np.random.default_rng(20)
r = rng.integers(0, 256, size=(200, 64)).astype(np.uint16)
np.concatenate([r, r], axis=1).reshape(-1).tofile(sys.argv[1])
EOF
args=(--tokens-file "$tmp/rep.u16" --window 128 --chunk-windows 9 --max-offset 8
      --save blocks.0.attn.hook_z --save blocks.1.hook_resid_post)

"$qkv" sweep "${args[@]}" --out "$tmp/a" >"$tmp/a.out" 2>"$tmp/a.err"
rc=$?
[ $rc -eq 0 ] && ok "one process: exit 0" || { bad "one process: exit $rc"; cat "$tmp/a.err"; }
for f in stats.json stats.csv manifest.json sweep.json previous_token.svg induction.svg offset.svg dla.svg; do
  [ -s "$tmp/a/$f" ] && ok "wrote $f" || bad "no $f"
done
[ "$(ls "$tmp/a/shards/blocks.0.attn.hook_z" | wc -l)" -eq 23 ] && ok "23 shards per hook (22 of 9 windows, the last of 2)" || bad "shards: $(ls "$tmp/a/shards/blocks.0.attn.hook_z" | wc -l)"
grep -q '^sweep windows 200/200 ' "$tmp/a.err" && ok "progress on stderr" || bad "no progress line on stderr"

# The bundled model's circuit on the corpus: ranked as `qkv heads` ranks it.
"$qkv" heads --json >"$tmp/heads.json" 2>/dev/null
$py - "$tmp/a/stats.json" "$tmp/heads.json" <<'EOF' && ok "corpus scores rank 0.1 first for previous-token and 1.0, 1.2, 1.1 first for induction, as qkv heads does" || bad "corpus ranking differs from qkv heads"
import json, sys
s = json.load(open(sys.argv[1]))["heads"]; h = json.load(open(sys.argv[2]))["heads"]
rank = lambda rows, key, n: [(r["layer"], r["head"]) for r in sorted(rows, key=lambda r: -r[key])][:n]
print("  corpus prev", rank(s, "previous_token", 2), "heads prev", rank(h, "previous_token", 2))
print("  corpus ind ", rank(s, "induction", 3), "heads ind ", rank(h, "induction", 3), rank(h, "induction_detector", 3))
assert rank(s, "previous_token", 1) == rank(h, "previous_token", 1) == [(0, 1)]
assert rank(s, "induction", 3) == rank(h, "induction", 3) == rank(h, "induction_detector", 3) == [(1, 0), (1, 2), (1, 1)]
top = {(r["layer"], r["head"]): r for r in s}
assert top[(0, 1)]["previous_token"] > 0.9 and min(top[(1, k)]["induction"] for k in range(3)) > 0.4
EOF

# The second bundled model (rotary, GQA, RMSNorm) on the same corpus: its previous-token head and its
# induction heads are the ones `qkv heads` finds.
"$qkv" sweep --model "$src/models/induction-llama" --tokens-file "$tmp/rep.u16" --window 128 --out "$tmp/ll" >/dev/null 2>&1 &&
  "$qkv" heads --json --model "$src/models/induction-llama" >"$tmp/heads_ll.json" 2>/dev/null || bad "induction-llama: sweep or heads failed"
$py - "$tmp/ll/stats.json" "$tmp/heads_ll.json" <<'EOF' && ok "induction-llama: corpus scores pick 0.3 as previous-token head and the same induction heads as qkv heads" || bad "induction-llama: corpus ranking differs from qkv heads"
import json, sys
s = json.load(open(sys.argv[1]))["heads"]; h = json.load(open(sys.argv[2]))["heads"]
top = lambda rows, key: max(rows, key=lambda r: r[key])
ind = lambda rows, t: sorted((r["layer"], r["head"]) for r in rows if r["induction"] > t)
print("  corpus prev", (top(s, "previous_token")["layer"], top(s, "previous_token")["head"]), "induction >0.3", ind(s, 0.3))
print("  heads  prev", (top(h, "previous_token")["layer"], top(h, "previous_token")["head"]), "induction >0.5", ind(h, 0.5))
assert (top(s, "previous_token")["layer"], top(s, "previous_token")["head"]) == (top(h, "previous_token")["layer"], top(h, "previous_token")["head"]) == (0, 3)
assert ind(s, 0.3) == ind(h, 0.5) and len(ind(s, 0.3)) >= 1 and all(l == 1 for l, _ in ind(s, 0.3))
EOF

# The statistics are a function of the windows only: other chunkings (--chunk-windows 64, one chunk per
# window, and --shard-mb making 11-window chunks) give byte-identical stats.json and stats.csv. The
# 200 windows make blocks of the sum tree that straddle chunks in every one of these chunkings.
for alt in "--chunk-windows 64" "--chunk-windows 1" "--shard-mb 0.7"; do
  cargs=(--tokens-file "$tmp/rep.u16" --window 128 --max-offset 8 --save blocks.0.attn.hook_z $alt)
  d=$tmp/chunk_${alt//[^a-z0-9]/_}
  "$qkv" sweep "${cargs[@]}" --out "$d" >/dev/null 2>&1 || bad "sweep $alt failed"
  cmp -s "$tmp/a/stats.json" "$d/stats.json" && cmp -s "$tmp/a/stats.csv" "$d/stats.csv" &&
    ok "$alt: stats.json and stats.csv byte-identical to --chunk-windows 9" || bad "$alt: the statistics depend on the chunking"
done
# MPI: two ranks give the same directory, byte for byte (statistics, manifest, shards, records).
if command -v mpirun >/dev/null 2>&1; then
  # Open MPI's runtime keeps its component state (libmpi and the MCA plugins it dlopens, whose frames
  # LeakSanitizer cannot name, so lsan.supp cannot match them) past MPI_Finalize. In the sanitizer stage
  # leak checking is therefore off for the mpirun runs only; ASan's memory-error checks stay on, and the
  # one-process runs above keep leak checking.
  mpirun() { ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" command mpirun "$@"; }
  if "$qkv" sweep --help | grep -q 'built with MPI'; then
    mpirun -np 2 "$qkv" sweep "${args[@]}" --out "$tmp/b" >"$tmp/b.out" 2>"$tmp/b.err"
    rc=$?
    [ $rc -eq 0 ] && ok "mpirun -np 2: exit 0" || { bad "mpirun -np 2: exit $rc"; tail -5 "$tmp/b.err"; }
    grep -q 'with 2 ranks' "$tmp/b.out" && ok "mpirun -np 2: ran as 2 ranks" || bad "mpirun -np 2 did not run as 2 ranks"
    diff -r "$tmp/a" "$tmp/b" >/dev/null && ok "mpirun -np 2 = one process, every file byte for byte" || { bad "np 2 differs from np 1"; diff -rq "$tmp/a" "$tmp/b" | head -5; }

    # SIGKILL of one rank mid-way, then --resume (as one process): the same files again.
    mpirun -np 2 "$qkv" sweep "${args[@]}" --out "$tmp/k" >/dev/null 2>&1 &
    mpi_pid=$!
    for _ in $(seq 800); do [ -e "$tmp/k/chunks/c000003.json" ] && break; sleep 0.01; done
    # The ranks are the qkv processes writing to $tmp/k ($! is the subshell running the mpirun function
    # above, and its child is mpirun itself, not a rank: killing that orphans both ranks, which go on
    # writing chunks while --resume runs, as stop 31's CI saw).
    qkv_exe=$(readlink -f "$qkv")
    ranks() { for p in $(pgrep -f -- "--out $tmp/k\$"); do [ "$(readlink -f /proc/$p/exe 2>/dev/null)" = "$qkv_exe" ] && echo $p; done; }
    for _ in $(seq 800); do rank_pids=$(ranks); [ $(echo $rank_pids | wc -w) -ge 2 ] && break; sleep 0.01; done
    rank_pid=$(echo "$rank_pids" | head -1)
    if [ -n "$rank_pid" ]; then kill -KILL "$rank_pid"; else bad "SIGKILL of one rank: no rank of mpirun found"; fi
    wait $mpi_pid
    rc=$?
    # mpirun can return while the surviving rank is still being taken down (slowly, under ASan); a
    # --resume started before it is gone races with its last writes. Wait for every rank to be gone.
    for _ in $(seq 3000); do [ -z "$(ranks)" ] && break; sleep 0.01; done
    [ -z "$(ranks)" ] && ok "SIGKILL of one rank: every rank is gone" || bad "SIGKILL of one rank: ranks $(ranks) still run after 30 s"
    if [ ! -e "$tmp/k/stats.json" ] && [ $rc -ne 0 ]; then ok "SIGKILL of one rank: the sweep stops unfinished (exit $rc)"; else bad "SIGKILL of one rank: exit $rc, stats.json $( [ -e "$tmp/k/stats.json" ] && echo written || echo absent)"; fi
    "$qkv" sweep "${args[@]}" --out "$tmp/k" --resume >"$tmp/k.out" 2>&1 && ok "--resume after SIGKILL: exit 0" || bad "--resume after SIGKILL failed"
    grep -qE '; [1-9][0-9]* of 23 chunks were already done' "$tmp/k.out" && ok "--resume kept the chunks done before the kill" || bad "--resume redid everything: $(grep chunks "$tmp/k.out")"
    diff -r "$tmp/a" "$tmp/k" >/dev/null && ok "killed + resumed = uninterrupted, every file byte for byte" || { bad "killed + resumed differs"; diff -rq "$tmp/a" "$tmp/k" | head -5; }
  else
    bad "mpirun is installed but this qkv was built without MPI"
  fi
else
  ok "no mpirun on this machine: the MPI checks are skipped (scripts/setup.sh installs openmpi-bin)"
fi

# SIGTERM mid-way: only whole chunks are left, exit 143; --resume finishes to the same files.
"$qkv" sweep "${args[@]}" --out "$tmp/t" >/dev/null 2>"$tmp/t.err" &
pid=$!
for _ in $(seq 800); do [ -e "$tmp/t/chunks/c000002.json" ] && break; sleep 0.01; done
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 143 ] && [ ! -e "$tmp/t/stats.json" ] && ok "SIGTERM: exit 143, unfinished" || bad "SIGTERM: exit $rc"
grep -q 'rerun with --resume' "$tmp/t.err" && ok "SIGTERM: says how to resume" || bad "SIGTERM: no resume hint"
ls -a "$tmp/t/chunks" "$tmp/t/shards"/* | grep -q '\.tmp\.' && bad "SIGTERM left temporary files" || ok "SIGTERM: no temporary files left"
"$qkv" sweep "${args[@]}" --out "$tmp/t" --resume >/dev/null 2>&1 && ok "--resume after SIGTERM: exit 0" || bad "--resume after SIGTERM failed"
diff -r "$tmp/a" "$tmp/t" >/dev/null && ok "stopped + resumed = uninterrupted, every file byte for byte" || { bad "stopped + resumed differs"; diff -rq "$tmp/a" "$tmp/t" | head -5; }
check "--resume of a finished sweep writes the same statistics" 0 '23 of 23 chunks were already done' -- sweep "${args[@]}" --out "$tmp/t" --resume
cmp -s "$tmp/a/stats.json" "$tmp/t/stats.json" && ok "…and they are byte-identical" || bad "re-finishing changed stats.json"

# A bf16 store of the first 16 windows; then the Python reader against qkv dump and torch's bfloat16.
"$qkv" sweep "${args[@]}" --max-windows 16 --save-dtype bf16 --out "$tmp/bf" >/dev/null 2>&1 && ok "bf16 store: exit 0" || bad "bf16 store failed"
QKV_BIN=$qkv QKV_SWEEP_F32=$tmp/a QKV_SWEEP_BF16=$tmp/bf QKV_SWEEP_TOKENS=$tmp/rep.u16 PYTHONPATH=$src/python \
  $py -m pytest -q -p no:cacheprovider --noconftest "$src/tests/python/test_store.py" >"$tmp/pytest.out" 2>&1
rc=$?
if [ $rc -eq 0 ] && ! grep -q skipped "$tmp/pytest.out"; then ok "tests/python/test_store.py: $(tail -1 "$tmp/pytest.out")"; else bad "test_store.py: exit $rc"; tail -30 "$tmp/pytest.out"; fi

# Text corpora go through the model's tokenizer (the bundled model's is byte-level: one id per byte).
printf 'the cat sat on the mat. the cat sat on the mat.\n%.0s' $(seq 20) >"$tmp/c.txt"
check "--corpus text" 0 'swept 15 windows of 64 tokens' -- sweep --corpus "$tmp/c.txt" --window 64 --out "$tmp/txt"
[ "$(stat -c %s "$tmp/txt/corpus.tokens")" -eq $((2 * $(stat -c %s "$tmp/c.txt"))) ] && ok "--corpus: corpus.tokens holds one uint16 per byte" || bad "corpus.tokens has the wrong size"

# Every family runs through the same hooked forward: a Llama (rotary, GQA 4 query / 2 KV heads, RMSNorm),
# a Gemma 2 (post-norms, sliding windows, soft-caps) and a GPT-NeoX (parallel residual, partial rotary),
# each from `qkv init`: one process = mpirun -np 2 byte for byte, and the shards = `qkv dump`.
for arch in llama gemma2 gpt_neox; do
  "$qkv" init --arch $arch --preset tiny --set initializer_range=0.2 --out "$tmp/m_$arch" >/dev/null 2>&1 || { bad "$arch: qkv init failed"; continue; }
  $py - "$tmp/m_$arch" "$tmp/f_$arch.u32" <<'EOF'
import json, sys, numpy as np
c = json.load(open(sys.argv[1] + "/config.json"))
rng = np.random.default_rng(3)
r = rng.integers(0, c["vocab_size"], size=(12, 32)).astype(np.uint32)
np.concatenate([r, r], axis=1).reshape(-1).tofile(sys.argv[2])
EOF
  fargs=(--model "$tmp/m_$arch" --tokens-file "$tmp/f_$arch.u32" --token-dtype uint32 --window 64 --stride 32
         --chunk-windows 5 --save blocks.0.attn.hook_rot_k --save blocks.1.hook_resid_post)
  "$qkv" sweep "${fargs[@]}" --out "$tmp/fa_$arch" >"$tmp/fa.out" 2>"$tmp/fa.err" &&
    grep -q 'swept 23 windows of 64 tokens' "$tmp/fa.out" && ok "$arch: swept 23 windows" || { bad "$arch: sweep failed"; tail -3 "$tmp/fa.err"; continue; }
  $py - "$tmp/fa_$arch/stats.json" <<'EOF' && ok "$arch: every head has finite statistics and a positive DLA norm" || bad "$arch: statistics"
import json, math, sys
heads = json.load(open(sys.argv[1]))["heads"]
assert len(heads) == 8, len(heads)
for h in heads:
    assert all(math.isfinite(h[k]) for k in ("previous_token", "induction", "entropy", "sink", "dla")), h
    assert h["dla"] > 0 and 0 <= h["sink"] <= 1, h
EOF
  if command -v mpirun >/dev/null 2>&1 && "$qkv" sweep --help | grep -q 'built with MPI'; then
    mpirun -np 2 "$qkv" sweep "${fargs[@]}" --out "$tmp/fb_$arch" >/dev/null 2>&1 &&
      diff -r "$tmp/fa_$arch" "$tmp/fb_$arch" >/dev/null && ok "$arch: mpirun -np 2 = one process, every file byte for byte" || bad "$arch: np 2 differs from np 1"
  fi
  QKV_BIN=$qkv QKV_SWEEP_F32=$tmp/fa_$arch QKV_SWEEP_TOKENS=$tmp/f_$arch.u32 QKV_SWEEP_TOKEN_DTYPE=uint32 QKV_SWEEP_MODEL=$tmp/m_$arch \
    PYTHONPATH=$src/python $py -m pytest -q -p no:cacheprovider --noconftest -k windows_equal_qkv_dump \
    "$src/tests/python/test_store.py" >"$tmp/pytest.out" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && ! grep -q skipped "$tmp/pytest.out"; then ok "$arch: the shards hold exactly what qkv dump writes"; else bad "$arch: shards vs qkv dump: exit $rc"; tail -15 "$tmp/pytest.out"; fi
done

# Errors before any work: exit 2 for usage, 1 for data, a message naming the culprit.
check "unreadable corpus" 1 "qkv: error: .*$tmp/missing.txt" -- sweep --corpus "$tmp/missing.txt" --out "$tmp/e1"
[ ! -e "$tmp/e1" ] && ok "unreadable corpus: nothing written" || bad "unreadable corpus: $tmp/e1 was created"
check "window longer than the context" 2 'qkv: error: --window 129 is longer than the model.s context \(128 positions\)' -- sweep --tokens-file "$tmp/rep.u16" --window 129 --out "$tmp/e2"
[ ! -e "$tmp/e2" ] && ok "long window: nothing written" || bad "long window: $tmp/e2 was created"
check "unknown hook" 2 'qkv: error: --save blocks.9.hook_z: no such hook' -- sweep --tokens-file "$tmp/rep.u16" --save blocks.9.hook_z --out "$tmp/e3"
check "neither --corpus nor --tokens-file" 2 'qkv: error: give either --corpus' -- sweep --out "$tmp/e4"
check "an existing sweep without --resume" 2 "qkv: error: .*already holds a sweep" -- sweep "${args[@]}" --out "$tmp/a"
check "--resume with another window" 2 'qkv: error: --resume: window differs' -- sweep "${args[@]/#128/64}" --out "$tmp/a" --resume
check "--resume of nothing" 2 'qkv: error: --resume: .* holds no sweep' -- sweep "${args[@]}" --out "$tmp/e5" --resume
printf '\x01\x00\x2c\x01' >"$tmp/big.u16"  # ids 1 and 300: 300 is outside the bundled model's 256
check "an id outside the vocabulary" 1 "qkv: error: .*big.u16: token 1 is id 300" -- sweep --tokens-file "$tmp/big.u16" --window 2 --out "$tmp/e6"
printf '\x01\x00\x02' >"$tmp/odd.u16"
check "a token file of odd size" 1 "qkv: error: .*odd.u16: 3 bytes is not a whole number of 16-bit ids" -- sweep --tokens-file "$tmp/odd.u16" --out "$tmp/e7"
check "a corpus shorter than a window" 1 'qkv: error: the corpus has 2 tokens, fewer than one window \(128\)' -- sweep --tokens-file "$tmp/big.u16" --out "$tmp/e8"
check "negative --chunk-windows" 2 'qkv: error: --chunk-windows must be >= 1' -- sweep --tokens-file "$tmp/rep.u16" --chunk-windows -1 --out "$tmp/e9"
check "help says whether MPI is built in" 0 '^MPI: ' -- sweep --help
exit $fail
