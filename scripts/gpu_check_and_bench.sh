#!/usr/bin/env bash
# GPU machine: configure + build the CUDA code, run the GPU correctness program plain and under
# compute-sanitizer memcheck, run the decode benchmark (+ torch SDPA comparison), print a summary table last.
# Usage: scripts/gpu_check_and_bench.sh [tests|bench|all]   (default all). Writes CSV and logs under $OUT if set.
# BENCH_ARGS: extra benchmark flags (e.g. "--only qwen3.6-27b 65536 8 --only llama3-8b 65536 8"; the torch script
# takes --quick and, since session 16, --only too; SKIP_TORCH=1 skips it).
# REAL_KV_CAPTURE: a capture file of a real model's K/V (`minimakv eval capture-kv`, docs/cli.md; made on the CPU
# machine and carried, it is not in the tree): the tests then also run minimakv_real_kv_check on it, plain and under
# memcheck (the CUDA decode of its layers against the CPU kernels on the same pages and against dense attention).
# Where python3 has torch, the tests also run the PyTorch check (tests/python/torch_decode_check.py; SKIP_PYTHON=1
# skips it).
# QUERY_TOKENS (default "2 4"; empty skips): the bench then also runs the Llama-3-8B and Qwen3.6-27B 32K batch-8
# points with that many query tokens per sequence (speculative decoding's verification), ours and torch SDPA's,
# appended to the same CSVs (shape SHAPE-tT), so the summary shows them as rows of their own.
# CAPACITY_POINTS (default bench/cuda/capacity_points.txt; empty skips; session 17): each format at the batch it
# reaches at the memory limit (`minimakv plan`, scripts/capacity_points.py), ours and torch SDPA at the BF16 batch,
# appended to the CSVs with kind "capacity"; the summary then prints decode throughput at equal memory.
# CAPACITY_WARMUP_MS (default 1000; session 18): each of those formats runs its step that long before it is timed
# (--warmup-ms), so each is timed at the clock the board holds under its own steps (they reach the power limit).
set -uo pipefail
MODE=${1:-all}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT_DIR=${OUT:-$ROOT/build/gpu-out}
BUILD=${MINIMAKV_GPU_BUILD:-$ROOT/build/gpu}
mkdir -p "$OUT_DIR" "$BUILD"
JOBS=$(nproc 2>/dev/null || echo 8)
status=0

echo "== configure + build ($(date -u +%H:%M:%S))"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
cmake -S "$ROOT" -B "$BUILD" -DMINIMAKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMINIMAKV_BUILD_TESTS=ON \
  -DMINIMAKV_BUILD_BENCH=OFF -DMINIMAKV_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=Release > "$BUILD/cmake.log" 2>&1 \
  || { tail -30 "$BUILD/cmake.log"; exit 1; }
# (configure and build logs stay in the build folder: $OUT brings back at most 8 files)
cmake --build "$BUILD" --target minimakv_cuda_tests minimakv_cuda_bench -j "$JOBS" > "$BUILD/build.log" 2>&1 \
  || { grep -E "error" -A3 "$BUILD/build.log" | head -60; exit 1; }
grep -E "registers|spill" "$BUILD/build.log" | grep -B1 -E "[1-9][0-9]* bytes spill" | head -10
TESTS=$(find "$BUILD" -name minimakv_cuda_tests -type f | head -1)
BENCH=$(find "$BUILD" -name minimakv_cuda_bench -type f | head -1)

