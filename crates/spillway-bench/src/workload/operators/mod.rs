//! The 15 operator state machines of the Gadget-class harness: each turns a stream of
//! [`StreamItem`]s (events and watermarks) into the state operations ([`StateOp`]) that the
//! corresponding Flink operator would issue against a RocksDB-like keyed state backend.
//!
//! This module owns the [`Operator`] trait, [`build`], the operators' counters
//! ([`OperatorStats`]), the state-key layout ([`KeyLayout`]) and the value filler. The
//! operators live in the submodules `window` (tumbling, sliding and window joins),
//! `session`, `interval` and `continuous`.
//!
//! # Time and watermarks
//!
//! A [`StreamItem::Watermark`] with time `W` says that no further event has a time below
//! `W`. Flink's watermark `Wf` says that no further event has a time `<= Wf`, so every
//! operator keeps the Flink watermark `Wf = W - 1` and applies Flink's rules to it. One-input
//! operators ignore `source` (every item is the one input) and use the largest watermark
//! seen. Two-input operators read source 0 (left) and source 1 (right), use the minimum of
//! the two sides' largest watermarks (both start at −∞), and count items of any other
//! source in [`OperatorStats::ignored_items`] without acting on them. Timers fire, in
//! (timer time, registration order), when `Wf` reaches the timer time, i.e. when the
//! combined watermark strictly advances to or past it.
//!
//! For a window `[start, end)` (`L` = `allowed_lateness`, which must be `>= 0`):
//!
//! * it **fires** (emits its contents: `get`) when `W >= end` (Flink: `Wf >= end - 1`, the
//!   window's max timestamp);
//! * it is **cleaned up** (`delete`) when `W >= end + L` (Flink: `Wf >= end - 1 + L`). With
//!   `L = 0` both happen on the same timer: `get`, then `delete`;
//! * an event whose window is already cleaned up (`end + L <= W`) skips that window. If it
//!   skips all its windows and `t + L < W`, it is **late**: counted in
//!   [`OperatorStats::late_dropped`], no op (sessions: see below);
//! * an event for a window that has fired but is not yet cleaned up (`end <= W < end + L`)
//!   updates the window and **re-fires** it at once (an extra `get`), like Flink's
//!   `EventTimeTrigger`.
//!
//! [`Operator::finish`] acts as Flink's final watermark (`Wf = +∞`): every pending timer
//! fires, so window, session and interval-join operators hold no state afterwards (every
//! key they put or merged has been deleted). The continuous operators never delete on the
//! insert-only streams they get (Flink's unbounded regular join / group aggregation without
//! state TTL): their state stays live.
//!
//! # Per-operator state operations
//!
//! `K(tag, group, time)` is the state key of [`KeyLayout::key`]; `v` is the event's
//! `value_len`. "all" operators use group 0 for every event, keyed ones the event key.
//! Timers are not state ops (Gadget does not model them either).
//!
//! | operator | per accepted event | per firing | per cleanup | keys |
//! |---|---|---|---|---|
//! | `tumbling.{keyed,all}.incremental` | `get K`, `put K` (v) | `get K` | `delete K` | `K = K('w', group, window start)` |
//! | `tumbling.{keyed,all}.holistic` | `merge K` (v) | `get K` | `delete K` | same |
//! | `sliding.{keyed,all}.incremental` | per window of the event, latest start first: `get K`, `put K` (v) [+ `get K` if re-fired] | `get K` | `delete K` | same |
//! | `sliding.{keyed,all}.holistic` | per window: `merge K` (v) [+ `get K` if re-fired] | `get K` | `delete K` | same |
//! | `session.incremental` | `get M`; merge ops (below); `get S`, `put S` (v); [`get S` if re-fired]; `put M` if the key's session set changed | `get M`, `get S` | `get M`, `delete S`, then twice `put M` (sessions remain) or twice `delete M` (none) | `M = K('m', key, 0)`, `S = K('w', key, state-window start)` |
//! | `session.holistic` | as above with `merge S` (v) instead of `get S`, `put S` | same | same | same |
//! | `join.tumbling`, `join.sliding` | per window: `merge K` (v), both sides into the same list | `get K` | `delete K` | `K = K('w', key, window start)` |
//! | `join.interval` | `get B`, `put B` (bucket bytes); `seek K(other, key, MIN)`; `next` per bucket of the other side (its key, ascending time) | — | `delete B` when the bucket's cleanup timer fires | `B = K('l' or 'r', key, event time)` |
//! | `continuous.join`, `join_input = no_unique_key` (default) | `seek K(other, key, MIN)`, `next` per row of the other side (below); `get R`, `put R` (v) | — | never | `R = K(own, key, event time)`; own/other = `'l'`/`'r'` |
//! | `continuous.join`, `has_unique_key` | the same read; `put R` (v) | — | never | same |
//! | `continuous.join`, `join_key_contains_unique_key` | `get K(other, key, 0)`, `put K(own, key, 0)` (v) | — | never | |
//! | `continuous.aggregation` | `get K`, `put K` (v) | — | never | `K = K('a', key, 0)` |
//!
//! A firing emits `get` of the window's state; window and session firings and re-firings
//! are counted in [`OperatorStats::windows_fired`].
//!
//! ## Sessions (Flink's `WindowOperator` with a `MergingWindowSet`)
//!
//! Each event `t` makes a window `[t, t + gap)` (`EventTimeSessionWindows`). Sessions of a
//! key that intersect it (`TimeWindow.intersects`, inclusive: touching sessions merge) are
//! merged with it into one session spanning all of them; sessions are at least one gap long
//! and never touch, so a new window meets at most two. A session's state lives under its
//! **state window** (the start of the window that created it). `M` holds the key's session
//! set (`mergingSetsState`: (window, state window) pairs, 32 bytes per session). Per event,
//! in the order of `WindowOperator.processElement` (`session.rs` cites each method):
//!
//! 1. `get M`: the set is read for every event, late ones too (it decides they are late).
//! 2. If the new window changes a session (it does not when it lies inside one), the merge
//!    keeps the state window of the merged session that comes first in Java's `HashSet`
//!    order (Flink's "any" merged window), not necessarily the earliest. For the other
//!    merged session `A`, if any (`mergeNamespaces`): holistic `get A`, `delete A`,
//!    `merge S` (A's bytes); incremental `get A`, `delete A`, then `get S`, `put S` (v). An
//!    event that only extends one session absorbs nothing and issues no merge op.
//! 3. A window that is late (`end - 1 + L <= Wf`) stops here; the event is counted late if
//!    also `t + L <= Wf`.
//! 4. The add: holistic `merge S` (v), incremental `get S`, `put S` (v); then `get S` if the
//!    session has already fired (`EventTimeTrigger.onElement` fires at once).
//! 5. `put M` (32 bytes per session) if the set changed (`MergingWindowSet.persist`).
//!
//! A timer (`onEventTime`): `get M`; at the session's max timestamp `get S`; at its cleanup
//! time `delete S` and the set written **twice**, by `clearAllState`'s `persist()` and by
//! `onEventTime`'s (the set still differs from the one read): `put M`, `put M`, or
//! `delete M`, `delete M` when no session is left. With `L = 0` one timer does both:
//! `get M`, `get S`, `delete S`, then the two writes of `M`. Timers of sessions that were
//! merged away are deleted (Flink's `triggerContext.clear` and `deleteCleanupTimer`), so
//! they issue nothing.
//!
//! ## Continuous join (Flink's `StreamingJoinOperator`, inner)
//!
//! Per event, the other side's rows of the key are read to the end, then the event's row is
//! added on its own side, with the [`JoinInput`](crate::workload::JoinInput) state view of
//! `join_input` (Flink's `JoinRecordStateViews`). The map views read with RocksDB's map
//! iterator: `seek` to the key's first possible entry (also when there is none), then one
//! `next` per row in key order, and before rows 129, 257, ...: `seek`, `next` at the last row
//! read (`RocksDBMapIterator` reads 128 entries per seek). Without a unique key a row is
//! identified by (key, time) and its count is read and rewritten; with one the time is the
//! unique key and the row is put. `continuous.rs` has the retraction ops (the generated
//! streams have none).
//!
//! ## Interval join (Flink's `IntervalJoinOperator`)
//!
//! Bounds `lower <= upper` relative to the left event; a left event's bucket is cleaned when
//! `Wf >= t + max(upper, 0)`, a right event's when `Wf >= t + max(-lower, 0)` (Flink's
//! cleanup timers; the timer remembers the bucket's time, so nothing is computed back from
//! it and nothing under- or overflows). An event with `t < Wf` (i.e. `t < W - 1`) is late
//! (Flink's `isLate`):
//! counted, no op. Allowed lateness does not apply (Flink's interval join has none). Like
//! Flink the scan visits the whole other-side buffer of the key, not only the matching
//! range; buffers stay bounded because of the cleanup timers. Several events of one key,
//! side and time share one bucket (a list value): the `put` carries the bucket's bytes.
//!
//! # Deliberate differences from Gadget (notes §5, §6)
//!
//! * State keys encode (tag, group, window/time) instead of a global sequential id.
//! * With allowed lateness, a window fires (`get`) at its end and is deleted at end + L;
//!   Gadget fires once (`get`, `delete`) at end + L and never re-fires for late events.
//! * Late events are counted; all windows, sessions and buffers are flushed by `finish`.
//! * Sliding windows with a negative start exist (Flink); the latest start comes first.
//! * Sessions follow Flink's `WindowOperator` and `MergingWindowSet` on RocksDB op for op
//!   (set read per event and timer, `mergeNamespaces`, a write only when the set changed,
//!   two writes at cleanup) rather than Gadget's buggy `metadata_` merges.
//! * Window joins keep one list per (key, window) shared by both sides, as both Flink
//!   (co-group over a union) and Gadget do.
//! * Interval join: signed bounds, one delete per bucket at watermark time, bounded buffers,
//!   one `next` per bucket.
//! * Continuous join models Flink's regular inner join (`StreamingJoinOperator`) with its
//!   three state views, by default a row -> count map per key and side (prefix iteration of
//!   the other side, `get` + `put` of the own row's count); Gadget's job/task `FINISH` logic
//!   (`get`, `delete`, `put` per job, `merge` per task) is not used.

