//! Sources and sinks: reading events from CSV / JSON Lines files (or stdin) and from the
//! payments generator, and writing result rows as CSV / JSON Lines.
//!
//! This module owns:
//! - the [`Source`] trait and [`open`] / [`resume`] for files and stdin, with schema
//!   inference from the first [`SourceOptions::infer_rows`] rows (buffered, then
//!   replayed, so memory is bounded by `infer_rows`) and `--schema` overrides;
//! - empty inputs: a header-only file (or JSON Lines with only blank lines) yields no
//!   events; an empty file has no columns and needs `--schema` naming them all.
//!
//! # Type inference
//! A CSV column's type is the one most of its non-empty values in the inference rows
//! have (bool, then int, then float; else string), so a numeric column with a few
//! values such as `N/A` stays numeric, and each such row is a bad row reported with its
//! file, line, column and value (or skipped to the dead-letter file) when it is read.
//! A column with no non-empty value there (all empty, or a header-only file) takes its
//! type from [`SourceOptions::type_hints`] (what the query does with it), else string.
//! A JSON Lines column is int, float or bool when all its non-null values are, else
//! string; only-null columns are typed like empty CSV columns. `--schema` overrides
//! replace inferred types, and are the way to type an empty file's columns.
//! - event-time values (module `event_time`): integers in the time unit, or RFC 3339 / ISO
//!   8601 timestamps (`2023-11-14T22:13:20.663Z`, `2023-11-14 22:13:20.663`) converted
//!   to the same integers;
//! - bad-input handling ([`OnError`]): stop with a [`SourceError`] that names the file,
//!   line, column and expected type, or skip the row into a dead-letter file and count it;
//! - exact resume: [`Source::position`] after `k` events, then [`resume`], yields exactly
//!   events `k..` with the same sequence numbers (CSV records with quoted multi-line
//!   fields included);
//! - the payments generator ([`PaymentGenerator`], [`generate_events`]);
//! - the output [`Sink`] (also used for the late-event side output).
//!
//! # Dead-letter format
//! With [`OnError::Skip`] every rejected row becomes one JSON object on its own line of
//! the dead-letter file:
//! `{"file":"payments.csv","line":17,"error":"column \"amount\": expected float, found \"12,5\"","raw":"7,3,\"12,5\",1000"}`.
//! `line` is the 1-based line on which the row starts, `raw` is the row's exact input
//! text (CSV: the whole record, several lines if it has quoted line breaks; the line
//! terminator is not included; invalid UTF-8 is replaced by U+FFFD).
//!
//! # Counting
//! Every data row read is either emitted as an event or counted in
//! [`Source::skipped`] (and written to the dead-letter file): nothing is lost silently.
//! Blank lines (JSON Lines, and empty lines in CSV) are not data rows.

mod delimited;
mod event_time;
mod generator;
mod infer;
pub(crate) mod jsonl;
mod sink;

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::value::{DataType, Event, Schema, TimeUnit, Value};

pub use generator::{generate_events, PaymentGenerator, PaymentOptions};
pub use sink::{is_stream, schema_columns, Sink, SinkFormat};
#[cfg(feature = "kafka")]
pub(crate) use sink::{json_prefixes, json_row};

/// What a source does with a malformed row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnError {
    /// Stop: [`Source::next_event`] returns the [`SourceError::Row`] describing the row.
    Stop,
    /// Skip the row: append it to the `dead_letter` file (see the module docs for the
    /// format) and count it in [`Source::skipped`].
    Skip {
        /// The dead-letter file (created or truncated by [`open`]).
        dead_letter: PathBuf,
    },
}

/// How to read an input file.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceOptions {
    /// Name of the event-time column: integers in `time_unit`, or RFC 3339 / ISO 8601
    /// timestamps converted to them (see the `event_time` module).
    pub time_column: String,
    /// Unit of the event-time column.
    pub time_unit: TimeUnit,
    /// Column types that replace the inferred ones (see [`parse_schema_overrides`]).
    pub schema_overrides: Vec<(String, DataType)>,
    /// What to do with malformed rows.
    pub on_error: OnError,
    /// How many data rows type inference looks at (default 1000; 0 is treated as 1).
    pub infer_rows: usize,
    /// Types for columns that hold no value in the inference rows (an all-empty column,
    /// every column of a header-only file), e.g. how the query uses them
    /// ([`crate::sql::column_type_hints`]); such a column without a hint is a string.
    /// Unlike [`SourceOptions::schema_overrides`], a hint never replaces a type inferred
    /// from values, and a hint naming no column is ignored.
    pub type_hints: Vec<(String, DataType)>,
}

