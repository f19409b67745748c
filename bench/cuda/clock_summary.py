#!/usr/bin/env python3
"""Per-phase summary of the GPU clock samples that scripts/gpu_check_and_bench.sh takes while it benchmarks.

Input: clocks.csv, lines "phase, sm_mhz, power_w, temperature_c, reasons" (nvidia-smi --query-gpu=clocks.sm,
power.draw, temperature.gpu, clocks_event_reasons.active every 100 ms). The TQ3 kernel is bound by integer-ALU
issue, so its step time follows the SM clock that power management holds (docs/cuda-notes.md v26, session 18);
these lines say which clock a run's table was measured at.

Usage: clock_summary.py clocks.csv
"""
import statistics
import sys

# NVML clock event reason bits (nvmlClocksEventReason*), the ones that lower the clock under load.
REASONS = [
    (0x1, "idle"),
    (0x4, "sw power cap"),
    (0x8, "hw slowdown"),
    (0x20, "sw thermal"),
    (0x40, "hw thermal"),
    (0x80, "hw power brake"),
]


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    phases = {}  # phase -> list of (mhz, watts, celsius, reasons), in file order
    with open(sys.argv[1]) as f:
        for line in f:
            fields = [x.strip() for x in line.split(",")]
            if len(fields) != 5:
                continue
            mhz, watts, celsius = number(fields[1]), number(fields[2]), number(fields[3])
            try:
                reasons = int(fields[4], 16)
            except ValueError:
                reasons = 0
            if mhz is None:
                continue
            phases.setdefault(fields[0], []).append((mhz, watts, celsius, reasons))
    if not phases:
        print("GPU CLOCKS: no samples")
        return
    print()
    print("GPU CLOCKS while benchmarking (nvidia-smi every 100 ms; busy = samples without the idle reason)")
    print(f"{'phase':<14} {'samples':>7} | {'busy SM MHz med [p10 .. max]':>28} | {'power W med [max]':>17} | "
          f"{'max C':>5} | clock event reasons (share of samples)")
    for phase, samples in phases.items():
        busy = [s for s in samples if not s[3] & 0x1] or samples
        mhz = sorted(s[0] for s in busy)
        p10 = mhz[int(0.1 * (len(mhz) - 1))]
        watts = [s[1] for s in busy if s[1] is not None]
        power = f"{statistics.median(watts):6.0f} [{max(watts):4.0f}]" if watts else "n/a"
        temps = [s[2] for s in samples if s[2] is not None]
        hottest = f"{max(temps):5.0f}" if temps else "  n/a"
        shares = []
        for bit, name in REASONS:
            count = sum(1 for s in samples if s[3] & bit)
            if count:
                shares.append(f"{name} {100.0 * count / len(samples):.0f}%")
        print(f"{phase:<14} {len(samples):>7} | {statistics.median(mhz):12.0f} [{p10:5.0f} .. {mhz[-1]:5.0f}] | "
              f"{power:>17} | {hottest} | {', '.join(shares) or 'none'}")


if __name__ == "__main__":
    main()
