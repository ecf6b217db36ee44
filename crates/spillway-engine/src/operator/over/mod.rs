//! The runtime of one query: per-event window maintenance and exact per-event results.
//!
//! ## How a result is exact
//! The *frontier* `T` is the largest event time seen. For every window the running
//! aggregation state (one [`AggSet`] state per group-by node and partition key, in the
//! store) holds the events that have passed the window's *enter* boundary and not yet its
//! *exit* boundary at `T` (see [`Boundary`]). For an event in order (`t == T`) that is
//! exactly its window, so its result is the state after its own update.
//!
//! Events wait in the *lateness buffer* (sorted by time, then arrival) until the frontier
//! is more than `allowed_lateness` past them, then move to the [`Reservoir`] in time
//! order. One cursor per boundary walks reservoir then buffer; an event a late arrival
//! lands behind a cursor counts as passed at once, so every event enters and leaves each
//! window exactly once. A late event (`T - L <= t < T`) gets its own exact result from a
//! copy of the running state: the newest events not in its window are removed
//! (`remove_recent`) and the evicted ones still in its window re-added; both sets lie
//! within `L` of the frontier, so each cursor keeps the events it passed in the last `L`
//! time units (only when `L > 0`). Events older than `T - L` are returned as
//! [`Outcome::TooLate`] for the side output.
//!
//! ## State records
//! The `RANGE` group-by nodes with one `PARTITION BY` keep their states for a key as the
//! slots of one store value, their [state record](crate::plan::RecordNode) (layout:
//! [`crate::aggregate::record`]). A pass of an event over a boundary, or its arrival,
//! updates every node of the windows that boundary opens or closes in one
//! read-modify-write per record: ten windows over one card that all start at arrival
//! cost one update there, not ten, and the card is one key in the store. The current
//! event's results come from the last update of its partition's records (or one read).
//!
//! Costs per event in order: one read-modify-write per state record the event enters
//! (at arrival: one per distinct `PARTITION BY`), one per record and boundary an
//! expiring event passes, one reservoir append and one reservoir read per cursor. A late
//! event adds a scan of the events within `L` of the frontier.
//!
//! ## `UNBOUNDED PRECEDING`
//! A window with no start has an enter boundary and no exit boundary: its events enter
//! as above and never leave, so it adds no cursor at its start and keeps no event in the
//! reservoir (the cursor of an end `> 0` still does, until events pass it). A late
//! event's result removes the newer events as above; there are no evicted events to
//! re-add. Its aggregate sets are built [`without_evictions`](AggSet::without_evictions).
//!
//! ## `ROWS BETWEEN n PRECEDING AND CURRENT ROW`
//! A `ROWS` window counts rows, not time, so it has no boundary and no cursor. Each of
//! its group-by nodes keeps, per partition key, the partition's rows (time, arrival
//! sequence, whether the row passes the node's `FILTER`, its aggregate arguments) at
//! consecutive positions in (time, arrival) order in a second namespace (`g<i>.rows`),
//! and in its own namespace a header (first and next position) beside the running
//! [`AggSet`] state of the last `n + 1` rows (layout: `aggregate::rows`). All of it is
//! in the store, so checkpoints carry it with the rest of the state.
//!
//! * An event in order is appended: one header read and write, one row write, the row
//!   that leaves the last `n + 1` read back for its eviction (and deleted, when `L = 0`),
//!   plus the AggSet insert and evict. Its result is the running state.
//! * With lateness `L > 0` a partition keeps, besides its last `n + 1` rows, every row
//!   within `L` of the frontier and the `n + 1` rows before those (all a late event's
//!   window can reach). The header keeps the time of the row `n + 1` after the oldest
//!   kept one, so the oldest row is dropped (one delete and one read) as soon as that
//!   row is `L` behind the frontier, without reading rows to decide: O(1) amortized.
//! * A late event (`T - L <= t < T`) is put at its place: the `k` rows after it (all
//!   within `L`) move up one position. If `k <= n` it is among the last `n + 1` rows: it
//!   enters the running state and the oldest row leaves; its own result is a copy of
//!   the running state without those `k` rows (`remove_recent`), with it and the up to
//!   `k - 1` rows before the running window's start inserted. If `k > n` the running
//!   state does not change and its result is computed from the `n` rows before it. A
//!   late event costs O(k + min(k, n)) row reads and writes.
//!
//! Like an `UNBOUNDED PRECEDING` state, a partition's last rows stay in the store after
//! it goes quiet (its next event needs them): state grows with the number of partitions
//! times `n + 1` rows.

pub mod backfill;
pub mod peers;
mod recent;

use spillway_store::StateStoreExt;
use std::collections::VecDeque;

use recent::{key_hash, part_hash, RecentList};

use spillway_store::{Ns, Rmw, StateStore};

use crate::aggregate::external::{Adjustment, HolisticTrees};
use crate::aggregate::record::{self, put_slot, RecordError, Slots};
use crate::aggregate::rows::{decode_row, put_row, row_key, KeptRow, RowsHeader};
use crate::aggregate::AggStateError;
use crate::error::{Error, Result};
use crate::plan::{Boundary, OutputSource, Plan};
use crate::reservoir::{CursorId, Reservoir};
use crate::value::{Event, EventKey, Row, Value};

#[cfg(doc)]
use crate::aggregate::AggSet;

/// Name of the store namespace holding checkpoint metadata.
pub const META_NAMESPACE: &str = "meta";

/// What happened to one input event.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// The event's output row was written to the caller's buffer.
    Emitted,
    /// The query's `WHERE` rejected it: no output, not windowed.
    Filtered,
    /// It arrived more than the allowed lateness behind the frontier: it goes to the side
    /// output and is counted.
    TooLate(Event),
}

/// Counters of a runtime.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    /// Events given to [`Runtime::process`].
    pub events: u64,
    /// Rows emitted.
    pub emitted: u64,
    /// Events rejected by `WHERE`.
    pub filtered: u64,
    /// Events later than the allowed lateness (side output).
    pub too_late: u64,
    /// Events out of order but within the allowed lateness.
    pub late_in_bounds: u64,
    /// Read-modify-writes of aggregation state.
    pub state_updates: u64,
}

impl Counters {
    /// What was counted after `start` (counters taken earlier from the same job).
    pub fn since(&self, start: &Counters) -> Counters {
        Counters {
            events: self.events.saturating_sub(start.events),
            emitted: self.emitted.saturating_sub(start.emitted),
            filtered: self.filtered.saturating_sub(start.filtered),
            too_late: self.too_late.saturating_sub(start.too_late),
            late_in_bounds: self.late_in_bounds.saturating_sub(start.late_in_bounds),
            state_updates: self.state_updates.saturating_sub(start.state_updates),
        }
    }
}

