#!/usr/bin/env python3
"""Is the slow tail of a partial kernel tied to particular SMs? (session 8)

usage: sm_speed.py FILE.ctas.csv[.gz] [--kernel tq3] [--shape qwen3.6-27b --context 32768 --batch 8 --format tq3]

Reads the per-CTA records of `minimakv_cuda_bench --csv FILE --timeline N` (a -DMINIMAKV_CUDA_TIMELINE=1 build)
and, per (shape, context, batch, format) point and partial kernel: each CTA's key-loop time over its step's median
("loop ratio"); per SM the mean ratio in the even and in the odd steps and their correlation (near 1: the same SMs
are slow in every step; near 0: the slowness moves), the spread of the per-SM means, the slowest and fastest SMs,
the mean ratio by CTAs sharing the SM in that step and by SM id / 16 (a rough stand-in for the GPC; the real
SM-to-GPC map is not exposed), and inside one SM the slowest over the fastest co-resident CTA.
"""
import argparse
import collections
import csv
import gzip
import statistics


def pearson(xs, ys):
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ctas_csv")
    ap.add_argument("--kernel", default=None, help="bf16, fp8 or tq3 (default: every partial kernel)")
    ap.add_argument("--shape")
    ap.add_argument("--context")
    ap.add_argument("--batch")
    ap.add_argument("--format")
    a = ap.parse_args()
    groups = collections.defaultdict(list)
    opener = gzip.open if a.ctas_csv.endswith(".gz") else open
    for r in csv.DictReader(opener(a.ctas_csv, "rt")):
        if r["kernel"] == "merge" or (a.kernel and r["kernel"] != a.kernel):
            continue
        if any(v is not None and r[k] != v for k, v in
               (("shape", a.shape), ("context", a.context), ("batch", a.batch), ("format", a.format))):
            continue
        groups[(r["shape"], r["context"], r["batch"], r["format"], r["kernel"])].append(r)
    for key, rows in sorted(groups.items()):
        steps = collections.defaultdict(list)
        for r in rows:
            steps[int(r["step"])].append(r)
        if len(steps) < 2:
            continue
        per_sm = {0: collections.defaultdict(list), 1: collections.defaultdict(list)}
        by_share = collections.defaultdict(list)
        by_block = collections.defaultdict(list)
        all_ratios = []
        for step, rs in steps.items():
            med = statistics.median(float(r["loop_us"]) for r in rs)
            share = collections.Counter(r["sm"] for r in rs)
            for r in rs:
                ratio = float(r["loop_us"]) / med
                all_ratios.append(ratio)
                per_sm[step % 2][int(r["sm"])].append(ratio)
                by_share[share[r["sm"]]].append(ratio)
                by_block[int(r["sm"]) // 16].append(ratio)
        sms = sorted(set(per_sm[0]) & set(per_sm[1]))
        even = [statistics.fmean(per_sm[0][s]) for s in sms]
        odd = [statistics.fmean(per_sm[1][s]) for s in sms]
        both = {s: statistics.fmean(per_sm[0][s] + per_sm[1][s]) for s in sms}
        ranked = sorted(both, key=both.get)
        q = statistics.quantiles(all_ratios, n=20)
        print(f"{' '.join(key)}: {len(steps)} steps, {len(rows) // len(steps)} CTAs/step, {len(sms)} SMs")
        print(f"  CTA loop / step median: p5 {q[0]:.3f}  p50 {q[9]:.3f}  p95 {q[18]:.3f}  max {max(all_ratios):.3f}")
        print(f"  per-SM mean, even vs odd steps: r = {pearson(even, odd):.3f}; per-SM means p5 / p95 "
              f"{statistics.quantiles(list(both.values()), n=20)[0]:.3f} / "
              f"{statistics.quantiles(list(both.values()), n=20)[18]:.3f}")
        print("  slowest SMs: " + ", ".join(f"{s}:{both[s]:.3f}" for s in ranked[-8:][::-1]))
        print("  fastest SMs: " + ", ".join(f"{s}:{both[s]:.3f}" for s in ranked[:8]))
        print("  by CTAs on the SM in that step: " +
              ", ".join(f"{k}: {statistics.fmean(v):.3f} (n {len(v)})" for k, v in sorted(by_share.items())))
        print("  by SM id / 16: " + ", ".join(f"{k}: {statistics.fmean(v):.3f}" for k, v in sorted(by_block.items())))
        # Inside one SM in one step: the slowest co-resident CTA's loop over the fastest one's, and how often the
        # CTA that started first (the older warps, which the schedulers favour) has the shorter loop.
        spread, older_faster, pairs = [], 0, 0
        for rs in steps.values():
            on_sm = collections.defaultdict(list)
            for r in rs:
                on_sm[r["sm"]].append((float(r["start_us"]), float(r["loop_us"])))
            for ctas in on_sm.values():
                if len(ctas) < 2:
                    continue
                loops = sorted(t for _, t in ctas)
                spread.append(loops[-1] / loops[0])
                ctas.sort()
                pairs += 1
                older_faster += ctas[0][1] <= min(t for _, t in ctas[1:])
        if spread:
            print(f"  co-resident CTAs: slowest / fastest loop on one SM, median {statistics.median(spread):.3f}; "
                  f"the first-started CTA is the fastest in {older_faster} of {pairs}")


if __name__ == "__main__":
    main()
