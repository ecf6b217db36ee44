//! Session windows, incremental and holistic: Flink's `WindowOperator` with
//! `EventTimeSessionWindows` and the `EventTimeTrigger`, as it runs on the RocksDB keyed
//! state backend. This module owns the per-key session set (Flink's `MergingWindowSet`),
//! the choice of the state window a merge keeps, and the ops of `processElement`,
//! `onEventTime` and `clearAllState`. The op table is in the parent module docs.
//!
//! Flink code followed, op for op (flink-runtime `streaming.runtime.operators.windowing`,
//! flink-statebackend-rocksdb `state.rocksdb`):
//!
//! * `WindowOperator.processElement`: `getMergingWindowSet()` constructs a
//!   `MergingWindowSet`, whose constructor reads the set's `ListState` (`mergingSetsState`,
//!   VoidNamespace): `get M`. `MergingWindowSet.addWindow` calls the `MergeFunction`, which
//!   deletes the merged windows' timers (`triggerContext.clear`, `deleteCleanupTimer`) and
//!   calls `windowMergingState.mergeNamespaces(stateWindowResult, mergedStateWindows)`.
//!   A window late after adding is retired (`isWindowLate`, `retireWindow`); otherwise
//!   `windowState.add` (holistic `RocksDBListState.add`: `merge S`; incremental
//!   `RocksDBAggregatingState.add`: `get S`, `put S`), `EventTimeTrigger.onElement` (FIRE:
//!   `windowState.get`, `get S`), `registerCleanupTimer`; at the end
//!   `MergingWindowSet.persist()`.
//! * `MergingWindowSet.persist`: only if the mapping differs from the one read at
//!   construction (`!mapping.equals(initialMapping)`), `state.update(entries)`:
//!   `RocksDBListState.updateInternal` writes the whole list with one `put M` (32 bytes per
//!   session: two `TimeWindow`s of two longs each), or `clear()` (`delete M`) if it is
//!   empty.
//! * `mergeNamespaces` with no sources returns at once (an event that only extends one
//!   session). `RocksDBListState.mergeNamespaces`, per source: `get A`, and if it had a
//!   value `delete A`, `merge S` (A's bytes). `RocksDBAggregatingState.mergeNamespaces`:
//!   per source `get A`, `delete A`; then, if any source had a value, `get S`, `put S`.
//! * `WindowOperator.onEventTime`: `getMergingWindowSet()` (`get M`); a timer of a window
//!   not in the set returns there. `EventTimeTrigger.onEventTime` fires at the window's
//!   max timestamp (`get S`). At the cleanup time (`isCleanupTime`) `clearAllState`:
//!   `windowState.clear()` (`delete S`), `retireWindow`, `persist()`; then `onEventTime`
//!   calls `persist()` once more. The set still differs from the one read, so the second
//!   call writes it again: a cleanup writes `M` twice.
//!
//! Which merged window keeps its state: `MergingWindowSet.addWindow` takes "any" merged
//! window, `mergedWindows.iterator().next()`, where `mergedWindows` is the `HashSet` built
//! by `TimeWindow.mergeWindows` (windows added in start order) minus the new window. That
//! is the first window in `java.util.HashMap` order: bucket `(h ^ (h >>> 16)) & (n - 1)`
//! of `h = TimeWindow.hashCode() = MathUtils.longToIntWithBitMixing(start + end)`, ties in
//! insertion order. [`hash_set_order`] reproduces it, so the kept state window (and the
//! order of the absorbed ones) is Flink's, not simply the earliest session.

use super::{Clock, Issuer, KeyLayout, Operator, OperatorStats, Timers, TAG_META, TAG_WINDOW};
use crate::workload::{Emit, InputEvent, OperatorKind, OperatorParams, StreamItem};
use std::collections::HashMap;

/// Bytes of one session in the set's list value (Flink's `Tuple2<TimeWindow, TimeWindow>`:
/// window and state window, four longs).
const META_BYTES_PER_SESSION: u64 = 32;

/// One open session `[start, end)` whose state lives under the state window `state`.
#[derive(Clone, Copy, Debug)]
struct Session {
    start: i64,
    end: i64,
    state: i64,
    /// Bytes of the session's list (holistic) or accumulator.
    bytes: u64,
}

