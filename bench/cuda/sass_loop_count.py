#!/usr/bin/env python3
"""Static SASS opcode counts of a kernel's main loop (docs/cuda-notes.md, v9-v15 "SASS per 32-key unit").

usage: sass_loop_count.py FILE.sass NAME_PART [NAME_PART ...]   (FILE.sass: `nvdisasm -c x.cubin`)

For each kernel whose .text section name contains NAME_PART, the main loop is the innermost backward branch (BRA
to an earlier label) whose span [target, branch] holds IMMA or HMMA instructions (the smallest such span: the
warp-collective fixup loops nvcc wraps around shuffles span the whole kernel); the script prints the span's
instruction count (NOP excluded) and its opcodes (the mnemonic's first dotted part; IMAD.SHL etc. kept whole).
"""
import collections
import re
import sys

INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)")
BRA = re.compile(r"\bBRA\b.*?(?:`\(\.L_x_(\d+)\)|0x([0-9a-f]+))")
LABEL = re.compile(r"^\.L_x_(\d+):")


def kernels(text):
    out = {}
    name = None
    for line in text.split("\n"):
        m = re.match(r"^\.text\.(\S+):", line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        if name is not None:
            out[name].append(line)
    return out


def opcode(mnemonic):
    parts = mnemonic.split(".")
    if parts[0] == "IMAD" and len(parts) > 1 and parts[1] in ("SHL", "HI", "WIDE", "MOV", "IADD", "X"):
        return parts[0] + "." + parts[1]
    return parts[0]


def main_loop(lines):
    insns = []  # (index, address, opcode, line)
    labels = {}
    for line in lines:
        lm = LABEL.match(line.strip())
        if lm:
            labels[lm.group(1)] = len(insns)
            continue
        m = INSN.search(line)
        if m:
            insns.append((int(m.group(1), 16), opcode(m.group(2)), line))
    best = None
    for i, (addr, op, line) in enumerate(insns):
        if op != "BRA":
            continue
        b = BRA.search(line)
        if not b:
            continue
        if b.group(1) is not None:
            target = labels.get(b.group(1))
        else:
            target = next((j for j, x in enumerate(insns) if x[0] == int(b.group(2), 16)), None)
        if target is None or target > i:
            continue
        span = insns[target:i + 1]
        if not any(x[1] in ("IMMA", "HMMA") for x in span):
            continue
        if best is None or len(span) < len(best[1]):
            best = (len(span), span)
    return best[1] if best else []


def main():
    text = open(sys.argv[1]).read()
    for name, lines in kernels(text).items():
        if not any(part in name for part in sys.argv[2:]):
            continue
        span = main_loop(lines)
        counts = collections.Counter(op for _, op, _ in span if op != "NOP")
        print(f"{name}: loop {sum(counts.values())} instructions")
        print("  " + ", ".join(f"{op} {n}" for op, n in counts.most_common()))


if __name__ == "__main__":
    main()
