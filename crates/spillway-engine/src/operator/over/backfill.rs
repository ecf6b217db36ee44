//! Metric backfill and reservoir retention: what `spillway run --resume --backfill` and
//! `--retain` need of the runtime.
//!
//! Railgun's conclusions (Section 5) name *metrics backfill*, "the ability to add a new
//! metric and fill it from old event data", as work ahead that its event reservoir is
//! meant to support: the reservoir already holds the recent events, so a metric added
//! to a running job can have its window state computed from them instead of starting
//! empty. This module does that for a checkpointed job that resumes under a new
//! query (`q2`) that adds, changes or drops metrics of the checkpointed one (`q1`):
//!
//! * [`GroupMap`] matches the group-by nodes of the two plans. A node of `q2` whose
//!   definition (frame, `FILTER` text, `PARTITION BY` columns, aggregate list with
//!   argument expressions and types; `ROWS n` is part of the frame) equals one of `q1`
//!   keeps its state ([`GroupSource::Kept`]): [`copy_kept_state`] copies every key of its
//!   namespaces (aggregation state, kept rows, order-statistics trees) to the namespaces
//!   `q2` gives it. Any other node is new or changed (an added aggregate changes the
//!   node's [`AggSet`](crate::aggregate::AggSet) layout) and is rebuilt
//!   ([`GroupSource::Rebuilt`]). Nodes of `q1` that `q2` lacks are dropped. The two
//!   queries must have the same `WHERE` (events it rejected are not in the reservoir).
//! * [`Runtime::backfill`] opens the runtime of `q2` from `q1`'s snapshot. Cursors are
//!   mapped by boundary value; a boundary `q1` did not have gets the position every
//!   cursor has at the frontier `T` (the first event, reservoir then lateness buffer,
//!   that has not passed it) and, with lateness `L > 0`, its `recent` list (the passed
//!   events within `L` of it). Then the rebuilt nodes replay the events through the
//!   runtime's own update path: a `RANGE` node enters (`StateSide::apply`,
//!   `Action::Enter`) exactly the events that have passed its window's enter boundary
//!   and not its exit boundary at `T`, which is the state the running job would hold; a
//!   `ROWS` node takes every event in (time, arrival) order through `rows_arrive`, as if
//!   it had arrived in order.
//! * **Coverage.** The reservoir releases segments behind every cursor after a
//!   checkpoint, keeping the event just before the oldest one a cursor needs (see
//!   [`Runtime::release_reservoir_keeping`]), so every released event is no newer than
//!   the oldest live one, at time `t0`. A rebuilt bounded `RANGE` node is exact from the
//!   first new event on when nothing was released or `t0` has passed its exit boundary
//!   at `T`; otherwise it is *not covered* ([`NotCovered`]): it is rebuilt from what is
//!   there, and its results are exact for events at or after the time at which `t0`
//!   passes its exit boundary (`t0 + start`, `+ 1` for a closed start). A rebuilt
//!   `UNBOUNDED PRECEDING` or `ROWS` node needs every event since the job began: it is
//!   rebuilt only when the reservoir never released a segment, and refused otherwise
//!   ([`check_rebuildable`]), naming its metrics. (A `ROWS` node could be rebuilt from
//!   the retained rows of partitions that still have `n + 1` of them, but a partition
//!   with fewer retained rows may have lost older ones, and no time says from when its
//!   results would be exact: refusing is the honest answer.)
//! * [`Retention`] keeps events at least a given time span behind the frontier (a
//!   pseudo-cursor that never updates state), so a later backfill of a window up to that
//!   long is covered.

use spillway_store::StateStoreExt;
use spillway_store::{Rmw, StateStore};

use super::{encode_partition, Runtime, RuntimeSnapshot};
use crate::aggregate::record;
use crate::error::{Error, Result};
use crate::plan::{Boundary, GroupNode, OutputSource, Plan};
use crate::reservoir::{CursorId, Reservoir};
use crate::sql::Frame;
use crate::value::{Event, TimeUnit};

/// Where a group-by node of the new plan gets its state from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupSource {
    /// It equals node `old` of the checkpointed plan: its state is copied (under its new
    /// namespace names when its index changed).
    Kept {
        /// The node's index in the checkpointed plan.
        old: usize,
    },
    /// New or changed: rebuilt from the reservoir.
    Rebuilt,
}

