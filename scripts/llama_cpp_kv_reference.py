#!/usr/bin/env python3
"""llama.cpp's own KV-cache types on the same model, text and prompts as `minimakv eval`, for the side-by-side
table in docs/BENCHMARKS.md. KV types f16 (its control), bf16 (to show how much a 16-bit KV format alone moves the
answers), q8_0 and q4_0; flash attention on (llama.cpp needs it for a quantized V cache); 2 threads.

  kld   the same text as `minimakv eval kld` (the same comma-separated files joined by a blank line), the same
        windows of W tokens fed in chunks of C: mean KL(p_f16 || p_type), top-1 agreement with f16, perplexity.
  niah  the prompts written by `minimakv eval niah --dump-cases FILE` (identical token ids): greedy answer of up
        to 8 tokens, accuracy (first digits == passkey), agreement with f16, decode tokens/s per context.
        --prefill-f16: each prompt but its last token is prefilled ONCE with an f16 cache; llama.cpp's own state
        bytes of that sequence are re-encoded into each KV type (q8_0 / q4_0 exactly as ggml's reference
        quantizers write them) and loaded into a context of that type, which then evaluates the last prompt token
        and decodes. This is minimakv's order (prefill on full-precision K/V, then the cache is quantized), and
        it makes the q8_0 / q4_0 rows at 8K cheap: llama.cpp's CPU flash attention dequantizes a quantized V row
        per (query, key), so its own 8K prefill with q4_0 costs about twice the f16 one (3-4 min on 2 idle cores).

Prints one JSON object per line: {"kind": "kld", ...} and {"kind": "niah", ...}.
Usage: python3 scripts/llama_cpp_kv_reference.py MODEL.gguf [--windows 3 --window 8192] [--cases FILE]
       [--max-cases-per-context N] [--skip-kld] [--prefill-f16]
"""
import argparse
import collections
import ctypes
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


# ---- --prefill-f16: llama.cpp's per-sequence state bytes (src/llama-kv-cache.cpp, state_write / state_write_data
# of the vendored llama.cpp in llama-cpp-python 0.3.36; header in src/llama-context.cpp state_seq_get_data) for a
# plain (non-SWA, non-M-RoPE) cache, flash attention on:
#   u32 magic 0xaf143cd8, i32 seq_id, u32 n_stream, u32 cell_count, cell_count x (i32 pos, u32 n_seq_id = 1, i32 seq_id),
#   u32 v_trans (0), u32 n_layer, n_layer x K (i32 ggml type, u64 row bytes, cell_count rows),
#   n_layer x V (the same).
GGML_TYPE_F16_ID, GGML_TYPE_Q4_0_ID, GGML_TYPE_Q8_0_ID = 1, 2, 8  # ggml.h enum ggml_type
GGML_BLOCK_VALUES = 32  # QK4_0 = QK8_0 = 32
LLAMA_SEQ_STATE_MAGIC = 0xAF143CD8


