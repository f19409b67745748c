#!/usr/bin/env python3
"""llama.cpp's own KV-cache types on the same model, text and prompts as `minimakv eval`, for the side-by-side
table in docs/BENCHMARKS.md. KV types f16 (its control), bf16 (to show how much a 16-bit KV format alone moves the
answers), q8_0 and q4_0; flash attention on (llama.cpp needs it for a quantized V cache); 2 threads.

  kld   the same text as `minimakv eval kld` (the same comma-separated files joined by a blank line), the same
        windows of W tokens fed in chunks of C: mean KL(p_f16 || p_type), top-1 agreement with f16, perplexity.
  niah  the prompts written by `minimakv eval niah --dump-cases FILE` (identical token ids): greedy answer of up
        to 8 tokens, accuracy (first digits == passkey), agreement with f16, decode tokens/s per context.

Prints one JSON object per line: {"kind": "kld", ...} and {"kind": "niah", ...}.
Usage: python3 scripts/llama_cpp_kv_reference.py MODEL.gguf [--windows 3 --window 8192] [--cases FILE]
       [--max-cases-per-context N] [--skip-kld]
"""
import argparse
import collections
import json
import sys
import time

import llama_cpp
import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from make_llama_cpp_fixtures import disable_extra_buffer_types  # noqa: E402

# ggml block sizes: q8_0 = 32 int8 + fp16 scale (34 bytes / 32 values), q4_0 = 32 nibbles + fp16 (18 / 32).
GGML_TYPE_BF16 = getattr(llama_cpp, "GGML_TYPE_BF16", 30)  # ggml.h enum value; this binding does not export it
KV_TYPES = {"f16": (llama_cpp.GGML_TYPE_F16, 16.0), "bf16": (GGML_TYPE_BF16, 16.0),
            "q8_0": (llama_cpp.GGML_TYPE_Q8_0, 8.5), "q4_0": (llama_cpp.GGML_TYPE_Q4_0, 4.5)}
# The default text of `minimakv eval kld` (tools/minimakv/cmd_eval.cpp): Debian base-files license texts.
DEFAULT_TEXT = ",".join("/usr/share/common-licenses/" + n
                        for n in ["GPL-3", "GPL-2", "LGPL-2.1", "GFDL-1.3", "MPL-2.0", "Apache-2.0"])
ROWS_PER_BLOCK = 256  # log-softmax in blocks: a window of 8K x 49K vocab in float64 would be 3 GB


FLASH_ATTN = True  # --no-flash-attn: only for f16 (a quantized V cache needs flash attention)


def make_llm(model, kv_type, n_ctx, logits_all):
    return llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=512, n_threads=2, n_threads_batch=2,
                           flash_attn=FLASH_ATTN, type_k=kv_type, type_v=kv_type, logits_all=logits_all,
                           verbose=False)


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


def last_logits(llm):
    ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).copy()


def read_text(paths):
    parts = [open(p, encoding="utf-8").read() for p in paths.split(",") if p]
    return "\n\n".join(parts)


def first_digits(text):
    digits = ""
    for ch in text:
        if ch.isdigit():
            digits += ch
        elif digits:
            break
    return digits


