#!/usr/bin/env bash
# npm_ci.sh PACKAGE_DIR DEST SENTINEL [npm options]: installs PACKAGE_DIR's package-lock.json into DEST
# (npm ci) unless DEST already holds that very lockfile and node_modules/SENTINEL. Every npm install of the
# tests goes through here: one lock per DEST (flock), so tests that ctest -j runs at once, and test.sh's
# prefetch, never install into a directory another is installing into or reading from. DEST may equal
# PACKAGE_DIR (install in place). Prints one line when it installs; exit 1 with the reason when npm fails.
set -uo pipefail
pkg=$1 dest=$2 sentinel=$3
shift 3
command -v npm >/dev/null || { echo "npm_ci: npm is not installed (apt-get install -y nodejs npm)" >&2; exit 1; }
mkdir -p "$dest" || exit 1
pkg=$(cd "$pkg" && pwd) && dest=$(cd "$dest" && pwd) || exit 1  # absolute: npm runs after a cd
exec 9>"$dest/.lock"
flock 9
stamp=$dest/node_modules/.qkv-lock  # the lockfile the installed tree came from
[ -f "$dest/node_modules/$sentinel" ] && cmp -s "$pkg/package-lock.json" "$stamp" && exit 0
echo "npm ci into $dest"
if [ "$pkg" != "$dest" ]; then
  cp "$pkg/package.json" "$pkg/package-lock.json" "$dest/" || exit 1
fi
if ! (cd "$dest" && npm ci --no-audit --no-fund "$@" >"$dest/.npm.log" 2>&1); then
  echo "npm_ci: npm ci in $dest failed; its last lines:" >&2
  tail -5 "$dest/.npm.log" >&2
  exit 1
fi
cp "$pkg/package-lock.json" "$stamp"
