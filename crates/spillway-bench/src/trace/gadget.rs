//! Gadget's text trace format (docs/design/gadget-notes.md §7): the streaming
//! [`GadgetTextWriter`] and [`GadgetTextReader`].
//!
//! One op per line, fields separated by single spaces:
//! `<seq> <op> <key> <value> gadget gadgetFile`, `seq` counting from 1.
//!
//! **Writing.** Spillway writes every record, `seq` from 1, the op names of
//! [`OpKind::name`] (so a range-read start is `seek`, as in Gadget's own dump, and a
//! prefix scan is `scan`), the value as stored (empty for reads: two adjacent spaces),
//! and the trailing `gadget gadgetFile`. Keys and values are raw bytes, except that the
//! bytes Gadget's line format cannot hold (space, tab, `\n`, `\r`) and `%` itself are
//! written as `%XX` (two uppercase hex digits), and the reader decodes `%XX` back: the
//! mapping is one-to-one, so a Gadget replay of such a trace sees the same access
//! pattern (the same keys repeat in the same order), and Gadget's own keys (decimal ids,
//! `metadata_<id>`) and `'0'` values never contain these bytes and are written
//! unchanged. Input events are not written.
//! Note that Gadget's `flink.replayer` expects `scan` where Gadget's dump writes `seek`
//! (Gadget defect 16); read such traces with [`GadgetReadOptions::scan_as_seek`].
//!
//! **Reading.** Each line is split on single spaces. Accepted shapes (with `k` the key
//! and `v` the value):
//! - `seq op k v gadget gadgetFile` (Gadget's dump; `v` may be empty, i.e. two adjacent
//!   spaces);
//! - `seq op k gadget gadgetFile` (the empty-value line after whitespace was collapsed);
//! - `seq op k v` and `seq op k` (no trailing tokens; value empty in the second).
//!
//! A trailing `\r` is dropped and empty lines are skipped. Op names are those of
//! [`OpKind::parse`] (`get put merge delete scan seek next`). The older Gadget dump that
//! writes the literal `userkey` instead of the value is read as is (value `userkey`).
//! Gadget writes values for reads and deletes too; they are kept. Since the format has
//! no input-event column, each record gets **`input_event = seq`**; `seq` must not
//! decrease. A text trace has no end marker, so a cut after a newline is not detectable.

use std::io::{BufRead, Write};

use super::{TraceError, TraceRecord};
use crate::workload::{OpKind, OpSink, StateOp};

const TRAILER: &[u8] = b" gadget gadgetFile\n";

/// Appends `bytes` with space, tab, `\n`, `\r` and `%` written as `%XX`.
fn escape(bytes: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'%') {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        } else {
            out.push(b);
        }
    }
}

