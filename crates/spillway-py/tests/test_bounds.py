"""Every bound option against a Python brute force of the window semantics."""

import numpy as np
import pandas as pd
import pytest

import spillway

from conftest import brute_force, transactions

W, D = 600, 120

CASES = [
    # (frame SQL, start, start_open, end, end_open)
    (f"RANGE BETWEEN {W} PRECEDING AND CURRENT ROW", W, False, 0, False),
    (f"RANGE {W} PRECEDING", W, False, 0, False),
    (f"RANGE BETWEEN OPEN({W}) PRECEDING AND CURRENT ROW", W, True, 0, False),
    (f"RANGE BETWEEN INTERVAL '10' MINUTE PRECEDING AND OPEN(0) PRECEDING", W, False, 0, True),
    (f"RANGE BETWEEN {W + D} PRECEDING AND OPEN({D}) PRECEDING", W + D, False, D, True),
    (f"RANGE BETWEEN {W + D} PRECEDING AND {D} PRECEDING", W + D, False, D, False),
    (f"RANGE BETWEEN OPEN({W + D}) PRECEDING AND OPEN({D}) PRECEDING", W + D, True, D, True),
]


def check(out, exp):
    emitted = [e for e in exp if e is not None]
    assert len(out) == len(emitted)
    n = out["n"].to_numpy()
    for i, e in enumerate(emitted):
        cnt, total, lo, hi = e
        assert n[i] == cnt, (i, n[i], e)
        if cnt == 0:
            assert out["s"].isna().iloc[i] and out["lo"].isna().iloc[i] and out["hi"].isna().iloc[i]
        else:
            assert abs(out["s"].iloc[i] - total) <= 1e-9 * abs(total)
            assert out["lo"].iloc[i] == lo and out["hi"].iloc[i] == hi


def query(frame):
    return f"""SELECT COUNT(*) OVER w AS n, SUM(amount) OVER w AS s,
       MIN(amount) OVER w AS lo, MAX(amount) OVER w AS hi FROM t
WINDOW w AS (PARTITION BY customer ORDER BY ts {frame})"""


@pytest.mark.parametrize("frame,start,start_open,end,end_open", CASES)
def test_bound_matches_brute_force(frame, start, start_open, end, end_open):
    # Gaps up to 200 s with many ties (gap 0) put events exactly on every bound.
    df = transactions(1500, seed=11, customers=6, max_gap=200)
    df["ts"] = (df["ts"] // 60) * 60
    out = spillway.run(query(frame), df, time_unit="s")
    check(out, brute_force(df, start, start_open, end, end_open))
    if end_open or end > 0:
        # Windows that exclude the current row give empty windows (NULL sums) somewhere.
        assert (out["n"] == 0).any()
        assert out["s"].dtype == "Float64"


@pytest.mark.parametrize("lateness", [0, 90, 400])
def test_out_of_order_with_lateness(lateness):
    df = transactions(1200, seed=3, customers=5, max_gap=40)
    rng = np.random.default_rng(1)
    df["ts"] = df["ts"] + rng.integers(-150, 150, len(df))  # out of order
    q = query(f"RANGE BETWEEN OPEN({W}) PRECEDING AND CURRENT ROW")
    out, late = spillway.run(q, df, time_unit="s", allowed_lateness=f"{lateness}s",
                             return_late=True)
    exp = brute_force(df, W, True, 0, False, lateness=lateness)
    check(out, exp)
    assert list(late.index) == [i for i, e in enumerate(exp) if e is None]
    assert list(out.index) == [i for i, e in enumerate(exp) if e is not None]
    if lateness < 400:
        assert len(late) > 0
    pd.testing.assert_frame_equal(late, df.loc[late.index])
    if len(late):
        with pytest.warns(spillway.LateRowsWarning, match=f"{len(late)} rows came later"):
            spillway.run(q, df, time_unit="s", allowed_lateness=lateness)


def test_where_and_filter_and_nulls():
    df = transactions(800, seed=2, customers=4, max_gap=60)
    df["amount"] = df["amount"].astype("object")
    df.loc[df.index % 7 == 0, "amount"] = None
    q = """SELECT tx_id, COUNT(amount) OVER w AS n, COUNT(*) OVER w AS all_n,
       COUNT(*) FILTER (WHERE amount > 250) OVER w AS big FROM t WHERE customer <> 1
WINDOW w AS (PARTITION BY customer ORDER BY ts RANGE BETWEEN 300 PRECEDING AND CURRENT ROW)"""
    out = spillway.run(q, df, time_unit="s")
    kept = df[df["customer"] != 1]
    assert list(out.index) == list(kept.index)
    amounts = pd.to_numeric(df["amount"])
    for i in kept.index[::37]:
        t, c = df.at[i, "ts"], df.at[i, "customer"]
        win = kept.loc[:i][(kept.loc[:i, "customer"] == c) & (kept.loc[:i, "ts"] >= t - 300)]
        assert out.at[i, "all_n"] == len(win)
        assert out.at[i, "n"] == amounts[win.index].notna().sum()
        assert out.at[i, "big"] == (amounts[win.index] > 250).sum()
