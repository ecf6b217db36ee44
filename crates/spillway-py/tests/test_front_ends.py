"""Every query kind in Python gives what `spillway run` gives on the same input: window
table functions (TUMBLE, HOP, CUMULATE, SESSION), ROWS frames, UNBOUNDED and OVER RANGE,
through `run` on a DataFrame, `Stream` in batches, and `Stream` resumed from a checkpoint
by the documented recipe (a reopened stream knows `resumed` and `events` before any push,
with or without `schema=`). The command-line binary is `$SPILLWAY_BIN`
(scripts/test-python.sh builds it)."""

import os
import subprocess

import numpy as np
import pandas as pd
import pytest

import spillway

from conftest import transactions

QUERIES = {
    "tumble": """SELECT customer, window_start, window_end, COUNT(*) AS n, SUM(amount) AS s
        FROM TABLE(TUMBLE(TABLE tx, DESCRIPTOR(ts), INTERVAL '10' MINUTE))
        GROUP BY customer, window_start, window_end""",
    "hop": """SELECT customer, window_start, window_end, MAX(amount) AS hi, AVG(amount) AS a
        FROM TABLE(HOP(TABLE tx, DESCRIPTOR(ts), INTERVAL '5' MINUTE, INTERVAL '15' MINUTE))
        GROUP BY customer, window_start, window_end""",
    "cumulate": """SELECT customer, window_start, window_end, COUNT(*) AS n
        FROM TABLE(CUMULATE(TABLE tx, DESCRIPTOR(ts), INTERVAL '5' MINUTE, INTERVAL '20' MINUTE))
        GROUP BY customer, window_start, window_end""",
    "session": """SELECT customer, window_start, window_end, COUNT(*) AS n, SUM(amount) AS s
        FROM TABLE(SESSION(TABLE tx PARTITION BY customer, DESCRIPTOR(ts), INTERVAL '2' MINUTE))
        GROUP BY customer, window_start, window_end""",
    "rows": """SELECT tx_id, SUM(amount) OVER (PARTITION BY customer ORDER BY ts
        ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) AS s4 FROM tx""",
    "unbounded": """SELECT tx_id, COUNT(*) OVER (PARTITION BY customer ORDER BY ts
        RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS n FROM tx""",
    "range": """SELECT tx_id, COUNT(*) OVER w AS n, SUM(amount) OVER w AS s FROM tx
        WINDOW w AS (PARTITION BY customer ORDER BY ts RANGE BETWEEN INTERVAL '1' HOUR
        PRECEDING AND CURRENT ROW)""",
}


def spillway_bin():
    path = os.environ.get("SPILLWAY_BIN")
    assert path and os.access(path, os.X_OK), (
        "set SPILLWAY_BIN to the spillway binary (scripts/test-python.sh builds it)"
    )
    return path


def cli_run(sql, df, tmp_path):
    """`spillway run` over `df` written as CSV, read back as a DataFrame."""
    src = tmp_path / "tx.csv"
    out = tmp_path / "out.csv"
    df.to_csv(src, index=False)
    subprocess.run(
        [spillway_bin(), "run", "--query", sql, "--input", str(src), "--output", str(out),
         "--time-unit", "s", "-q"],
        check=True,
        capture_output=True,
    )
    return pd.read_csv(out)


def same(got, want):
    """Equal values, columns and order; the index and the int/nullable dtypes aside."""
    got = got.reset_index(drop=True)
    assert list(got.columns) == list(want.columns)
    assert len(got) == len(want)
    for c in want.columns:
        g = got[c].astype("float64").to_numpy()
        w = want[c].astype("float64").to_numpy()
        np.testing.assert_array_equal(g, w, err_msg=c)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_run_and_stream_equal_the_command_line(name, tmp_path):
    sql = QUERIES[name]
    df = transactions(3000, seed=11, customers=30)
    want = cli_run(sql, df, tmp_path)
    assert len(want) > 20
    same(spillway.run(sql, df, time_unit="s"), want)
    # In batches; a windowed query's open windows come with finish().
    s = spillway.Stream(sql, time_unit="s")
    parts = [s.push(df.iloc[i : i + 250]) for i in range(0, len(df), 250)]
    parts.append(s.finish())
    same(pd.concat(parts), want)