/// A cursor over one boundary (not the arrival boundary).
#[derive(Debug)]
struct Cursor {
    boundary: Boundary,
    res: CursorId,
    /// Buffer events already passed (`buffer[..buf_pos]`); non-zero only once the cursor
    /// has passed every reservoir event.
    buf_pos: usize,
    /// Events passed within the last `lateness` time units (empty when lateness is 0).
    /// Indexed by partition (see [`recent`]).
    recent: RecentList<Event>,
    /// Windows this boundary is the enter boundary of.
    enters: Vec<usize>,
    /// Windows this boundary is the exit boundary of.
    exits: Vec<usize>,
}

impl Cursor {
    /// The cursor passes `x`: it enters the windows this boundary opens and leaves the
    /// ones it closes, and is remembered for late events' results when lateness is on.
    #[inline]
    fn pass(&mut self, state: &mut StateSide, plan: &Plan, x: &Event, frontier: i64) -> Result<()> {
        state.pass_event(plan, &self.enters, &self.exits, x, frontier, false)?;
        if state.lateness > 0 {
            self.recent.push(&state.specs, &x.row, x.clone(), &mut state.hash_buf);
        }
        Ok(())
    }

    /// Forgets the recent events older than `keep_from` (from the front, in the order
    /// they were passed).
    fn forget_before(&mut self, keep_from: i64) {
        while self.recent.front().is_some_and(|e| e.time < keep_from) {
            self.recent.pop_front();
        }
    }
}

/// Serializable runtime position (part of a checkpoint).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RuntimeSnapshot {
    /// Frontier, if any event was seen.
    pub frontier: Option<i64>,
    /// Lateness buffer.
    pub buffer: Vec<Event>,
    /// Per cursor (in boundary order): reservoir index, buffer position, recent events.
    pub cursors: Vec<(u64, usize, Vec<Event>)>,
    /// Counters.
    pub counters: Counters,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Action {
    Enter,
    Exit,
}

/// One group-by node's part of a pass: its record and slot, and what `x` does to it.
#[derive(Clone, Copy)]
struct Touch {
    record: usize,
    slot: usize,
    group: usize,
    action: Action,
}

/// What the current event's partition's record is known to hold (see
/// [`StateSide::rec_cap`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Captured {
    /// Not read yet.
    No,
    /// Nothing: every slot is empty.
    Absent,
    /// The bytes in `rec_cap`.
    Present,
}

/// Aggregation state side: the store and per-group scratch. Kept apart from the
/// reservoir so a borrowed reservoir event can update state without a copy.
struct StateSide {
    store: Box<dyn StateStore>,
    /// Per group: the namespace of its state (its record's, for a `RANGE` node).
    ns: Vec<Ns>,
    /// Per state record: its namespace.
    rec_ns: Vec<Ns>,
    /// Per state record: its value for the current event's partition, as the last
    /// update of that partition left it (valid per `rec_filled`).
    rec_cap: Vec<Vec<u8>>,
    rec_filled: Vec<Captured>,
    /// Scratch of a pass: the nodes it updates.
    touch: Vec<Touch>,
    /// Per group: the aggregate arguments of the event being passed.
    member_args: Vec<Vec<Value>>,
    /// Scratch: one slot's new state.
    slot_buf: Vec<u8>,
    /// Per group: the order-statistics trees of its holistic aggregates (`RANGE` frames).
    trees: Vec<Option<HolisticTrees>>,
    /// Per group: the namespace of its kept rows (`ROWS` windows only).
    rows_ns: Vec<Option<Ns>>,
    /// Scratch of the `ROWS` updates: a header value and a row key.
    rows_buf: Vec<u8>,
    rows_key: Vec<u8>,
    lateness: i64,
    /// The distinct `PARTITION BY` column lists of the `RANGE` groups, and each group's
    /// index in it (`None` for `ROWS` groups): the partitionings of the late-event index.
    specs: Vec<Vec<usize>>,
    group_spec: Vec<Option<usize>>,
    /// Per partitioning: a group that uses it.
    spec_group: Vec<usize>,
    hash_buf: Vec<u8>,
    /// Partition key of the current event per group.
    cur_keys: Vec<Vec<u8>>,
    /// Results captured for the current event's partition per group.
    slots: Vec<Vec<Value>>,
    /// Whether `slots[g]` holds the current event's results.
    filled: Vec<bool>,
    key: Vec<u8>,
    args: Vec<Value>,
    /// Store read-modify-writes of aggregation state (one per record touched).
    updates: u64,
}

fn encode_partition(cols: &[usize], row: &Row, out: &mut Vec<u8>) {
    out.clear();
    for &c in cols {
        row[c].encode_key(out);
    }
}

fn eval_args(plan: &Plan, gi: usize, row: &Row, out: &mut Vec<Value>) {
    out.clear();
    for (_, arg, _) in &plan.groups[gi].aggs {
        out.push(match arg {
            Some(e) => e.eval(row),
            None => Value::Null,
        });
    }
}

impl StateSide {
    /// Event `x` enters the windows `enters` and leaves the windows `exits` (those of one
    /// boundary, or of the arrival): every group-by node of those windows whose filter
    /// passes is updated, with one read-modify-write per state record it touches.
    ///
    /// `current`: `x` is the event being processed, whose partition keys are in
    /// `cur_keys` already (its arrival), so they are not encoded again.
    fn pass_event(
        &mut self,
        plan: &Plan,
        enters: &[usize],
        exits: &[usize],
        x: &Event,
        frontier: i64,
        current: bool,
    ) -> Result<()> {
        let mut touch = std::mem::take(&mut self.touch);
        touch.clear();
        for (windows, action) in [(enters, Action::Enter), (exits, Action::Exit)] {
            for &w in windows {
                for &fi in &plan.windows[w].filters {
                    let filter = &plan.filters[fi];
                    if filter.predicate.as_ref().is_some_and(|p| !p.eval_bool(&x.row)) {
                        continue;
                    }
                    for &gi in &filter.groups {
                        if let Some((ri, slot)) = plan.groups[gi].record {
                            touch.push(Touch { record: ri, slot, group: gi, action });
                        }
                    }
                }
            }
        }
        touch.sort_unstable_by_key(|t| (t.record, t.slot));
        let mut i = 0;
        while i < touch.len() {
            let ri = touch[i].record;
            let end = i + touch[i..].iter().take_while(|t| t.record == ri).count();
            // An early return rather than a `Result` kept in a local: copying the
            // (large) `Result` out on every pass showed in the profile.
            if let Err(e) = self.update_record(plan, ri, &touch[i..end], x, frontier, current) {
                self.touch = touch;
                return Err(e);
            }
            i = end;
        }
        self.touch = touch;
        Ok(())
    }

