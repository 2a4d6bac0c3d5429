#!/usr/bin/env bash
# Installs BUILD into a temporary prefix, builds this directory's consumer against it with
# find_package(qkv), runs a forward on the bundled model and compares it with BUILD/qkv run.
# Usage: bash tests/package/run.sh [BUILD]     (default build)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-build}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/tests/package" -B "$work/app" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/app" >/dev/null
ids=5,17,9,5,17,9,5
got=$("$work/app/app" "$src/models/induction" "$ids")
want=$("$build/qkv" run --model "$src/models/induction" --tokens "$ids" --json |
       /usr/bin/python3 -c 'import json, sys; t = json.load(sys.stdin)["top"][0]; print(t["id"], repr(t["logit"]))')
if /usr/bin/python3 -c 'import sys; a, b = sys.argv[1].split(), sys.argv[2].split(); sys.exit(not (a[0] == b[0] and abs(float(a[1]) - float(b[1])) <= 1e-6 * max(1, abs(float(b[1])))))' "$got" "$want"; then
  echo "qkv package: find_package(qkv) consumer built against $work/prefix; its forward agrees with qkv run ($got)" >&2
else
  echo "qkv package: the consumer's forward ($got) differs from qkv run's ($want)" >&2
  exit 1
fi