@pytest.mark.parametrize("name", ["tumble", "session", "range"])
@pytest.mark.parametrize("with_schema", [True, False])
def test_the_documented_resume_recipe(name, with_schema, tmp_path):
    sql = QUERIES[name]
    df = transactions(3000, seed=12, customers=30)
    want = cli_run(sql, df, tmp_path)
    schema = {"tx_id": "int", "ts": "int", "customer": "int", "amount": "float"}
    d = tmp_path / "ckpt"
    s = spillway.Stream(sql, schema=schema, time_unit="s", checkpoint_dir=d)
    assert not s.resumed and s.events == 0
    got = [s.push(df.iloc[:1700])]
    s.checkpoint()
    s.push(df.iloc[1700:2000])  # after the checkpoint: lost with the stream
    s.close()
    s = spillway.Stream(
        sql, schema=schema if with_schema else None, time_unit="s", checkpoint_dir=d
    )
    # Known at construction, before any push.
    assert s.resumed and s.events == 1700
    got.append(s.push(df.iloc[s.events :]))
    got.append(s.finish())
    same(pd.concat(got), want)


def test_a_changed_query_is_refused_when_the_stream_is_made(tmp_path):
    df = transactions(200, seed=13, customers=5)
    d = tmp_path / "ckpt"
    s = spillway.Stream(QUERIES["tumble"], time_unit="s", checkpoint_dir=d)
    s.push(df)
    s.checkpoint()
    s.close()
    with pytest.raises(spillway.SpillwayError, match="another query"):
        spillway.Stream(QUERIES["tumble"].replace("10", "20"), time_unit="s", checkpoint_dir=d)


def test_window_bounds_are_datetimes_when_the_time_column_is_one():
    df = transactions(500, seed=14, customers=5)
    df["ts"] = pd.to_datetime(df["ts"], unit="s")
    out = spillway.run(QUERIES["tumble"], df)
    assert str(out["window_start"].dtype).startswith("datetime64")
    assert (out["window_end"] - out["window_start"] == pd.Timedelta(minutes=10)).all()


@pytest.mark.parametrize("name", ["tumble", "session"])
def test_explain_plans_a_windowed_query(name):
    text = spillway.explain(QUERIES[name])
    assert "Source" in text and name.upper() in text.upper()