/// Flink's `TimeWindow.hashCode()`: `MathUtils.longToIntWithBitMixing(start + end)`
/// (Java long arithmetic wraps; `>>>` is a logical shift; the cast keeps the low 32 bits).
fn time_window_hash(start: i64, end: i64) -> u32 {
    let mut x = start.wrapping_add(end) as u64;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    x as u32
}

/// Iteration order of a `java.util.HashSet<TimeWindow>` into which `windows` were added in
/// the given order: indices into `windows`. `HashMap` starts with 16 buckets and doubles
/// when its size passes 3/4 of them; a resize keeps the relative order within a bucket, so
/// the order is by bucket `(h ^ (h >>> 16)) & (buckets - 1)` of the final table, then by
/// insertion. Not modelled: tree bins (8 or more windows in one bucket); a session merge
/// involves at most three windows (the new one and the two it may bridge: sessions are at
/// least one gap long and do not touch, so a window of one gap meets at most two).
fn hash_set_order(windows: &[(i64, i64)]) -> Vec<usize> {
    let mut buckets = 16usize;
    while windows.len() > buckets / 4 * 3 {
        buckets *= 2;
    }
    let bucket = |&(start, end): &(i64, i64)| {
        let h = time_window_hash(start, end);
        (h ^ (h >> 16)) as usize & (buckets - 1)
    };
    let mut order: Vec<usize> = (0..windows.len()).collect();
    order.sort_by_key(|&i| bucket(&windows[i])); // stable: insertion order within a bucket
    order
}

/// The session operator (keyed by event key).
#[derive(Debug)]
pub(super) struct SessionOperator {
    gap: i64,
    holistic: bool,
    lateness: i64,
    clock: Clock,
    issuer: Issuer,
    stats: OperatorStats,
    /// Open sessions per key (Flink's mapping of the key's `MergingWindowSet`), sorted by
    /// start, pairwise disjoint and not touching.
    sessions: HashMap<u64, Vec<Session>>,
    live_sessions: u64,
    /// Timers of (key, start, end).
    timers: Timers<(u64, i64, i64)>,
}

impl SessionOperator {
    pub(super) fn new(
        kind: OperatorKind,
        params: &OperatorParams,
        layout: KeyLayout,
    ) -> SessionOperator {
        SessionOperator {
            gap: params.session_gap,
            holistic: kind == OperatorKind::SessionHolistic,
            lateness: params.allowed_lateness,
            clock: Clock::new(false),
            issuer: Issuer::new(layout),
            stats: OperatorStats::default(),
            sessions: HashMap::new(),
            live_sessions: 0,
            timers: Timers::new(),
        }
    }

    /// (fire time, cleanup time) of a session: `maxTimestamp()` and `cleanupTime()`.
    fn times(&self, s: &Session) -> (i64, i64) {
        let max_ts = s.end - 1;
        (max_ts, max_ts.saturating_add(self.lateness))
    }

    /// `MergingWindowSet.persist()` of a changed set with `sessions` entries:
    /// `ListState.update` (`put M`), or its `clear()` (`delete M`) when empty.
    fn persist(&mut self, emit: &mut Emit<'_>, key: u64, sessions: usize) {
        let meta = self.issuer.key(TAG_META, key, 0);
        if sessions == 0 {
            self.issuer.delete(emit, &meta);
        } else {
            self.issuer.put(emit, &meta, META_BYTES_PER_SESSION * sessions as u64);
        }
    }

    /// `mergeNamespaces(target, sources)` on RocksDB (see the module docs).
    fn merge_namespaces(
        &mut self,
        emit: &mut Emit<'_>,
        key: u64,
        target: &Session,
        sources: &[Session],
        len: u64,
    ) {
        if sources.is_empty() {
            return;
        }
        let target_key = self.issuer.key(TAG_WINDOW, key, target.state);
        for a in sources {
            let a_key = self.issuer.key(TAG_WINDOW, key, a.state);
            self.issuer.get(emit, &a_key);
            self.issuer.delete(emit, &a_key);
            if self.holistic {
                self.issuer.merge(emit, &target_key, a.bytes);
            }
        }
        if !self.holistic {
            self.issuer.get(emit, &target_key);
            self.issuer.put(emit, &target_key, len);
        }
    }

