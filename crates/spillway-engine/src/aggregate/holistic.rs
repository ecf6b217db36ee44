//! The holistic states: COUNT(DISTINCT) (value multiplicities), MEDIAN/PERCENTILE_CONT
//! (a sorted numeric multiset) and FIRST_VALUE/LAST_VALUE (every event in key order).
//! Each keeps exact information about the whole window, so its size and cost grow with
//! the window (see the table in the module above).

use super::codec::{
    begin_section, end_section, put_entry, put_f64, put_scalar_key, put_u32, put_u64, EntryList,
    Reader, Scalar,
};
use super::AggStateError;
use crate::value::{EventKey, Value};
use std::cmp::Ordering;

fn missing(agg: Option<usize>, name: &'static str, key: EventKey) -> AggStateError {
    AggStateError::Missing { agg, name, key }
}

// ---------------------------------------------------------------------------------------
// COUNT(DISTINCT x): [entry]* with entry = [key_len u32][Value::encode_key bytes][count u64],
// sorted by key bytes.

/// Adds (`delta > 0`) or removes one occurrence of `x`.
pub(crate) fn distinct_step(
    sec: &[u8],
    base: usize,
    agg: Option<usize>,
    out: &mut Vec<u8>,
    x: Scalar<'_>,
    delta: i8,
    key: EventKey,
) -> Result<(), AggStateError> {
    let mut enc = Vec::with_capacity(16);
    put_scalar_key(&mut enc, x);
    let at = begin_section(out);
    let mut r = Reader::new(sec);
    r.agg = agg;
    let mut done = false;
    while r.pos() < sec.len() && !done {
        let start = r.pos();
        let klen = r.u32()? as usize;
        let k = r.take(klen)?;
        let count_at = r.pos();
        let count = r.u64()?;
        match k.cmp(&enc[..]) {
            Ordering::Less => {
                out.extend_from_slice(&sec[start..r.pos()]);
                continue;
            }
            Ordering::Equal => {
                let c = if delta > 0 {
                    count.wrapping_add(1)
                } else {
                    count.checked_sub(1).ok_or(AggStateError::Corrupt {
                        agg,
                        offset: base + count_at,
                        what: "a COUNT(DISTINCT) multiplicity of 0",
                    })?
                };
                if c > 0 {
                    out.extend_from_slice(&sec[start..count_at]);
                    put_u64(out, c);
                }
            }
            Ordering::Greater => {
                if delta < 0 {
                    return Err(missing(agg, "COUNT(DISTINCT)", key));
                }
                put_distinct(out, &enc);
                out.extend_from_slice(&sec[start..r.pos()]);
            }
        }
        done = true;
    }
    if !done {
        if delta < 0 {
            return Err(missing(agg, "COUNT(DISTINCT)", key));
        }
        put_distinct(out, &enc);
    }
    out.extend_from_slice(&sec[r.pos()..]);
    end_section(out, at, agg)
}

fn put_distinct(out: &mut Vec<u8>, enc: &[u8]) {
    put_u32(out, enc.len() as u32);
    out.extend_from_slice(enc);
    put_u64(out, 1);
}

/// The number of entries (distinct values), after checking every entry's framing.
pub(crate) fn distinct_result(sec: &[u8], agg: Option<usize>) -> Result<Value, AggStateError> {
    let mut r = Reader::new(sec);
    r.agg = agg;
    let mut n: i64 = 0;
    while r.pos() < sec.len() {
        let klen = r.u32()? as usize;
        r.take(klen)?;
        r.u64()?;
        n += 1;
    }
    Ok(Value::Int(n))
}

// ---------------------------------------------------------------------------------------
// MEDIAN / PERCENTILE_CONT: [n u64][entry]* with entry = [value f64][count u64], sorted by
// f64::total_cmp (fixed 16-byte entries, found by binary search).

const PCT_ENTRY: usize = 16;

