//! Output sink: result rows (or late events, for the side output) as CSV with a header or
//! as JSON Lines, buffered, with `sync` for checkpoints and `resume` for restarts.
//!
//! CSV: values in [`Value`]'s `Display` form, NULL as an empty cell; a field containing
//! `,`, `"`, `\r` or `\n` (or an empty string, or any empty cell of a one-column file,
//! which would otherwise be a blank line) is quoted with `"` doubled.
//! JSON Lines: one object per row with the columns in order, NULL as `null`, floats as
//! JSON numbers (non-finite ones as `null`), strings escaped.
//!
//! # Files that are not regular files
//! The sink writes where it is told: `-` is stdout, and a FIFO, a device (`/dev/null`)
//! or a pipe is opened and written like a file. Such an output is a stream: `sync` only
//! flushes it (fsync does not apply), and [`Sink::resume`] cannot cut it back to a
//! checkpoint's length, so it continues writing after what was written before the crash
//! (a reader of a FIFO sees the rows after the last checkpoint twice). Whether a path is
//! staged under a temporary name and renamed at the end is the job's choice
//! ([`is_stream`] tells it which paths must not be renamed over).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::{io_err, SourceError};
use crate::operator::windowed::Missed;
use crate::value::{Event, Schema, Value};

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkFormat {
    /// CSV with a header row.
    Csv,
    /// JSON Lines.
    JsonLines,
}

impl SinkFormat {
    /// The format for an output path: `.jsonl`, `.ndjson` and `.json` are JSON Lines,
    /// anything else CSV.
    pub fn of_path(path: &Path) -> SinkFormat {
        match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase) {
            Some(e) if e == "jsonl" || e == "ndjson" || e == "json" => SinkFormat::JsonLines,
            _ => SinkFormat::Csv,
        }
    }
}

/// Where the bytes go.
enum Out {
    /// A regular file: `sync` fsyncs it.
    File(BufWriter<File>),
    /// A FIFO, device or other non-regular file: `sync` only flushes.
    Stream(BufWriter<File>),
    Stdout(BufWriter<io::Stdout>),
}

/// Whether `path` names stdout (`-`) or an existing file that is not a regular file (a
/// FIFO, a character or block device, a socket; symlinks are followed): an output that
/// must be written in place, never replaced by renaming a finished file over it.
/// A path that does not exist yet, or cannot be inspected, is not a stream.
pub fn is_stream(path: &Path) -> bool {
    path == Path::new("-") || std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// Wraps an opened output file: a regular file, or a stream written in place.
fn out_of(file: File, label: &str) -> Result<Out, SourceError> {
    let regular = file.metadata().map_err(io_err(label, "stat"))?.is_file();
    let w = BufWriter::with_capacity(64 * 1024, file);
    Ok(if regular { Out::File(w) } else { Out::Stream(w) })
}

/// A buffered CSV / JSON Lines writer.
pub struct Sink {
    label: String,
    out: Out,
    format: SinkFormat,
    columns: usize,
    /// JSON Lines: per column the text before its value (`{"a":`, `,"b":`).
    prefixes: Vec<Vec<u8>>,
    /// The row being formatted (reused).
    line: Vec<u8>,
    bytes: u64,
    rows: u64,
}

/// Per column, the JSON text before its value in a row object (`{"a":`, `,"b":`).
pub(crate) fn json_prefixes(columns: &[String]) -> Vec<Vec<u8>> {
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut p = Vec::with_capacity(c.len() + 4);
            p.push(if i == 0 { b'{' } else { b',' });
            // Writing a &str into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut p, c);
            p.push(b':');
            p
        })
        .collect()
}

