#!/usr/bin/env python3
"""The Fraud Detection Handbook's baseline features: its pandas code vs one spillway.run.

Le Borgne, Siblini, Lebichot, Bontempi, "Reproducible Machine Learning for Credit Card
Fraud Detection - Practical Handbook", chapter 3.4 "Baseline feature transformation"
(https://fraud-detection-handbook.github.io/fraud-detection-handbook/Chapter_3_GettingStarted/BaselineFeatureTransformation.html).
The features, at every transaction:

- per customer, over the last 1, 7 and 30 days, the transaction itself included
  (pandas' ``rolling("Wd")``, the window ``(t - W, t]``): the number of transactions
  (CUSTOMER_ID_NB_TX_<W>DAY_WINDOW) and their average amount
  (CUSTOMER_ID_AVG_AMOUNT_<W>DAY_WINDOW);
- per terminal, with the handbook's 7-day delay (fraud labels are known a week late),
  over ``(t - 7d - W, t - 7d]`` for W = 1, 7, 30 days: the number of transactions
  (TERMINAL_ID_NB_TX_<W>DAY_WINDOW) and the risk, frauds / transactions
  (TERMINAL_ID_RISK_<W>DAY_WINDOW; 0 where the window is empty, as the handbook's
  ``fillna(0)`` makes it).

Three parts:

1. ``generate``: a seeded simulator in the shape of the handbook's (chapter 3.2,
   "Transaction data simulator"), vectorized with numpy; see its docstring for what
   was kept and what changed.
2. ``handbook``: chapter 3.4's code as the book writes it (``groupby(...).apply`` of
   per-group functions doing time-based ``rolling``), with the changes listed in its
   docstring (needed by pandas 3 and by ties in time).
3. ``spillway_features``: the same twelve features from ONE ``spillway.run`` query.

Both are timed DataFrame in -> DataFrame out (the transactions with the twelve feature
columns), each once, after a warm-up of both on a small input, in this one process. The
script then checks the results equal (counts exactly; averages and risks within 1e-9
relative) and prints the ratio.

    python crates/spillway-py/bench/fraud_features.py --rows 1000000
"""

import argparse
import datetime
import platform
import sys
import time
import warnings

import numpy as np
import pandas as pd

import spillway

WINDOWS = (1, 7, 30)
DELAY = 7
START = "2018-04-01"  # the handbook's start date


# ---------------------------------------------------------------------------------------
# 1. Data