def quantize_q8_0(x):
    """ggml-quants.c quantize_row_q8_0_ref: d = amax / 127 (stored fp16), q = roundf(x / d); blocks of 34 bytes."""
    x = x.reshape(-1, GGML_BLOCK_VALUES).astype(np.float32)
    d = (np.abs(x).max(axis=1) / np.float32(127)).astype(np.float32)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0).astype(np.float32)
    scaled = (x * inv[:, None]).astype(np.float32)
    q = (np.sign(scaled) * np.floor(np.abs(scaled) + np.float32(0.5))).astype(np.int8)  # roundf: half away from 0
    out = np.empty((x.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(-1)


def quantize_q4_0(x):
    """ggml-quants.c quantize_row_q4_0_ref: d = (the signed value of largest magnitude) / -8 (stored fp16),
    q = min(15, trunc(x / d + 8.5)); byte j holds value j (low nibble) and value j + 16 (high); 18-byte blocks."""
    x = x.reshape(-1, GGML_BLOCK_VALUES).astype(np.float32)
    first_max = np.abs(x).argmax(axis=1)  # the first of equal magnitudes, as the reference's strict '<'
    d = (x[np.arange(x.shape[0]), first_max] / np.float32(-8)).astype(np.float32)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0).astype(np.float32)
    q = np.minimum(15, np.trunc((x * inv[:, None]).astype(np.float32) + np.float32(8.5))).astype(np.uint8)
    out = np.empty((x.shape[0], 18), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.reshape(-1)


QUANTIZERS = {GGML_TYPE_Q8_0_ID: (quantize_q8_0, 34), GGML_TYPE_Q4_0_ID: (quantize_q4_0, 18)}


def walsh_hadamard(n):
    """Orthonormal Sylvester-Hadamard matrix (symmetric), as llama-kv-cache.cpp ggml_gen_hadamard builds it."""
    h = np.ones((1, 1), dtype=np.float32)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return (h / np.sqrt(np.float32(n))).astype(np.float32)


def attn_rotation_sizes(head_dim):
    """llama.cpp (PR 21038, in this vendored version) rotates Q/K and V by Walsh-Hadamard blocks before a
    QUANTIZED cache stores them (attn_rot_k / attn_rot_v, src/llama-kv-cache.cpp): K by the largest power of two
    >= 64 dividing head_dim, V by blocks of 64; only when head_dim % 64 == 0 (LLAMA_ATTN_ROT_DISABLE=1 turns it
    off). A re-encoded cache must store the rotated values, or the context's rotated queries would not match."""
    if head_dim % 64:
        return None, None
    k_rot = 64
    while head_dim % (2 * k_rot) == 0:
        k_rot *= 2
    return k_rot, 64


def reencode_seq_state(state, target_type, head_dim):
    """An f16 sequence state re-encoded with K and V in target_type (ggml type id), rotated first as llama.cpp
    rotates a quantized cache; f16 returns it unchanged."""
    if target_type == GGML_TYPE_F16_ID:
        return state
    view = memoryview(state)
    magic, _, n_stream, cell_count = np.frombuffer(view[:16], dtype=np.uint32)
    if magic != LLAMA_SEQ_STATE_MAGIC or n_stream != 1:
        raise ValueError(f"expected llama.cpp sequence state magic {LLAMA_SEQ_STATE_MAGIC:#x} and one KV stream, "
                         f"got {magic:#x} and {n_stream}")
    meta = np.frombuffer(view[16:16 + 12 * int(cell_count)], dtype=np.int32).reshape(-1, 3)
    if not (meta[:, 1] == 1).all():
        raise ValueError("expected cells of exactly one sequence each")
    at = 16 + 12 * int(cell_count)
    v_trans, n_layer = np.frombuffer(view[at:at + 8], dtype=np.uint32)
    if v_trans != 0:
        raise ValueError("expected a non-transposed V cache (flash attention on)")
    quantize, block_bytes = QUANTIZERS[target_type]
    rotation_sizes = attn_rotation_sizes(head_dim)
    out = [bytes(view[:at + 8])]
    at += 8
    for tensor in range(2 * int(n_layer)):  # K of every layer, then V of every layer
        rot = rotation_sizes[0 if tensor < int(n_layer) else 1]
        ggml_type = int(np.frombuffer(view[at:at + 4], dtype=np.int32)[0])
        row_bytes = int(np.frombuffer(view[at + 4:at + 12], dtype=np.uint64)[0])
        if ggml_type != GGML_TYPE_F16_ID:
            raise ValueError(f"expected an f16 cache in the state, got ggml type {ggml_type}")
        at += 12
        rows = np.frombuffer(view[at:at + row_bytes * int(cell_count)], dtype=np.float16)
        at += row_bytes * int(cell_count)
        values_per_row = row_bytes // 2
        out.append(np.int32(target_type).tobytes())
        out.append(np.uint64(values_per_row // GGML_BLOCK_VALUES * block_bytes).tobytes())
        values = rows.astype(np.float32)
        if rot is not None:
            values = (values.reshape(-1, rot) @ walsh_hadamard(rot)).astype(np.float32)
        out.append(quantize(values).tobytes())
    if at != len(state):
        raise ValueError(f"state has {len(state) - at} unparsed trailing bytes")
    return b"".join(out)


def seq_state(llm):
    size = llama_cpp.llama_state_seq_get_size(llm._ctx.ctx, 0)
    buf = (ctypes.c_uint8 * size)()
    written = llama_cpp.llama_state_seq_get_data(llm._ctx.ctx, buf, size, 0)
    if written != size:
        raise RuntimeError(f"llama_state_seq_get_data wrote {written} of {size} bytes")
    return bytes(buf)


def load_seq_state(llm, state, prompt_ids):
    llm.reset()
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm._ctx.ctx), True)
    buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
    if llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, buf, len(state), 0) != len(state):
        raise RuntimeError("llama_state_seq_set_data rejected the re-encoded state")
    llm.input_ids[:len(prompt_ids)] = prompt_ids  # llama-cpp-python's position bookkeeping
    llm.n_tokens = len(prompt_ids)


def chosen_cases(args):
    cases = [json.loads(line) for line in open(args.cases)]
    per_context = collections.Counter()
    chosen = []
    for c in cases:  # the first N cases of each context: the dump's order is depth-major, seed-minor
        if args.max_cases_per_context and per_context[c["context"]] >= args.max_cases_per_context:
            continue
        per_context[c["context"]] += 1
        chosen.append(c)
    return chosen


def greedy_answer(llm, answer_tokens):
    """Greedy tokens after the evaluated prompt; returns (answer digits, decode tokens/s or None)."""
    out = []
    t0 = time.time()
    for _ in range(answer_tokens):
        tok = int(np.argmax(last_logits(llm)))
        if llama_cpp.llama_vocab_is_eog(llama_cpp.llama_model_get_vocab(llm._model.model), tok):
            break
        out.append(tok)
        llm.eval([tok])
    rate = len(out) / (time.time() - t0) if out else None
    return first_digits(llm.detokenize(out).decode("utf-8", "replace")), rate


class NiahTally:
    def __init__(self):
        self.counts = collections.defaultdict(collections.Counter)  # (kv type, context) -> counts
        self.rates = collections.defaultdict(list)
        self.f16_digits = {}

    def add(self, name, case, digits, rate):
        key = (case["context"], case["depth_percent"], case["seed"])
        if name == "f16":
            self.f16_digits[key] = digits
        t = self.counts[(name, case["context"])]
        t["cases"] += 1
        t["correct"] += digits == case["passkey"]
        t["agree"] += digits == self.f16_digits[key]
        if rate is not None:
            self.rates[(name, case["context"])].append(rate)

    def print_rows(self, method):
        for (name, context), t in sorted(self.counts.items(), key=lambda kv: (kv[0][1], list(KV_TYPES).index(kv[0][0]))):
            rates = self.rates[(name, context)]
            print(json.dumps({"kind": "niah", "kv_type": name, "bits_per_value": KV_TYPES[name][1],
                              "context": context, "accuracy": t["correct"] / t["cases"],
                              "agreement_with_f16": t["agree"] / t["cases"], "cases": t["cases"],
                              "decode_tok_per_s": float(np.median(rates)) if rates else None,
                              "prefill": method}), flush=True)


def run_niah(args):
    chosen = chosen_cases(args)
    n_ctx = max(c["context"] for c in chosen) + args.answer_tokens + 8
    tally = NiahTally()
    for name in args.kv_types.split(","):
        llm = make_llm(args.model, KV_TYPES[name][0], n_ctx, False)
        for i, c in enumerate(chosen):
            llm.reset()
            llm.eval(c["prompt_ids"])
            tally.add(name, c, *greedy_answer(llm, args.answer_tokens))
            print(f"niah {name} case {i + 1}/{len(chosen)}", file=sys.stderr, flush=True)
        del llm
    tally.print_rows("own")


def run_niah_prefill_f16(args):
    chosen = chosen_cases(args)
    n_ctx = max(c["context"] for c in chosen) + args.answer_tokens + 8
    names = args.kv_types.split(",")
    if names[0] != "f16":
        raise SystemExit("--prefill-f16 needs f16 first in --kv-types")
    ggml_ids = {"f16": GGML_TYPE_F16_ID, "q8_0": GGML_TYPE_Q8_0_ID, "q4_0": GGML_TYPE_Q4_0_ID}
    llms = {name: make_llm(args.model, KV_TYPES[name][0], n_ctx, False) for name in names}
    meta = llms["f16"].metadata
    arch = meta["general.architecture"]
    head_dim = int(meta.get(f"{arch}.attention.key_length",
                            int(meta[f"{arch}.embedding_length"]) // int(meta[f"{arch}.attention.head_count"])))
    tally = NiahTally()
    for i, c in enumerate(chosen):
        prefix, last = c["prompt_ids"][:-1], c["prompt_ids"][-1]
        t0 = time.time()
        llms["f16"].reset()
        llms["f16"].eval(prefix)
        state = seq_state(llms["f16"])
        prefill_s = time.time() - t0
        for name in names:
            llm = llms[name]
            load_seq_state(llm, reencode_seq_state(state, ggml_ids[name], head_dim), prefix)
            llm.eval([last])
            tally.add(name, c, *greedy_answer(llm, args.answer_tokens))
        print(f"niah case {i + 1}/{len(chosen)} (f16 prefill {prefill_s:.0f} s): " +
              " ".join(f"{n}={tally.counts[(n, c['context'])]['correct']}" for n in names),
              file=sys.stderr, flush=True)
    tally.print_rows("f16 then re-encoded")


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
    ap.add_argument("--prefill-f16", action="store_true",
                    help="niah: prefill each prompt once with f16 K/V, then re-encode the cache per KV type")
    args = ap.parse_args()
    global FLASH_ATTN
    FLASH_ATTN = not args.no_flash_attn
    disable_extra_buffer_types()
    if not args.skip_kld:
        run_kld(args)
    if args.cases:
        (run_niah_prefill_f16 if args.prefill_f16 else run_niah)(args)


if __name__ == "__main__":
    main()
