"""Exact sliding-window features for pandas, computed by Spillway's engine.

``spillway.run(sql, df)`` scores every row of a DataFrame with SQL window metrics such as
``COUNT(*) OVER (PARTITION BY customer ORDER BY ts RANGE BETWEEN INTERVAL '7' DAY
PRECEDING AND CURRENT ROW)``: the result for a row covers exactly the rows of its
partition that came no later than it and whose time lies in its window. ``Stream``
does the same incrementally, batch by batch, with checkpoints. The engine is the one
behind ``spillway run`` (the compiled ``spillway._native`` module): same results, same
error messages.

This file owns the pandas side: dtype mapping of input columns to the engine's types
(int, float, bool, string), column buffers handed to the engine (contiguous numpy
bytes, no per-row Python objects for numeric columns), and the output DataFrame.

Type mapping (input):

==========================================  ==========================================
pandas dtype                                engine type
==========================================  ==========================================
int8..int64, uint8..uint64, Int64 (NA)      int (NA -> NULL)
float32/float64, Float64                    float (NaN and NA -> NULL)
bool, boolean                               bool (NA -> NULL)
object/string of str                        string (None/NaN/NA -> NULL)
object of numbers                           int or float, inferred from the first 1000
                                            non-null values as ``spillway run`` infers
                                            a CSV column; a later non-number is an
                                            ``InputError`` naming the row
category                                    the categories' type
datetime64 (naive or tz-aware)              int: time since the epoch in ``time_unit``
                                            (floored); for the time column

``time_unit`` defaults to ``"ms"`` everywhere (``run``, ``Stream``, ``explain``), as
``spillway run --time-unit`` does, so the same integer times give the same results in
Python and on the command line; pass ``time_unit="s"`` for times in seconds.
==========================================  ==========================================

Output: one row per input row (rows removed by ``WHERE`` and rows later than the allowed
lateness excepted), in input order, indexed by the input's index labels; columns named
by the SELECT list; ints as ``int64`` (``Int64`` with ``<NA>`` where a value is NULL),
floats as ``float64`` (``Float64`` with ``<NA>`` where NULL), bools as ``bool``
(``boolean`` with NULLs), strings as ``object``. A selected datetime64 input column comes
back as datetime64[ns]. Rows later than the allowed lateness are not scored: with
``return_late=True`` they come back as a second DataFrame (those input rows, the engine's
side output); otherwise a ``LateRowsWarning`` says how many there were (nothing is
dropped silently).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import warnings
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Union, overload

import numpy as np
import pandas as pd

from . import _native
from ._native import (
    CheckpointError,
    ConfigError,
    InputError,
    QueryError,
    SpillwayError,
    StoreError,
)

__all__ = [
    "run",
    "LateRowsWarning",
    "Stream",
    "explain",
    "SpillwayError",
    "QueryError",
    "InputError",
    "ConfigError",
    "StoreError",
    "CheckpointError",
]

__version__ = "0.1.0"

#: Rows of an object column looked at to infer its type (as ``spillway run`` does for CSV).
INFER_ROWS = 1000



class LateRowsWarning(UserWarning):
    """Rows came later than the allowed lateness and were not scored (pass
    ``return_late=True`` to get them)."""


_NANOS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}

#: A schema: ``{"card": "string"}``, ``"card:string,amount:float"`` (as ``--schema``) or
#: ``[("card", "string")]``; types as the engine names them or their synonyms.
SchemaLike = Union[Mapping[str, str], str, Sequence[Tuple[str, str]]]
#: A duration: an int (time units), a string such as ``"5s"`` or a timedelta.
Duration = Union[int, str, _dt.timedelta]
#: How ``RANGE`` frames treat rows of equal time.
Ties = Literal["per-event", "peers"]


# ---------------------------------------------------------------------------------------
# Options


def _unit_nanos(time_unit: str) -> int:
    try:
        return _NANOS[time_unit]
    except KeyError:
        raise ConfigError(f"unknown time unit `{time_unit}`; use s, ms, us or ns") from None


def _lateness(value: Any, time_unit: str) -> int:
    """Allowed lateness in time units: an int (units), a duration string or a timedelta."""
    if isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"allowed_lateness must be a duration, got {value!r}")
    if isinstance(value, (int, np.integer)):
        n = int(value)
    elif isinstance(value, str):
        n = _native.parse_duration(value, time_unit)
    elif isinstance(value, (_dt.timedelta, pd.Timedelta, np.timedelta64)):
        nanos = int(pd.Timedelta(value).value)
        per = _unit_nanos(time_unit)
        if nanos % per:
            raise ConfigError(
                f"allowed_lateness {value} is not a whole number of {time_unit}"
            )
        n = nanos // per
    else:
        raise ConfigError(
            f"allowed_lateness must be an int ({time_unit}), a duration such as '5s' or a "
            f"timedelta, got {value!r}"
        )
    if n < 0:
        raise ConfigError(f"allowed lateness must be >= 0, got {n}")
    return n


def _budget(value: Any) -> int:
    if isinstance(value, str):
        return _native.parse_size(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > 0:
        return int(value)
    raise ConfigError(f"memory_budget must be a byte count or a size such as '256MiB', got {value!r}")


def _schema_pairs(schema: Optional[SchemaLike]) -> List[Tuple[str, str]]:
    """``{"a": "int"}``, ``"a:int,b:string"`` or ``[("a", "int")]`` as ``(name, type)``
    pairs, each type under its engine name: parsed and checked by the engine (an
    ``InputError`` names the column and the bad type)."""
    if schema is None:
        return []
    if isinstance(schema, str):
        return _native.parse_schema(schema)
    items = schema.items() if isinstance(schema, Mapping) else schema
    return _native.parse_schema([(str(k), str(v)) for k, v in items])


# ---------------------------------------------------------------------------------------
# Input columns


def _quote(v: Any) -> str:
    text = str(v)
    short = text[:60]
    body = short.encode("unicode_escape").decode("ascii").replace('"', '\\"')
    return '"' + body + ("..." if len(text) > 60 else "") + '"'


def _bad_value(name: str, ty: str, pos: int, value: Any) -> InputError:
    # Same wording as the engine's row errors (`spillway run`), with the row's position.
    return InputError(f'DataFrame row {pos}, column "{name}": expected {ty}, found {_quote(value)}')


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _infer(s: pd.Series, name: str) -> str:
    dt = s.dtype
    if isinstance(dt, pd.CategoricalDtype):
        return _infer(pd.Series(dt.categories), name) if len(dt.categories) else "string"
    if pd.api.types.is_bool_dtype(dt):
        return "bool"
    if pd.api.types.is_integer_dtype(dt):
        return "int"
    if pd.api.types.is_float_dtype(dt):
        return "float"
    if pd.api.types.is_datetime64_any_dtype(dt):
        return "int"
    if dt == object or isinstance(dt, pd.StringDtype):
        sample = s[s.notna()].iloc[:INFER_ROWS].tolist()
        if not sample:
            return "string"
        if all(isinstance(v, (bool, np.bool_)) for v in sample):
            return "bool"
        if all(_is_number(v) for v in sample):
            if all(isinstance(v, (int, np.integer)) for v in sample):
                return "int"
            return "float"
        return "string"
    raise InputError(
        f'column "{name}": dtype {dt} is not supported; use int, float, bool, string '
        "(object/str), category or datetime64 columns"
    )


def _mask_bytes(mask: np.ndarray) -> Optional[bytes]:
    return mask.astype(np.uint8).tobytes() if mask.any() else None


def _numeric_from_object(s: pd.Series, name: str, ty: str) -> Tuple[np.ndarray, np.ndarray]:
    """Object/string values as float64 with a null mask; a non-number is an error."""
    notna = s.notna().to_numpy()
    vals = s.to_numpy(dtype=object)
    bools = np.fromiter((isinstance(v, (bool, np.bool_)) for v in vals), bool, len(vals))
    coerced = pd.to_numeric(pd.Series(vals, dtype=object), errors="coerce").to_numpy(
        dtype=np.float64, na_value=np.nan
    )
    bad = (notna & np.isnan(coerced)) | bools
    bad &= notna
    if bad.any():
        pos = int(np.argmax(bad))
        raise _bad_value(name, ty, pos, vals[pos])
    return coerced, ~notna


def _encode(s: pd.Series, name: str, ty: str, time_unit: str) -> Tuple[str, Any, Optional[bytes]]:
    """One column as the engine's `(type, payload, nulls)`."""
    dt = s.dtype
    if isinstance(dt, pd.CategoricalDtype):
        s = s.astype(dt.categories.dtype if ty != "string" else object)
        dt = s.dtype
    if ty == "string":
        obj = s.astype(object)
        na = obj.isna().to_numpy()
        values = obj.to_numpy(dtype=object)
        if na.any():
            values = values.copy()
            values[na] = None
        if pd.api.types.infer_dtype(values, skipna=True) not in ("string", "empty"):
            values = np.array(
                [v if v is None or isinstance(v, str) else str(v) for v in values], dtype=object
            )
        return ("string", values.tolist(), None)
    if pd.api.types.is_datetime64_any_dtype(dt):
        if ty != "int":
            raise InputError(f'column "{name}": a datetime64 column can only be typed int, not {ty}')
        if getattr(dt, "tz", None) is not None:
            s = s.dt.tz_convert("UTC").dt.tz_localize(None)
        ns = s.to_numpy(dtype="datetime64[ns]")
        mask = np.isnat(ns)
        ints = ns.view(np.int64) // _unit_nanos(time_unit)
        ints[mask] = 0
        return ("int", np.ascontiguousarray(ints, dtype="<i8").tobytes(), _mask_bytes(mask))
    if pd.api.types.is_bool_dtype(dt):
        mask = s.isna().to_numpy()
        if ty == "bool":
            vals = s.to_numpy(dtype=np.bool_, na_value=False)
            return ("bool", vals.astype(np.uint8).tobytes(), _mask_bytes(mask))
        pos = int(np.argmax(~mask)) if (~mask).any() else 0
        raise _bad_value(name, ty, pos, s.iloc[pos])
    if ty == "bool":
        if dt == object:
            na = s.isna().to_numpy()
            vals = s.to_numpy(dtype=object)
            ok = np.fromiter((isinstance(v, (bool, np.bool_)) for v in vals), bool, len(vals)) | na
            if not ok.all():
                pos = int(np.argmax(~ok))
                raise _bad_value(name, ty, pos, vals[pos])
            out = np.array([bool(v) if not m else False for v, m in zip(vals, na)], dtype=np.uint8)
            return ("bool", out.tobytes(), _mask_bytes(na))
        mask = s.isna().to_numpy()
        pos = int(np.argmax(~mask)) if (~mask).any() else 0
        raise _bad_value(name, ty, pos, s.iloc[pos])
    # int or float
    if pd.api.types.is_integer_dtype(dt):
        mask = s.isna().to_numpy()
        if ty == "int":
            if dt == np.uint64 and len(s) and (s.to_numpy(dtype=np.uint64, na_value=0) > np.iinfo(np.int64).max).any():
                pos = int(np.argmax(s.to_numpy(dtype=np.uint64, na_value=0) > np.iinfo(np.int64).max))
                raise _bad_value(name, ty, pos, s.iloc[pos])
            vals = s.to_numpy(dtype=np.int64, na_value=0)
            return ("int", np.ascontiguousarray(vals, dtype="<i8").tobytes(), _mask_bytes(mask))
        vals = s.to_numpy(dtype=np.float64, na_value=np.nan)
        return ("float", np.ascontiguousarray(vals, dtype="<f8").tobytes(), _mask_bytes(mask))
    if pd.api.types.is_float_dtype(dt):
        vals = s.to_numpy(dtype=np.float64, na_value=np.nan)
        mask = np.isnan(vals)
    elif dt == object or isinstance(dt, pd.StringDtype):
        vals, mask = _numeric_from_object(s, name, ty)
    else:
        raise InputError(f'column "{name}": dtype {dt} cannot be read as {ty}')
    if ty == "float":
        return ("float", np.ascontiguousarray(vals, dtype="<f8").tobytes(), _mask_bytes(mask))
    # float values into an int column: only whole numbers
    whole = np.isfinite(vals) & (np.floor(vals) == vals) & (np.abs(vals) < 2.0**63)
    bad = ~whole & ~mask
    if bad.any():
        pos = int(np.argmax(bad))
        raise _bad_value(name, ty, pos, s.iloc[pos])
    ints = np.where(mask, 0.0, vals).astype(np.int64)
    return ("int", np.ascontiguousarray(ints, dtype="<i8").tobytes(), _mask_bytes(mask))