use super::{Emit, OpKind, OperatorKind, OperatorParams, StateOp, StreamItem};
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::hash::Hash;

mod continuous;
mod interval;
mod session;
mod window;

#[cfg(test)]
mod tests;

/// One operator state machine.
pub trait Operator: Send {
    /// Processes one input item; `input_event` = 0-based number of the last input event so
    /// far (informational: the ops are handed to `emit` in order).
    fn on_item(&mut self, item: &StreamItem, input_event: u64, emit: &mut Emit<'_>);
    /// End of input: does what a final watermark at +∞ would (every pending window firing and
    /// cleanup, every interval-join bucket deletion), so window, session and interval-join
    /// operators hold no state afterwards. Continuous operators keep their state (they never
    /// delete). Items after `finish` are late.
    fn finish(&mut self, input_event: u64, emit: &mut Emit<'_>);
    /// The operator's counters.
    fn stats(&self) -> OperatorStats;
}

/// Counters of one operator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OperatorStats {
    /// Events received from a source the operator reads (late ones included).
    pub events: u64,
    /// Events dropped as later than the allowed lateness (no state op, except the session
    /// set read `get M`, see the module docs).
    pub late_dropped: u64,
    /// Window and session firings, including re-firings caused by late events.
    pub windows_fired: u64,
    /// State keys that currently hold a value (put or merged and not deleted since).
    pub live_state_keys: u64,
    /// Items (events or watermarks) of a source a two-input operator does not read (> 1).
    pub ignored_items: u64,
}

/// Why [`build`] refused a parameter set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// A time parameter is out of range.
    Param {
        /// Operator type.
        kind: OperatorKind,
        /// Parameter name as in [`OperatorParams`].
        name: &'static str,
        /// Value given.
        value: i64,
        /// What was expected.
        expected: &'static str,
    },
    /// `key_bytes` is out of range.
    KeyBytes {
        /// Value given.
        value: usize,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Param { kind, name, value, expected } => {
                write!(f, "operator {}: {name} = {value}, expected {expected}", kind.name())
            }
            BuildError::KeyBytes { value } => {
                write!(f, "key_bytes = {value}, expected 1..={MAX_KEY_BYTES}")
            }
        }
    }
}

