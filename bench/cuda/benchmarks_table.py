#!/usr/bin/env python3
"""Markdown table of docs/BENCHMARKS.md section 4 from a GPU bench CSV and its torch CSV (session 17).

Rows: the decode points at >= 32K context of the issue shapes, then the other shapes' points (one query token per
sequence); cells: us per step (% of the read bandwidth), the merge's share of the mix step (what it adds to the
step; in brackets the merge kernel timed alone), torch SDPA, and the mix's speed-up over our BF16 and over torch.
Usage: python3 bench/cuda/benchmarks_table.py docs/cuda-bench-vNN.csv docs/cuda-bench-vNN-torch.csv
"""
import csv
import sys

NAMES = {
    "qwen3.6-27b": ("Qwen3.6-27B (24q/4kv, d256)", "Qwen3.6-27B"),
    "llama3-8b": ("Llama-3-8B (32q/8kv, d128; TQ3 paired)", "Llama-3-8B"),
    "qwen3-235b": ("Qwen3-235B-A22B (64q/4kv, d128, group 16)", "Qwen3-235B-A22B"),
    "llama3.2-1b": ("Llama-3.2-1B (32q/8kv, d64; TQ3 paired)", "Llama-3.2-1B"),
    "llama3.2-3b": ("Llama-3.2-3B (24q/8kv, d128, group 3; TQ3 paired)", "Llama-3.2-3B"),
    "llama3-70b": ("Llama-3-70B (64q/8kv, d128, group 8)", "Llama-3-70B"),
}
ISSUE_SHAPES = ("qwen3.6-27b", "llama3-8b")


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    ours = [r for r in csv.DictReader(open(argv[1])) if r["kind"] == "decode"]
    torch_us = {(r["shape"], r["context"], r["batch"]): float(r["time_us"])
                for r in csv.DictReader(open(argv[2])) if r["kind"] == "torch_sdpa"}
    points = {}
    for r in ours:
        if r["shape"] in NAMES:
            points.setdefault((r["shape"], int(r["context"]), int(r["batch"])), {})[r["format"]] = r
    print("| shape | ctx | b | bf16 (%BW) | fp8 (%BW) | tq3 (%BW) | mix (%BW) | merge in step (alone) | torch | "
          "mix vs bf16 | mix vs torch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    seen = set()
    for shape in NAMES:
        for (s, ctx, batch), fm in sorted(points.items(), key=lambda kv: (kv[0][1], kv[0][2])):
            if s != shape or (shape in ISSUE_SHAPES and ctx < 32768) or len(fm) < 4:
                continue
            cells = [f"{float(fm[f]['time_us']):.1f} ({float(fm[f]['pct_read_bw']):.0f}%)"
                     for f in ("bf16", "fp8", "tq3", "mix")]
            mix = float(fm["mix"]["time_us"])
            merge = (f"{100 * float(fm['mix']['merge_in_step_us']) / mix:.1f}% "
                     f"({100 * float(fm['mix']['merge_us']) / mix:.1f}%)")
            tu = torch_us.get((s, str(ctx), str(batch)), float("nan"))
            vs_bf16 = f"{float(fm['bf16']['time_us']) / mix:.2f}x"
            vs_torch = f"{tu / mix:.2f}x"
            if ctx == 65536 and batch == 8 and shape in ISSUE_SHAPES:
                vs_bf16, vs_torch = f"**{vs_bf16}**", f"**{vs_torch}**"
            label = NAMES[shape][1] if shape in seen else NAMES[shape][0]
            seen.add(shape)
            print(f"| {label} | {ctx // 1024}K | {batch} | " + " | ".join(cells) +
                  f" | {merge} | {tu:.1f} | {vs_bf16} | {vs_torch} |")


if __name__ == "__main__":
    main(sys.argv)