class _Layout:
    """The schema of a stream: engine field names and types, the DataFrame column
    labels they come from, and which were datetime64 (given back as datetime64)."""

    def __init__(self, fields: List[Tuple[str, str]], labels: List[Any], datetimes: Dict[str, Any]):
        self.fields = fields
        self.labels = labels
        self.datetimes = datetimes

    @classmethod
    def infer(cls, df: pd.DataFrame, overrides: List[Tuple[str, str]], complete: bool) -> "_Layout":
        names = [str(c) for c in df.columns]
        seen = set()
        for n in names:
            if n in seen:
                raise InputError(f'column "{n}" appears twice in the DataFrame')
            seen.add(n)
        given = dict(overrides)
        if complete:
            fields = list(given.items())
            by_name = {str(c): c for c in df.columns}
            labels = [by_name.get(n, n) for n, _ in fields]
        else:
            unknown = [n for n in given if n not in seen]
            if unknown:
                raise InputError(
                    f'schema names column "{unknown[0]}", which is not in the DataFrame '
                    f"(columns: {', '.join(names)})"
                )
            fields = [(str(c), given.get(str(c)) or _infer(df[c], str(c))) for c in df.columns]
            labels = list(df.columns)
        datetimes = {}
        for (n, _), label in zip(fields, labels):
            if label in df.columns and pd.api.types.is_datetime64_any_dtype(df[label].dtype):
                datetimes[n] = getattr(df[label].dtype, "tz", None)
        return cls(fields, labels, datetimes)

    def encode(self, df: pd.DataFrame, time_unit: str) -> List[Tuple[str, Any, Optional[bytes]]]:
        cols = []
        for (name, ty), label in zip(self.fields, self.labels):
            if label not in df.columns:
                raise InputError(
                    f'column "{name}" is missing from the DataFrame (columns: '
                    f"{', '.join(str(c) for c in df.columns)})"
                )
            cols.append(_encode(df[label], name, ty, time_unit))
        return cols


