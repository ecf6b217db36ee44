//! Event streams: the input of an experiment as [`StreamItem`]s (events and watermarks),
//! generated on the fly with bounded memory (no buffer of events, whatever their number;
//! [`Disorder::Gadget`] holds only the events whose delivery is put off, about
//! `rate * out_of_order * lateness_bound`).
//!
//! # Time model (one source)
//!
//! **Synthetic source.** A continuous clock starts at 0 and advances by one gap draw
//! per event; the event's *base time* is `floor(clock)`. New events are generated in
//! clock order, so base times never decrease. With probability `out_of_order` an event
//! is *out of order* by a delay `d` drawn uniformly from `1..=lateness_bound`; what that
//! means depends on the source's [`Disorder`]:
//!
//! * [`Disorder::Bounded`] (Flink's bounded out-of-orderness): the event's time is its
//!   base time minus `d` (clamped at 0) and it keeps its place in the arrival order.
//! * [`Disorder::Gadget`] (Gadget's `GadgetEventGenerator`, notes §4.1): the event keeps
//!   its base time and is *delivered* `d` time units later: it is held back and handed
//!   out when the source's time reaches `base + d`, before the new events of that unit
//!   (Gadget puts the held events of `outOfOrderMap[T]` first in batch `T`), and so
//!   behind the watermarks of the units in between.
//!
//! Unlike Gadget, nothing is lost: Gadget drops the first event at or past each unit
//! boundary (notes §6 items 1-2); here every event is emitted. Per event the source
//! draws, from its own RNG and in this order: the gap, the key, the value size, then
//! (only if `out_of_order > 0`) the out-of-order coin and (only if it came up) the delay.
//!
//! **Trace source (CSV).** Rows are read in file order, one at a time; event time =
//! `floor(value * time_multiplier)`; the base time of a row is the largest event time
//! seen so far (rows need not be sorted). Keys that parse as `u64` are used as is, others
//! are hashed (64-bit FNV-1a of the bytes). Blank lines are skipped; a row with too few
//! fields or a non-numeric time is an error naming the line and column.
//!
//! **Watermarks.** Each item is handed out at a *unit*: a new event at its base time, a
//! delayed event ([`Disorder::Gadget`]) at `base + d`. Before the first event, and again
//! before each event whose unit has crossed into a new multiple `B` of
//! `watermark_every`, the source emits a watermark, where `B` is the largest multiple not
//! above that unit (boundaries crossed in one jump give one watermark):
//!
//! * [`Disorder::Bounded`]: `Watermark { time: B - lateness_bound }`. Every later event
//!   of a synthetic source has base time `>= B` and time `>= base - lateness_bound`, so
//!   it is never behind a watermark.
//! * [`Disorder::Gadget`]: `Watermark { time: B }`, Gadget's `getWaterMark` (the current
//!   unit when it is a multiple of the frequency; the watermark does not trail). New
//!   events are never behind it; a delayed event is behind it whenever a boundary lies
//!   between its base time and its delivery, and is counted in [`StreamCounts::late`].
//!   With Gadget's frequency 1 a window `[s, e)` fires at watermark `e`, so an event
//!   delayed by `d` still reaches its window only if `base + d < e` (plus the operator's
//!   allowed lateness), as in Gadget's `OneStreamWindowOperator`.
//!
//! A trace row whose time is below its source's last watermark (unsorted beyond
//! `lateness_bound`) is still emitted and counted in [`StreamCounts::late`]; dropping or
//! accepting a late event is the operator's business. When a source ends (its delayed
//! events delivered) it emits a final watermark at [`FINAL_WATERMARK`], which closes
//! every window still open.
//!
//! # Two sources
//!
//! Each source has its own RNG (seeded from the experiment seed and the source number)
//! and its own watermarks. The stream merges them by base time, lower source number first
//! on ties; a watermark is ordered with the event it precedes. So the first source's
//! items do not depend on the second's, and each source's watermarks are monotone.
//!
//! Nothing is ever dropped: [`StreamCounts::emitted`] equals
//! [`StreamCounts::generated`] once the stream is exhausted.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::config::{Column, CsvInput, Disorder, Experiment, Source, SourceInput, Synthetic};
use super::dist::{DistError, Gap, KeySampler, ValueSize};
use super::{InputEvent, StreamItem};

/// The watermark a source emits after its last event.
pub const FINAL_WATERMARK: i64 = i64::MAX;

