//! The continuous operators: Flink's regular (unbounded) inner join, `StreamingJoinOperator`
//! with its `JoinRecordStateViews`, and the group aggregation (one value state per key).
//! This module owns both state machines and the join's three state views. Neither reads
//! watermarks for its state, drops late events or deletes on insert-only input (no state
//! TTL). The op table is in the parent module docs.
//!
//! # The join, op for op
//!
//! Flink (flink-table-runtime `operators.join.stream`): `StreamingJoinOperator.processElement`
//! first builds `AssociatedRecords.fromSyncStateView(input, ..., otherSideStateView, ...)`,
//! which iterates `otherSideStateView.getRecords()` to the end, then
//! `JoinHelper.processJoin` calls `addRecord` (an insert) or `retractRecord` (a retraction)
//! on the input side's view. An inner join touches nothing else (`OuterJoinRecordStateViews`,
//! the outer joins' association counts, are not modelled). The views
//! (`JoinRecordStateViews`), on the RocksDB backend (flink-statebackend-rocksdb):
//!
//! | view ([`JoinInput`]) | `getRecords` (other side) | `addRecord` | `retractRecord` |
//! |---|---|---|---|
//! | `InputSideHasNoUniqueKey` (`MapState<row, count>`) | `entries()`: seek + next per entry | `get`, `put` (count + 1) | `get`; `put` (count − 1) if > 1, `delete` if 1, nothing if absent |
//! | `InputSideHasUniqueKey` (`MapState<uk, row>`) | `values()`: seek + next per entry | `put` | `delete` (`remove`, unconditional) |
//! | `JoinKeyContainsUniqueKey` (`ValueState<row>`) | `value()`: `get` | `put` (`update`) | `delete` (`clear`, unconditional) |
//!
//! A map's entries are read by `RocksDBMapState.RocksDBMapIterator`: `loadCache` seeks to
//! the key's prefix and reads up to 128 entries (`CACHE_SIZE_LIMIT`), one `next` per entry
//! read; when those are used up and more remain, it seeks to the last entry read and steps
//! over it with one `next` before reading on. Here: `seek K(other, key, MIN)`, then
//! `next K(e)` per entry `e` in key order (a `next` carries the key the iterator stood on),
//! and before entry 129, 257, ...: `seek K(e_prev)`, `next K(e_prev)`. The seek happens even
//! when the other side holds nothing for the key.
//!
//! Row identity: a map entry's key is `K(side, key, t)`. Without a unique key, two events
//! of one side with the same key and time are the same row (its count goes to 2); with a
//! unique key, the time is the unique key (a repeat replaces the row, as an upsert does).
//! Flink stores the row in the RocksDB key and a 4-byte count as the value
//! (`InputSideHasNoUniqueKey`); Spillway's keys have a fixed length, so the row's bytes
//! (`value_len`) travel in the value of every `put`.
//!
//! Inputs are insert-only: [`crate::workload::InputEvent`] has no row kind, so the stream
//! never retracts. The retraction path (`ContinuousJoin::process` with `retract`) is
//! Flink's and is tested on hand-built calls.

use super::{
    Clock, Issuer, KeyLayout, Operator, OperatorStats, Side, TAG_AGG, TAG_LEFT, TAG_RIGHT,
};
use crate::workload::{Emit, InputEvent, JoinInput, OpKind, StreamItem};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Entries `RocksDBMapState.RocksDBMapIterator` reads per seek (its `CACHE_SIZE_LIMIT`).
const MAP_ITERATOR_BATCH: usize = 128;

/// One side's rows: join key -> state key of each entry -> count (the row's multiplicity
/// for [`JoinInput::NoUniqueKey`], 1 otherwise).
type Rows = HashMap<u64, BTreeMap<Vec<u8>, u32>>;

/// `continuous.join`: Flink's `StreamingJoinOperator` (inner join) over the
/// [`JoinInput`] state view.
#[derive(Debug)]
pub(super) struct ContinuousJoin {
    view: JoinInput,
    clock: Clock,
    issuer: Issuer,
    stats: OperatorStats,
    /// Left (0) and right (1) rows.
    rows: [Rows; 2],
    live: u64,
}