# ---------------------------------------------------------------------------------------
# Output


def _column(ty: str, payload: Any, nulls: Optional[bytearray]) -> Any:
    mask = None if nulls is None else np.frombuffer(nulls, dtype=np.uint8).astype(bool)
    if ty == "int":
        arr = np.frombuffer(payload, dtype="<i8")
        return arr if mask is None else pd.arrays.IntegerArray(arr, mask)
    if ty == "float":
        arr = np.frombuffer(payload, dtype="<f8")
        return arr if mask is None else pd.arrays.FloatingArray(arr, mask)
    if ty == "bool":
        arr = np.frombuffer(payload, dtype=np.uint8).astype(bool)
        return arr if mask is None else pd.arrays.BooleanArray(arr, mask)
    return np.array(payload, dtype=object)


def _frame(
    names: Sequence[str],
    data: Sequence[Tuple[str, Any, Any]],
    index: Optional[pd.Index],
    datetimes: Mapping[str, Any],
    time_unit: str,
) -> pd.DataFrame:
    cols = {}
    for name, (ty, payload, nulls) in zip(names, data):
        col = _column(ty, payload, nulls)
        if name in datetimes and ty == "int":
            ns = pd.array(col, dtype="Int64").to_numpy(dtype=np.int64, na_value=np.iinfo(np.int64).min)
            ns = np.where(ns == np.iinfo(np.int64).min, ns, ns * _unit_nanos(time_unit))
            col = pd.DatetimeIndex(ns.view("datetime64[ns]"))
            tz = datetimes[name]
            if tz is not None:
                col = col.tz_localize("UTC").tz_convert(tz)
            col = col.array
        cols[name] = col
    if index is None:
        index = pd.RangeIndex(len(next(iter(cols.values()))) if cols else 0)
    # copy=False: each column keeps the buffer the engine filled (no consolidation copy).
    return pd.DataFrame(cols, index=index, columns=list(names), copy=False)