def run_kld(args):
    tokenizer = make_llm(args.model, llama_cpp.GGML_TYPE_F16, 512, False)
    ids = tokenizer.tokenize(read_text(args.text).encode(), add_bos=False)
    del tokenizer
    win = min(args.window, len(ids))
    windows = min(args.windows, len(ids) // win)
    types = {name: KV_TYPES[name] for name in args.kv_types.split(",")}
    sums = {name: collections.Counter() for name in types}
    for w in range(windows):
        window_ids = ids[w * win:(w + 1) * win]
        targets = np.array(window_ids[1:])
        ref_logp = None  # float32 [win - 1, vocab] of the f16 run
        for name, (kv_type, _) in types.items():
            llm = make_llm(args.model, kv_type, win, True)
            llm.reset()
            for c0 in range(0, win, args.chunk):
                llm.eval(window_ids[c0:c0 + args.chunk])
            scores = np.asarray(llm.scores[: win - 1])
            if ref_logp is None:
                ref_logp = np.empty(scores.shape, dtype=np.float32)
            s = sums[name]
            for r0 in range(0, win - 1, ROWS_PER_BLOCK):
                r1 = min(win - 1, r0 + ROWS_PER_BLOCK)
                logp = log_softmax(scores[r0:r1])
                if name == "f16":
                    ref_logp[r0:r1] = logp
                ref = ref_logp[r0:r1].astype(np.float64)
                s["kld"] += float((np.exp(ref) * (ref - logp)).sum())
                s["agree"] += int((logp.argmax(axis=-1) == ref.argmax(axis=-1)).sum())
                s["nll"] -= float(logp[np.arange(r1 - r0), targets[r0:r1]].sum())
                s["positions"] += r1 - r0
            del llm
            print(f"kld window {w + 1}/{windows} {name} done", file=sys.stderr, flush=True)
    for name, (_, bits) in types.items():
        s = sums[name]
        n = max(1, s["positions"])
        print(json.dumps({"kind": "kld", "kv_type": name, "bits_per_value": bits, "kld": s["kld"] / n,
                          "top1_agreement": s["agree"] / n, "ppl": float(np.exp(s["nll"] / n)),
                          "positions": s["positions"], "windows": windows, "window": win, "chunk": args.chunk}),
              flush=True)


def run_niah(args):
    cases = [json.loads(line) for line in open(args.cases)]
    per_context = collections.Counter()
    chosen = []
    for c in cases:  # the first N cases of each context: the dump's order is depth-major, seed-minor
        if args.max_cases_per_context and per_context[c["context"]] >= args.max_cases_per_context:
            continue
        per_context[c["context"]] += 1
        chosen.append(c)
    f16_digits = {}
    for name, (kv_type, bits) in {name: KV_TYPES[name] for name in args.kv_types.split(",")}.items():
        tally = collections.defaultdict(collections.Counter)
        rates = collections.defaultdict(list)
        llm = make_llm(args.model, kv_type, max(c["context"] for c in chosen) + args.answer_tokens + 8, False)
        for i, c in enumerate(chosen):
            llm.reset()
            llm.eval(c["prompt_ids"])
            out = []
            t0 = time.time()
            for _ in range(args.answer_tokens):
                tok = int(np.argmax(last_logits(llm)))
                if llama_cpp.llama_vocab_is_eog(llama_cpp.llama_model_get_vocab(llm._model.model), tok):
                    break
                out.append(tok)
                llm.eval([tok])
            if out:
                rates[c["context"]].append(len(out) / (time.time() - t0))
            digits = first_digits(llm.detokenize(out).decode("utf-8", "replace"))
            key = (c["context"], c["depth_percent"], c["seed"])
            if name == "f16":
                f16_digits[key] = digits
            t = tally[c["context"]]
            t["cases"] += 1
            t["correct"] += digits == c["passkey"]
            t["agree"] += digits == f16_digits[key]
            print(f"niah {name} case {i + 1}/{len(chosen)}", file=sys.stderr, flush=True)
        del llm
        for context in sorted(tally):
            t = tally[context]
            print(json.dumps({"kind": "niah", "kv_type": name, "bits_per_value": bits, "context": context,
                              "accuracy": t["correct"] / t["cases"], "agreement_with_f16": t["agree"] / t["cases"],
                              "cases": t["cases"], "decode_tok_per_s": float(np.median(rates[context]))
                              if rates[context] else None}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--text", default=DEFAULT_TEXT, help="comma-separated files, joined by a blank line")
    ap.add_argument("--window", type=int, default=8192)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--skip-kld", action="store_true")
    ap.add_argument("--kv-types", default="f16,bf16,q8_0,q4_0", help="f16 first: the others are compared to it")
    ap.add_argument("--cases", help="JSON lines from `minimakv eval niah --dump-cases FILE`")
    ap.add_argument("--max-cases-per-context", type=int, default=0, help="0: all")
    ap.add_argument("--answer-tokens", type=int, default=8)
    ap.add_argument("--no-flash-attn", action="store_true")
    args = ap.parse_args()
    global FLASH_ATTN
    FLASH_ATTN = not args.no_flash_attn
    disable_extra_buffer_types()
    if not args.skip_kld:
        run_kld(args)
    if args.cases:
        run_niah(args)


if __name__ == "__main__":
    main()
