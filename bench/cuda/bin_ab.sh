#!/usr/bin/env bash
# GPU machine, v19: A/B of prebuilt benchmark binaries (built where the sources are, with the same nvcc 13.0, and
# carried: no build on the device). Optional GPU tests of prebuilt test binaries (plain, and under compute-sanitizer
# memcheck when MEMCHECK=1), then the decode benchmark of every binary in alternating order, ROUNDS rounds, on the
# BENCH_ARGS points, and a table of medians per (binary, point, format) with the ratio over the first binary.
# Optionally TIMELINE_BIN (a -DMINIMAKV_CUDA_TIMELINE=1 build) + TIMELINE_ARGS: the per-CTA breakdown first.
# Usage: ROUNDS=3 BENCH_ARGS="--only llama3-8b 32768 8 ..." TESTS="name:path ..." bench/cuda/bin_ab.sh \
#          NAME:BENCH_BINARY [NAME:BENCH_BINARY ...]
# CSV (columns run,variant,round + the benchmark's; file name $AB_CSV, default bin-ab.csv) and logs under $OUT.
set -uo pipefail
OUT_DIR=${OUT:-$PWD/build/gpu-out}
mkdir -p "$OUT_DIR"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader || true
status=0
if [[ -n ${TIMELINE_BIN:-} ]]; then
  echo "== timeline ($(date -u +%H:%M:%S))"
  chmod +x "$TIMELINE_BIN"
  "$TIMELINE_BIN" --csv "$OUT_DIR/timeline.csv" ${TIMELINE_ARGS:-} > "$OUT_DIR/timeline.log" 2>&1 \
    || { echo "timeline run failed"; tail -5 "$OUT_DIR/timeline.log"; status=1; }
fi
for spec in ${TESTS:-}; do
  IFS=: read -r tn tb <<< "$spec"
  chmod +x "$tb"
  echo "== tests $tn ($(date -u +%H:%M:%S))"
  "$tb" > "$OUT_DIR/tests-$tn.log" 2>&1
  rc=$?
  echo "tests $tn rc=$rc"; grep -m5 FAIL "$OUT_DIR/tests-$tn.log"; tail -2 "$OUT_DIR/tests-$tn.log"
  [[ $rc -ne 0 ]] && status=1
  if [[ ${MEMCHECK:-0} == 1 ]]; then
    compute-sanitizer --tool memcheck --leak-check full --error-exitcode 3 "$tb" > "$OUT_DIR/memcheck-$tn.log" 2>&1
    rc=$?
    echo "memcheck $tn rc=$rc"; tail -3 "$OUT_DIR/memcheck-$tn.log"
    [[ $rc -ne 0 ]] && status=1
  fi
done
names=(); bins=()
for spec in "$@"; do
  IFS=: read -r n b <<< "$spec"
  names+=("$n"); bins+=("$b"); chmod +x "$b"
done
[[ ${#names[@]} -eq 0 ]] && exit $status
csv=$OUT_DIR/${AB_CSV:-bin-ab.csv}
echo "run,variant,round,kind,shape,context,batch,format,time_us,kv_bytes,gbps,pct_read_bw,merge_us,items,read_bw_gbps,merge_in_step_us,graph_us" > "$csv"
run=$(date -u +%H:%M)
for round in $(seq 1 "${ROUNDS:-3}"); do
  for i in "${!names[@]}"; do
    echo "== bench ${names[$i]} round $round ($(date -u +%H:%M:%S))"
    "${bins[$i]}" --csv "$OUT_DIR/one.csv" ${BENCH_ARGS:-} > /dev/null 2>&1 || { echo "bench ${names[$i]} failed"; status=1; }
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
points = sorted({(r["shape"], int(r["context"]), int(r["batch"])) for r in rows})
print(f"\nA/B: median us over rounds (each round), %BW of the median, vs = over {names[0]}")
for shape, ctx, b in points:
    for fmt in ("bf16", "fp8", "tq3", "mix"):
        for n in names:
            rs = t.get((n, shape, str(ctx), str(b), fmt))
            if not rs: continue
            m = med(rs)
            base = t.get((names[0], shape, str(ctx), str(b), fmt))
            bw = statistics.median(float(r["pct_read_bw"]) for r in rs)
            each = "/".join(f"{float(r['time_us']):.1f}" for r in rs)
            mg = statistics.median(float(r["merge_us"]) for r in rs)
            # in step = the step minus the partial kernels alone (benchmarks from session 14; older ones: blank)
            ms = [float(r["merge_in_step_us"]) for r in rs if r.get("merge_in_step_us")]
            mis = f"{statistics.median(ms):4.1f}" if ms else "  - "
            print(f"{shape:11s} {ctx:6d} b{b:<2d} {fmt:4s} {n:8s} {m:7.1f} ({each}) {bw:4.1f}% merge in step {mis}"
                  f" alone {mg:4.1f} vs {m / med(base):.3f}")
PY
exit $status
