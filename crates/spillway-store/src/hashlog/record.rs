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

/// The record at the start of `rest`, the bytes from it to the used end of its page,
/// if its header and its whole size lie in `rest` and its value fits its capacity
/// (else the page is damaged). The walkers over a page's records check each with this
/// before reading its fields: a page read from disk is checked by its checksum only.
pub(crate) fn rec_within(rest: &[u8]) -> Option<Rec<'_>> {
    if rest.len() < REC_HDR {
        return None;
    }
    let r = Rec(rest);
    (r.vlen() <= r.vcap() && r.size() <= rest.len()).then_some(r)
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostile::{damaged, damages};
    use crate::{HashLogOptions, HashLogStore, NamespaceSpec, StateStore, StoreOptions};
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any bytes, and damaged valid records (a key, value or capacity length set
        /// huge, a cut), as the rest of a page: `rec_within` accepts only a record whose
        /// every field lies inside.
        #[test]
        fn hostile_record_headers_are_an_error_not_a_panic(
            raw in proptest::collection::vec(any::<u8>(), 0..80),
            key in proptest::collection::vec(any::<u8>(), 0..9),
            value in proptest::collection::vec(any::<u8>(), 0..9),
            ds in damages(),
        ) {
            let mut valid = vec![0u8; record_size(key.len(), value.len() + 3)];
            write_record(&mut valid, 1, &key, &value, value.len() + 3);
            let r = rec_within(&valid).expect("a valid record");
            prop_assert_eq!((r.key(), r.value()), (&key[..], &value[..]));
            for b in [raw, damaged(&valid, &ds)] {
                if let Some(r) = rec_within(&b) {
                    prop_assert!(r.size() <= b.len());
                    let _ = (r.ns(), r.key(), r.value(), r.crc_span(), r.is_tombstone());
                }
            }
        }
    }

    /// An on-disk page whose used length (checksum rewritten) ends 8 bytes into a
    /// record: reading the page's records is a corruption error naming the segment,
    /// not a read of the header past the page's bytes.
    #[test]
    fn a_page_cutting_a_record_header_is_corrupt_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let opts = || {
            let o = StoreOptions::new(dir.path()).memory_budget(1 << 20);
            (
                o.namespace(NamespaceSpec::list("c")),
                HashLogOptions::for_budget(1 << 20).page_size(4096),
            )
        };
        {
            let (o, h) = opts();
            let mut s = HashLogStore::open(o, h).unwrap();
            let ns = s.namespace("c").unwrap();
            for i in 0u32..200 {
                s.put(ns, &i.to_be_bytes(), &[7; 40]).unwrap();
            }
            s.checkpoint().unwrap();
        }
        let seg = dir.path().join("log-0000000000.seg");
        let mut f = std::fs::read(&seg).unwrap();
        let page = &mut f[4096..8192];
        put_u32(page, 16, (PAGE_HDR + 8) as u32);
        let crc = crc32c::crc32c(&page[4..PAGE_HDR + 8]);
        put_u32(page, 0, crc);
        std::fs::write(&seg, &f).unwrap();
        let (o, h) = opts();
        let e = match HashLogStore::open(o, h) {
            Err(e) => e,
            Ok(mut s) => {
                let ns = s.namespace("c").unwrap();
                crate::StateStoreExt::scan_prefix(&mut s, ns, b"", &mut |_, _| true).unwrap_err()
            }
        };
        assert!(
            matches!(&e, crate::Error::Corrupt { path, .. } if path.ends_with("log-0000000000.seg")),
            "{e}"
        );
    }
}
