//! Checks of outside traces (`spillway bench replay`): Gadget's text dump has two
//! defects (notes §6 item 13) that a replay must report, not replay silently.
//!
//! * **Trailing garbage rows.** `FileWrapper::dumpOperationsOnFile` reads two entries
//!   past the end of its op list; what it writes there are rows with an **empty key**
//!   (`N get  userkey gadget gadgetFile`). [`Checked`] holds back records with an empty
//!   key: at the end of the trace they are dropped and counted
//!   ([`TraceWarnings::garbage_rows`]); a record with a key after them is an error
//!   ([`TraceError::EmptyKey`]), since a Gadget dump has no empty key anywhere else.
//! * **The missing first op.** The same loop starts at index 1, so op 0 is never
//!   written. A trace is taken to lack its first op when it ends with garbage rows (it
//!   is a Gadget dump), or when its first record is a `put`, `delete` or `next`: every
//!   Gadget operator issues a `get` before its first `put` or `delete` of a key (window
//!   and session state machines, interval and continuous joins, continuous
//!   aggregation), and a `seek` before a `next`. The op cannot be recovered; it is
//!   counted ([`TraceWarnings::missing_first_op`]) and the trace is replayed without it.
//!
//! Both checks apply to binary traces too (a conversion of a Gadget dump keeps both
//! defects); there an error names the 1-based record instead of the line.

use serde::Serialize;

use super::open::FileTraceReader;
use super::{AnyTraceReader, TraceError, TraceRecord};
use crate::workload::OpKind;

/// What [`Checked`] found; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TraceWarnings {
    /// Records read, garbage rows included.
    pub records: u64,
    /// Records handed on (all but the garbage rows).
    pub replayed: u64,
    /// Trailing records with an empty key, dropped.
    pub garbage_rows: u64,
    /// Line (text) or 1-based record number (binary) of the first garbage row.
    pub first_garbage_row: Option<u64>,
    /// What `first_garbage_row` counts: `line` or `record`.
    pub position_unit: &'static str,
    /// 1 if the trace lacks its first op (Gadget's dump never writes op 0), else 0.
    pub missing_first_op: u64,
    /// Why `missing_first_op` is 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing_first_op_reason: Option<String>,
}

impl TraceWarnings {
    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.garbage_rows == 0 && self.missing_first_op == 0
    }

    /// One line per warning, for stderr.
    pub fn messages(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.garbage_rows > 0 {
            v.push(format!(
                "{} trailing garbage row(s) with an empty key (from {} {}) dropped, not \
                 replayed: Gadget's text dump reads past the end of its op list",
                self.garbage_rows,
                self.position_unit,
                self.first_garbage_row.unwrap_or(0)
            ));
        }
        if let Some(why) = &self.missing_first_op_reason {
            v.push(format!(
                "{} missing first op: {why}; Gadget's text dump never writes its op 0, so the \
                 replay starts one op late",
                self.missing_first_op
            ));
        }
        v
    }
}

/// The records of a trace file with the checks of the module docs applied: empty-key
/// records at the end are dropped and counted, empty-key records followed by keyed ones
/// are an error. Read [`Checked::warnings`] after the iteration.
pub struct Checked {
    inner: FileTraceReader,
    warnings: TraceWarnings,
    /// Empty-key records held back: count and where the first was.
    held: u64,
    held_at: u64,
    failed: bool,
}

impl Checked {
    /// Checks the records of `inner`.
    pub fn new(inner: FileTraceReader) -> Checked {
        Checked { inner, warnings: TraceWarnings::default(), held: 0, held_at: 0, failed: false }
    }

    /// Where the last record came from: its line (text) or 1-based record number.
    fn source_position(&self) -> u64 {
        match &self.inner {
            AnyTraceReader::GadgetText(r) => r.line_number(),
            AnyTraceReader::Binary(_) => self.warnings.records,
        }
    }

    fn is_text(&self) -> bool {
        matches!(self.inner, AnyTraceReader::GadgetText(_))
    }

