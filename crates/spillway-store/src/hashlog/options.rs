//! Tuning of a hashlog store ([`HashLogOptions`]): page and segment sizes, the
//! mutable fraction, compaction and index-snapshot pacing, and what a budget sizes.

use super::*;

/// Tuning of a [`HashLogStore`]. Every setter documents its default.
#[derive(Clone, Debug)]
#[must_use]
pub struct HashLogOptions {
    pub(super) page_bits: u32,
    pub(super) segment_bytes: u64,
    pub(super) mutable_fraction: f64,
    pub(super) garbage_ratio: f64,
    pub(super) compaction_step: usize,
    pub(super) initial_index_bits: Option<u32>,
    pub(super) snapshot_ratio: f64,
    pub(super) snapshot_step: usize,
    pub(super) inline_snapshot_bytes: u64,
}

impl Default for HashLogOptions {
    fn default() -> Self {
        HashLogOptions {
            page_bits: 22,
            segment_bytes: 64 << 20,
            mutable_fraction: 0.9,
            garbage_ratio: 0.5,
            compaction_step: 256 << 10,
            initial_index_bits: None,
            snapshot_ratio: 1.0,
            snapshot_step: 64,
            inline_snapshot_bytes: 1 << 20,
        }
    }
}

impl HashLogOptions {
    /// Options sized for a memory budget: pages of 1/64 of it (a power of two between
    /// 64 KiB and the 4 MiB default; a page bounds a value), segments of 16 pages (at
    /// most 64 MiB). Small pages matter for small budgets: the buffers held back
    /// beside the log (five pages' worth) and the unit of eviction shrink with them,
    /// so more of the budget holds log pages (measured: 1 MiB instead of 4 MiB pages
    /// under 64 MiB cut readwrite-zipf's disk reads 7x; docs/RESULTS.md).
    pub fn for_budget(budget: u64) -> Self {
        let p = (budget / 64).clamp(64 << 10, 4 << 20);
        Self::with_pages(1usize << (63 - p.leading_zeros()))
    }

    /// Options with pages of `page` bytes and segments of 16 pages (at most 64 MiB).
    pub fn with_pages(page: usize) -> Self {
        HashLogOptions::default().page_size(page).segment_size((page as u64 * 16).min(64 << 20))
    }

    /// Log page size in bytes, a power of two from 4 KiB to 1 GiB. Default 4 MiB. It
    /// bounds the largest record; it applies to new stores (a recovered store keeps
    /// the page size it was created with).
    pub fn page_size(mut self, bytes: usize) -> Self {
        self.page_bits = bytes.max(1).next_power_of_two().trailing_zeros();
        self
    }

    /// Segment file size in bytes (rounded to whole pages). Default 64 MiB.
    pub fn segment_size(mut self, bytes: u64) -> Self {
        self.segment_bytes = bytes;
        self
    }

    /// Fraction of the in-memory pages that are mutable. Default 0.9 (FASTER's).
    pub fn mutable_fraction(mut self, f: f64) -> Self {
        self.mutable_fraction = f;
        self
    }

    /// Garbage fraction of the log that starts a compaction pass. Default 0.5.
    pub fn garbage_ratio(mut self, r: f64) -> Self {
        self.garbage_ratio = r;
        self
    }

    /// Log bytes one compaction step examines (one step runs per write). Default 256 KiB.
    pub fn compaction_step(mut self, bytes: usize) -> Self {
        self.compaction_step = bytes.max(1);
        self
    }

    /// Presizes the index for this many keys. Default: sized from the memory budget
    /// (1/16 of it, at most 16384 buckets: 1 MiB) and doubled as keys arrive.
    pub fn expected_keys(mut self, keys: u64) -> Self {
        // Up to 2^40 buckets (the index's limit); open refuses what the budget cannot hold.
        let buckets = (keys / 4).clamp(256, 1 << 40).next_power_of_two();
        self.initial_index_bits = Some(buckets.trailing_zeros());
        self
    }

    /// When a checkpoint starts a new index snapshot: once the log bytes a recovery
    /// would replay (from the newest snapshot's start, or the log's beginning, to the
    /// tail) exceed this fraction of the index's bytes. Default 1.0: recovery replays at
    /// most about as many log bytes as it loads index bytes (plus what is written while
    /// a snapshot runs), and snapshots cost at most one index byte per log byte
    /// written. `0.0` writes a whole snapshot in every checkpoint (the behaviour before
    /// incremental checkpoints, kept for comparison).
    pub fn index_snapshot_ratio(mut self, r: f64) -> Self {
        self.snapshot_ratio = r;
        self
    }

    /// Index buckets (64 bytes each) a fuzzy snapshot copies per write operation and per
    /// checkpoint. Default 64 (4 KiB of index, about a microsecond).
    pub fn index_snapshot_step(mut self, buckets: usize) -> Self {
        self.snapshot_step = buckets.max(1);
        self
    }

    /// Index size up to which a due snapshot is written whole inside the checkpoint
    /// (exact at its tail, nothing to replay) instead of fuzzily. Default 1 MiB, a
    /// bounded addition to the checkpoint's pause; 0 makes every snapshot fuzzy.
    pub fn inline_snapshot_bytes(mut self, bytes: u64) -> Self {
        self.inline_snapshot_bytes = bytes;
        self
    }

    /// What a record on these pages holds besides its key, before 8-byte alignment
    /// (see [`HashLogStore::max_value`]).
    pub(crate) fn record_room(&self) -> usize {
        room_in_page(1usize << self.page_bits)
    }

    pub(super) fn validate(&self) -> Result<()> {
        let bad =
            |option, detail: &str| Err(Error::InvalidOption { option, detail: detail.into() });
        if !(12..=30).contains(&self.page_bits) {
            return bad("page_size", "must be a power of two from 4 KiB to 1 GiB");
        }
        if !(self.mutable_fraction > 0.0 && self.mutable_fraction <= 1.0) {
            return bad("mutable_fraction", "must be in (0, 1]");
        }
        if !(self.garbage_ratio > 0.0 && self.garbage_ratio < 1.0) {
            return bad("garbage_ratio", "must be in (0, 1)");
        }
        if !(self.snapshot_ratio >= 0.0 && self.snapshot_ratio.is_finite()) {
            return bad("index_snapshot_ratio", "must be a finite number >= 0");
        }
        Ok(())
    }
}