# The window-bound columns a windowed aggregation outputs: event times, given back as
# datetime64 when the time column was one.
_WINDOW_TIMES = ("window_start", "window_end", "window_time")


def _out_datetimes(session: Any, layout: _Layout, time_column: str) -> Mapping[str, Any]:
    if not session.windowed or time_column not in layout.datetimes:
        return layout.datetimes
    tz = layout.datetimes[time_column]
    return {**layout.datetimes, **{n: tz for n in _WINDOW_TIMES}}


# A checkpoint of a Stream with ties="peers" stores the index labels of the rows it
# holds for their peers (they come out after the resume) in the checkpoint's tag, as
# JSON: {"format": _LABELS_FORMAT, "labels": [label, ...]}, each label a tagged list
# (see _encode_label). JSON, not pickle: reading a checkpoint runs no code.
_LABELS_FORMAT = "spillway.stream.peer-labels.v1"


def _encode_label(x: Any) -> List[Any]:
    if x is None:
        return ["n"]
    if isinstance(x, (bool, np.bool_)):
        return ["b", bool(x)]
    if isinstance(x, (int, np.integer)):
        return ["i", int(x)]
    if isinstance(x, (float, np.floating)):
        return ["f", repr(float(x))]  # exact, NaN and infinities included
    if isinstance(x, str):
        return ["s", x]
    if isinstance(x, (pd.Timestamp, np.datetime64, _dt.datetime)):
        t = pd.Timestamp(x)
        return ["t", int(t.value), None if t.tz is None else str(t.tz)]
    if isinstance(x, tuple):
        return ["u", [_encode_label(v) for v in x]]
    raise ConfigError(
        f"checkpoint: the index label {x!r} ({type(x).__name__}) of a row held for its "
        "peers cannot be stored (int, float, str, bool, datetime, None or tuples of these "
        "can); nothing was checkpointed"
    )