/// Appends one row as a JSON object (no newline) to `line`: NULL as `null`, floats as
/// JSON numbers (non-finite ones as `null`), strings escaped.
pub(crate) fn json_row(line: &mut Vec<u8>, prefixes: &[Vec<u8>], values: &[Value]) {
    for (v, prefix) in values.iter().zip(prefixes) {
        line.extend_from_slice(prefix);
        // Writes into a Vec cannot fail.
        let _ = match v {
            Value::Null => line.write_all(b"null"),
            Value::Int(i) => write!(line, "{i}"),
            Value::Float(f) if f.is_finite() => {
                serde_json::to_writer(&mut *line, f).map_err(io::Error::other)
            }
            Value::Float(_) => line.write_all(b"null"),
            Value::Str(s) => serde_json::to_writer(&mut *line, &**s).map_err(io::Error::other),
            Value::Bool(b) => write!(line, "{b}"),
        };
    }
    if prefixes.is_empty() {
        line.push(b'{');
    }
    line.push(b'}');
}

/// The column names of a schema, for a side-output sink of raw events.
pub fn schema_columns(schema: &Schema) -> Vec<String> {
    schema.fields().iter().map(|f| f.name.clone()).collect()
}

impl Sink {
    fn new(label: String, out: Out, format: SinkFormat, columns: &[String]) -> Sink {
        let prefixes = json_prefixes(columns);
        Sink {
            label,
            out,
            format,
            columns: columns.len(),
            prefixes,
            line: Vec::with_capacity(256),
            bytes: 0,
            rows: 0,
        }
    }

    /// A sink writing to `path` (created or truncated; format by extension, see
    /// [`SinkFormat::of_path`]; a FIFO or device is opened and written in place) or, for
    /// `None` or `-`, to stdout as CSV. CSV output starts with the header.
    pub fn create(path: Option<&Path>, columns: &[String]) -> Result<Sink, SourceError> {
        let path = path.filter(|p| *p != Path::new("-"));
        let mut sink = match path {
            None => Sink::new(
                "<stdout>".into(),
                Out::Stdout(BufWriter::with_capacity(64 * 1024, io::stdout())),
                SinkFormat::Csv,
                columns,
            ),
            Some(p) => {
                let label = p.display().to_string();
                let file = File::create(p).map_err(io_err(&label, "create"))?;
                let out = out_of(file, &label)?;
                Sink::new(label, out, SinkFormat::of_path(p), columns)
            }
        };
        sink.header(columns)?;
        Ok(sink)
    }

    /// A sink for the late-event side output: the input schema's columns, rows written
    /// with [`Sink::write_event`].
    pub fn create_side_output(path: &Path, schema: &Schema) -> Result<Sink, SourceError> {
        Sink::create(Some(path), &schema_columns(schema))
    }

    /// The columns of a windowed aggregation's side output: the input schema's, then
    /// `window_start` and `window_end` (one row per event and window it missed; see
    /// [`crate::operator::windowed`]).
    pub fn window_side_output_columns(schema: &Schema) -> Vec<String> {
        let mut columns = schema_columns(schema);
        columns.extend(["window_start".to_string(), "window_end".to_string()]);
        columns
    }

    /// A sink for a windowed aggregation's side output
    /// ([`Sink::window_side_output_columns`]), rows written with [`Sink::write_missed`].
    pub fn create_window_side_output(path: &Path, schema: &Schema) -> Result<Sink, SourceError> {
        Sink::create(Some(path), &Sink::window_side_output_columns(schema))
    }

    /// Writes the rows of what one event missed: its row and one missed window per row.
    pub fn write_missed(&mut self, missed: &Missed) -> Result<(), SourceError> {
        let mut values = Vec::with_capacity(missed.row.len() + 2);
        for &(start, end) in &missed.windows {
            values.clear();
            values.extend_from_slice(&missed.row);
            values.extend([Value::Int(start), Value::Int(end)]);
            self.write_row(&values)?;
        }
        Ok(())
    }

