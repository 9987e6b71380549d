#!/usr/bin/env bash
# The whole test suite: installs dependencies, checks formatting and lints, builds, brings up
# a single-node Slurm and network-namespace test hosts with their own sshd (needs root), and
# runs every test — unit, property, end-to-end with real MPICH programs, multi-node over real
# ssh, under Slurm — then tears Slurm and the hosts down again.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The API documentation builds without a broken link.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
cargo build --workspace
# MPICH's PMI headers (Debian's mpich source), which tests/pmi_api.rs checks our libpmi.so
# and libpmi2.so against; that test fails without them under LIBI_REQUIRE_MPICH_SRC=1.
bash ci/mpich-source.sh
export LIBI_REQUIRE_SSH_TESTS=1 LIBI_REQUIRE_SLURM_TESTS=1 LIBI_REQUIRE_MPICH_SRC=1 LIBI_REQUIRE_MULTIUSER_TESTS=1 LIBI_REQUIRE_PMIX_TESTS=1
bash ci/with-slurm.sh -- bash ci/with-netns-hosts.sh 4 -- cargo test --workspace --no-fail-fast
# MPICH's own test suite (its spawn and init directories: dynamic processes, name service,
# exit statuses, MPI_Abort) under libi-mpiexec, on this machine and over 4 ssh hosts.
bash ci/with-netns-hosts.sh 4 -- bash ci/mpich-testsuite.sh --ssh-hosts spawn init
# mpi4py's own test suite built against Open MPI 5, under Open MPI's mpirun and under
# libi-mpiexec -pmi pmix, module by module: a module that passes under mpirun and not under
# libi fails the run (unless listed, with its reason, in the script's known differences).
bash ci/mpi4py-suite.sh -n 2