/// Event and watermark counts of a stream (or of one of its sources).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StreamCounts {
    /// Events produced by the generators (trace rows accepted by the type filter).
    pub generated: u64,
    /// Events handed out by the stream.
    pub emitted: u64,
    /// Synthetic out-of-order events: times moved back ([`Disorder::Bounded`]) or
    /// deliveries put off ([`Disorder::Gadget`]).
    pub out_of_order: u64,
    /// Events behind their source's last watermark when emitted (unsorted traces, and
    /// delayed events of [`Disorder::Gadget`]).
    pub late: u64,
    /// Trace rows skipped by `type_filter`.
    pub filtered: u64,
    /// Watermarks emitted (including the final ones).
    pub watermarks: u64,
}

impl StreamCounts {
    fn add(&mut self, o: &StreamCounts) {
        self.generated += o.generated;
        self.emitted += o.emitted;
        self.out_of_order += o.out_of_order;
        self.late += o.late;
        self.filtered += o.filtered;
        self.watermarks += o.watermarks;
    }
}

/// Why a stream could not be built or continued.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceError {
    /// A file could not be opened or read.
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        message: String,
    },
    /// A bad row or header in a CSV trace.
    Csv {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// The column involved (`key`, `time`, `event_type` and its index or name).
        column: String,
        /// What is wrong and what was expected.
        message: String,
    },
    /// A distribution could not be built (e.g. a bad empirical key file).
    Dist {
        /// Source number.
        source: u8,
        /// The error.
        error: DistError,
    },
    /// The experiment has no source or more than 255.
    Sources(usize),
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceError::Io { path, message } => write!(f, "{}: {message}", path.display()),
            SourceError::Csv { path, line, column, message } => {
                write!(f, "{}:{line}: {column}: {message}", path.display())
            }
            SourceError::Dist { source, error } => write!(f, "source[{source}]: {error}"),
            SourceError::Sources(n) => write!(f, "an event stream needs 1 to 255 sources, got {n}"),
        }
    }
}

impl std::error::Error for SourceError {}

/// SplitMix64 finalizer: decorrelates the per-source seeds.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The RNG of source `source` of an experiment seeded with `seed`.
pub fn source_rng(seed: u64, source: u8) -> StdRng {
    StdRng::seed_from_u64(mix(seed ^ mix(u64::from(source) + 1)))
}

/// 64-bit FNV-1a of `bytes` (keys of trace rows that are not integers).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

struct SynthGen {
    left: u64,
    keys: KeySampler,
    gap: Gap,
    out_of_order: f64,
    clock: f64,
}

struct CsvGen {
    path: PathBuf,
    lines: std::io::Lines<BufReader<File>>,
    line_no: usize,
    key: (usize, String),
    time: (usize, String),
    filter: Option<((usize, String), String)>,
    multiplier: f64,
    max_time: Option<i64>,
}

enum Gen {
    Synthetic(SynthGen),
    Csv(Box<CsvGen>),
}

/// Splits one CSV line at commas; a field may be double-quoted (`""` is a quote).
fn split_csv(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    fields.push(cur);
    fields
}

impl CsvGen {
    fn open(c: &CsvInput) -> Result<CsvGen, SourceError> {
        let io =
            |e: std::io::Error| SourceError::Io { path: c.path.clone(), message: e.to_string() };
        let f = File::open(&c.path).map_err(io)?;
        let mut lines = BufReader::new(f).lines();
        let mut line_no = 0;
        let header: Vec<String> = if c.header {
            line_no = 1;
            match lines.next() {
                Some(l) => split_csv(l.map_err(io)?.trim_end_matches('\r'))
                    .into_iter()
                    .map(|h| h.trim().to_string())
                    .collect(),
                None => Vec::new(),
            }
        } else {
            Vec::new()
        };
        let resolve = |what: &str, col: &Column| -> Result<(usize, String), SourceError> {
            match col {
                Column::Index(i) => Ok((*i, format!("{what} (column {i})"))),
                Column::Name(n) => header
                    .iter()
                    .position(|h| h == n)
                    .map(|i| (i, format!("{what} (column {n:?} = {i})")))
                    .ok_or_else(|| SourceError::Csv {
                        path: c.path.clone(),
                        line: 1,
                        column: format!("{what} ({n:?})"),
                        message: format!("no such column in the header; columns: {header:?}"),
                    }),
            }
        };
        let filter = match (&c.event_type, &c.type_filter) {
            (Some(col), Some(v)) => Some((resolve("event_type", col)?, v.clone())),
            _ => None,
        };
        Ok(CsvGen {
            path: c.path.clone(),
            key: resolve("key", &c.key)?,
            time: resolve("time", &c.time)?,
            filter,
            multiplier: c.time_multiplier,
            lines,
            line_no,
            max_time: None,
        })
    }

