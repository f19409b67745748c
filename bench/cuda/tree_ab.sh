#!/usr/bin/env bash
# GPU machine, A/B of two source trees (e.g. a `git archive` export of an older commit and the current one; v14:
# TQ3 bit-plane layout vs selector-ready nibble layout, whose pages differ, so a compile-time switch cannot do it):
# builds both in parallel, runs the GPU tests of the second tree (plain), then the decode benchmark of both trees in
# alternating order, ROUNDS rounds, on the BENCH_ARGS points; prints a table of medians per (tree, point, format)
# last with the new/old time ratio (the tests and rounds are bench/cuda/bin_ab.sh's, run on the built binaries).
# Usage: ROUNDS=3 BENCH_ARGS="--only qwen3.6-27b 65536 8 ..." bench/cuda/tree_ab.sh OLD_NAME:OLD_DIR NEW_NAME:NEW_DIR
#   [NAME:DIR:-DFLAG=1 ...] (a third field: CMAKE_CUDA_FLAGS of that build); TEST_VARIANT (default: the last name)
#   names the build whose GPU tests run. CSV (columns run,variant,round + the benchmark's), test log under $OUT.
set -uo pipefail
OUT_DIR=${OUT:-$PWD/build/gpu-out}
mkdir -p "$OUT_DIR"
JOBS=$(( $(nproc 2>/dev/null || echo 8) / $# + 1 ))
names=(); dirs=(); flags=()
for spec in "$@"; do
  IFS=: read -r n d f <<< "$spec"
  names+=("$n"); dirs+=("$(cd "$d" && pwd)"); flags+=("$f")
done
echo "== build ${names[*]} ($(date -u +%H:%M:%S))"
for i in "${!names[@]}"; do
  ( d=${dirs[$i]}; b=$d/build/ab-${names[$i]}; mkdir -p "$d/build"
    cmake -S "$d" -B "$b" -DMINIMAKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMINIMAKV_BUILD_TESTS=ON \
      -DMINIMAKV_BUILD_BENCH=OFF -DMINIMAKV_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_FLAGS=${flags[$i]}" \
      > "$b.cmake.log" 2>&1 &&
    cmake --build "$b" --target minimakv_cuda_tests minimakv_cuda_bench -j "$JOBS" > "$b.build.log" 2>&1 \
      || { echo "BUILD FAILED ${names[$i]}"; grep -E "error" -A3 "$b.build.log" | head -30; } ) &
done
wait
for i in "${!names[@]}"; do
  echo "-- ${names[$i]} ${flags[$i]}"
  grep -E "Used [0-9]+ registers|spill" "${dirs[$i]}/build/ab-${names[$i]}.build.log" | grep -B1 "[1-9][0-9]* bytes spill" | head -4
done
tv=${TEST_VARIANT:-${names[-1]}}
for i in "${!names[@]}"; do [[ ${names[$i]} == "$tv" ]] && tdir=${dirs[$i]}; done
tests=$(find "$tdir/build/ab-$tv" -name minimakv_cuda_tests -type f | head -1)
# The tests and the alternating benchmark rounds are bin_ab.sh's, on the binaries just built.
benches=()
for i in "${!names[@]}"; do
  benches+=("${names[$i]}:$(find "${dirs[$i]}/build/ab-${names[$i]}" -name minimakv_cuda_bench -type f | head -1)")
done
AB_CSV=tree-ab.csv TESTS="$tv:$tests" bash "$(dirname "${BASH_SOURCE[0]}")/bin_ab.sh" "${benches[@]}"