impl SourceOptions {
    /// Options with the given time column, unit ms, no overrides or hints,
    /// [`OnError::Stop`] and 1000 inference rows.
    pub fn new(time_column: impl Into<String>) -> SourceOptions {
        SourceOptions {
            time_column: time_column.into(),
            time_unit: TimeUnit::Ms,
            schema_overrides: Vec::new(),
            on_error: OnError::Stop,
            infer_rows: DEFAULT_INFER_ROWS,
            type_hints: Vec::new(),
        }
    }
}

/// Default number of rows used for type inference.
pub const DEFAULT_INFER_ROWS: usize = 1000;

/// Where a source stands, for checkpoints: the state just after the last event returned.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourcePosition {
    /// Byte offset in the input just after the last consumed row (0 for the generator).
    pub byte_offset: u64,
    /// Number of line breaks (`\n`) before `byte_offset` (0 for the generator).
    pub line: u64,
    /// Sequence number the next event gets (= events emitted so far).
    pub next_seq: u64,
    /// Malformed rows skipped so far.
    pub skipped: u64,
    /// Length of the dead-letter file covering those skipped rows.
    pub dead_letter_bytes: u64,
}

/// A stream of events.
pub trait Source: Send {
    /// The schema of the events' rows.
    fn schema(&self) -> &Schema;
    /// The next event, `Ok(None)` at the end of the input. With [`OnError::Stop`] a
    /// malformed row gives `Err(SourceError::Row{..})`; the source is then positioned
    /// after that row.
    fn next_event(&mut self) -> Result<Option<Event>, SourceError>;
    /// The position just after the last event returned (the resume point).
    fn position(&self) -> SourcePosition;
    /// Malformed rows skipped so far (with [`OnError::Skip`]).
    fn skipped(&self) -> u64;
    /// Flushes and fsyncs the dead-letter file (called at checkpoints, before
    /// [`Source::position`] is recorded).
    fn sync(&mut self) -> Result<(), SourceError>;
}

/// Something wrong with one data row.
#[derive(Clone, Debug, PartialEq)]
pub enum RowProblem {
    /// A value that does not parse as its column's type.
    BadValue {
        /// Column name.
        column: String,
        /// The column's type.
        expected: DataType,
        /// The offending text (a JSON value's text; strings without their quotes).
        found: String,
    },
    /// An event-time value that is neither an integer nor a timestamp.
    BadTime {
        /// The time column's name.
        column: String,
        /// The time column's unit.
        unit: TimeUnit,
        /// The offending text (a JSON value's text; strings without their quotes).
        found: String,
    },
    /// The event-time value is NULL, empty or missing.
    NullTime {
        /// The time column's name.
        column: String,
    },
    /// A CSV row whose field count differs from the header's.
    FieldCount {
        /// The header's field count.
        expected: usize,
        /// This row's field count.
        found: usize,
    },
    /// A JSON Lines row that is not a valid JSON object.
    BadJson {
        /// The JSON parser's message.
        message: String,
    },
    /// A JSON key that is not a column of the (inferred) schema.
    UnknownKey {
        /// The key.
        key: String,
        /// The schema's columns, comma-separated.
        columns: String,
    },
    /// A JSON key that appears twice in one object.
    DuplicateKey {
        /// The key.
        key: String,
    },
}

/// Longest quoted value in messages, in characters.
const QUOTE_MAX: usize = 60;

/// `"text"` with escapes, truncated to [`QUOTE_MAX`] characters (with `...`).
pub(crate) fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(QUOTE_MAX) + 2);
    out.push('"');
    let mut chars = text.chars();
    for c in chars.by_ref().take(QUOTE_MAX) {
        out.extend(c.escape_debug());
    }
    if chars.next().is_some() {
        out.push_str("...");
    }
    out.push('"');
    out
}