    /// `WindowOperator.processElement` for one event.
    fn on_event(&mut self, ev: &InputEvent, emit: &mut Emit<'_>) {
        self.stats.events += 1;
        let wf = self.clock.wf;
        let (k, t, len) = (ev.key, ev.time, u64::from(ev.value_len));
        let meta = self.issuer.key(TAG_META, k, 0);
        self.issuer.get(emit, &meta); // getMergingWindowSet(): mergingSetsState.get()
        let (n_start, n_end) = (t, t.saturating_add(self.gap));
        let mut list = self.sessions.remove(&k).unwrap_or_default();
        // TimeWindow.intersects (inclusive: touching sessions merge).
        let meets = |s: &Session| s.start <= n_end && s.end >= n_start;
        let (idx, changed) = match list.iter().position(meets) {
            None => {
                let cleanup = (n_end - 1).saturating_add(self.lateness);
                if cleanup <= wf {
                    // isWindowLate: retired again, the mapping is unchanged, no persist.
                    if t.saturating_add(self.lateness) <= wf {
                        self.stats.late_dropped += 1; // isSkippedElement && isElementLate
                    }
                    if !list.is_empty() {
                        self.sessions.insert(k, list);
                    }
                    return;
                }
                let at = list.partition_point(|s| s.start < n_start);
                list.insert(at, Session { start: n_start, end: n_end, state: n_start, bytes: 0 });
                self.live_sessions += 1;
                (at, true)
            }
            Some(first) => {
                // Sessions are sorted and disjoint, so the ones the new window meets are
                // contiguous (at most two, see `hash_set_order`). None of them is late
                // (late sessions are cleaned up), so neither is the merged session.
                let last = first + list[first..].iter().take_while(|s| meets(s)).count() - 1;
                let m_start = n_start.min(list[first].start);
                let m_end = n_end.max(list[last].end);
                if first == last && (m_start, m_end) == (list[first].start, list[first].end) {
                    // The new window lies inside one session: addWindow calls no
                    // MergeFunction and the mapping is unchanged.
                    (first, false)
                } else {
                    let target = self.merge(k, &list[first..=last], (n_start, n_end), len, emit);
                    let merged = Session { start: m_start, end: m_end, ..target };
                    list.splice(first..=last, [merged]);
                    (first, true)
                }
            }
        };
        let s = list[idx];
        let key = self.issuer.key(TAG_WINDOW, k, s.state);
        if self.holistic {
            self.issuer.merge(emit, &key, len);
            list[idx].bytes = s.bytes.saturating_add(len);
        } else {
            self.issuer.get(emit, &key);
            self.issuer.put(emit, &key, len);
            list[idx].bytes = len;
        }
        let (fire, cleanup) = self.times(&s);
        if fire <= wf {
            // EventTimeTrigger.onElement: FIRE, windowState.get().
            self.issuer.get(emit, &key);
            self.stats.windows_fired += 1;
        } else {
            self.timers.register(fire, (k, s.start, s.end));
        }
        self.timers.register(cleanup, (k, s.start, s.end));
        if changed {
            self.persist(emit, k, list.len());
        }
        self.sessions.insert(k, list);
    }

    /// `MergingWindowSet.addWindow`'s merge of the sessions `merged` (sorted, the ones the
    /// new window meets) with the new window: picks the state window Flink keeps, deletes
    /// the merged sessions' timers and issues `mergeNamespaces` (`len`: the event's bytes,
    /// the size of a rewritten accumulator). Returns the kept session with the bytes it
    /// holds after the merge, before the event's own add.
    fn merge(
        &mut self,
        k: u64,
        merged: &[Session],
        new_window: (i64, i64),
        len: u64,
        emit: &mut Emit<'_>,
    ) -> Session {
        for s in merged {
            let (fire, cleanup) = self.times(s);
            self.timers.delete(fire, (k, s.start, s.end)); // triggerContext.clear()
            self.timers.delete(cleanup, (k, s.start, s.end)); // deleteCleanupTimer
        }
        // TimeWindow.mergeWindows adds the windows to its HashSet in start order (stable:
        // the new window, appended last, after an existing window of equal start).
        let mut windows: Vec<(i64, i64)> = merged.iter().map(|s| (s.start, s.end)).collect();
        let new_at = windows.partition_point(|w| w.0 <= new_window.0);
        windows.insert(new_at, new_window);
        // mergedWindows.remove(newWindow), then the iteration order of what is left.
        let order: Vec<usize> = hash_set_order(&windows)
            .into_iter()
            .filter(|&i| i != new_at)
            .map(|i| if i > new_at { i - 1 } else { i })
            .collect();
        let target = merged[order[0]];
        let sources: Vec<Session> = order[1..].iter().map(|&i| merged[i]).collect();
        self.merge_namespaces(emit, k, &target, &sources, len);
        self.live_sessions -= sources.len() as u64;
        let bytes = if sources.is_empty() {
            target.bytes
        } else if self.holistic {
            sources.iter().fold(target.bytes, |b, s| b.saturating_add(s.bytes))
        } else {
            len
        };
        Session { bytes, ..target }
    }