def generate(rows=1_000_000, days=180, seed=0, customers=None, terminals=None, retry_rate=0.005,
             recurring_rate=0.005):
    """About ``rows`` transactions over ``days`` days, after the handbook's simulator
    (chapter 3.2), vectorized:

    - customers (default 5,000 per 1M rows) at a location uniform in [0, 100]^2, with
      a mean amount uniform in [5, 100], std = mean / 2, and a mean number of
      transactions per day uniform in [0, 2m] (the book: [0, 4]; m is chosen so that
      the expected total is ``rows``);
    - terminals (default 2 per customer) uniform in [0, 100]^2; a customer uses the
      terminals within radius r of it (the book: r = 5 for 10,000 terminals; r is
      scaled to keep ~78 terminals per customer for other sizes), uniformly;
    - per customer and day, Poisson(mean) transactions at second
      int(normal(43200, 20000)) of the day (kept if within the day), amounts
      normal(mean, std) (a negative one redrawn uniform in [0, 2 mean]), rounded to
      cents;
    - our addition: a share ``retry_rate`` of transactions is repeated at the same
      second by the same customer at the same terminal (a retried payment), so the
      data has ties in time within customers and terminals (the book's data has
      almost none); the features' tie semantics are checked on them;
    - our addition: a share ``recurring_rate`` of transactions recurs exactly 1, 7, 8,
      14, 30 or 37 days later (same second, customer, terminal and amount: a
      subscription), so some rows have a row of their customer or terminal exactly on
      a window's bound (t - 1d, t - 7d, t - 30d; t - 7d, t - 8d, t - 14d, t - 37d); the
      bounds' open/closed sides are checked on them;
    - frauds, the book's three scenarios: (1) an amount above 220 is a fraud; (2) every
      day, terminals are compromised (the book: 2 a day of 10,000; scaled) and all their
      transactions in the next 28 days are frauds; (3) every day, customers are
      compromised (the book: 3 a day of 5,000; scaled) and in the next 14 days a third
      of their transactions (here: each with probability 1/3) are frauds with 5 times
      the amount;
    - sorted by time (stable, so ties keep generation order), TRANSACTION_ID =
      position, TX_DATETIME from 2018-04-01.
    """
    rng = np.random.default_rng(seed)
    n_cust = customers or max(1, round(5000 * rows / 1_000_000))
    n_term = terminals or 2 * n_cust
    radius = 5.0 * np.sqrt(10_000 / n_term)
    kept = 0.969  # P(|normal(0, 20000)| < 43200): the share of drawn times within the day
    rate_max = 2 * rows / (n_cust * days * kept * (1 + retry_rate + recurring_rate))

    cxy = rng.uniform(0, 100, (n_cust, 2))
    mean_amt = rng.uniform(5, 100, n_cust)
    std_amt = mean_amt / 2
    mean_tx = rng.uniform(0, rate_max, n_cust)
    txy = rng.uniform(0, 100, (n_term, 2))

    # Terminals within the radius, per customer (padded lists).
    avail = []
    for c in range(n_cust):
        d2 = ((txy - cxy[c]) ** 2).sum(axis=1)
        avail.append(np.flatnonzero(d2 < radius * radius))
    n_avail = np.array([len(a) for a in avail])
    pad = np.zeros((n_cust, max(1, n_avail.max())), dtype=np.int64)
    for c, a in enumerate(avail):
        pad[c, : len(a)] = a

    # Transactions per (customer, day); customers without a terminal make none.
    counts = rng.poisson(np.repeat(mean_tx, days)).reshape(n_cust, days)
    counts[n_avail == 0] = 0
    counts = counts.ravel()
    cust = np.repeat(np.repeat(np.arange(n_cust), days), counts)
    day = np.repeat(np.tile(np.arange(days), n_cust), counts)
    secs = rng.normal(86400 / 2, 20000, len(cust)).astype(np.int64)
    keep = (secs > 0) & (secs < 86400)
    cust, day, secs = cust[keep], day[keep], secs[keep]
    n = len(cust)
    amt = rng.normal(mean_amt[cust], std_amt[cust])
    neg = amt < 0
    amt[neg] = rng.uniform(0, mean_amt[cust[neg]] * 2)
    amt = np.round(amt, 2)
    term = pad[cust, (rng.random(n) * n_avail[cust]).astype(np.int64)]

    # Retries: the same customer, terminal and second, a new amount draw.
    r = np.flatnonzero(rng.random(n) < retry_rate)
    cust = np.concatenate([cust, cust[r]])
    day = np.concatenate([day, day[r]])
    secs = np.concatenate([secs, secs[r]])
    term = np.concatenate([term, term[r]])
    ramt = np.abs(np.round(rng.normal(mean_amt[cust[n:]], std_amt[cust[n:]]), 2))
    amt = np.concatenate([amt, ramt])
    # Recurring payments: an exact number of days later, within the simulated days.
    r = np.flatnonzero(rng.random(n) < recurring_rate)
    later = day[r] + rng.choice(np.array([1, 7, 8, 14, 30, 37]), len(r))
    r, later = r[later < days], later[later < days]
    cust = np.concatenate([cust, cust[r]])
    day = np.concatenate([day, later])
    secs = np.concatenate([secs, secs[r]])
    term = np.concatenate([term, term[r]])
    amt = np.concatenate([amt, amt[r]])
    t = day * 86400 + secs
    # Retries go right after their original (stable sort on time, originals first).
    order = np.argsort(t, kind="stable")
    cust, day, t, term, amt = cust[order], day[order], t[order], term[order], amt[order]
    n = len(cust)

    # Frauds: the handbook's scenarios 1-3.
    fraud = np.zeros(n, dtype=np.int64)
    scenario = np.zeros(n, dtype=np.int64)
    s1 = amt > 220
    fraud[s1], scenario[s1] = 1, 1
    comp_t = np.zeros((n_term, days + 28), dtype=bool)
    comp_c = np.zeros((n_cust, days + 14), dtype=bool)
    for d in range(days):
        for k in rng.choice(n_term, rng.poisson(2 * n_term / 10_000), replace=False):
            comp_t[k, d : d + 28] = True
        for k in rng.choice(n_cust, rng.poisson(3 * n_cust / 5_000), replace=False):
            comp_c[k, d : d + 14] = True
    s2 = comp_t[term, day] & (fraud == 0)
    fraud[s2], scenario[s2] = 1, 2
    s3 = comp_c[cust, day] & (rng.random(n) < 1 / 3) & (fraud == 0)
    amt[s3] = np.round(amt[s3] * 5, 2)
    fraud[s3], scenario[s3] = 1, 3

    return pd.DataFrame(
        {
            "TRANSACTION_ID": np.arange(n, dtype=np.int64),
            "TX_DATETIME": pd.Timestamp(START) + pd.to_timedelta(t, unit="s"),
            "CUSTOMER_ID": cust,
            "TERMINAL_ID": term,
            "TX_AMOUNT": amt,
            "TX_TIME_SECONDS": t,
            "TX_TIME_DAYS": day,
            "TX_FRAUD": fraud,
            "TX_FRAUD_SCENARIO": scenario,
        }
    )


