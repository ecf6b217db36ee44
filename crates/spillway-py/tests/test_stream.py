"""Stream: random batch sizes equal one run over the whole frame; checkpoint/resume."""

import numpy as np
import pandas as pd
import pytest

import spillway

from conftest import transactions

Q = """SELECT tx_id, customer, COUNT(*) OVER w AS n, AVG(amount) OVER w AS a,
       MAX(amount) OVER d AS m
FROM tx
WINDOW w AS (PARTITION BY customer ORDER BY ts RANGE BETWEEN OPEN(INTERVAL '1' HOUR) PRECEDING AND CURRENT ROW),
       d AS (PARTITION BY customer ORDER BY ts RANGE BETWEEN INTERVAL '2' HOUR PRECEDING AND OPEN(INTERVAL '10' MINUTE) PRECEDING)"""

SCHEMA = {"tx_id": "int", "ts": "int", "customer": "int", "amount": "float"}


def batches(df, seed):
    rng = np.random.default_rng(seed)
    i = 0
    while i < len(df):
        k = int(rng.integers(1, 400))
        yield df.iloc[i : i + k]
        i += k


@pytest.mark.parametrize("seed", [1, 2])
def test_random_batches_equal_run(seed):
    df = transactions(5000, seed=seed, customers=40)
    whole = spillway.run(Q, df)
    s = spillway.Stream(Q, schema=SCHEMA if seed == 1 else None)
    parts = [s.push(b) for b in batches(df, seed)]
    got = pd.concat(parts)
    pd.testing.assert_frame_equal(got, whole)
    assert s.events == len(df)
    assert got["m"].isna().any() and got["m"].dtype == "Float64"


def test_checkpoint_and_resume(tmp_path):
    df = transactions(6000, seed=9, customers=30)
    whole = spillway.run(Q, df, allowed_lateness="0s")
    d = tmp_path / "ckpt"
    s = spillway.Stream(Q, schema=SCHEMA, checkpoint_dir=d)
    assert not s.resumed
    got = [s.push(df.iloc[:2500])]
    s.checkpoint()
    s.push(df.iloc[2500:3100])  # after the checkpoint: lost when the stream is reopened
    s.close()
    s = spillway.Stream(Q, schema=SCHEMA, checkpoint_dir=d)
    assert s.resumed and s.events == 2500
    got += [s.push(df.iloc[2500:4000])]
    s.checkpoint()
    s.close()
    with spillway.Stream(Q, schema=SCHEMA, checkpoint_dir=d) as s:
        assert s.events == 4000
        got += [s.push(b) for b in batches(df.iloc[4000:], 3)]
    pd.testing.assert_frame_equal(pd.concat(got), whole)


def test_resume_with_another_query_is_refused(tmp_path):
    df = transactions(100)
    s = spillway.Stream(Q, schema=SCHEMA, checkpoint_dir=tmp_path)
    s.push(df)
    s.checkpoint()
    s.close()
    with pytest.raises(spillway.CheckpointError, match="another query"):
        spillway.Stream(Q.replace("1' HOUR", "3' HOUR"), schema=SCHEMA, checkpoint_dir=tmp_path)


def test_checkpoint_needs_a_directory():
    s = spillway.Stream(Q, schema=SCHEMA)
    with pytest.raises(spillway.ConfigError, match="checkpoint directory"):
        s.checkpoint()


def test_batch_missing_a_schema_column():
    s = spillway.Stream(Q, schema=SCHEMA)
    with pytest.raises(spillway.InputError, match='column "amount" is missing'):
        s.push(transactions(10).drop(columns=["amount"]))


def test_reopen_without_schema_takes_the_checkpoints_schema(tmp_path):
    df = transactions(3000, seed=4, customers=20)
    whole = spillway.run(Q, df)
    s = spillway.Stream(Q, checkpoint_dir=tmp_path)
    first = s.push(df.iloc[:1000])
    s.checkpoint()
    s.close()
    s = spillway.Stream(Q, checkpoint_dir=tmp_path)
    # The checkpoint recorded the schema inferred from the first batch: the stream is
    # reopened at once, and knows what it resumed before any push.
    assert s.resumed and s.events == 1000
    assert s.schema == [("tx_id", "int"), ("ts", "int"), ("customer", "int"), ("amount", "float")]
    rest = s.push(df.iloc[s.events :])
    assert s.resumed and s.events == 3000
    pd.testing.assert_frame_equal(pd.concat([first, rest]), whole)
