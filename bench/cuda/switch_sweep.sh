#!/usr/bin/env bash
# GPU machine, one call: a sweep of the compile-time switches of cuda_attention.cu (session 6, helper "cuda-tune6").
# Builds "default:" and the given variants in parallel (kernel_variants.sh, NO_BENCH=1), then alternating benchmark
# rounds (every build once per round, so drift hits all alike): B8_ARGS on every build, B1_ARGS on the default and
# the B1_VARIANTS (merge "few rows" switches: batch 1 is where that path runs). No round starts after BENCH_BUDGET_S
# seconds of benchmarking. Then bench/cuda/sweep_summary.py prints the median table and names the switch settings
# that win by >= 1.5% on every relevant point (SWITCHES, see there), and the plain GPU tests of their builds run (no
# test starts after TEST_BUDGET_S). One build may carry two switches whose effects cannot meet (d = 256 and d = 128
# settings; merge "few" and "many" rows, i.e. batch 1 and batch 8 here): SWITCHES says which points judge which.
# Usage: SWITCHES="st256_4=sA/qwen3.6-27b/8 st128_4=sA/llama3-8b/8" B1_VARIANTS="mA" ROUNDS=3 BENCH_BUDGET_S=200 \
#          bench/cuda/switch_sweep.sh "sA:-DMINIMAKV_TQ3_PAIR_STAGES_D256=4 -DMINIMAKV_TQ3_PAIR_STAGES_D128=4" ...
# Back under $OUT: sweep.csv (variant, round, then the benchmark's columns), summary.txt, tests-*.log.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT_DIR=${OUT:-$ROOT/build/gpu-out}
mkdir -p "$OUT_DIR"
B8_ARGS=${B8_ARGS:---only qwen3.6-27b 32768 8 --only qwen3.6-27b 65536 8 --only llama3-8b 32768 8 --only llama3-8b 65536 8}
B1_ARGS=${B1_ARGS:---only qwen3.6-27b 65536 1 --only llama3-8b 65536 1}
names=(default)
for spec in "$@"; do names+=("${spec%%:*}"); done
OUT=$OUT_DIR NO_BENCH=1 TEST_VARIANTS= "$ROOT/bench/cuda/kernel_variants.sh" "default:" "$@"
tmp=$ROOT/build/sweep-rounds  # one CSV per build, set and round (too many files for $OUT); merged into sweep.csv
rm -rf "$tmp"
mkdir -p "$tmp"
merge_and_summarize() {
  python3 "$ROOT/bench/cuda/sweep_summary.py" --merge "$tmp" "$OUT_DIR/sweep.csv" &&
    python3 "$ROOT/bench/cuda/sweep_summary.py" "$OUT_DIR/sweep.csv" > "$OUT_DIR/summary.txt"
}
start=$SECONDS
for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
  if (( SECONDS - start > ${BENCH_BUDGET_S:-200} )); then echo "== bench budget spent before round $r"; break; fi
  echo "== round $r ($(date -u +%H:%M:%S))"
  for n in "${names[@]}"; do
    bench=$(find "$ROOT/build/var-$n" -name minimakv_cuda_bench -type f | head -1)
    [[ -x $bench ]] || { echo "no bench binary for $n"; continue; }
    "$bench" --csv "$tmp/$n-b8-r$r.csv" $B8_ARGS > /dev/null 2>&1 || echo "bench $n b8 round $r rc=$?"
    if [[ $n == default || " ${B1_VARIANTS:-} " == *" $n "* ]]; then
      "$bench" --csv "$tmp/$n-b1-r$r.csv" $B1_ARGS > /dev/null 2>&1 || echo "bench $n b1 round $r rc=$?"
    fi
  done
  merge_and_summarize  # after every round, so a call stopped at its limit still brings back the rounds done
done
echo "== bench done ($(date -u +%H:%M:%S), $((SECONDS - start)) s)"
cat "$OUT_DIR/summary.txt"
test_start=$SECONDS
for n in $(sed -n 's/^WINNER [^ ]* \([^ ]*\).*/\1/p' "$OUT_DIR/summary.txt" | sort -u); do
  if (( SECONDS - test_start > ${TEST_BUDGET_S:-60} )); then echo "== test budget spent, $n untested"; continue; fi
  t=$(find "$ROOT/build/var-$n" -name minimakv_cuda_tests -type f | head -1)
  "$t" > "$OUT_DIR/tests-$n.log" 2>&1; echo "tests $n rc=$? ($(date -u +%H:%M:%S))"; tail -1 "$OUT_DIR/tests-$n.log"
done
echo "== done ($(date -u +%H:%M:%S))"