/// How the group-by nodes of a new plan map onto those of a checkpointed one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMap {
    /// Per node of the new plan.
    pub groups: Vec<GroupSource>,
    /// Nodes of the checkpointed plan the new one does not keep (their state is dropped).
    pub dropped: Vec<usize>,
}

/// Whether nodes `a` of plan `pa` and `b` of plan `pb` compute the same state.
fn same_group(pa: &Plan, a: &GroupNode, pb: &Plan, b: &GroupNode) -> bool {
    let text = |e: Option<&crate::sql::Expr>| e.map(|e| e.to_string());
    pa.windows[a.window].frame == pb.windows[b.window].frame
        && text(pa.filters[a.filter].predicate.as_ref())
            == text(pb.filters[b.filter].predicate.as_ref())
        && a.partition_by == b.partition_by
        && a.aggs.len() == b.aggs.len()
        && a.aggs.iter().zip(&b.aggs).all(|((ka, xa, ta), (kb, xb, tb))| {
            ka == kb && ta == tb && text(xa.as_ref()) == text(xb.as_ref())
        })
}

impl GroupMap {
    /// Matches the nodes of `new` with those of `old`. Errors when the queries'
    /// `WHERE` differ: the events the old one rejected never reached the reservoir, and
    /// the kept state holds events the new one might reject.
    pub fn new(old: &Plan, new: &Plan) -> Result<GroupMap> {
        let text = |p: &Plan| p.filter.as_ref().map(|e| e.to_string());
        if text(old) != text(new) {
            let show =
                |t: Option<String>| t.map_or("no WHERE".to_string(), |t| format!("WHERE {t}"));
            return Err(Error::Config(format!(
                "--backfill needs the checkpointed query's WHERE ({}), but the new query has {}: \
                 events the old WHERE rejected are not in the reservoir; filter new metrics \
                 with FILTER (WHERE ...) instead",
                show(text(old)),
                show(text(new))
            )));
        }
        let groups: Vec<GroupSource> = new
            .groups
            .iter()
            .map(|g| match old.groups.iter().position(|o| same_group(old, o, new, g)) {
                Some(o) => GroupSource::Kept { old: o },
                None => GroupSource::Rebuilt,
            })
            .collect();
        let dropped = (0..old.groups.len())
            .filter(|&o| !groups.contains(&GroupSource::Kept { old: o }))
            .collect();
        Ok(GroupMap { groups, dropped })
    }

    /// Indices (in the new plan) of the rebuilt nodes.
    pub fn rebuilt(&self) -> Vec<usize> {
        (0..self.groups.len()).filter(|&g| self.groups[g] == GroupSource::Rebuilt).collect()
    }

    /// Kept nodes: how many, and how many of them changed index (their state moves to
    /// other namespace names).
    pub fn kept(&self) -> (usize, usize) {
        let mut kept = 0;
        let mut moved = 0;
        for (g, s) in self.groups.iter().enumerate() {
            if let GroupSource::Kept { old } = *s {
                kept += 1;
                if old != g {
                    moved += 1;
                }
            }
        }
        (kept, moved)
    }
}

/// The output columns computed by node `gi` of `plan`.
pub fn metrics_of(plan: &Plan, gi: usize) -> Vec<String> {
    plan.outputs
        .iter()
        .filter(|(_, src)| matches!(src, OutputSource::Metric { group, .. } if *group == gi))
        .map(|(name, _)| name.clone())
        .collect()
}

fn metric_list(plan: &Plan, gi: usize) -> String {
    metrics_of(plan, gi).iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
}

/// Every store namespace holding state of node `g` apart from its state record: a
/// `ROWS` node's state, then (when it has them) its kept rows and its order-statistics
/// trees. Two equal nodes have the same list shape.
fn group_namespaces(g: &GroupNode) -> Vec<&str> {
    let mut v = Vec::new();
    if g.record.is_none() {
        v.push(g.namespace.as_str());
    }
    if let Some((rows, _)) = &g.rows {
        v.push(rows);
    }
    if let Some(trees) = &g.trees {
        v.push(trees);
    }
    v
}

