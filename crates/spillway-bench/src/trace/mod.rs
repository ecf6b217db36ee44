//! State-access traces: the records a workload's operators issue, stored in Spillway's
//! checksummed binary format ([`binary`]) or in Gadget's text format ([`gadget`]),
//! conversion between the two ([`convert`]), and the characterization of a trace
//! ([`stats`]: op mix, amplification, key-frequency KS distance, LRU stack distances and
//! miss-ratio curve, key-sequence uniqueness, working set, key time-to-live), opening
//! trace files whatever their compression ([`open`]: gzip, xz) and the checks an outside
//! trace gets before a replay ([`check`]: Gadget's trailing garbage rows and missing
//! first op).
//!
//! A trace is a sequence of [`TraceRecord`]s: `(input_event, op)`, where `input_event` is
//! the 0-based number of the input event that caused the op and never decreases from one
//! record to the next (see [`OpSink`]).
//!
//! # FORMAT (binary trace, version 1)
//!
//! All integers are little-endian. `crc` is CRC-32C (Castagnoli). A file is a header,
//! zero or more data blocks, and one end marker, and nothing after it.
//!
//! **File header**
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `SPWTRACE` |
//! | 2 | version (`1`); a reader rejects a larger version with [`TraceError::UnsupportedVersion`] before reading anything else |
//! | 2 | flags: bit 0 = metadata present; other bits must be 0 (a reader rejects unknown bits) |
//! | 4 | metadata length `m` (0 unless bit 0) |
//! | m | metadata: one UTF-8 JSON value (e.g. the experiment text and its parameters) |
//! | 4 | crc of all header bytes before it (magic included) |
//!
//! **Data block** (34-byte block header, then the payload)
//!
//! | bytes | field |
//! |---|---|
//! | 1 | tag `B` (0x42) |
//! | 1 | block flags: bit 0 = payload is an lz4 block (`lz4_flex::block`); other bits 0 |
//! | 4 | block number (0, 1, 2, … in file order) |
//! | 4 | record count (≥ 1) |
//! | 4 | raw payload length (uncompressed), at most [`binary::MAX_BLOCK_BYTES`] |
//! | 4 | stored payload length (bytes that follow on disk) |
//! | 8 | base input event: `input_event` of the record before this block (0 for the first) |
//! | 4 | crc of the stored payload |
//! | 4 | crc of the 30 block-header bytes before it |
//! | stored length | payload |
//!
//! **Record** (inside the uncompressed payload; records never span blocks)
//!
//! | bytes | field |
//! |---|---|
//! | 1 | bits 0–2: op kind code (0 get, 1 put, 2 merge, 3 delete, 4 scan, 5 seek, 6 next); bit 3: *filler value*; bits 4–7: 0 |
//! | varint | `input_event` minus the previous record's (the block's base event for its first record) |
//! | varint + bytes | key length, key |
//! | varint [+ bytes] | value length, then the value bytes unless the filler bit is set |
//!
//! Varints are unsigned LEB128 (at most 10 bytes). The filler bit is set by the writer
//! exactly when the value is non-empty and every byte is ASCII `'0'` (Gadget's value
//! filler); the reader rebuilds that value, so traces round trip byte for byte.
//!
//! **End marker** (26 bytes)
//!
//! | bytes | field |
//! |---|---|
//! | 1 | tag `E` (0x45) |
//! | 1 | 0 |
//! | 4 | number of data blocks |
//! | 8 | number of records |
//! | 8 | `input_event` of the last record (0 if none) |
//! | 4 | crc of the 22 bytes before it |
//!
//! **Integrity.** Every byte of the file is covered by a crc or checked against a
//! redundant field (block numbers, base events, counts against the end marker), so a
//! flipped byte yields an error or, never, different records. A file cut anywhere yields
//! [`TraceError::Truncated`], or [`TraceError::MissingEndMarker`] when it ends exactly
//! between two blocks: a reader never silently returns fewer records. Records of a block
//! are returned only after the block's crcs check out.
//!
//! **Versioning.** Readers accept every version up to their own and refuse newer ones;
//! a format change bumps the version. New optional information goes into the metadata
//! JSON, which readers that do not know it ignore.
//!
//! **Metadata keys** (all optional): `experiment` (the generating experiment's TOML,
//! written by `spillway trace gen`); `input_events` (`false` when the records' input
//! events are not real, e.g. a conversion from Gadget text, whose `input_event` is the
//! line's sequence number; see [`open::TraceFile::input_events`]).
//!
//! # Gadget text
//!
//! See [`gadget`]: `<seq> <op> <key> <value> gadget gadgetFile` lines. Reading text gives
//! `input_event = seq` because the format has no input-event column.

