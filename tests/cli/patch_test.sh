#!/usr/bin/env bash
# qkv patch and qkv attribute as a user runs them: the seeds' picture on the bundled model's repeated-sequence
# task (keys matter in the induction heads, values in the previous-token head and the induction heads), path
# patching, the heatmap, DLA adding up, and the argument errors (exit 2 naming the argument; 1 for bad data).
# Usage: patch_test.sh QKV_BINARY SOURCE_DIR
set -uo pipefail
qkv=$1 src=$2
fx=$src/tests/reference/fixtures
bundled=$src/models/induction
toks=3,57,14,92,0,57,14,92,41,100,7,57
bad_toks=3,21,14,92,0,57,14,66,41,100,7,57
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "$0")/lib.sh"
export QKV_THREADS=${QKV_THREADS:-1}

# ---- the seeds' picture on the bundled model (noising: the first copy replaced, loss on the second) ----
for h in k v; do
  "$qkv" patch --model "$bundled" --repeated 25 --hook attn.hook_$h --json >"$tmp/$h.json" 2>"$tmp/$h.err" \
    && ok "repeated hook_$h: exit 0" || { bad "repeated hook_$h"; cat "$tmp/$h.err"; }
done
python3 - "$tmp/k.json" "$tmp/v.json" <<'PY' && ok "K matters in the induction heads (not in the previous-token head), V in the previous-token head and the induction heads" || bad "the seeds' picture"
import json, sys
def grid(p):
    j = json.load(open(p))
    assert j["forwards"] == 2 + len(j["sites"]), j["forwards"]
    assert j["clean"] < 0.1 and j["corrupt"] > 5, (j["clean"], j["corrupt"])
    return {(s["layer"], s["head"]): s["normalised"] for s in j["sites"]}
k, v = grid(sys.argv[1]), grid(sys.argv[2])
print("   k:", {f"{l}.{h}": round(x, 3) for (l, h), x in sorted(k.items())})
print("   v:", {f"{l}.{h}": round(x, 3) for (l, h), x in sorted(v.items())})
assert k[(0, 1)] > 0.99, k          # the previous-token head attends by position: its keys do not matter
assert k[(1, 0)] < 0.9, k           # the induction head's keys decide where it looks
assert v[(0, 1)] < 0.5, v           # the previous-token head's values ARE the note the induction key reads
assert v[(1, 0)] < 0.9, v           # the induction head's values are what it copies
PY
"$qkv" patch --model "$bundled" --repeated 25 --path 0.1:1.0:k --json >"$tmp/path.json" 2>&1
python3 - "$tmp/path.json" <<'PY' && ok "path 0.1 -> 1.0 k carries most of the key's effect" || { bad "path"; cat "$tmp/path.json" | head; }
import json, sys
j = json.load(open(sys.argv[1]))
print("   path normalised %.3f, receiver's whole k %.3f, share %.3f" % (j["normalised"], j["receiver_only_normalised"], j["fraction_of_receiver_effect"]))
assert j["fraction_of_receiver_effect"] >= 0.5 and j["forwards"] == 6
PY
check path-table 0 'the path carries [0-9.]+% of the receiver.s k effect' -- patch --model "$bundled" --repeated 25 --path 0.1:1.2:k
check table 0 'layer 1 +[0-9.-]+ +[0-9.-]+ +[0-9.-]+ +[0-9.-]+' -- patch --model "$bundled" --repeated 10 --hook attn.hook_v
check text-inputs 0 'forwards' -- patch --model "$bundled" --clean "the cat sat on the mat" --corrupt "the dog sat on the mat" --answer t --wrong d --position 4 --hook hook_resid_pre --per-position

# ---- fixtures: every kind of hook, the heatmap ----
check per-position 0 '[0-9]+ sites, [0-9]+ forwards' -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --answer 14 --wrong 66 --hook attn.hook_z --per-position
check denoising 0 'denoising' -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --loss-positions 5-8 --hook attn.hook_pattern --direction denoising
"$qkv" patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --answer 14 --wrong 66 --hook attn.hook_q --per-position --svg "$tmp/q.svg" >/dev/null 2>&1
if [ -s "$tmp/q.svg" ] && head -c 4 "$tmp/q.svg" | grep -q '<svg' && grep -q '0\.1' "$tmp/q.svg" && python3 -c "import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])" "$tmp/q.svg"; then
  ok "svg heatmap written, well-formed, with layer.head labels"
else
  bad "svg heatmap"
