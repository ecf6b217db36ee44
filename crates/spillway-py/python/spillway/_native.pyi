"""Type stubs of the compiled core (`crates/spillway-py/src/lib.rs`); the public API is the
`spillway` module, which wraps these."""

from typing import Any, Dict, List, Optional, Tuple, Union

# A column as the core hands it over: (type name, payload, null mask); payloads are
# little-endian bytes for int/float/bool columns and a list of str for strings.
Column = Tuple[str, Any, Any]
# (name, type name) pairs: "int", "float", "string", "bool".
Fields = List[Tuple[str, str]]

class SpillwayError(Exception): ...
class QueryError(SpillwayError): ...
class InputError(SpillwayError): ...
class ConfigError(SpillwayError): ...
class StoreError(SpillwayError): ...
class CheckpointError(SpillwayError): ...

class Session:
    """One query over pushed batches (the engine's `Session`)."""

    def __init__(
        self,
        sql: str,
        fields: Fields,
        time_column: str,
        time_unit: str,
        store: str,
        memory_budget: int,
        expected_keys: Optional[int],
        allowed_lateness: int,
        compression: str,
        dir: Optional[str],
        ties: str = "per-event",
    ) -> None: ...
    @property
    def columns(self) -> Fields: ...
    @property
    def schema(self) -> Fields: ...
    @property
    def events(self) -> int: ...
    @property
    def resumed(self) -> bool: ...
    @property
    def tag(self) -> Optional[bytes]: ...
    @property
    def windowed(self) -> bool: ...
    @property
    def per_event(self) -> bool: ...
    def counters(self) -> Dict[str, int]: ...
    def push(self, columns: List[Column], n: int) -> Tuple[List[Column], bytes, bytes]:
        """(output columns, emitted row positions, too-late row positions); positions
        are little-endian int64 bytes."""
    def finish(self) -> List[Column]: ...
    def checkpoint(self, tag: Optional[bytes] = None) -> None: ...

def run_file(
    sql: str,
    path: str,
    time_column: str,
    time_unit: str,
    schema: Optional[str],
    store: str,
    memory_budget: int,
    expected_keys: Optional[int],
    allowed_lateness: int,
    compression: str,
    ties: str = "per-event",
) -> Tuple[Fields, List[Column], Fields, List[Column], Dict[str, int]]: ...
def explain(sql: str, fields: Optional[Fields], time_column: str, time_unit: str) -> str: ...
def checkpointed_schema(dir: str) -> Optional[Tuple[Fields, str]]: ...
def parse_schema(schema: Union[str, Fields]) -> Fields:
    """The schema, as the `--schema` string or (name, type) pairs, checked by the engine
    with every type under its engine name; InputError names the column and the bad type."""
def parse_duration(s: str, time_unit: str) -> int: ...
def parse_size(s: str) -> int: ...