pub mod binary;
pub mod check;
pub mod gadget;
pub mod open;
pub mod stack;
pub mod stats;

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};

use crate::workload::{OpSink, StateOp};

pub use binary::{TraceReader, TraceWriter, TraceWriterOptions};
pub use gadget::{GadgetReadOptions, GadgetTextReader, GadgetTextWriter};
pub use stack::{stack_distances, StackDistanceTracker, StackDistances};
pub use stats::{
    characterize, key_frequencies, ks_statistic, rank_frequency, sequence_frequencies,
    CharacterizeOptions, TraceStats,
};

/// One trace record: an op and the input event that caused it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceRecord {
    /// 0-based number of the input event that caused the op (nondecreasing in a trace).
    pub input_event: u64,
    /// The state operation.
    pub op: StateOp,
}

/// Errors of trace reading, writing, conversion and characterization.
#[derive(Debug)]
pub enum TraceError {
    /// An I/O error other than an unexpected end of file.
    Io(io::Error),
    /// The file does not start with the binary trace magic `SPWTRACE`.
    NotATrace,
    /// The file was written by a newer (or unknown) format version.
    UnsupportedVersion {
        /// Version found in the header.
        found: u16,
        /// Highest version this reader supports.
        supported: u16,
    },
    /// A checksum, tag, length or redundant field does not match.
    Corrupt {
        /// Byte offset in the file of the structure found bad.
        offset: u64,
        /// What was wrong.
        what: String,
    },
    /// The file ends inside a structure.
    Truncated {
        /// Byte offset at which the file ended.
        offset: u64,
        /// What was being read.
        what: String,
    },
    /// The file ends cleanly between blocks but without the end marker: the trace was
    /// cut (or its writer never called `finish`).
    MissingEndMarker {
        /// Byte offset at which the file ended.
        offset: u64,
        /// Records read before the end.
        records: u64,
    },
    /// A record's input event is below the previous record's.
    InputEventDecreased {
        /// 0-based number of the offending record.
        record: u64,
        /// Previous record's input event.
        previous: u64,
        /// This record's input event.
        got: u64,
    },
    /// A record cannot be written in the requested format.
    Unrepresentable {
        /// 0-based number of the record.
        record: u64,
        /// Why.
        what: String,
    },
    /// A Gadget text line could not be parsed.
    Parse {
        /// 1-based line number.
        line: u64,
        /// 1-based byte column where the problem starts.
        column: usize,
        /// What was expected.
        what: String,
    },
    /// More distinct keys than characterization can number (2^32 - 1).
    TooManyKeys,
    /// A record with an empty key comes before records with keys (see [`check`]).
    EmptyKey {
        /// `line` (Gadget text) or `record` (binary, 1-based).
        what: &'static str,
        /// Where the first empty-key record is.
        at: u64,
        /// Where the keyed record after it is.
        next: u64,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Io(e) => write!(f, "trace I/O error: {e}"),
            TraceError::NotATrace => {
                write!(f, "not a Spillway binary trace (magic SPWTRACE missing at offset 0)")
            }
            TraceError::UnsupportedVersion { found, supported } => write!(
                f,
                "trace format version {found} is not supported (this build reads versions 1 \
                 to {supported}); use a newer Spillway"
            ),
            TraceError::Corrupt { offset, what } => {
                write!(f, "corrupt trace at byte offset {offset}: {what}")
            }
            TraceError::Truncated { offset, what } => {
                write!(f, "trace truncated at byte offset {offset} while reading {what}")
            }
            TraceError::MissingEndMarker { offset, records } => write!(
                f,
                "trace ended at byte offset {offset} after {records} records without its end \
                 marker (truncated, or the writer did not finish)"
            ),
            TraceError::InputEventDecreased { record, previous, got } => write!(
                f,
                "record {record}: input event {got} is below the previous record's {previous}"
            ),
            TraceError::Unrepresentable { record, what } => {
                write!(f, "record {record} cannot be written: {what}")
            }
            TraceError::Parse { line, column, what } => {
                write!(f, "Gadget trace line {line}, column {column}: {what}")
            }
            TraceError::TooManyKeys => write!(f, "trace has more than 2^32 - 1 distinct keys"),
            TraceError::EmptyKey { what, at, next } => write!(
                f,
                "{what} {at}: empty key, but {what} {next} after it has a key; Gadget writes \
                 empty keys only in the garbage rows after its last op, so this trace is \
                 damaged (remove the empty-key rows to replay it)"
            ),
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TraceError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for TraceError {
    fn from(e: io::Error) -> Self {
        TraceError::Io(e)
    }
}

/// On-disk trace formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// Spillway's binary format (see the FORMAT section of this module).
    Binary,
    /// Gadget's text format (see [`gadget`]).
    GadgetText,
}

impl TraceFormat {
    /// Parses `binary` or `gadget` (also `gadget-text`, `text`).
    pub fn parse(s: &str) -> Option<TraceFormat> {
        match s {
            "binary" | "bin" => Some(TraceFormat::Binary),
            "gadget" | "gadget-text" | "text" => Some(TraceFormat::GadgetText),
            _ => None,
        }
    }