    /// What was found so far (all of it once the iteration has ended).
    pub fn warnings(&self) -> TraceWarnings {
        let mut w = self.warnings.clone();
        w.position_unit = if self.is_text() { "line" } else { "record" };
        if self.held > 0 {
            w.garbage_rows = self.held;
            w.first_garbage_row = Some(self.held_at);
            if w.missing_first_op == 0 {
                w.missing_first_op = 1;
                w.missing_first_op_reason =
                    Some("the trace ends with garbage rows, so it is a Gadget text dump".into());
            }
        }
        w
    }
}

impl Iterator for Checked {
    type Item = Result<TraceRecord, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            let rec = match self.inner.next()? {
                Ok(r) => r,
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            };
            self.warnings.records += 1;
            let at = self.source_position();
            if rec.op.key.is_empty() {
                if self.held == 0 {
                    self.held_at = at;
                }
                self.held += 1;
                continue;
            }
            if self.held > 0 {
                self.failed = true;
                let what = if self.is_text() { "line" } else { "record" };
                return Some(Err(TraceError::EmptyKey { what, at: self.held_at, next: at }));
            }
            if self.warnings.replayed == 0
                && matches!(rec.op.kind, OpKind::Put | OpKind::Delete | OpKind::Next)
            {
                self.warnings.missing_first_op = 1;
                self.warnings.missing_first_op_reason = Some(format!(
                    "the trace starts with a `{}`, which every Gadget operator precedes with a \
                     `{}` of the same key",
                    rec.op.kind.name(),
                    if rec.op.kind == OpKind::Next { "seek" } else { "get" }
                ));
            }
            self.warnings.replayed += 1;
            return Some(Ok(rec));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::open::open_reader;
    use std::io::Cursor;

    fn check(text: &str) -> (Result<Vec<TraceRecord>, TraceError>, TraceWarnings) {
        let t = open_reader(Box::new(Cursor::new(text.as_bytes().to_vec()))).unwrap();
        let mut c = Checked::new(t.reader);
        let r = c.by_ref().collect();
        (r, c.warnings())
    }

    #[test]
    fn trailing_garbage_rows_are_dropped_and_counted() {
        let (r, w) = check(
            "1 put 0000000001 userkey gadget gadgetFile\n\
             2 get 0000000002 userkey gadget gadgetFile\n\
             3 get  userkey gadget gadgetFile\n\
             4 put   gadget gadgetFile\n",
        );
        assert_eq!(r.unwrap().len(), 2);
        assert_eq!((w.records, w.replayed, w.garbage_rows), (4, 2, 2));
        assert_eq!(w.first_garbage_row, Some(3));
        assert_eq!(w.missing_first_op, 1);
        assert!(w.missing_first_op_reason.as_deref().unwrap().contains("`put`"), "{w:?}");
        assert_eq!(w.messages().len(), 2);
        assert!(w.messages()[0].contains("from line 3"), "{:?}", w.messages());
    }

    #[test]
    fn garbage_alone_marks_a_gadget_dump() {
        let (r, w) = check("1 get a\n2 get  x\n");
        assert_eq!(r.unwrap().len(), 1);
        assert_eq!((w.garbage_rows, w.missing_first_op), (1, 1));
        assert!(w.missing_first_op_reason.unwrap().contains("garbage"));
    }

    #[test]
    fn clean_traces_have_no_warnings() {
        let (r, w) = check("1 get a\n2 put a 00\n3 seek a\n4 next a\n");
        assert_eq!(r.unwrap().len(), 4);
        assert!(w.is_empty(), "{w:?}");
        assert!(w.messages().is_empty());
        let (r, w) = check("1 next k\n");
        assert_eq!(r.unwrap().len(), 1);
        assert!(w.missing_first_op_reason.unwrap().contains("`seek`"));
    }

    #[test]
    fn empty_key_before_keyed_ops_names_both_lines() {
        let (r, _) = check("1 get a\n\n2 get  v\n3 get b\n");
        let e = r.unwrap_err();
        assert!(matches!(e, TraceError::EmptyKey { at: 3, next: 4, .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains("line 3") && msg.contains("line 4"), "{msg}");
    }
}