impl std::error::Error for BuildError {}

/// Largest accepted `key_bytes`.
pub const MAX_KEY_BYTES: usize = 4096;
/// Largest number of sliding windows per event (`ceil(window / slide)`) [`build`] accepts.
pub const MAX_WINDOWS_PER_EVENT: i64 = 1 << 20;
/// Cap on one op's value length (a holistic session merge or an interval-join bucket can
/// grow with the number of events; the op carries at most this many bytes).
pub const MAX_VALUE_BYTES: u64 = 64 << 20;

/// Builds the state machine for `params.kind`.
pub fn build(params: &OperatorParams) -> Result<Box<dyn Operator>, BuildError> {
    use OperatorKind as K;
    let layout = KeyLayout::new(params.key_bytes)?;
    let kind = params.kind;
    let check = |name: &'static str, value: i64, ok: bool, expected: &'static str| {
        if ok {
            Ok(())
        } else {
            Err(BuildError::Param { kind, name, value, expected })
        }
    };
    let lateness =
        || check("allowed_lateness", params.allowed_lateness, params.allowed_lateness >= 0, ">= 0");
    let window = || check("window", params.window, params.window > 0, "> 0");
    let sliding = || -> Result<(), BuildError> {
        window()?;
        check("slide", params.slide, params.slide > 0, "> 0")?;
        let per_event = params.window / params.slide + 1;
        check(
            "window",
            params.window,
            per_event <= MAX_WINDOWS_PER_EVENT,
            "window / slide <= 2^20 windows per event",
        )
    };
    let op: Box<dyn Operator> = match kind {
        K::TumblingKeyedIncremental
        | K::TumblingKeyedHolistic
        | K::TumblingAllIncremental
        | K::TumblingAllHolistic
        | K::JoinTumbling => {
            window()?;
            lateness()?;
            Box::new(window::WindowOperator::new(kind, params, params.window, layout))
        }
        K::SlidingKeyedIncremental
        | K::SlidingKeyedHolistic
        | K::SlidingAllIncremental
        | K::SlidingAllHolistic
        | K::JoinSliding => {
            sliding()?;
            lateness()?;
            Box::new(window::WindowOperator::new(kind, params, params.slide, layout))
        }
        K::SessionIncremental | K::SessionHolistic => {
            check("session_gap", params.session_gap, params.session_gap > 0, "> 0")?;
            lateness()?;
            Box::new(session::SessionOperator::new(kind, params, layout))
        }
        K::JoinInterval => {
            check("lower", params.lower, params.lower <= params.upper, "lower <= upper")?;
            Box::new(interval::IntervalJoin::new(params, layout))
        }
        K::ContinuousJoin => Box::new(continuous::ContinuousJoin::new(params.join_input, layout)),
        K::ContinuousAggregation => Box::new(continuous::ContinuousAggregation::new(layout)),
    };
    Ok(op)
}