/// Decodes `%XX` escapes; `None` names the offset of a `%` not followed by two hex digits.
fn unescape(field: &[u8]) -> Result<Vec<u8>, usize> {
    if !field.contains(&b'%') {
        return Ok(field.to_vec());
    }
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'%' {
            match (field.get(i + 1).and_then(|&c| hex(c)), field.get(i + 2).and_then(|&c| hex(c))) {
                (Some(h), Some(l)) => out.push(h << 4 | l),
                _ => return Err(i),
            }
            i += 3;
        } else {
            out.push(field[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// Streaming writer of Gadget text traces.
pub struct GadgetTextWriter<W: Write> {
    out: W,
    records: u64,
    line: Vec<u8>,
}

impl<W: Write> GadgetTextWriter<W> {
    /// A writer to `out` (wrap files in a `BufWriter`).
    pub fn new(out: W) -> Self {
        GadgetTextWriter { out, records: 0, line: Vec::new() }
    }

    /// Number of records written.
    pub fn records_written(&self) -> u64 {
        self.records
    }

    /// Writes one op as line `records_written() + 1`; `input_event` is not representable
    /// and is dropped.
    pub fn write(&mut self, op: &StateOp) -> Result<(), TraceError> {
        self.line.clear();
        self.line.extend_from_slice((self.records + 1).to_string().as_bytes());
        self.line.push(b' ');
        self.line.extend_from_slice(op.kind.name().as_bytes());
        self.line.push(b' ');
        escape(&op.key, &mut self.line);
        self.line.push(b' ');
        escape(&op.value, &mut self.line);
        self.line.extend_from_slice(TRAILER);
        self.out.write_all(&self.line)?;
        self.records += 1;
        Ok(())
    }

    /// Flushes and returns the output.
    pub fn finish(mut self) -> Result<W, TraceError> {
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: Write> OpSink for GadgetTextWriter<W> {
    type Error = TraceError;
    fn op(&mut self, _input_event: u64, op: &StateOp) -> Result<(), TraceError> {
        self.write(op)
    }
}

/// Options of a [`GadgetTextReader`].
#[derive(Clone, Copy, Debug, Default)]
pub struct GadgetReadOptions {
    /// Read the op name `scan` as [`OpKind::Seek`] (a range-read start followed by
    /// `next`s), as in traces meant for Gadget's `flink.replayer`. Default false:
    /// `scan` is [`OpKind::Scan`].
    pub scan_as_seek: bool,
}

/// Streaming reader of Gadget text traces: an iterator of records (see the module docs
/// for the accepted line shapes). After the first error it returns `None`.
pub struct GadgetTextReader<B: BufRead> {
    input: B,
    opts: GadgetReadOptions,
    line_no: u64,
    last_seq: u64,
    buf: Vec<u8>,
    done: bool,
}

impl<B: BufRead> GadgetTextReader<B> {
    /// A reader of `input`.
    pub fn new(input: B, opts: GadgetReadOptions) -> Self {
        GadgetTextReader { input, opts, line_no: 0, last_seq: 0, buf: Vec::new(), done: false }
    }

    /// 1-based number of the last line read (the line of the last record returned).
    pub fn line_number(&self) -> u64 {
        self.line_no
    }

    fn parse_line(&mut self) -> Result<TraceRecord, TraceError> {
        let line_no = self.line_no;
        let mut line: &[u8] = &self.buf;
        if let Some(l) = line.strip_suffix(b"\n") {
            line = l;
        }
        if let Some(l) = line.strip_suffix(b"\r") {
            line = l;
        }
        // Field start columns (1-based) for error messages.
        let mut fields: Vec<(&[u8], usize)> = Vec::with_capacity(6);
        let mut col = 1;
        for f in line.split(|&b| b == b' ') {
            fields.push((f, col));
            col += f.len() + 1;
        }
        let err = |column: usize, what: String| TraceError::Parse { line: line_no, column, what };
        let trailer = |fs: &[(&[u8], usize)]| {
            fs[fs.len() - 2].0 == b"gadget" && fs[fs.len() - 1].0 == b"gadgetFile"
        };
        let (key, value): (&[u8], &[u8]) = match fields.len() {
            6 if trailer(&fields) => (fields[2].0, fields[3].0),
            5 if trailer(&fields) => (fields[2].0, b""),
            4 => (fields[2].0, fields[3].0),
            3 => (fields[2].0, b""),
            n => {
                return Err(err(
                    1,
                    format!(
                        "expected `<seq> <op> <key> <value> gadget gadgetFile` (3 to 6 \
                         space-separated fields), found {n} fields"
                    ),
                ))
            }
        };
        let seq = std::str::from_utf8(fields[0].0)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| {
                err(
                    1,
                    format!(
                        "expected a decimal sequence number, found {:?}",
                        String::from_utf8_lossy(fields[0].0)
                    ),
                )
            })?;
        if seq < self.last_seq {
            return Err(err(
                1,
                format!("sequence number {seq} below the previous {}", self.last_seq),
            ));
        }
        let name = std::str::from_utf8(fields[1].0).unwrap_or("");
        let kind = match OpKind::parse(name) {
            Some(OpKind::Scan) if self.opts.scan_as_seek => OpKind::Seek,
            Some(k) => k,
            None => {
                return Err(err(
                    fields[1].1,
                    format!(
                        "expected an op (get, put, merge, delete, scan, seek, next), found {:?}",
                        String::from_utf8_lossy(fields[1].0)
                    ),
                ))
            }
        };
        let key_col = fields[2].1;
        let key = unescape(key).map_err(|i| {
            err(
                key_col + i,
                "expected `%` to be followed by two hex digits (an escaped byte)".into(),
            )
        })?;
        let value = unescape(value).map_err(|i| {
            err(
                fields.get(3).map_or(key_col, |f| f.1) + i,
                "expected `%` to be followed by two hex digits (an escaped byte)".into(),
            )
        })?;
        self.last_seq = seq;
        Ok(TraceRecord { input_event: seq, op: StateOp { kind, key, value } })
    }
}

impl<B: BufRead> Iterator for GadgetTextReader<B> {
    type Item = Result<TraceRecord, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.buf.clear();
            match self.input.read_until(b'\n', &mut self.buf) {
                Ok(0) => self.done = true,
                Ok(_) => {
                    self.line_no += 1;
                    if matches!(&self.buf[..], b"\n" | b"\r\n" | b"\r") {
                        continue;
                    }
                    let r = self.parse_line();
                    if r.is_err() {
                        self.done = true;
                    }
                    return Some(r);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(TraceError::Io(e)));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read(text: &str) -> Result<Vec<TraceRecord>, TraceError> {
        GadgetTextReader::new(text.as_bytes(), GadgetReadOptions::default()).collect()
    }

    fn op(kind: OpKind, key: &str, value: &str) -> StateOp {
        StateOp { kind, key: key.into(), value: value.into() }
    }

    #[test]
    fn parses_gadget_dump_quirks() {
        let text = "1 put 0000000003 0000 gadget gadgetFile\n\
                    2 get 0000000003  gadget gadgetFile\n\
                    3 merge 00000000031 00 gadget gadgetFile\r\n\
                    4 seek 0000000003 gadget gadgetFile\n\
                    \n\
                    5 scan k userkey\n\
                    6 next k\n\
                    7 delete k 000 gadget gadgetFile";
        let recs = read(text).unwrap();
        let ops: Vec<StateOp> = recs.iter().map(|r| r.op.clone()).collect();
        assert_eq!(
            ops,
            vec![
                op(OpKind::Put, "0000000003", "0000"),
                op(OpKind::Get, "0000000003", ""),
                op(OpKind::Merge, "00000000031", "00"),
                op(OpKind::Seek, "0000000003", ""),
                op(OpKind::Scan, "k", "userkey"),
                op(OpKind::Next, "k", ""),
                op(OpKind::Delete, "k", "000"),
            ]
        );
        let seqs: Vec<u64> = recs.iter().map(|r| r.input_event).collect();
        assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6, 7]);
        let flink: Vec<TraceRecord> = GadgetTextReader::new(
            "1 scan k\n".as_bytes(),
            GadgetReadOptions { scan_as_seek: true },
        )
        .collect::<Result<_, _>>()
        .unwrap();
        assert_eq!(flink[0].op.kind, OpKind::Seek);
    }

    #[test]
    fn parse_errors_name_line_and_column() {
        let e = read("1 put k v gadget gadgetFile\n2 frob k v gadget gadgetFile\n").unwrap_err();
        assert!(matches!(e, TraceError::Parse { line: 2, column: 3, .. }), "{e}");
        let e = read("x put k v\n").unwrap_err();
        assert!(matches!(e, TraceError::Parse { line: 1, column: 1, .. }), "{e}");
        let e = read("1 put k v w x y\n").unwrap_err();
        assert!(matches!(e, TraceError::Parse { line: 1, .. }), "{e}");
        let e = read("2 put k v\n1 put k v\n").unwrap_err();
        assert!(matches!(e, TraceError::Parse { line: 2, .. }), "{e}");
        assert!(read("1 put\n").is_err());
    }

    #[test]
    fn writer_escapes_separators_and_percent() {
        let mut w = GadgetTextWriter::new(Vec::new());
        w.write(&op(OpKind::Put, "a", "b")).unwrap();
        w.write(&op(OpKind::Put, "a b%", "x\ny\r\t")).unwrap();
        let text = String::from_utf8(w.finish().unwrap()).unwrap();
        assert_eq!(
            text,
            "1 put a b gadget gadgetFile\n2 put a%20b%25 x%0Ay%0D%09 gadget gadgetFile\n"
        );
        let back = read(&text).unwrap();
        assert_eq!(back[1].op, op(OpKind::Put, "a b%", "x\ny\r\t"));
        let e = read("1 put a%2 v\n").unwrap_err();
        assert!(matches!(e, TraceError::Parse { line: 1, column: 8, .. }), "{e}");
    }

    fn token() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..8)
    }

    proptest! {
        #[test]
        fn text_round_trip(ops in proptest::collection::vec((0usize..7, token(), token()), 0..60)) {
            let ops: Vec<StateOp> = ops
                .into_iter()
                .map(|(k, key, value)| StateOp { kind: OpKind::ALL[k], key, value })
                .collect();
            let mut w = GadgetTextWriter::new(Vec::new());
            for o in &ops {
                w.write(o).unwrap();
            }
            let text = w.finish().unwrap();
            let back: Vec<TraceRecord> = GadgetTextReader::new(&text[..], GadgetReadOptions::default())
                .collect::<Result<_, _>>()
                .unwrap();
            prop_assert_eq!(back.len(), ops.len());
            for (i, (r, o)) in back.iter().zip(&ops).enumerate() {
                prop_assert_eq!(&r.op, o);
                prop_assert_eq!(r.input_event, i as u64 + 1);
            }
        }
    }
}
