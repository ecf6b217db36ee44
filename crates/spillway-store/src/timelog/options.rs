//! [`TimeLogOptions`]: the tuning of a timelog store, and where a record's time sits in
//! its key.

use crate::error::{Error, Result};

/// Where a record's time sits in its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TimeField {
    /// The last `len` bytes, big-endian (a shorter key: all of it).
    Suffix(usize),
    /// Bytes `offset..offset + len`, big-endian (a shorter key: time 0).
    At(usize, usize),
}

impl TimeField {
    pub(super) fn time_of(self, key: &[u8]) -> u64 {
        let bytes = match self {
            TimeField::Suffix(len) => &key[key.len().saturating_sub(len)..],
            // An offset past `usize::MAX - len` (a damaged manifest) fits no key either.
            TimeField::At(offset, len) => {
                offset.checked_add(len).and_then(|end| key.get(offset..end)).unwrap_or(&[])
            }
        };
        bytes.iter().fold(0u64, |t, &b| (t << 8) | u64::from(b))
    }

    pub(super) fn encode(self) -> String {
        match self {
            TimeField::Suffix(len) => format!("suffix:{len}"),
            TimeField::At(offset, len) => format!("at:{offset}:{len}"),
        }
    }

    pub(super) fn decode(s: &str) -> Option<Self> {
        let mut parts = s.split(':');
        let f = match (parts.next()?, parts.next(), parts.next()) {
            ("suffix", Some(len), None) => TimeField::Suffix(len.parse().ok()?),
            ("at", Some(off), Some(len)) => TimeField::At(off.parse().ok()?, len.parse().ok()?),
            _ => return None,
        };
        let len = match f {
            TimeField::Suffix(l) | TimeField::At(_, l) => l,
        };
        (1..=8).contains(&len).then_some(f)
    }
}

/// Tuning of a [`TimeLogStore`](crate::TimeLogStore). Every setter documents its default.
#[derive(Clone, Debug)]
#[must_use]
pub struct TimeLogOptions {
    pub(super) time: TimeField,
    pub(super) span: u64,
    pub(super) block_size: usize,
    pub(super) memtable_fraction: f64,
    pub(super) max_segments: usize,
    pub(super) retention: Option<u64>,
    pub(super) cache_fraction: f64,
}

impl Default for TimeLogOptions {
    fn default() -> Self {
        TimeLogOptions {
            time: TimeField::Suffix(8),
            span: 1 << 16,
            block_size: 4096,
            memtable_fraction: 0.5,
            max_segments: 4,
            retention: None,
            cache_fraction: 0.125,
        }
    }
}

impl TimeLogOptions {
    /// The record's time is the last `len` bytes of its key, big-endian (a key shorter
    /// than `len`: all its bytes). `len` is 1..=8. Default: the last 8 bytes. Applies to
    /// new stores (a recovered store keeps the layout it was created with).
    pub fn time_suffix(mut self, len: usize) -> Self {
        self.time = TimeField::Suffix(len);
        self
    }

    /// The record's time is key bytes `offset..offset + len`, big-endian; keys too
    /// short to hold them have time 0. `len` is 1..=8. Default: [`time_suffix`]
    /// (8) instead. Applies to new stores.
    ///
    /// [`time_suffix`]: Self::time_suffix
    pub fn time_field(mut self, offset: usize, len: usize) -> Self {
        self.time = TimeField::At(offset, len);
        self
    }

    /// Time units per partition (at least 1). Default 2^16 (about 65 s of milliseconds).
    /// Applies to new stores.
    pub fn partition_span(mut self, units: u64) -> Self {
        self.span = units;
        self
    }

    /// Target size of a segment block in bytes (64 B to 1 MiB). Default 4 KiB.
    pub fn block_size(mut self, bytes: usize) -> Self {
        self.block_size = bytes;
        self
    }

    /// Share of the memory budget the memtables may use before the largest is flushed,
    /// in (0, 1]. Default 0.5.
    pub fn memtable_fraction(mut self, f: f64) -> Self {
        self.memtable_fraction = f;
        self
    }

    /// Share of the memory budget the block cache of point reads may use, in [0, 1]
    /// (0: no cache). It only gets what the sparse indexes and memtables leave.
    /// Default 0.125.
    pub fn block_cache_fraction(mut self, f: f64) -> Self {
        self.cache_fraction = f;
        self
    }

    /// Segments a partition may hold before they are merged into one (at least 1).
    /// Default 4.
    pub fn max_segments(mut self, n: usize) -> Self {
        self.max_segments = n;
        self
    }

    /// Expire automatically: after each write, partitions wholly older than the largest
    /// time written minus `units` are dropped, as [`TimeLogStore::expire_before`](crate::TimeLogStore::expire_before) does.
    /// Keys older than the bound disappear (a deliberate deviation from the store
    /// contract). Default: none (nothing expires on its own).
    pub fn retention(mut self, units: u64) -> Self {
        self.retention = Some(units);
        self
    }

    pub(super) fn validate(&self) -> Result<()> {
        let bad =
            |option, detail: &str| Err(Error::InvalidOption { option, detail: detail.into() });
        if TimeField::decode(&self.time.encode()).is_none() {
            return bad("time_field", "the time field is 1..=8 bytes");
        }
        if self.span == 0 {
            return bad("partition_span", "must be at least 1");
        }
        if !(64..=1 << 20).contains(&self.block_size) {
            return bad("block_size", "must be 64 B to 1 MiB");
        }
        if !(self.memtable_fraction > 0.0 && self.memtable_fraction <= 1.0) {
            return bad("memtable_fraction", "must be in (0, 1]");
        }
        if !(0.0..=1.0).contains(&self.cache_fraction) {
            return bad("block_cache_fraction", "must be in [0, 1]");
        }
        if self.max_segments == 0 {
            return bad("max_segments", "must be at least 1");
        }
        Ok(())
    }
}
