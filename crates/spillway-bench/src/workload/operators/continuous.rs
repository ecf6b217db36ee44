//! The continuous operators: Flink's regular (unbounded) inner join with a unique join key
//! (one value state per side and key) and the group aggregation (one value state per key).
//! Neither reads watermarks for its state, neither drops late events, neither ever deletes.

use super::{
    Clock, Issuer, KeyLayout, Operator, OperatorStats, Side, TAG_AGG, TAG_LEFT, TAG_RIGHT,
};
use crate::workload::{Emit, StreamItem};
use std::collections::HashSet;

/// `continuous.join`: per event, `get` the other side's state, `put` its own.
#[derive(Debug)]
pub(super) struct ContinuousJoin {
    clock: Clock,
    issuer: Issuer,
    stats: OperatorStats,
    live: HashSet<(Side, u64)>,
}

impl ContinuousJoin {
    pub(super) fn new(layout: KeyLayout) -> ContinuousJoin {
        ContinuousJoin {
            clock: Clock::new(true),
            issuer: Issuer::new(layout),
            stats: OperatorStats::default(),
            live: HashSet::new(),
        }
    }
}

impl Operator for ContinuousJoin {
    fn on_item(&mut self, item: &StreamItem, _input_event: u64, emit: &mut Emit<'_>) {
        match item {
            StreamItem::Event(ev) => {
                let Some(side) = self.clock.side(ev.source) else {
                    self.stats.ignored_items += 1;
                    return;
                };
                self.stats.events += 1;
                let (own, other) = match side {
                    Side::Left => (TAG_LEFT, TAG_RIGHT),
                    Side::Right => (TAG_RIGHT, TAG_LEFT),
                };
                let other_key = self.issuer.key(other, ev.key, 0);
                self.issuer.get(emit, &other_key);
                let own_key = self.issuer.key(own, ev.key, 0);
                self.issuer.put(emit, &own_key, u64::from(ev.value_len));
                self.live.insert((side, ev.key));
            }
            StreamItem::Watermark { source, time } => {
                if self.clock.watermark(*source, *time).is_err() {
                    self.stats.ignored_items += 1;
                }
            }
        }
    }

    fn finish(&mut self, _input_event: u64, _emit: &mut Emit<'_>) {
        self.clock.finish();
    }

    fn stats(&self) -> OperatorStats {
        OperatorStats { live_state_keys: self.live.len() as u64, ..self.stats }
    }
}

/// `continuous.aggregation`: per event, `get` and `put` the key's accumulator.
#[derive(Debug)]
pub(super) struct ContinuousAggregation {
    issuer: Issuer,
    stats: OperatorStats,
    live: HashSet<u64>,
}

impl ContinuousAggregation {
    pub(super) fn new(layout: KeyLayout) -> ContinuousAggregation {
        ContinuousAggregation {
            issuer: Issuer::new(layout),
            stats: OperatorStats::default(),
            live: HashSet::new(),
        }
    }
}

impl Operator for ContinuousAggregation {
    fn on_item(&mut self, item: &StreamItem, _input_event: u64, emit: &mut Emit<'_>) {
        if let StreamItem::Event(ev) = item {
            self.stats.events += 1;
            let key = self.issuer.key(TAG_AGG, ev.key, 0);
            self.issuer.get(emit, &key);
            self.issuer.put(emit, &key, u64::from(ev.value_len));
            self.live.insert(ev.key);
        }
    }

    fn finish(&mut self, _input_event: u64, _emit: &mut Emit<'_>) {}

    fn stats(&self) -> OperatorStats {
        OperatorStats { live_state_keys: self.live.len() as u64, ..self.stats }
    }
}
