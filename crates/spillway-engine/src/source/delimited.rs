//! CSV / TSV source: a header row, then records parsed by the `csv` crate (quoted fields,
//! including quoted line breaks). Positions come from the csv reader's byte and line
//! counters; the bytes the reader consumes are kept (a [`Tee`]) until their record is
//! processed, so a rejected record's exact text and start line are known.

use std::collections::VecDeque;
use std::io::{self, Read};

use csv::ByteRecord;

use super::infer::{build_schema, empty_input_schema, parse_cell, CellTypes};
use super::{event_time, Core, DeadLetter, RowProblem, Source, SourceError, SourceOptions};
use super::{SourcePosition, Value};
use crate::value::{DataType, Event, Schema};

/// Bytes of consumed input kept before they are released.
const KEEP: usize = 1 << 20;

/// A reader that remembers what it has read (from local offset `start` on).
struct Tee {
    inner: Box<dyn Read + Send>,
    buf: Vec<u8>,
    /// Local offset of `buf[0]`.
    start: u64,
}

impl Read for Tee {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(out)?;
        self.buf.extend_from_slice(&out[..n]);
        Ok(n)
    }
}

impl Tee {
    /// The bytes at local offsets `from..to` (empty if no longer kept).
    fn slice(&self, from: u64, to: u64) -> &[u8] {
        let a = from.saturating_sub(self.start) as usize;
        let b = to.saturating_sub(self.start) as usize;
        self.buf.get(a.min(b)..b.min(self.buf.len())).unwrap_or(&[])
    }

    /// Forgets bytes before local offset `upto` once enough have piled up. Records are
    /// processed in input order (inference replays them in order too), so bytes before
    /// the end of the record just processed are never needed again.
    fn release_before(&mut self, upto: u64) {
        let n = upto.saturating_sub(self.start) as usize;
        if n >= KEEP && n <= self.buf.len() {
            self.buf.drain(..n);
            self.start = upto;
        }
    }
}

/// A record read during inference, waiting to be replayed.
struct Pending {
    record: ByteRecord,
    /// Local start byte and csv line counter at the record's start.
    start_byte: u64,
    start_line: u64,
    /// Local byte and csv line counter after it.
    end_byte: u64,
    end_line: u64,
}

/// A CSV or TSV file source.
pub(super) struct CsvSource {
    core: Core,
    rdr: csv::Reader<Tee>,
    /// Global offset and line-break count where the csv reader started.
    base_byte: u64,
    base_line: u64,
    replay: VecDeque<Pending>,
    record: ByteRecord,
    types: Vec<DataType>,
}

fn reader(input: Box<dyn Read + Send>, delimiter: u8) -> csv::Reader<Tee> {
    let tee = Tee { inner: input, buf: Vec::new(), start: 0 };
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(delimiter)
        .buffer_capacity(64 * 1024)
        .from_reader(tee)
}

fn csv_err(file: &str, e: csv::Error) -> SourceError {
    let error = match e.into_kind() {
        csv::ErrorKind::Io(e) => e,
        other => io::Error::other(format!("{other:?}")),
    };
    SourceError::Io { file: file.to_string(), action: "read", error }
}

impl CsvSource {
    /// Reads the header and up to `opts.infer_rows` records, infers the schema.
    pub(super) fn open(
        label: String,
        input: Box<dyn Read + Send>,
        delimiter: u8,
        opts: &SourceOptions,
        dead: Option<DeadLetter>,
    ) -> Result<CsvSource, SourceError> {
        let mut rdr = reader(input, delimiter);
        let mut header = ByteRecord::new();
        if !rdr.read_byte_record(&mut header).map_err(|e| csv_err(&label, e))? {
            // No header: the columns can only come from --schema.
            let schema = empty_input_schema(&label, opts)?;
            let types = schema.fields().iter().map(|f| f.ty).collect();
            return Ok(CsvSource {
                core: Core::new(label, schema, dead),
                rdr,
                base_byte: 0,
                base_line: 0,
                replay: VecDeque::new(),
                record: ByteRecord::new(),
                types,
            });
        }
        let mut names = Vec::with_capacity(header.len());
        for (i, h) in header.iter().enumerate() {
            let name = std::str::from_utf8(h).map_err(|_| SourceError::Schema {
                file: label.clone(),
                message: format!("header field {} is not valid UTF-8", i + 1),
            })?;
            names.push(name.trim().to_string());
        }
        let header_end = rdr.position().clone();
        let mut inference = CellTypes::new(names.len());
        let mut replay = VecDeque::new();
        let mut start = header_end.clone();
        while replay.len() < opts.infer_rows.max(1) {
            let mut record = ByteRecord::new();
            if !rdr.read_byte_record(&mut record).map_err(|e| csv_err(&label, e))? {
                break;
            }
            if record.len() == names.len() {
                inference.observe(record.iter());
            }
            let end = rdr.position().clone();
            replay.push_back(Pending {
                record,
                start_byte: start.byte(),
                start_line: start.line(),
                end_byte: end.byte(),
                end_line: end.line(),
            });
            start = end;
        }
        let schema = build_schema(&label, names, inference.types(), opts)?;
        let types = schema.fields().iter().map(|f| f.ty).collect();
        let mut core = Core::new(label, schema, dead);
        core.byte_offset = header_end.byte();
        core.line = header_end.line() - 1;
        Ok(CsvSource {
            core,
            rdr,
            base_byte: 0,
            base_line: 0,
            replay,
            record: ByteRecord::new(),
            types,
        })
    }

