#!/usr/bin/env bash
# GPU machine: Nsight Compute profile of one partial kernel launch of the decode benchmark.
# Usage: bench/cuda/ncu_profile.sh BENCH_BINARY OUT_PREFIX SHAPE CTX BATCH FORMAT   (FORMAT: 0 bf16, 1 fp8, 2 tq3)
# Three passes (each one kernel launch, --clock-control none, PROFILE_TIMEOUT_S each, default 120 s):
#  1. the summary sections (speed of light, scheduler, warp state, occupancy, compute workload, instructions);
#  2. the raw metrics of the warp-state and compute-workload sections: stall reasons per issued instruction and
#     the pipe utilizations (which the section bodies of pass 1 do not print);
#  3. sm__cycles_active min / avg / max over the SMs: how unevenly the SMs finish (the tail of the one wave);
#  4. (only when PROFILE_PASSES names it) per-instruction warp-stall samples of the SASS (source counters):
#     OUT_PREFIX-source.csv and the 40 instructions with the most samples.
# Writes OUT_PREFIX.txt, OUT_PREFIX-raw.txt, OUT_PREFIX-spread.txt and prints the lines that matter.
# PROFILE_PASSES (default 123) picks the passes.
set -uo pipefail
bench=$1 out=$2 shape=$3 ctx=$4 batch=$5 fmt=$6
kernel_regex="DecodePartialKernelILNS_8KvFormatE${fmt}E"
[[ $fmt != 0 ]] && kernel_regex="DecodePartialTransposedKernelILNS_8KvFormatE${fmt}E"  # TQ3 (v6+), FP8 (v8+)
limit=${PROFILE_TIMEOUT_S:-120}
common=(--clock-control none --kernel-name-base mangled --kernel-name "regex:$kernel_regex" --launch-skip 3
        --launch-count 1)
run_args=(--only "$shape" "$ctx" "$batch" --runs 5)
passes=${PROFILE_PASSES:-123}
if [[ $passes == *1* ]]; then
timeout "$limit" ncu "${common[@]}" --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
  --section Occupancy --section ComputeWorkloadAnalysis --section InstructionStats "$bench" "${run_args[@]}" \
  > "$out.txt" 2>&1
grep -E "Duration|SM Frequency|DRAM Throughput|Issue Slots|Issued Ipc|Eligible|Active Warps|Theoretical Occ|Achieved Occ|No Eligible|Registers Per|Warp Cycles Per Issued|Executed Instructions  " "$out.txt" | head -24
fi
if [[ $passes == *2* ]]; then
timeout "$limit" ncu "${common[@]}" --section WarpStateStats --section ComputeWorkloadAnalysis --page raw \
  "$bench" "${run_args[@]}" > "$out-raw.txt" 2>&1
grep -E "issue_stalled_[a-z_]+_per_issue_active\.ratio|inst_executed_pipe_[a-z_]+\.avg\.pct_of_peak_sustained_active|pipe_[a-z_]+_cycles_active\.avg\.pct" \
  "$out-raw.txt" | awk '{v = $NF; gsub(",", "", v); if (v + 0 >= 0.02) print $1, $NF}' | head -50
fi
if [[ $passes == *3* ]]; then
timeout "$limit" ncu "${common[@]}" \
  --metrics sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__warps_active.avg.per_cycle_active,gpc__cycles_elapsed.max \
  "$bench" "${run_args[@]}" > "$out-spread.txt" 2>&1
grep -E "sm__|gpc__" "$out-spread.txt" | head -8
fi
if [[ $passes == *4* ]]; then
timeout "$limit" ncu "${common[@]}" --section SourceCounters --section WarpStateStats -f -o "$out-src" \
  "$bench" "${run_args[@]}" > "$out-src.log" 2>&1
ncu -i "$out-src.ncu-rep" --page source --print-source sass --csv > "$out-source.csv" 2> "$out-source.err"
head -c 600 "$out-source.err"; head -2 "$out-source.csv" | cut -c1-400
fi