    /// Reopens `path` after a restart: truncates it to `len` bytes (the length a
    /// [`Sink::sync`] returned at the checkpoint) and appends. Errors if the file is
    /// shorter than `len`. A CSV file truncated to 0 bytes gets its header again. A FIFO
    /// or device cannot be cut back: it is written on from here (see the module docs).
    pub fn resume(path: &Path, columns: &[String], len: u64) -> Result<Sink, SourceError> {
        let (label, file) = super::reopen_truncated(path, len, "")?;
        let out = out_of(file, &label)?;
        let mut sink = Sink::new(label, out, SinkFormat::of_path(path), columns);
        sink.bytes = len;
        if len == 0 {
            sink.header(columns)?;
        }
        Ok(sink)
    }

    fn header(&mut self, columns: &[String]) -> Result<(), SourceError> {
        if self.format != SinkFormat::Csv {
            return Ok(());
        }
        self.line.clear();
        for (i, c) in columns.iter().enumerate() {
            if i > 0 {
                self.line.push(b',');
            }
            csv_field(&mut self.line, c.as_bytes(), columns.len() == 1);
        }
        self.line.push(b'\n');
        self.flush_line()
    }

    fn flush_line(&mut self) -> Result<(), SourceError> {
        let r = match &mut self.out {
            Out::File(w) | Out::Stream(w) => w.write_all(&self.line),
            Out::Stdout(w) => w.write_all(&self.line),
        };
        r.map_err(io_err(&self.label, "write"))?;
        self.bytes += self.line.len() as u64;
        Ok(())
    }

    /// The output format.
    pub fn format(&self) -> SinkFormat {
        self.format
    }

    /// Writes one row (one value per column), buffered.
    pub fn write_row(&mut self, values: &[Value]) -> Result<(), SourceError> {
        if values.len() != self.columns {
            return Err(SourceError::SinkArity {
                file: self.label.clone(),
                expected: self.columns,
                found: values.len(),
            });
        }
        self.line.clear();
        match self.format {
            SinkFormat::Csv => {
                let lone = self.columns == 1;
                for (i, v) in values.iter().enumerate() {
                    if i > 0 {
                        self.line.push(b',');
                    }
                    match v {
                        Value::Str(s) => csv_field(&mut self.line, s.as_bytes(), true),
                        Value::Null if lone => self.line.extend_from_slice(b"\"\""),
                        // Numbers and bools never need quoting; writes to a Vec cannot fail.
                        other => {
                            let _ = write!(self.line, "{other}");
                        }
                    }
                }
            }
            SinkFormat::JsonLines => json_row(&mut self.line, &self.prefixes, values),
        }
        self.line.push(b'\n');
        self.flush_line()?;
        self.rows += 1;
        Ok(())
    }

    /// Writes a raw event (the side output of late events).
    pub fn write_event(&mut self, event: &Event) -> Result<(), SourceError> {
        self.write_row(&event.row)
    }

    /// Flushes and fsyncs (stdout, FIFOs and devices: flushes); returns the output's
    /// length in bytes so far.
    pub fn sync(&mut self) -> Result<u64, SourceError> {
        match &mut self.out {
            Out::File(w) => {
                w.flush().map_err(io_err(&self.label, "flush"))?;
                w.get_ref().sync_data().map_err(io_err(&self.label, "fsync"))?;
            }
            Out::Stream(w) => w.flush().map_err(io_err(&self.label, "flush"))?,
            Out::Stdout(w) => w.flush().map_err(io_err(&self.label, "flush"))?,
        }
        Ok(self.bytes)
    }

    /// Rows written by this sink (since it was created or resumed).
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes of output so far (including a resumed file's kept prefix).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// Appends a CSV field, quoting it if it contains a delimiter, quote or line break (or is
/// empty and `quote_empty`).
fn csv_field(out: &mut Vec<u8>, s: &[u8], quote_empty: bool) {
    let needs =
        (s.is_empty() && quote_empty) || s.iter().any(|b| matches!(b, b',' | b'"' | b'\n' | b'\r'));
    if !needs {
        out.extend_from_slice(s);
        return;
    }
    out.push(b'"');
    for &b in s {
        if b == b'"' {
            out.push(b'"');
        }
        out.push(b);
    }
    out.push(b'"');
}
