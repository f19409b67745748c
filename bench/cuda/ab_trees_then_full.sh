#!/usr/bin/env bash
# GPU machine, one call for a change that needs two source trees (v15: TQ3 key units as one int8 digit; the codec
# header changed, so no compile-time switch selects the old kernel): bench/cuda/tree_ab.sh on the exported trees
# (builds both, GPU tests of the new one, alternating benchmark rounds), then scripts/gpu_check_and_bench.sh all on
# the new tree's build from the A/B (tests plain + memcheck, full benchmark, torch, summary).
# Usage (repository root, trees exported to ignored folders and carried):
#   ROUNDS=3 BENCH_ARGS="--only ..." bench/cuda/ab_trees_then_full.sh ab_old ab_new
# Back under $OUT (at most 8 files): results.tgz (everything), tree-ab.csv, decode_bench.csv, torch_sdpa.csv,
# summary.txt, tests.log, memcheck.log.
set -uo pipefail
OLD=$1
NEW=$2
FINAL_OUT=${OUT:-$PWD/build/gpu-out}
WORK=$FINAL_OUT/w
mkdir -p "$WORK"
OUT=$WORK bash "$NEW/bench/cuda/tree_ab.sh" "old:$OLD" "new:$NEW"
ab_rc=$?
echo "== full run of the new tree ($(date -u +%H:%M:%S)), A/B rc=$ab_rc"
OUT=$WORK BENCH_ARGS= MINIMAKV_GPU_BUILD=$(cd "$NEW" && pwd)/build/ab-new bash "$NEW/scripts/gpu_check_and_bench.sh" all
status=$?
for f in tree-ab.csv decode_bench.csv torch_sdpa.csv summary.txt tests.log memcheck.log; do
  [[ -f $WORK/$f ]] && cp "$WORK/$f" "$FINAL_OUT/$f"
done
tar czf "$FINAL_OUT/results.tgz" -C "$WORK" . && rm -rf "$WORK"
echo "== done ($(date -u +%H:%M:%S)) A/B rc=$ab_rc full rc=$status"
exit $(( ab_rc != 0 || status != 0 ))
