#!/usr/bin/env bash
# GPU machine, A/B of two source trees (e.g. a `git archive` export of an older commit and the current one; v14:
# TQ3 bit-plane layout vs selector-ready nibble layout, whose pages differ, so a compile-time switch cannot do it):
# builds both in parallel, runs the GPU tests of the second tree (plain), then the decode benchmark of both trees in
# alternating order, ROUNDS rounds, on the BENCH_ARGS points; prints a table of medians per (tree, point, format)
# last, with each tree's tq3 and mix time over its own bf16 and the new/old time ratio.
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
echo "== tests $tv ($(date -u +%H:%M:%S))"
"$tests" > "$OUT_DIR/tests-$tv.log" 2>&1
test_rc=$?
echo "tests $tv rc=$test_rc"; grep -m5 FAIL "$OUT_DIR/tests-$tv.log"; tail -2 "$OUT_DIR/tests-$tv.log"
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
    t.setdefault((r["variant"], r["shape"], r["context"], r["batch"], r["format"]), []).append(r)
med = lambda rs: statistics.median(float(r["time_us"]) for r in rs)
points = sorted({(r["shape"], int(r["context"]), r["batch"]) for r in rows})
print(f"\nA/B: median us over rounds (each round), x = that build's bf16 / this, %BW of the median round, vs = over {names[0]}")
for shape, ctx, b in points:
    for fmt in ("bf16", "tq3", "mix"):
        for n in names:
            rs = t.get((n, shape, str(ctx), b, fmt))
            if not rs: continue
            m = med(rs)
            bf = t.get((n, shape, str(ctx), b, "bf16"))
            base = t.get((names[0], shape, str(ctx), b, fmt))
            bw = statistics.median(float(r["pct_read_bw"]) for r in rs)
            each = "/".join(f"{float(r['time_us']):.1f}" for r in rs)
            print(f"{shape:11s} {ctx:6d} b{b:2s} {fmt:4s} {n:10s} {m:7.1f} ({each}) {med(bf) / m:5.2f}x {bw:4.1f}%"
                  f" vs {m / med(base):.3f}")
PY
exit $test_rc
