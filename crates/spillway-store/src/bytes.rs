//! Fixed-width little-endian fields at byte offsets: the integers of the FORMAT
//! sections (hashlog records and pages, appendlog heads, the order-statistics tree's
//! headers and nodes, the engine's reservoir segments) are read and written through
//! these, so every layout says "little-endian" once.
//!
//! Each function panics when the field does not lie inside the slice: a format's parser
//! checks the length of what it read before it reads the fields (a short value is a
//! corruption error, never a panic).
//!
//! ```
//! use spillway_store::bytes::{put_u32, u32_at};
//!
//! let mut b = [0u8; 8];
//! put_u32(&mut b, 4, 0x0403_0201);
//! assert_eq!(b, [0, 0, 0, 0, 1, 2, 3, 4]);
//! assert_eq!(u32_at(&b, 4), 0x0403_0201);
//! ```

/// The `N` bytes of `b` at `at`.
#[inline]
fn field<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

/// The little-endian `u16` at byte `at` of `b`.
#[inline]
pub fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(field(b, at))
}

/// The little-endian `u32` at byte `at` of `b`.
#[inline]
pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(field(b, at))
}

/// The little-endian `u64` at byte `at` of `b`.
#[inline]
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(field(b, at))
}

/// Writes `v` little-endian at byte `at` of `b`.
#[inline]
pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` little-endian at byte `at` of `b`.
#[inline]
pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` little-endian at byte `at` of `b`.
#[inline]
pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_little_endian_at_their_offset() {
        let mut b = [0xAAu8; 16];
        put_u16(&mut b, 1, 0x0201);
        put_u32(&mut b, 3, 0x0605_0403);
        put_u64(&mut b, 7, 0x0e0d_0c0b_0a09_0807);
        assert_eq!(b, [0xAA, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0xAA]);
        assert_eq!(u16_at(&b, 1), 0x0201);
        assert_eq!(u32_at(&b, 3), 0x0605_0403);
        assert_eq!(u64_at(&b, 7), 0x0e0d_0c0b_0a09_0807);
    }

    #[test]
    #[should_panic]
    fn a_field_past_the_end_panics() {
        u64_at(&[0u8; 8], 1);
    }
}