    /// The next accepted row as `(key, time)`; counts filtered rows.
    fn next_row(&mut self, counts: &mut StreamCounts) -> Result<Option<(u64, i64)>, SourceError> {
        loop {
            let Some(line) = self.lines.next() else { return Ok(None) };
            self.line_no += 1;
            let line = line
                .map_err(|e| SourceError::Io { path: self.path.clone(), message: e.to_string() })?;
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() {
                continue;
            }
            let fields = split_csv(line);
            let field = |(i, name): &(usize, String)| -> Result<&str, SourceError> {
                fields.get(*i).map(|f| f.trim()).ok_or_else(|| SourceError::Csv {
                    path: self.path.clone(),
                    line: self.line_no,
                    column: name.clone(),
                    message: format!("the row has only {} field(s)", fields.len()),
                })
            };
            if let Some((col, want)) = &self.filter {
                if field(col)? != want {
                    counts.filtered += 1;
                    continue;
                }
            }
            let k = field(&self.key)?;
            let key = k.parse::<u64>().unwrap_or_else(|_| fnv1a(k.as_bytes()));
            let t = field(&self.time)?;
            let bad_time = |message: String| SourceError::Csv {
                path: self.path.clone(),
                line: self.line_no,
                column: self.time.1.clone(),
                message,
            };
            let time = match t.parse::<i64>() {
                Ok(v) if self.multiplier == 1.0 => v,
                _ => {
                    let v: f64 =
                        t.parse().ok().filter(|v: &f64| v.is_finite()).ok_or_else(|| {
                            bad_time(format!("expected a number (the event time), got {t:?}"))
                        })?;
                    let scaled = (v * self.multiplier).floor();
                    // i64::MAX is the final watermark; times stay below it.
                    if !(scaled >= i64::MIN as f64 && scaled < i64::MAX as f64) {
                        return Err(bad_time(format!(
                            "{t} * {} is outside the range of event times",
                            self.multiplier
                        )));
                    }
                    scaled as i64
                }
            };
            if time == FINAL_WATERMARK {
                return Err(bad_time(format!("{t} is reserved for the final watermark")));
            }
            return Ok(Some((key, time)));
        }
    }
}

/// A generated event: its merge order (the clock), base time, the event, and the delay
/// of its delivery ([`Disorder::Gadget`]; 0 = on time).
struct Raw {
    order: f64,
    base: i64,
    ev: InputEvent,
    delay: i64,
}

/// An event whose delivery is put off ([`Disorder::Gadget`]): ordered by its delivery
/// unit, then by generation order.
struct Delayed {
    unit: i64,
    seq: u64,
    ev: InputEvent,
}

impl PartialEq for Delayed {
    fn eq(&self, o: &Self) -> bool {
        (self.unit, self.seq) == (o.unit, o.seq)
    }
}
impl Eq for Delayed {}
impl PartialOrd for Delayed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Delayed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.unit, self.seq).cmp(&(o.unit, o.seq))
    }
}

struct SourceState {
    id: u8,
    gen: Gen,
    value_size: ValueSize,
    rng: StdRng,
    every: i64,
    lateness: i64,
    disorder: Disorder,
    /// Next multiple of `every` that triggers a watermark (`None`: the first event does).
    next_boundary: Option<i64>,
    last_watermark: Option<i64>,
    /// An event that waits behind the watermark just emitted.
    held: Option<(f64, InputEvent)>,
    /// [`Disorder::Gadget`]: events held back, earliest delivery first.
    delayed: BinaryHeap<Reverse<Delayed>>,
    delayed_seq: u64,
    /// [`Disorder::Gadget`]: the next on-time event, read ahead of the delayed ones.
    ahead: Option<Raw>,
    generator_done: bool,
    finished: bool,
    counts: StreamCounts,
}

impl SourceState {
    fn new(seed: u64, id: u8, s: &Source) -> Result<SourceState, SourceError> {
        let gen = match &s.input {
            SourceInput::Synthetic(Synthetic {
                events,
                keys,
                key_popularity,
                gap,
                out_of_order,
            }) => Gen::Synthetic(SynthGen {
                left: *events,
                keys: key_popularity
                    .sampler(*keys)
                    .map_err(|error| SourceError::Dist { source: id, error })?,
                gap: gap.clone(),
                out_of_order: *out_of_order,
                clock: 0.0,
            }),
            SourceInput::Csv(c) => Gen::Csv(Box::new(CsvGen::open(c)?)),
        };
        Ok(SourceState {
            id,
            gen,
            value_size: s.value_size.clone(),
            rng: source_rng(seed, id),
            every: s.watermark_every.max(1),
            lateness: s.lateness_bound.max(0),
            disorder: s.disorder,
            next_boundary: None,
            last_watermark: None,
            held: None,
            delayed: BinaryHeap::new(),
            delayed_seq: 0,
            ahead: None,
            generator_done: false,
            finished: false,
            counts: StreamCounts::default(),
        })
    }

