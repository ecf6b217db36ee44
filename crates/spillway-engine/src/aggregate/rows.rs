//! The kept rows of a `ROWS BETWEEN n PRECEDING AND CURRENT ROW` window: per (group-by
//! node, partition key) a header beside the running [`AggSet`](super::AggSet) state of the
//! partition's last `n + 1` rows, and the rows themselves in a second namespace, one value
//! per row at its position. The runtime ([`crate::operator::over`]) decides which rows it keeps
//! and when; this module owns their bytes.
//!
//! # FORMAT
//!
//! The header is the value of the partition key in the group-by node's namespace (`g<i>`):
//!
//! ```text
//! [head u64][tail u64][guard i64][AggSet state]
//! ```
//!
//! The partition's kept rows sit at positions `head..tail`, consecutive and in (time,
//! arrival) order; a late row is put at its place by moving the rows after it up by one.
//! `guard` is the time of the row at position `head + n + 1` while that position is below
//! `tail` (else it is unused): the runtime drops row `head` once `guard` is more than the
//! allowed lateness behind the frontier, without reading any row to decide. A header with
//! `head > tail` or `tail > 2^63 - 1` (beyond one position per event) is refused. The AggSet
//! state (its own FORMAT, see the module above) covers the rows at positions
//! `max(head, tail - n - 1)..tail` that pass the node's `FILTER`.
//!
//! A row is the value of the key `[partition key][position u64 BE]` in the node's rows
//! namespace (`g<i>.rows`):
//!
//! ```text
//! [time i64][seq u64][flags u8][tagged argument]*
//! ```
//!
//! Flag bit 0 says the row passes the node's `FILTER`; only then do the arguments follow,
//! one per aggregate of the node in the tagged value encoding of the aggregate states
//! (tag byte, then i64 / f64 / `[len u32][UTF-8]` / one byte). Other flag bits are zero.
//! All integers are little-endian except the position in the key, which is big-endian so
//! a partition's rows sort by position in an ordered store.

use super::codec::{get_tagged, put_key, put_tagged, put_u64, Reader, Scalar};
use super::AggStateError;
use crate::value::{EventKey, Value};

/// Bytes of the header before the AggSet state.
pub(crate) const HEADER_LEN: usize = 24;

/// Flag bit: the row passes the group-by node's `FILTER`.
const PASSES: u8 = 1;

/// The largest position a header may hold (see [`RowsHeader::split`]).
const MAX_POSITION: u64 = i64::MAX as u64;

/// The fixed part of a partition's header value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RowsHeader {
    /// Position of the oldest kept row.
    pub(crate) head: u64,
    /// One past the position of the newest row.
    pub(crate) tail: u64,
    /// Time of the row at `head + n + 1`, while `head + n + 1 < tail`.
    pub(crate) guard: i64,
}

impl RowsHeader {
    /// Appends the header (the AggSet state goes after it).
    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        put_u64(out, self.head);
        put_u64(out, self.tail);
        out.extend_from_slice(&self.guard.to_le_bytes());
    }

    /// Splits a header value into the header and the AggSet state after it.
    pub(crate) fn split(value: &[u8]) -> Result<(RowsHeader, &[u8]), AggStateError> {
        let mut r = Reader::new(value);
        let head = r.u64()?;
        let tail = r.u64()?;
        let guard = i64::from_le_bytes(r.array()?);
        if head > tail {
            return Err(AggStateError::Corrupt {
                agg: None,
                offset: 0,
                what: "a ROWS header whose head is past its tail",
            });
        }
        // One position per event: 2^63 cannot be reached, and the runtime's position
        // arithmetic (`tail + 1`, `head + n + 1`) must not overflow.
        if tail > MAX_POSITION {
            return Err(AggStateError::Corrupt {
                agg: None,
                offset: 8,
                what: "a ROWS header whose tail is past 2^63 - 1 (one position per event)",
            });
        }
        Ok((RowsHeader { head, tail, guard }, &value[HEADER_LEN..]))
    }
}

/// The key of the row at `pos` of a partition: `[partition key][pos u64 BE]`.
pub(crate) fn row_key(partition: &[u8], pos: u64, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(partition);
    out.extend_from_slice(&pos.to_be_bytes());
}

/// Appends a row: its key and, when it passes the node's `FILTER`, the aggregates'
/// argument values.
pub(crate) fn put_row(out: &mut Vec<u8>, key: EventKey, args: Option<&[Value]>) {
    put_key(out, key);
    match args {
        None => out.push(0),
        Some(args) => {
            out.push(PASSES);
            for v in args {
                put_tagged(out, scalar(v));
            }
        }
    }
}

fn scalar(v: &Value) -> Option<Scalar<'_>> {
    Some(match v {
        Value::Null => return None,
        Value::Int(i) => Scalar::Int(*i),
        Value::Float(f) => Scalar::Float(*f),
        Value::Str(s) => Scalar::Str(s),
        Value::Bool(b) => Scalar::Bool(*b),
    })
}

/// A row read back.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct KeptRow {
    /// The event's key.
    pub(crate) key: EventKey,
    /// The aggregates' arguments, `None` when the row does not pass the `FILTER`.
    pub(crate) args: Option<Vec<Value>>,
}

