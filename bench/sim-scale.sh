#!/bin/sh
# libi-sim at scale (not part of CI): the tables and the plot of bench/results.md §8.
# Writes bench/data/sim-*.json and bench/sim-launch.svg; prints the tables.
# Takes ~15 minutes on the project's 2-core VM (each 100k-agent run ~1 min, ~4 GB).
set -eu
cd "$(dirname "$0")/.."
cargo build --release -q -p libi-sim
SIM=target/release/libi-sim
mkdir -p bench/data
echo "== 1. MPI_Init of MPICH 4 (its PMI-1 sequence without the card allgather), 16 ranks/agent, gets climb (lazy)"
$SIM --nodes 1000,10000,100000 --ppn 16 --workload mpich-init --skip-slice --tree greedy,kary:16,binomial,flat \
     --kvs-push-max 0 --json bench/data/sim-scale-init.json
echo "== 2. The whole MPICH 4 sequence (card allgather included): every node fetches every card"
$SIM --nodes 64,256,1000 --ppn 16 --workload mpich-init --tree greedy \
     --kvs-push-max 0,16M --json bench/data/sim-scale-allgather.json
echo "== 3. Launch batching (ssh costs, 16 ranks/agent, fence workload)"
$SIM --nodes 1000,10000 --ppn 16 --workload fence --costs ssh --tree greedy,flat --batch none,16,128 --kvs-push-max 0 \
     --json bench/data/sim-scale-batch.json
echo "== 4. Launch against the launch model, ssh costs (SEQ 7 ms, REM 0.3 s), 16 ranks/agent"
$SIM --nodes 100,300,1000,3000,10000,30000,100000 --ppn 16 --workload fence --costs ssh \
     --tree greedy,kary:16,binomial,flat --kvs-push-max 0 --json bench/data/sim-scale-launch.json --svg bench/sim-launch.svg
