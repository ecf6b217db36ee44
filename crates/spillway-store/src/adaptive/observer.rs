//! The observer: what a namespace's recent operations cost in each layout.
//!
//! Per namespace it counts, over a sliding window of recent operations, the mix of
//! gets, puts, merges, deletes, read-modify-writes, seeks (ordered scans and cursor
//! refills) and entries visited by scans, the bytes written, and how long lists grow
//! before they are cleared. The window is exponentially weighted: when
//! [`Observer::window`] operations have been counted, every counter is halved, so an
//! operation's weight halves every `window` operations (the count-min "aging" trick).
//! [`Observer::costs`] turns the counts into an estimated cost per layout with the cost
//! model below; the adaptive store migrates a namespace when another layout is cheaper
//! than its current one by more than its hysteresis.
//!
//! # Cost model (estimated nanoseconds per operation, all state in memory)
//! The constants come from the `bench suite` rows of each store on this machine
//! (docs/RESULTS.md): they need only be right in their ratios.
//!
//! | op | hash (hashlog) | list (appendlog) | time (timelog) |
//! |---|---|---|---|
//! | get of a value of `v` bytes | 60 + v/8 | 120 + v/8 | 400 + v/8 |
//! | put | 90 + v/8 | 150 + v/8 | 500 + v/8 |
//! | merge into a list holding `L` bytes, state in memory | 70 + L/32 (in place; a copy of the list at each doubling and when its record leaves the mutable region) | 200 (head + chunk: three index lookups) | 600 + L/8 (read, append, write) |
//! | the same, state larger than memory | 90 + L/16 (the list is re-copied when its record left the mutable region) | 200 | 600 + L/8 |
//! | merge with a function | 90 | 150 | 600 |
//! | delete | 60 | 120 | 400 |
//! | rmw | 100 | 160 | 700 |
//! | seek (a range read) over a namespace of `n` entries | 40 n (a walk of every entry, then a sort) | 40 n | 1500 |
//! | next (an entry of a range read) | 30 | 30 | 60 |
//!
//! `L` is estimated as the bytes merged per list between clears: merged bytes divided
//! by (deletes + puts + 1), halved (a list is on average half full). Whether the state
//! is "in memory" is decided by the store from its part's resident bytes against its
//! share of the budget (see `AdaptiveStore`): while a hybrid log fits in its mutable
//! region a list is appended in place, and only past it does every append risk a copy
//! of the whole list. `n` is the size of
//! the namespace seen by the last full walk (the unordered layouts serve range reads by
//! walking the namespace), or the net count of keys written.

use super::Layout;

/// Counts of one namespace's recent operations (weights after aging).
#[derive(Clone, Debug, Default)]
pub(crate) struct Observer {
    pub(crate) gets: f64,
    pub(crate) puts: f64,
    pub(crate) list_merges: f64,
    pub(crate) fn_merges: f64,
    pub(crate) deletes: f64,
    pub(crate) rmws: f64,
    pub(crate) seeks: f64,
    pub(crate) nexts: f64,
    pub(crate) read_bytes: f64,
    pub(crate) written_bytes: f64,
    pub(crate) merged_bytes: f64,
    /// Operations counted since the last aging.
    since_aging: u64,
    /// Operations counted since the last decision.
    pub(crate) since_decision: u64,
    /// Entries the last full walk of the namespace visited.
    pub(crate) walked_entries: u64,
    /// Net keys written (puts + merges - deletes, never below 0): a size estimate.
    pub(crate) net_keys: f64,
    /// Aging period in operations.
    window: u64,
}

/// What one operation was, for the observer.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Seen {
    Get(usize),
    Put(usize),
    ListMerge(usize),
    FnMerge(usize),
    Delete,
    Rmw,
    /// A range read that visited this many entries.
    Range(usize),
}

impl Observer {
    pub(crate) fn new(window: u64) -> Self {
        Observer { window: window.max(16), ..Default::default() }
    }

    /// Counts one operation.
    #[inline]
    pub(crate) fn see(&mut self, op: Seen) {
        match op {
            Seen::Get(v) => {
                self.gets += 1.0;
                self.read_bytes += v as f64;
            }
            Seen::Put(v) => {
                self.puts += 1.0;
                self.written_bytes += v as f64;
                self.net_keys += 1.0;
            }
            Seen::ListMerge(v) => {
                self.list_merges += 1.0;
                self.merged_bytes += v as f64;
                self.written_bytes += v as f64;
            }
            Seen::FnMerge(v) => {
                self.fn_merges += 1.0;
                self.written_bytes += v as f64;
            }
            Seen::Delete => {
                self.deletes += 1.0;
                self.net_keys = (self.net_keys - 1.0).max(0.0);
            }
            Seen::Rmw => self.rmws += 1.0,
            Seen::Range(n) => {
                self.seeks += 1.0;
                self.nexts += n as f64;
            }
        }
        self.since_decision += 1;
        self.since_aging += 1;
        if self.since_aging >= self.window {
            self.age();
        }
    }

