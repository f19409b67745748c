#!/usr/bin/env bash
# GPU machine, one call for a kernel experiment: builds the working-tree default and compile-time variants in
# parallel (bench/cuda/kernel_variants.sh; the default is the variant named "default", flags empty), runs the GPU
# tests of TEST_VARIANTS (plain), benchmarks every variant on BENCH_ARGS points, then runs
# scripts/gpu_check_and_bench.sh all on the default build (tests plain + memcheck, full benchmark, torch, summary).
# Usage: TEST_VARIANTS="v10" BENCH_ARGS="--only ..." bench/cuda/ab_then_full.sh "v10:-DFLAG=0" ...
# All files go to $OUT/w and are packed into $OUT/results.tgz at the end (the device tool returns at most 8 files).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FINAL_OUT=${OUT:-$ROOT/build/gpu-out}
WORK=$FINAL_OUT/w
mkdir -p "$WORK"
OUT=$WORK "$ROOT/bench/cuda/kernel_variants.sh" "default:" "$@"
echo "== full run of the default build ($(date -u +%H:%M:%S))"
OUT=$WORK BENCH_ARGS= MINIMAKV_GPU_BUILD=$ROOT/build/var-default "$ROOT/scripts/gpu_check_and_bench.sh" all
status=$?
tar czf "$FINAL_OUT/results.tgz" -C "$WORK" . && rm -rf "$WORK"
exit $status