impl fmt::Display for RowProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RowProblem::BadValue { column, expected, found } => {
                write!(f, "column \"{column}\": expected {expected}, found {}", quote(found))
            }
            RowProblem::BadTime { column, unit, found } => write!(
                f,
                "column \"{column}\": expected the event time, an integer ({} since \
                 1970-01-01) or an RFC 3339 timestamp such as {} or {} (UTC unless an offset \
                 is given), found {}",
                unit.name(),
                event_time::EXAMPLE,
                event_time::EXAMPLE.replace('T', " ").trim_end_matches('Z'),
                quote(found)
            ),
            RowProblem::NullTime { column } => {
                write!(f, "column \"{column}\": expected int (the event time), found NULL")
            }
            RowProblem::FieldCount { expected, found } => {
                write!(f, "expected {expected} fields (as in the header), found {found}")
            }
            RowProblem::BadJson { message } => write!(f, "invalid JSON object: {message}"),
            RowProblem::UnknownKey { key, columns } => write!(
                f,
                "key \"{key}\" is not a column (columns inferred from the first rows: {columns})"
            ),
            RowProblem::DuplicateKey { key } => write!(f, "key \"{key}\" appears twice"),
        }
    }
}

/// Errors of sources and sinks.
#[derive(Debug)]
pub enum SourceError {
    /// An I/O operation failed.
    Io {
        /// The file (`<stdin>` / `<stdout>` for the standard streams).
        file: String,
        /// What was being done, e.g. "read", "open".
        action: &'static str,
        /// The underlying error.
        error: io::Error,
    },
    /// A malformed data row (with [`OnError::Stop`]).
    Row {
        /// The input file.
        file: String,
        /// 1-based line on which the row starts.
        line: u64,
        /// What is wrong with it.
        problem: RowProblem,
    },
    /// The input's columns cannot form a schema (no header, duplicate column, no time
    /// column, time column not an int, ...).
    Schema {
        /// The input file.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A bad option: a `--schema` spec, an override naming no column, generator
    /// parameters.
    Options {
        /// What is wrong and what was expected.
        message: String,
    },
    /// A checkpointed position cannot be resumed.
    Resume {
        /// The file.
        file: String,
        /// Why.
        message: String,
    },
    /// A sink was given a row with the wrong number of values.
    SinkArity {
        /// The output file.
        file: String,
        /// Number of columns.
        expected: usize,
        /// Number of values given.
        found: usize,
    },
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceError::Io { file, action, error } => {
                write!(f, "{file}: cannot {action}: {error}")
            }
            SourceError::Row { file, line, problem } => write!(f, "{file} line {line}, {problem}"),
            SourceError::Schema { file, message } => write!(f, "{file}: {message}"),
            SourceError::Options { message } => f.write_str(message),
            SourceError::Resume { file, message } => write!(f, "{file}: cannot resume: {message}"),
            SourceError::SinkArity { file, expected, found } => {
                write!(f, "{file}: a row needs {expected} values (one per column), got {found}")
            }
        }
    }
}

impl std::error::Error for SourceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SourceError::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

pub(crate) fn io_err(file: &str, action: &'static str) -> impl FnOnce(io::Error) -> SourceError {
    let file = file.to_string();
    move |error| SourceError::Io { file, action, error }
}

/// Parses `--schema` overrides: `name:type,name:type` with types
/// `int|float|string|bool` (and the aliases [`DataType::parse`] knows). Names may contain
/// `:` (the last one separates the type). An empty string gives no overrides.
pub fn parse_schema_overrides(s: &str) -> Result<Vec<(String, DataType)>, SourceError> {
    let mut out = Vec::new();
    if s.trim().is_empty() {
        return Ok(out);
    }
    for (i, item) in s.split(',').enumerate() {
        let item = item.trim();
        let bad = |why: String| SourceError::Options {
            message: format!(
                "--schema entry {} {}: {why} (expected name:type with type int, float, string \
                 or bool, entries separated by commas)",
                i + 1,
                quote(item)
            ),
        };
        let (name, ty) = item.rsplit_once(':').ok_or_else(|| bad("no `:`".into()))?;
        let name = name.trim();
        if name.is_empty() {
            return Err(bad("empty column name".into()));
        }
        let ty = DataType::parse(ty)
            .ok_or_else(|| bad(format!("unknown type {} for column \"{name}\"", quote(ty))))?;
        if out.iter().any(|(n, _)| n == name) {
            return Err(bad(format!("column \"{name}\" given twice")));
        }
        out.push((name.to_string(), ty));
    }
    Ok(out)
}