/// Refuses a rebuild the reservoir cannot make: a new or changed node whose window has
/// no start (`UNBOUNDED PRECEDING`) or counts rows (`ROWS`) needs every event since the
/// job began, which the reservoir holds only if it never released a segment.
pub fn check_rebuildable(
    plan: &Plan,
    map: &GroupMap,
    reservoir: &Reservoir,
    unit: TimeUnit,
) -> Result<()> {
    let first_live = reservoir.first_live();
    if first_live == 0 {
        return Ok(());
    }
    for gi in map.rebuilt() {
        let frame = &plan.windows[plan.groups[gi].window].frame;
        let why = match frame {
            Frame::Rows { .. } => {
                "counts rows, not time, so its rows may reach back to the job's first event"
            }
            Frame::Range(r) if r.start.is_none() => "has no start (UNBOUNDED PRECEDING)",
            Frame::Range(_) => continue,
        };
        return Err(Error::Config(format!(
            "--backfill cannot rebuild metric {} (window {}): the window {why}, so it needs \
             every event since the job began, and the reservoir no longer holds the first \
             {first_live} of them (released after earlier checkpoints). Compute it in a run \
             from the start, or give the job a --retain longer than its input spans so that \
             nothing is released",
            metric_list(plan, gi),
            frame.display(unit)
        )));
    }
    Ok(())
}

/// Copies the state of every kept node of `new` from its namespaces in `from` (the
/// checkpointed store, opened with the old plan's namespaces) to its namespaces in `to`
/// (a store opened with the new plan's): a `RANGE` node's slot of its old state record
/// into its slot of its new one, the other namespaces key by key. Returns the number of
/// keys copied.
pub fn copy_kept_state(
    from: &mut dyn StateStore,
    old: &Plan,
    to: &mut dyn StateStore,
    new: &Plan,
    map: &GroupMap,
) -> Result<u64> {
    let mut copied = 0u64;
    for (gi, src) in map.groups.iter().enumerate() {
        let GroupSource::Kept { old: oi } = *src else { continue };
        let names_from = group_namespaces(&old.groups[oi]);
        let names_to = group_namespaces(&new.groups[gi]);
        if names_from.len() != names_to.len() {
            return Err(Error::State(format!(
                "backfill: node `{}` of the checkpointed plan has namespaces {names_from:?}, \
                 its equal in the new plan {names_to:?}",
                old.groups[oi].namespace
            )));
        }
        if let (Some(from_rec), Some(to_rec)) = (old.groups[oi].record, new.groups[gi].record) {
            copied += copy_slot(from, old, from_rec, to, new, to_rec)?;
        }
        for (nf, nt) in names_from.into_iter().zip(names_to) {
            let ns_from = from.namespace(nf)?;
            let ns_to = to.namespace(nt)?;
            let mut failed = None;
            from.scan_prefix(ns_from, &[], &mut |k, v| match to.put(ns_to, k, v) {
                Ok(()) => {
                    copied += 1;
                    true
                }
                Err(e) => {
                    failed = Some(e);
                    false
                }
            })
            .map_err(|e| {
                Error::Checkpoint(format!(
                    "backfill: cannot read namespace `{nf}` of the checkpointed store: {e}"
                ))
            })?;
            if let Some(e) = failed {
                return Err(Error::Checkpoint(format!(
                    "backfill: cannot copy namespace `{nf}` to `{nt}` of the new store: {e}"
                )));
            }
        }
    }
    Ok(copied)
}