    /// `WindowOperator.onEventTime` for every due timer.
    fn fire_timers(&mut self, emit: &mut Emit<'_>) {
        while let Some((time, (k, start, end))) = self.timers.pop_due(self.clock.wf) {
            let meta = self.issuer.key(TAG_META, k, 0);
            self.issuer.get(emit, &meta); // getMergingWindowSet()
            let Some(mut list) = self.sessions.remove(&k) else { continue };
            let Some(idx) = list.iter().position(|s| s.start == start && s.end == end) else {
                // Timer of a window not in the set: return before persist().
                self.sessions.insert(k, list);
                continue;
            };
            let s = list[idx];
            let key = self.issuer.key(TAG_WINDOW, k, s.state);
            let (fire, cleanup) = self.times(&s);
            if time == fire {
                self.issuer.get(emit, &key); // EventTimeTrigger.onEventTime: FIRE
                self.stats.windows_fired += 1;
            }
            if time == cleanup {
                // clearAllState: windowState.clear(), retireWindow, persist(); then
                // onEventTime's own persist() writes the (still changed) set again.
                self.issuer.delete(emit, &key);
                list.remove(idx);
                self.live_sessions -= 1;
                self.persist(emit, k, list.len());
                self.persist(emit, k, list.len());
            }
            if !list.is_empty() {
                self.sessions.insert(k, list);
            }
        }
    }
}

impl Operator for SessionOperator {
    fn on_item(&mut self, item: &StreamItem, _input_event: u64, emit: &mut Emit<'_>) {
        match item {
            StreamItem::Event(ev) => self.on_event(ev, emit),
            StreamItem::Watermark { source, time } => {
                if let Ok(Some(_)) = self.clock.watermark(*source, *time) {
                    self.fire_timers(emit);
                }
            }
        }
    }

    fn finish(&mut self, _input_event: u64, emit: &mut Emit<'_>) {
        self.clock.finish();
        self.fire_timers(emit);
    }

    fn stats(&self) -> OperatorStats {
        OperatorStats {
            live_state_keys: self.live_sessions + self.sessions.len() as u64,
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by the JDK for a class with Flink's `TimeWindow.equals`/`hashCode`.
    #[test]
    fn time_window_hash_matches_java() {
        let cases = [
            ((0, 15), 887_756_089),
            ((12, 22), -1_469_831_108),
            ((-7, 3), -2_075_767_785),
            ((i64::MAX, 5), -552_768_348),
            ((i64::MIN, -1), 2_036_719_293),
        ];
        for ((start, end), java) in cases {
            assert_eq!(time_window_hash(start, end) as i32, java, "[{start},{end})");
        }
    }

    /// Iteration orders of `java.util.HashSet`s filled in the given order (JDK output).
    #[test]
    fn hash_set_order_matches_java() {
        assert_eq!(hash_set_order(&[(0, 15), (12, 22), (20, 40)]), [0, 1, 2]);
        assert_eq!(hash_set_order(&[(0, 10), (10, 20), (15, 25)]), [1, 2, 0]);
        assert_eq!(hash_set_order(&[(0, 10), (5, 15)]), [1, 0]);
        assert_eq!(hash_set_order(&[(20, 30), (30, 40)]), [0, 1]);
        // 13 windows: the table has grown to 32 buckets.
        let w: Vec<(i64, i64)> = (0..13).map(|i| (i * 3, i * 3 + 2)).collect();
        assert_eq!(hash_set_order(&w), [0, 1, 10, 2, 8, 4, 3, 5, 6, 9, 12, 7, 11]);
    }
}