/// Input formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// Delimited text with a header row; the delimiter byte.
    Delimited(u8),
    /// JSON Lines.
    JsonLines,
}

/// The format an extension names, if any.
fn format_of_extension(path: &Path) -> Option<Format> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    match ext.as_str() {
        "csv" => Some(Format::Delimited(b',')),
        "tsv" | "tab" => Some(Format::Delimited(b'\t')),
        "jsonl" | "ndjson" | "json" => Some(Format::JsonLines),
        _ => None,
    }
}

/// Reads from `input` until the first byte that is not whitespace (or a UTF-8 BOM) and
/// returns everything read plus the format it suggests (`{` = JSON Lines, else CSV).
fn sniff(input: &mut dyn Read) -> io::Result<(Vec<u8>, Format)> {
    let mut prefix = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match input.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok((prefix, Format::Delimited(b',')));
        }
        prefix.extend_from_slice(&chunk[..n]);
        let body = prefix.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(&prefix);
        if let Some(&b) = body.iter().find(|b| !b.is_ascii_whitespace()) {
            let format = if b == b'{' { Format::JsonLines } else { Format::Delimited(b',') };
            return Ok((prefix, format));
        }
    }
}

/// The name used for `path` in messages.
fn label(path: &Path) -> String {
    if path == Path::new("-") {
        "<stdin>".to_string()
    } else {
        path.display().to_string()
    }
}

/// The table name of an input file, which a query's `FROM` names: the file's name
/// without its extension (`payments` for `data/payments.csv`); `None` for stdin (`-`)
/// and names that are not valid UTF-8.
pub fn table_name(path: &Path) -> Option<String> {
    if path == Path::new("-") {
        return None;
    }
    path.file_stem()?.to_str().map(str::to_string)
}

/// Opens a file (or stdin for `-`) as a source: CSV (`.csv`; `.tsv` tab-separated) or
/// JSON Lines (`.jsonl`, `.ndjson`, `.json`) by extension; stdin and other extensions
/// are sniffed (first non-blank character `{` means JSON Lines, else CSV). Reads the
/// header and the first `infer_rows` rows to infer the schema.
pub fn open(path: &Path, opts: &SourceOptions) -> Result<Box<dyn Source>, SourceError> {
    let name = label(path);
    let (input, format): (Box<dyn Read + Send>, Format) = if path == Path::new("-") {
        let mut stdin = io::stdin();
        let (prefix, format) = sniff(&mut stdin).map_err(io_err(&name, "read"))?;
        (Box::new(io::Cursor::new(prefix).chain(stdin)), format)
    } else {
        let mut file = File::open(path).map_err(io_err(&name, "open"))?;
        let format = match format_of_extension(path) {
            Some(f) => f,
            None => {
                let (_, f) = sniff(&mut file).map_err(io_err(&name, "read"))?;
                file.seek(SeekFrom::Start(0)).map_err(io_err(&name, "seek"))?;
                f
            }
        };
        (Box::new(file), format)
    };
    let dead = match &opts.on_error {
        OnError::Stop => None,
        OnError::Skip { dead_letter } => Some(DeadLetter::create(dead_letter)?),
    };
    Ok(match format {
        Format::Delimited(d) => Box::new(delimited::CsvSource::open(name, input, d, opts, dead)?),
        Format::JsonLines => Box::new(jsonl::JsonSource::open(name, input, opts, dead)?),
    })
}