/// Copies slot `from_rec.1` of every value of state record `from_rec.0` (of plan `old`,
/// in `from`) into slot `to_rec.1` of record `to_rec.0` (of plan `new`, in `to`), keeping
/// the other slots of the target. Returns the number of keys copied.
fn copy_slot(
    from: &mut dyn StateStore,
    old: &Plan,
    (ro, so): (usize, usize),
    to: &mut dyn StateStore,
    new: &Plan,
    (rn, sn): (usize, usize),
) -> Result<u64> {
    let (name_from, n_from) = (&old.records[ro].namespace, old.records[ro].groups.len());
    let (name_to, n_to) = (&new.records[rn].namespace, new.records[rn].groups.len());
    let ns_from = from.namespace(name_from)?;
    let ns_to = to.namespace(name_to)?;
    let mut copied = 0u64;
    let mut failed: Option<Error> = None;
    let mut out = Vec::new();
    from.scan_prefix(ns_from, &[], &mut |k, v| {
        let state = match record::slot(v, n_from, so) {
            Ok(Some(s)) => s,
            Ok(None) => return true,
            Err(e) => {
                failed = Some(Error::Checkpoint(format!(
                    "backfill: state record `{name_from}` of the checkpointed store does not \
                     decode: {e}"
                )));
                return false;
            }
        };
        let mut bad = None;
        let r = to.rmw(ns_to, k, &mut |target, o| {
            match record::with_slot(target, n_to, sn, Some(state), &mut out) {
                Ok(_) => {
                    o.clear();
                    o.extend_from_slice(&out);
                    Rmw::Put
                }
                Err(e) => {
                    bad = Some(e);
                    Rmw::Keep
                }
            }
        });
        match (r, bad) {
            (Ok(()), None) => {
                copied += 1;
                true
            }
            (Err(e), _) => {
                failed = Some(Error::Checkpoint(format!(
                    "backfill: cannot copy record `{name_from}` to `{name_to}` of the new store: {e}"
                )));
                false
            }
            (_, Some(e)) => {
                failed = Some(Error::Checkpoint(format!(
                    "backfill: state record `{name_to}` of the new store does not decode: {e}"
                )));
                false
            }
        }
    })
    .map_err(|e| {
        Error::Checkpoint(format!(
            "backfill: cannot read namespace `{name_from}` of the checkpointed store: {e}"
        ))
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(copied),
    }
}

/// A rebuilt metric whose window reaches further back than the reservoir holds.
#[derive(Clone, Debug, PartialEq)]
pub struct NotCovered {
    /// The output columns of the node.
    pub metrics: Vec<String>,
    /// Its window.
    pub frame: Frame,
    /// Time of the oldest event the reservoir still holds: every released event is no
    /// newer.
    pub oldest: i64,
    /// Results of events at this time or later are exact (their windows lie after
    /// `oldest`).
    pub exact_from: i64,
}

/// What [`Runtime::backfill`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BackfillReport {
    /// Nodes whose state was kept.
    pub groups_kept: usize,
    /// Of those, nodes whose index (and so namespace names) changed.
    pub groups_moved: usize,
    /// Nodes rebuilt from the reservoir.
    pub groups_rebuilt: usize,
    /// Nodes of the checkpointed plan dropped.
    pub groups_dropped: usize,
    /// Events replayed into the rebuilt nodes (reservoir and lateness buffer).
    pub events_replayed: u64,
    /// Read-modify-writes of aggregation state the replay made (not in the runtime's
    /// counters).
    pub state_updates: u64,
    /// Rebuilt metrics not exact from the first new event on.
    pub not_covered: Vec<NotCovered>,
}

/// The boundaries that have cursors, in the order [`Runtime::new`] creates the cursors
/// (and a snapshot lists them): by offset, the inclusive boundary first at one offset;
/// the arrival boundary has none.
fn cursor_boundaries(plan: &Plan) -> Vec<Boundary> {
    let mut v: Vec<Boundary> =
        plan.boundaries.iter().copied().filter(|&b| b != Boundary::ARRIVAL).collect();
    v.sort_by_key(|b| (b.offset, !b.inclusive));
    v
}

/// The events of a runtime position in order: the reservoir from `from` on, then the
/// lateness buffer. `visit` gets each event's position in that sequence (reservoir
/// index, or `reservoir.len() + i` for `buffer[i]`) and returns false to stop.
fn walk(
    reservoir: &mut Reservoir,
    buffer: &mut dyn Iterator<Item = &Event>,
    from: u64,
    visit: &mut dyn FnMut(u64, &Event) -> Result<bool>,
) -> Result<()> {
    let len = reservoir.len();
    if from < len {
        let c = reservoir.cursor(from)?;
        let mut done = false;
        let mut i = from;
        while i < len {
            let Some(x) = reservoir.peek(c)? else { break };
            if !visit(i, x)? {
                done = true;
                break;
            }
            reservoir.advance(c);
            i += 1;
        }
        reservoir.park(c);
        if done {
            return Ok(());
        }
    }
    let skip = from.saturating_sub(len) as usize;
    for (i, x) in buffer.enumerate().skip(skip) {
        if !visit(len + i as u64, x)? {
            break;
        }
    }
    Ok(())
}

