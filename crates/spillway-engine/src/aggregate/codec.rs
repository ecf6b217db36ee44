//! Byte-level helpers for aggregate states: a bounds-checked little-endian reader, writers,
//! borrowed argument scalars, the tagged value encoding and the ordered entry list shared by
//! MIN/MAX and FIRST_VALUE/LAST_VALUE.
//!
//! Nothing here allocates except when a caller hands a `Vec` that must grow.

use super::AggStateError;
use crate::value::{self, DataType, EventKey, Value};
use std::cmp::Ordering;

/// A bounds-checked cursor over one state value. Every read names the aggregate it serves so
/// that a corrupt state produces an error that says where it broke.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Index of the aggregate being decoded, `None` for the row-count header (for error
    /// messages).
    pub(crate) agg: Option<usize>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0, agg: None }
    }

    /// Current offset in the state value.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    #[inline]
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], AggStateError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or(
            AggStateError::Truncated {
                agg: self.agg,
                offset: self.pos,
                needed: n,
                len: self.buf.len(),
            },
        )?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    #[inline]
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], AggStateError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    #[inline]
    pub(crate) fn u32(&mut self) -> Result<u32, AggStateError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    #[inline]
    pub(crate) fn u64(&mut self) -> Result<u64, AggStateError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    #[inline]
    pub(crate) fn i128(&mut self) -> Result<i128, AggStateError> {
        Ok(i128::from_le_bytes(self.array()?))
    }

    #[inline]
    pub(crate) fn f64(&mut self) -> Result<f64, AggStateError> {
        Ok(f64::from_le_bytes(self.array()?))
    }

    /// A variable-size section: a `u32` byte length, then that many bytes.
    pub(crate) fn section(&mut self) -> Result<&'a [u8], AggStateError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    /// Errors unless every byte was consumed.
    pub(crate) fn finish(&self) -> Result<(), AggStateError> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(AggStateError::TrailingBytes { offset: self.pos, len: self.buf.len() })
        }
    }
}

#[inline]
pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

#[inline]
pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

#[inline]
pub(crate) fn put_i128(out: &mut Vec<u8>, v: i128) {
    out.extend_from_slice(&v.to_le_bytes());
}

#[inline]
pub(crate) fn put_f64(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Reserves a `u32` length prefix; returns its position for [`end_section`].
pub(crate) fn begin_section(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    at
}

/// Fills the length prefix reserved by [`begin_section`].
pub(crate) fn end_section(
    out: &mut [u8],
    at: usize,
    agg: Option<usize>,
) -> Result<(), AggStateError> {
    let len = out.len() - at - 4;
    let len32 = u32::try_from(len).map_err(|_| AggStateError::TooLarge { agg, len })?;
    out[at..at + 4].copy_from_slice(&len32.to_le_bytes());
    Ok(())
}

/// A non-NULL argument value, borrowed from the event (no allocation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Scalar<'a> {
    Int(i64),
    Float(f64),
    Str(&'a str),
    Bool(bool),
}

impl<'a> Scalar<'a> {
    /// The argument of aggregate `agg` (declared type `ty`) as a scalar; `None` for NULL.
    /// An int argument of a float column is widened; any other mismatch is an error.
    pub(crate) fn of(
        v: &'a Value,
        ty: DataType,
        agg: Option<usize>,
        name: &'static str,
    ) -> Result<Option<Scalar<'a>>, AggStateError> {
        let s = match (v, ty) {
            (Value::Null, _) => return Ok(None),
            (Value::Int(i), DataType::Int) => Scalar::Int(*i),
            (Value::Int(i), DataType::Float) => Scalar::Float(*i as f64),
            (Value::Float(f), DataType::Float) => Scalar::Float(*f),
            (Value::Str(s), DataType::Str) => Scalar::Str(s),
            (Value::Bool(b), DataType::Bool) => Scalar::Bool(*b),
            (other, _) => {
                return Err(AggStateError::ArgType {
                    agg,
                    name,
                    expected: ty,
                    found: other.data_type().unwrap_or(ty),
                })
            }
        };
        Ok(Some(s))
    }

    /// Numeric view (ints widened).
    pub(crate) fn as_f64(self) -> Option<f64> {
        match self {
            Scalar::Int(i) => Some(i as f64),
            Scalar::Float(f) => Some(f),
            _ => None,
        }
    }

    /// Order used by MIN/MAX: numbers numerically (floats by `f64::total_cmp`), strings
    /// by bytes, `false < true`. Values of different kinds never meet in one state (the
    /// column type fixes the kind); they order by tag for totality.
    pub(crate) fn cmp(self, other: Scalar<'_>) -> Ordering {
        match (self, other) {
            (Scalar::Int(a), Scalar::Int(b)) => a.cmp(&b),
            (Scalar::Float(a), Scalar::Float(b)) => a.total_cmp(&b),
            (Scalar::Str(a), Scalar::Str(b)) => a.as_bytes().cmp(b.as_bytes()),
            (Scalar::Bool(a), Scalar::Bool(b)) => a.cmp(&b),
            (a, b) => a.tag().cmp(&b.tag()),
        }
    }

    fn tag(self) -> u8 {
        match self {
            Scalar::Int(_) => TAG_INT,
            Scalar::Float(_) => TAG_FLOAT,
            Scalar::Str(_) => TAG_STR,
            Scalar::Bool(_) => TAG_BOOL,
        }
    }

    pub(crate) fn to_value(self) -> Value {
        match self {
            Scalar::Int(i) => Value::Int(i),
            Scalar::Float(f) => Value::Float(f),
            Scalar::Str(s) => Value::Str(s.into()),
            Scalar::Bool(b) => Value::Bool(b),
        }
    }
}