    /// One read-modify-write of state record `ri` for `x`'s partition key: each of
    /// `members` (sorted by slot) enters or leaves `x`; the other slots keep their bytes.
    fn update_record(
        &mut self,
        plan: &Plan,
        ri: usize,
        members: &[Touch],
        x: &Event,
        frontier: i64,
        current: bool,
    ) -> Result<()> {
        let rec = &plan.records[ri];
        let capture = if current {
            self.key.clone_from(&self.cur_keys[rec.groups[0]]);
            true
        } else {
            encode_partition(&rec.partition_by, &x.row, &mut self.key);
            self.key == self.cur_keys[rec.groups[0]]
        };
        for t in members {
            eval_args(plan, t.group, &x.row, &mut self.member_args[t.group]);
        }
        let key = x.key();
        let lateness = self.lateness;
        let n = rec.groups.len();
        let member_args = &self.member_args;
        let scratch = &mut self.slot_buf;
        let cap = &mut self.rec_cap[ri];
        let mut captured: Option<bool> = None;
        let mut failed: Option<(usize, AggStateError)> = None;
        let mut bad: Option<RecordError> = None;
        let mut missing: Option<usize> = None;
        self.store.rmw(self.rec_ns[ri], &self.key, &mut |old, out| {
            out.clear();
            let data = old.unwrap_or(&[]);
            let mut slots = Slots::new(old, n);
            let mut next = members.iter().peekable();
            let mut any = false;
            // Untouched slots are copied as runs of the old bytes, up to the next touched one.
            let mut copied = 0;
            for j in 0..n {
                let start = slots.pos();
                let old_j = match slots.next_slot() {
                    Ok(s) => s,
                    Err(e) => {
                        bad = Some(e);
                        return Rmw::Keep;
                    }
                };
                let Some(t) = next.next_if(|t| t.slot == j) else {
                    if data.is_empty() {
                        put_slot(out, None);
                    }
                    any |= old_j.is_some();
                    continue;
                };
                out.extend_from_slice(&data[copied..start]);
                copied = slots.pos();
                let group = &plan.groups[t.group];
                let args = &member_args[t.group];
                let kept = match t.action {
                    Action::Enter => {
                        let horizon = EventKey {
                            time: frontier
                                .saturating_sub(plan.windows[group.window].frame.end())
                                .saturating_sub(lateness),
                            seq: 0,
                        };
                        group.set.try_insert(old_j, scratch, key, args, horizon).map(|()| true)
                    }
                    Action::Exit => match old_j {
                        None => {
                            missing = Some(t.group);
                            return Rmw::Keep;
                        }
                        Some(o) => group.set.try_evict(o, scratch, key, args).map(|empty| !empty),
                    },
                };
                match kept {
                    Ok(true) => {
                        put_slot(out, Some(scratch));
                        any = true;
                    }
                    Ok(false) => put_slot(out, None),
                    Err(e) => {
                        failed = Some((t.group, e));
                        return Rmw::Keep;
                    }
                }
            }
            out.extend_from_slice(&data[copied..]);
            if capture {
                cap.clear();
                if any {
                    cap.extend_from_slice(out);
                }
                captured = Some(any);
            }
            if any {
                Rmw::Put
            } else {
                Rmw::Delete
            }
        })?;
        if let Some(e) = bad {
            return Err(record_err(plan, ri, &e));
        }
        if let Some((gi, e)) = failed {
            return Err(state_err(gi, plan, e));
        }
        if let Some(gi) = missing {
            return Err(Error::State(format!(
                "aggregation state of {} lost a key that still held an event (time {}, seq {}); \
                 the store does not match the reservoir",
                state_name(plan, gi),
                x.time,
                x.seq
            )));
        }
        if let Some(present) = captured {
            self.rec_filled[ri] = if present { Captured::Present } else { Captured::Absent };
        }
        for t in members {
            if let Some(trees) = self.trees[t.group].as_mut() {
                let delta = if t.action == Action::Enter { 1 } else { -1 };
                let args = &self.member_args[t.group];
                trees.update(self.store.as_mut(), &self.key, key, args, delta)?;
            }
        }
        self.updates += 1;
        Ok(())
    }

    /// The state of `RANGE` node `gi` for the current event's partition (`None`: it
    /// holds nothing for it).
    fn group_state(&mut self, plan: &Plan, gi: usize) -> Result<Option<Vec<u8>>> {
        let Some((ri, slot)) = plan.groups[gi].record else {
            return Ok(self.store.get(self.ns[gi], &self.cur_keys[gi])?);
        };
        let Some(v) = self.store.get(self.rec_ns[ri], &self.cur_keys[gi])? else {
            return Ok(None);
        };
        let n = plan.records[ri].groups.len();
        Ok(record::slot(&v, n, slot).map_err(|e| record_err(plan, ri, &e))?.map(<[u8]>::to_vec))
    }

    /// The current event `x` arrives at the `ROWS` group-by node `gi` (whatever its
    /// `FILTER` says: the frame counts the partition's rows): `x` is put among the
    /// partition's kept rows, the running state of the last `n + 1` rows follows, rows no
    /// late event can reach any more are dropped, and `x`'s own result is captured (see
    /// the module docs).
    fn rows_arrive(&mut self, plan: &Plan, gi: usize, x: &Event, frontier: i64) -> Result<()> {
        let group = &plan.groups[gi];
        let (Some((rows_name, n)), Some(rns)) = (&group.rows, self.rows_ns[gi]) else {
            return Ok(());
        };
        let n = *n;
        let set = &group.set;
        let err = |e: AggStateError| state_err(gi, plan, e);
        let passes =
            plan.filters[group.filter].predicate.as_ref().is_none_or(|p| p.eval_bool(&x.row));
        if passes {
            eval_args(plan, gi, &x.row, &mut self.args);
        }
        let args = passes.then_some(&self.args[..]);
        let ekey = x.key();
        let lateness = self.lateness;
        // Every kept row a late event can still move past is at or after this key.
        let horizon = EventKey { time: frontier.saturating_sub(lateness), seq: 0 };
        let hns = self.ns[gi];
        let pk: &[u8] = &self.cur_keys[gi];
        let mut rows = RowAccess {
            store: self.store.as_mut(),
            ns: rns,
            name: rows_name,
            pk,
            aggs: group.aggs.len(),
            key: std::mem::take(&mut self.rows_key),
            buf: Vec::new(),
        };
        let mut hbuf = std::mem::take(&mut self.rows_buf);
        let (mut h, mut state) = if rows.store.get_into(hns, pk, &mut hbuf)? {
            let (h, st) = RowsHeader::split(&hbuf).map_err(err)?;
            (h, st.to_vec())
        } else {
            (RowsHeader::default(), set.empty_state().to_vec())
        };
        let mut out = Vec::new();
        // Applies one AggSet step to `state`.
        let mut step = |state: &mut Vec<u8>, f: &mut AggStep<'_>| -> Result<()> {
            f(state, &mut out).map_err(err)?;
            std::mem::swap(state, &mut out);
            Ok(())
        };