    /// Name accepted by [`TraceFormat::parse`].
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Binary => "binary",
            TraceFormat::GadgetText => "gadget",
        }
    }
}

/// A reader of either format, as one iterator of records.
pub enum AnyTraceReader<R: Read> {
    /// Binary trace.
    Binary(TraceReader<R>),
    /// Gadget text trace.
    GadgetText(GadgetTextReader<BufReader<R>>),
}

impl<R: Read> AnyTraceReader<R> {
    /// Opens `input` as `format` (the binary header is read and checked now).
    pub fn new(input: R, format: TraceFormat) -> Result<Self, TraceError> {
        Ok(match format {
            TraceFormat::Binary => AnyTraceReader::Binary(TraceReader::new(input)?),
            TraceFormat::GadgetText => AnyTraceReader::GadgetText(GadgetTextReader::new(
                BufReader::new(input),
                GadgetReadOptions::default(),
            )),
        })
    }
}

impl<R: Read> Iterator for AnyTraceReader<R> {
    type Item = Result<TraceRecord, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            AnyTraceReader::Binary(r) => r.next(),
            AnyTraceReader::GadgetText(r) => r.next(),
        }
    }
}

/// Streams the trace in `input` (format `in_format`) to `output` in `out_format`, with
/// default writer options, and returns the number of records. Converting to Gadget text
/// drops input events (text reads back `input_event = seq`) and fails on keys or values
/// containing a space or newline; ops survive any conversion that succeeds.
pub fn convert<R: Read, W: Write>(
    input: R,
    in_format: TraceFormat,
    output: W,
    out_format: TraceFormat,
) -> Result<u64, TraceError> {
    let reader = AnyTraceReader::new(input, in_format)?;
    convert_records(reader, output, out_format)
}