/// Tag byte of window, session and window-join state (`'w'`).
pub const TAG_WINDOW: u8 = b'w';
/// Tag byte of the session set, Flink's merging-window set (`'m'`).
pub const TAG_META: u8 = b'm';
/// Tag byte of left-side state of the interval and continuous joins (`'l'`).
pub const TAG_LEFT: u8 = b'l';
/// Tag byte of right-side state of the interval and continuous joins (`'r'`).
pub const TAG_RIGHT: u8 = b'r';
/// Tag byte of continuous-aggregation state (`'a'`).
pub const TAG_AGG: u8 = b'a';

/// How state keys are built from (tag, group, time), `key_bytes` long.
///
/// * `key_bytes >= 17`: `tag` (1 byte), `group` (8 bytes big-endian), `time` (8 bytes
///   big-endian with the sign bit flipped, so byte order is time order), then zero bytes up
///   to `key_bytes`. Unique.
/// * `3 <= key_bytes < 17`: `tag`, then the low `g = (key_bytes - 1) / 2` bytes of `group`
///   (big-endian), then `time + 2^(8·t - 1)` in the low `t = key_bytes - 1 - g` bytes
///   (big-endian; order-preserving). Default 10 bytes: 4 group bytes (ranks < 2^32) and 5
///   time bytes (|time| < 2^39). Unique while group and time fit; a key whose group or time
///   does not fit is **hashed** instead: `tag | 0x80`, then `key_bytes - 1` hash bytes of
///   (tag, group, time). Hashed keys never equal exact ones; they collide with each other
///   with probability about `n² / 2^(8·(key_bytes-1)+1)` for `n` keys.
/// * `key_bytes` 1 or 2: every key is a hash of (tag, group, time), `key_bytes` long;
///   collisions are likely.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyLayout {
    len: usize,
    group_bytes: usize,
    time_bytes: usize,
}