        // (1) Its place: after every kept row, unless it is late; then the rows after it
        // (newest first in `after`) move up one position.
        let mut after: Vec<KeptRow> = Vec::new();
        let mut pos = h.tail;
        if x.time < frontier {
            while pos > h.head {
                let r = rows.read(pos - 1)?;
                if r.key < ekey {
                    break;
                }
                rows.write_buf(pos)?;
                after.push(r);
                pos -= 1;
            }
            if pos == h.head && h.head > 0 {
                return Err(Error::State(format!(
                    "namespace `{rows_name}`: the late event at time {} seq {} falls before the \
                     oldest kept row of its partition (position {}); the store does not match \
                     the allowed lateness",
                    x.time, x.seq, h.head
                )));
            }
        }
        let mut row = Vec::new();
        put_row(&mut row, ekey, args);
        rows.write(pos, &row)?;
        let tail_before = h.tail;
        h.tail += 1;
        let k = after.len() as u64;

        // (2) The running state of the last n + 1 rows, and `x`'s own window when it is
        // not that one (`own`).
        let mut own: Option<Vec<u8>> = None;
        if k <= n {
            if k > 0 {
                // The running window without the k rows after `x`, with `x` and the rows
                // before the running window's start that `x`'s window reaches.
                let mut c = state.clone();
                for r in &after {
                    if let Some(a) = &r.args {
                        step(&mut c, &mut |old, o| set.try_remove_recent(old, o, r.key, a))?;
                    }
                }
                if let Some(a) = args {
                    step(&mut c, &mut |old, o| set.try_insert(Some(old), o, ekey, a, horizon))?;
                }
                let window_start = h.head.max(tail_before.saturating_sub(n + 1));
                for p in (h.head.max(pos.saturating_sub(n))..window_start).rev() {
                    let r = rows.read(p)?;
                    if let Some(a) = &r.args {
                        step(&mut c, &mut |old, o| {
                            set.try_insert(Some(old), o, r.key, a, horizon)
                        })?;
                    }
                }
                own = Some(c);
            }
            if let Some(a) = args {
                step(&mut state, &mut |old, o| set.try_insert(Some(old), o, ekey, a, horizon))?;
            }
            if h.tail - h.head > n + 1 {
                // The row that leaves the last n + 1 (before `x`'s place, so not moved).
                let q = h.tail - n - 2;
                let r = if lateness == 0 {
                    // Without lateness only the last n + 1 rows are kept.
                    while h.head < q {
                        rows.delete(h.head)?;
                        h.head += 1;
                    }
                    h.head = q + 1;
                    rows.take(q)?
                } else {
                    rows.read(q)?
                };
                if let Some(a) = &r.args {
                    step(&mut state, &mut |old, o| set.try_evict(old, o, r.key, a).map(|_| ()))?;
                }
            }
        } else {
            // Not among the last n + 1 rows: its window is it and the n rows before it.
            let mut c = set.empty_state().to_vec();
            for p in h.head.max(pos.saturating_sub(n))..pos {
                let r = rows.read(p)?;
                if let Some(a) = &r.args {
                    step(&mut c, &mut |old, o| set.try_insert(Some(old), o, r.key, a, horizon))?;
                }
            }
            if let Some(a) = args {
                step(&mut c, &mut |old, o| set.try_insert(Some(old), o, ekey, a, horizon))?;
            }
            own = Some(c);
        }

        // (3) With lateness, drop the oldest row once the n + 1 rows after it are L behind
        // the frontier: no late event's window reaches it then.
        if lateness > 0 {
            let g = h.head + n + 1;
            if g < h.tail && pos <= g {
                h.guard = if pos == g { x.time } else { rows.read(g)?.key.time };
            }
            let settled = frontier.saturating_sub(lateness);
            while h.head + n + 1 < h.tail && h.guard <= settled {
                rows.delete(h.head)?;
                h.head += 1;
                let g = h.head + n + 1;
                if g < h.tail {
                    h.guard = rows.read(g)?.key.time;
                }
            }
        }

        hbuf.clear();
        h.put(&mut hbuf);
        hbuf.extend_from_slice(&state);
        rows.store.put(hns, pk, &hbuf)?;
        self.rows_key = rows.key;
        self.rows_buf = hbuf;
        let slot = &mut self.slots[gi];
        slot.clear();
        set.try_results(own.as_ref().unwrap_or(&state), slot).map_err(err)?;
        self.filled[gi] = true;
        self.updates += 1;
        Ok(())
    }
}

/// One AggSet operation from an old state into an empty buffer (see `rows_arrive`).
type AggStep<'a> = dyn FnMut(&[u8], &mut Vec<u8>) -> std::result::Result<(), AggStateError> + 'a;

/// The kept rows of one partition of a `ROWS` group-by node, by position (see
/// [`crate::aggregate::rows`] for their layout).
struct RowAccess<'a> {
    store: &'a mut dyn StateStore,
    ns: Ns,
    name: &'a str,
    pk: &'a [u8],
    aggs: usize,
    key: Vec<u8>,
    /// The bytes of the row read last.
    buf: Vec<u8>,
}

impl RowAccess<'_> {
    fn missing(&self, pos: u64) -> Error {
        Error::State(format!(
            "namespace `{}`: the kept row at position {pos} of a partition is missing; the \
             store does not match the partition's header",
            self.name
        ))
    }

    fn decode(&self, pos: u64) -> Result<KeptRow> {
        decode_row(&self.buf, self.aggs).map_err(|e| {
            Error::State(format!("namespace `{}`: kept row at position {pos}: {e}", self.name))
        })
    }

    fn read(&mut self, pos: u64) -> Result<KeptRow> {
        row_key(self.pk, pos, &mut self.key);
        if !self.store.get_into(self.ns, &self.key, &mut self.buf)? {
            return Err(self.missing(pos));
        }
        self.decode(pos)
    }

    /// Reads and deletes the row at `pos`.
    fn take(&mut self, pos: u64) -> Result<KeptRow> {
        row_key(self.pk, pos, &mut self.key);
        let buf = &mut self.buf;
        buf.clear();
        let mut found = false;
        self.store.rmw(self.ns, &self.key, &mut |old, _| match old {
            Some(v) => {
                buf.extend_from_slice(v);
                found = true;
                Rmw::Delete
            }
            None => Rmw::Keep,
        })?;
        if !found {
            return Err(self.missing(pos));
        }
        self.decode(pos)
    }

    fn write(&mut self, pos: u64, row: &[u8]) -> Result<()> {
        row_key(self.pk, pos, &mut self.key);
        Ok(self.store.put(self.ns, &self.key, row)?)
    }

    /// Writes the row read last at `pos`.
    fn write_buf(&mut self, pos: u64) -> Result<()> {
        row_key(self.pk, pos, &mut self.key);
        Ok(self.store.put(self.ns, &self.key, &self.buf)?)
    }

    fn delete(&mut self, pos: u64) -> Result<()> {
        row_key(self.pk, pos, &mut self.key);
        Ok(self.store.delete(self.ns, &self.key)?)
    }
}

