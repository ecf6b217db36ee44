//! The k-way merge under every scan and every segment merge: sources (memtables and
//! segment iterators) each yield sorted entries; the merge yields each key once, from
//! the source of highest rank (memtables outrank segments, newer segments outrank
//! older ones), tombstones included so callers decide whether they hide or persist.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::memtable::MemIter;
use super::segment::{Entry, SegIter};
use crate::error::Result;

/// Rank of memtable sources: above every segment id.
pub(crate) const MEM_RANK: u64 = u64::MAX;

/// One sorted input of a merge.
pub(crate) enum Source<'a> {
    Mem(MemIter<'a>),
    Seg(SegIter<'a>),
    /// Owned entries, for tests.
    #[cfg(test)]
    Vec(std::vec::IntoIter<(Vec<u8>, Option<Vec<u8>>)>),
}

impl Source<'_> {
    fn next_entry(&mut self) -> Result<Option<Entry>> {
        match self {
            Source::Mem(it) => Ok(it.next().map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))),
            Source::Seg(it) => it.next_entry(),
            #[cfg(test)]
            Source::Vec(it) => Ok(it.next()),
        }
    }

    fn reads(&self) -> u64 {
        match self {
            Source::Seg(it) => it.reads,
            _ => 0,
        }
    }
}

struct Head {
    key: Vec<u8>,
    value: Option<Vec<u8>>,
    rank: u64,
    src: usize,
    reverse: bool,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    /// The heap's greatest element comes out first: the smallest key (forward) or the
    /// greatest (reverse); on equal keys the highest rank.
    fn cmp(&self, other: &Self) -> Ordering {
        let by_key = if self.reverse { self.key.cmp(&other.key) } else { other.key.cmp(&self.key) };
        by_key.then(self.rank.cmp(&other.rank))
    }
}

/// Merges ranked sources into one sorted stream, newest version of each key only.
pub(crate) struct MergeIter<'a> {
    sources: Vec<Source<'a>>,
    heap: BinaryHeap<Head>,
    ranks: Vec<u64>,
    reverse: bool,
}

impl<'a> MergeIter<'a> {
    /// Starts the merge: reads the first entry of every source.
    pub(crate) fn new(sources: Vec<(u64, Source<'a>)>, reverse: bool) -> Result<Self> {
        let (ranks, sources): (Vec<u64>, Vec<Source<'a>>) = sources.into_iter().unzip();
        let mut m =
            MergeIter { heap: BinaryHeap::with_capacity(sources.len()), sources, ranks, reverse };
        for i in 0..m.sources.len() {
            m.refill(i)?;
        }
        Ok(m)
    }

    fn refill(&mut self, src: usize) -> Result<()> {
        if let Some((key, value)) = self.sources[src].next_entry()? {
            self.heap.push(Head { key, value, rank: self.ranks[src], src, reverse: self.reverse });
        }
        Ok(())
    }

    /// The next key and its newest version (`None` value: tombstone).
    pub(crate) fn next_entry(&mut self) -> Result<Option<Entry>> {
        let Some(top) = self.heap.pop() else { return Ok(None) };
        self.refill(top.src)?;
        while self.heap.peek().is_some_and(|h| h.key == top.key) {
            let older = self.heap.pop().expect("peeked");
            self.refill(older.src)?;
        }
        Ok(Some((top.key, top.value)))
    }

    /// The next live entry (tombstones skipped).
    pub(crate) fn next_live(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        loop {
            match self.next_entry()? {
                None => return Ok(None),
                Some((k, Some(v))) => return Ok(Some((k, v))),
                Some((_, None)) => {}
            }
        }
    }

    /// Blocks the merge's segment sources have read from disk.
    pub(crate) fn reads(&self) -> u64 {
        self.sources.iter().map(Source::reads).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(entries: &[(&str, Option<&str>)], reverse: bool) -> Source<'static> {
        let mut v: Vec<Entry> = entries
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
            .collect();
        if reverse {
            v.reverse();
        }
        Source::Vec(v.into_iter())
    }

    fn collect(reverse: bool) -> Vec<(String, String)> {
        let old = [("a", Some("a0")), ("b", Some("b0")), ("d", Some("d0")), ("f", Some("f0"))];
        let new = [("b", None), ("c", Some("c1")), ("d", Some("d1"))];
        let mem = [("a", Some("a2")), ("c", None), ("e", Some("e2"))];
        let sources =
            vec![(3, src(&old, reverse)), (MEM_RANK, src(&mem, reverse)), (7, src(&new, reverse))];
        let mut m = MergeIter::new(sources, reverse).expect("merge");
        let mut out = Vec::new();
        while let Some((k, v)) = m.next_live().expect("next") {
            out.push((String::from_utf8(k).expect("utf8"), String::from_utf8(v).expect("utf8")));
        }
        out
    }

    #[test]
    fn newest_wins_and_tombstones_hide_both_directions() {
        let want: Vec<(String, String)> = [("a", "a2"), ("d", "d1"), ("e", "e2"), ("f", "f0")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(collect(false), want);
        let mut rev = want;
        rev.reverse();
        assert_eq!(collect(true), rev);
    }

    #[test]
    fn tombstones_are_yielded_by_next_entry() {
        let sources = vec![(1, src(&[("a", Some("x"))], false)), (2, src(&[("a", None)], false))];
        let mut m = MergeIter::new(sources, false).expect("merge");
        assert_eq!(m.next_entry().expect("next"), Some((b"a".to_vec(), None)));
        assert_eq!(m.next_entry().expect("next"), None);
    }
}