impl KeyLayout {
    /// Layout for `key_bytes`-long keys (1..=[`MAX_KEY_BYTES`]).
    pub fn new(key_bytes: usize) -> Result<KeyLayout, BuildError> {
        if key_bytes == 0 || key_bytes > MAX_KEY_BYTES {
            return Err(BuildError::KeyBytes { value: key_bytes });
        }
        let (group_bytes, time_bytes) = if key_bytes >= 17 {
            (8, 8)
        } else if key_bytes >= 3 {
            let g = (key_bytes - 1) / 2;
            (g, key_bytes - 1 - g)
        } else {
            (0, 0)
        };
        Ok(KeyLayout { len: key_bytes, group_bytes, time_bytes })
    }

    /// Key length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (a layout has at least one byte); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether (group, time) is stored exactly (not hashed).
    pub fn is_exact(&self, group: u64, time: i64) -> bool {
        if self.group_bytes == 0 {
            return false;
        }
        let group_fits = self.group_bytes >= 8 || group >> (8 * self.group_bytes) == 0;
        let time_fits = self.time_bytes >= 8 || {
            let half = 1i64 << (8 * self.time_bytes - 1);
            (-half..half).contains(&time)
        };
        group_fits && time_fits
    }

    /// The state key of (tag, group, time); see the type docs.
    pub fn key(&self, tag: u8, group: u64, time: i64) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.len);
        if self.is_exact(group, time) {
            k.push(tag);
            k.extend_from_slice(&group.to_be_bytes()[8 - self.group_bytes..]);
            let biased = (time as u64).wrapping_add(1u64 << (8 * self.time_bytes - 1));
            k.extend_from_slice(&biased.to_be_bytes()[8 - self.time_bytes..]);
            k.resize(self.len, 0);
        } else {
            let mut n = self.len;
            if self.len >= 3 {
                k.push(tag | 0x80);
                n -= 1;
            }
            let mut h =
                splitmix64(u64::from(tag) ^ splitmix64(group ^ splitmix64(time as u64 ^ 0x5eed)));
            while k.len() < self.len {
                h = splitmix64(h);
                let take = n.min(8);
                k.extend_from_slice(&h.to_be_bytes()[..take]);
                n -= take;
            }
        }
        k
    }
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Deterministic value bytes: `len` lowercase letters from a splitmix64 stream seeded
/// with `seed` (printable, so Gadget's text format holds them unescaped; not all one
/// byte, so stores that compress do not get a free ride).
pub fn filler(len: usize, seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    filler_into(&mut v, len, seed);
    v
}

/// [`filler`] into a reused buffer (replaces its contents).
fn filler_into(v: &mut Vec<u8>, len: usize, seed: u64) {
    v.clear();
    let mut h = seed;
    while v.len() < len {
        h = splitmix64(h);
        let take = (len - v.len()).min(8);
        v.extend(h.to_le_bytes()[..take].iter().map(|b| b'a' + b % 26));
    }
}

/// Builds ops (key bytes from the layout, filler values) and hands them to the sink,
/// through one reused op buffer (no allocation per op once it has grown).
#[derive(Debug)]
struct Issuer {
    layout: KeyLayout,
    seq: u64,
    buf: StateOp,
}

impl Issuer {
    fn new(layout: KeyLayout) -> Issuer {
        Issuer { layout, seq: 0, buf: StateOp::default() }
    }

