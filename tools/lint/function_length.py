#!/usr/bin/env python3
"""Lists every function body longer than a limit (default 150 lines) in C++ and Python sources.

    tools/lint/function_length.py [--limit N] [PATH ...]     (default: src tools server python)

A C++ function body is a brace block opened at namespace or class scope whose header (the text since the
previous ';', '{' or '}') ends in a parameter list, optionally followed by qualifiers, an initialiser list
or a trailing return type; lambdas and nested blocks count toward the function that holds them. Comments,
string and character literals (raw strings too) are skipped. A Python function is a `def` and every line
indented under it. Exit 1 when any function is over the limit (CI's lint test), 0 otherwise.
"""
import argparse
import os
import re
import sys

CPP_EXT = (".cpp", ".hpp", ".h", ".cc", ".inc")


def strip_cpp(text):
    """The text with comments and literals blanked (newlines kept), so braces can be counted."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            m = re.match(r'R"([^()\\ ]{0,16})\(', text[i:])
            if not m:
                out.append(c); i += 1; continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(" "); i += 1; continue  # digit separator 1'000
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        else:
            out.append(c); i += 1
    return "".join(out)


HEADER_END = re.compile(
    r"\)\s*(const|noexcept(\s*\([^)]*\))?|override|final|mutable|&|&&|\s)*"
    r"(->\s*[\w:<>,\s*&]+)?\s*$")


def is_function_header(header):
    h = header.strip()
    if not h or h.startswith("#"):
        return False
    first = re.match(r"[A-Za-z_]\w*", h)
    if first and first.group(0) in ("if", "for", "while", "switch", "catch", "do", "else", "return"):
        return False
    h = re.sub(r"\s+", " ", h)
    # constructor initialiser lists: X::X(a) : m(a), n{b}
    h = re.sub(r"\)\s*:\s*[\w:]+\s*[({].*$", ")", h)
    return bool(HEADER_END.search(h)) and "=" not in h.split("(")[0]


def cpp_functions(text):
    s = strip_cpp(text)
    lines = s.split("\n")
    starts = []  # (depth, is_function, name, line)
    depth_kind = []  # per open brace: 'scope' (namespace/class/extern) or 'func' or 'block'
    header_start = 0
    results = []
    line = 1
    for i, c in enumerate(s):
        if c == "\n":
            line += 1
        elif c == "{":
            header = s[header_start:i]
            inside_func = any(k == "func" for k, _, _ in depth_kind)
            if inside_func:
                depth_kind.append(("block", None, None))
            elif is_function_header(header):
                name = re.findall(r"([~\w:]+)\s*\(", header)
                depth_kind.append(("func", name[0] if name else "?", line))
            else:
                depth_kind.append(("scope", None, None))
            header_start = i + 1
        elif c == "}":
            if depth_kind:
                kind, name, start = depth_kind.pop()
                if kind == "func":
                    results.append((name, start, line))
            header_start = i + 1
        elif c == ";":
            if not any(k == "func" for k, _, _ in depth_kind):
                header_start = i + 1
    return results


def py_functions(text):
    res = []
    lines = text.split("\n")
    for i, l in enumerate(lines):
        m = re.match(r"(\s*)(async\s+)?def\s+(\w+)", l)
        if not m:
            continue
        ind = len(m.group(1))
        end = i
        for j in range(i + 1, len(lines)):
            lj = lines[j]
            if lj.strip() == "" or lj.lstrip().startswith("#"):
                continue
            if len(lj) - len(lj.lstrip()) <= ind:
                break
            end = j
        res.append((m.group(3), i + 1, end + 1))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=150)
    ap.add_argument("paths", nargs="*", default=["src", "tools", "server", "python"])
    a = ap.parse_args()
    over = []
    for root in a.paths:
        files = [root] if os.path.isfile(root) else [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
        for f in sorted(files):
            if f.endswith(CPP_EXT):
                fns = cpp_functions(open(f, encoding="utf-8", errors="replace").read())
            elif f.endswith(".py"):
                fns = py_functions(open(f, encoding="utf-8", errors="replace").read())
            else:
                continue
            for name, s, e in fns:
                if e - s + 1 > a.limit:
                    over.append((e - s + 1, f, s, name))
    for n, f, s, name in sorted(over, reverse=True):
        print(f"{f}:{s}: {name}: {n} lines (limit {a.limit})")
    if over:
        print(f"{len(over)} function(s) longer than {a.limit} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