/// Decodes a row of a node with `aggs` aggregates.
pub(crate) fn decode_row(bytes: &[u8], aggs: usize) -> Result<KeptRow, AggStateError> {
    let mut r = Reader::new(bytes);
    let time = i64::from_le_bytes(r.array()?);
    let seq = r.u64()?;
    let key = EventKey { time, seq };
    let flags = r.array::<1>()?[0];
    let args = match flags {
        0 => None,
        PASSES => {
            let mut args = Vec::with_capacity(aggs);
            for i in 0..aggs {
                r.agg = Some(i);
                args.push(get_tagged(&mut r)?.map_or(Value::Null, Scalar::to_value));
            }
            Some(args)
        }
        _ => {
            return Err(AggStateError::Corrupt {
                agg: None,
                offset: 16,
                what: "a kept ROWS row with unknown flag bits",
            })
        }
    };
    r.finish()?;
    Ok(KeptRow { key, args })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rows_and_headers_round_trip() {
        let key = EventKey { time: -5, seq: 7 };
        let args = vec![Value::Null, Value::Int(3), Value::Float(-0.5), Value::Str("é".into())];
        for a in [None, Some(&args[..]), Some(&[][..])] {
            let mut b = Vec::new();
            put_row(&mut b, key, a);
            let got = decode_row(&b, a.map_or(0, <[Value]>::len)).unwrap();
            assert_eq!(got, KeptRow { key, args: a.map(<[Value]>::to_vec) });
        }
        let mut b = Vec::new();
        put_row(&mut b, key, Some(&args));
        assert!(decode_row(&b[..b.len() - 1], 4).is_err());
        assert!(decode_row(&b, 3).is_err(), "an argument too many must not decode");

        let h = RowsHeader { head: 3, tail: 9, guard: -2 };
        let mut v = Vec::new();
        h.put(&mut v);
        v.extend_from_slice(b"state");
        assert_eq!(RowsHeader::split(&v).unwrap(), (h, &b"state"[..]));
        assert!(RowsHeader::split(&v[..HEADER_LEN - 1]).is_err());
        let mut bad = Vec::new();
        RowsHeader { head: 2, tail: 1, guard: 0 }.put(&mut bad);
        assert!(RowsHeader::split(&bad).is_err());

        let mut k = Vec::new();
        row_key(b"pk", 258, &mut k);
        assert_eq!(k, b"pk\0\0\0\0\0\0\x01\x02");
    }

    /// A partition's header whose tail is the last position there is (what a flipped top
    /// bit of a store value leaves): the next row's arrival overflowed `tail + 1`.
    #[test]
    fn a_rows_header_at_the_last_position_is_an_error() {
        use crate::session::{Session, SessionConfig};
        use crate::value::{DataType, Field, Schema, TimeUnit};
        use spillway_store::{StateStore, StateStoreExt, StoreKind, StoreOptions};
        let f = Field { name: "ts".into(), ty: DataType::Int };
        let schema = Schema::new(vec![f], "ts", TimeUnit::Ms).unwrap();
        let q = "SELECT COUNT(*) OVER (ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) \
                 AS n FROM t";
        let d = tempfile::tempdir().unwrap();
        let mut cfg = SessionConfig::new(q);
        cfg.dir = Some(d.path().to_path_buf());
        let mut s = Session::open(&cfg, schema.clone()).unwrap();
        let mut out = Vec::new();
        for t in 0..3 {
            s.process(t, vec![Value::Int(t)], &mut out).unwrap();
        }
        s.checkpoint().unwrap();
        drop(s);
        let plan = crate::operator::QueryPlan::build(q, &schema, None).unwrap();
        let mut opts = StoreOptions::new(d.path().join("state"));
        for spec in plan.namespace_specs() {
            opts = opts.namespace(spec);
        }
        let mut st = StoreKind::HashLog.open(opts).unwrap();
        let ns = st.namespace("g0").unwrap();
        let mut headers = Vec::new();
        st.scan_prefix(ns, &[], &mut |k, v| {
            headers.push((k.to_vec(), v.to_vec()));
            true
        })
        .unwrap();
        let [(key, mut header)] = <[_; 1]>::try_from(headers).unwrap();
        header[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        st.put(ns, &key, &header).unwrap();
        StateStore::checkpoint(st.as_mut()).unwrap();
        drop(st);
        let mut s = Session::open(&cfg, schema).unwrap();
        let e = s.process(3, vec![Value::Int(3)], &mut out).unwrap_err().to_string();
        assert!(e.contains("ROWS header") && e.contains("offset 8"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Arbitrary bytes, and valid rows and headers with a byte changed, cut or a length
        /// set huge, decode to a row or an error, never a panic.
        #[test]
        fn hostile_row_bytes_are_an_error_not_a_panic(
            garbage in prop::collection::vec(any::<u8>(), 0..80),
            args in prop::option::of(prop::collection::vec(crate::hostile::any_value(5), 0..5)),
            aggs in 0usize..7,
            at in any::<usize>(),
            byte in any::<u8>(),
            huge in prop_oneof![Just(u32::MAX), Just(0x7fff_ffff), any::<u32>()],
            cut in any::<usize>(),
        ) {
            let _ = decode_row(&garbage, aggs);
            let _ = RowsHeader::split(&garbage);
            let mut row = Vec::new();
            put_row(&mut row, EventKey { time: -1, seq: 2 }, args.as_deref());
            let mut flipped = row.clone();
            let i = at % flipped.len();
            flipped[i] = byte;
            let _ = decode_row(&flipped, aggs);
            let _ = decode_row(&row[..cut % (row.len() + 1)], aggs);
            if row.len() >= 4 {
                let mut long = row.clone();
                let i = at % (long.len() - 3);
                long[i..i + 4].copy_from_slice(&huge.to_le_bytes());
                let _ = decode_row(&long, aggs);
            }
            let mut h = Vec::new();
            RowsHeader { head: 3, tail: 9, guard: -2 }.put(&mut h);
            h.extend_from_slice(&garbage);
            let i = at % h.len();
            h[i] = byte;
            if let Ok((hd, _)) = RowsHeader::split(&h) {
                prop_assert!(hd.head <= hd.tail && hd.tail <= MAX_POSITION);
            }
        }
    }
}
