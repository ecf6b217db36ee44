"""Type stubs of the spillway package (see __init__.py for the full documentation)."""

import datetime
import os
from typing import Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Union, overload

import pandas as pd

SchemaLike = Union[Mapping[str, str], str, Sequence[Tuple[str, str]]]
Duration = Union[int, str, datetime.timedelta]

__version__: str
INFER_ROWS: int

class LateRowsWarning(UserWarning):
    """Rows later than the allowed lateness were not scored (use return_late=True)."""

class SpillwayError(Exception):
    """Base class of every error Spillway raises."""

class QueryError(SpillwayError):
    """Bad SQL, unknown column or window, or an unplannable query (line/column given)."""

class InputError(SpillwayError):
    """Input that does not fit the schema: missing column, bad value (row and column given)."""

class ConfigError(SpillwayError):
    """A bad option value."""

class StoreError(SpillwayError):
    """The state store, event reservoir or aggregation state failed."""

class CheckpointError(SpillwayError):
    """A checkpoint could not be written, read, or matched to this stream."""

@overload
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
    return_late: Literal[False] = False,
    ties: Literal["per-event", "peers"] = "per-event",
) -> pd.DataFrame:
    """Scores every row of a DataFrame (or CSV / JSON Lines file) with the query's
    sliding-window metrics; one output row per input row, in input order."""
@overload
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
    return_late: Literal[True],
    ties: Literal["per-event", "peers"] = "per-event",
) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """As above, plus the rows later than the allowed lateness."""

class Stream:
    """An incremental query over pushed batches, with checkpoints and exact resume."""

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
        ties: Literal["per-event", "peers"] = "per-event",
    ) -> None: ...
    @overload
    def push(self, df: pd.DataFrame, return_late: Literal[False] = False) -> pd.DataFrame:
        """Scores the batch's rows and returns their results."""
    @overload
    def push(self, df: pd.DataFrame, return_late: Literal[True]) -> Tuple[pd.DataFrame, pd.DataFrame]:
        """As above, plus the batch's rows later than the allowed lateness."""
    def finish(self) -> pd.DataFrame:
        """End of input: a windowed aggregation's rows of the windows still open."""
    def checkpoint(self) -> None:
        """Makes an atomic checkpoint in ``checkpoint_dir``."""
    def close(self) -> None:
        """Releases the stream's files."""
    def __enter__(self) -> "Stream": ...
    def __exit__(self, *exc: object) -> None: ...
    @property
    def events(self) -> int:
        """Rows pushed so far (including before the resumed checkpoint)."""
    @property
    def resumed(self) -> bool:
        """Whether this stream continued from a checkpoint."""
    @property
    def columns(self) -> List[Tuple[str, str]]:
        """Output columns as (name, engine type)."""
    @property
    def schema(self) -> List[Tuple[str, str]]:
        """Input schema as (name, engine type)."""
    def counters(self) -> Dict[str, int]:
        """Engine counters."""

def explain(
    sql: str,
    schema: Optional[SchemaLike] = None,
    time_column: str = "ts",
    time_unit: str = "ms",
    *,
    data: Optional[pd.DataFrame] = None,
) -> str:
    """The query's plan as text."""