    fn key(&self, tag: u8, group: u64, time: i64) -> Vec<u8> {
        self.layout.key(tag, group, time)
    }

    fn op(&mut self, emit: &mut Emit<'_>, kind: OpKind, key: &[u8], value_len: u64) {
        let len = usize::try_from(value_len.min(MAX_VALUE_BYTES)).unwrap_or(0);
        self.buf.kind = kind;
        self.buf.key.clear();
        self.buf.key.extend_from_slice(key);
        filler_into(&mut self.buf.value, len, self.seq);
        self.seq = self.seq.wrapping_add(1);
        emit(&self.buf);
    }

    fn get(&mut self, emit: &mut Emit<'_>, key: &[u8]) {
        self.op(emit, OpKind::Get, key, 0);
    }

    fn put(&mut self, emit: &mut Emit<'_>, key: &[u8], len: u64) {
        self.op(emit, OpKind::Put, key, len);
    }

    fn merge(&mut self, emit: &mut Emit<'_>, key: &[u8], len: u64) {
        self.op(emit, OpKind::Merge, key, len);
    }

    fn delete(&mut self, emit: &mut Emit<'_>, key: &[u8]) {
        self.op(emit, OpKind::Delete, key, 0);
    }
}

/// Which input an item belongs to, for two-input operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Side {
    Left,
    Right,
}

/// Watermark bookkeeping: our watermarks (`no event < W`) as Flink watermarks (`Wf = W-1`).
#[derive(Debug)]
struct Clock {
    two_inputs: bool,
    sides: [i64; 2],
    /// Current Flink watermark (combined over the inputs).
    wf: i64,
}

impl Clock {
    fn new(two_inputs: bool) -> Clock {
        Clock { two_inputs, sides: [i64::MIN; 2], wf: i64::MIN }
    }

    /// Side of `source`, `None` if a two-input operator does not read it.
    fn side(&self, source: u8) -> Option<Side> {
        match (self.two_inputs, source) {
            (false, _) | (true, 0) => Some(Side::Left),
            (true, 1) => Some(Side::Right),
            _ => None,
        }
    }

    /// Applies a watermark; returns the new Flink watermark if it advanced, `Err` for an
    /// unread source.
    fn watermark(&mut self, source: u8, time: i64) -> Result<Option<i64>, ()> {
        let side = self.side(source).ok_or(())?;
        let i = usize::from(side == Side::Right);
        self.sides[i] = self.sides[i].max(time);
        let combined =
            if self.two_inputs { self.sides[0].min(self.sides[1]) } else { self.sides[0] };
        let wf = combined.saturating_sub(1);
        if wf > self.wf {
            self.wf = wf;
            Ok(Some(wf))
        } else {
            Ok(None)
        }
    }

    /// The final watermark.
    fn finish(&mut self) {
        self.sides = [i64::MAX; 2];
        self.wf = i64::MAX;
    }
}

/// Event-time timers (Flink's timer service): unique per (target, time), fired in
/// (time, registration order).
#[derive(Debug)]
struct Timers<T> {
    queue: BTreeSet<(i64, u64, T)>,
    index: HashMap<(T, i64), u64>,
    next_seq: u64,
}

impl<T: Copy + Eq + Hash + Ord> Timers<T> {
    fn new() -> Timers<T> {
        Timers { queue: BTreeSet::new(), index: HashMap::new(), next_seq: 0 }
    }

    fn register(&mut self, time: i64, target: T) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.index.entry((target, time)) {
            e.insert(self.next_seq);
            self.queue.insert((time, self.next_seq, target));
            self.next_seq += 1;
        }
    }

    fn delete(&mut self, time: i64, target: T) {
        if let Some(seq) = self.index.remove(&(target, time)) {
            self.queue.remove(&(time, seq, target));
        }
    }

    /// The next timer due at Flink watermark `wf`, removed.
    fn pop_due(&mut self, wf: i64) -> Option<(i64, T)> {
        let &(time, seq, target) = self.queue.first()?;
        if time > wf {
            return None;
        }
        self.queue.remove(&(time, seq, target));
        self.index.remove(&(target, time));
        Some((time, target))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.queue.len()
    }
}