def _decode_label(v: Any) -> Any:
    kind = v[0]
    if kind == "n":
        return None
    if kind == "b":
        return bool(v[1])
    if kind == "i":
        return int(v[1])
    if kind == "f":
        return float(v[1])
    if kind == "s":
        return str(v[1])
    if kind == "t":
        return pd.Timestamp(int(v[1]), tz=v[2])
    if kind == "u":
        return tuple(_decode_label(x) for x in v[1])
    raise ValueError(f"unknown label kind {kind!r}")


def _encode_labels(labels: List[Any]) -> bytes:
    enc = [_encode_label(x) for x in labels]
    return json.dumps({"format": _LABELS_FORMAT, "labels": enc}).encode()


def _decode_labels(tag: Optional[bytes], where: Optional[str]) -> List[Any]:
    try:
        doc = json.loads(tag or b"")
        if doc.get("format") != _LABELS_FORMAT:
            raise ValueError(f"format {doc.get('format')!r}, not {_LABELS_FORMAT!r}")
        return [_decode_label(v) for v in doc["labels"]]
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise ConfigError(
            f"{where}: the checkpoint does not hold the index labels of the rows held for "
            f"their peers ({e}); was it written by a Stream with ties=\"peers\"?"
        ) from None


def _push(
    session: Any,
    layout: _Layout,
    df: pd.DataFrame,
    time_unit: str,
    time_column: str,
    pending: Optional[List[Any]] = None,
) -> Tuple[pd.DataFrame, pd.DataFrame]:
    cols = layout.encode(df, time_unit)
    data, emitted, late = session.push(cols, len(df))
    emitted = np.frombuffer(emitted, dtype="<i8")
    late = np.frombuffer(late, dtype="<i8")
    if session.windowed:
        # The rows of the windows that fired: not the input's rows, so a fresh index.
        index = None
    elif not session.per_event:
        # Peer rows (ties="peers") come out later, in arrival order: the index labels of
        # the rows scored so far wait in `pending` for theirs.
        assert pending is not None
        pending.extend(df.index[emitted])
        index = None
    else:
        index = df.index if len(emitted) == len(df) else df.index[emitted]
    names = [n for n, _ in session.columns]
    out = _frame(names, data, index, _out_datetimes(session, layout, time_column), time_unit)
    if pending is not None and not session.windowed and not session.per_event:
        out.index = pd.Index(pending[: len(out)], dtype=df.index.dtype)
        del pending[: len(out)]
    return out, df.iloc[late]


def _finish(
    session: Any,
    layout: _Layout,
    time_unit: str,
    time_column: str,
    pending: Optional[List[Any]] = None,
) -> pd.DataFrame:
    names = [n for n, _ in session.columns]
    data = session.finish()
    out = _frame(names, data, None, _out_datetimes(session, layout, time_column), time_unit)
    if not session.windowed and not session.per_event and pending is not None:
        out.index = pd.Index(pending[: len(out)])
        del pending[: len(out)]
    return out


def _late(out: pd.DataFrame, late: pd.DataFrame, return_late: bool) -> Any:
    if return_late:
        return out, late
    if len(late):
        warnings.warn(
            f"{len(late)} rows came later than the allowed lateness and were not scored; "
            "pass return_late=True to get them, or raise allowed_lateness",
            LateRowsWarning,
            stacklevel=3,
        )
    return out


# ---------------------------------------------------------------------------------------
# Public API