# ---------------------------------------------------------------------------------------
# 2. The handbook's pandas code (chapter 3.4, "Baseline feature transformation")


def get_customer_spending_behaviour_features(customer_transactions, windows_size_in_days=[1, 7, 30]):
    # Let us first order transactions chronologically
    # (kind="stable": see `handbook`'s docstring)
    customer_transactions = customer_transactions.sort_values("TX_DATETIME", kind="stable")

    # The transaction date and time is set as the index, which will allow the use of the rolling function
    customer_transactions.index = customer_transactions.TX_DATETIME

    # For each window size
    for window_size in windows_size_in_days:
        # Compute the sum of the transaction amounts and the number of transactions for the given window size
        SUM_AMOUNT_TX_WINDOW = customer_transactions["TX_AMOUNT"].rolling(str(window_size) + "d").sum()
        NB_TX_WINDOW = customer_transactions["TX_AMOUNT"].rolling(str(window_size) + "d").count()

        # Compute the average transaction amount for the given window size
        # NB_TX_WINDOW is always >0 since current transaction is always included
        AVG_AMOUNT_TX_WINDOW = SUM_AMOUNT_TX_WINDOW / NB_TX_WINDOW

        # Save feature values
        customer_transactions["CUSTOMER_ID_NB_TX_" + str(window_size) + "DAY_WINDOW"] = list(NB_TX_WINDOW)
        customer_transactions["CUSTOMER_ID_AVG_AMOUNT_" + str(window_size) + "DAY_WINDOW"] = list(AVG_AMOUNT_TX_WINDOW)

    # Reindex according to transaction IDs
    customer_transactions.index = customer_transactions.TRANSACTION_ID

    # And return the dataframe with the new features
    return customer_transactions


def get_count_risk_rolling_window(terminal_transactions, delay_period=7, windows_size_in_days=[1, 7, 30], feature="TERMINAL_ID"):
    terminal_transactions = terminal_transactions.sort_values("TX_DATETIME", kind="stable")

    terminal_transactions.index = terminal_transactions.TX_DATETIME

    NB_FRAUD_DELAY = terminal_transactions["TX_FRAUD"].rolling(str(delay_period) + "d").sum()
    NB_TX_DELAY = terminal_transactions["TX_FRAUD"].rolling(str(delay_period) + "d").count()

    for window_size in windows_size_in_days:
        NB_FRAUD_DELAY_WINDOW = terminal_transactions["TX_FRAUD"].rolling(str(delay_period + window_size) + "d").sum()
        NB_TX_DELAY_WINDOW = terminal_transactions["TX_FRAUD"].rolling(str(delay_period + window_size) + "d").count()

        NB_FRAUD_WINDOW = NB_FRAUD_DELAY_WINDOW - NB_FRAUD_DELAY
        NB_TX_WINDOW = NB_TX_DELAY_WINDOW - NB_TX_DELAY

        RISK_WINDOW = NB_FRAUD_WINDOW / NB_TX_WINDOW

        terminal_transactions[feature + "_NB_TX_" + str(window_size) + "DAY_WINDOW"] = list(NB_TX_WINDOW)
        terminal_transactions[feature + "_RISK_" + str(window_size) + "DAY_WINDOW"] = list(RISK_WINDOW)

    terminal_transactions.index = terminal_transactions.TRANSACTION_ID

    # Replace NA values with 0 (all undefined risk scores where NB_TX_WINDOW is 0)
    terminal_transactions.fillna(0, inplace=True)

    return terminal_transactions


