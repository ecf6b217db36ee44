#!/usr/bin/env python3
"""Checks the repository's Markdown docs (README.md, docs/**/*.md, crates/*/README.md):
every relative link names a file or directory that exists, and a `#anchor` (in the same
file or another Markdown file) names one of that file's headings, as GitHub renders them.
Also refuses references a reader cannot open: paths outside the repository (`../shared/`,
`/work/...`) and issue numbers ("issue #12"); link the repository's own section instead.

    python3 scripts/check-doc-links.py        (from anywhere; no network; exits 1 on a problem)
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
OUTSIDE = re.compile(r"\.\./shared|/work/|shared/papers|shared/checks|shared/cache-traces")
ISSUE = re.compile(r"\bissues? #?\d+|\(#\d+\)", re.I)


def docs():
    out = [os.path.join(ROOT, "README.md")]
    for base, _, files in os.walk(os.path.join(ROOT, "docs")):
        out += [os.path.join(base, f) for f in files if f.endswith(".md")]
    crates = os.path.join(ROOT, "crates")
    for c in sorted(os.listdir(crates)):
        p = os.path.join(crates, c, "README.md")
        if os.path.exists(p):
            out.append(p)
    return sorted(out)


def anchor(text):
    """GitHub's heading anchor: rendered text, lower case, punctuation dropped, spaces
    to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen = {}
        found = set()
        fence = False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.lstrip().startswith("```"):
                    fence = not fence
                    continue
                m = None if fence else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
                if m:
                    a = anchor(m.group(2))
                    n = seen.get(a, 0)
                    seen[a] = n + 1
                    found.add(a if n == 0 else f"{a}-{n}")
        _anchors[path] = found
    return _anchors[path]


def main():
    problems = []
    for path in docs():
        rel = os.path.relpath(path, ROOT)
        fence = False
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
        for no, line in enumerate(lines, 1):
            if OUTSIDE.search(line):
                problems.append(f"{rel}:{no}: points outside the repository: {line.strip()}")
            if ISSUE.search(line):
                problems.append(f"{rel}:{no}: names an issue number: {line.strip()}")
            if line.lstrip().startswith("```"):
                fence = not fence
                continue
            if fence:
                continue
            for m in LINK.finditer(line):
                target = m.group(2) or m.group(3)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                    continue  # http:, https:, mailto:
                file_part, _, frag = target.partition("#")
                dest = path if not file_part else os.path.normpath(
                    os.path.join(os.path.dirname(path), file_part))
                if not os.path.exists(dest):
                    problems.append(f"{rel}:{no}: no such file: {target}")
                    continue
                if not os.path.realpath(dest).startswith(ROOT + os.sep) and dest != ROOT:
                    problems.append(f"{rel}:{no}: link leaves the repository: {target}")
                    continue
                if frag and dest.endswith(".md") and frag not in anchors(dest):
                    problems.append(f"{rel}:{no}: no heading #{frag} in {os.path.relpath(dest, ROOT)}")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s) in the docs' links")
        return 1
    print(f"doc links: {len(docs())} files checked, every relative link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
