"""Errors are Python exceptions with the engine's messages."""

import numpy as np
import pandas as pd
import pytest

import spillway

from conftest import transactions

OK = """SELECT COUNT(*) OVER (PARTITION BY customer ORDER BY ts
   RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW) AS n FROM t"""


def test_exception_hierarchy():
    for e in [spillway.QueryError, spillway.InputError, spillway.ConfigError,
              spillway.StoreError, spillway.CheckpointError]:
        assert issubclass(e, spillway.SpillwayError)
    assert issubclass(spillway.SpillwayError, Exception)


def test_bad_sql_points_at_line_and_column():
    with pytest.raises(spillway.QueryError, match="SQL syntax error.*[Ll]ine"):
        spillway.run("SELECT COUNT(* OVER w FROM t", transactions(10))
    q = "SELECT tx_id,\n  COUNT(*) OVER (PARTITION BY customer ORDER BY ts ROWS BETWEEN 5 PRECEDING AND 2 PRECEDING) AS n FROM t"
    with pytest.raises(spillway.QueryError, match=r"line 2, column 3: ROWS frame"):
        spillway.run(q, transactions(10))


def test_unknown_column():
    with pytest.raises(spillway.QueryError, match=r"line 1, column \d+: unknown column `amt`; available columns: tx_id, ts, customer, amount"):
        spillway.run(OK.replace("COUNT(*)", "SUM(amt)"), transactions(10))


def test_missing_time_column():
    with pytest.raises(spillway.InputError, match="time column `ts` is not in the input"):
        spillway.run(OK, transactions(10).rename(columns={"ts": "when"}))


def test_sum_of_a_string_column_is_a_type_error():
    df = transactions(10).assign(amount=lambda d: d["amount"].astype(str) + "EUR")
    with pytest.raises(spillway.QueryError, match="numeric"):
        spillway.run(OK.replace("COUNT(*)", "SUM(amount)"), df)


def test_non_numeric_value_names_the_row():
    df = transactions(1500)
    df["amount"] = df["amount"].astype(object)
    df.loc[1234, "amount"] = "12,5"
    with pytest.raises(spillway.InputError, match=r'DataFrame row 1234, column "amount": expected float, found "12,5"'):
        spillway.run(OK.replace("COUNT(*)", "SUM(amount)"), df)


def test_fractional_value_in_an_int_column():
    df = transactions(20).astype({"customer": float})
    df.loc[7, "customer"] = 2.5
    with pytest.raises(spillway.InputError, match=r'DataFrame row 7, column "customer": expected int, found "2.5"'):
        spillway.run(OK, df, schema={"customer": "int"})


def test_null_event_time():
    df = transactions(20).astype({"ts": "Int64"})
    df.loc[5, "ts"] = pd.NA
    with pytest.raises(spillway.InputError, match=r'DataFrame row 5, column "ts": expected int \(the event time\), found NULL'):
        spillway.run(OK, df)


def test_empty_frame_gives_an_empty_typed_result():
    df = transactions(0)
    out = spillway.run(OK.replace("SELECT", "SELECT tx_id,"), df)
    assert len(out) == 0 and list(out.columns) == ["tx_id", "n"]
    assert out["n"].dtype == np.int64


def test_frame_without_columns():
    with pytest.raises(spillway.InputError, match="time column `ts` is not in the input"):
        spillway.run(OK, pd.DataFrame())


def test_bad_options():
    with pytest.raises(spillway.ConfigError, match="unknown store"):
        spillway.run(OK, transactions(10), store="nope")
    with pytest.raises(spillway.ConfigError, match="bad duration"):
        spillway.run(OK, transactions(10), allowed_lateness="5 parsecs")
    with pytest.raises(spillway.ConfigError, match="unknown time unit"):
        spillway.run(OK, transactions(10), time_unit="h")
    with pytest.raises(TypeError):
        spillway.run(OK, [1, 2, 3])


def test_file_input_matches_frame_and_reports_lines(tmp_path):
    df = transactions(1500)
    p = tmp_path / "tx.csv"
    df.to_csv(p, index=False)
    q = OK.replace("SELECT", "SELECT tx_id, amount,")
    pd.testing.assert_frame_equal(spillway.run(q, p), spillway.run(q, df))
    lines = p.read_text().splitlines()
    lines[1201] = lines[1201].rsplit(",", 1)[0] + ",abc"  # after the 1000 inference rows
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(spillway.InputError, match=r'tx.csv line 1202, column "amount": expected float, found "abc"'):
        spillway.run(q, p)