    /// The next generated event.
    fn generate(&mut self) -> Result<Option<Raw>, SourceError> {
        let rng = &mut self.rng;
        let (key, base, time) = match &mut self.gen {
            Gen::Synthetic(g) => {
                if g.left == 0 {
                    return Ok(None);
                }
                g.left -= 1;
                g.clock += g.gap.sample(rng);
                let key = g.keys.sample(rng);
                let base = g.clock.floor().min(i64::MAX as f64 / 2.0) as i64;
                let value_len = self.value_size.sample(rng);
                let mut time = base;
                let mut delay = 0;
                if g.out_of_order > 0.0 && rng.random::<f64>() < g.out_of_order {
                    let d = rng.random_range(1..=self.lateness.max(1));
                    match self.disorder {
                        Disorder::Bounded => {
                            time = base.saturating_sub(d).max(0);
                            if time < base {
                                self.counts.out_of_order += 1;
                            }
                        }
                        Disorder::Gadget => {
                            delay = d;
                            self.counts.out_of_order += 1;
                        }
                    }
                }
                let ev = InputEvent { source: self.id, key, time, value_len };
                self.counts.generated += 1;
                return Ok(Some(Raw { order: g.clock, base, ev, delay }));
            }
            Gen::Csv(g) => {
                let Some((key, time)) = g.next_row(&mut self.counts)? else { return Ok(None) };
                let base = g.max_time.map_or(time, |m| m.max(time));
                g.max_time = Some(base);
                (key, base, time)
            }
        };
        let value_len = self.value_size.sample(rng);
        self.counts.generated += 1;
        let ev = InputEvent { source: self.id, key, time, value_len };
        Ok(Some(Raw { order: base as f64, base, ev, delay: 0 }))
    }

    /// The next event to hand out as `(merge order, unit, event)`: the next generated
    /// one, or with [`Disorder::Gadget`] the earlier of the next on-time event and the
    /// first delayed one (a delayed event goes first within its unit).
    fn next_event(&mut self) -> Result<Option<(f64, i64, InputEvent)>, SourceError> {
        if self.disorder == Disorder::Bounded {
            return Ok(self.generate()?.map(|r| (r.order, r.base, r.ev)));
        }
        while self.ahead.is_none() && !self.generator_done {
            match self.generate()? {
                Some(r) if r.delay > 0 => {
                    let unit = r.base.saturating_add(r.delay);
                    self.delayed.push(Reverse(Delayed { unit, seq: self.delayed_seq, ev: r.ev }));
                    self.delayed_seq += 1;
                }
                Some(r) => self.ahead = Some(r),
                None => self.generator_done = true,
            }
        }
        let delayed_first = match (self.delayed.peek(), &self.ahead) {
            (Some(Reverse(d)), Some(a)) => d.unit <= a.base,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if delayed_first {
            let Reverse(d) = self.delayed.pop().expect("peeked");
            return Ok(Some((d.unit as f64, d.unit, d.ev)));
        }
        Ok(self.ahead.take().map(|r| (r.order, r.base, r.ev)))
    }

    /// The next item of this source with its merge key (its unit, or the clock).
    fn next_item(&mut self) -> Result<Option<(f64, StreamItem)>, SourceError> {
        let (order, ev) = match self.held.take() {
            Some(h) => h,
            None => {
                let Some((order, unit, ev)) = self.next_event()? else {
                    if self.finished {
                        return Ok(None);
                    }
                    self.finished = true;
                    self.counts.watermarks += 1;
                    self.last_watermark = Some(FINAL_WATERMARK);
                    let wm = StreamItem::Watermark { source: self.id, time: FINAL_WATERMARK };
                    return Ok(Some((f64::INFINITY, wm)));
                };
                if self.next_boundary.is_none_or(|b| unit >= b) {
                    let multiple = unit.div_euclid(self.every) * self.every;
                    self.next_boundary = Some(multiple.saturating_add(self.every));
                    let lag = match self.disorder {
                        Disorder::Bounded => self.lateness,
                        Disorder::Gadget => 0,
                    };
                    let time = multiple.saturating_sub(lag);
                    if self.last_watermark.is_none_or(|w| time > w) {
                        self.last_watermark = Some(time);
                        self.counts.watermarks += 1;
                        self.held = Some((order, ev));
                        return Ok(Some((order, StreamItem::Watermark { source: self.id, time })));
                    }
                }
                (order, ev)
            }
        };
        if self.last_watermark.is_some_and(|w| ev.time < w) {
            self.counts.late += 1;
        }
        self.counts.emitted += 1;
        Ok(Some((order, StreamItem::Event(ev))))
    }
}

/// The merged input of an experiment; see the module docs for the exact model.
/// Iterating yields every item; if a trace turns out to be malformed the iteration
/// stops early and [`EventStream::error`] says why ([`EventStream::try_next`] returns
/// the error directly).
pub struct EventStream {
    sources: Vec<SourceState>,
    heads: Vec<Option<(f64, StreamItem)>>,
    exhausted: Vec<bool>,
    error: Option<SourceError>,
}

impl EventStream {
    /// The stream of `e`'s sources, seeded with `e.seed`.
    pub fn new(e: &Experiment) -> Result<EventStream, SourceError> {
        EventStream::from_sources(e.seed, &e.sources)
    }