const TAG_NULL: u8 = 0;
const TAG_INT: u8 = 1;
const TAG_FLOAT: u8 = 2;
const TAG_STR: u8 = 3;
const TAG_BOOL: u8 = 4;

/// Appends the tagged encoding of an optional scalar: a tag byte (0 NULL, 1 int, 2 float,
/// 3 string, 4 bool), then i64 LE / f64 bits LE / u32 LE length + UTF-8 bytes / one byte.
pub(crate) fn put_tagged(out: &mut Vec<u8>, v: Option<Scalar<'_>>) {
    match v {
        None => out.push(TAG_NULL),
        Some(Scalar::Int(i)) => {
            out.push(TAG_INT);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Some(Scalar::Float(f)) => {
            out.push(TAG_FLOAT);
            out.extend_from_slice(&f.to_le_bytes());
        }
        Some(Scalar::Str(s)) => {
            out.push(TAG_STR);
            // Strings longer than u32::MAX cannot occur in a state (sections are u32-sized);
            // `end_section` rejects the state before that matters.
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        Some(Scalar::Bool(b)) => {
            out.push(TAG_BOOL);
            out.push(u8::from(b));
        }
    }
}

/// Decodes one tagged value from `r`.
pub(crate) fn get_tagged<'a>(r: &mut Reader<'a>) -> Result<Option<Scalar<'a>>, AggStateError> {
    let at = r.pos();
    let tag = r.array::<1>()?[0];
    Ok(Some(match tag {
        TAG_NULL => return Ok(None),
        TAG_INT => Scalar::Int(i64::from_le_bytes(r.array()?)),
        TAG_FLOAT => Scalar::Float(r.f64()?),
        TAG_STR => {
            let len = r.u32()? as usize;
            let bytes = r.take(len)?;
            Scalar::Str(std::str::from_utf8(bytes).map_err(|_| AggStateError::Corrupt {
                agg: r.agg,
                offset: at,
                what: "a string value that is not UTF-8",
            })?)
        }
        TAG_BOOL => match r.array::<1>()?[0] {
            0 => Scalar::Bool(false),
            1 => Scalar::Bool(true),
            _ => {
                return Err(AggStateError::Corrupt {
                    agg: r.agg,
                    offset: at,
                    what: "a bool byte other than 0 or 1",
                })
            }
        },
        _ => {
            return Err(AggStateError::Corrupt {
                agg: r.agg,
                offset: at,
                what: "an unknown value tag (expected 0..=4)",
            })
        }
    }))
}

/// Writes an event key: time i64 LE, seq u64 LE.
pub(crate) fn put_key(out: &mut Vec<u8>, k: EventKey) {
    out.extend_from_slice(&k.time.to_le_bytes());
    out.extend_from_slice(&k.seq.to_le_bytes());
}

