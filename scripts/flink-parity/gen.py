"""Seeded input for scripts/flink-parity.sh: `id,ts,card,merchant,amount`, time-sorted,
with ties (within a card and across cards), events at window boundaries (k*1000 - 1,
k*1000, k*1000 + 1), and a card's next event exactly one session gap (1000 ms) after its
last (sessions that touch merge). Also writes a copy without ties within a card (for
OVER RANGE, whose peer rows Spillway does not model), and headerless copies for Flink.

Usage: python3 gen.py OUTDIR N SEED
"""
import random
import sys

out, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
cards = [f"c{i}" for i in range(5)]
# Times start at 1000: Flink's rowtime OVER functions drop a row at time 0 (their last
# triggering time starts at 0 and a row must be later than it).
t = 1000
last = {}
rows = []
for i in range(n):
    card = rng.choice(cards)
    r = rng.random()
    if r < 0.25:
        pass  # a tie with the previous event
    elif r < 0.55:
        t += rng.randint(1, 60)
    elif r < 0.75:
        t = (t // 1000 + 1) * 1000 + rng.choice([-1, 0, 1])  # a window boundary (>= t)
    elif r < 0.85 and card in last and last[card] + 1000 >= t:
        t = last[card] + 1000  # exactly one session gap after the card's last event
    else:
        t += rng.randint(100, 1500)
    last[card] = t
    amount = rng.randint(1, 50000) / 100
    rows.append((i, t, card, f"m{rng.randint(0, 6)}", amount))

def write(name, rs, header):
    with open(f"{out}/{name}", "w") as f:
        if header:
            f.write("id,ts,card,merchant,amount\n")
        for r in rs:
            f.write(f"{r[0]},{r[1]},{r[2]},{r[3]},{r[4]:.2f}\n")

seen = set()
noties = []
for r in rows:
    if (r[2], r[1]) not in seen:
        seen.add((r[2], r[1]))
        noties.append(r)
write("pay.csv", rows, True)
write("paynt.csv", noties, True)
write("flink-pay.csv", rows, False)
write("flink-paynt.csv", noties, False)
ties = len(rows) - len({(r[1],) for r in rows})
print(f"gen: {len(rows)} events ({ties} tied in time with an earlier one, "
      f"{len(rows) - len(noties)} within a card); {len(noties)} without ties within a card",
      file=sys.stderr)
