#!/usr/bin/env bash
# GPU machine, experiments: builds the benchmark once per compile-time kernel variant (in parallel), runs the GPU
# tests of the variants named in TEST_VARIANTS (plain), then the benchmark of every variant on the same points.
# Usage: bench/cuda/kernel_variants.sh "name1:-DFLAG=1 -DOTHER=2" "name2:" ...   (BENCH_ARGS: benchmark points;
# NO_BENCH=1: build and test only, for a caller that runs its own benchmark rounds, e.g. bench/cuda/switch_sweep.sh)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT_DIR=${OUT:-$ROOT/build/gpu-out}
LOG_DIR=$ROOT/build/variant-logs  # build logs stay on the machine; CSVs and test logs go to $OUT
mkdir -p "$OUT_DIR" "$LOG_DIR"
declare -A FLAGS
names=()
for spec in "$@"; do names+=("${spec%%:*}"); FLAGS[${spec%%:*}]=${spec#*:}; done
echo "== build ${names[*]} ($(date -u +%H:%M:%S))"
for n in "${names[@]}"; do
  ( b=$ROOT/build/var-$n
    cmake -S "$ROOT" -B "$b" -DMINIMAKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMINIMAKV_BUILD_TESTS=ON \
      -DMINIMAKV_BUILD_BENCH=OFF -DMINIMAKV_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_FLAGS=${FLAGS[$n]}" \
      > "$LOG_DIR/cmake-$n.log" 2>&1 &&
    cmake --build "$b" --target minimakv_cuda_tests minimakv_cuda_bench -j 4 > "$LOG_DIR/build-$n.log" 2>&1 \
      || { echo "BUILD FAILED $n"; grep -E "error" -A3 "$LOG_DIR/build-$n.log" | head -30; } ) &
done
wait
for n in "${names[@]}"; do
  echo "-- $n: ${FLAGS[$n]}"; awk '/Compiling entry function .*DecodePartial/ {match($0, /DecodePartial[A-Za-z]*KernelILNS_8KvFormatE[0-9]ELi[0-9]+/); k=substr($0, RSTART+13, RLENGTH-13)} /Used [0-9]+ registers/ && k != "" {print "  " k, $5, "regs"; k=""} /spill stores/ && $5 != "0" && k != "" {print "  SPILL", $0}' "$LOG_DIR/build-$n.log" | sort -u
done
for n in ${TEST_VARIANTS:-}; do
  echo "== tests $n ($(date -u +%H:%M:%S))"
  t=$(find "$ROOT/build/var-$n" -name minimakv_cuda_tests -type f | head -1)
  "$t" > "$OUT_DIR/tests-$n.log" 2>&1; echo "tests $n rc=$?"; grep FAIL "$OUT_DIR/tests-$n.log" | head -5; tail -1 "$OUT_DIR/tests-$n.log"
done
[[ ${NO_BENCH:-0} == 1 ]] && { echo "== built, no benchmark ($(date -u +%H:%M:%S))"; exit 0; }
for n in "${names[@]}"; do
  echo "== bench $n ($(date -u +%H:%M:%S))"
  bench=$(find "$ROOT/build/var-$n" -name minimakv_cuda_bench -type f | head -1)
  "$bench" --csv "$OUT_DIR/bench-$n.csv" ${BENCH_ARGS:-} 2>&1 | grep -E " (tq3|mix|fp8|bf16) " | cut -c1-140
done
echo "== done ($(date -u +%H:%M:%S))"
