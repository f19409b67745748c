#!/usr/bin/env python3
"""Median table of a switch sweep (bench/cuda/switch_sweep.sh).

sweep_summary.py --merge ROUNDS_DIR OUT.csv: merges the per-round CSVs (NAME-SET-rROUND.csv) into one CSV with the
columns variant, round, then the benchmark's.
sweep_summary.py SWEEP.csv: per point and format the median decode step (us) over the rounds and its ratio to the
default build's median; then, per switch setting in SWITCHES ("label=build/shape/batch ...", shape "*" = all), a
WINNER line when that build is at least WIN_FRACTION faster on the median of every one of its relevant points
(TQ3 and mix; a stage or CTA switch of one head dim only acts on that shape, a merge switch only at its row count)."""
import csv
import glob
import os
import statistics
import sys
from collections import defaultdict

WIN_FRACTION = 0.015  # the sweep's decision rule: >= 1.5% faster on every relevant median
RELEVANT_FORMATS = ("tq3", "mix")


def merge(rounds_dir, out_path):
    rows = []
    for path in sorted(glob.glob(os.path.join(rounds_dir, "*.csv"))):
        variant, _, round_tag = os.path.basename(path)[:-4].rsplit("-", 2)
        with open(path) as f:
            for rec in csv.DictReader(f):
                rows.append({"variant": variant, "round": round_tag[1:], **rec})
    if not rows:
        return 1
    with open(out_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)
    return 0


def summarize(sweep_path):
    times = defaultdict(list)  # (variant, shape, context, batch, format) -> [us per round]
    with open(sweep_path) as f:
        for rec in csv.DictReader(f):
            if rec["kind"] == "decode":
                key = (rec["variant"], rec["shape"], int(rec["context"]), int(rec["batch"]), rec["format"])
                times[key].append(float(rec["time_us"]))
    variants = sorted({k[0] for k in times}, key=lambda v: (v != "default", v))
    points = sorted({k[1:4] for k in times}, key=lambda p: (p[2], p[0], p[1]))
    formats = sorted({k[4] for k in times})

    def median(key):
        return statistics.median(times[key]) if key in times else None

    print("median decode step, us (ratio to default) [rounds]; default's spread = max / min - 1 over its rounds")
    for shape, context, batch in points:
        print(f"-- {shape} {context // 1024}K b{batch}")
        for fmt in formats:
            base_runs = times.get(("default", shape, context, batch, fmt))
            if not base_runs:
                continue
            base = statistics.median(base_runs)
            cells = [f"default {base:.1f} (spread {100 * (max(base_runs) / min(base_runs) - 1):.1f}%) [{len(base_runs)}]"]
            for v in variants[1:]:
                m = median((v, shape, context, batch, fmt))
                if m is not None:
                    cells.append(f"{v} {m:.1f} ({m / base:.3f})")
            print(f"  {fmt:4s} " + " | ".join(cells))
    for spec in os.environ.get("SWITCHES", "").split():
        label, target = spec.split("=")
        build, shape_filter, batch_filter = target.split("/")
        ratios = []
        for shape, context, batch in points:
            if batch != int(batch_filter) or shape_filter not in ("*", shape):
                continue
            for fmt in RELEVANT_FORMATS:
                m = median((build, shape, context, batch, fmt))
                base = median(("default", shape, context, batch, fmt))
                if m is not None and base is not None:
                    ratios.append(m / base)
        detail = (f"({len(ratios)} relevant medians, ratio best {min(ratios):.3f} worst {max(ratios):.3f})"
                  if ratios else "(no relevant medians)")
        verdict = "WINNER" if ratios and max(ratios) <= 1 - WIN_FRACTION else "not-a-winner"
        print(verdict, label, build, detail)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--merge":
        sys.exit(merge(sys.argv[2], sys.argv[3]))
    sys.exit(summarize(sys.argv[1]))
