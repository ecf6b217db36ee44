//! Operation counters and resource figures every store reports through `stats()`.

/// A snapshot of a store's counters and resource use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreStats {
    /// `get` calls (including each key of a `multi_get`).
    pub gets: u64,
    /// `put` calls.
    pub puts: u64,
    /// `merge` calls.
    pub merges: u64,
    /// `delete` calls.
    pub deletes: u64,
    /// `rmw` calls.
    pub rmws: u64,
    /// Prefix and range scans.
    pub scans: u64,
    /// Updates applied in place (hashlog mutable region).
    pub in_place_updates: u64,
    /// Records read from disk (not from memory).
    pub disk_reads: u64,
    /// Bytes written to the store's files.
    pub bytes_written: u64,
    /// The memory budget given at open.
    pub memory_budget: u64,
    /// Resident bytes the store accounts for (index + in-memory log/caches + data).
    pub bytes_in_memory: u64,
    /// Bytes of the in-memory index.
    pub index_bytes: u64,
    /// Bytes in the store's files on disk.
    pub bytes_on_disk: u64,
    /// Live keys, where the backend knows it exactly.
    pub live_keys: Option<u64>,
    /// Completed compaction passes (or RocksDB compactions).
    pub compactions: u64,
    /// Bytes of superseded or deleted records reclaimed by compaction.
    pub compacted_bytes: u64,
    /// Completed checkpoints since open.
    pub checkpoints: u64,
    /// Wall time of the last checkpoint in microseconds.
    pub last_checkpoint_micros: u64,
    /// Sequence number of the checkpoint the store was recovered from or last wrote
    /// (0 for a fresh store).
    pub checkpoint_seq: u64,
    /// What only one backend reports.
    pub backend: BackendStats,
}

/// Figures only one backend has ([`StoreStats::backend`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendStats {
    /// Nothing beyond the common figures.
    #[default]
    None,
    /// The adaptive store: where each namespace lives now.
    Adaptive {
        /// One entry per namespace, in declaration order.
        layouts: Vec<NamespaceLayout>,
    },
    /// The tiered store: per-level hits, misses and migrations.
    Tiered(crate::tiered::TierStats),
}

/// Where a namespace's state lives in a store with several layouts (adaptive).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NamespaceLayout {
    /// The namespace's name.
    pub namespace: String,
    /// The layout serving it ("hashlog", "appendlog", "timelog").
    pub layout: String,
    /// The layout it is migrating to, if a migration is under way.
    pub migrating_to: Option<String>,
    /// Completed migrations of this namespace since open.
    pub migrations: u64,
    /// Entries moved by migrations of this namespace since open.
    pub moved_entries: u64,
    /// Migrations of this namespace abandoned since open because their target refused
    /// an entry (the namespace moved back).
    pub failed_migrations: u64,
    /// Why the last abandoned migration was abandoned (the message of
    /// [`Error::MigrationAbandoned`](crate::Error::MigrationAbandoned)).
    pub migration_error: Option<String>,
}

impl StoreStats {
    /// Where each namespace lives (the adaptive store; empty for the others).
    pub fn layouts(&self) -> &[NamespaceLayout] {
        match &self.backend {
            BackendStats::Adaptive { layouts } => layouts,
            _ => &[],
        }
    }

    /// The tiered store's per-level figures (`None` for the others).
    pub fn tiers(&self) -> Option<&crate::tiered::TierStats> {
        match &self.backend {
            BackendStats::Tiered(t) => Some(t),
            _ => None,
        }
    }

    /// Counts a completed checkpoint `seq` begun at `start` and describes it.
    pub(crate) fn checkpoint_done(
        &mut self,
        seq: u64,
        start: std::time::Instant,
    ) -> crate::CheckpointInfo {
        let micros = start.elapsed().as_micros() as u64;
        self.checkpoints += 1;
        self.last_checkpoint_micros = micros;
        crate::CheckpointInfo { seq, micros }
    }
}
