#!/usr/bin/env bash
# Install what the test suite needs on a fresh Debian 12 machine (run as root, or with sudo
# available). Idempotent: skips apt when everything is already there.
set -euo pipefail
pkgs=(mpich libmpich-dev openssh-server openssh-client iproute2 procps libpmi2-0-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "ci/install-deps.sh: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "ci/install-deps.sh: cargo not found (install Rust with rustup)" >&2; exit 1; }
rustup component list --installed 2>/dev/null | grep -q clippy || rustup component add clippy rustfmt
