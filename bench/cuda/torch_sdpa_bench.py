"""torch scaled_dot_product_attention decode on dense contiguous BF16 K/V: the peer baseline of the CUDA bench.

Same shapes, contexts and batches as bench/cuda/cuda_decode_bench.cu; one query token per sequence, GQA through
enable_gqa (no K/V expansion). Median of CUDA-event times, the L2 flushed before every run the same way as the CUDA
bench (--flush read: one read sweep of a 256 MB buffer, clean L2 lines; --flush memset: writing it, as
triton.testing.do_bench does, which leaves dirty lines for the timed call to write back).
Usage: python3 torch_sdpa_bench.py --csv OUT.csv [--quick] [--flush read|memset] [--only SHAPE CTX BATCH]...
    [--query-tokens T] [--warmup-ms MS] [--graph]
--query-tokens T (session 16): T query tokens per sequence, each attending to the whole context (no mask), as the
CUDA bench's --query-tokens; the shape column then reads SHAPE-tT.
--warmup-ms MS (session 18): each point's step runs MS ms before it is timed, as the CUDA bench's --warmup-ms.
--graph (session 19): also time the call as a torch.cuda.CUDAGraph replay (column graph_us), as the CUDA bench's
--graph does for our step.
"""
import argparse
import csv
import time

import torch
import torch.nn.functional as F

SHAPES = [("qwen3.6-27b", 24, 4, 256), ("llama3-8b", 32, 8, 128)]
# v16 shapes of the CUDA bench (GQA group 16; head_dim 64): only the points it runs for them in a full run.
EXTRA_SHAPES = [("qwen3-235b", 64, 4, 128, [(32768, 8), (65536, 8)]), ("llama3.2-1b", 32, 8, 64, [(32768, 8)]),
                ("llama3.2-3b", 24, 8, 128, [(32768, 8)]), ("llama3-70b", 64, 8, 128, [(32768, 8)])]
MEMORY_BUDGET_BYTES = 100 << 30
FLUSH_BYTES = 256 << 20  # > 4x the 60 MB L2
WARMUP_RUNS = 10
TIMED_RUNS = 50


def time_us(fn, flush, warmup_ms=0):
    """Median time of fn in us over TIMED_RUNS runs, the L2 flushed before each (outside the timed region); with
    warmup_ms, fn (after a flush each time) runs that long first, as minimakv_cuda_bench --warmup-ms does."""
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    warmup_end = time.monotonic() + warmup_ms / 1000.0
    while time.monotonic() < warmup_end:
        flush()
        fn()
        torch.cuda.synchronize()
    times = []
    for r in range(WARMUP_RUNS + TIMED_RUNS):
        flush()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        if r >= WARMUP_RUNS:
            times.append(start.elapsed_time(stop) * 1000.0)
    times.sort()
    return times[len(times) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--csv", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--flush", choices=["read", "memset"], default="read")
    parser.add_argument("--only", nargs=3, action="append", metavar=("SHAPE", "CTX", "BATCH"),
                        help="just these points (repeatable)")
    parser.add_argument("--query-tokens", type=int, default=1)
    parser.add_argument("--warmup-ms", type=int, default=0,
                        help="run each point's step this long before timing it (steady-state clock)")
    parser.add_argument("--graph", action="store_true", help="also time CUDA graph replays of the call")
    args = parser.parse_args()
    if args.warmup_ms < 0:
        parser.error(f"--warmup-ms takes milliseconds >= 0, not {args.warmup_ms}")
    if args.query_tokens < 1:
        parser.error(f"--query-tokens takes a count >= 1, not {args.query_tokens}")
    flush_buf = torch.ones(FLUSH_BYTES // 4, device="cuda", dtype=torch.int32)
    if args.flush == "read":
        flush = lambda: flush_buf.sum()
    else:
        flush = lambda: flush_buf.zero_()
    contexts = [32768] if args.quick else [8192, 32768, 65536, 131072]
    batches = [8] if args.quick else [1, 8, 32]
    rows = []
    points = [(name, hq, hkv, d, ctx, batch) for name, hq, hkv, d in SHAPES for ctx in contexts for batch in batches]
    points += [(name, hq, hkv, d, ctx, batch) for name, hq, hkv, d, pts in EXTRA_SHAPES for ctx, batch in pts
               if not args.quick or (ctx, batch) == (32768, 8)]
    if args.only:
        every_shape = {name: (hq, hkv, d) for name, hq, hkv, d in SHAPES}
        every_shape.update({name: (hq, hkv, d) for name, hq, hkv, d, _ in EXTRA_SHAPES})
        points = []
        for name, ctx, batch in args.only:
            if name not in every_shape:
                parser.error(f"--only: unknown shape {name!r} (known: {', '.join(sorted(every_shape))})")
            points.append((name, *every_shape[name], int(ctx), int(batch)))
    tokens = args.query_tokens
    for name, hq, hkv, d, ctx, batch in points:
        kv_bytes = batch * ctx * hkv * d * 2 * 2
        if kv_bytes * 2 > MEMORY_BUDGET_BYTES:
            continue
        q = torch.randn(batch, hq, tokens, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, hkv, ctx, d, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(batch, hkv, ctx, d, device="cuda", dtype=torch.bfloat16)
        fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        fn()
        torch.cuda.synchronize()
        us = time_us(fn, flush, args.warmup_ms)
        gbps = kv_bytes / us * 1e-3
        label = name if tokens == 1 else f"{name}-t{tokens}"
        graph_us = ""
        graph_text = ""
        if args.graph:
            graph = torch.cuda.CUDAGraph()
            side = torch.cuda.Stream()  # warm-up off the capture, as torch's CUDA graph notes ask
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(graph):
                fn()
            graph_us = f"{time_us(graph.replay, flush):.2f}"
            graph_text = f"  graph {float(graph_us):9.1f} us"
            del graph
        print(f"torch sdpa {label:12s} ctx {ctx:6d} batch {batch:2d} {us:9.1f} us {gbps:6.0f} GB/s{graph_text}",
              flush=True)
        rows.append(["torch_sdpa", label, ctx, batch, "torch_bf16", f"{us:.2f}", kv_bytes, f"{gbps:.1f}", graph_us])
        del q, k, v
        torch.cuda.empty_cache()
    with open(args.csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kind", "shape", "context", "batch", "format", "time_us", "kv_bytes", "gbps", "graph_us"])
        w.writerows(rows)


if __name__ == "__main__":
    main()