    fn age(&mut self) {
        self.since_aging = 0;
        for c in [
            &mut self.gets,
            &mut self.puts,
            &mut self.list_merges,
            &mut self.fn_merges,
            &mut self.deletes,
            &mut self.rmws,
            &mut self.seeks,
            &mut self.nexts,
            &mut self.read_bytes,
            &mut self.written_bytes,
            &mut self.merged_bytes,
        ] {
            *c /= 2.0;
        }
    }

    fn ops(&self) -> f64 {
        self.gets
            + self.puts
            + self.list_merges
            + self.fn_merges
            + self.deletes
            + self.rmws
            + self.seeks
    }

    /// Estimated cost (ns) of the counted operations in each layout, indexed by
    /// [`Layout::index`].
    pub(crate) fn costs(&self, in_memory: bool) -> [f64; 3] {
        let per = |total: f64, n: f64| if n > 0.0 { total / n } else { 0.0 };
        let write_ops = self.puts + self.list_merges + self.fn_merges;
        let v_read = per(self.read_bytes, self.gets);
        let v_write = per(self.written_bytes, write_ops);
        // Average bytes a list holds when appended to.
        let list_bytes = self.merged_bytes / (self.deletes + self.puts + 1.0) / 2.0;
        let n = (self.walked_entries as f64).max(self.net_keys).max(1.0);
        let mut out = [0.0; 3];
        for layout in Layout::ALL {
            let (get, put, merge_list, merge_fn, delete, rmw, seek, next) = match layout {
                Layout::Hash => {
                    let merge =
                        if in_memory { 70.0 + list_bytes / 32.0 } else { 90.0 + list_bytes / 16.0 };
                    (60.0, 90.0, merge, 90.0, 60.0, 100.0, 40.0 * n, 30.0)
                }
                Layout::List => (120.0, 150.0, 200.0, 150.0, 120.0, 160.0, 40.0 * n, 30.0),
                Layout::Time => {
                    (400.0, 500.0, 600.0 + list_bytes / 8.0, 600.0, 400.0, 700.0, 1500.0, 60.0)
                }
            };
            out[layout.index()] = self.gets * (get + v_read / 8.0)
                + self.puts * (put + v_write / 8.0)
                + self.list_merges * merge_list
                + self.fn_merges * merge_fn
                + self.deletes * delete
                + self.rmws * rmw
                + self.seeks * seek
                + self.nexts * next;
        }
        out
    }

    /// The layout to move to, if one is cheaper than `current` by more than
    /// `hysteresis` (a fraction of the current cost) and enough operations were seen.
    pub(crate) fn recommend(
        &self,
        current: Layout,
        hysteresis: f64,
        in_memory: bool,
    ) -> Option<Layout> {
        if self.ops() < 64.0 {
            return None;
        }
        let costs = self.costs(in_memory);
        let (best, best_cost) = Layout::ALL
            .into_iter()
            .map(|l| (l, costs[l.index()]))
            .min_by(|a, b| a.1.total_cmp(&b.1))?;
        let cur = costs[current.index()];
        (best != current && best_cost < cur * (1.0 - hysteresis)).then_some(best)
    }
}

#[cfg(test)]
mod tests {
    use super::{Layout, Observer, Seen};

    #[test]
    fn point_updates_stay_on_hash() {
        let mut o = Observer::new(4096);
        for _ in 0..2000 {
            o.see(Seen::Get(8));
            o.see(Seen::Put(8));
        }
        assert_eq!(o.recommend(Layout::Hash, 0.3, true), None);
        assert_eq!(o.recommend(Layout::Time, 0.3, true), Some(Layout::Hash));
    }

    #[test]
    fn range_reads_over_a_large_namespace_move_to_time() {
        let mut o = Observer::new(4096);
        o.walked_entries = 50_000;
        for _ in 0..500 {
            o.see(Seen::Get(100));
            o.see(Seen::Put(100));
            o.see(Seen::Range(3));
        }
        assert_eq!(o.recommend(Layout::Hash, 0.3, true), Some(Layout::Time));
    }

    #[test]
    fn long_lists_move_to_list_short_ones_in_memory_to_hash() {
        let mut long = Observer::new(1 << 20);
        for i in 0..100_000 {
            long.see(Seen::ListMerge(100));
            if i % 10_000 == 0 {
                long.see(Seen::Get(500_000));
                long.see(Seen::Delete);
            }
        }
        assert_eq!(long.recommend(Layout::Hash, 0.3, false), Some(Layout::List));
        assert_eq!(long.recommend(Layout::Hash, 0.3, true), Some(Layout::List));
        let mut short = Observer::new(1 << 20);
        for _ in 0..10_000 {
            short.see(Seen::ListMerge(100));
            short.see(Seen::ListMerge(100));
            short.see(Seen::Get(200));
            short.see(Seen::Delete);
        }
        assert_eq!(short.recommend(Layout::List, 0.3, true), Some(Layout::Hash));
        assert_eq!(short.recommend(Layout::Hash, 0.3, true), None);
    }

    #[test]
    fn aging_halves_old_counts() {
        let mut o = Observer::new(16);
        for _ in 0..16 {
            o.see(Seen::Get(1));
        }
        assert!((o.gets - 8.0).abs() < 1e-9);
    }
}
