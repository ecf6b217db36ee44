#!/usr/bin/env python3
"""Per-customer COUNT and AVG(amount) over 1, 7 and 30 days, on N generated transactions
(default 1M): spillway.run against the pandas code a fraud team writes.

pandas, two ways (both timed, DataFrame in to DataFrame out):
  handbook   the Fraud Detection Handbook's feature code (chapter "Baseline feature
             transformation"): groupby("customer").apply of a function that, for each
             window, runs rolling(f"{w}d").sum() and .count() over that customer's rows
             and divides (sum / count = AVG);
  rolling    the vectorized form: one df.groupby("customer").rolling(f"{w}D") per window
             (count and mean), results re-aligned to the input rows.
spillway:    one spillway.run with the six metrics, bounds (t-W, t] as pandas has them.

Each side runs in its own child process (this script with --child), so each one's peak
resident memory (ru_maxrss of the child) is its own; the children generate the same
frame from the same seed, time only DataFrame in -> DataFrame out, and save the results,
which the parent checks equal (counts exactly, averages within 1e-9 relative).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd

WINDOWS = (1, 7, 30)


def generate(n, seed=5, customers=5000):
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.integers(0, 30, n))
    cust = rng.zipf(1.3, n) % customers
    amt = np.round(rng.uniform(1, 500, n), 2)
    return pd.DataFrame({"tx_id": np.arange(n), "ts": ts, "customer": cust, "amount": amt})


def handbook(df):
    """The handbook's code, with its column names mapped to ours."""
    tx = df.assign(TX_DATETIME=pd.to_datetime(df["ts"], unit="s"))

    def get_customer_spending_behaviour_features(customer_transactions, windows_size_in_days=WINDOWS):
        # kind="stable" is our one change: the handbook's data has no ties in time, ours
        # does, and an unstable sort would let a later row with the same second into an
        # earlier row's window.
        customer_transactions = customer_transactions.sort_values("TX_DATETIME", kind="stable")
        customer_transactions.index = customer_transactions.TX_DATETIME
        for window_size in windows_size_in_days:
            SUM_AMOUNT_TX_WINDOW = customer_transactions["amount"].rolling(str(window_size) + "d").sum()
            NB_TX_WINDOW = customer_transactions["amount"].rolling(str(window_size) + "d").count()
            AVG_AMOUNT_TX_WINDOW = SUM_AMOUNT_TX_WINDOW / NB_TX_WINDOW
            customer_transactions["n_" + str(window_size) + "d"] = list(NB_TX_WINDOW)
            customer_transactions["avg_" + str(window_size) + "d"] = list(AVG_AMOUNT_TX_WINDOW)
        customer_transactions.index = customer_transactions.tx_id
        return customer_transactions

    out = tx.groupby("customer", group_keys=False).apply(get_customer_spending_behaviour_features)
    # The handbook sorts by TX_DATETIME; ties in time make that order ambiguous, so sort
    # by the transaction id (the index the function set), which is input order here.
    out = out.sort_index().reset_index(drop=True)
    return out


def rolling(df):
    d = df.assign(dt=pd.to_datetime(df["ts"], unit="s"))
    g = d.groupby("customer")
    # The rolling result lists each customer's rows in input order, customers by key.
    order = np.concatenate([idx for _, idx in sorted(g.indices.items())])
    cols = {"tx_id": df["tx_id"].to_numpy()}
    for w in WINDOWS:
        r = g.rolling(f"{w}D", on="dt")["amount"]
        n = np.empty(len(df), dtype=np.int64)
        n[order] = r.count().to_numpy()
        avg = np.empty(len(df))
        avg[order] = r.mean().to_numpy()
        cols[f"n_{w}d"] = n
        cols[f"avg_{w}d"] = avg
    return pd.DataFrame(cols, index=df.index)


def spillway_run(df):
    import spillway

    metrics = ",\n       ".join(
        f"COUNT(*) OVER w{w} AS n_{w}d, AVG(amount) OVER w{w} AS avg_{w}d" for w in WINDOWS
    )
    windows = ",\n       ".join(
        f"w{w} AS (PARTITION BY customer ORDER BY ts RANGE BETWEEN OPEN(INTERVAL '{w}' DAY) PRECEDING AND CURRENT ROW)"
        for w in WINDOWS
    )
    q = f"SELECT tx_id,\n       {metrics}\nFROM tx\nWINDOW {windows}"
    return spillway.run(q, df, time_column="ts", time_unit="s", expected_keys=5000)


SIDES = {"handbook": handbook, "rolling": rolling, "spillway": spillway_run}


def child(side, n, out_path):
    df = generate(n)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    res = SIDES[side](df)
    secs = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    cols = ["tx_id"] + [f"{k}_{w}d" for w in WINDOWS for k in ("n", "avg")]
    np.savez(out_path, **{c: res[c].to_numpy() for c in cols})
    print(json.dumps({"seconds": secs, "peak_rss": peak, "rss_before": base}))


def mib(b):
    return f"{b / 2**20:.0f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--sides", default="handbook,rolling,spillway")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.rows, a.out)
        return
    sides = a.sides.split(",")
    tmp = tempfile.mkdtemp(prefix="spillway-bench-")
    stats, results = {}, {}
    for side in sides:
        path = os.path.join(tmp, side + ".npz")
        r = subprocess.run(
            [sys.executable, __file__, "--child", side, "--rows", str(a.rows), "--out", path],
            capture_output=True, text=True,
        )
        if r.returncode != 0:
            sys.exit(f"{side} failed:\n{r.stderr}")
        stats[side] = json.loads(r.stdout.strip().splitlines()[-1])
        results[side] = np.load(path)
        print(f"{side:9s} {stats[side]['seconds']:8.2f} s   peak RSS {mib(stats[side]['peak_rss'])}"
              f" (after generating the frame: {mib(stats[side]['rss_before'])})", flush=True)
    ref = results[sides[0]]
    for side in sides[1:]:
        got = results[side]
        assert np.array_equal(got["tx_id"], ref["tx_id"]), side
        for w in WINDOWS:
            assert np.array_equal(got[f"n_{w}d"].astype(np.int64), ref[f"n_{w}d"].astype(np.int64)), (side, w)
            np.testing.assert_allclose(got[f"avg_{w}d"], ref[f"avg_{w}d"], rtol=1e-9, atol=0)
    print(f"results equal ({a.rows} rows; counts exact, averages within 1e-9 relative)")
    if "spillway" in stats:
        for side in sides:
            if side != "spillway":
                print(f"spillway vs pandas {side}: {stats[side]['seconds'] / stats['spillway']['seconds']:.1f}x faster end to end")


if __name__ == "__main__":
    main()