def handbook(transactions_df):
    """Chapter 3.4's two steps, as the book runs them on its transactions frame.

    Changes, all forced (the functions above are otherwise the book's, comments
    included):
    - ``sort_values("TX_DATETIME", kind="stable")`` in both functions (the book:
      default quicksort). Our data has ties in time within a customer or terminal;
      an unstable sort may put a later row of the same second first, and time-based
      rolling counts rows up to the current *position*, so the book's result would
      depend on the sort's whim. With a stable sort, ties stay in TRANSACTION_ID order.
    - The final ``sort_values("TX_DATETIME")`` after each step is kept (the book's),
      with ``kind="stable"`` for the same reason; after it the rows are in (time,
      customer) / (time, terminal) order, which for tied times is not TRANSACTION_ID
      order, so ``main`` compares the results by TRANSACTION_ID.
    - pandas 3 no longer passes the grouping column to ``apply``'s function and leaves
      it out of the result (``include_groups`` is gone); the book's ``reset_index(drop=
      True)`` then drops it. So CUSTOMER_ID / TERMINAL_ID are taken back from the
      group-key index level before the reset (one ``reset_index(level=0)``).
    - ``pandas`` 3 warns that ``"1d"`` is deprecated for ``"1D"``; the book's strings
      are kept and the warning is silenced in ``main``.
    """
    t0 = time.perf_counter()
    transactions_df = transactions_df.groupby("CUSTOMER_ID").apply(
        lambda x: get_customer_spending_behaviour_features(x, windows_size_in_days=[1, 7, 30])
    )
    transactions_df = transactions_df.reset_index(level=0)
    transactions_df = transactions_df.sort_values("TX_DATETIME", kind="stable").reset_index(drop=True)
    STEPS["customer"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    transactions_df = transactions_df.groupby("TERMINAL_ID").apply(
        lambda x: get_count_risk_rolling_window(x, delay_period=7, windows_size_in_days=[1, 7, 30], feature="TERMINAL_ID")
    )
    transactions_df = transactions_df.reset_index(level=0)
    transactions_df = transactions_df.sort_values("TX_DATETIME", kind="stable").reset_index(drop=True)
    STEPS["terminal"] = time.perf_counter() - t0
    return transactions_df


STEPS = {}  # the last handbook run's seconds per step


# ---------------------------------------------------------------------------------------
# 3. One spillway.run query


def feature_query(windows=WINDOWS, delay=DELAY):
    """The twelve features as one query. Bounds, exactly pandas':

    - customer, ``rolling("Wd")`` is ``(t - W, t]``:
      ``RANGE BETWEEN OPEN(INTERVAL 'W' DAY) PRECEDING AND CURRENT ROW``;
    - terminal, (rolling over D+W) - (rolling over D) counts ``(t - D - W, t - D]``:
      ``RANGE BETWEEN OPEN(INTERVAL 'D+W' DAY) PRECEDING AND INTERVAL 'D' DAY PRECEDING``
      (an ``OPEN`` start, a closed end).

    The risk is ``AVG(TX_FRAUD)``: the mean of a 0/1 column is frauds / transactions
    (the engine does not take scalar expressions such as ``SUM(..) OVER w / COUNT(*)
    OVER w`` as SELECT items). An empty window gives COUNT 0 and AVG NULL; the
    handbook's ``fillna(0)`` is applied to the result.
    """
    items, wins = ["TRANSACTION_ID"], []
    for w in windows:
        items += [
            f"COUNT(*) OVER c{w} AS CUSTOMER_ID_NB_TX_{w}DAY_WINDOW",
            f"AVG(TX_AMOUNT) OVER c{w} AS CUSTOMER_ID_AVG_AMOUNT_{w}DAY_WINDOW",
        ]
        wins.append(
            f"c{w} AS (PARTITION BY CUSTOMER_ID ORDER BY TX_DATETIME\n"
            f"             RANGE BETWEEN OPEN(INTERVAL '{w}' DAY) PRECEDING AND CURRENT ROW)"
        )
    for w in windows:
        items += [
            f"COUNT(*) OVER t{w} AS TERMINAL_ID_NB_TX_{w}DAY_WINDOW",
            f"AVG(TX_FRAUD) OVER t{w} AS TERMINAL_ID_RISK_{w}DAY_WINDOW",
        ]
        wins.append(
            f"t{w} AS (PARTITION BY TERMINAL_ID ORDER BY TX_DATETIME\n"
            f"             RANGE BETWEEN OPEN(INTERVAL '{delay + w}' DAY) PRECEDING"
            f" AND INTERVAL '{delay}' DAY PRECEDING)"
        )
    return (
        "SELECT " + ",\n       ".join(items) + "\nFROM transactions\nWINDOW " + ",\n       ".join(wins)
    )


QUERY = feature_query()
RISKS = [f"TERMINAL_ID_RISK_{w}DAY_WINDOW" for w in WINDOWS]


def spillway_features(transactions_df, store="hashlog"):
    """The transactions with the twelve feature columns, from one spillway.run."""
    f = spillway.run(
        QUERY, transactions_df, time_column="TX_DATETIME", time_unit="s", store=store,
        expected_keys=transactions_df["CUSTOMER_ID"].nunique() + transactions_df["TERMINAL_ID"].nunique(),
    )
    # Empty delayed windows: AVG is NULL (a Float64 column with <NA>); the handbook's 0.
    for c in RISKS:
        f[c] = f[c].to_numpy(dtype=np.float64, na_value=0.0)
    return pd.concat([transactions_df, f.drop(columns="TRANSACTION_ID")], axis=1)


# ---------------------------------------------------------------------------------------
# Comparison and timing


def features():
    cols = []
    for w in WINDOWS:
        cols += [f"CUSTOMER_ID_NB_TX_{w}DAY_WINDOW", f"CUSTOMER_ID_AVG_AMOUNT_{w}DAY_WINDOW"]
    for w in WINDOWS:
        cols += [f"TERMINAL_ID_NB_TX_{w}DAY_WINDOW", f"TERMINAL_ID_RISK_{w}DAY_WINDOW"]
    return cols


def compare(hb, sw):
    """Raises AssertionError unless equal: rows matched by TRANSACTION_ID, counts
    exactly, averages and risks within 1e-9 relative, NaN where the other has NaN."""
    hb = hb.set_index("TRANSACTION_ID").sort_index()
    sw = sw.set_index("TRANSACTION_ID").sort_index()
    assert hb.index.equals(sw.index), "different transactions"
    for c in ["CUSTOMER_ID", "TERMINAL_ID", "TX_AMOUNT", "TX_FRAUD"]:
        assert np.array_equal(hb[c].to_numpy(), sw[c].to_numpy()), c
    for c in features():
        a = hb[c].to_numpy(dtype=np.float64)
        b = sw[c].to_numpy(dtype=np.float64, na_value=np.nan)
        assert np.array_equal(np.isnan(a), np.isnan(b)), f"{c}: NaN in different rows"
        if "_NB_TX_" in c:
            assert np.array_equal(a, np.round(a)), c
            bad = np.flatnonzero(a != b)
            assert len(bad) == 0, f"{c}: {len(bad)} rows differ, first TRANSACTION_ID {hb.index[bad[0]]}: {a[bad[0]]} vs {b[bad[0]]}"
        else:
            ok = ~np.isnan(a)
            np.testing.assert_allclose(b[ok], a[ok], rtol=1e-9, atol=0, err_msg=c)


def ties(df):
    """Rows sharing their second with an earlier row of the same customer / terminal."""
    out = {}
    for k in ("CUSTOMER_ID", "TERMINAL_ID"):
        out[k] = int(df.duplicated([k, "TX_DATETIME"]).sum())
    return out


def on_bounds(df):
    """Rows with a row of the same customer (terminal) exactly on one of their windows'
    bounds: the rows where an open/closed mix-up would change a feature."""
    t = (df["TX_DATETIME"] - pd.Timestamp(START)).dt.total_seconds().to_numpy().astype(np.int64)
    out = {}
    for k, offsets in (("CUSTOMER_ID", (1, 7, 30)), ("TERMINAL_ID", (7, 8, 14, 37))):
        code = df[k].to_numpy().astype(np.int64) * (1 << 32) + t
        hit = np.zeros(len(df), dtype=bool)
        for d in offsets:
            hit |= np.isin(code - d * 86400, code)
        out[k] = int(hit.sum())
    return out


def pandas_tie_check():
    """pandas' time-based rolling on a sorted index with equal times counts up to the
    current position (1, 2, 3), as Spillway's per-event default does."""
    s = pd.Series([1.0, 2.0, 3.0], index=pd.to_datetime([0, 0, 0], unit="s"))
    got = s.rolling("1D").count().tolist()
    assert got == [1.0, 2.0, 3.0], got
    df = pd.DataFrame({"ts": [0, 0, 0], "k": [1, 1, 1], "x": [1.0, 2.0, 3.0]})
    q = ("SELECT COUNT(*) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN OPEN(INTERVAL '1' DAY) "
         "PRECEDING AND CURRENT ROW) AS n FROM t")
    got2 = spillway.run(q, df, time_unit="s")["n"].tolist()
    assert got2 == [1, 2, 3], got2
    return got, got2


def timed(f, df):
    t0 = time.perf_counter()
    out = f(df)
    return out, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="about this many transactions (default 1M)")
    ap.add_argument("--days", type=int, default=180)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--query", action="store_true", help="print the query and exit")
    ap.add_argument("--store", default="hashlog", choices=("hashlog", "mem"),
                    help="spillway.run's state store (default hashlog, the package's default)")
    ap.add_argument("--profile", action="store_true",
                    help="after the comparison, cProfile spillway_features once more (top 15 by own time)")
    a = ap.parse_args()
    if a.query:
        print(QUERY)
        return
    warnings.filterwarnings("ignore", message=".*'d' is deprecated.*")

    print(f"python {platform.python_version()}, pandas {pd.__version__}, numpy {np.__version__}, "
          f"spillway {spillway.__version__}")
    pd_counts, sw_counts = pandas_tie_check()
    print(f"ties (3 rows of one key in one second): pandas rolling('1D').count() {pd_counts}, "
          f"spillway COUNT(*) {sw_counts}")

    # Warm-up: both sides on a small input (imports, code paths, allocator).
    small = generate(rows=20_000, days=40, seed=a.seed + 1)
    compare(handbook(small), spillway_features(small, a.store))

    t0 = time.perf_counter()
    df = generate(rows=a.rows, days=a.days, seed=a.seed)
    gen = time.perf_counter() - t0
    n = len(df)
    print(f"generated {n:,} transactions in {gen:.1f} s: {df.CUSTOMER_ID.nunique():,} customers, "
          f"{df.TERMINAL_ID.nunique():,} terminals, {a.days} days, fraud rate {df.TX_FRAUD.mean():.2%}, "
          f"rows tied in time with an earlier row of their key {ties(df)}, rows with a row of their key "
          f"exactly on a window bound {on_bounds(df)}", flush=True)

    sw, t_sw = timed(lambda d: spillway_features(d, a.store), df)
    print(f"spillway.run  {t_sw:8.2f} s  (store {a.store})  {n / t_sw:12,.0f} rows/s", flush=True)
    hb, t_hb = timed(handbook, df)
    print(f"pandas (book) {t_hb:8.2f} s  {n / t_hb:12,.0f} rows/s  (customer step {STEPS['customer']:.2f} s, "
          f"terminal step {STEPS['terminal']:.2f} s)", flush=True)

    compare(hb, sw)
    print(f"results equal: {n:,} rows x {len(features())} features (counts exact, averages and risks "
          "within 1e-9 relative, empty-window risks 0 on both sides)")
    print(f"spillway.run is {t_hb / t_sw:.1f}x faster than the handbook's pandas code")

    if a.profile:
        import cProfile
        import pstats

        pr = cProfile.Profile()
        pr.enable()
        spillway_features(df, a.store)
        pr.disable()
        pstats.Stats(pr, stream=sys.stdout).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
