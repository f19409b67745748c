#!/usr/bin/env python3
"""How many 32-key units of a real model's attention carry no weight at fp16 precision.

The GPU TQ3 kernel (src/kernels/cuda/cuda_attention.cu) expands the value codes of every 32-key unit and multiplies
them by the unit's fp16 probabilities. A unit whose probabilities are all exactly 0 in fp16 for every query row of
its CTA (each score more than 24 below the row's maximum in log2 units: 2^-24 is fp16's smallest subnormal) adds
nothing, so a warp could skip its value half bit-exactly. This script measures, on a capture of real K/V and
queries (`minimakv eval capture-kv`, format in include/minimakv/kv_capture.h), the fraction of such units per
(query, KV head), with each row's maximum over the whole context: an upper bound for what a kernel with a running
maximum could skip. Dense K/V as captured (no quantization): the question is the attention pattern, not the codes.

Usage: python3 scripts/real_kv_dead_units.py CAPTURE [--margin-log2 24] [--unit-keys 32]   (needs numpy)
"""
import argparse
import struct
import sys

import numpy as np


def read_capture(path):
    data = open(path, "rb").read()
    if data[:8] != b"MKVCAPT1":
        sys.exit(f"{path}: not a KV capture (magic {data[:8]!r})")
    _version, kv_dtype, num_q_heads, kv_heads, head_dim, _page_tokens = struct.unpack_from("<6I", data, 8)
    (sm_scale,) = struct.unpack_from("<f", data, 32)
    (tokens,) = struct.unpack_from("<I", data, 44)
    num_queries, _model_layers, num_layers, note_bytes = struct.unpack_from("<4I", data, 56)
    at = 72 + note_bytes
    value_bytes = 4 if kv_dtype == 0 else 2

    def values(count):
        nonlocal at
        if kv_dtype == 0:
            out = np.frombuffer(data, "<f4", count, at)
        else:  # bf16: the high half of the fp32
            out = (np.frombuffer(data, "<u2", count, at).astype(np.uint32) << 16).view(np.float32)
        at += count * value_bytes
        return out

    layers = []
    for _ in range(num_layers):
        (layer,) = struct.unpack_from("<I", data, at)
        at += 8
        k = values(tokens * kv_heads * head_dim).reshape(tokens, kv_heads, head_dim)
        v = values(tokens * kv_heads * head_dim)  # read past; values do not decide the weights
        del v
        q = np.frombuffer(data, "<f4", num_queries * num_q_heads * head_dim, at).reshape(
            num_queries, num_q_heads, head_dim)
        at += num_queries * num_q_heads * head_dim * 4
        layers.append((layer, k, q))
    return dict(num_q_heads=num_q_heads, kv_heads=kv_heads, head_dim=head_dim, sm_scale=sm_scale,
                tokens=tokens, num_queries=num_queries, layers=layers)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("capture")
    parser.add_argument("--margin-log2", type=float, default=24.0, help="score gap below the row max (log2 units)")
    parser.add_argument("--unit-keys", type=int, default=32, help="keys per unit (the TQ3 kernel's 32)")
    args = parser.parse_args()
    cap = read_capture(args.capture)
    group = cap["num_q_heads"] // cap["kv_heads"]
    print(f"{args.capture}: {cap['tokens']} tokens, {cap['num_q_heads']} query / {cap['kv_heads']} KV heads, "
          f"head_dim {cap['head_dim']}, {cap['num_queries']} queries; a unit is dead when all {group} rows of its "
          f"KV head score more than {args.margin_log2:g} below their max (log2)")
    print("layer  dead units: mean  min    max   (over queries x KV heads)")
    for layer, k, q in cap["layers"]:
        fractions = []
        for i in range(cap["num_queries"]):
            context = cap["tokens"] - cap["num_queries"] + i + 1
            units = context // args.unit_keys
            for h in range(cap["kv_heads"]):
                rows = q[i, h * group:(h + 1) * group]
                scores = rows @ k[:context, h].T * (cap["sm_scale"] / np.log(2.0))  # log2 units
                dead_keys = (scores < scores.max(axis=1, keepdims=True) - args.margin_log2).all(axis=0)
                dead_units = dead_keys[:units * args.unit_keys].reshape(units, args.unit_keys).all(axis=1)
                fractions.append(dead_units.mean())
        print(f"{layer:5d}  {np.mean(fractions):17.3f}  {np.min(fractions):.3f}  {np.max(fractions):.3f}")


if __name__ == "__main__":
    main()