def test_peer_rows_equal_the_command_line_and_keep_their_labels(tmp_path):
    """ties="peers" (SQL's RANGE peers) in `run` and in a batched `Stream` equals
    `spillway run --ties peers`; every row keeps its input's index label although rows
    of one time come out only once that time is complete."""
    sql = QUERIES["range"]
    df = transactions(3000, seed=5, customers=20)
    # Minutes: many rows of one customer share a time.
    df = df.assign(ts=df["ts"] // 60 * 60).sort_values("ts", kind="stable")
    df.index = pd.RangeIndex(100, 100 + len(df))
    src = tmp_path / "tx.csv"
    out = tmp_path / "out.csv"
    df.to_csv(src, index=False)
    subprocess.run(
        [spillway_bin(), "run", "--query", sql, "--input", str(src), "--output", str(out),
         "--time-unit", "s", "--ties", "peers", "-q"],
        check=True,
        capture_output=True,
    )
    want = pd.read_csv(out)
    got = spillway.run(sql, df, time_unit="s", ties="peers")
    same(got, want)
    assert list(got.index) == list(df.index)
    # Not vacuous: the per-event default differs on the tied rows.
    per_event = spillway.run(sql, df, time_unit="s")
    assert (per_event["n"].to_numpy() != got["n"].to_numpy()).any()
    s = spillway.Stream(sql, time_unit="s", ties="peers")
    parts = [s.push(df.iloc[i : i + 250]) for i in range(0, len(df), 250)]
    parts.append(s.finish())
    streamed = pd.concat(parts)
    same(streamed, want)
    assert list(streamed.index) == list(df.index)
    # With a checkpoint in the middle of a time's rows: the batch pushed after it is
    # lost (not checkpointed), the stream resumes and gets it again; the held rows come
    # out after the resume with their labels.
    ck = tmp_path / "ck"
    s = spillway.Stream(sql, time_unit="s", ties="peers", checkpoint_dir=ck)
    before = [s.push(df.iloc[i : i + 250]) for i in range(0, 1500, 250)]
    assert sum(len(b) for b in before) < 1500, "no row is held at the checkpoint"
    s.checkpoint()
    s.push(df.iloc[1500:1750])
    s.close()
    s = spillway.Stream(sql, time_unit="s", ties="peers", checkpoint_dir=ck)
    assert s.resumed and s.events == 1500
    after = [s.push(df.iloc[i : i + 250]) for i in range(1500, len(df), 250)]
    after.append(s.finish())
    resumed = pd.concat(before + after)
    same(resumed, want)
    assert list(resumed.index) == list(df.index)


@pytest.mark.parametrize(
    "labels",
    [
        lambda n: [f"row-{i}" for i in range(n)],
        lambda n: list(pd.date_range("2026-01-01", periods=n, freq="s", tz="Europe/Lisbon")),
        lambda n: [(i % 7, f"k{i}") for i in range(n)],
        lambda n: [float(i) + 0.5 for i in range(n)],
    ],
    ids=["str", "datetime-tz", "tuple", "float"],
)
def test_peer_rows_keep_their_labels_across_a_resume(tmp_path, labels):
    """The labels of the rows held at a checkpoint are stored with it, whatever their
    type, and come back with those rows after the resume."""
    sql = QUERIES["range"]
    df = transactions(600, seed=9, customers=6)
    df = df.assign(ts=df["ts"] // 60 * 60).sort_values("ts", kind="stable")
    df.index = pd.Index(labels(len(df)))
    want = spillway.run(sql, df, time_unit="s", ties="peers")
    ck = tmp_path / "ck"
    s = spillway.Stream(sql, time_unit="s", ties="peers", checkpoint_dir=ck)
    first = s.push(df.iloc[:333])
    assert len(first) < 333
    s.checkpoint()
    s.close()
    s = spillway.Stream(sql, time_unit="s", ties="peers", checkpoint_dir=ck)
    got = pd.concat([first, s.push(df.iloc[333:]), s.finish()])
    assert list(got.index) == list(df.index)
    pd.testing.assert_frame_equal(got, want)


def test_a_label_that_cannot_be_stored_leaves_the_last_checkpoint(tmp_path):
    """A held row's label of a type the checkpoint cannot store: checkpoint() says so
    and the last checkpoint stays the one a resume continues from."""
    import decimal

    sql = QUERIES["range"]
    df = transactions(400, seed=3, customers=4)
    df = df.assign(ts=df["ts"] // 60 * 60).sort_values("ts", kind="stable")
    ck = tmp_path / "ck"
    s = spillway.Stream(sql, time_unit="s", ties="peers", checkpoint_dir=ck)
    s.push(df.iloc[:100])
    s.checkpoint()
    odd = df.iloc[100:200].copy()
    odd.index = pd.Index([decimal.Decimal(i) for i in range(100)], dtype=object)
    s.push(odd)
    with pytest.raises(spillway.ConfigError, match="cannot be stored.*nothing was checkpointed"):
        s.checkpoint()
    s.close()
    s = spillway.Stream(sql, time_unit="s", ties="peers", checkpoint_dir=ck)
    assert s.resumed and s.events == 100