if [[ $MODE == tests || $MODE == all ]]; then
  echo "== GPU tests ($(date -u +%H:%M:%S))"
  "$TESTS" 2>&1 | tee "$OUT_DIR/tests.log" | tail -45
  test_rc=${PIPESTATUS[0]}
  echo "== compute-sanitizer memcheck ($(date -u +%H:%M:%S))"
  compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 "$TESTS" > "$OUT_DIR/memcheck.log" 2>&1
  memcheck_rc=$?
  tail -6 "$OUT_DIR/memcheck.log"
  [[ $test_rc -ne 0 || $memcheck_rc -ne 0 ]] && status=1
  echo "== installed package: tests/install_consumer/cuda_example ($(date -u +%H:%M:%S))"
  # The GPU path through find_package(minimakv) as a user builds it: install this build, build the consumer, run.
  cmake --install "$BUILD" --prefix "$BUILD/prefix" > "$BUILD/install.log" 2>&1 \
    && cmake -S "$ROOT/tests/install_consumer" -B "$BUILD/consumer" -DCMAKE_PREFIX_PATH="$BUILD/prefix" \
      > "$BUILD/consumer.log" 2>&1 \
    && cmake --build "$BUILD/consumer" --target cuda_example -j "$JOBS" >> "$BUILD/consumer.log" 2>&1 \
    && "$BUILD/consumer/cuda_example" | tee -a "$OUT_DIR/tests.log"
  example_rc=${PIPESTATUS[0]}
  [[ -x "$BUILD/consumer/cuda_example" ]] || { tail -20 "$BUILD/install.log" "$BUILD/consumer.log"; example_rc=1; }
  [[ $example_rc -ne 0 ]] && { echo "cuda_example FAILED"; status=1; }
  if [[ -n ${REAL_KV_CAPTURE:-} ]]; then
    echo "== real-model K/V: minimakv_real_kv_check $REAL_KV_CAPTURE ($(date -u +%H:%M:%S))"
    cmake --build "$BUILD" --target minimakv_real_kv_check -j "$JOBS" >> "$BUILD/build.log" 2>&1 \
      || { grep -E "error" -A3 "$BUILD/build.log" | head -30; }
    REAL_KV=$(find "$BUILD" -name minimakv_real_kv_check -type f | head -1)
    if [[ -z $REAL_KV || ! -f $REAL_KV_CAPTURE ]]; then
      echo "real_kv_check: no binary or no capture file"; real_kv_rc=1
    else
      "$REAL_KV" --capture "$REAL_KV_CAPTURE" 2>&1 | tee "$OUT_DIR/real_kv.log" | tail -40
      real_kv_rc=${PIPESTATUS[0]}
      compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 "$REAL_KV" --capture "$REAL_KV_CAPTURE" \
        > "$BUILD/real_kv_memcheck.log" 2>&1 || real_kv_rc=3
      tail -2 "$BUILD/real_kv_memcheck.log"
    fi
    [[ $real_kv_rc -ne 0 ]] && { echo "real_kv_check FAILED rc=$real_kv_rc"; status=1; }
  fi
  # The PyTorch path (docs/python.md): the C ABI library through ctypes, checked against the library's fp64
  # reference and torch SDPA, bad inputs, timing (where python3 has torch; SKIP_PYTHON=1 skips it).
  if [[ -z ${SKIP_PYTHON:-} ]] && python3 -c "import torch" > /dev/null 2>&1; then
    echo "== PyTorch check: tests/python/torch_decode_check.py ($(date -u +%H:%M:%S))"
    cmake --build "$BUILD" --target minimakv_cuda_capi -j "$JOBS" >> "$BUILD/build.log" 2>&1 \
      || { grep -E "error" -A3 "$BUILD/build.log" | head -30; }
    CAPI=$(find "$BUILD" -name libminimakv_cuda_capi.so -type f | head -1)
    python3 "$ROOT/tests/python/torch_decode_check.py" --lib "${CAPI:-missing}" 2>&1 | tee -a "$OUT_DIR/tests.log" \
      | grep -vE "^  ok " | tail -25
    torch_check_rc=${PIPESTATUS[0]}
    [[ $torch_check_rc -ne 0 ]] && { echo "torch_decode_check FAILED rc=$torch_check_rc"; status=1; }
  fi
fi

# Session 18: the SM clock, power and clock-event reasons sampled every 100 ms during each benchmark phase (the TQ3
# kernel's step times follow the clock that power management holds: docs/cuda-notes.md v26, session 18), appended
# to $OUT/clocks.csv as "phase, values"; bench/cuda/clock_summary.py prints them per phase after the tables.
CLOCK_FIELDS=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$CLOCK_FIELDS --format=csv,noheader,nounits > /dev/null 2>&1 \
  || CLOCK_FIELDS=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active
clock_pid=""
clock_phase=""
start_clocks() {  # $1: phase name
  clock_phase=$1
  nvidia-smi --query-gpu=$CLOCK_FIELDS --format=csv,noheader,nounits -lms 100 > "$BUILD/clocks.tmp" 2> /dev/null &
  clock_pid=$!
}
stop_clocks() {
  [[ -z $clock_pid ]] && return
  kill "$clock_pid" 2> /dev/null
  wait "$clock_pid" 2> /dev/null
  sed "s/^/$clock_phase, /" "$BUILD/clocks.tmp" >> "$OUT_DIR/clocks.csv"
  clock_pid=""
}