/// The (reservoir index, buffer position) of a snapshot's cursor standing at position
/// `pos` of the sequence [`walk`] visits (`len`: the reservoir's length).
fn cursor_at(pos: u64, len: u64) -> (u64, usize) {
    if pos <= len {
        (pos, 0)
    } else {
        (len, (pos - len) as usize)
    }
}

impl Runtime {
    /// Opens the runtime of `plan` (the new query) from `snapshot`, the checkpoint of a
    /// runtime of `old` (see the module docs). `store` must hold the state of the kept
    /// nodes under `plan`'s namespaces ([`copy_kept_state`]) and nothing of the rebuilt
    /// ones; `reservoir` is the checkpoint's, recovered. Call [`check_rebuildable`]
    /// first; this refuses the same nodes. `unit` is the time column's, for messages.
    #[allow(clippy::too_many_arguments)]
    pub fn backfill(
        plan: Plan,
        store: Box<dyn StateStore>,
        mut reservoir: Reservoir,
        allowed_lateness: i64,
        old: &Plan,
        mut snapshot: RuntimeSnapshot,
        map: &GroupMap,
        unit: TimeUnit,
    ) -> Result<(Runtime, BackfillReport)> {
        if map.groups.len() != plan.groups.len() {
            return Err(Error::Config(format!(
                "backfill: the group map has {} nodes, the plan {}",
                map.groups.len(),
                plan.groups.len()
            )));
        }
        check_rebuildable(&plan, map, &reservoir, unit)?;
        let old_order = cursor_boundaries(old);
        if old_order.len() != snapshot.cursors.len() {
            return Err(Error::Checkpoint(format!(
                "the checkpoint has {} cursors but its query's plan has {} boundaries",
                snapshot.cursors.len(),
                old_order.len()
            )));
        }
        let len = reservoir.len();
        let first_live = reservoir.first_live();
        let frontier = snapshot.frontier;
        let lateness = allowed_lateness;

        // (1) Cursors: kept boundaries keep theirs; new ones are placed at the frontier.
        let new_order = cursor_boundaries(&plan);
        let mut old_cursors: Vec<Option<(u64, usize, Vec<Event>)>> =
            std::mem::take(&mut snapshot.cursors).into_iter().map(Some).collect();
        let mut cursors: Vec<Option<(u64, usize, Vec<Event>)>> = new_order
            .iter()
            .map(|b| old_order.iter().position(|o| o == b).and_then(|i| old_cursors[i].take()))
            .collect();
        let fresh: Vec<usize> = (0..new_order.len()).filter(|&i| cursors[i].is_none()).collect();
        let mut placed: Vec<(u64, Vec<Event>)> = vec![(first_live, Vec::new()); fresh.len()];
        // Time of the oldest event held (reservoir, else lateness buffer).
        let mut oldest: Option<i64> = None;
        {
            // Every event before a fresh boundary's cursor has passed it, so its cursor
            // stands after the last event that passed; the scan ends at the first event
            // that passed none of them.
            let mut buffer = snapshot.buffer.iter();
            walk(&mut reservoir, &mut buffer, first_live, &mut |pos, x| {
                if oldest.is_none() {
                    oldest = Some(x.time);
                }
                let Some(f) = frontier else { return Ok(false) };
                let mut any = false;
                for (k, &i) in fresh.iter().enumerate() {
                    let b = new_order[i];
                    if !b.passed(x.time, f) {
                        continue;
                    }
                    any = true;
                    let p = &mut placed[k];
                    p.0 = pos + 1;
                    let keep_from =
                        f.saturating_sub(b.offset).saturating_sub(lateness).saturating_sub(1);
                    if lateness > 0 && x.time >= keep_from {
                        p.1.push(x.clone());
                    }
                }
                Ok(any)
            })?;
        }
        for (k, &i) in fresh.iter().enumerate() {
            let (pos, recent) = std::mem::take(&mut placed[k]);
            let (index, buf_pos) = cursor_at(pos, len);
            cursors[i] = Some((index, buf_pos, recent));
        }
        let positions: Vec<u64> = cursors
            .iter()
            .map(|c| c.as_ref().map_or(first_live, |(index, buf_pos, _)| index + *buf_pos as u64))
            .collect();
        snapshot.cursors = cursors.into_iter().flatten().collect();

        let mut rt = Runtime::new(plan, store, reservoir, allowed_lateness, Some(snapshot))?;
        if !rt.cursors.iter().map(|c| c.boundary).eq(new_order.iter().copied()) {
            return Err(Error::State(
                "backfill: the runtime orders its cursors differently from the backfill's \
                 mapping of the checkpoint's cursors"
                    .into(),
            ));
        }
        let (groups_kept, groups_moved) = map.kept();
        let rebuilt = map.rebuilt();
        let mut report = BackfillReport {
            groups_kept,
            groups_moved,
            groups_rebuilt: rebuilt.len(),
            groups_dropped: map.dropped.len(),
            ..BackfillReport::default()
        };
        let Some(f) = frontier else { return Ok((rt, report)) };
        if rebuilt.is_empty() {
            return Ok((rt, report));
        }

        // (2) Replay. RANGE nodes through `apply` on a copy of the plan whose filter
        // nodes list only the rebuilt nodes (same indices, so the same namespaces and
        // trees); ROWS nodes through `rows_arrive`.
        let position_of = |b: Option<usize>, plan: &Plan| -> Option<u64> {
            let b = plan.boundaries[b?];
            new_order.iter().position(|&o| o == b).map(|i| positions[i])
        };
        let mut replay_plan = rt.plan.clone();
        for fnode in &mut replay_plan.filters {
            fnode.groups.retain(|&g| map.groups[g] == GroupSource::Rebuilt);
        }
        let mut windows: Vec<(usize, Boundary, Option<Boundary>)> = Vec::new();
        let mut rows_groups: Vec<usize> = Vec::new();
        let mut start = u64::MAX;
        for &gi in &rebuilt {
            let g = &rt.plan.groups[gi];
            let w = &rt.plan.windows[g.window];
            match (w.enter, g.rows.is_some()) {
                (Some(enter), false) => {
                    if !windows.iter().any(|(wi, _, _)| *wi == g.window) {
                        let exit = w.exit.map(|b| rt.plan.boundaries[b]);
                        windows.push((g.window, rt.plan.boundaries[enter], exit));
                    }
                    // Events before the exit cursor have left the window.
                    start = start.min(position_of(w.exit, &rt.plan).unwrap_or(first_live));
                }
                _ => {
                    rows_groups.push(gi);
                    start = first_live;
                }
            }
        }
        let start = start.max(first_live);
        // No node captures results during the replay: no partition key starts with 0xFF.
        for k in &mut rt.state.cur_keys {
            k.clear();
            k.push(0xFF);
        }
        let updates_before = rt.state.updates;
        let mut replayed = 0u64;
        {
            let Runtime { plan, reservoir, buffer, state, .. } = &mut rt;
            let plan: &Plan = plan;
            let mut running = i64::MIN;
            let mut buf = buffer.iter();
            let mut entered = Vec::with_capacity(windows.len());
            walk(reservoir, &mut buf, start, &mut |_, x| {
                replayed += 1;
                entered.clear();
                for &(w, enter, exit) in &windows {
                    if enter.passed(x.time, f) && !exit.is_some_and(|e| e.passed(x.time, f)) {
                        entered.push(w);
                    }
                }
                state.pass_event(&replay_plan, &entered, &[], x, f, false)?;
                running = running.max(x.time);
                for &gi in &rows_groups {
                    let g = &plan.groups[gi];
                    encode_partition(&g.partition_by, &x.row, &mut state.cur_keys[gi]);
                    state.rows_arrive(plan, gi, x, running)?;
                }
                Ok(true)
            })?;
        }
        for k in &mut rt.state.cur_keys {
            k.clear();
        }
        for f in &mut rt.state.filled {
            *f = false;
        }
        report.events_replayed = replayed;
        report.state_updates = rt.state.updates - updates_before;
        rt.state.updates = updates_before;

        // (3) Coverage of the rebuilt bounded RANGE nodes.
        if first_live > 0 {
            let t0 = oldest.unwrap_or(f);
            for &gi in &rebuilt {
                let g = &rt.plan.groups[gi];
                let w = &rt.plan.windows[g.window];
                let (Frame::Range(r), Some(exit)) = (w.frame, w.exit) else { continue };
                let exit = rt.plan.boundaries[exit];
                if exit.passed(t0, f) {
                    continue;
                }
                let start = r.start.unwrap_or(0);
                let exact_from =
                    t0.saturating_add(start).saturating_add(i64::from(!exit.inclusive));
                report.not_covered.push(NotCovered {
                    metrics: metrics_of(&rt.plan, gi),
                    frame: w.frame,
                    oldest: t0,
                    exact_from,
                });
            }
        }
        Ok((rt, report))
    }

