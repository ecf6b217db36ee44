//! MIN/MAX: a monotonic deque keyed by event key, with a raw tail for events that may
//! still be taken out by `remove_recent`.
//!
//! Section content (after the `u32` section length; an empty section means no entries):
//!
//! ```text
//! [mono_bytes u32][entry]*        entry = [time i64][seq u64][tagged value][entry_len u32]
//! ```
//!
//! All entries are in key order. The first `mono_bytes` bytes are the *monotonic part*:
//! events older than the horizon (they can only leave by eviction, oldest first), kept only
//! when no newer stable event beats them, so their values strictly improve from newest to
//! oldest (for MIN: strictly increasing oldest → newest) and the front is the best among
//! them. The rest is the *tail*: events at or after the horizon, kept raw because
//! `remove_recent` may take any of them out, so none of them may drop an older entry yet.
//! An insert first folds the tail entries that fell below its horizon into the monotonic
//! part (a monotonic push each), then places the new event at its key position. In a
//! window that never evicts (`UNBOUNDED PRECEDING`) the monotonic part is cut to its
//! front after every insert.

use super::codec::{begin_section, end_section, put_entry, put_u32, Entry, EntryList, Scalar};
use super::AggStateError;
use crate::value::{EventKey, Value};
use std::cmp::Ordering;

/// Splits a section into the monotonic part length and the entry list.
fn parse(
    sec: &[u8],
    base: usize,
    agg: Option<usize>,
) -> Result<(usize, EntryList<'_>), AggStateError> {
    if sec.is_empty() {
        return Ok((0, EntryList { bytes: &[], base, agg }));
    }
    if sec.len() < 4 {
        return Err(AggStateError::Corrupt {
            agg,
            offset: base,
            what: "a MIN/MAX section shorter than its 4-byte header",
        });
    }
    let mut h = [0u8; 4];
    h.copy_from_slice(&sec[..4]);
    let mono = u32::from_le_bytes(h) as usize;
    let list = EntryList { bytes: &sec[4..], base: base + 4, agg };
    if mono > list.bytes.len() {
        return Err(AggStateError::Corrupt {
            agg,
            offset: base,
            what: "a MIN/MAX monotonic part longer than the section",
        });
    }
    Ok((mono, list))
}

fn value_of<'a>(
    e: &Entry<'a>,
    agg: Option<usize>,
    base: usize,
) -> Result<Scalar<'a>, AggStateError> {
    e.value.ok_or(AggStateError::Corrupt {
        agg,
        offset: base + e.start,
        what: "a NULL entry in a MIN/MAX state",
    })
}

/// True when `a` is at least as good as `b` (so `a`, being newer, makes `b` useless).
fn at_least_as_good(a: Scalar<'_>, b: Scalar<'_>, max: bool) -> bool {
    let o = a.cmp(b);
    if max {
        o != Ordering::Less
    } else {
        o != Ordering::Greater
    }
}

/// Monotonic push onto the stable entries written so far (`out[start..]`): drops entries
/// that `v` beats or ties, then appends `bytes` (the encoded entry for `v`).
fn push(
    out: &mut Vec<u8>,
    start: usize,
    agg: Option<usize>,
    max: bool,
    v: Scalar<'_>,
    write: impl FnOnce(&mut Vec<u8>),
) -> Result<(), AggStateError> {
    while out.len() > start {
        let list = EntryList { bytes: &out[start..], base: 0, agg };
        let back = list.before(list.bytes.len())?;
        let bv = value_of(&back, agg, 0)?;
        if !at_least_as_good(v, bv, max) {
            break;
        }
        let cut = start + back.start;
        out.truncate(cut);
    }
    write(out);
    Ok(())
}

/// Adds event `key` with value `x` under `horizon`; writes the whole section (with its
/// length prefix) to `out`. With `compact` (a window that never evicts) the monotonic
/// part keeps only its front, the best stable entry: the others would only matter after
/// the front's eviction.
#[allow(clippy::too_many_arguments)]
pub(crate) fn insert(
    sec: &[u8],
    base: usize,
    agg: Option<usize>,
    out: &mut Vec<u8>,
    key: EventKey,
    x: Scalar<'_>,
    horizon: EventKey,
    max: bool,
    compact: bool,
) -> Result<(), AggStateError> {
    let (mono_end, list) = parse(sec, base, agg)?;
    let bytes = list.bytes;
    let end = bytes.len();
    // Tail entries now below the horizon become stable.
    let mut fold_end = mono_end;
    while fold_end < end {
        let e = list.at(fold_end)?;
        if e.key >= horizon {
            break;
        }
        fold_end = e.end;
    }
    let at = begin_section(out);
    let mono_at = out.len();
    put_u32(out, 0);
    let start = out.len();
    let stable_x = key < horizon;
    let mut x_done = !stable_x;
    if stable_x && mono_end > 0 {
        let p = list.upper_bound_from_back(0, mono_end, key)?;
        // Entries before `p` are older than `x` and already monotonic: copy them in bulk.
        out.extend_from_slice(&bytes[..p]);
        if p < mono_end {
            push(out, start, agg, max, x, |o| put_entry(o, key, Some(x)))?;
            x_done = true;
            // The first newer monotonic entry may beat `x`; the ones after it only get
            // worse than it, so they follow in bulk.
            let e = list.at(p)?;
            let v = value_of(&e, agg, list.base)?;
            push(out, start, agg, max, v, |o| o.extend_from_slice(&bytes[e.start..e.end]))?;
            out.extend_from_slice(&bytes[e.end..mono_end]);
        }
    } else {
        out.extend_from_slice(&bytes[..mono_end]);
    }
    let mut pos = mono_end;
    while pos < fold_end {
        let e = list.at(pos)?;
        if !x_done && key < e.key {
            push(out, start, agg, max, x, |o| put_entry(o, key, Some(x)))?;
            x_done = true;
        }
        let v = value_of(&e, agg, list.base)?;
        push(out, start, agg, max, v, |o| o.extend_from_slice(&bytes[e.start..e.end]))?;
        pos = e.end;
    }
    if !x_done {
        push(out, start, agg, max, x, |o| put_entry(o, key, Some(x)))?;
    }
    if compact && out.len() > start {
        let front = EntryList { bytes: &out[start..], base: 0, agg }.at(0)?;
        out.truncate(start + front.end);
    }
    let mono_len = out.len() - start;
    if stable_x {
        out.extend_from_slice(&bytes[fold_end..]);
    } else {
        let q = list.upper_bound_from_back(fold_end, end, key)?;
        out.extend_from_slice(&bytes[fold_end..q]);
        put_entry(out, key, Some(x));
        out.extend_from_slice(&bytes[q..]);
    }
    set_mono(out, mono_at, mono_len, agg)?;
    end_section(out, at, agg)
}

