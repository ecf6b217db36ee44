//! Session windows, incremental and holistic: Flink's `WindowOperator` with
//! `EventTimeSessionWindows`, its `MergingWindowSet` (per-key metadata state) and RocksDB's
//! `mergeNamespaces` for merged sessions. See the parent module docs for the op sequence.

use super::{Clock, Issuer, KeyLayout, Operator, OperatorStats, Timers, TAG_META, TAG_WINDOW};
use crate::workload::{Emit, InputEvent, OperatorKind, OperatorParams, StreamItem};
use std::collections::HashMap;

/// Bytes of one session in the metadata value (Flink stores a window and its state window:
/// four longs).
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

/// The session operator (keyed by event key).
#[derive(Debug)]
pub(super) struct SessionOperator {
    gap: i64,
    holistic: bool,
    lateness: i64,
    clock: Clock,
    issuer: Issuer,
    stats: OperatorStats,
    /// Open sessions per key, sorted by start, pairwise disjoint and not touching.
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

    fn times(&self, s: &Session) -> (i64, i64) {
        let max_ts = s.end - 1;
        (max_ts, max_ts.saturating_add(self.lateness))
    }

    fn put_meta(&mut self, emit: &mut Emit<'_>, key: u64, sessions: usize) {
        let meta = self.issuer.key(TAG_META, key, 0);
        if sessions == 0 {
            self.issuer.delete(emit, &meta);
        } else {
            self.issuer.put(emit, &meta, META_BYTES_PER_SESSION * sessions as u64);
        }
    }

    fn on_event(&mut self, ev: &InputEvent, emit: &mut Emit<'_>) {
        self.stats.events += 1;
        let wf = self.clock.wf;
        let (k, t, len) = (ev.key, ev.time, u64::from(ev.value_len));
        let meta = self.issuer.key(TAG_META, k, 0);
        self.issuer.get(emit, &meta);
        let (n_start, n_end) = (t, t.saturating_add(self.gap));
        let mut list = self.sessions.remove(&k).unwrap_or_default();
        let first = list.iter().position(|s| s.start <= n_end && s.end >= n_start);
        let (idx, changed) = match first {
            None => {
                let cleanup = (n_end - 1).saturating_add(self.lateness);
                if cleanup <= wf {
                    // Late window that merges with nothing: retired, the mapping is unchanged.
                    if t.saturating_add(self.lateness) <= wf {
                        self.stats.late_dropped += 1;
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
                // Sessions are sorted and disjoint, so the intersecting ones are contiguous.
                // None of them is late (late sessions are already cleaned up), so neither is
                // the merged session.
                let last = first
                    + list[first..]
                        .iter()
                        .take_while(|s| s.start <= n_end && s.end >= n_start)
                        .count()
                    - 1;
                let m_start = n_start.min(list[first].start);
                let m_end = n_end.max(list[last].end);
                if first == last && (m_start, m_end) == (list[first].start, list[first].end) {
                    (first, false)
                } else {
                    for s in &list[first..=last] {
                        let (fire, cleanup) = self.times(s);
                        self.timers.delete(fire, (k, s.start, s.end));
                        self.timers.delete(cleanup, (k, s.start, s.end));
                    }
                    let target = list[first];
                    let target_key = self.issuer.key(TAG_WINDOW, k, target.state);
                    let mut absorbed_bytes = 0u64;
                    for a in &list[first + 1..=last] {
                        let a_key = self.issuer.key(TAG_WINDOW, k, a.state);
                        self.issuer.get(emit, &a_key);
                        self.issuer.delete(emit, &a_key);
                        absorbed_bytes = absorbed_bytes.saturating_add(a.bytes);
                    }
                    let absorbed = last - first;
                    let mut bytes = target.bytes;
                    if absorbed > 0 {
                        if self.holistic {
                            self.issuer.merge(emit, &target_key, absorbed_bytes);
                            bytes = bytes.saturating_add(absorbed_bytes);
                        } else {
                            self.issuer.get(emit, &target_key);
                            self.issuer.put(emit, &target_key, len);
                            bytes = len;
                        }
                        self.live_sessions -= absorbed as u64;
                    }
                    let merged = Session { start: m_start, end: m_end, state: target.state, bytes };
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
            self.issuer.get(emit, &key);
            self.stats.windows_fired += 1;
        } else {
            self.timers.register(fire, (k, s.start, s.end));
        }
        self.timers.register(cleanup, (k, s.start, s.end));
        if changed {
            self.put_meta(emit, k, list.len());
        }
        self.sessions.insert(k, list);
    }

    fn fire_timers(&mut self, emit: &mut Emit<'_>) {
        while let Some((time, (k, start, end))) = self.timers.pop_due(self.clock.wf) {
            let meta = self.issuer.key(TAG_META, k, 0);
            self.issuer.get(emit, &meta);
            let Some(mut list) = self.sessions.remove(&k) else { continue };
            let Some(idx) = list.iter().position(|s| s.start == start && s.end == end) else {
                self.sessions.insert(k, list);
                continue;
            };
            let s = list[idx];
            let key = self.issuer.key(TAG_WINDOW, k, s.state);
            let (fire, cleanup) = self.times(&s);
            if time == fire {
                self.issuer.get(emit, &key);
                self.stats.windows_fired += 1;
            }
            if time == cleanup {
                self.issuer.delete(emit, &key);
                list.remove(idx);
                self.live_sessions -= 1;
                self.put_meta(emit, k, list.len());
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