/// Reopens a file source at a checkpointed position: seeks to `pos.byte_offset` and
/// continues with its line, sequence and skip counters; the schema is the one recorded
/// at the checkpoint (inference is not re-run). With [`OnError::Skip`] the dead-letter
/// file is truncated to `pos.dead_letter_bytes` and appended to. Stdin cannot be
/// resumed.
pub fn resume(
    path: &Path,
    opts: &SourceOptions,
    schema: &Schema,
    pos: &SourcePosition,
) -> Result<Box<dyn Source>, SourceError> {
    let name = label(path);
    if path == Path::new("-") {
        return Err(SourceError::Resume {
            file: name,
            message: "standard input cannot be re-read; resume needs a file".into(),
        });
    }
    let mut file = File::open(path).map_err(io_err(&name, "open"))?;
    let len = file.metadata().map_err(io_err(&name, "stat"))?.len();
    if len < pos.byte_offset {
        return Err(SourceError::Resume {
            file: name,
            message: format!(
                "the checkpoint is at byte {} but the file has only {len} bytes",
                pos.byte_offset
            ),
        });
    }
    let format = match format_of_extension(path) {
        Some(f) => f,
        None => sniff(&mut file).map_err(io_err(&name, "read"))?.1,
    };
    file.seek(SeekFrom::Start(pos.byte_offset)).map_err(io_err(&name, "seek"))?;
    let dead = match &opts.on_error {
        OnError::Stop => None,
        OnError::Skip { dead_letter } => {
            Some(DeadLetter::resume(dead_letter, pos.dead_letter_bytes)?)
        }
    };
    let core = Core {
        label: name,
        schema: schema.clone(),
        next_seq: pos.next_seq,
        skipped: pos.skipped,
        byte_offset: pos.byte_offset,
        line: pos.line,
        dead,
    };
    let input: Box<dyn Read + Send> = Box::new(file);
    Ok(match format {
        Format::Delimited(d) => Box::new(delimited::CsvSource::resume(core, input, d)),
        Format::JsonLines => Box::new(jsonl::JsonSource::resume(core, input)),
    })
}

/// The dead-letter file of a skipping source.
struct DeadLetter {
    label: String,
    out: BufWriter<File>,
    bytes: u64,
    scratch: Vec<u8>,
}

/// One dead-letter record.
#[derive(serde::Serialize)]
struct DeadRecord<'a> {
    file: &'a str,
    line: u64,
    error: String,
    raw: std::borrow::Cow<'a, str>,
}

/// Reopens an output file at a checkpoint: truncates it to the `len` bytes the
/// checkpoint covered (an error if it is shorter or gone: data the checkpoint relies on
/// is lost) and leaves it positioned at the end for appending. `what` goes into that
/// error ("the checkpoint covers N bytes{what} ..."). Returns the file's label and the
/// file. A FIFO or device ([`is_stream`]) cannot be cut back: it is opened for writing
/// as it is, and what follows is written after what the run before wrote.
pub(crate) fn reopen_truncated(
    path: &Path,
    len: u64,
    what: &str,
) -> Result<(String, File), SourceError> {
    let label = path.display().to_string();
    if is_stream(path) {
        let file = OpenOptions::new().write(true).open(path).map_err(io_err(&label, "open"))?;
        return Ok((label, file));
    }
    if len > 0 && !path.exists() {
        return Err(SourceError::Resume {
            file: label,
            message: format!(
                "the checkpoint covers {len} bytes{what} but the file is gone (deleted or \
                 moved): put it back, or start over without --resume in an empty checkpoint \
                 directory"
            ),
        });
    }
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(len == 0)
        .truncate(false)
        .open(path)
        .map_err(io_err(&label, "open"))?;
    let have = file.metadata().map_err(io_err(&label, "stat"))?.len();
    if have < len {
        return Err(SourceError::Resume {
            file: label,
            message: format!(
                "the checkpoint covers {len} bytes{what} but the file has only {have}"
            ),
        });
    }
    file.set_len(len).map_err(io_err(&label, "truncate"))?;
    file.seek(SeekFrom::Start(len)).map_err(io_err(&label, "seek"))?;
    Ok((label, file))
}

