#!/usr/bin/env python3
"""PTX identity check for cleanups that delete whole kernels (docs/cuda-notes.md, "v14 cleanup").

usage: ptx_compare.py OLD.ptx NEW.ptx [--drop NAME ...]

Drops every kernel whose .entry line contains one of the NAMEs (from that line through its closing brace and the
blank lines after it) from both files, then compares them byte for byte. ptxas-independent names that nvcc numbers
by the function's position in the file (branch labels $L__BB<function>_<block>, __local_depot<function>) are
renumbered to the position after the drop, so a kernel deleted in front of others does not show up as a difference
in them. Exit status 0 and "identical" when the rest is the same, else 1 and the first differing lines.
"""
import re
import sys


def kernels_dropped(text, names):
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(".entry") and any(name in line for name in names):
            while lines[i] != "}":
                i += 1
            i += 1
            while i < len(lines) and lines[i] == "":
                i += 1
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def renumbered(text):
    # Function indices in label and depot names, in order of first appearance -> 0, 1, 2, ...
    order = {}

    def index(match_number):
        return order.setdefault(match_number, len(order))

    text = re.sub(r"__local_depot(\d+)", lambda m: "__local_depot%d" % index(m.group(1)), text)
    order.clear()
    return re.sub(r"\$L__BB(\d+)_", lambda m: "$L__BB%d_" % index(m.group(1)), text)


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    names = argv[argv.index("--drop") + 1:] if "--drop" in argv else []
    old, new = (renumbered(kernels_dropped(open(path).read(), names)) for path in argv[1:3])
    if old == new:
        print("identical (%d kernels compared)" % old.count("\n.entry"))
        return 0
    for number, (a, b) in enumerate(zip(old.split("\n"), new.split("\n")), 1):
        if a != b:
            print("line %d:\n< %s\n> %s" % (number, a, b))
            break
    else:
        print("one file is a prefix of the other")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
