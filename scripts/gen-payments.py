#!/usr/bin/env python3
"""Seeded payments CSV for the Kafka benchmark scripts.

    scripts/gen-payments.py N CARDS MERCHANTS PATH

N rows `ts,card[,merchant],amount` (no merchant column when MERCHANTS is 0): time in ms
from 1_700_000_000_000 advancing 0-2 ms per row, uniform cards and merchants, amounts
0.01-1000.00. Seed 42, so every run of a script sees the same events.
"""
import random
import sys

n, cards, merchants, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
r = random.Random(42)
t = 1_700_000_000_000
with open(path, "w") as f:
    f.write("ts,card,merchant,amount\n" if merchants else "ts,card,amount\n")
    for _ in range(n):
        t += r.randint(0, 2)
        card = r.randrange(cards)
        m = f",{r.randrange(merchants)}" if merchants else ""
        f.write(f"{t},{card}{m},{r.randint(1, 100000) / 100}\n")
