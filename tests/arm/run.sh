#!/usr/bin/env bash
# Cross-compiles the fused attention kernels and the fused dequantizing products for aarch64 (Debian's g++-aarch64-linux-gnu; no BLIS,
# no GoogleTest) with tests/arm/flash_arm_test.cpp and runs the result under qemu-aarch64 (Debian's
# qemu-user): the portable and NEON paths against the double reference. Installs those packages (and
# the target's libc, libc6-dev-arm64-cross) when missing.
# Usage: bash tests/arm/run.sh [build-dir]   (default build-arm)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build-arm}
need=()
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
[ -f /usr/aarch64-linux-gnu/include/stdio.h ] || need+=(libc6-dev-arm64-cross)  # the target's libc
if ((${#need[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p "$out"
# The sources the kernels need; strict IEEE as in the main build (no -ffast-math).
aarch64-linux-gnu-g++ -std=c++20 -O2 -fopenmp -fno-fast-math -Wall -Wextra -Wno-unused-parameter -Iinclude \
  src/core/flash.cpp src/core/flash_kernels.cpp src/core/flash_kernels_avx2.cpp src/core/flash_kernels_neon.cpp \
  tests/arm/flash_arm_test.cpp -o "$out/flash_arm_test"
# the target libc (libc6-arm64-cross, a dependency of the compiler) from its Debian prefix
OMP_NUM_THREADS=2 qemu-aarch64 -L /usr/aarch64-linux-gnu "$out/flash_arm_test"
# The fused dequantize-and-multiply kernels (portable and NEON) against their double twin.
aarch64-linux-gnu-g++ -std=c++20 -O2 -fopenmp -fno-fast-math -Wall -Wextra -Wno-unused-parameter -Iinclude -Isrc \
  src/core/flash.cpp src/core/flash_kernels.cpp src/core/flash_kernels_avx2.cpp src/core/flash_kernels_neon.cpp \
  src/io/half.cpp src/io/quant*.cpp src/io/qmatmul.cpp src/io/qmatmul_avx2.cpp src/io/qmatmul_avx512.cpp \
  src/io/qmatmul_neon.cpp tests/arm/qmatmul_arm_test.cpp -o "$out/qmatmul_arm_test"
OMP_NUM_THREADS=2 qemu-aarch64 -L /usr/aarch64-linux-gnu "$out/qmatmul_arm_test"