@overload
def run(
    sql: str,
    data: Union[pd.DataFrame, str, "os.PathLike[str]"],
    time_column: str = ...,
    time_unit: str = ...,
    *,
    schema: Optional[SchemaLike] = ...,
    store: str = ...,
    memory_budget: Union[int, str] = ...,
    expected_keys: Optional[int] = ...,
    allowed_lateness: Duration = ...,
    compression: str = ...,
    return_late: Literal[False] = ...,
    ties: Ties = ...,
) -> pd.DataFrame: ...
@overload
def run(
    sql: str,
    data: Union[pd.DataFrame, str, "os.PathLike[str]"],
    time_column: str = ...,
    time_unit: str = ...,
    *,
    schema: Optional[SchemaLike] = ...,
    store: str = ...,
    memory_budget: Union[int, str] = ...,
    expected_keys: Optional[int] = ...,
    allowed_lateness: Duration = ...,
    compression: str = ...,
    return_late: Literal[True],
    ties: Ties = ...,
) -> Tuple[pd.DataFrame, pd.DataFrame]: ...
def run(
    sql: str,
    data: Union[pd.DataFrame, str, "os.PathLike[str]"],
    time_column: str = "ts",
    time_unit: str = "ms",
    *,
    schema: Optional[SchemaLike] = None,
    store: str = "hashlog",
    memory_budget: Union[int, str] = "256MiB",
    expected_keys: Optional[int] = None,
    allowed_lateness: Duration = 0,
    compression: str = "lz4",
    return_late: bool = False,
    ties: Ties = "per-event",
) -> Union[pd.DataFrame, Tuple[pd.DataFrame, pd.DataFrame]]:
    """Runs a metrics query over a DataFrame or a CSV / JSON Lines file.

    Args:
        sql: ``SELECT col, ..., AGG(x) OVER w AS name, ... FROM any_name [WHERE ...]
            [WINDOW w AS (PARTITION BY key ORDER BY <time_column> RANGE BETWEEN ...)]``.
            Bounds: ``INTERVAL '7' DAY PRECEDING AND CURRENT ROW`` is ``[t-7d, t]``;
            ``OPEN(INTERVAL '7' DAY) PRECEDING AND CURRENT ROW`` is ``(t-7d, t]``
            (pandas' ``rolling("7D")``); ``... AND OPEN(0) PRECEDING`` excludes the
            current row; ``INTERVAL 'D+W' ... AND OPEN(INTERVAL 'D') PRECEDING`` delays.
            ``ROWS BETWEEN n PRECEDING AND CURRENT ROW`` and ``UNBOUNDED PRECEDING``
            frames work too. A windowed aggregation (Flink's window table functions):
            ``SELECT key, window_start, window_end, COUNT(*) AS n FROM
            TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '5' MINUTE)) GROUP BY key,
            window_start, window_end``, with ``HOP``, ``CUMULATE`` or ``SESSION`` too.
        data: a DataFrame, or a path to a CSV (with header) or JSON Lines file, read by
            the engine exactly as ``spillway run --input`` reads it.
        time_column: the event-time column: integers in ``time_unit``, or datetime64.
        time_unit: ``"s"``, ``"ms"`` (default, as ``spillway run --time-unit``), ``"us"``
            or ``"ns"``: the unit of integer times and of ``allowed_lateness`` given as
            an ``int``. A datetime64 column is converted to it; integer times in
            seconds need ``time_unit="s"`` (with the default their windows would be
            1000x too long).
        schema: column types overriding inference, ``{"card": "string"}`` or
            ``"card:string,amount:float"`` (as ``--schema``).
        store: aggregation state store, ``"hashlog"`` (default) or ``"mem"``.
        memory_budget: the store's memory budget, bytes or a size such as ``"1GiB"``.
        expected_keys: expected number of partition keys (a sizing hint).
        allowed_lateness: how far behind the newest time a row may come and still be
            scored exactly: ``int`` (time units), ``"5s"`` or a timedelta. Later rows are
            not scored (see ``return_late``).
        compression: reservoir chunk compression, ``"lz4"`` or ``"zstd"``.
        return_late: also return the rows later than the allowed lateness (the
            engine's side output) as a second DataFrame. Without it, such rows raise a
            ``LateRowsWarning``.
        ties: how ``RANGE`` frames treat rows of equal time: ``"per-event"`` (default:
            a row's result covers the rows that came no later than it, as pandas'
            ``rolling``) or ``"peers"`` (SQL's and Flink's: every row of its partition
            with the same time, as ``spillway run --ties peers``).

    Returns:
        One row per input row (minus rows removed by ``WHERE`` and too-late rows), in
        input order, with the input's index labels and the SELECT list's columns; for a
        windowed aggregation, one row per window and key in the order the windows fire
        (as ``spillway run`` writes them), with a fresh index, ``window_start`` and
        ``window_end`` as datetime64 when the time column is one. ``(result,
        late_rows)`` with ``return_late=True``.

    Raises:
        QueryError: bad SQL (the message gives line and column), unknown column.
        InputError: a missing time column, a value of the wrong type (the message names
            the row and column), an unreadable file.
        ConfigError: a bad option value.
    """
    lateness = _lateness(allowed_lateness, time_unit)
    budget = _budget(memory_budget)
    _unit_nanos(time_unit)
    if isinstance(data, (str, os.PathLike)):
        spec = ",".join(f"{n}:{t}" for n, t in _schema_pairs(schema)) or None
        cols, out_data, fields, late_data, _counters = _native.run_file(
            sql, os.fspath(data), time_column, time_unit, spec, store, budget,
            expected_keys, lateness, compression, ties,
        )
        out = _frame([n for n, _ in cols], out_data, None, {}, time_unit)
        late = _frame([n for n, _ in fields], late_data, None, {}, time_unit)
        return _late(out, late, return_late)
    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"data must be a pandas DataFrame or a file path, got {type(data).__name__}")
    layout = _Layout.infer(data, _schema_pairs(schema), complete=False)
    session = _native.Session(
        sql, layout.fields, time_column, time_unit, store, budget, expected_keys, lateness,
        compression, None, ties,
    )
    pending: List[Any] = []
    out, late = _push(session, layout, data, time_unit, time_column, pending)
    if session.windowed:
        rest = _finish(session, layout, time_unit, time_column)
        out = pd.concat([out, rest], ignore_index=True) if len(out) else rest
    elif not session.per_event:
        # Peer rows of the last time come at the end, with their index labels.
        rest = _finish(session, layout, time_unit, time_column, pending)
        out = pd.concat([out, rest]) if len(out) else rest
    return _late(out, late, return_late)


