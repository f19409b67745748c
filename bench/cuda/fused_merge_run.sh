#!/usr/bin/env bash
# v13 (helper cuda-s5b), one device call: configure + build the GPU tests and benchmark, run the tests plain, the
# merge A/B on the mix points (separate merge kernel vs merge fused into the partial kernels vs no merge, interleaved
# run by run: minimakv_cuda_bench --merge-ab), then the tests under compute-sanitizer memcheck; the A/B table last.
# Writes logs and CSV under $OUT when set. Usage: bench/cuda/fused_merge_run.sh   (RUNS=30 by default)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT_DIR=${OUT:-$ROOT/build/gpu-out}
BUILD=${MINIMAKV_GPU_BUILD:-$ROOT/build/gpu-fused}
mkdir -p "$OUT_DIR" "$BUILD"
JOBS=$(nproc 2>/dev/null || echo 8)
POINTS="--only qwen3.6-27b 32768 1 --only qwen3.6-27b 32768 8 --only qwen3.6-27b 65536 1 --only qwen3.6-27b 65536 8
        --only llama3-8b 32768 1 --only llama3-8b 32768 8 --only llama3-8b 65536 1 --only llama3-8b 65536 8"
status=0

echo "== configure + build ($(date -u +%H:%M:%S))"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
# PREBUILT: a folder with minimakv_cuda_tests and minimakv_cuda_bench built elsewhere from the same tree (nvcc 13,
# sm_90), used only if this build fails (e.g. another helper's uncommitted file in the copied working tree).
# The fused merge is compiled out by default (measured slower, docs/cuda-notes.md v13): this build compiles it in.
if cmake -S "$ROOT" -B "$BUILD" -DMINIMAKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMINIMAKV_BUILD_TESTS=ON \
     -DCMAKE_CUDA_FLAGS="${FUSED_FLAGS--DMINIMAKV_FUSED_MERGE_KERNELS=1}" \
     -DMINIMAKV_BUILD_BENCH=OFF -DMINIMAKV_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=Release > "$BUILD/cmake.log" 2>&1 &&
   cmake --build "$BUILD" --target minimakv_cuda_tests minimakv_cuda_bench -j "$JOBS" > "$BUILD/build.log" 2>&1; then
  grep -E "registers|spill" "$BUILD/build.log" | grep -B1 -E "[1-9][0-9]* bytes spill" | head -10
  TESTS=$(find "$BUILD" -name minimakv_cuda_tests -type f | head -1)
  BENCH=$(find "$BUILD" -name minimakv_cuda_bench -type f | head -1)
else
  tail -5 "$BUILD/cmake.log"; grep -E "error" -A3 "$BUILD/build.log" | head -30
  [[ -n ${PREBUILT:-} && -x ${PREBUILT}/minimakv_cuda_tests ]] || exit 1
  echo "BUILD FAILED here: using the prebuilt binaries of $PREBUILT"
  TESTS=$PREBUILT/minimakv_cuda_tests
  BENCH=$PREBUILT/minimakv_cuda_bench
fi

echo "== GPU tests ($(date -u +%H:%M:%S))"
"$TESTS" > "$OUT_DIR/tests.log" 2>&1
test_rc=$?
grep -E "FAIL|fused merge (applied|not applied)" "$OUT_DIR/tests.log" | head -20
grep -E "^  decode" "$OUT_DIR/tests.log" | grep -E "\[fp8 tq3 \]|\[tq3 bf16 fp8 \]" | head -8
tail -2 "$OUT_DIR/tests.log"

echo "== merge A/B ($(date -u +%H:%M:%S))"
# shellcheck disable=SC2086
"$BENCH" --merge-ab --runs "${RUNS:-30}" --csv "$OUT_DIR/merge_ab.csv" $POINTS > "$OUT_DIR/merge_ab.log" 2>&1
bench_rc=$?
grep -vE "^(qwen|llama)" "$OUT_DIR/merge_ab.log" | head -30

echo "== compute-sanitizer memcheck ($(date -u +%H:%M:%S))"
timeout "${MEMCHECK_TIMEOUT_S:-150}" compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 "$TESTS" \
  > "$OUT_DIR/memcheck.log" 2>&1
memcheck_rc=$?
grep -E "FAIL" "$OUT_DIR/memcheck.log" | head -5
tail -4 "$OUT_DIR/memcheck.log"

[[ $test_rc -ne 0 || $bench_rc -ne 0 || $memcheck_rc -ne 0 ]] && status=1
echo "== done ($(date -u +%H:%M:%S)) status=$status (tests plain rc=$test_rc, memcheck rc=$memcheck_rc, bench rc=$bench_rc)"
grep -E "checks, .* failures" "$OUT_DIR/tests.log" "$OUT_DIR/memcheck.log"
sed -n '/== merge A\/B/,$p' "$OUT_DIR/merge_ab.log"
exit $status