    /// Releases the reservoir segments no cursor, and no `retention`, needs: it keeps
    /// the events at most `retention`'s span behind the frontier, and the one event
    /// before the oldest event kept, so the oldest live event is always one no window
    /// needs: a later backfill can tell from it which windows the reservoir still covers
    /// (see the module docs).
    pub fn release_reservoir_keeping(&mut self, retention: Option<&Retention>) -> Result<()> {
        let mut keep = self.min_cursor_index();
        if let Some(r) = retention {
            if let Some(f) = self.frontier {
                let line = f.saturating_sub(r.span);
                while let Some(x) = self.reservoir.peek(r.cursor)? {
                    if x.time >= line {
                        break;
                    }
                    self.reservoir.advance(r.cursor);
                }
                self.reservoir.park(r.cursor);
            }
            keep = keep.min(self.reservoir.cursor_index(r.cursor));
        }
        Ok(self.reservoir.release_before(keep.saturating_sub(1))?)
    }
}

/// Keeps the reservoir's events at least `span` time units behind the frontier (a
/// pseudo-cursor that updates no state), for a later `--backfill` of a window up to
/// that long. Give it to [`Runtime::release_reservoir_keeping`].
#[derive(Debug)]
pub struct Retention {
    span: i64,
    cursor: CursorId,
}

