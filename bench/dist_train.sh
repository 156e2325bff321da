#!/usr/bin/env bash
# Data-parallel measurements on this machine (loopback): `attn bench train` on 1 and 2 ranks
# (tokens/s of the global batch, the all-reduce's share of the step), then `attn bench allreduce`
# (time vs message size and its alpha-beta fit) for docs/scaling.md.
#   usage: bench/dist_train.sh [BUILD_DIR]   (default build; 1 thread per rank)
set -euo pipefail
ATTN=${1:-build}/attn
MPI=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1
SHAPE=(--layers 2 --context 256 --batch 4 --steps 5 --threads 1)
echo "== attn bench train, 1 process"
"$ATTN" bench train "${SHAPE[@]}"
echo "== attn bench train, 2 ranks (same global batch)"
"${MPI[@]}" -np 2 "$ATTN" bench train "${SHAPE[@]}" < /dev/null
echo "== attn bench allreduce, 2 ranks"
"${MPI[@]}" -np 2 "$ATTN" bench allreduce --min-kib 4 --max-kib 65536 < /dev/null