fn pct_parse(sec: &[u8], base: usize, agg: Option<usize>) -> Result<(u64, &[u8]), AggStateError> {
    if sec.is_empty() {
        return Ok((0, &[]));
    }
    let mut r = Reader::new(sec);
    r.agg = agg;
    let n = r.u64()?;
    let entries = &sec[8..];
    if !entries.len().is_multiple_of(PCT_ENTRY) {
        return Err(AggStateError::Corrupt {
            agg,
            offset: base + 8,
            what: "a PERCENTILE_CONT section that is not a whole number of 16-byte entries",
        });
    }
    Ok((n, entries))
}

fn pct_entry(entries: &[u8], i: usize) -> (f64, u64) {
    let e = &entries[i * PCT_ENTRY..(i + 1) * PCT_ENTRY];
    let mut v = [0u8; 8];
    v.copy_from_slice(&e[..8]);
    let mut c = [0u8; 8];
    c.copy_from_slice(&e[8..]);
    (f64::from_le_bytes(v), u64::from_le_bytes(c))
}

/// Adds (`delta > 0`) or removes one occurrence of `x`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pct_step(
    sec: &[u8],
    base: usize,
    agg: Option<usize>,
    out: &mut Vec<u8>,
    x: f64,
    delta: i8,
    key: EventKey,
    name: &'static str,
) -> Result<(), AggStateError> {
    let (n, entries) = pct_parse(sec, base, agg)?;
    let count = entries.len() / PCT_ENTRY;
    // Binary search by total order.
    let (mut lo, mut hi) = (0usize, count);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if pct_entry(entries, mid).0.total_cmp(&x) == Ordering::Less {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    let found = lo < count && pct_entry(entries, lo).0.total_cmp(&x) == Ordering::Equal;
    let at = begin_section(out);
    if delta > 0 {
        put_u64(out, n.wrapping_add(1));
        out.extend_from_slice(&entries[..lo * PCT_ENTRY]);
        if found {
            put_f64(out, x);
            put_u64(out, pct_entry(entries, lo).1.wrapping_add(1));
            out.extend_from_slice(&entries[(lo + 1) * PCT_ENTRY..]);
        } else {
            put_f64(out, x);
            put_u64(out, 1);
            out.extend_from_slice(&entries[lo * PCT_ENTRY..]);
        }
    } else {
        if !found {
            return Err(missing(agg, name, key));
        }
        let c = pct_entry(entries, lo).1;
        let n1 = n.checked_sub(1).ok_or(AggStateError::Corrupt {
            agg,
            offset: base,
            what: "a PERCENTILE_CONT value count of 0 with values present",
        })?;
        if n1 > 0 {
            put_u64(out, n1);
            out.extend_from_slice(&entries[..lo * PCT_ENTRY]);
            if c > 1 {
                put_f64(out, x);
                put_u64(out, c - 1);
            }
            out.extend_from_slice(&entries[(lo + 1) * PCT_ENTRY..]);
        }
    }
    end_section(out, at, agg)
}

/// `PERCENTILE_CONT(p)` as PostgreSQL defines it: with the `n` values sorted, rank
/// `p * (n - 1)`, linear interpolation between the values at `floor(rank)` and
/// `ceil(rank)`. Equal neighbours return that value (so infinities do not become NaN).
pub(crate) fn pct_result(
    sec: &[u8],
    base: usize,
    agg: Option<usize>,
    p: f64,
) -> Result<Value, AggStateError> {
    let (n, entries) = pct_parse(sec, base, agg)?;
    if n == 0 {
        return Ok(Value::Null);
    }
    let (lo_i, hi_i, rank) = pct_ranks(p, n);
    let mut lo_v = None;
    let mut hi_v = None;
    let mut seen = 0u64;
    for i in 0..entries.len() / PCT_ENTRY {
        let (v, c) = pct_entry(entries, i);
        seen = seen.saturating_add(c);
        if lo_v.is_none() && lo_i < seen {
            lo_v = Some(v);
        }
        if hi_i < seen {
            hi_v = Some(v);
            break;
        }
    }
    let (Some(a), Some(b)) = (lo_v, hi_v) else {
        return Err(AggStateError::Corrupt {
            agg,
            offset: base,
            what: "a PERCENTILE_CONT value count larger than the sum of multiplicities",
        });
    };
    Ok(Value::Float(pct_interpolate(a, b, rank)))
}

/// `PERCENTILE_CONT(p)`'s ranks among `n > 0` sorted values (0-based): `floor` and
/// `ceil` of `p * (n - 1)`, and that rank.
pub(crate) fn pct_ranks(p: f64, n: u64) -> (u64, u64, f64) {
    let rank = p * (n - 1) as f64;
    (rank.floor() as u64, rank.ceil() as u64, rank)
}

/// The value at fractional `rank` between `a` (at its floor) and `b` (at its ceil),
/// interpolated linearly; equal neighbours (or a whole rank) give `a`, so infinities do
/// not become NaN.
pub(crate) fn pct_interpolate(a: f64, b: f64, rank: f64) -> f64 {
    if rank.fract() == 0.0 || a == b {
        a
    } else {
        a + rank.fract() * (b - a)
    }
}

// ---------------------------------------------------------------------------------------
// FIRST_VALUE / LAST_VALUE: [entry]* in key order, entry = [time i64][seq u64]
// [tagged value (NULL allowed)][entry_len u32].

/// Adds event `key` with value `v` (NULL kept: RESPECT NULLS) at its key position.
#[allow(clippy::too_many_arguments)]
pub(crate) fn fl_insert(
    sec: &[u8],
    base: usize,
    agg: Option<usize>,
    out: &mut Vec<u8>,
    key: EventKey,
    v: Option<Scalar<'_>>,
    horizon: EventKey,
    compact: bool,
) -> Result<(), AggStateError> {
    let list = EntryList { bytes: sec, base, agg };
    let q = list.upper_bound_from_back(0, sec.len(), key)?;
    let at = begin_section(out);
    out.extend_from_slice(&sec[..q]);
    put_entry(out, key, v);
    out.extend_from_slice(&sec[q..]);
    if compact {
        // Entries before the horizon only leave by eviction, which never comes: of them
        // only the oldest (FIRST_VALUE) and the newest (LAST_VALUE once the later ones
        // are removed from a copy) can still be a result.
        let start = at + 4;
        let list = EntryList { bytes: &out[start..], base, agg };
        let first = list.at(0)?;
        if first.key < horizon {
            let mut last = first;
            while last.end < list.bytes.len() {
                let e = list.at(last.end)?;
                if e.key >= horizon {
                    break;
                }
                last = e;
            }
            let (from, to) = (start + first.end, start + last.start);
            if from < to {
                out.drain(from..to);
            }
        }
    }
    end_section(out, at, agg)
}

/// Removes event `key` (looked for at the front first when `oldest`, else from the back).
pub(crate) fn fl_remove(
    sec: &[u8],
    base: usize,
    agg: Option<usize>,
    out: &mut Vec<u8>,
    key: EventKey,
    oldest: bool,
    name: &'static str,
) -> Result<(), AggStateError> {
    let list = EntryList { bytes: sec, base, agg };
    let mut found = None;
    if oldest && !sec.is_empty() {
        let e = list.at(0)?;
        if e.key == key {
            found = Some(e);
        }
    }
    if found.is_none() {
        found = list.find_from_back(0, sec.len(), key)?;
    }
    let e = found.ok_or_else(|| missing(agg, name, key))?;
    let at = begin_section(out);
    out.extend_from_slice(&sec[..e.start]);
    out.extend_from_slice(&sec[e.end..]);
    end_section(out, at, agg)
}

/// The oldest (`last == false`) or newest entry's value; NULL for an empty window.
pub(crate) fn fl_result(
    sec: &[u8],
    base: usize,
    agg: Option<usize>,
    last: bool,
) -> Result<Value, AggStateError> {
    if sec.is_empty() {
        return Ok(Value::Null);
    }
    let list = EntryList { bytes: sec, base, agg };
    let e = if last { list.before(sec.len())? } else { list.at(0)? };
    Ok(e.value.map_or(Value::Null, Scalar::to_value))
}