/// One entry of an [`EntryList`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry<'a> {
    /// Byte range of the whole entry within the list.
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) key: EventKey,
    pub(crate) value: Option<Scalar<'a>>,
}

/// Appends one entry: `[time i64][seq u64][tagged value][u32 entry length]`. The trailing
/// length lets the list be walked backwards (a boundary tag).
pub(crate) fn put_entry(out: &mut Vec<u8>, key: EventKey, v: Option<Scalar<'_>>) {
    let start = out.len();
    put_key(out, key);
    put_tagged(out, v);
    let len = (out.len() - start + 4) as u32;
    put_u32(out, len);
}

/// A run of entries in key order, walkable in both directions, every step bounds-checked.
#[derive(Clone, Copy)]
pub(crate) struct EntryList<'a> {
    pub(crate) bytes: &'a [u8],
    /// Offset of `bytes` within the whole state (for error messages).
    pub(crate) base: usize,
    pub(crate) agg: Option<usize>,
}

impl<'a> EntryList<'a> {
    fn corrupt(&self, offset: usize, what: &'static str) -> AggStateError {
        AggStateError::Corrupt { agg: self.agg, offset: self.base + offset, what }
    }

    /// The entry starting at byte `start`.
    pub(crate) fn at(&self, start: usize) -> Result<Entry<'a>, AggStateError> {
        let mut r = Reader { buf: self.bytes, pos: start, agg: self.agg };
        let time = i64::from_le_bytes(r.array()?);
        let seq = r.u64()?;
        let value = get_tagged(&mut r)?;
        let len = r.u32()? as usize;
        if len != r.pos() - start {
            return Err(self.corrupt(start, "an entry whose trailing length does not match"));
        }
        Ok(Entry { start, end: r.pos(), key: EventKey { time, seq }, value })
    }

    /// The entry ending at byte `end`.
    pub(crate) fn before(&self, end: usize) -> Result<Entry<'a>, AggStateError> {
        if end < 4 || end > self.bytes.len() {
            return Err(self.corrupt(end, "an entry boundary outside the list"));
        }
        let mut tag = [0u8; 4];
        tag.copy_from_slice(&self.bytes[end - 4..end]);
        let len = u32::from_le_bytes(tag) as usize;
        let start = end
            .checked_sub(len)
            .ok_or_else(|| self.corrupt(end - 4, "an entry length longer than the list"))?;
        let e = self.at(start)?;
        if e.end != end {
            return Err(self.corrupt(start, "an entry whose trailing length does not match"));
        }
        Ok(e)
    }

    /// Offset of the first entry whose key is greater than `key`, scanning backwards from
    /// `end` down to `floor` (cheap when `key` belongs near the end, the common case).
    /// `floor` must be an entry boundary: an entry that starts below it is an error.
    pub(crate) fn upper_bound_from_back(
        &self,
        floor: usize,
        end: usize,
        key: EventKey,
    ) -> Result<usize, AggStateError> {
        let mut pos = end;
        while pos > floor {
            let e = self.before(pos)?;
            if e.key < key {
                break;
            }
            if e.start < floor {
                return Err(self.corrupt(floor, "an entry boundary inside an entry"));
            }
            pos = e.start;
        }
        Ok(pos)
    }

    /// The entry with exactly `key` in `[from, to)`, searching from the back.
    pub(crate) fn find_from_back(
        &self,
        from: usize,
        to: usize,
        key: EventKey,
    ) -> Result<Option<Entry<'a>>, AggStateError> {
        let mut pos = to;
        while pos > from {
            let e = self.before(pos)?;
            if e.key == key {
                return Ok(Some(e));
            }
            if e.key < key {
                return Ok(None);
            }
            pos = e.start;
        }
        Ok(None)
    }
}

/// Appends the same bytes as [`Value::encode_key`] for this scalar (equal values give equal
/// bytes: floats fold `-0` to `+0` and every NaN to one NaN), without building a `Value`.
pub(crate) fn put_scalar_key(out: &mut Vec<u8>, v: Scalar<'_>) {
    match v {
        Scalar::Int(i) => value::encode_int_key(i, out),
        Scalar::Float(f) => value::encode_float_key(f, out),
        Scalar::Str(s) => value::encode_str_key(s, out),
        Scalar::Bool(b) => value::encode_bool_key(b, out),
    }
}