/// Writes the records of `reader` to `output` in `out_format` (see [`convert`]). A binary
/// output of a Gadget text input records `"input_events": false` in its metadata: the
/// text's sequence numbers are not input events.
pub fn convert_records<R: Read, W: Write>(
    reader: AnyTraceReader<R>,
    output: W,
    out_format: TraceFormat,
) -> Result<u64, TraceError> {
    let from_text = matches!(reader, AnyTraceReader::GadgetText(_));
    match out_format {
        TraceFormat::Binary => {
            let opts = TraceWriterOptions {
                metadata: from_text.then(|| serde_json::json!({ "input_events": false })),
                ..TraceWriterOptions::default()
            };
            let mut w = TraceWriter::new(output, opts)?;
            copy_records(reader, &mut w)?;
            let n = w.records_written();
            w.finish()?;
            Ok(n)
        }
        TraceFormat::GadgetText => {
            let mut w = GadgetTextWriter::new(output);
            copy_records(reader, &mut w)?;
            let n = w.records_written();
            w.finish()?;
            Ok(n)
        }
    }
}

fn copy_records<S: OpSink<Error = TraceError>>(
    reader: impl Iterator<Item = Result<TraceRecord, TraceError>>,
    sink: &mut S,
) -> Result<(), TraceError> {
    for rec in reader {
        let rec = rec?;
        sink.op(rec.input_event, &rec.op)?;
    }
    Ok(())
}

/// Reads a whole line-oriented input into records; a convenience over
/// [`GadgetTextReader`] for in-memory text.
pub fn read_gadget_text<B: BufRead>(input: B) -> Result<Vec<TraceRecord>, TraceError> {
    GadgetTextReader::new(input, GadgetReadOptions::default()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::OpKind;

    fn op(kind: OpKind, key: &str, value: &str) -> StateOp {
        StateOp { kind, key: key.as_bytes().to_vec(), value: value.as_bytes().to_vec() }
    }

    #[test]
    fn binary_to_gadget_to_binary_preserves_ops() {
        let ops: Vec<(u64, StateOp)> = (0..500u64)
            .map(|i| {
                let kind = OpKind::ALL[(i % 7) as usize];
                let value = if matches!(kind, OpKind::Put | OpKind::Merge) {
                    "0".repeat((i % 13) as usize)
                } else {
                    String::new()
                };
                (i / 3, op(kind, &format!("k{:04}", i % 37), &value))
            })
            .collect();
        let mut w = TraceWriter::new(
            Vec::new(),
            TraceWriterOptions { block_bytes: 256, ..TraceWriterOptions::default() },
        )
        .unwrap();
        for (e, o) in &ops {
            w.op(*e, o).unwrap();
        }
        let bin = w.finish().unwrap();
        let mut text = Vec::new();
        assert_eq!(
            convert(&bin[..], TraceFormat::Binary, &mut text, TraceFormat::GadgetText).unwrap(),
            500
        );
        let mut bin2 = Vec::new();
        assert_eq!(
            convert(&text[..], TraceFormat::GadgetText, &mut bin2, TraceFormat::Binary).unwrap(),
            500
        );
        let back: Vec<TraceRecord> =
            TraceReader::new(&bin2[..]).unwrap().map(Result::unwrap).collect();
        assert_eq!(back.len(), ops.len());
        for (i, (r, (_, o))) in back.iter().zip(&ops).enumerate() {
            assert_eq!(&r.op, o, "record {i}");
            assert_eq!(r.input_event, i as u64 + 1, "text gives input_event = seq");
        }
    }

    #[test]
    fn convert_escapes_keys_gadget_text_cannot_hold() {
        let mut w = TraceWriter::new(Vec::new(), TraceWriterOptions::default()).unwrap();
        w.op(0, &op(OpKind::Put, "ok", "1")).unwrap();
        w.op(0, &op(OpKind::Put, "has space", "1")).unwrap();
        let bin = w.finish().unwrap();
        let mut text = Vec::new();
        convert(&bin[..], TraceFormat::Binary, &mut text, TraceFormat::GadgetText).unwrap();
        assert!(String::from_utf8_lossy(&text).contains("2 put has%20space 1"));
        let back = read_gadget_text(&text[..]).unwrap();
        assert_eq!(back[1].op, op(OpKind::Put, "has space", "1"));
    }
}