    /// The stream of `sources` (numbered in order), seeded with `seed`.
    pub fn from_sources(seed: u64, sources: &[Source]) -> Result<EventStream, SourceError> {
        if sources.is_empty() || sources.len() > 255 {
            return Err(SourceError::Sources(sources.len()));
        }
        let states = sources
            .iter()
            .enumerate()
            .map(|(i, s)| SourceState::new(seed, i as u8, s))
            .collect::<Result<Vec<_>, _>>()?;
        let n = states.len();
        Ok(EventStream {
            sources: states,
            heads: vec![None; n],
            exhausted: vec![false; n],
            error: None,
        })
    }

    /// The next item, or the error that stops the stream.
    pub fn try_next(&mut self) -> Result<Option<StreamItem>, SourceError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let mut best: Option<usize> = None;
        for i in 0..self.sources.len() {
            if self.heads[i].is_none() && !self.exhausted[i] {
                match self.sources[i].next_item() {
                    Ok(Some(h)) => self.heads[i] = Some(h),
                    Ok(None) => self.exhausted[i] = true,
                    Err(e) => {
                        self.error = Some(e.clone());
                        return Err(e);
                    }
                }
            }
            if let Some((k, _)) = self.heads[i] {
                if best.is_none_or(|b| self.heads[b].is_some_and(|(bk, _)| k < bk)) {
                    best = Some(i);
                }
            }
        }
        Ok(best.and_then(|b| self.heads[b].take()).map(|(_, item)| item))
    }

    /// The error that stopped the stream, if any.
    pub fn error(&self) -> Option<&SourceError> {
        self.error.as_ref()
    }

    /// Counts over all sources.
    pub fn counts(&self) -> StreamCounts {
        let mut c = StreamCounts::default();
        for s in &self.sources {
            c.add(&s.counts);
        }
        c
    }

    /// Counts of source `i`.
    pub fn source_counts(&self, i: usize) -> Option<StreamCounts> {
        self.sources.get(i).map(|s| s.counts)
    }
}

impl Iterator for EventStream {
    type Item = StreamItem;

