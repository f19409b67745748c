#!/usr/bin/env bash
# GPU machine, A/B of two source trees (e.g. a `git archive` export of an older commit and the current one; v14:
# TQ3 bit-plane layout vs selector-ready nibble layout, whose pages differ, so a compile-time switch cannot do it):
# builds both in parallel, runs the GPU tests of the second tree (plain), then the decode benchmark of both trees in
# alternating order, ROUNDS rounds, on the BENCH_ARGS points; prints a table of medians per (tree, point, format)
# last, with each tree's tq3 and mix time over its own bf16 and the new/old time ratio.
# Usage: ROUNDS=3 BENCH_ARGS="--only qwen3.6-27b 65536 8 ..." bench/cuda/tree_ab.sh OLD_NAME:OLD_DIR NEW_NAME:NEW_DIR
# CSV (columns run,variant,round + the benchmark's) and test log under $OUT.
set -uo pipefail
OUT_DIR=${OUT:-$PWD/build/gpu-out}
mkdir -p "$OUT_DIR"
JOBS=$(( $(nproc 2>/dev/null || echo 8) / 2 ))
names=(); dirs=()
for spec in "$@"; do names+=("${spec%%:*}"); dirs+=("$(cd "${spec#*:}" && pwd)"); done
echo "== build ${names[*]} ($(date -u +%H:%M:%S))"
for i in "${!names[@]}"; do
  ( d=${dirs[$i]}; b=$d/build/ab-${names[$i]}; mkdir -p "$d/build"
    cmake -S "$d" -B "$b" -DMINIMAKV_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMINIMAKV_BUILD_TESTS=ON \
      -DMINIMAKV_BUILD_BENCH=OFF -DMINIMAKV_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=Release > "$b.cmake.log" 2>&1 &&
    cmake --build "$b" --target minimakv_cuda_tests minimakv_cuda_bench -j "$JOBS" > "$b.build.log" 2>&1 \
      || { echo "BUILD FAILED ${names[$i]}"; grep -E "error" -A3 "$b.build.log" | head -30; } ) &
done
wait
for i in "${!names[@]}"; do
  echo "-- ${names[$i]}"
  grep -E "Used [0-9]+ registers|spill" "${dirs[$i]}/build/ab-${names[$i]}.build.log" | grep -B1 "[1-9][0-9]* bytes spill" | head -4
done
last=$(( ${#names[@]} - 1 ))
tests=$(find "${dirs[$last]}/build/ab-${names[$last]}" -name minimakv_cuda_tests -type f | head -1)
echo "== tests ${names[$last]} ($(date -u +%H:%M:%S))"
"$tests" > "$OUT_DIR/tests-${names[$last]}.log" 2>&1
test_rc=$?
echo "tests ${names[$last]} rc=$test_rc"; grep -m5 FAIL "$OUT_DIR/tests-${names[$last]}.log"; tail -2 "$OUT_DIR/tests-${names[$last]}.log"
csv=$OUT_DIR/tree-ab.csv
echo "run,variant,round,kind,shape,context,batch,format,time_us,kv_bytes,gbps,pct_read_bw,merge_us,items,read_bw_gbps" > "$csv"
run=$(date -u +%H:%M)
for round in $(seq 1 "${ROUNDS:-3}"); do
  for i in "${!names[@]}"; do
    echo "== bench ${names[$i]} round $round ($(date -u +%H:%M:%S))"
    bench=$(find "${dirs[$i]}/build/ab-${names[$i]}" -name minimakv_cuda_bench -type f | head -1)
    "$bench" --csv "$OUT_DIR/one.csv" ${BENCH_ARGS:-} > /dev/null 2>&1 || echo "bench ${names[$i]} failed"
    tail -n +2 "$OUT_DIR/one.csv" | sed "s/^/$run,${names[$i]},$round,/" >> "$csv"
  done
done
rm -f "$OUT_DIR/one.csv"
python3 - "$csv" "${names[@]}" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
names = sys.argv[2:]
t = {}
for r in rows:
    t.setdefault((r["variant"], r["shape"], r["context"], r["batch"], r["format"]), []).append(float(r["time_us"]))
bw = {(r["variant"], r["shape"], r["context"], r["batch"], r["format"]): float(r["pct_read_bw"]) for r in rows}
points = sorted({(r["shape"], int(r["context"]), r["batch"]) for r in rows})
print("\nA/B (median over rounds; per round: us); x = mix or tq3 time of that tree over its own bf16")
for shape, ctx, b in points:
    for fmt in ("tq3", "mix"):
        line = f"{shape:12s} {ctx:6d} b{b:2s} {fmt:4s}"
        med = {}
        for n in names:
            k = (n, shape, str(ctx), b, fmt)
            kb = (n, shape, str(ctx), b, "bf16")
            if k not in t: continue
            med[n] = statistics.median(t[k])
            ratio = statistics.median(t[kb]) / med[n] if kb in t else float("nan")
            line += f" | {n} {med[n]:7.1f} ({'/'.join(f'{x:.1f}' for x in t[k])}) {ratio:4.2f}x {bw[k]:4.1f}%"
        if len(med) == len(names) and len(names) >= 2:
            line += f" | {names[-1]}/{names[0]} {med[names[-1]] / med[names[0]]:.3f}"
        print(line)
PY
exit $test_rc
