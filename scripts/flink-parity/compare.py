"""Compares Spillway's and Flink's result CSVs row for row (scripts/flink-parity.sh).

Normalisation: header lines dropped; fields that parse as numbers compared as numbers
(Spillway prints 3 where Flink prints 3.0), equal within 1e-9 relative (sums and averages
of doubles may differ in their last bits by summation order, e.g. Flink's HOP adds up
slices); timestamps are epoch ms on both sides; rows sorted (numbers numerically).

Usage: python3 compare.py NAME SPILLWAY.csv FLINK.csv [expected-diff]
Exits 1 when the rows differ, unless `expected-diff` (then it only reports).
"""
import math
import sys


def field(x):
    try:
        return (0, float(x), "")
    except ValueError:
        return (1, 0.0, x)


def rows(path):
    with open(path) as f:
        lines = f.read().splitlines()[1:]
    return sorted(tuple(field(x) for x in line.split(",")) for line in lines)


def same(a, b):
    return len(a) == len(b) and all(
        x[0] == y[0] and x[2] == y[2] and math.isclose(x[1], y[1], rel_tol=1e-9, abs_tol=1e-9)
        for x, y in zip(a, b)
    )


def text(r):
    return ",".join(x[2] if x[0] else f"{x[1]:g}" for x in r)


name, sp, fl = sys.argv[1], rows(sys.argv[2]), rows(sys.argv[3])
expected = len(sys.argv) > 4
bad = [(a, b) for a, b in zip(sp, fl) if not same(a, b)]
ok = len(sp) == len(fl) and not bad
status = "MATCH" if ok else ("DIFFERS (expected)" if expected else "DIFFERS")
print(f"{name:<12} spillway {len(sp):>6} rows, flink {len(fl):>6} rows: {status}"
      + ("" if ok else f"; {len(bad)} rows differ once sorted (the first shown)"))
for a, b in bad[:3]:
    print(f"    spillway: {text(a)}\n    flink:    {text(b)}")
sys.exit(0 if ok or expected else 1)