fi
"$qkv" attribute --model "$fx/tiny" --tokens $toks --answer 14 --wrong 66 --json >"$tmp/dla.json" 2>&1
python3 - "$tmp/dla.json" <<'PY' && ok "attribute: the terms add up to the logit difference; lens has every layer" || { bad "attribute"; head "$tmp/dla.json"; }
import json, sys
j = json.load(open(sys.argv[1]))
assert abs(j["sum_minus_logit_diff"]) < 1e-4 * (1 + abs(j["logit_diff"])), j["sum_minus_logit_diff"]
assert abs(sum(t["value"] for t in j["terms"]) - j["logit_diff"]) < 1e-4 * (1 + abs(j["logit_diff"]))
assert len(j["lens"]) == 3 and abs(j["lens"][-1]["logit_diff"] - j["logit_diff"]) < 1e-4 * (1 + abs(j["logit_diff"]))
assert len([t for t in j["terms"] if t["kind"] == "head"]) == 6
PY
check attribute-table 0 'the terms sum to' -- attribute --model "$bundled" --text "abcabcab" --answer c --wrong a

# ---- errors ----
check unequal 2 '^qkv: error: --clean and --corrupt must have equal length' -- patch --model "$fx/tiny" --clean-tokens 1,2,3 --corrupt-tokens 1,2 --answer 1 --wrong 2 --hook attn.hook_v
check bad-hook 2 "^qkv: error: --hook: no hook point 'blocks.0.attn.hook_x'" -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --answer 1 --wrong 2 --hook attn.hook_x
check bad-layer 2 '^qkv: error: --hook: .blocks.5.attn.hook_v. does not name a layer' -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --answer 1 --wrong 2 --hook blocks.5.attn.hook_v
check no-metric 2 '^qkv: error: no metric' -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --hook attn.hook_v
check no-hook 2 '^qkv: error: give --hook' -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --answer 1 --wrong 2
check bad-answer 2 '^qkv: error: --answer: token 101 is outside' -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --answer 101 --wrong 2 --hook attn.hook_v
check multi-token 2 "^qkv: error: --wrong: 'cat' is 3 tokens" -- patch --model "$bundled" --repeated 5 --answer a --wrong cat --hook attn.hook_v
check bad-loss-pos 2 '^qkv: error: --loss-positions: 11 is outside \[0, 11\)' -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --loss-positions 3,11 --hook attn.hook_v
check bad-range 2 '^qkv: error: --loss-positions' -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --loss-positions 5-x --hook attn.hook_v
check bad-direction 2 "^qkv: error: --direction: 'sideways'" -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --answer 1 --wrong 2 --hook attn.hook_v --direction sideways
check bad-path 2 '^qkv: error: --path: .0\.1-1\.0. is not SENDER:RECEIVER' -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --answer 1 --wrong 2 --path 0.1-1.0
check path-order 2 "^qkv: error: path: the sender's layer \(1\) must come before" -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --answer 1 --wrong 2 --path 1.0:0.1:k
check path-head 2 '^qkv: error: path: receiver head 3 is outside \[0, 3\)' -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --answer 1 --wrong 2 --path 0.0:1.3:q
check bad-token 2 '^qkv: error: --corrupt-tokens: id 200' -- patch --model "$fx/tiny" --clean-tokens 1,2 --corrupt-tokens 1,200 --answer 1 --wrong 2 --hook attn.hook_v
check no-corrupt 2 '^qkv: error: give one of --corrupt' -- patch --model "$fx/tiny" --clean-tokens 1,2 --answer 1 --wrong 2 --hook attn.hook_v
check attr-no-answer 2 '^qkv: error: --answer and --wrong are required' -- attribute --model "$fx/tiny" --tokens $toks
check attr-position 2 '^qkv: error: --position: 12 is outside \[0, 12\)' -- attribute --model "$fx/tiny" --tokens $toks --answer 1 --wrong 2 --position 12
check no-model 1 '^qkv: error: ' -- patch --model "$fx/does-not-exist" --repeated 3 --hook attn.hook_v
mkdir -p "$tmp/ro" && chmod a-w "$tmp/ro"
if [ "$(id -u)" != 0 ]; then
  check svg-unwritable 1 '^qkv: error: .*ro/x.svg' -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --answer 1 --wrong 2 --hook attn.hook_v --svg "$tmp/ro/x.svg"
fi
check svg-missing-dir 1 '^qkv: error: .*nodir/x.svg' -- patch --model "$fx/tiny" --clean-tokens $toks --corrupt-tokens $bad_toks --answer 1 --wrong 2 --hook attn.hook_v --svg "$tmp/nodir/x.svg"
[ ! -e "$tmp/nodir/x.svg" ] && ok "no half-written svg" || bad "an svg was left behind"
exit $fail
