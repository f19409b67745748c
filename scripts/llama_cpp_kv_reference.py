#!/usr/bin/env python3
"""llama.cpp's own KV-cache quantization on the same model and text, for the table beside `minimakv eval`:
for KV types f16, q8_0 and q4_0 (flash attention on, as llama.cpp requires for a quantized V cache; 2 threads):
  - KL divergence of next-token distributions against llama.cpp's own f16 run, top-1 agreement, perplexity, over
    one window of the text (default /usr/share/common-licenses/GPL-3, Debian package base-files), fed in chunks;
  - passkey accuracy with the same plain-text prompt as minimakv's passkey task, and decode tokens/s after it.
Prints one JSON row per KV type: kv_type, bits_per_value, kld, top1_agreement, ppl, needle_accuracy,
needle_cases, decode_tok_per_s, context.
Usage: python3 scripts/llama_cpp_kv_reference.py MODEL.gguf [--window 2048] [--chunk 256] [--needle-context 2048]
"""
import argparse
import json
import random
import sys
import time

import llama_cpp
import numpy as np

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from make_llama_cpp_fixtures import disable_extra_buffer_types  # noqa: E402

# ggml block sizes: q8_0 = 32 int8 + fp16 scale (34 bytes / 32 values), q4_0 = 32 nibbles + fp16 (18 / 32).
KV_TYPES = {"f16": (llama_cpp.GGML_TYPE_F16, 16.0), "q8_0": (llama_cpp.GGML_TYPE_Q8_0, 8.5),
            "q4_0": (llama_cpp.GGML_TYPE_Q4_0, 4.5)}
INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz "
         "you about the important information there.\n\n")
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
QUESTION = "\nWhat is the pass key? The pass key is"


def make_llm(model, kv_type, n_ctx, logits_all):
    return llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=512, n_threads=2, n_threads_batch=2,
                           flash_attn=True, type_k=kv_type, type_v=kv_type, logits_all=logits_all, verbose=False)


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


def last_logits(llm):
    ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).copy()


def passkey_prompt(llm, context, depth, seed):
    key = str(random.Random(seed).randint(10000, 99999))
    needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
    filler_tokens = len(llm.tokenize(FILLER.encode(), add_bos=False))
    frame = len(llm.tokenize((INTRO + needle + QUESTION).encode(), add_bos=False))
    n = max(0, (context - frame) // filler_tokens)
    while True:
        before = int(n * depth + 0.5)
        text = INTRO + FILLER * before + needle + FILLER * (n - before) + QUESTION
        ids = llm.tokenize(text.encode(), add_bos=False)
        if len(ids) <= context or n == 0:
            return ids, key
        n -= 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--window", type=int, default=2048)
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--needle-context", type=int, default=2048)
    ap.add_argument("--depths", default="0.1,0.5,0.9")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--decode-tokens", type=int, default=16)
    args = ap.parse_args()
    disable_extra_buffer_types()

    ref_logp = None
    ref_top = None
    rows = []
    for name, (kv_type, bits) in KV_TYPES.items():
        llm = make_llm(args.model, kv_type, args.window, True)
        ids = llm.tokenize(open(args.text, encoding="utf-8").read().encode(), add_bos=False)[: args.window]
        llm.reset()
        for c0 in range(0, len(ids), args.chunk):
            llm.eval(ids[c0:c0 + args.chunk])
        logp = log_softmax(np.array(llm.scores[: len(ids) - 1]))
        top = logp.argmax(axis=-1)
        nll = -logp[np.arange(len(ids) - 1), np.array(ids[1:])].mean()
        if ref_logp is None:
            ref_logp, ref_top = logp, top
        kld = float((np.exp(ref_logp) * (ref_logp - logp)).sum(axis=-1).mean())
        agree = float((top == ref_top).mean())
        del llm

        llm = make_llm(args.model, kv_type, args.needle_context + args.decode_tokens + 8, False)
        correct = cases = 0
        decode_rates = []
        for depth in [float(d) for d in args.depths.split(",")]:
            for seed in range(args.seeds):
                prompt, key = passkey_prompt(llm, args.needle_context, depth, 1000 * seed + int(depth * 100))
                llm.reset()
                llm.eval(prompt)
                out = []
                t0 = time.time()
                for _ in range(args.decode_tokens):
                    tok = int(np.argmax(last_logits(llm)))
                    out.append(tok)
                    llm.eval([tok])
                decode_rates.append(args.decode_tokens / (time.time() - t0))
                answer = llm.detokenize(out[:8]).decode("utf-8", "replace")
                digits = ""
                for ch in answer:
                    if ch.isdigit():
                        digits += ch
                    elif digits:
                        break
                correct += digits == key
                cases += 1
        rows.append({"kv_type": name, "bits_per_value": bits, "kld": kld, "top1_agreement": agree,
                     "ppl": float(np.exp(nll)), "needle_accuracy": correct / cases, "needle_cases": cases,
                     "decode_tok_per_s": float(np.median(decode_rates)), "context": args.needle_context,
                     "window": len(ids), "chunk": args.chunk})
        print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
    main()
