#!/bin/sh
# Runs the PyTorch TreeLSTM peer at its best, per docs/benchmarks.md ("The peer at its best").
#
#   bench/torch/run_peer.sh CORES STYLE TRAIN_FILE EPOCHS LIMIT [more treelstm_torch.py args]
#
#   CORES   1 -> taskset -c 0, 1 torch thread, 1 BLAS thread; 2 -> taskset -c 0,1, 2 and 2;
#           N -> cpus 0..N-1.
#   STYLE   naive | batched
#   LIMIT   first N training trees (0 = all)
# e.g. bench/torch/run_peer.sh 1 batched ../shared/data/sst/train.txt 3 0 --dev ../shared/data/sst/dev.txt
# Prints one JSON line per epoch (--json is always passed).
set -eu
if [ $# -lt 5 ]; then
    sed -n '2,11p' "$0" >&2
    exit 2
fi
cores=$1; style=$2; data=$3; epochs=$4; limit=$5
shift 5
case $cores in
    ''|*[!0-9]*|0) echo "run_peer.sh: CORES must be a positive integer" >&2; exit 2 ;;
esac
if [ "$cores" -eq 1 ]; then cpus=0; else cpus="0-$((cores - 1))"; fi
here=$(dirname "$0")
# - unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE: let OpenBLAS pick its AVX-512 kernels
# - glibc malloc: keep large tensors mapped (no mmap/munmap per step)
# - one BLAS thread per core (Debian's OpenBLAS pool is not controlled by torch);
#   one torch thread per core via --threads (torch.set_num_threads)
exec env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296 \
    OPENBLAS_NUM_THREADS="$cores" OMP_NUM_THREADS="$cores" \
    taskset -c "$cpus" /usr/bin/python3 "$here/treelstm_torch.py" \
    --train "$data" --style "$style" --epochs "$epochs" --limit "$limit" \
    --threads "$cores" --json "$@"
