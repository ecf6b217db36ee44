//! Byte layout of log records and pages (see the FORMAT section of [`super`]).

/// Bytes of a record header.
pub(crate) const REC_HDR: usize = 24;
/// Bytes of a page header.
pub(crate) const PAGE_HDR: usize = 32;
/// Page magic, "SWPG" read as little-endian u32.
pub(crate) const PAGE_MAGIC: u32 = u32::from_le_bytes(*b"SWPG");
/// Version of the page and record layout. Version 2 added the tombstone flag; pages of
/// version 1 hold no tombstones and read the same.
pub(crate) const LOG_VERSION: u16 = 2;
/// Record flag (byte 6): a tombstone, the record of a delete (empty value, no index
/// entry points at it).
pub(crate) const FLAG_TOMBSTONE: u8 = 1;

use crate::bytes::u16_at;
pub(crate) use crate::bytes::{put_u32, u32_at};

/// Size of a record with the given key length and value capacity, 8-byte aligned.
#[inline]
pub(crate) fn record_size(klen: usize, vcap: usize) -> usize {
    (REC_HDR + klen + vcap + 7) & !7
}

/// Read accessors over a record's bytes.
pub(crate) struct Rec<'a>(pub(crate) &'a [u8]);

impl<'a> Rec<'a> {
    #[inline]
    pub(crate) fn ns(&self) -> u16 {
        u16_at(self.0, 4)
    }
    #[inline]
    pub(crate) fn klen(&self) -> usize {
        u32_at(self.0, 8) as usize
    }
    #[inline]
    pub(crate) fn vlen(&self) -> usize {
        u32_at(self.0, 12) as usize
    }
    #[inline]
    pub(crate) fn vcap(&self) -> usize {
        u32_at(self.0, 16) as usize
    }
    #[inline]
    pub(crate) fn is_tombstone(&self) -> bool {
        self.0[6] & FLAG_TOMBSTONE != 0
    }
    #[inline]
    pub(crate) fn key(&self) -> &'a [u8] {
        &self.0[REC_HDR..REC_HDR + self.klen()]
    }
    #[inline]
    pub(crate) fn value(&self) -> &'a [u8] {
        let k = REC_HDR + self.klen();
        &self.0[k..k + self.vlen()]
    }
    #[inline]
    pub(crate) fn size(&self) -> usize {
        record_size(self.klen(), self.vcap())
    }
    /// Bytes covered by the record checksum: header after the crc, key, value.
    pub(crate) fn crc_span(&self) -> &'a [u8] {
        &self.0[4..REC_HDR + self.klen() + self.vlen()]
    }
}

/// Writes a record header, key and value at the start of `dst`.
pub(crate) fn write_record(dst: &mut [u8], ns: u16, key: &[u8], value: &[u8], vcap: usize) {
    dst[0..4].fill(0);
    dst[4..6].copy_from_slice(&ns.to_le_bytes());
    dst[6..8].fill(0);
    put_u32(dst, 8, key.len() as u32);
    put_u32(dst, 12, value.len() as u32);
    put_u32(dst, 16, vcap as u32);
    put_u32(dst, 20, 0);
    dst[REC_HDR..REC_HDR + key.len()].copy_from_slice(key);
    let v = REC_HDR + key.len();
    dst[v..v + value.len()].copy_from_slice(value);
}

/// Writes a tombstone for (`ns`, `key`) at the start of `dst`: a record with an empty
/// value and capacity and [`FLAG_TOMBSTONE`] set.
pub(crate) fn write_tombstone(dst: &mut [u8], ns: u16, key: &[u8]) {
    write_record(dst, ns, key, &[], 0);
    dst[6] = FLAG_TOMBSTONE;
}
