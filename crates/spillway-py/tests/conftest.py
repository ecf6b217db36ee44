"""Shared generators for the spillway tests: transactions like the acceptance check's
(zipf customers, non-decreasing integer seconds with ties) and a Python brute force of
the engine's window semantics."""

import math

import numpy as np
import pandas as pd
import pytest


def transactions(n, seed=5, customers=500, max_gap=30):
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.integers(0, max_gap, n))
    cust = rng.zipf(1.3, n) % customers
    amt = np.round(rng.uniform(1, 500, n), 2)
    return pd.DataFrame({"tx_id": np.arange(n), "ts": ts, "customer": cust, "amount": amt})


def brute_force(df, start, start_open, end, end_open, lateness=0, part="customer", val="amount"):
    """Per row: (count, sum, min, max) over the rows of its partition that arrived no
    later than it and lie in [t-start, t-end] (bounds opened as asked); None for rows
    later than the allowed lateness (which the engine sends to the side output)."""
    ts = df["ts"].to_numpy()
    keys = df[part].to_numpy()
    vals = df[val].to_numpy()
    accepted = []
    out = []
    frontier = None
    for i in range(len(df)):
        t = ts[i]
        if frontier is not None and t < frontier - lateness:
            out.append(None)
            continue
        frontier = t if frontier is None else max(frontier, t)
        accepted.append(i)
        lo, hi = t - start, t - end
        inside = [
            vals[j]
            for j in accepted
            if keys[j] == keys[i]
            and (lo < ts[j] if start_open else lo <= ts[j])
            and (ts[j] < hi if end_open else ts[j] <= hi)
        ]
        if inside:
            out.append((len(inside), math.fsum(inside), min(inside), max(inside)))
        else:
            out.append((0, None, None, None))
    return out


@pytest.fixture
def tx():
    return transactions(3000)