/// The runtime of one query.
pub struct Runtime {
    plan: Plan,
    frontier: Option<i64>,
    buffer: VecDeque<Event>,
    cursors: Vec<Cursor>,
    /// Windows entered at arrival.
    arrival_enters: Vec<usize>,
    /// Per group: an earlier group with the same `PARTITION BY`, whose key it copies.
    key_source: Vec<Option<usize>>,
    /// Group-by nodes under `ROWS` windows (updated at arrival through their kept rows).
    rows_groups: Vec<usize>,
    reservoir: Reservoir,
    state: StateSide,
    /// The keys of the events that arrived within the lateness, in arrival order, by
    /// partition (empty when lateness is 0): a late event's newer events in windows
    /// entered at arrival are among them, in the buffer.
    arrivals: RecentList<EventKey>,
    /// Recent events read to compute late events' results (not checkpointed).
    late_examined: u64,
    counters: Counters,
    /// Partition keys of the batch given to [`Runtime::prefetch`], back to back.
    prefetch_keys: Vec<u8>,
    /// (namespace, end in `prefetch_keys`) per key of that batch.
    prefetch_ends: Vec<(Ns, usize)>,
}

impl Runtime {
    /// A runtime over `store` (opened with [`Runtime::namespaces`]) and an empty or
    /// recovered `reservoir`. With `snapshot`, continues from a checkpoint.
    pub fn new(
        plan: Plan,
        store: Box<dyn StateStore>,
        mut reservoir: Reservoir,
        allowed_lateness: i64,
        snapshot: Option<RuntimeSnapshot>,
    ) -> Result<Runtime> {
        if allowed_lateness < 0 {
            return Err(Error::Config(format!(
                "allowed lateness must be >= 0, got {allowed_lateness}"
            )));
        }
        let mut specs: Vec<Vec<usize>> = Vec::new();
        let group_spec: Vec<Option<usize>> = plan
            .groups
            .iter()
            .map(|g| {
                if g.rows.is_some() {
                    return None;
                }
                Some(specs.iter().position(|s| *s == g.partition_by).unwrap_or_else(|| {
                    specs.push(g.partition_by.clone());
                    specs.len() - 1
                }))
            })
            .collect();
        let mut hash_buf = Vec::new();
        let mut order: Vec<usize> = (0..plan.boundaries.len()).collect();
        // Cursors advance in boundary order so an event enters a window before it leaves
        // it: smaller offsets first, and at one offset the inclusive boundary first.
        order.sort_by_key(|&b| (plan.boundaries[b].offset, !plan.boundaries[b].inclusive));
        let mut cursors = Vec::new();
        let mut arrival_enters = Vec::new();
        let mut snap_cursors = snapshot.as_ref().map(|s| s.cursors.clone().into_iter());
        for b in order {
            let boundary = plan.boundaries[b];
            let enters: Vec<usize> =
                (0..plan.windows.len()).filter(|&w| plan.windows[w].enter == Some(b)).collect();
            let exits: Vec<usize> =
                (0..plan.windows.len()).filter(|&w| plan.windows[w].exit == Some(b)).collect();
            if boundary == Boundary::ARRIVAL {
                arrival_enters = enters;
                continue;
            }
            let (index, buf_pos, recent) = match snap_cursors.as_mut() {
                Some(it) => it.next().ok_or_else(|| {
                    Error::Checkpoint("checkpoint has fewer cursors than the query's plan".into())
                })?,
                None => (0, 0, Vec::new()),
            };
            let res = reservoir.cursor(index)?;
            cursors.push(Cursor {
                boundary,
                res,
                buf_pos,
                recent: RecentList::new(specs.len()),
                enters,
                exits,
            });
            let c = cursors.last_mut().expect("just pushed");
            for x in recent {
                let hashes: Vec<u64> =
                    specs.iter().map(|s| part_hash(s, &x.row, &mut hash_buf)).collect();
                c.recent.push_hashed(|s| hashes[s], x);
            }
        }
        let mut rec_ns = Vec::new();
        for r in &plan.records {
            rec_ns.push(store.namespace(&r.namespace)?);
        }
        let mut ns = Vec::new();
        let mut rows_ns = Vec::new();
        let mut trees = Vec::new();
        for g in &plan.groups {
            ns.push(match g.record {
                Some((ri, _)) => rec_ns[ri],
                None => store.namespace(&g.namespace)?,
            });
            trees.push(match &g.trees {
                Some(name) => HolisticTrees::new(store.namespace(name)?, name, &g.set),
                None => None,
            });
            rows_ns.push(match &g.rows {
                Some((name, _)) => Some(store.namespace(name)?),
                None => None,
            });
        }
        let rows_groups: Vec<usize> =
            (0..plan.groups.len()).filter(|&gi| plan.groups[gi].rows.is_some()).collect();
        let groups = plan.groups.len();
        let (frontier, buffer, counters) = match snapshot {
            Some(s) => (s.frontier, VecDeque::from(s.buffer), s.counters),
            None => (None, VecDeque::new(), Counters::default()),
        };
        // The events that arrived within the lateness are the buffer's (those older
        // than that cannot be newer than a late event).
        let mut arrivals = RecentList::new(specs.len());
        if allowed_lateness > 0 {
            for e in &buffer {
                arrivals.push(&specs, &e.row, e.key(), &mut hash_buf);
            }
        }
        let key_source = (0..plan.groups.len())
            .map(|gi| {
                let by = &plan.groups[gi].partition_by;
                (0..gi).find(|&g| plan.groups[g].partition_by == *by)
            })
            .collect();
        Ok(Runtime {
            key_source,
            plan,
            frontier,
            buffer,
            cursors,
            arrival_enters,
            rows_groups,
            reservoir,
            state: StateSide {
                store,
                ns,
                rec_cap: vec![Vec::new(); rec_ns.len()],
                rec_filled: vec![Captured::No; rec_ns.len()],
                rec_ns,
                touch: Vec::new(),
                member_args: vec![Vec::new(); groups],
                slot_buf: Vec::new(),
                trees,
                rows_ns,
                rows_buf: Vec::new(),
                rows_key: Vec::new(),
                lateness: allowed_lateness,
                spec_group: (0..specs.len())
                    .map(|s| {
                        group_spec.iter().position(|&g| g == Some(s)).expect("spec of a group")
                    })
                    .collect(),
                specs,
                group_spec,
                hash_buf,
                cur_keys: vec![Vec::new(); groups],
                slots: vec![Vec::new(); groups],
                filled: vec![false; groups],
                key: Vec::new(),
                args: Vec::new(),
                updates: 0,
            },
            arrivals,
            late_examined: 0,
            counters,
            prefetch_keys: Vec::new(),
            prefetch_ends: Vec::new(),
        })
    }