fn set_mono(
    out: &mut [u8],
    mono_at: usize,
    mono_len: usize,
    agg: Option<usize>,
) -> Result<(), AggStateError> {
    let m = u32::try_from(mono_len).map_err(|_| AggStateError::TooLarge { agg, len: mono_len })?;
    out[mono_at..mono_at + 4].copy_from_slice(&m.to_le_bytes());
    Ok(())
}

/// Writes the section without the entry `e` (which lies in `list`).
fn write_without(
    out: &mut Vec<u8>,
    list: &EntryList<'_>,
    mono_end: usize,
    e: &Entry<'_>,
    agg: Option<usize>,
) -> Result<(), AggStateError> {
    let at = begin_section(out);
    if e.start == 0 && e.end == list.bytes.len() {
        // Last entry gone: the canonical empty section.
        return end_section(out, at, agg);
    }
    let mono = if e.end <= mono_end { mono_end - (e.end - e.start) } else { mono_end };
    let mono_at = out.len();
    put_u32(out, 0);
    out.extend_from_slice(&list.bytes[..e.start]);
    out.extend_from_slice(&list.bytes[e.end..]);
    set_mono(out, mono_at, mono, agg)?;
    end_section(out, at, agg)
}

fn copy(out: &mut Vec<u8>, sec: &[u8], agg: Option<usize>) -> Result<(), AggStateError> {
    let at = begin_section(out);
    out.extend_from_slice(sec);
    end_section(out, at, agg)
}

/// Removes the oldest event of the window: it is the front entry if it was kept at all.
pub(crate) fn evict(
    sec: &[u8],
    base: usize,
    agg: Option<usize>,
    out: &mut Vec<u8>,
    key: EventKey,
) -> Result<(), AggStateError> {
    let (mono_end, list) = parse(sec, base, agg)?;
    if !list.bytes.is_empty() {
        let e = list.at(0)?;
        if e.key == key {
            return write_without(out, &list, mono_end, &e, agg);
        }
    }
    copy(out, sec, agg)
}

/// Removes an event at or after the horizon: it sits in the tail (searched from the back).
pub(crate) fn remove_recent(
    sec: &[u8],
    base: usize,
    agg: Option<usize>,
    out: &mut Vec<u8>,
    key: EventKey,
) -> Result<(), AggStateError> {
    let (mono_end, list) = parse(sec, base, agg)?;
    let found = match list.find_from_back(mono_end, list.bytes.len(), key)? {
        Some(e) => Some(e),
        // Not in the tail: only possible if the caller broke the horizon contract; removing
        // it from the monotonic part keeps the state well-formed.
        None => list.find_from_back(0, mono_end, key)?,
    };
    match found {
        Some(e) => write_without(out, &list, mono_end, &e, agg),
        None => copy(out, sec, agg),
    }
}

/// The best value: the monotonic front against every tail entry.
pub(crate) fn result(
    sec: &[u8],
    base: usize,
    agg: Option<usize>,
    max: bool,
) -> Result<Value, AggStateError> {
    let (mono_end, list) = parse(sec, base, agg)?;
    let mut best: Option<Scalar<'_>> = None;
    let mut pos = if mono_end > 0 {
        let e = list.at(0)?;
        best = Some(value_of(&e, agg, list.base)?);
        mono_end
    } else {
        0
    };
    while pos < list.bytes.len() {
        let e = list.at(pos)?;
        let v = value_of(&e, agg, list.base)?;
        let better = match best {
            None => true,
            Some(b) => {
                let o = v.cmp(b);
                if max {
                    o == Ordering::Greater
                } else {
                    o == Ordering::Less
                }
            }
        };
        if better {
            best = Some(v);
        }
        pos = e.end;
    }
    Ok(best.map_or(Value::Null, Scalar::to_value))
}
