"""spillway.run against pandas' groupby().rolling() on generated transactions: the
bounds pandas has, (t-W, t], written OPEN(W) PRECEDING AND CURRENT ROW."""

import numpy as np
import pandas as pd
import pytest

import spillway

from conftest import transactions


def pandas_rolling(df, window):
    """groupby("customer").rolling(window) count/sum/mean/max, back in input row order
    (the rolling result lists each group's rows in input order, groups by key)."""
    d = df.assign(dt=pd.to_datetime(df["ts"], unit="s"))
    g = d.groupby("customer")
    order = np.concatenate([idx for _, idx in sorted(g.indices.items())])
    r = g.rolling(window, on="dt")["amount"]
    res = {}
    for name, s in [("n", r.count()), ("s", r.sum()), ("a", r.mean()), ("m", r.max())]:
        v = np.empty(len(df))
        v[order] = s.to_numpy()
        res[name] = v
    return pd.DataFrame(res, index=df.index)


QUERY = """SELECT tx_id, COUNT(*) OVER w AS n, SUM(amount) OVER w AS s,
       AVG(amount) OVER w AS a, MAX(amount) OVER w AS m
FROM tx
WINDOW w AS (PARTITION BY customer ORDER BY ts
             RANGE BETWEEN OPEN(INTERVAL '{days}' DAY) PRECEDING AND CURRENT ROW)"""


@pytest.mark.parametrize("days", [1, 7, 30])
def test_equals_pandas_groupby_rolling(days):
    df = transactions(20_000, seed=days, customers=300, max_gap=600)
    out = spillway.run(QUERY.format(days=days), df, time_column="ts", time_unit="s")
    exp = pandas_rolling(df, f"{days}D")
    assert len(out) == len(df)
    assert list(out.columns) == ["tx_id", "n", "s", "a", "m"]
    assert out["n"].dtype == np.int64 and out["tx_id"].dtype == np.int64
    assert out["s"].dtype == np.float64
    np.testing.assert_array_equal(out["tx_id"].to_numpy(), df["tx_id"].to_numpy())
    np.testing.assert_array_equal(out["n"].to_numpy(), exp["n"].to_numpy().astype(np.int64))
    np.testing.assert_allclose(out["s"].to_numpy(), exp["s"].to_numpy(), rtol=1e-9, atol=0)
    np.testing.assert_allclose(out["a"].to_numpy(), exp["a"].to_numpy(), rtol=1e-9, atol=0)
    np.testing.assert_array_equal(out["m"].to_numpy(), exp["m"].to_numpy())
    # Windows of this size hold more than one row somewhere: the check is not vacuous.
    assert out["n"].max() > 3


def test_acceptance_query_shape():
    """The acceptance check's query and data, smaller."""
    rng = np.random.default_rng(5)
    n = 30_000
    ts = np.cumsum(rng.integers(0, 30, n))
    cust = rng.zipf(1.3, n) % 5000
    amt = np.round(rng.uniform(1, 500, n), 2)
    df = pd.DataFrame({"tx_id": np.arange(n), "ts": ts, "customer": cust, "amount": amt})
    q = """SELECT tx_id, COUNT(*) OVER w AS n7, SUM(amount) OVER w AS s7 FROM tx
WINDOW w AS (PARTITION BY customer ORDER BY ts RANGE BETWEEN OPEN(INTERVAL '7' DAY) PRECEDING AND CURRENT ROW)"""
    out = spillway.run(q, df, time_column="ts", time_unit="s")
    exp = pandas_rolling(df, "7D")
    assert out.shape == (n, 3)
    np.testing.assert_array_equal(out["n7"].to_numpy(), exp["n"].to_numpy().astype(np.int64))
    np.testing.assert_allclose(out["s7"].to_numpy(), exp["s"].to_numpy(), rtol=1e-9, atol=0)


def test_datetime_time_column_and_index_labels():
    df = transactions(2000, customers=50, max_gap=3000)
    df2 = df.assign(ts=pd.to_datetime(df["ts"], unit="s"))
    df2.index = df2.index * 10 + 3
    q = QUERY.format(days=1)
    a = spillway.run(q, df, time_unit="s")
    b = spillway.run(q.replace("SELECT tx_id,", "SELECT tx_id, ts,"), df2, time_unit="ms")
    assert list(b.index) == list(df2.index)
    assert b["ts"].dtype.kind == "M"
    assert (b["ts"].to_numpy() == df2["ts"].to_numpy()).all()
    np.testing.assert_array_equal(a["n"].to_numpy(), b["n"].to_numpy())


def test_time_unit_defaults_to_ms_as_on_the_command_line():
    """`spillway run --time-unit` defaults to ms; so do run, Stream and explain (the same
    millisecond data gave 5x smaller counts in Python, silently)."""
    df = transactions(3000, seed=3, customers=20, max_gap=2000)  # times in ms
    q = """SELECT tx_id, COUNT(*) OVER w AS n FROM tx
WINDOW w AS (PARTITION BY customer ORDER BY ts
             RANGE BETWEEN INTERVAL '5' SECOND PRECEDING AND CURRENT ROW)"""
    ms = spillway.run(q, df, time_unit="ms")
    pd.testing.assert_frame_equal(spillway.run(q, df), ms)
    assert not ms["n"].equals(spillway.run(q, df, time_unit="s")["n"])
    s = spillway.Stream(q)
    pd.testing.assert_frame_equal(s.push(df), ms)
    assert spillway.explain(q) == spillway.explain(q, time_unit="ms")