impl DeadLetter {
    fn create(path: &Path) -> Result<DeadLetter, SourceError> {
        let label = path.display().to_string();
        let file = File::create(path).map_err(io_err(&label, "create the dead-letter file"))?;
        Ok(DeadLetter { label, out: BufWriter::new(file), bytes: 0, scratch: Vec::new() })
    }

    fn resume(path: &Path, len: u64) -> Result<DeadLetter, SourceError> {
        let (label, file) = reopen_truncated(path, len, " of dead letters")?;
        Ok(DeadLetter { label, out: BufWriter::new(file), bytes: len, scratch: Vec::new() })
    }

    fn write(
        &mut self,
        file: &str,
        line: u64,
        problem: &RowProblem,
        raw: &[u8],
    ) -> Result<(), SourceError> {
        let record = DeadRecord {
            file,
            line,
            error: problem.to_string(),
            raw: String::from_utf8_lossy(raw),
        };
        self.scratch.clear();
        serde_json::to_writer(&mut self.scratch, &record).map_err(|e| SourceError::Io {
            file: self.label.clone(),
            action: "write a dead letter",
            error: io::Error::other(e),
        })?;
        self.scratch.push(b'\n');
        self.out.write_all(&self.scratch).map_err(io_err(&self.label, "write"))?;
        self.bytes += self.scratch.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), SourceError> {
        self.out.flush().map_err(io_err(&self.label, "flush"))?;
        let file = self.out.get_ref();
        // A FIFO or device (a dead-letter file on /dev/null) has nothing to fsync.
        if file.metadata().map_err(io_err(&self.label, "stat"))?.is_file() {
            file.sync_data().map_err(io_err(&self.label, "fsync"))?;
        }
        Ok(())
    }
}

/// State shared by the file sources: counters, schema, dead letters.
struct Core {
    label: String,
    schema: Schema,
    next_seq: u64,
    skipped: u64,
    /// Input offset just after the last consumed row.
    byte_offset: u64,
    /// Line breaks before `byte_offset`.
    line: u64,
    dead: Option<DeadLetter>,
}

impl Core {
    fn new(label: String, schema: Schema, dead: Option<DeadLetter>) -> Core {
        Core { label, schema, next_seq: 0, skipped: 0, byte_offset: 0, line: 0, dead }
    }

    fn position(&self) -> SourcePosition {
        SourcePosition {
            byte_offset: self.byte_offset,
            line: self.line,
            next_seq: self.next_seq,
            skipped: self.skipped,
            dead_letter_bytes: self.dead.as_ref().map_or(0, |d| d.bytes),
        }
    }

    /// Handles a malformed row starting on `line`: an error in stop mode, a dead letter
    /// in skip mode.
    fn reject(&mut self, line: u64, problem: RowProblem, raw: &[u8]) -> Result<(), SourceError> {
        match &mut self.dead {
            None => Err(SourceError::Row { file: self.label.clone(), line, problem }),
            Some(dead) => {
                dead.write(&self.label, line, &problem, trim_terminators(raw))?;
                self.skipped += 1;
                Ok(())
            }
        }
    }

    /// Turns a parsed row into the next event (checking the time value).
    fn event(&mut self, row: Vec<Value>) -> Result<Event, RowProblem> {
        let ti = self.schema.time_index();
        let time = match row.get(ti) {
            Some(Value::Int(t)) => *t,
            Some(Value::Null) | None => {
                return Err(RowProblem::NullTime { column: self.schema.fields()[ti].name.clone() })
            }
            Some(other) => {
                return Err(RowProblem::BadValue {
                    column: self.schema.fields()[ti].name.clone(),
                    expected: DataType::Int,
                    found: other.to_string(),
                })
            }
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        Ok(Event { time, seq, row })
    }

    fn sync(&mut self) -> Result<(), SourceError> {
        match &mut self.dead {
            Some(d) => d.sync(),
            None => Ok(()),
        }
    }
}

/// `raw` without leading blank lines and without its trailing line terminator.
fn trim_terminators(raw: &[u8]) -> &[u8] {
    let start = raw.iter().position(|&b| b != b'\n' && b != b'\r').unwrap_or(raw.len());
    let mut end = raw.len();
    while end > start && matches!(raw[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    &raw[start..end]
}

#[cfg(test)]
mod tests;