    fn next(&mut self) -> Option<StreamItem> {
        self.try_next().ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::config::CsvInput;
    use crate::workload::dist::KeyPopularity;
    use crate::workload::OperatorKind;
    use std::hash::{Hash, Hasher};

    fn synthetic(events: u64, gap: Gap, ooo: f64, lateness: i64, every: i64) -> Source {
        Source {
            input: SourceInput::Synthetic(Synthetic {
                events,
                keys: 1000,
                key_popularity: KeyPopularity::Zipf { s: 1.0 },
                gap,
                out_of_order: ooo,
            }),
            value_size: ValueSize::Uniform { min: 1, max: 100 },
            watermark_every: every,
            lateness_bound: lateness,
            disorder: Disorder::Bounded,
        }
    }

    fn hash_run(seed: u64, sources: &[Source]) -> (u64, usize) {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let mut n = 0;
        for item in EventStream::from_sources(seed, sources).unwrap() {
            format!("{item:?}").hash(&mut h);
            n += 1;
        }
        (h.finish(), n)
    }

    /// Per-source invariants, checked against a simple oracle: every item in order,
    /// watermarks strictly increasing, no event behind its source's watermark (unless
    /// the source counts it late), times within `lateness_bound` of the running maximum.
    fn check(stream: &mut EventStream, lateness: &[i64]) -> (Vec<u64>, Vec<u64>) {
        let n = lateness.len();
        let mut wm: Vec<Option<i64>> = vec![None; n];
        let mut max_t: Vec<i64> = vec![i64::MIN; n];
        let mut events = vec![0u64; n];
        let mut late = vec![0u64; n];
        let mut finals = vec![0; n];
        for item in stream.by_ref() {
            match item {
                StreamItem::Watermark { source, time } => {
                    let s = source as usize;
                    assert_eq!(finals[s], 0, "item after the final watermark");
                    if let Some(w) = wm[s] {
                        assert!(time > w, "source {s}: watermark {time} after {w}");
                    }
                    wm[s] = Some(time);
                    if time == FINAL_WATERMARK {
                        finals[s] += 1;
                    }
                }
                StreamItem::Event(e) => {
                    let s = e.source as usize;
                    assert_eq!(finals[s], 0, "event after the final watermark");
                    assert!(wm[s].is_some(), "event before the first watermark");
                    if wm[s].is_some_and(|w| e.time < w) {
                        late[s] += 1;
                    }
                    if max_t[s] != i64::MIN {
                        assert!(e.time >= max_t[s] - lateness[s], "{e:?} below {}", max_t[s]);
                    }
                    max_t[s] = max_t[s].max(e.time);
                    events[s] += 1;
                }
            }
        }
        assert!(finals.iter().all(|&f| f == 1), "one final watermark per source");
        (events, late)
    }

    #[test]
    fn deterministic_per_seed() {
        let srcs = [
            synthetic(20_000, Gap::Exponential { lambda: 10.0 }, 0.2, 3, 1),
            synthetic(10_000, Gap::Normal { mean: 0.2, stddev: 0.3 }, 0.0, 0, 2),
        ];
        let a = hash_run(42, &srcs);
        assert_eq!(a, hash_run(42, &srcs));
        assert!(a.1 > 30_000, "events plus watermarks");
        assert_ne!(a.0, hash_run(43, &srcs).0, "another seed gives another stream");
    }

    #[test]
    fn no_event_lost_and_bounded_disorder() {
        for (gap, every, lateness) in [
            (Gap::Exponential { lambda: 10.0 }, 1, 3),
            (Gap::Exponential { lambda: 0.1 }, 1, 5),
            (Gap::Constant { value: 2.5 }, 3, 2),
            (Gap::Constant { value: 0.0 }, 1, 1),
            (Gap::Uniform { a: 0.0, b: 4.0 }, 7, 10),
        ] {
            let src = synthetic(50_000, gap.clone(), 0.3, lateness, every);
            let mut s = EventStream::from_sources(1, &[src]).unwrap();
            let (events, late) = check(&mut s, &[lateness]);
            let c = s.counts();
            assert_eq!(events[0], 50_000, "{gap:?}");
            assert_eq!((c.generated, c.emitted), (50_000, 50_000), "{gap:?}");
            assert_eq!(late[0], 0, "{gap:?}: synthetic events never trail the watermark");
            assert_eq!(c.late, 0);
            // The out-of-order share is close to 30% (constant gap 0 keeps time 0: no move).
            if gap != (Gap::Constant { value: 0.0 }) {
                let f = c.out_of_order as f64 / 50_000.0;
                assert!((f - 0.3).abs() < 0.02, "{gap:?}: out-of-order share {f}");
            }
        }
    }

    fn gadget(mut s: Source) -> Source {
        s.disorder = Disorder::Gadget;
        s
    }

    #[test]
    fn gadget_disorder_delivers_late_behind_a_watermark_that_does_not_trail() {
        for (gap, every, lateness) in [
            (Gap::Exponential { lambda: 10.0 }, 1, 3),
            (Gap::Exponential { lambda: 0.5 }, 2, 4),
            (Gap::Constant { value: 0.25 }, 3, 1),
        ] {
            let src = gadget(synthetic(30_000, gap.clone(), 0.2, lateness, every));
            let mut s = EventStream::from_sources(4, &[src]).unwrap();
            let mut wm = None::<i64>;
            let (mut events, mut behind, mut max_delay) = (0u64, 0u64, 0i64);
            for item in s.by_ref() {
                match item {
                    StreamItem::Watermark { time, .. } => {
                        assert!(
                            wm.is_none_or(|w| time > w),
                            "{gap:?}: watermark {time} after {wm:?}"
                        );
                        // Not trailing: a multiple of `every` at or below the unit reached.
                        assert!(time == FINAL_WATERMARK || time % every == 0, "{time}");
                        wm = Some(time);
                    }
                    StreamItem::Event(e) => {
                        events += 1;
                        let w = wm.expect("a watermark comes first");
                        assert_ne!(w, FINAL_WATERMARK);
                        if e.time < w {
                            behind += 1;
                            // Delivered at a unit at or past the watermark, at most
                            // `lateness` units after its own time.
                            max_delay = max_delay.max(w - e.time);
                        }
                    }
                }
            }
            let c = s.counts();
            assert_eq!((events, c.generated, c.emitted), (30_000, 30_000, 30_000), "{gap:?}");
            assert_eq!(c.late, behind, "{gap:?}");
            assert!(behind <= c.out_of_order, "{gap:?}: {behind} > {}", c.out_of_order);
            assert!(max_delay <= lateness, "{gap:?}: delay {max_delay} > {lateness}");
            let f = c.out_of_order as f64 / 30_000.0;
            assert!((f - 0.2).abs() < 0.02, "{gap:?}: out-of-order share {f}");
            if every == 1 {
                // Each delivery unit is past the event's own: every delayed event is late.
                assert_eq!(behind, c.out_of_order, "{gap:?}");
            }
        }
    }

    #[test]
    fn gadget_disorder_by_hand() {
        // Constant gap 1: base times 1, 2, 3, ...; every event out of order by exactly 1
        // (lateness_bound 1) would be delivered at unit base + 1, before the event of
        // that unit.
        let src = gadget(synthetic(3, Gap::Constant { value: 1.0 }, 1.0, 1, 1));
        let items: Vec<StreamItem> = EventStream::from_sources(0, &[src]).unwrap().collect();
        let shape: Vec<(char, i64)> = items
            .iter()
            .map(|i| match *i {
                StreamItem::Watermark { time, .. } => ('w', time),
                StreamItem::Event(e) => ('e', e.time),
            })
            .collect();
        assert_eq!(
            shape,
            [('w', 2), ('e', 1), ('w', 3), ('e', 2), ('w', 4), ('e', 3), ('w', FINAL_WATERMARK)]
        );
        // Without disorder the same events come on time behind non-trailing watermarks,
        // and the bounded model lets the watermark trail instead.
        let on_time = gadget(synthetic(2, Gap::Constant { value: 1.0 }, 0.0, 5, 1));
        let items: Vec<StreamItem> = EventStream::from_sources(0, &[on_time]).unwrap().collect();
        assert_eq!(items[0], StreamItem::Watermark { source: 0, time: 1 });
        let bounded = synthetic(2, Gap::Constant { value: 1.0 }, 0.0, 5, 1);
        let items: Vec<StreamItem> = EventStream::from_sources(0, &[bounded]).unwrap().collect();
        assert_eq!(items[0], StreamItem::Watermark { source: 0, time: -4 });
    }

    #[test]
    fn in_order_without_out_of_order_and_gadget_watermarks() {
        let src = synthetic(10_000, Gap::Exponential { lambda: 10.0 }, 0.0, 0, 1);
        let items: Vec<StreamItem> = EventStream::from_sources(5, &[src]).unwrap().collect();
        let mut last = i64::MIN;
        let mut wm = i64::MIN;
        for it in &items {
            match *it {
                StreamItem::Event(e) => {
                    assert!(e.time >= last && e.time >= wm);
                    // With frequency 1 and no lateness the watermark is the event's unit.
                    assert_eq!(e.time, wm, "{e:?}");
                    last = e.time;
                }
                StreamItem::Watermark { time, .. } => wm = time,
            }
        }
        // About lambda events per unit: ~1000 units, one watermark each, plus the final.
        let wms = items.iter().filter(|i| matches!(i, StreamItem::Watermark { .. })).count();
        assert!((900..=1100).contains(&wms), "{wms} watermarks");
    }

    #[test]
    fn two_sources_interleave_with_independent_watermarks() {
        let a = synthetic(20_000, Gap::Exponential { lambda: 10.0 }, 0.1, 2, 1);
        let b = synthetic(5_000, Gap::Exponential { lambda: 2.0 }, 0.0, 0, 5);
        let mut s = EventStream::from_sources(9, &[a.clone(), b]).unwrap();
        let (events, late) = check(&mut s, &[2, 0]);
        assert_eq!(events, [20_000, 5_000]);
        assert_eq!(late, [0, 0]);
        // Interleaved by time, not one after the other.
        let items: Vec<StreamItem> = EventStream::from_sources(
            9,
            &[a.clone(), synthetic(5_000, Gap::Exponential { lambda: 2.0 }, 0.0, 0, 5)],
        )
        .unwrap()
        .collect();
        let firsts: Vec<u8> = items
            .iter()
            .filter_map(|i| match i {
                StreamItem::Event(e) => Some(e.source),
                _ => None,
            })
            .take(200)
            .collect();
        assert!(firsts.contains(&0) && firsts.contains(&1), "{firsts:?}");
        // Source 0 sees the same events with or without source 1.
        let alone: Vec<StreamItem> = EventStream::from_sources(9, &[a]).unwrap().collect();
        let merged0: Vec<StreamItem> = items
            .into_iter()
            .filter(|i| match i {
                StreamItem::Event(e) => e.source == 0,
                StreamItem::Watermark { source, .. } => *source == 0,
            })
            .collect();
        assert_eq!(alone, merged0);
    }

    #[test]
    fn experiment_stream_for_a_join() {
        let mut e = Experiment::default();
        e.operator.kind = OperatorKind::JoinTumbling;
        e.sources = vec![
            synthetic(1000, Gap::Constant { value: 1.0 }, 0.0, 0, 1),
            synthetic(1000, Gap::Constant { value: 1.0 }, 0.0, 0, 1),
        ];
        e.validate().unwrap();
        let items: Vec<StreamItem> = EventStream::new(&e).unwrap().collect();
        // Lockstep by time: source 0 first on ties, each source's watermark before its event.
        let ev = |i: usize| match items[i] {
            StreamItem::Event(e) => (e.source, e.time),
            other => panic!("item {i}: {other:?}"),
        };
        assert_eq!(items[0], StreamItem::Watermark { source: 0, time: 1 });
        assert_eq!(ev(1), (0, 1));
        assert_eq!(items[2], StreamItem::Watermark { source: 1, time: 1 });
        assert_eq!(ev(3), (1, 1));
        assert_eq!(items[4], StreamItem::Watermark { source: 0, time: 2 });
        assert_eq!(ev(5), (0, 2));
        assert_eq!(items.len(), 2 * (1000 + 1000 + 1));
    }

    fn csv_source(path: PathBuf, header: bool, key: Column, time: Column, lateness: i64) -> Source {
        Source {
            input: SourceInput::Csv(CsvInput {
                path,
                key,
                time,
                time_multiplier: 1e-3,
                header,
                event_type: None,
                type_filter: None,
            }),
            value_size: ValueSize::Constant { bytes: 8 },
            watermark_every: 1,
            lateness_bound: lateness,
            disorder: Disorder::Bounded,
        }
    }

    #[test]
    fn csv_trace_unsorted_counts_late_rows() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.csv");
        // time in ms, multiplier 1e-3 -> seconds.
        std::fs::write(&p, "job,t,type\n7,1000,1\nabc,2500,2\n\n9,\"2100\",1\n3,500,1\n8,4000,1\n")
            .unwrap();
        let src = csv_source(p.clone(), true, Column::Name("job".into()), Column::Index(1), 0);
        let mut s = EventStream::from_sources(0, std::slice::from_ref(&src)).unwrap();
        let items: Vec<StreamItem> = s.by_ref().collect();
        assert!(s.error().is_none());
        let evs: Vec<(u64, i64)> = items
            .iter()
            .filter_map(|i| match i {
                StreamItem::Event(e) => Some((e.key, e.time)),
                _ => None,
            })
            .collect();
        assert_eq!(evs, [(7, 1), (fnv1a(b"abc"), 2), (9, 2), (3, 0), (8, 4)]);
        let c = s.counts();
        assert_eq!((c.generated, c.emitted), (5, 5));
        // Row `3,500` arrives after watermark 2: late (but emitted).
        assert_eq!(c.late, 1);
        // Type filter.
        let mut f = src;
        if let SourceInput::Csv(c) = &mut f.input {
            c.event_type = Some(Column::Name("type".into()));
            c.type_filter = Some("1".into());
        }
        let mut s = EventStream::from_sources(0, &[f]).unwrap();
        assert_eq!(s.by_ref().filter(|i| matches!(i, StreamItem::Event(_))).count(), 4);
        assert_eq!(s.counts().filtered, 1);
    }

