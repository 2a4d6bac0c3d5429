#!/usr/bin/env python3
"""Lists class and struct names defined twice in the same namespace of the public headers.

    tools/lint/type_names.py [INCLUDE_DIR]     (default: include)

Two headers that each define `qkv::analysis::AttributionResult` compile as long as no file includes both,
and then break the one-definition rule: each translation unit gets its own layout for the same name and the
linker keeps one of the two's inline members (a move assignment of the wrong size, caught by ASan in qkv
serve). A definition is `struct|class NAME ... {` at the start of a line inside `namespace A::B {`
blocks; forward declarations (`struct X;`) do not count. Exit 1 when a name is defined twice.
"""
import os
import re
import sys

NS = re.compile(r"^namespace\s+([\w:]+)\s*\{")
TYPE = re.compile(r"^(?:struct|class)\s+(?:\[\[[^\]]*\]\]\s*)?(\w+)\b[^;]*\{")


def definitions(path):
    ns = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = NS.match(line)
            if m:
                ns.append(m.group(1))
            elif line.startswith("}") and "namespace" in line and ns:
                ns.pop()
            m = TYPE.match(line)
            if m:
                yield "::".join(ns + [m.group(1)])


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "include"
    seen = {}
    for dirpath, _, files in os.walk(root):
        for name in sorted(files):
            if name.endswith((".hpp", ".h")):
                path = os.path.join(dirpath, name)
                for qual in definitions(path):
                    seen.setdefault(qual, []).append(path)
    bad = {q: p for q, p in seen.items() if len(p) > 1}
    for q, paths in sorted(bad.items()):
        print(f"{q} is defined in {len(paths)} headers: {', '.join(paths)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
