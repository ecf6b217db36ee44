//! Byte layout of list heads and chunk keys (see the FORMAT section of [`super`]).

use crate::bytes::{put_u32, put_u64, u32_at, u64_at};

/// Version of the head layout.
pub(crate) const HEAD_VERSION: u8 = 1;
/// Offset of the version byte.
const VERSION: usize = 0;
/// Offset of the flags byte.
const FLAGS: usize = 1;
/// Offset of the two reserved (zero) bytes.
const RESERVED: usize = 2;
/// Offset of the element count (u64).
const COUNT: usize = 4;
/// Offset of the byte length of the live list (u64).
const BYTES: usize = 12;
/// Offset of the first chunk number (u32).
const FIRST: usize = 20;
/// Offset of the last chunk number (u32).
const LAST: usize = 24;
/// Offset of the byte offset of the first live element in the first chunk (u32).
const FRONT: usize = 28;
/// Offset of the used bytes of the last chunk (u32).
const LAST_USED: usize = 32;
/// Offset of the capacity of the last chunk (u32).
const LAST_CAP: usize = 36;
/// Size of a head record's value.
pub(crate) const HEAD_LEN: usize = 40;

/// Flag: the value was written whole (`put`/`rmw`) and does not parse as framed
/// elements; `get` and appends work, element-wise operations refuse it.
pub(crate) const FLAG_OPAQUE: u8 = 1;

/// Bytes a chunk number adds to the user key.
pub(crate) const CHUNK_NO_LEN: usize = 4;

/// A decoded head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) flags: u8,
    pub(crate) count: u64,
    pub(crate) bytes: u64,
    pub(crate) first: u32,
    pub(crate) last: u32,
    pub(crate) front: u32,
    pub(crate) last_used: u32,
    pub(crate) last_cap: u32,
}

impl Head {
    pub(crate) fn opaque(&self) -> bool {
        self.flags & FLAG_OPAQUE != 0
    }

    pub(crate) fn encode(&self) -> [u8; HEAD_LEN] {
        let mut b = [0u8; HEAD_LEN];
        b[VERSION] = HEAD_VERSION;
        b[FLAGS] = self.flags;
        b[RESERVED..COUNT].fill(0);
        put_u64(&mut b, COUNT, self.count);
        put_u64(&mut b, BYTES, self.bytes);
        put_u32(&mut b, FIRST, self.first);
        put_u32(&mut b, LAST, self.last);
        put_u32(&mut b, FRONT, self.front);
        put_u32(&mut b, LAST_USED, self.last_used);
        put_u32(&mut b, LAST_CAP, self.last_cap);
        b
    }

    /// Decodes and checks a head; the error says which field is wrong.
    pub(crate) fn decode(b: &[u8]) -> Result<Head, String> {
        if b.len() != HEAD_LEN {
            return Err(format!("list head of {} bytes, expected {HEAD_LEN}", b.len()));
        }
        if b[VERSION] != HEAD_VERSION {
            return Err(format!(
                "list head version {} (this build reads {HEAD_VERSION})",
                b[VERSION]
            ));
        }
        let h = Head {
            flags: b[FLAGS],
            count: u64_at(b, COUNT),
            bytes: u64_at(b, BYTES),
            first: u32_at(b, FIRST),
            last: u32_at(b, LAST),
            front: u32_at(b, FRONT),
            last_used: u32_at(b, LAST_USED),
            last_cap: u32_at(b, LAST_CAP),
        };
        if h.flags & !FLAG_OPAQUE != 0 || b[RESERVED..COUNT] != [0, 0] {
            return Err("list head has unknown flags or nonzero reserved bytes".into());
        }
        if h.first > h.last {
            return Err(format!("list head first chunk {} after last chunk {}", h.first, h.last));
        }
        if h.last_used > h.last_cap {
            return Err(format!(
                "list head says the last chunk uses {} of {} bytes",
                h.last_used, h.last_cap
            ));
        }
        if h.first == h.last && h.front > h.last_used {
            return Err(format!("list head front offset {} past the chunk's end", h.front));
        }
        if h.bytes < u64::from(h.last_used) - if h.first == h.last { u64::from(h.front) } else { 0 }
        {
            return Err(format!("list head byte length {} below its last chunk's", h.bytes));
        }
        if !h.opaque() && h.count.saturating_mul(crate::list::FRAME as u64) > h.bytes {
            return Err(format!("list head counts {} elements in {} bytes", h.count, h.bytes));
        }
        Ok(h)
    }
}

/// The key of chunk `no` of the list at `key`: the user key then the chunk number in
/// big-endian, so the chunks of one list sort together and in order.
pub(crate) fn chunk_key(out: &mut Vec<u8>, key: &[u8], no: u32) {
    out.clear();
    out.extend_from_slice(key);
    out.extend_from_slice(&no.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn head_round_trips_and_rejects_bad_fields() {
        let h = Head {
            flags: 0,
            count: 3,
            bytes: 30,
            first: 2,
            last: 4,
            front: 8,
            last_used: 10,
            last_cap: 256,
        };
        assert_eq!(Head::decode(&h.encode()), Ok(h));
        // The FORMAT section's layout, byte for byte (heads written before must read).
        let hex: String = h.encode().iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(
            hex,
            "0100000003000000000000001e000000000000000200000004000000080000000a00000000010000"
        );
        assert!(Head::decode(&h.encode()[..39]).is_err());
        let mut b = h.encode();
        b[VERSION] = 9;
        assert!(Head::decode(&b).is_err());
        let bad = Head { first: 5, ..h };
        assert!(Head::decode(&bad.encode()).is_err());
        let bad = Head { last_used: 300, ..h };
        assert!(Head::decode(&bad.encode()).is_err());
        let bad = Head { count: 100, ..h };
        assert!(Head::decode(&bad.encode()).is_err());
        let mut k = Vec::new();
        chunk_key(&mut k, b"ab", 0x0102_0304);
        assert_eq!(k, b"ab\x01\x02\x03\x04");
    }

    fn any_head() -> impl Strategy<Value = Head> {
        (any::<u8>(), any::<[u64; 2]>(), any::<[u32; 5]>()).prop_map(
            |(flags, [count, bytes], u)| Head {
                flags,
                count,
                bytes,
                first: u[0],
                last: u[1],
                front: u[2],
                last_used: u[3],
                last_cap: u[4],
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any bytes, any field values, and damaged valid heads: `decode` answers `Ok`
        /// or `Err`, and a head it accepts encodes back to the same bytes.
        #[test]
        fn hostile_head_bytes_are_an_error_not_a_panic(
            raw in proptest::collection::vec(any::<u8>(), 0..48),
            h in any_head(),
            ds in crate::hostile::damages(),
        ) {
            let valid = Head { flags: 0, count: 3, bytes: 30, first: 2, last: 4, front: 8, last_used: 10, last_cap: 256 };
            for b in [raw, h.encode().to_vec(), crate::hostile::damaged(&valid.encode(), &ds)] {
                if let Ok(d) = Head::decode(&b) {
                    prop_assert_eq!(&d.encode()[..], &b[..]);
                }
            }
        }
    }
}
