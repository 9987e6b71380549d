#!/usr/bin/env bash
# The whole test suite: installs dependencies, checks formatting and lints, builds, and runs
# every test (unit, property, end-to-end with real MPICH programs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo build --workspace --bins
cargo test --workspace
