//! What every backend keeps the same way: the checkpoint sequence number, the poison
//! flag and the operation counters ([`StoreCore`]), and the checkpoint routine around a
//! backend's own writer ([`checkpoint`]). A backend embeds one `StoreCore` and writes
//! only what is its own.

use std::time::Instant;

use crate::{CheckpointInfo, Result, StoreStats};

/// The state every backend has: embedded as a field, reached through its methods.
#[derive(Debug, Default)]
pub(crate) struct StoreCore {
    /// Sequence number of the checkpoint recovered or last written (0: none).
    pub(crate) seq: u64,
    /// The message of the error that poisoned the store, if one did.
    pub(crate) poisoned: Option<String>,
    /// Operation counters; [`stats`](Self::stats) adds the sequence number.
    pub(crate) stats: StoreStats,
}

impl StoreCore {
    /// A fresh store's core with `memory_budget` recorded in its stats.
    pub(crate) fn new(memory_budget: u64) -> StoreCore {
        StoreCore {
            seq: 0,
            poisoned: None,
            stats: StoreStats { memory_budget, ..Default::default() },
        }
    }

    /// The check before a read ([`crate::error::readable`]).
    #[inline(always)]
    pub(crate) fn readable(&self) -> Result<()> {
        crate::error::readable(&self.poisoned)
    }

    /// The check before a write ([`crate::error::writable`]).
    #[inline(always)]
    pub(crate) fn writable(&self) -> Result<()> {
        crate::error::writable(&self.poisoned)
    }

    /// Passes `r` through, poisoning the store on an error that poisons
    /// ([`crate::error::poison_on`]).
    #[inline(always)]
    pub(crate) fn poison_on<T>(&mut self, r: Result<T>) -> Result<T> {
        crate::error::poison_on(&mut self.poisoned, r)
    }

    /// The counters with the sequence number filled in: the start of every `stats()`.
    pub(crate) fn stats(&self) -> StoreStats {
        StoreStats { checkpoint_seq: self.seq, ..self.stats.clone() }
    }
}

/// The checkpoint routine of a backend `s` whose core `core` reaches: refuses a
/// poisoned store, runs `write(s, seq)` for the next sequence number, and on success
/// records it and the time it took. Any error of `write` poisons the store (a
/// checkpoint that failed part way leaves files and in-memory marks that only a reopen
/// reconciles).
pub(crate) fn checkpoint<S>(
    s: &mut S,
    core: fn(&mut S) -> &mut StoreCore,
    write: fn(&mut S, u64) -> Result<()>,
) -> Result<CheckpointInfo> {
    core(s).writable()?;
    let start = Instant::now();
    let seq = core(s).seq + 1;
    if let Err(e) = write(s, seq) {
        core(s).poisoned = Some(e.to_string());
        return Err(e);
    }
    let c = core(s);
    c.seq = seq;
    Ok(c.stats.checkpoint_done(seq, start))
}