    #[test]
    fn csv_bad_rows_name_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.csv");
        std::fs::write(&p, "1,100\n2,xyz\n").unwrap();
        let src = csv_source(p.clone(), false, Column::Index(0), Column::Index(1), 0);
        let mut s = EventStream::from_sources(0, &[src]).unwrap();
        let n = s.by_ref().count();
        assert_eq!(n, 2, "watermark and first event, then the error stops the stream");
        let e = s.error().unwrap().to_string();
        assert!(e.contains(":2:") && e.contains("time (column 1)") && e.contains("xyz"), "{e}");
        std::fs::write(&p, "1,100\n2\n").unwrap();
        let src = csv_source(p.clone(), false, Column::Index(0), Column::Index(1), 0);
        let mut s = EventStream::from_sources(0, &[src]).unwrap();
        let e = loop {
            match s.try_next() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("no error"),
                Err(e) => break e,
            }
        };
        assert!(matches!(e, SourceError::Csv { line: 2, .. }), "{e:?}");
        std::fs::write(&p, "a,b\n").unwrap();
        let src = csv_source(p.clone(), true, Column::Name("k".into()), Column::Index(1), 0);
        let e = EventStream::from_sources(0, &[src]).err().unwrap().to_string();
        assert!(e.contains("\"k\""), "{e}");
        let src =
            csv_source(dir.path().join("none.csv"), false, Column::Index(0), Column::Index(1), 0);
        assert!(matches!(EventStream::from_sources(0, &[src]), Err(SourceError::Io { .. })));
    }

    #[test]
    fn split_csv_quotes() {
        assert_eq!(split_csv("a,\"b,c\",\"d\"\"e\","), ["a", "b,c", "d\"e", ""]);
    }
}