impl Retention {
    /// A retention of `span` (> 0) time units over `runtime`'s reservoir, whose
    /// pseudo-cursor starts at reservoir index `from` (the index a checkpoint recorded,
    /// [`index`](Self::index)), moved into the live events if needed.
    pub fn new(runtime: &mut Runtime, span: i64, from: u64) -> Result<Retention> {
        if span <= 0 {
            return Err(Error::Config(format!("a retention must be a positive span, got {span}")));
        }
        let r = &mut runtime.reservoir;
        let from = from.clamp(r.first_live(), r.len());
        Ok(Retention { span, cursor: r.cursor(from)? })
    }

    /// The span, in time units.
    pub fn span(&self) -> i64 {
        self.span
    }

    /// The pseudo-cursor's reservoir index (to record in a checkpoint).
    pub fn index(&self, runtime: &Runtime) -> u64 {
        runtime.reservoir.cursor_index(self.cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservoir::ReservoirOptions;
    use crate::sql::{parse, Query};
    use crate::value::{DataType, Field, Schema, Value};
    use spillway_store::{StoreKind, StoreOptions};

    fn schema() -> Schema {
        let f = |n: &str, ty| Field { name: n.into(), ty };
        Schema::new(
            vec![f("card", DataType::Int), f("amount", DataType::Int), f("ts", DataType::Int)],
            "ts",
            TimeUnit::Ms,
        )
        .unwrap()
    }

    fn plan(q: &str) -> Plan {
        match parse(q, &schema()).unwrap() {
            Query::Over(q) => Plan::build(&q, &schema()).unwrap(),
            Query::Windowed(_) => panic!("not a sliding-window query"),
        }
    }

    const W1: &str = "(PARTITION BY card ORDER BY ts RANGE BETWEEN 100 PRECEDING AND CURRENT ROW)";
    const W2: &str =
        "(PARTITION BY card ORDER BY ts RANGE BETWEEN 300 PRECEDING AND OPEN(10) PRECEDING)";

    #[test]
    fn cursor_order_is_the_runtimes() {
        let dir = tempfile::tempdir().unwrap();
        let p = plan(&format!(
            "SELECT SUM(amount) OVER {W2} AS a, COUNT(*) OVER {W1} AS b, \
             MAX(amount) OVER (ORDER BY ts RANGE BETWEEN OPEN(100) PRECEDING AND CURRENT ROW) AS c FROM t"
        ));
        let mut opts = StoreOptions::new(dir.path().join("s"));
        for s in Runtime::namespace_specs(&p) {
            opts = opts.namespace(s);
        }
        let store = StoreKind::Mem.open(opts).unwrap();
        let res =
            Reservoir::create(ReservoirOptions::new(dir.path().join("r")), &schema()).unwrap();
        let want = cursor_boundaries(&p);
        let rt = Runtime::new(p, store, res, 0, None).unwrap();
        let got: Vec<Boundary> = rt.cursors.iter().map(|c| c.boundary).collect();
        assert_eq!(got, want);
        assert_eq!(want.len(), 4, "{want:?}");
    }

    #[test]
    fn groups_match_by_definition_not_position() {
        let old = plan(&format!(
            "SELECT COUNT(*) OVER {W1} AS n, SUM(amount) OVER {W2} AS s, \
             MIN(amount) FILTER (WHERE amount > 5) OVER {W1} AS lo FROM t"
        ));
        // W2's node first now; W1's COUNT node gains an aggregate; the filtered one stays.
        let new = plan(&format!(
            "SELECT SUM(amount) OVER {W2} AS s, COUNT(*) OVER {W1} AS n, AVG(amount) OVER {W1} AS a, \
             MIN(amount) FILTER (WHERE amount > 5) OVER {W1} AS lo FROM t"
        ));
        let m = GroupMap::new(&old, &new).unwrap();
        let of = |name: &str| match new.outputs.iter().find(|(n, _)| n == name).unwrap().1 {
            OutputSource::Metric { group, .. } => group,
            OutputSource::Field(_) => unreachable!(),
        };
        let old_of = |name: &str| match old.outputs.iter().find(|(n, _)| n == name).unwrap().1 {
            OutputSource::Metric { group, .. } => group,
            OutputSource::Field(_) => unreachable!(),
        };
        assert_eq!(m.groups[of("s")], GroupSource::Kept { old: old_of("s") });
        assert_eq!(m.groups[of("lo")], GroupSource::Kept { old: old_of("lo") });
        assert_eq!(m.groups[of("n")], GroupSource::Rebuilt);
        assert_eq!(m.dropped, vec![old_of("n")]);
        assert_eq!(m.kept().0, 2);
        assert_eq!(metrics_of(&new, of("n")), vec!["n".to_string(), "a".to_string()]);

        // A different WHERE is refused.
        let w = plan(&format!("SELECT COUNT(*) OVER {W1} AS n FROM t WHERE amount > 1"));
        let e = GroupMap::new(&old, &w).unwrap_err().to_string();
        assert!(e.contains("WHERE amount > 1") && e.contains("no WHERE"), "{e}");
    }

    #[test]
    fn retention_keeps_events_within_its_span() {
        let dir = tempfile::tempdir().unwrap();
        let p = plan(&format!("SELECT COUNT(*) OVER {W1} AS n FROM t"));
        let mut opts = StoreOptions::new(dir.path().join("s"));
        for s in Runtime::namespace_specs(&p) {
            opts = opts.namespace(s);
        }
        let store = StoreKind::Mem.open(opts).unwrap();
        let ropts = ReservoirOptions::new(dir.path().join("r")).chunk_events(4).segment_bytes(64);
        let res = Reservoir::create(ropts, &schema()).unwrap();
        let mut rt = Runtime::new(p, store, res, 0, None).unwrap();
        let keep = Retention::new(&mut rt, 1000, 0).unwrap();
        let mut out = Vec::new();
        for i in 0..400i64 {
            let e = Event {
                time: i * 10,
                seq: i as u64,
                row: vec![Value::Int(i % 3), Value::Int(i), Value::Int(i * 10)],
            };
            rt.process(e, &mut out).unwrap();
        }
        rt.reservoir.sync().unwrap();
        rt.release_reservoir_keeping(Some(&keep)).unwrap();
        // Frontier 3990: events from 2990 on stay, and one before them.
        let first = rt.reservoir.first_live();
        assert!(first > 0, "nothing was released");
        assert!(first < 299, "released events within the span: first live {first}");
        assert!(keep.index(&rt) == 299, "{}", keep.index(&rt));
        // Without the retention only the window's 100 ms (and one event) stay.
        rt.release_reservoir_keeping(None).unwrap();
        let first = rt.reservoir.first_live();
        assert!(first > 299 && first < 389, "first live {first}");
    }
}
