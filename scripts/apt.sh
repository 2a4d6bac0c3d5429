# Sourced by scripts/setup.sh and scripts/test.sh: installs Debian packages that are missing (one
# `apt-get update` per process, only when something is missing), via sudo when not root.
# shellcheck shell=bash
QKV_SUDO=""
[ "$(id -u)" -eq 0 ] || QKV_SUDO="sudo"
qkv_apt_updated=0

qkv_apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  echo "qkv: installing ${missing[*]}" >&2
  if [ "$qkv_apt_updated" = 0 ]; then
    $QKV_SUDO apt-get update -qq
    qkv_apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $QKV_SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