    /// Store namespaces a runtime of `plan` needs (open the store with these).
    pub fn namespaces(plan: &Plan) -> Vec<String> {
        let mut v: Vec<String> = plan.records.iter().map(|r| r.namespace.clone()).collect();
        v.extend(plan.groups.iter().filter(|g| g.record.is_none()).map(|g| g.namespace.clone()));
        v.extend(plan.groups.iter().filter_map(|g| g.rows.as_ref().map(|(ns, _)| ns.clone())));
        v.extend(plan.groups.iter().filter_map(|g| g.trees.clone()));
        v.push(META_NAMESPACE.to_string());
        v
    }

    /// The declarations of [`namespaces`](Self::namespaces) with their access hints:
    /// every aggregation state is one small value per (state record or `ROWS` node, key), read and
    /// rewritten in place per event ([`AccessHint::Point`](spillway_store::AccessHint)),
    /// and a `ROWS` window's kept rows are one small value per (node, key, position);
    /// the checkpoint metadata is a few point values too. A store with several layouts
    /// (adaptive) keeps them all in its hash layout.
    pub fn namespace_specs(plan: &Plan) -> Vec<spillway_store::NamespaceSpec> {
        Self::namespaces(plan)
            .into_iter()
            .map(|n| spillway_store::NamespaceSpec::list(n).hint(spillway_store::AccessHint::Point))
            .collect()
    }