class Stream:
    """An incremental query: push batches as they arrive, get each batch's results.

    ``Stream(sql, schema=...).push(df)`` returns the rows of ``df`` scored exactly as
    ``run`` would score them in the concatenation of every batch pushed so far. With a
    ``checkpoint_dir``, ``checkpoint()`` makes an atomic checkpoint; a new ``Stream``
    over the same directory (same query, schema, lateness and store) continues from it,
    and pushing the rows after the checkpoint gives exactly the uninterrupted results.
    Rows pushed after the last checkpoint are not kept by a reopened stream: push them
    again. A reopened stream knows, before any push, whether it ``resumed`` and how many
    rows its checkpoint covers (``events``), even without ``schema=`` (the checkpoint
    records its schema), so the rows to push again are ``df.iloc[stream.events:]``.

    For a windowed aggregation, ``push`` returns the rows of the windows that fired
    while the batch was processed, and ``finish()`` those still open at the end of
    input.

    Args:
        sql: the query (see ``run``).
        schema: the complete input schema, ``{"ts": "int", "customer": "int", ...}`` or
            ``"ts:int,customer:int"``; batch columns not in it are ignored. Without it,
            the schema is inferred from the first batch (all its columns) and fixed.
        time_column, time_unit: as in ``run``.
        checkpoint_dir: directory for the state, event reservoir and checkpoints
            (default: a temporary directory; ``checkpoint()`` is then an error).
        store, memory_budget, expected_keys, allowed_lateness, compression: as in ``run``.
        ties: as in ``run``; with ``"peers"``, a push returns the rows whose time is
            complete (those of its newest time wait for a later time, or ``finish()``),
            each with its own index label. A checkpoint keeps the held rows and their
            labels (int, float, str, bool, datetime, ``None`` or tuples of these), so
            after a resume they come out with their labels.
    """

    def __init__(
        self,
        sql: str,
        schema: Optional[SchemaLike] = None,
        time_column: str = "ts",
        time_unit: str = "ms",
        checkpoint_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        *,
        store: str = "hashlog",
        memory_budget: Union[int, str] = "256MiB",
        expected_keys: Optional[int] = None,
        allowed_lateness: Duration = 0,
        compression: str = "lz4",
        ties: Ties = "per-event",
    ) -> None:
        self._sql = sql
        self._ties = ties
        # Index labels of pushed rows whose peer rows have not come out yet.
        self._pending: List[Any] = []
        self._time_column = time_column
        _unit_nanos(time_unit)
        self._time_unit = time_unit
        self._dir = None if checkpoint_dir is None else os.fspath(checkpoint_dir)
        self._opts = (
            store,
            _budget(memory_budget),
            expected_keys,
            _lateness(allowed_lateness, time_unit),
            compression,
            self._dir,
        )
        self._session: Any = None
        self._layout: Optional[_Layout] = None
        fields = _schema_pairs(schema)
        if fields:
            self._open(_Layout(fields, [n for n, _ in fields], {}))
        elif checkpoint_dir is not None:
            # A checkpoint records its schema: reopen it now, so that ``resumed`` and
            # ``events`` are right (and a changed query is refused) before any push.
            found = _native.checkpointed_schema(os.fspath(checkpoint_dir))
            if found is not None:
                fields, time = found
                if time != time_column:
                    raise ConfigError(
                        f"{os.fspath(checkpoint_dir)} was checkpointed with time column "
                        f'"{time}", not "{time_column}"'
                    )
                self._open(_Layout(fields, [n for n, _ in fields], {}))

    def _open(self, layout: _Layout) -> None:
        session = _native.Session(
            self._sql, layout.fields, self._time_column, self._time_unit, *self._opts,
            self._ties,
        )
        if session.resumed and not session.windowed and not session.per_event:
            self._pending = _decode_labels(session.tag, self._dir)
        self._session = session
        self._layout = layout

    @overload
    def push(self, df: pd.DataFrame, return_late: Literal[False] = ...) -> pd.DataFrame: ...
    @overload
    def push(
        self, df: pd.DataFrame, return_late: Literal[True]
    ) -> Tuple[pd.DataFrame, pd.DataFrame]: ...
    def push(
        self, df: pd.DataFrame, return_late: bool = False
    ) -> Union[pd.DataFrame, Tuple[pd.DataFrame, pd.DataFrame]]:
        """Scores the rows of ``df`` (in order) and returns their results, indexed by
        ``df``'s index; with ``return_late=True``, ``(results, too_late_rows)``."""
        if not isinstance(df, pd.DataFrame):
            raise TypeError(f"push takes a pandas DataFrame, got {type(df).__name__}")
        if self._session is None:
            self._open(_Layout.infer(df, [], complete=False))
        layout = self._layout
        assert layout is not None
        if not layout.datetimes:
            dts = {
                n: getattr(df[l].dtype, "tz", None)
                for (n, _), l in zip(layout.fields, layout.labels)
                if l in df.columns and pd.api.types.is_datetime64_any_dtype(df[l].dtype)
            }
            if dts:
                layout.datetimes = dts
        out, late = _push(
            self._session, layout, df, self._time_unit, self._time_column, self._pending
        )
        return _late(out, late, return_late)

    def finish(self) -> pd.DataFrame:
        """End of input: a windowed aggregation's rows of the windows still open (they
        would otherwise fire only when later rows move the watermark past them); an
        empty frame for per-event metrics. Rows pushed afterwards open new windows."""
        session = self._require()
        layout = self._layout
        assert layout is not None
        return _finish(session, layout, self._time_unit, self._time_column, self._pending)

    def checkpoint(self) -> None:
        """Makes an atomic checkpoint in ``checkpoint_dir`` (with ``ties="peers"``, also
        the index labels of the rows held for their peers)."""
        session = self._require()
        if session.windowed or session.per_event:
            session.checkpoint()
        else:
            # Encoded first: a label that cannot be stored leaves the last checkpoint.
            session.checkpoint(_encode_labels(self._pending))

    def close(self) -> None:
        """Releases the stream's files (a reopened stream continues from the last
        checkpoint). Pushing after ``close`` is an error."""
        self._session = None
        self._closed = True

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _require(self) -> Any:
        if self._session is None:
            if getattr(self, "_closed", False):
                raise ConfigError("the stream is closed")
            raise ConfigError("the stream has no schema yet: pass schema= or push a batch first")
        return self._session

    @property
    def events(self) -> int:
        """Rows pushed so far, including those before the checkpoint it resumed from."""
        return 0 if self._session is None else self._session.events

    @property
    def resumed(self) -> bool:
        """Whether this stream continued from a checkpoint."""
        return False if self._session is None else self._session.resumed

    @property
    def columns(self) -> List[Tuple[str, str]]:
        """Output columns as ``(name, engine type)``."""
        return list(self._require().columns)

    @property
    def schema(self) -> List[Tuple[str, str]]:
        """Input schema as ``(name, engine type)``."""
        return list(self._require().schema)

    def counters(self) -> Dict[str, int]:
        """Engine counters: events, emitted, filtered, too_late, late_in_bounds,
        state_updates."""
        return dict(self._require().counters())


def explain(
    sql: str,
    schema: Optional[SchemaLike] = None,
    time_column: str = "ts",
    time_unit: str = "ms",
    *,
    data: Optional[pd.DataFrame] = None,
) -> str:
    """The query's plan as text (windows, shared filters and group-bys, cursors).

    The column types come from ``data`` (a DataFrame, inferred as ``run`` does) or
    ``schema`` (complete); with neither, every column the query names is taken as a
    float and the time column as an int.
    """
    _unit_nanos(time_unit)
    if data is not None:
        fields: Optional[List[Tuple[str, str]]] = _Layout.infer(
            data, _schema_pairs(schema), complete=False
        ).fields
    elif schema is not None:
        fields = _schema_pairs(schema)
    else:
        fields = None
    return _native.explain(sql, fields, time_column, time_unit)
