//! The interval join: Flink's `IntervalJoinOperator` with its two per-key `MapState`
//! buffers (map key = event time, one bucket per time) and its cleanup timers. See the
//! parent module docs for the op sequence.

use super::{Clock, Issuer, KeyLayout, Operator, OperatorStats, Side, Timers, TAG_LEFT, TAG_RIGHT};
use crate::workload::{Emit, InputEvent, OpKind, OperatorParams, StreamItem};
use std::collections::{BTreeMap, HashMap};

/// Buffered bytes per (key, time) bucket of one side.
type Buffer = HashMap<u64, BTreeMap<i64, u64>>;

/// The interval join.
#[derive(Debug)]
pub(super) struct IntervalJoin {
    lower: i64,
    upper: i64,
    clock: Clock,
    issuer: Issuer,
    stats: OperatorStats,
    /// Left (0) and right (1) buffers.
    buffers: [Buffer; 2],
    live: u64,
    /// Cleanup timers of (side index, key, bucket time).
    timers: Timers<(u8, u64, i64)>,
}

fn tag(side: usize) -> u8 {
    if side == 0 {
        TAG_LEFT
    } else {
        TAG_RIGHT
    }
}

impl IntervalJoin {
    pub(super) fn new(params: &OperatorParams, layout: KeyLayout) -> IntervalJoin {
        IntervalJoin {
            lower: params.lower,
            upper: params.upper,
            clock: Clock::new(true),
            issuer: Issuer::new(layout),
            stats: OperatorStats::default(),
            buffers: [HashMap::new(), HashMap::new()],
            live: 0,
            timers: Timers::new(),
        }
    }

    fn on_event(&mut self, side: Side, ev: &InputEvent, emit: &mut Emit<'_>) {
        self.stats.events += 1;
        let (k, t) = (ev.key, ev.time);
        if t < self.clock.wf {
            self.stats.late_dropped += 1;
            return;
        }
        let own = usize::from(side == Side::Right);
        let other = 1 - own;
        let bucket_key = self.issuer.key(tag(own), k, t);
        self.issuer.get(emit, &bucket_key);
        let bucket = self.buffers[own].entry(k).or_default().entry(t).or_insert_with(|| {
            self.live += 1;
            0
        });
        *bucket = bucket.saturating_add(u64::from(ev.value_len));
        let bytes = *bucket;
        self.issuer.put(emit, &bucket_key, bytes);
        let seek = self.issuer.key(tag(other), k, i64::MIN);
        self.issuer.op(emit, OpKind::Seek, &seek, 0);
        if let Some(m) = self.buffers[other].get(&k) {
            for &ts in m.keys() {
                let next = self.issuer.key(tag(other), k, ts);
                self.issuer.op(emit, OpKind::Next, &next, 0);
            }
        }
        let cleanup = match side {
            Side::Left if self.upper > 0 => t.saturating_add(self.upper),
            Side::Right if self.lower < 0 => t.saturating_sub(self.lower),
            _ => t,
        };
        self.timers.register(cleanup, (own as u8, k, t));
    }

    fn fire_timers(&mut self, emit: &mut Emit<'_>) {
        while let Some((_, (side, k, ts))) = self.timers.pop_due(self.clock.wf) {
            let side = usize::from(side);
            let Some(m) = self.buffers[side].get_mut(&k) else { continue };
            if m.remove(&ts).is_none() {
                continue;
            }
            if m.is_empty() {
                self.buffers[side].remove(&k);
            }
            self.live -= 1;
            let key = self.issuer.key(tag(side), k, ts);
            self.issuer.delete(emit, &key);
        }
    }
}

impl Operator for IntervalJoin {
    fn on_item(&mut self, item: &StreamItem, _input_event: u64, emit: &mut Emit<'_>) {
        match item {
            StreamItem::Event(ev) => match self.clock.side(ev.source) {
                Some(side) => self.on_event(side, ev, emit),
                None => self.stats.ignored_items += 1,
            },
            StreamItem::Watermark { source, time } => match self.clock.watermark(*source, *time) {
                Err(()) => self.stats.ignored_items += 1,
                Ok(Some(_)) => self.fire_timers(emit),
                Ok(None) => {}
            },
        }
    }

    fn finish(&mut self, _input_event: u64, emit: &mut Emit<'_>) {
        self.clock.finish();
        self.fire_timers(emit);
    }

    fn stats(&self) -> OperatorStats {
        OperatorStats { live_state_keys: self.live, ..self.stats }
    }
}