fn tag(side: usize) -> u8 {
    if side == 0 {
        TAG_LEFT
    } else {
        TAG_RIGHT
    }
}

impl ContinuousJoin {
    pub(super) fn new(view: JoinInput, layout: KeyLayout) -> ContinuousJoin {
        ContinuousJoin {
            view,
            clock: Clock::new(true),
            issuer: Issuer::new(layout),
            stats: OperatorStats::default(),
            rows: [HashMap::new(), HashMap::new()],
            live: 0,
        }
    }

    /// The state key of `ev`'s row on `side`: per row for the map views, per join key for
    /// the value view.
    fn row_key(&self, side: usize, ev: &InputEvent) -> Vec<u8> {
        let time = if self.view == JoinInput::JoinKeyContainsUniqueKey { 0 } else { ev.time };
        self.issuer.key(tag(side), ev.key, time)
    }

    /// `StreamingJoinOperator.processElement` for one record of `side`: an insert, or with
    /// `retract` a retraction (`-D`/`-U`).
    pub(super) fn process(
        &mut self,
        side: Side,
        ev: &InputEvent,
        retract: bool,
        emit: &mut Emit<'_>,
    ) {
        let own = usize::from(side == Side::Right);
        self.read_other(1 - own, ev.key, emit);
        let key = self.row_key(own, ev);
        let len = u64::from(ev.value_len);
        let rows = self.rows[own].entry(ev.key).or_default();
        let before = rows.len();
        match (self.view, retract) {
            (JoinInput::NoUniqueKey, false) => {
                // InputSideHasNoUniqueKey.addRecord: get the count, put count + 1.
                self.issuer.get(emit, &key);
                *rows.entry(key.clone()).or_insert(0) += 1;
                self.issuer.put(emit, &key, len);
            }
            (JoinInput::NoUniqueKey, true) => {
                // InputSideHasNoUniqueKey.retractRecord.
                self.issuer.get(emit, &key);
                match rows.get(&key).copied() {
                    None => {} // state stale: handleStateStaleError, no write
                    Some(1) => {
                        rows.remove(&key);
                        self.issuer.delete(emit, &key);
                    }
                    Some(n) => {
                        rows.insert(key.clone(), n - 1);
                        self.issuer.put(emit, &key, len);
                    }
                }
            }
            (_, false) => {
                // InputSideHasUniqueKey.addRecord (MapState.put) or
                // JoinKeyContainsUniqueKey.addRecord (ValueState.update).
                rows.insert(key.clone(), 1);
                self.issuer.put(emit, &key, len);
            }
            (_, true) => {
                // MapState.remove or ValueState.clear: a delete, present or not.
                rows.remove(&key);
                self.issuer.delete(emit, &key);
            }
        }
        let after = rows.len();
        if after == 0 {
            self.rows[own].remove(&ev.key);
        }
        self.live = self.live - before as u64 + after as u64;
    }

    /// `otherSideStateView.getRecords()`, iterated to the end (see the module docs).
    fn read_other(&mut self, other: usize, key: u64, emit: &mut Emit<'_>) {
        if self.view == JoinInput::JoinKeyContainsUniqueKey {
            let k = self.issuer.key(tag(other), key, 0);
            self.issuer.get(emit, &k);
            return;
        }
        let prefix = self.issuer.key(tag(other), key, i64::MIN);
        let Self { issuer, rows, .. } = self;
        issuer.op(emit, OpKind::Seek, &prefix, 0);
        let Some(entries) = rows[other].get(&key) else { return };
        let mut prev: Option<&Vec<u8>> = None;
        for (i, entry) in entries.keys().enumerate() {
            if let Some(p) = prev.filter(|_| i % MAP_ITERATOR_BATCH == 0) {
                // loadCache again: seek to the last entry read, step over it.
                issuer.op(emit, OpKind::Seek, p, 0);
                issuer.op(emit, OpKind::Next, p, 0);
            }
            issuer.op(emit, OpKind::Next, entry, 0);
            prev = Some(entry);
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
                self.process(side, ev, false, emit);
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
        OperatorStats { live_state_keys: self.live, ..self.stats }
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
