# Sourced by retrain_bundled.sh and retrain_llama.sh: run BLIS with the micro-kernel the bundled model was
# trained with when this CPU can run it, so that the byte-for-byte comparison holds on more machines than
# the one that made it (qkv picks zen3's kernel on Zen 4 for speed, but skx's runs there too, just slower).
# A BLIS_ARCH_TYPE already set is kept. Usage: use_recorded_blis MODEL_DIR
use_recorded_blis() {
  [ -n "${BLIS_ARCH_TYPE:-}" ] && return 0
  local kernel id
  kernel=$(python3 -c 'import json, struct, sys
b = open(sys.argv[1] + "/model.safetensors", "rb"); n = struct.unpack("<Q", b.read(8))[0]
print(json.loads(json.loads(b.read(n))["__metadata__"]["qkv_train"]).get("blis_kernel", ""))' "$1") || return 0
  # BLIS 0.9's arch_t values, and the CPU flags each kernel needs.
  case $kernel in
    skx) id=0; for f in avx512f avx512dq avx512bw avx512vl; do grep -qw $f /proc/cpuinfo || return 0; done ;;
    zen3) id=6; for f in avx2 fma; do grep -qw $f /proc/cpuinfo || return 0; done ;;
    haswell) id=3; for f in avx2 fma; do grep -qw $f /proc/cpuinfo || return 0; done ;;
    *) return 0 ;;
  esac
  export BLIS_ARCH_TYPE=$id
  echo "note $test_label: BLIS_ARCH_TYPE=$id ($kernel, as the bundled model was made)"
}