def test_explain():
    text = spillway.explain(OK)
    assert "Source (time column `ts`, unit ms)" in text and "customer" in text
    text2 = spillway.explain(OK, data=transactions(10))
    assert "customer" in text2
    with pytest.raises(spillway.QueryError):
        spillway.explain("SELECT nonsense FROM", {"ts": "int"})


def test_json_lines_input(tmp_path):
    df = transactions(300)
    p = tmp_path / "tx.jsonl"
    df.to_json(p, orient="records", lines=True)
    q = OK.replace("SELECT", "SELECT tx_id, customer,")
    pd.testing.assert_frame_equal(spillway.run(q, p), spillway.run(q, df))


def test_the_stubs_name_the_implementations_parameters():
    """_native.pyi lists the same parameters as the compiled functions it describes, so a
    type checker never rejects a real argument (or accepts a removed one); the
    pure-Python module carries its annotations inline (no stub of its own to drift)."""
    import ast
    import inspect
    import pathlib
    import typing

    import spillway
    from spillway import _native

    root = pathlib.Path(spillway.__file__).parent
    assert not (root / "__init__.pyi").exists()

    def stub_params(stub, name, cls=None):
        tree = ast.parse((root / stub).read_text())
        body = tree.body
        if cls:
            body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls).body
        f = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
        a = f.args
        names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        return [n for n in names if n != "self"]

    def real_params(obj):
        return [p for p in inspect.signature(obj).parameters if p != "self"]

    native = ["run_file", "explain", "checkpointed_schema", "parse_schema", "parse_duration",
              "parse_size"]
    for fn in native:
        assert stub_params("_native.pyi", fn) == real_params(getattr(_native, fn)), fn
    assert stub_params("_native.pyi", "__init__", "Session") == real_params(_native.Session)
    # Every public function's parameters and return are annotated inline, and the
    # overloads of run and push name the same parameters as the implementation.
    for f in [spillway.run, spillway.explain, spillway.Stream.__init__, spillway.Stream.push,
              spillway.Stream.finish]:
        sig = inspect.signature(f)
        missing = [p for p in sig.parameters.values()
                   if p.name != "self" and p.annotation is inspect.Parameter.empty]
        assert not missing and sig.return_annotation is not inspect.Signature.empty, f
    for f in [spillway.run, spillway.Stream.push]:
        overloads = typing.get_overloads(f) if hasattr(typing, "get_overloads") else []
        for o in overloads:
            assert real_params(o) == real_params(f), f


def test_schemas_are_parsed_by_the_engine():
    """Type synonyms and the `--schema` syntax are the engine's (no copy in Python)."""
    from spillway import _native

    assert _native.parse_schema("a:integer, b:TEXT,c:double,d:boolean,e:bigint") == [
        ("a", "int"), ("b", "string"), ("c", "float"), ("d", "bool"), ("e", "int")]
    assert _native.parse_schema([("x:y", "varchar")]) == [("x:y", "string")]
    assert _native.parse_schema("") == []
    with pytest.raises(spillway.InputError, match=r'unknown type "decimal" for column "amount"'):
        _native.parse_schema("ts:int,amount:decimal")
    with pytest.raises(spillway.InputError, match=r'column "amount": unknown type `decimal`'):
        _native.parse_schema([("amount", "decimal")])
    with pytest.raises(spillway.InputError, match=r'entry 2 "amount": no `:`'):
        _native.parse_schema("ts:int,amount")
    # Through the public API: a DataFrame with a mapping, a Stream with a string.
    with pytest.raises(spillway.InputError, match=r'column "customer": unknown type `long`'):
        spillway.run(OK, transactions(10), schema={"customer": "long"})
    with pytest.raises(spillway.InputError, match=r'unknown type "long" for column "customer"'):
        spillway.Stream(OK, schema="ts:int,customer:long")
    s = spillway.Stream(OK, schema={"ts": "bigint", "customer": "integer"})
    assert s.schema == [("ts", "int"), ("customer", "int")]