if [[ $MODE == bench || $MODE == all ]]; then
  echo "== benchmark ($(date -u +%H:%M:%S))"
  rm -f "$OUT_DIR/clocks.csv"
  start_clocks decode
  "$BENCH" --csv "$OUT_DIR/decode_bench.csv" ${BENCH_ARGS:-} 2>&1 | tee "$OUT_DIR/bench.log" | grep -v "^qwen\|^llama"
  [[ ${PIPESTATUS[0]} -ne 0 ]] && status=1
  if [[ -f "$ROOT/bench/cuda/torch_sdpa_bench.py" && -z ${SKIP_TORCH:-} ]]; then
    PYTHONUNBUFFERED=1 python3 "$ROOT/bench/cuda/torch_sdpa_bench.py" --csv "$OUT_DIR/torch_sdpa.csv" ${BENCH_ARGS:-} \
      > "$OUT_DIR/torch.log" 2>&1 || { tail -20 "$OUT_DIR/torch.log"; status=1; }
  fi
  stop_clocks
  start_clocks query_tokens
  QT_POINTS="--only llama3-8b 32768 8 --only qwen3.6-27b 32768 8"
  for tokens in ${QUERY_TOKENS-2 4}; do
    echo "== benchmark, $tokens query tokens per sequence ($(date -u +%H:%M:%S))"
    "$BENCH" --csv "$BUILD/qt.csv" $QT_POINTS --query-tokens "$tokens" >> "$OUT_DIR/bench.log" 2>&1 \
      && tail -n +2 "$BUILD/qt.csv" >> "$OUT_DIR/decode_bench.csv" || status=1
    if [[ -z ${SKIP_TORCH:-} ]]; then
      python3 "$ROOT/bench/cuda/torch_sdpa_bench.py" --csv "$BUILD/qt-torch.csv" $QT_POINTS --query-tokens "$tokens" \
        >> "$OUT_DIR/torch.log" 2>&1 && tail -n +2 "$BUILD/qt-torch.csv" >> "$OUT_DIR/torch_sdpa.csv" || status=1
    fi
  done
  stop_clocks
  CAP_FILE=${CAPACITY_POINTS-$ROOT/bench/cuda/capacity_points.txt}
  if [[ -n $CAP_FILE ]]; then
    echo "== benchmark at the memory limit: $CAP_FILE ($(date -u +%H:%M:%S))"
    start_clocks memory_limit
    CAP_POINTS=$(grep -v '^#' "$CAP_FILE" | awk 'NF == 4 {print "--only " $1 " " $2 " " $4}' | awk '!seen[$0]++' | tr '\n' ' ')
    TORCH_CAP_POINTS=$(grep -v '^#' "$CAP_FILE" | awk 'NF == 4 && $3 == "bf16" {print "--only " $1 " " $2 " " $4}' \
      | tr '\n' ' ')
    CAP_WARMUP=${CAPACITY_WARMUP_MS-1000}
    [[ -n $CAP_WARMUP ]] && CAP_WARMUP="--warmup-ms $CAP_WARMUP"
    "$BENCH" --csv "$BUILD/cap.csv" $CAP_POINTS $CAP_WARMUP >> "$OUT_DIR/bench.log" 2>&1 \
      && tail -n +2 "$BUILD/cap.csv" | sed 's/^decode,/capacity,/' >> "$OUT_DIR/decode_bench.csv" || status=1
    if [[ -z ${SKIP_TORCH:-} ]]; then
      python3 "$ROOT/bench/cuda/torch_sdpa_bench.py" --csv "$BUILD/cap-torch.csv" $TORCH_CAP_POINTS $CAP_WARMUP \
        >> "$OUT_DIR/torch.log" 2>&1 \
        && tail -n +2 "$BUILD/cap-torch.csv" | sed 's/^torch_sdpa,/capacity_torch_sdpa,/' >> "$OUT_DIR/torch_sdpa.csv" \
        || status=1
    fi
    stop_clocks
  fi
fi
if [[ -n ${PROFILE:-} ]]; then  # PROFILE="qwen3.6-27b 65536 8 2": ncu on the partial kernel of format 2 (0 bf16, 1 fp8, 2 tq3)
  read -r p_shape p_ctx p_batch p_fmt <<< "$PROFILE"
  echo "== ncu $PROFILE ($(date -u +%H:%M:%S))"
  # summary sections, raw stall / pipe metrics, SM-to-SM spread of active cycles (bench/cuda/ncu_profile.sh)
  "$ROOT/bench/cuda/ncu_profile.sh" "$BENCH" "$OUT_DIR/ncu" "$p_shape" "$p_ctx" "$p_batch" "$p_fmt"
fi
echo "== done ($(date -u +%H:%M:%S)) status=$status (tests: plain rc=${test_rc:-skipped}, memcheck rc=${memcheck_rc:-skipped}, cuda_example rc=${example_rc:-skipped}, real_kv_check rc=${real_kv_rc:-skipped}, torch_decode_check rc=${torch_check_rc:-skipped})"
if [[ ($MODE == bench || $MODE == all) && -f "$OUT_DIR/decode_bench.csv" ]]; then
  python3 "$ROOT/bench/cuda/summarize.py" "$OUT_DIR/decode_bench.csv" "$OUT_DIR/torch_sdpa.csv" \
    "${CAPACITY_POINTS-$ROOT/bench/cuda/capacity_points.txt}" | tee "$OUT_DIR/summary.txt"
  if [[ -s "$OUT_DIR/clocks.csv" ]]; then
    python3 "$ROOT/bench/cuda/clock_summary.py" "$OUT_DIR/clocks.csv" | tee -a "$OUT_DIR/summary.txt"
  fi
fi
exit $status
