#!/usr/bin/env python3
"""Draws the figures of docs/BENCHMARKS.md into docs/plots/*.svg from data the project measured:
  capacity.svg     concurrent requests vs context, BF16 / FP8 / Minima-KV (`minimakv plan --json`, the paper's inputs)
  kld_vs_bits.svg  KL divergence vs stored bits per KV value, minimakv modes beside llama.cpp KV types (docs/data/kld.csv)
  kld_vs_bits_qwen25.svg  the same for Qwen2.5-Coder-1.5B (docs/data/kld_qwen25.csv)
  gpu_decode.svg   H200 decode-step time vs context per format at batch 8 (newest docs/cuda-bench-v*.csv)
  gpu_at_memory_limit.svg  H200 decode tokens/s of one layer, each format at the batch the memory budget allows
                   (the newest CSV's kind "capacity" rows and its torch CSV; bench/cuda/capacity_points.txt)
  gpu_step_parts.svg  where a TQ3 decode step's time goes, session-9 kernels against session-11 ones (per-CTA
                   timelines: bench/cuda/timeline-v23-s11.csv, bench/cuda/timeline-v25.csv)
  niah_depth.svg   passkey accuracy per needle depth and mode (docs/data/niah_answers_*.jsonl, `eval niah --answers-out`)
A figure whose data is missing is skipped with a note. Needs matplotlib (Debian: apt-get install python3-matplotlib).
Usage: python3 scripts/make_plots.py [--minimakv build/release/bin/minimakv]
"""
import argparse
import csv
import glob
import json
import os
import re
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
PLOTS = os.path.join(DOCS, "plots")
# The paper's capacity inputs (96 GB GPU: 86.4 GiB budget, 25.15 GiB weights, 0.153 GiB state per request) and
# its Minima-KV concurrency (../shared/MINIMA-KV.md).
PAPER_INPUTS = ["--budget-gib", "86.4", "--weights-gib", "25.15", "--state-gib", "0.153"]
PAPER_MINIMA = {32768: 84, 65536: 47}
COLORS = {"bf16": "#444444", "fp8": "#1f77b4", "tq3": "#d62728", "minima": "#2ca02c", "mix": "#2ca02c",
          "torch": "#9467bd", "q8_0": "#ff7f0e", "q4_0": "#8c564b", "f16": "#7f7f7f"}


def save(fig, name):
    os.makedirs(PLOTS, exist_ok=True)
    path = os.path.join(PLOTS, name)
    # Fixed metadata and hash salt: the same data gives the same bytes (clean diffs).
    plt.rcParams["svg.hashsalt"] = "minimakv"
    fig.savefig(path, format="svg", metadata={"Date": None, "Creator": "scripts/make_plots.py"}, bbox_inches="tight")
    plt.close(fig)
    print("wrote", os.path.relpath(path, ROOT))


