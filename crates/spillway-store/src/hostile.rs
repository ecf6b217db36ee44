//! Test helpers of the hostile-input tests: damage applied to a valid encoding (a
//! flipped byte, a cut, a length or count field set huge, bytes appended), so that a
//! decoder's proptest reaches past its first check with bytes a crash, a bit flip or a
//! hostile file can produce.

use proptest::prelude::*;

/// One change to an encoding. Positions are taken modulo the encoding's length.
#[derive(Clone, Debug)]
pub(crate) enum Damage {
    /// XORs the byte at `at` with `mask`.
    Flip { at: usize, mask: u8 },
    /// Keeps the first `keep` bytes (modulo the length + 1).
    Truncate { keep: usize },
    /// Overwrites a little-endian u16 at `at` (a short length field).
    U16 { at: usize, v: u16 },
    /// Overwrites a little-endian u32 at `at` (a length or count field).
    U32 { at: usize, v: u32 },
    /// Overwrites a little-endian u64 at `at`.
    U64 { at: usize, v: u64 },
    /// Appends bytes.
    Extend { bytes: Vec<u8> },
}

/// Values a damaged field takes: small, huge and at the type's edges.
fn wide_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..16,
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(u64::from(u32::MAX)),
        Just(u64::from(u32::MAX) + 1),
        Just(1 << 63),
        any::<u64>(),
    ]
}

/// Any one [`Damage`].
pub(crate) fn damage() -> impl Strategy<Value = Damage> {
    let at = any::<usize>();
    prop_oneof![
        3 => (at, 1u8..=255).prop_map(|(at, mask)| Damage::Flip { at, mask }),
        2 => any::<usize>().prop_map(|keep| Damage::Truncate { keep }),
        1 => (at, wide_u64()).prop_map(|(at, v)| Damage::U16 { at, v: v as u16 }),
        2 => (at, wide_u64()).prop_map(|(at, v)| Damage::U32 { at, v: v as u32 }),
        2 => (at, wide_u64()).prop_map(|(at, v)| Damage::U64 { at, v }),
        1 => proptest::collection::vec(any::<u8>(), 1..16).prop_map(|bytes| Damage::Extend { bytes }),
    ]
}

/// One to three damages.
pub(crate) fn damages() -> impl Strategy<Value = Vec<Damage>> {
    proptest::collection::vec(damage(), 1..4)
}

/// Applies `d` to `b` (a write that does not fit is cut at the end of `b`).
pub(crate) fn apply(b: &mut Vec<u8>, d: &Damage) {
    let put = |b: &mut Vec<u8>, at: usize, v: &[u8]| {
        if b.is_empty() {
            return;
        }
        let at = at % b.len();
        let n = v.len().min(b.len() - at);
        b[at..at + n].copy_from_slice(&v[..n]);
    };
    match d {
        Damage::Flip { at, mask } => {
            if !b.is_empty() {
                let at = at % b.len();
                b[at] ^= mask;
            }
        }
        Damage::Truncate { keep } => {
            let keep = keep % (b.len() + 1);
            b.truncate(keep);
        }
        Damage::U16 { at, v } => put(b, *at, &v.to_le_bytes()),
        Damage::U32 { at, v } => put(b, *at, &v.to_le_bytes()),
        Damage::U64 { at, v } => put(b, *at, &v.to_le_bytes()),
        Damage::Extend { bytes } => b.extend_from_slice(bytes),
    }
}

/// `b` with every damage of `ds` applied.
pub(crate) fn damaged(b: &[u8], ds: &[Damage]) -> Vec<u8> {
    let mut b = b.to_vec();
    for d in ds {
        apply(&mut b, d);
    }
    b
}