    /// Recent events this runtime has visited to compute the results of late events
    /// (since it was created): with the per-partition index, the late events' own
    /// partitions' events within the lateness and the few others that share their
    /// index buckets, not all recent traffic.
    pub fn late_events_examined(&self) -> u64 {
        self.late_examined
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Counters so far.
    pub fn counters(&self) -> Counters {
        let mut c = self.counters.clone();
        c.state_updates += self.state.updates;
        c
    }

    /// The store (for checkpoints and stats).
    pub fn store_mut(&mut self) -> &mut dyn StateStore {
        self.state.store.as_mut()
    }

    /// The reservoir (for checkpoints and stats).
    pub fn reservoir_mut(&mut self) -> &mut Reservoir {
        &mut self.reservoir
    }

    /// Lets the reservoir delete the segments every cursor has passed (keeping the event
    /// before the oldest one a cursor needs: [`release_reservoir_keeping`] without a
    /// retention). With checkpoints, call it only right after a completed checkpoint (a
    /// resume needs the segments from the checkpointed cursor positions on).
    ///
    /// [`release_reservoir_keeping`]: Self::release_reservoir_keeping
    pub fn release_reservoir(&mut self) -> Result<()> {
        self.release_reservoir_keeping(None)
    }

    /// Lowest reservoir index any cursor still needs.
    pub fn min_cursor_index(&self) -> u64 {
        self.cursors
            .iter()
            .map(|c| self.reservoir.cursor_index(c.res))
            .min()
            .unwrap_or_else(|| self.reservoir.len())
    }

    /// Events between the oldest cursor and the tail: the events some window still holds
    /// or has yet to take in (with one window: the events in it).
    pub fn events_retained(&self) -> u64 {
        self.reservoir.len() + self.buffer.len() as u64 - self.min_cursor_index()
    }

    /// The runtime's position, for a checkpoint (call [`Reservoir::sync`] as well).
    pub fn snapshot(&self) -> RuntimeSnapshot {
        RuntimeSnapshot {
            frontier: self.frontier,
            buffer: self.buffer.iter().cloned().collect(),
            cursors: self
                .cursors
                .iter()
                .map(|c| {
                    (
                        self.reservoir.cursor_index(c.res),
                        c.buf_pos,
                        c.recent.iter().cloned().collect(),
                    )
                })
                .collect(),
            counters: self.counters(),
        }
    }

    /// Announces the events about to be [`process`](Self::process)ed (a batch of
    /// events already read, in order): the store is asked to [prefetch] the
    /// aggregation state those events will touch, so the cache misses of the batch
    /// overlap instead of following one another: each event's partition in every
    /// group-by, and the partitions of the events the batch will move past the other
    /// boundaries (the events leaving windows, or entering delayed ones), looked up
    /// ahead of the cursors without moving them (within the chunk a cursor stands in).
    /// A hint only: results are exactly those of processing the events without it.
    ///
    /// [prefetch]: spillway_store::StateStore::prefetch
    pub fn prefetch(&mut self, events: &[Event]) {
        if events.len() < 2 {
            return;
        }
        let Runtime { plan, state, cursors, reservoir, buffer, frontier, rows_groups, .. } = self;
        let keys = &mut self.prefetch_keys;
        let ends = &mut self.prefetch_ends;
        keys.clear();
        ends.clear();
        let mut key = std::mem::take(&mut state.key);
        // The state values a node's update touches: its record's, or a ROWS node's own.
        let value_of = |gi: usize| match plan.groups[gi].record {
            Some((ri, _)) => (state.rec_ns[ri], &plan.records[ri].partition_by),
            None => (state.ns[gi], &plan.groups[gi].partition_by),
        };
        let mut announce = |(ns, by): (Ns, &Vec<usize>), x: &Event, key: &mut Vec<u8>| {
            encode_partition(by, &x.row, key);
            keys.extend_from_slice(key);
            ends.push((ns, keys.len()));
        };
        for e in events {
            for r in 0..plan.records.len() {
                announce((state.rec_ns[r], &plan.records[r].partition_by), e, &mut key);
            }
            for &gi in rows_groups.iter() {
                announce(value_of(gi), e, &mut key);
            }
        }
        // The frontier after the batch (if its events arrive in order, as most do).
        let last = events.iter().map(|e| e.time).max().unwrap_or(i64::MIN);
        let to = frontier.map_or(last, |f| f.max(last));
        let mut values: Vec<(Ns, &Vec<usize>)> = Vec::new();
        for c in cursors.iter() {
            values.clear();
            for &w in c.enters.iter().chain(&c.exits) {
                for &fi in &plan.windows[w].filters {
                    for &gi in &plan.filters[fi].groups {
                        let v = value_of(gi);
                        if !values.iter().any(|u| u.0 == v.0) {
                            values.push(v);
                        }
                    }
                }
            }
            if values.is_empty() {
                continue;
            }
            let boundary = c.boundary;
            let mut visit = |x: &Event| {
                if !boundary.passed(x.time, to) {
                    return false;
                }
                for &v in &values {
                    announce(v, x, &mut key);
                }
                true
            };
            if reservoir.cursor_index(c.res) < reservoir.len() {
                // A look-ahead: an error here is the cursor's to report when it gets there.
                let _ = reservoir.peek_ahead(c.res, events.len(), &mut visit);
            } else {
                for x in buffer.iter().skip(c.buf_pos).take(events.len()) {
                    if !visit(x) {
                        break;
                    }
                }
            }
        }
        state.key = key;
        prefetch_announced(state.store.as_mut(), keys, ends);
    }

    /// Processes one event. On [`Outcome::Emitted`], `out` holds the output row (one
    /// value per output column).
    pub fn process(&mut self, event: Event, out: &mut Vec<Value>) -> Result<Outcome> {
        self.counters.events += 1;
        if let Some(f) = &self.plan.filter {
            if !f.eval_bool(&event.row) {
                self.counters.filtered += 1;
                return Ok(Outcome::Filtered);
            }
        }
        let t = event.time;
        let frontier = match self.frontier {
            Some(f) if t < f => {
                if t < f.saturating_sub(self.state.lateness) {
                    self.counters.too_late += 1;
                    return Ok(Outcome::TooLate(event));
                }
                self.counters.late_in_bounds += 1;
                f
            }
            _ => t,
        };
        self.frontier = Some(frontier);
        self.begin_row(&event.row, out);
        let late = t < frontier;
        let key = event.key();

        // (b) into the buffer; cursors already past its position pass it now.
        let pos = if self.buffer.back().is_none_or(|b| b.key() <= key) {
            self.buffer.len()
        } else {
            self.buffer.partition_point(|b| b.key() < key)
        };
        if self.state.lateness > 0 && !self.arrival_enters.is_empty() {
            // The partition keys are encoded already (one group per partitioning).
            let st = &self.state;
            self.arrivals.push_hashed(|s| key_hash(&st.cur_keys[st.spec_group[s]]), key);
        }
        self.buffer.insert(pos, event);
        self.state.pass_event(
            &self.plan,
            &self.arrival_enters,
            &[],
            &self.buffer[pos],
            frontier,
            true,
        )?;
        for &gi in &self.rows_groups {
            self.state.rows_arrive(&self.plan, gi, &self.buffer[pos], frontier)?;
        }
        for c in &mut self.cursors {
            if c.buf_pos > pos {
                c.buf_pos += 1;
                c.pass(&mut self.state, &self.plan, &self.buffer[pos], frontier)?;
            }
        }

        // (c) events the frontier has left more than the lateness behind are final.
        let settled = frontier.saturating_sub(self.state.lateness);
        while self.buffer.front().is_some_and(|e| e.time < settled) {
            let Some(e) = self.buffer.pop_front() else { break };
            self.reservoir.append(&e)?;
            for c in &mut self.cursors {
                if c.buf_pos > 0 {
                    c.buf_pos -= 1;
                    // The cursor had passed this event in the buffer: skip it in the reservoir.
                    if self.reservoir.peek(c.res)?.is_some() {
                        self.reservoir.advance(c.res);
                    }
                }
            }
        }

        // (d) advance every cursor to the frontier.
        for c in &mut self.cursors {
            loop {
                if self.reservoir.cursor_index(c.res) < self.reservoir.len() {
                    let Some(x) = self.reservoir.peek(c.res)? else { break };
                    if !c.boundary.passed(x.time, frontier) {
                        break;
                    }
                    c.pass(&mut self.state, &self.plan, x, frontier)?;
                    self.reservoir.advance(c.res);
                } else {
                    let Some(x) = self.buffer.get(c.buf_pos) else { break };
                    if !c.boundary.passed(x.time, frontier) {
                        break;
                    }
                    c.pass(&mut self.state, &self.plan, x, frontier)?;
                    c.buf_pos += 1;
                }
            }
            if self.state.lateness > 0 {
                let keep_from = frontier
                    .saturating_sub(c.boundary.offset)
                    .saturating_sub(self.state.lateness)
                    .saturating_sub(1);
                c.forget_before(keep_from);
            }
        }

        let keep_from = frontier.saturating_sub(self.state.lateness).saturating_sub(1);
        while self.arrivals.front().is_some_and(|k| k.time < keep_from) {
            self.arrivals.pop_front();
        }

        // (e) results.
        if late {
            self.late_results(pos, frontier)?;
        } else {
            self.range_results()?;
        }
        self.finish_row(out);
        self.counters.emitted += 1;
        Ok(Outcome::Emitted)
    }

    /// Starts the output row of an event with input `row`: its input columns in `out`
    /// (metrics NULL until [`finish_row`](Self::finish_row)), its partition keys, and no
    /// result captured yet.
    #[inline]
    fn begin_row(&mut self, row: &Row, out: &mut Vec<Value>) {
        out.clear();
        for (_, src) in &self.plan.outputs {
            if let OutputSource::Field(i) = src {
                out.push(row[*i].clone());
            } else {
                out.push(Value::Null);
            }
        }
        for (gi, g) in self.plan.groups.iter().enumerate() {
            // Nodes with one partitioning have one key: encode it once.
            let keys = &mut self.state.cur_keys;
            match self.key_source[gi] {
                Some(src) => {
                    let (done, rest) = keys.split_at_mut(gi);
                    rest[0].clone_from(&done[src]);
                }
                None => encode_partition(&g.partition_by, row, &mut keys[gi]),
            }
            self.state.filled[gi] = false;
        }
        self.state.rec_filled.fill(Captured::No);
    }

    /// Fills the metric columns of `out` from the results the row's nodes captured.
    #[inline]
    fn finish_row(&mut self, out: &mut [Value]) {
        for (i, (_, src)) in self.plan.outputs.iter().enumerate() {
            if let OutputSource::Metric { group, agg } = *src {
                out[i] = self.state.slots[group][agg].clone();
            }
        }
    }

    /// The row an event at the frontier gets from the state as it stands, changing
    /// nothing: its input columns and every `RANGE` metric read for its partitions. Once
    /// every event of the frontier's time is in, that is the value SQL gives each of
    /// those rows (their peers included): [`peers`] uses it to give a backfilled query's
    /// rows to the events a checkpoint held for their peers. `ROWS` metrics count rows,
    /// so an event's own value is not in the state: [`peers::check_backfill`] refuses
    /// such a query before this is called.
    pub(crate) fn peer_row(&mut self, e: &Event) -> Result<Row> {
        let mut out = Vec::new();
        self.begin_row(&e.row, &mut out);
        self.range_results()?;
        self.finish_row(&mut out);
        Ok(out)
    }

    /// The results of the current (in-order) event's `RANGE` nodes: the slots of its
    /// partition's records as the last update left them (or read once), and the trees.
    fn range_results(&mut self) -> Result<()> {
        let StateSide {
            store, rec_ns, rec_cap, rec_filled, cur_keys, slots, filled, trees, ..
        } = &mut self.state;
        for (ri, rec) in self.plan.records.iter().enumerate() {
            if rec.groups.iter().all(|&gi| filled[gi]) {
                continue;
            }
            let key = &cur_keys[rec.groups[0]];
            if rec_filled[ri] == Captured::No {
                let found = store.get_into(rec_ns[ri], key, &mut rec_cap[ri])?;
                rec_filled[ri] = if found { Captured::Present } else { Captured::Absent };
            }
            let present = rec_filled[ri] == Captured::Present;
            let mut record = Slots::new(present.then_some(&rec_cap[ri][..]), rec.groups.len());
            for &gi in &rec.groups {
                let state = record.next_slot().map_err(|e| record_err(&self.plan, ri, &e))?;
                if filled[gi] {
                    continue;
                }
                let group = &self.plan.groups[gi];
                let r = &mut slots[gi];
                r.clear();
                match state {
                    Some(st) => {
                        group.set.try_results(st, r).map_err(|e| state_err(gi, &self.plan, e))?;
                        if let Some(t) = trees[gi].as_mut() {
                            t.results(store.as_mut(), key, r)?;
                        }
                    }
                    None => group.set.empty_results(r),
                }
                filled[gi] = true;
            }
        }
        Ok(())
    }

    /// Exact results of the late event at `buffer[pos]`, from a copy of the running
    /// state adjusted by its partition's events within the lateness of the frontier
    /// (found through the partition indexes, so the cost follows the partition's recent
    /// events, not all recent traffic). Tree-backed aggregates apply the same
    /// differences to their trees, read, and undo them.
    fn late_results(&mut self, pos: usize, frontier: i64) -> Result<()> {
        let e = &self.buffer[pos];
        let t = e.time;
        for gi in 0..self.plan.groups.len() {
            let group = &self.plan.groups[gi];
            let window = &self.plan.windows[group.window];
            let filter = &self.plan.filters[group.filter];
            // A ROWS node computed the event's own result at arrival (`rows_arrive`).
            let (Some(enter), Some(spec)) = (window.enter, self.state.group_spec[gi]) else {
                continue;
            };
            let enter = self.plan.boundaries[enter];
            let exit = window.exit.map(|b| self.plan.boundaries[b]);
            let horizon = EventKey {
                time: frontier
                    .saturating_sub(window.frame.end())
                    .saturating_sub(self.state.lateness),
                seq: 0,
            };
            let h = key_hash(&self.state.cur_keys[gi]);
            let mut state: Option<Vec<u8>> = self.state.group_state(&self.plan, gi)?;
            let mut out = Vec::new();
            let mut key = Vec::new();
            let selected = |x: &Event, key: &mut Vec<u8>| -> bool {
                if let Some(p) = &filter.predicate {
                    if !p.eval_bool(&x.row) {
                        return false;
                    }
                }
                encode_partition(&group.partition_by, &x.row, key);
                *key == self.state.cur_keys[gi]
            };
            // The differences from the running window: (event, +1 to add / -1 to take out).
            let mut diff: Vec<(&Event, i64)> = Vec::new();
            // Newest events in the running state but after this event's window end.
            let cursor_of = |b: Boundary| {
                self.cursors.iter().find(|c| c.boundary == b).expect("cursor per boundary")
            };
            let newer: Vec<&Event> = if enter == Boundary::ARRIVAL {
                // Those still in the buffer (the others are older than this event).
                let buffer = &self.buffer;
                let (keys, walked) = self.arrivals.partition(spec, h);
                self.late_examined += walked;
                keys.into_iter()
                    .filter_map(|&k| {
                        let i = buffer.partition_point(|b| b.key() < k);
                        buffer.get(i).filter(|b| b.key() == k)
                    })
                    .collect()
            } else {
                let (events, walked) = cursor_of(enter).recent.partition(spec, h);
                self.late_examined += walked;
                events
            };
            for x in newer {
                if enter.passed(x.time, t)
                    || !enter.passed(x.time, frontier)
                    || exit.is_some_and(|exit| exit.passed(x.time, frontier))
                    || !selected(x, &mut key)
                {
                    continue;
                }
                diff.push((x, -1));
            }
            // Evicted events still inside this event's window (none without a start).
            if let Some(exit) = exit {
                let (evicted, walked) = cursor_of(exit).recent.partition(spec, h);
                self.late_examined += walked;
                for x in evicted {
                    if exit.passed(x.time, t) || !enter.passed(x.time, t) || !selected(x, &mut key)
                    {
                        continue;
                    }
                    diff.push((x, 1));
                }
            }
            let args_of: Vec<Vec<Value>> = diff
                .iter()
                .map(|(x, _)| {
                    let mut a = Vec::new();
                    eval_args(&self.plan, gi, &x.row, &mut a);
                    a
                })
                .collect();
            for ((x, delta), args) in diff.iter().zip(&args_of) {
                out.clear();
                if *delta < 0 {
                    let Some(old) = state.as_deref() else { continue };
                    group.set.try_remove_recent(old, &mut out, x.key(), args)
                } else {
                    group.set.try_insert(state.as_deref(), &mut out, x.key(), args, horizon)
                }
                .map_err(|e| state_err(gi, &self.plan, e))?;
                state = Some(std::mem::take(&mut out));
            }
            let mut r = Vec::new();
            match &state {
                Some(s) => {
                    group.set.try_results(s, &mut r).map_err(|e| state_err(gi, &self.plan, e))?
                }
                None => group.set.empty_results(&mut r),
            }
            if let Some(trees) = self.state.trees[gi].as_mut() {
                if state.is_some() {
                    let adjust: Vec<Adjustment<'_>> = diff
                        .iter()
                        .zip(&args_of)
                        .map(|((x, d), a)| (x.key(), &a[..], *d))
                        .collect();
                    let store = self.state.store.as_mut();
                    trees.adjusted_results(store, &self.state.cur_keys[gi], &adjust, &mut r)?;
                }
            }
            self.state.slots[gi] = r;
            self.state.filled[gi] = true;
        }
        Ok(())
    }
}

/// Asks `store` to prefetch the keys of a batch: `keys` back to back, each ending at its
/// `ends` offset, in its namespace.
pub(crate) fn prefetch_announced(store: &mut dyn StateStore, keys: &[u8], ends: &[(Ns, usize)]) {
    let mut start = 0;
    let refs: Vec<(Ns, &[u8])> = ends
        .iter()
        .map(|&(ns, end)| {
            let k = &keys[start..end];
            start = end;
            (ns, k)
        })
        .collect();
    store.prefetch(&refs);
}

/// Where node `gi` keeps its state, for messages.
fn state_name(plan: &Plan, gi: usize) -> String {
    let g = &plan.groups[gi];
    match g.record {
        Some((ri, slot)) => {
            format!("node `{}` (record `{}`, slot {slot})", g.namespace, plan.records[ri].namespace)
        }
        None => format!("namespace `{}`", g.namespace),
    }
}

fn state_err(gi: usize, plan: &Plan, e: AggStateError) -> Error {
    Error::State(format!("{}: {e}", state_name(plan, gi)))
}

fn record_err(plan: &Plan, ri: usize, e: &RecordError) -> Error {
    Error::State(format!(
        "state record `{}` does not decode: {e}; the store was not written by this query",
        plan.records[ri].namespace
    ))
}
