"""Summary table of the CUDA decode bench + torch SDPA CSVs (printed last by scripts/gpu_check_and_bench.sh)."""
import csv
import sys


def load(path):
    try:
        with open(path) as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def main():
    ours = load(sys.argv[1])
    torch_rows = load(sys.argv[2]) if len(sys.argv) > 2 else []
    torch_us = {(r["shape"], r["context"], r["batch"]): float(r["time_us"]) for r in torch_rows
                if r["kind"] == "torch_sdpa"}
    table = {}
    read_bw = None
    for r in ours:
        if r["kind"] != "decode":
            continue
        read_bw = r["read_bw_gbps"]
        table.setdefault((r["shape"], r["context"], r["batch"]), {})[r["format"]] = r
    in_step = any(r.get("merge_in_step_us") for r in ours)
    merge_what = ("the mix step's time with the merge minus without, over the step" if in_step
                  else "the merge kernel timed alone, over the mix step")
    print(f"\nSUMMARY (decode step, median us; %BW = GB/s over the read bandwidth measured in the same run, {read_bw} GB/s;"
          f" merge% = {merge_what})")
    hdr = (f"{'shape':12s} {'ctx':>6s} {'b':>2s} | {'bf16 us':>8s} {'%BW':>4s} | {'fp8 us':>7s} {'%BW':>4s} | "
           f"{'tq3 us':>7s} {'%BW':>4s} | {'mix us':>7s} {'%BW':>4s} {'merge%':>6s} | {'torch us':>8s} | "
           f"{'mix/bf16':>8s} {'mix/torch':>9s} {'bf16/torch':>10s}")
    print(hdr)
    print("-" * len(hdr))
    for key, fm in table.items():
        def cell(fmt):
            r = fm.get(fmt)
            return (float(r["time_us"]), float(r["pct_read_bw"])) if r else (float("nan"), float("nan"))
        b, f8, t3, mx = cell("bf16"), cell("fp8"), cell("tq3"), cell("mix")
        # The merge's share of the mix step: what it adds to the step (step - partial kernels alone, same run);
        # CSVs before session 14 have only the merge kernel timed alone.
        merge_key = "merge_in_step_us" if in_step else "merge_us"
        merge_pct = 100.0 * float(fm["mix"][merge_key]) / mx[0] if "mix" in fm else float("nan")
        tu = torch_us.get(key, float("nan"))
        print(f"{key[0]:12s} {int(key[1]):6d} {int(key[2]):2d} | {b[0]:8.1f} {b[1]:4.0f} | {f8[0]:7.1f} {f8[1]:4.0f} | "
              f"{t3[0]:7.1f} {t3[1]:4.0f} | {mx[0]:7.1f} {mx[1]:4.0f} {merge_pct:6.1f} | {tu:8.1f} | "
              f"{b[0] / mx[0]:7.2f}x {tu / mx[0]:8.2f}x {tu / b[0]:9.2f}x")
    for r in ours:
        if r["kind"] == "convert":
            print(f"convert fp8->tq3 {r['shape']}: {r['batch']} pages of {r['context']} tokens in {float(r['time_us']):.0f} us "
                  f"= {int(r['batch']) / float(r['time_us']):.2f} M pages/s, {float(r['gbps']):.0f} GB/s")
    if len(sys.argv) > 3 and sys.argv[3]:
        capacity_table(ours, torch_rows, sys.argv[3])


def capacity_table(ours, torch_rows, points_path):
    """Session 17: each format at the batch it reaches at the memory limit (bench/cuda/capacity_points.txt, from
    `minimakv plan`): one layer's decode step and the tokens per second it gives, against BF16 at its own limit."""
    try:
        with open(points_path) as f:
            points = [line.split() for line in f if line.strip() and not line.startswith("#")]
    except OSError:
        return
    ours_us = {(r["shape"], r["context"], r["batch"], r["format"]): r for r in ours if r["kind"] == "capacity"}
    torch_cap = {(r["shape"], r["context"], r["batch"]): float(r["time_us"]) for r in torch_rows
                 if r["kind"] == "capacity_torch_sdpa"}
    if not ours_us:
        return
    print("\nAT THE MEMORY LIMIT (batch = concurrent requests that fit, `minimakv plan` with the paper's inputs; "
          "one full-attention layer's decode step; tokens/s = batch / step)")
    hdr = (f"{'shape':12s} {'ctx':>6s} {'format':>6s} {'batch':>5s} | {'step us':>8s} {'%BW':>4s} | {'tokens/s':>9s} "
           f"{'vs bf16':>7s} {'vs fp8':>7s}")
    print(hdr)
    print("-" * len(hdr))
    bf16_rate = {}
    fp8_rate = {}
    for shape, ctx, fmt, batch in points:  # the file lists bf16, fp8, mix per context
        r = ours_us.get((shape, ctx, batch, fmt))
        if r is None:
            print(f"{shape:12s} {int(ctx):6d} {fmt:>6s} {int(batch):5d} | (no row)")
            continue
        us = float(r["time_us"])
        rate = int(batch) / us * 1e6
        if fmt == "bf16":
            bf16_rate[(shape, ctx)] = rate
        if fmt == "fp8":
            fp8_rate[(shape, ctx)] = rate
        base = bf16_rate.get((shape, ctx), float("nan"))
        vs_fp8 = f"{rate / fp8_rate[(shape, ctx)]:6.2f}x" if (shape, ctx) in fp8_rate else f"{'':7s}"
        print(f"{shape:12s} {int(ctx):6d} {fmt:>6s} {int(batch):5d} | {us:8.1f} {float(r['pct_read_bw']):4.0f} | "
              f"{rate:9.0f} {rate / base:6.2f}x {vs_fp8}")
        if fmt == "bf16" and (shape, ctx, batch) in torch_cap:
            tu = torch_cap[(shape, ctx, batch)]
            trate = int(batch) / tu * 1e6
            print(f"{shape:12s} {int(ctx):6d} {'torch':>6s} {int(batch):5d} | {tu:8.1f} {'':4s} | {trate:9.0f} "
                  f"{trate / rate:6.2f}x")


if __name__ == "__main__":
    main()