    /// Continues at `core`'s position; `input` is already positioned there.
    pub(super) fn resume(core: Core, input: Box<dyn Read + Send>, delimiter: u8) -> CsvSource {
        let types = core.schema.fields().iter().map(|f| f.ty).collect();
        CsvSource {
            base_byte: core.byte_offset,
            base_line: core.line,
            core,
            rdr: reader(input, delimiter),
            replay: VecDeque::new(),
            record: ByteRecord::new(),
            types,
        }
    }

    /// Reads the next record into `self.record`, advancing the position past it.
    /// Returns the record's local start byte and csv line counter, and its local end.
    fn next_record(&mut self) -> Result<Option<(u64, u64, u64)>, SourceError> {
        let (start_byte, start_line, end_byte, end_line) = match self.replay.pop_front() {
            Some(p) => {
                self.record = p.record;
                (p.start_byte, p.start_line, p.end_byte, p.end_line)
            }
            None => {
                let start = self.rdr.position().clone();
                let more = self
                    .rdr
                    .read_byte_record(&mut self.record)
                    .map_err(|e| csv_err(&self.core.label, e))?;
                if !more {
                    return Ok(None);
                }
                let end = self.rdr.position();
                (start.byte(), start.line(), end.byte(), end.line())
            }
        };
        self.core.byte_offset = self.base_byte + end_byte;
        self.core.line = self.base_line + end_line - 1;
        Ok(Some((start_byte, start_line, end_byte)))
    }

    /// Parses `self.record` into a row (the time column as [`event_time`] reads it).
    fn parse(&self) -> Result<Vec<Value>, RowProblem> {
        if self.record.len() != self.types.len() {
            return Err(RowProblem::FieldCount {
                expected: self.types.len(),
                found: self.record.len(),
            });
        }
        let schema = &self.core.schema;
        let ti = schema.time_index();
        let mut row = Vec::with_capacity(self.types.len());
        for (i, (cell, &ty)) in self.record.iter().zip(&self.types).enumerate() {
            if i == ti && !cell.is_empty() {
                let text = String::from_utf8_lossy(cell);
                match event_time::parse_time(&text, schema.time_unit()) {
                    Some(t) => row.push(Value::Int(t)),
                    None => {
                        return Err(RowProblem::BadTime {
                            column: schema.fields()[i].name.clone(),
                            unit: schema.time_unit(),
                            found: text.into_owned(),
                        })
                    }
                }
                continue;
            }
            match parse_cell(cell, ty) {
                Some(v) => row.push(v),
                None => {
                    return Err(RowProblem::BadValue {
                        column: self.core.schema.fields()[i].name.clone(),
                        expected: ty,
                        found: String::from_utf8_lossy(cell).into_owned(),
                    })
                }
            }
        }
        Ok(row)
    }
}

impl Source for CsvSource {
    fn schema(&self) -> &Schema {
        &self.core.schema
    }

    fn next_event(&mut self) -> Result<Option<Event>, SourceError> {
        loop {
            let Some((start_byte, start_line, end_byte)) = self.next_record()? else {
                return Ok(None);
            };
            let result = self.parse().and_then(|row| self.core.event(row));
            let outcome = match result {
                Ok(event) => Ok(Some(event)),
                Err(problem) => {
                    let raw = self.rdr.get_ref().slice(start_byte, end_byte);
                    // The record starts after any blank lines / CRLF remainder the csv
                    // reader skipped on its way to it.
                    let skipped_breaks = raw
                        .iter()
                        .take_while(|&&b| b == b'\n' || b == b'\r')
                        .filter(|&&b| b == b'\n')
                        .count() as u64;
                    let line = self.base_line + start_line + skipped_breaks;
                    self.core.reject(line, problem, raw).map(|()| None)
                }
            };
            self.rdr.get_mut().release_before(end_byte);
            match outcome {
                Ok(Some(event)) => return Ok(Some(event)),
                Ok(None) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn position(&self) -> SourcePosition {
        self.core.position()
    }

    fn skipped(&self) -> u64 {
        self.core.skipped
    }

    fn sync(&mut self) -> Result<(), SourceError> {
        self.core.sync()
    }
}

/// Lets tests see which columns a CSV source inferred without a file (`None`: no value
/// to infer from).
#[cfg(test)]
pub(super) fn infer_types(data: &str) -> Vec<Option<DataType>> {
    let mut rdr = reader(Box::new(io::Cursor::new(data.as_bytes().to_vec())), b',');
    let mut header = ByteRecord::new();
    let _ = rdr.read_byte_record(&mut header);
    let mut t = CellTypes::new(header.len());
    let mut rec = ByteRecord::new();
    while rdr.read_byte_record(&mut rec).unwrap_or(false) {
        if rec.len() == header.len() {
            t.observe(rec.iter());
        }
    }
    t.types()
}