def plot_capacity(minimakv):
    if not os.path.exists(minimakv):
        print(f"skip capacity.svg: no {minimakv} (build the release preset or pass --minimakv)")
        return
    contexts = [4096, 8192, 16384, 32768, 65536, 131072, 262144]
    rows = {"bf16": [], "fp8": [], "minima": []}
    for ctx in contexts:
        out = subprocess.run([minimakv, "plan", "--preset", "qwen3.6-27b", "--context", str(ctx), "--json"] + PAPER_INPUTS,
                             check=True, capture_output=True, text=True).stdout
        plan = json.loads(out)
        for k in rows:
            rows[k].append(plan[k]["concurrency"])
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for k, label in (("bf16", "BF16"), ("fp8", "FP8"), ("minima", "Minima-KV (minimakv pages)")):
        ax.plot(contexts, rows[k], "o-", color=COLORS[k], label=label)
    ax.plot(list(PAPER_MINIMA), list(PAPER_MINIMA.values()), "x", color=COLORS["minima"], markersize=9,
            label="Minima-KV (paper)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(contexts, [f"{c // 1024}K" for c in contexts])
    ax.set_xlabel("context tokens per request")
    ax.set_ylabel("concurrent requests")
    ax.set_title("Qwen3.6-27B on a 96 GB GPU (86.4 GiB budget, 25.15 GiB weights)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    save(fig, "capacity.svg")


def plot_kld(data_name, title, out_name):
    path = os.path.join(DOCS, "data", data_name)
    if not os.path.exists(path):
        print(f"skip {out_name}: no docs/data/{data_name}")
        return
    with open(path) as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for r in rows:
        bits, kld = float(r["bits_per_value"]), float(r["kld"])
        ours = r["engine"] == "minimakv"
        marker = ("o" if r["window"] == "8192" else "s") if ours else "^"
        ax.scatter(bits, kld, marker=marker, s=60, color=COLORS.get(r["mode"], "k"),
                   facecolors="none" if not ours else COLORS.get(r["mode"], "k"))
        ax.annotate(f'{r["engine"]} {r["mode"]} ({int(r["window"]) // 1024}K)', (bits, kld), fontsize=7,
                    xytext=(5, 3) if ours else (5, -10), textcoords="offset points")
    ax.set_yscale("log")
    ax.set_xlabel("stored bits per KV value (codes, scales, page slack)")
    ax.set_ylabel("mean KL divergence vs own 16-bit control (nats)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    save(fig, out_name)


def newest_cuda_csv():
    found = []
    for p in glob.glob(os.path.join(DOCS, "cuda-bench-v*.csv")):
        m = re.search(r"cuda-bench-v(\d+)([a-z]?)\.csv$", p)  # v28, then v28b (a later run of the same version)
        if m:
            found.append((int(m.group(1)), m.group(2), p))
    return max(found)[2] if found else None


def plot_gpu(batch=8):
    path = newest_cuda_csv()
    if path is None:
        print("skip gpu_decode.svg: no docs/cuda-bench-v*.csv")
        return
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r.get("kind") == "decode" and int(r["batch"]) == batch]
    # Shapes with a context sweep (the v16+ extra shapes have one or two points only).
    shapes = sorted(s for s in {r["shape"] for r in rows} if len({r["context"] for r in rows if r["shape"] == s}) >= 3)
    if not shapes:
        print(f"skip gpu_decode.svg: no batch-{batch} decode rows in {os.path.basename(path)}")
        return
    fig, axes = plt.subplots(1, len(shapes), figsize=(5.2 * len(shapes), 4.0), squeeze=False)
    for ax, shape in zip(axes[0], shapes):
        formats = sorted({r["format"] for r in rows if r["shape"] == shape},
                         key=lambda f: list(COLORS).index(f) if f in COLORS else 99)
        for fmt in formats:
            pts = sorted((int(r["context"]), float(r["time_us"])) for r in rows if r["shape"] == shape and r["format"] == fmt)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=COLORS.get(fmt, "k"), label=fmt)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ctxs = sorted({int(r["context"]) for r in rows if r["shape"] == shape})
        ax.set_xticks(ctxs, [f"{c // 1024}K" for c in ctxs])
        ax.set_xlabel("context tokens")
        ax.set_ylabel("decode step, one layer (us)")
        ax.set_title(f"{shape}, batch {batch}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"H200 decode step per format ({os.path.basename(path)})", y=1.03)
    fig.subplots_adjust(wspace=0.3)
    save(fig, "gpu_decode.svg")


# Timeline CSVs of `minimakv_cuda_bench --timeline` (medians over steps, us from the end of the L2 flush), and the
# step parts they give for one format's step: launch (flush end -> first CTA), prologue and epilogue (median CTA),
# key loop (median CTA), the ragged end (last CTA exit beyond the median CTA's), the merge (last partial exit ->
# step end, its launch gap included).
STEP_TIMELINES = [("v23 (session 9)", "bench/cuda/timeline-v23-s11.csv"), ("v25 (session 11)", "bench/cuda/timeline-v25.csv")]
STEP_POINTS = [("qwen3.6-27b", 32768, 8), ("llama3-8b", 32768, 8), ("llama3-8b", 32768, 1)]
STEP_PARTS = [("launch", "#bbbbbb"), ("prologue", "#ff7f0e"), ("key loop (median CTA)", "#d62728"),
              ("epilogue", "#9467bd"), ("ragged end", "#f7b6d2"), ("merge", "#2ca02c")]


def plot_gpu_at_memory_limit():
    path = newest_cuda_csv()
    points_path = os.path.join(ROOT, "bench", "cuda", "capacity_points.txt")
    if path is None or not os.path.exists(points_path):
        print("skip gpu_at_memory_limit.svg: no GPU CSV or capacity points")
        return
    with open(path) as f:
        ours = {(r["context"], r["batch"], r["format"]): float(r["time_us"]) for r in csv.DictReader(f)
                if r.get("kind") == "capacity"}
    torch_path = path.replace(".csv", "-torch.csv")
    torch_us = {}
    if os.path.exists(torch_path):
        with open(torch_path) as f:
            torch_us = {(r["context"], r["batch"]): float(r["time_us"]) for r in csv.DictReader(f)
                        if r.get("kind") == "capacity_torch_sdpa"}
    with open(points_path) as f:
        points = [line.split() for line in f if line.strip() and not line.startswith("#")]
    contexts = sorted({int(p[1]) for p in points})
    series = {"torch (bf16)": [], "bf16": [], "fp8": [], "mix": []}  # per context: (tokens/s, batch)
    for ctx in contexts:
        batch_of = {p[2]: p[3] for p in points if int(p[1]) == ctx}
        for name in series:
            fmt = "bf16" if name == "torch (bf16)" else name
            batch = batch_of.get(fmt)
            us = (torch_us.get((str(ctx), batch)) if name == "torch (bf16)" else ours.get((str(ctx), batch, fmt)))
            series[name].append((int(batch) / us * 1e6 if batch and us else 0.0, batch or ""))
    if not any(rate for values in series.values() for rate, _ in values):
        print(f"skip gpu_at_memory_limit.svg: no capacity rows in {os.path.basename(path)}")
        return
    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    width = 0.2
    colors = {"torch (bf16)": COLORS["torch"], "bf16": COLORS["bf16"], "fp8": COLORS["fp8"], "mix": COLORS["mix"]}
    for i, (name, values) in enumerate(series.items()):
        xs = [c + (i - 1.5) * width for c in range(len(contexts))]
        bars = ax.bar(xs, [rate / 1000 for rate, _ in values], width, color=colors[name],
                      label="Minima mix" if name == "mix" else name)
        for bar, (_, batch) in zip(bars, values):
            ax.annotate(f"b{batch}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                        va="bottom", fontsize=7)
    ax.set_xticks(range(len(contexts)), [f"{c // 1024}K" for c in contexts])
    ax.set_xlabel("context tokens (batch = requests that fit the paper's 86.4 GiB budget, minimakv plan)")
    ax.set_ylabel("decode tokens/s, one layer (thousands)")
    ax.set_title(f"Qwen3.6-27B layer on the H200 at the memory limit ({os.path.basename(path)})")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    save(fig, "gpu_at_memory_limit.svg")


def step_parts(metrics, fmt):
    m = lambda name: metrics[name]  # noqa: E731
    launch = m("flush end -> first partial start")
    prologue, loop, epilogue = m(f"{fmt} prologue med"), m(f"{fmt} loop med"), m(f"{fmt} epilogue med")
    median_cta_end = m(f"{fmt} first start") + prologue + loop + epilogue
    ragged = max(m(f"{fmt} last exit") - median_cta_end, 0.0)
    merge = m("step (events)") - m(f"{fmt} last exit")
    return [launch, prologue, loop, epilogue, ragged, merge]


def plot_gpu_step_parts(fmt="tq3"):
    tables = []
    for label, rel in STEP_TIMELINES:
        path = os.path.join(ROOT, rel)
        if not os.path.exists(path):
            print(f"skip gpu_step_parts.svg: no {rel}")
            return
        metrics = {}
        with open(path) as f:
            for r in csv.DictReader(f):
                metrics[(r["shape"], int(r["context"]), int(r["batch"]), r["format"], r["metric"])] = float(r["median_us"])
        tables.append((label, metrics))
    fig, axes = plt.subplots(1, len(STEP_POINTS), figsize=(5.0 * len(STEP_POINTS), 2.6), squeeze=False)
    for ax, (shape, ctx, batch) in zip(axes[0], STEP_POINTS):
        for y, (label, metrics) in enumerate(tables):
            point = {k[4]: v for k, v in metrics.items() if k[:4] == (shape, ctx, batch, fmt)}
            left = 0.0
            for (name, color), width in zip(STEP_PARTS, step_parts(point, fmt)):
                ax.barh(y, width, left=left, color=color, label=name if y == 0 else None)
                left += width
            ax.text(left, y, f" {point['step (events)']:.1f} us", va="center", fontsize=8)
        ax.set_yticks(range(len(tables)), [t[0] for t in tables])
        ax.set_xlabel("us (median of 20 steps)")
        ax.set_title(f"{shape} {ctx // 1024}K, batch {batch}, {fmt}")
        ax.set_xlim(0, ax.get_xlim()[1] * 1.15)
    axes[0][0].legend(loc="upper center", bbox_to_anchor=(1.7, -0.35), ncol=len(STEP_PARTS), fontsize=8)
    fig.suptitle("H200: where a TQ3 decode step's time goes (per-CTA timelines)", y=1.04)
    fig.subplots_adjust(wspace=0.45)
    save(fig, "gpu_step_parts.svg")


def plot_niah():
    paths = sorted(glob.glob(os.path.join(DOCS, "data", "niah_answers_*.jsonl")))
    if not paths:
        print("skip niah_depth.svg: no docs/data/niah_answers_*.jsonl")
        return
    cases = [json.loads(line) for p in paths for line in open(p) if line.strip()]
    modes = [m for m in ("bf16", "fp8", "tq3", "minima") if m in cases[0]]
    contexts = sorted({c["context"] for c in cases})
    fig, axes = plt.subplots(1, len(contexts), figsize=(5.0 * len(contexts), 3.6), squeeze=False)
    for ax, ctx in zip(axes[0], contexts):
        depths = sorted({c["depth_percent"] for c in cases if c["context"] == ctx})
        width = 0.8 / len(modes)
        for i, mode in enumerate(modes):
            acc = []
            for d in depths:
                here = [c for c in cases if c["context"] == ctx and c["depth_percent"] == d]
                acc.append(sum(c[mode] == c["passkey"] for c in here) / len(here))
            ax.bar([j + (i - (len(modes) - 1) / 2) * width for j in range(len(depths))], acc, width,
                   color=COLORS[mode], label=mode)
        ax.set_xticks(range(len(depths)), [f"{d}%" for d in depths])
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("needle depth")
        ax.set_ylabel("passkey accuracy")
        n = len([c for c in cases if c["context"] == ctx]) // len(depths)
        ax.set_title(f"{ctx} tokens, {n} seeds per depth")
        ax.legend(fontsize=7, loc="lower left")
    save(fig, "niah_depth.svg")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minimakv", default=os.path.join(ROOT, "build", "release", "bin", "minimakv"))
    args = parser.parse_args()
    plot_capacity(args.minimakv)
    plot_kld("kld.csv", "SmolLM2-135M on license texts: lower-left is better", "kld_vs_bits.svg")
    plot_kld("kld_qwen25.csv", "Qwen2.5-Coder-1.5B on license texts: lower-left is better",
             "kld_vs_bits_qwen25.svg")
    plot_gpu()
    plot_gpu_at_memory_limit()
    plot_gpu_step_parts()
    plot_niah()
    return 0


if __name__ == "__main__":
    sys.exit(main())
