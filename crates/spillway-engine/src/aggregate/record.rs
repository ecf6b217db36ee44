//! State records: the aggregation states of several group-by nodes in one store value.
//!
//! The `RANGE` group-by nodes of a query that share a `PARTITION BY` keep their states
//! for one partition key side by side in one value (see [`crate::plan::RecordNode`]),
//! so ten windows over the same card cost one read-modify-write per event at arrival,
//! not ten, and one key in the store, not ten. This module owns the value's layout:
//! reading a member's slot, and writing a record slot by slot.
//!
//! # FORMAT
//!
//! A record of `n` members is `n` slots in member order; a slot is
//! `[len LEB128 u32][len bytes]`, the member's [`AggSet`](super::AggSet) state (its own
//! FORMAT), or `len = 0` when the member holds nothing for this key (every `AggSet` state
//! starts with its 8-byte row count, so a real state is never empty). A record whose
//! every slot is empty is deleted rather than written. The member count and order come
//! from the query's plan, which the checkpoint pins (a checkpoint written before records
//! existed is refused by its version); a value with fewer slots, a length past its end
//! or bytes after its last slot is an error, never a guess.

use std::fmt;

/// A record value that does not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError(pub String);

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RecordError {}

/// Reads the slots of a record in order. An absent record (`None`) reads as `n` empty
/// slots.
pub struct Slots<'a> {
    data: &'a [u8],
    pos: usize,
    left: usize,
}

impl<'a> Slots<'a> {
    /// The `n` slots of `record`.
    pub fn new(record: Option<&'a [u8]>, n: usize) -> Slots<'a> {
        Slots { data: record.unwrap_or(&[]), pos: 0, left: n }
    }

    /// The byte offset of the next slot in the record.
    #[inline]
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// The next slot's state (`None`: the member holds nothing).
    #[inline]
    pub fn next_slot(&mut self) -> Result<Option<&'a [u8]>, RecordError> {
        if self.left == 0 {
            return Err(RecordError("read past the record's last slot".into()));
        }
        self.left -= 1;
        if self.data.is_empty() {
            return Ok(None);
        }
        let (len, used) = read_len(&self.data[self.pos..]).ok_or_else(|| {
            RecordError(format!("slot length at byte {} does not decode", self.pos))
        })?;
        let start = self.pos + used;
        let end = start.checked_add(len).filter(|&e| e <= self.data.len()).ok_or_else(|| {
            RecordError(format!(
                "slot of {len} bytes at byte {start} runs past the record's {} bytes",
                self.data.len()
            ))
        })?;
        self.pos = end;
        if self.left == 0 && end != self.data.len() {
            return Err(RecordError(format!(
                "{} bytes after the record's last slot",
                self.data.len() - end
            )));
        }
        Ok((len > 0).then(|| &self.data[start..end]))
    }
}

/// Slot `i` of a record of `n` members.
pub fn slot(record: &[u8], n: usize, i: usize) -> Result<Option<&[u8]>, RecordError> {
    let mut s = Slots::new(Some(record), n);
    let mut found = None;
    for j in 0..n {
        let v = s.next_slot()?;
        if j == i {
            found = v;
        }
    }
    Ok(found)
}

/// Appends one slot holding `state` (`None` or empty: nothing) to `out`.
#[inline]
pub fn put_slot(out: &mut Vec<u8>, state: Option<&[u8]>) {
    let s = state.unwrap_or(&[]);
    let mut len = s.len() as u32;
    loop {
        let b = (len & 0x7F) as u8;
        len >>= 7;
        if len == 0 {
            out.push(b);
            break;
        }
        out.push(b | 0x80);
    }
    out.extend_from_slice(s);
}

/// Writes to `out` the record `old` (of `n` members) with slot `i` replaced by `state`;
/// returns whether any slot holds state (if not, the record should be deleted).
pub fn with_slot(
    old: Option<&[u8]>,
    n: usize,
    i: usize,
    state: Option<&[u8]>,
    out: &mut Vec<u8>,
) -> Result<bool, RecordError> {
    out.clear();
    let mut slots = Slots::new(old, n);
    let mut any = false;
    for j in 0..n {
        let s = slots.next_slot()?;
        let s = if j == i { state.filter(|s| !s.is_empty()) } else { s };
        any |= s.is_some();
        put_slot(out, s);
    }
    Ok(any)
}

fn read_len(b: &[u8]) -> Option<(usize, usize)> {
    let mut v: u32 = 0;
    for (i, &x) in b.iter().enumerate().take(5) {
        let part = u32::from(x & 0x7F);
        if i == 4 && part > 0x0F {
            return None;
        }
        v |= part << (7 * i);
        if x & 0x80 == 0 {
            return Some((v as usize, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn build(slots: &[Option<Vec<u8>>]) -> Vec<u8> {
        let mut out = Vec::new();
        for s in slots {
            put_slot(&mut out, s.as_deref());
        }
        out
    }

    #[test]
    fn layout_is_pinned() {
        let r = build(&[Some(vec![1, 2, 3]), None, Some(vec![9; 130])]);
        assert_eq!(&r[..5], &[3, 1, 2, 3, 0]);
        assert_eq!(&r[5..7], &[0x82, 0x01]);
        assert_eq!(r.len(), 7 + 130);
    }

    #[test]
    fn absent_record_is_empty_slots() {
        let mut s = Slots::new(None, 2);
        assert_eq!(s.next_slot().unwrap(), None);
        assert_eq!(s.next_slot().unwrap(), None);
        assert!(s.next_slot().is_err());
    }

    #[test]
    fn bad_records_are_errors() {
        let r = build(&[Some(vec![1, 2, 3]), Some(vec![4])]);
        // Truncated.
        assert!(slot(&r[..r.len() - 1], 2, 1).is_err());
        // Fewer slots than members.
        assert!(slot(&r, 3, 0).is_err());
        // Bytes after the last slot.
        assert!(slot(&r, 1, 0).is_err());
        // A length that never ends.
        assert!(slot(&[0xFF; 6], 1, 0).is_err());
    }

    #[test]
    fn one_slot_is_replaced() {
        let r = build(&[Some(vec![1]), None, Some(vec![3])]);
        let mut out = Vec::new();
        assert!(with_slot(Some(&r), 3, 1, Some(&[2, 2]), &mut out).unwrap());
        assert_eq!(out, build(&[Some(vec![1]), Some(vec![2, 2]), Some(vec![3])]));
        assert!(with_slot(None, 2, 0, Some(&[7]), &mut out).unwrap());
        assert_eq!(out, build(&[Some(vec![7]), None]));
        let one = build(&[None, Some(vec![5])]);
        assert!(!with_slot(Some(&one), 2, 1, None, &mut out).unwrap());
    }

    proptest! {
        #[test]
        fn slots_round_trip(slots in proptest::collection::vec(
            proptest::option::of(proptest::collection::vec(any::<u8>(), 1..300)), 1..12)) {
            let r = build(&slots);
            for (i, want) in slots.iter().enumerate() {
                prop_assert_eq!(slot(&r, slots.len(), i).unwrap(), want.as_deref());
            }
        }

        #[test]
        fn hostile_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64),
                                     n in 1usize..6) {
            let mut s = Slots::new(Some(&bytes), n);
            for _ in 0..n {
                if s.next_slot().is_err() { break; }
            }
        }
    }
}
