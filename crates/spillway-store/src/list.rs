//! The list-append merge encoding shared by every store.
//!
//! A list value is a concatenation of framed elements, each `[len: u32 LE][bytes]`.
//! A merge operand for a list namespace is one element (the store frames it), so
//! appending is byte concatenation in every backend, which is what RocksDB's
//! string-append operator does with an empty delimiter.
//! ```
//! let mut v = Vec::new();
//! spillway_store::list::push(&mut v, b"a");
//! spillway_store::list::push(&mut v, b"bc");
//! let items: Vec<&[u8]> = spillway_store::list::iter(&v).collect::<Result<_, _>>().unwrap();
//! assert_eq!(items, vec![&b"a"[..], &b"bc"[..]]);
//! ```

/// Bytes the frame adds to each element.
pub const FRAME: usize = 4;

/// Appends one framed element to `out`.
pub fn push(out: &mut Vec<u8>, elem: &[u8]) {
    let at = out.len();
    out.resize(at + framed_len(elem), 0);
    put(&mut out[at..], elem);
}

/// Writes `elem` framed at the start of `dst`, which must hold [`framed_len`] bytes
/// (an append in place, into a record's spare capacity).
pub(crate) fn put(dst: &mut [u8], elem: &[u8]) {
    dst[..FRAME].copy_from_slice(&(elem.len() as u32).to_le_bytes());
    dst[FRAME..FRAME + elem.len()].copy_from_slice(elem);
}

/// Size of `elem` once framed.
pub fn framed_len(elem: &[u8]) -> usize {
    FRAME + elem.len()
}

/// A list value that does not parse: the offset where the bad frame starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadList {
    /// Offset of the frame that runs past the end of the value.
    pub offset: usize,
}

impl std::fmt::Display for BadList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "list value has a truncated element frame at byte {}", self.offset)
    }
}

impl std::error::Error for BadList {}

/// Iterates the elements of a list value.
pub fn iter(value: &[u8]) -> ListIter<'_> {
    ListIter { value, pos: 0 }
}

/// Iterator returned by [`iter`].
#[derive(Debug, Clone)]
pub struct ListIter<'a> {
    value: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for ListIter<'a> {
    type Item = Result<&'a [u8], BadList>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.value.len() {
            return None;
        }
        let start = self.pos;
        let bad = || Some(Err(BadList { offset: start }));
        let Some(hdr) = self.value.get(start..start + FRAME) else {
            self.pos = self.value.len();
            return bad();
        };
        let len = u32::from_le_bytes(hdr.try_into().expect("4 bytes")) as usize;
        let Some(elem) = self.value.get(start + FRAME..start + FRAME + len) else {
            self.pos = self.value.len();
            return bad();
        };
        self.pos = start + FRAME + len;
        Some(Ok(elem))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any bytes, and damaged valid lists (a frame length set huge, a cut frame):
        /// iteration ends after at most one item per frame header, a bad frame is an
        /// error at its offset and ends the iteration, and elements lie inside the value.
        #[test]
        fn hostile_list_values_are_an_error_not_a_panic(
            raw in proptest::collection::vec(any::<u8>(), 0..64),
            elems in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..9), 0..6),
            ds in crate::hostile::damages(),
        ) {
            let mut valid = Vec::new();
            for e in &elems {
                push(&mut valid, e);
            }
            for v in [raw, crate::hostile::damaged(&valid, &ds)] {
                let mut n = 0;
                let mut ended = false;
                for item in iter(&v) {
                    prop_assert!(!ended, "an item after an error");
                    n += 1;
                    prop_assert!(n <= v.len() / FRAME + 1);
                    match item {
                        Ok(e) => prop_assert!(e.len() + FRAME <= v.len()),
                        Err(b) => {
                            prop_assert!(b.offset < v.len());
                            ended = true;
                        }
                    }
                }
            }
        }
    }
}
