//! Spatio-temporal event detection over a stream of geotagged posts: the real
//! benchmark application of the DEBS'22 multi-level cache paper (after George et al.,
//! "Real-time spatio-temporal event detection on geotagged social media", 2021), with
//! all of its state in cacheable collections of `spillway-store`.
//!
//! - **Stream** ([`generate`]): posts `(time, lon, lat)` over [`AREA`] (western and
//!   central Europe) for a few hours, from a seeded generator: a background of
//!   population-like density (fifteen cities, each a gaussian of its own spread and
//!   weight, plus a uniform rural share) at a constant rate, and planted *bursts*
//!   ([`Burst`]): a hot spot a few km wide that appears for 10-40 minutes with hundreds
//!   of posts. The bursts are returned with the posts, so tests can check that each is
//!   found.
//! - **Windows**: sliding windows of [`Config::window_ms`] (default 10 minutes) every
//!   [`Config::slide_ms`] (default 5 minutes); window `w` covers
//!   `[w * slide, w * slide + window)`, so each post lands in two windows. A window
//!   closes when the first post at or after its end arrives (posts come in time order);
//!   windows that the stream ends before completing are dropped without a detection.
//!   `slide == window` gives tumbling windows.
//! - **Quadtree per window**: each window's posts go into its own
//!   [`CachedQuadTree`] over [`AREA`] (id `w<index>`), which splits a cell when it
//!   passes [`Config::capacity`] posts, so cells are small where posts are dense. When
//!   the window closes and has been examined, its tree is cleared.
//! - **Detection**: the baseline of a cell is an exponentially weighted average of its
//!   count over the windows in which the cell existed (a [`CachedMap`] from node id to
//!   [`CellStat`], id `baseline`; node ids name the same cell in every window because
//!   all trees share their root bounds). When a window closes, every node of its tree
//!   (inner nodes too) is tested: a cell with a baseline of at least
//!   [`Config::warmup`] windows is *detected* when its count is at least
//!   [`Config::min_count`] and more than [`Config::k`] times its baseline. Of nested
//!   detections only the deepest (smallest) cells are kept. Cells that are not detected
//!   update their baseline (detected ones do not, so a long burst does not teach the
//!   baseline to expect it); cells seen for the first time start one. Each node costs
//!   one read-modify-write of the baseline map.
//! - **Merging**: detected cells of one window that touch form a cluster; a cluster
//!   that touches an event detected in the previous (or the same) window extends that
//!   event, otherwise it starts one. An [`Event`] has its start (the first window's
//!   start), end (the last window's end), the union of its cells and its peak count.
//!
//! The result does not depend on the store or its cache sizes: every read is a point
//! read in an order fixed by the stream (no scan order is used), so the same
//! configuration gives the same events over any store.

use spillway_store::StateStoreExt;
use std::collections::HashSet;
use std::fmt;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use spillway_store::collections::{CachedMap, CachedQuadTree, Cell, QuadTreeOptions, Rect};
use spillway_store::{MemStore, NamespaceSpec, StateStore, StoreOptions};

/// The namespace the application keeps its state in (declare it with
/// [`namespace_spec`]).
pub const NAMESPACE: &str = "event_detection";

/// The area posts fall in: longitude -10..30, latitude 35..60.
pub const AREA: Rect = Rect { min_x: -10.0, min_y: 35.0, max_x: 30.0, max_y: 60.0 };

/// Bytes the tiered store's L1 counts per entry besides key and value, used to size an
/// L1 from a measured state.
pub use spillway_store::tiered::L1_ENTRY_OVERHEAD;

/// The declaration of [`NAMESPACE`] for the store the application runs over.
pub fn namespace_spec() -> NamespaceSpec {
    NamespaceSpec::list(NAMESPACE)
}

/// Parameters of the stream and of the detector.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Posts in the stream, bursts included. Default 200 000.
    pub posts: u64,
    /// Seed of the generator. Default 7.
    pub seed: u64,
    /// Length of the stream in milliseconds. Default 6 hours.
    pub duration_ms: u64,
    /// Window length in milliseconds. Default 10 minutes.
    pub window_ms: u64,
    /// Window slide in milliseconds (equal to the length: tumbling). Default 5 minutes.
    pub slide_ms: u64,
    /// Bursts planted in the stream. Default 8.
    pub bursts: usize,
    /// Posts a quadtree leaf holds before it splits. Default 32.
    pub capacity: u32,
    /// Depth below which cells do not split. Default 14 (cells of about 0.002 deg).
    pub max_depth: u8,
    /// A cell is detected when its count exceeds `k` times its baseline. Default 3.
    pub k: f64,
    /// ... and is at least this many posts. Default 30.
    pub min_count: u64,
    /// Weight of the newest window in a baseline (exponential average). Default 0.25.
    pub alpha: f64,
    /// Windows a cell's baseline needs before the cell is tested. Default 3.
    pub warmup: u32,
    /// Scan the store at each window close and report the peak live state
    /// ([`Report::peak_state`]); meant for a run over [`MemStore`]. Default false.
    pub measure_state: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            posts: 200_000,
            seed: 7,
            duration_ms: 6 * HOUR,
            window_ms: 10 * MINUTE,
            slide_ms: 5 * MINUTE,
            bursts: 8,
            capacity: 32,
            max_depth: 14,
            k: 3.0,
            min_count: 30,
            alpha: 0.25,
            warmup: 3,
            measure_state: false,
        }
    }
}

const MINUTE: u64 = 60_000;
const HOUR: u64 = 60 * MINUTE;

impl Config {
    fn validate(&self) -> Result<()> {
        ensure!(self.window_ms > 0 && self.slide_ms > 0, "window and slide must be positive");
        ensure!(self.duration_ms >= self.window_ms, "the stream must last at least one window");
        ensure!(self.capacity > 0, "the quadtree capacity must be positive");
        ensure!(
            self.k > 0.0 && self.alpha > 0.0 && self.alpha <= 1.0,
            "need k > 0 and 0 < alpha <= 1"
        );
        Ok(())
    }

    /// First window that contains time `t` (windows `first..=t / slide` do).
    fn first_window(&self, t: u64) -> u64 {
        if t >= self.window_ms {
            (t - self.window_ms) / self.slide_ms + 1
        } else {
            0
        }
    }

    fn window_start(&self, w: u64) -> u64 {
        w * self.slide_ms
    }

    fn window_end(&self, w: u64) -> u64 {
        w * self.slide_ms + self.window_ms
    }
}

/// One geotagged post.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Post {
    /// Milliseconds since the start of the stream.
    pub t_ms: u64,
    /// Longitude in degrees.
    pub lon: f64,
    /// Latitude in degrees.
    pub lat: f64,
}

/// A burst the generator planted: extra posts around a point for a while.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Burst {
    /// Longitude of its centre.
    pub lon: f64,
    /// Latitude of its centre.
    pub lat: f64,
    /// Standard deviation of its posts around the centre, in degrees.
    pub sigma_deg: f64,
    /// First millisecond.
    pub start_ms: u64,
    /// Millisecond after the last.
    pub end_ms: u64,
    /// Posts it added.
    pub posts: u64,
}

/// The generated stream: posts in time order, and the bursts planted in it.
#[derive(Clone, Debug, PartialEq)]
pub struct Stream {
    /// Posts, ordered by time.
    pub posts: Vec<Post>,
    /// The planted bursts, in the order they were drawn.
    pub bursts: Vec<Burst>,
}

/// Cities of the background: (longitude, latitude, weight, spread in degrees).
const CITIES: [(f64, f64, f64, f64); 15] = [
    (-0.13, 51.51, 9.0, 0.25), // London
    (2.35, 48.86, 11.0, 0.22), // Paris
    (-3.70, 40.42, 6.5, 0.20), // Madrid
    (2.17, 41.39, 5.0, 0.15),  // Barcelona
    (13.40, 52.52, 4.5, 0.20), // Berlin
    (12.50, 41.90, 4.3, 0.18), // Rome
    (9.19, 45.46, 4.0, 0.15),  // Milan
    (4.90, 52.37, 2.5, 0.12),  // Amsterdam
    (16.37, 48.21, 2.8, 0.12), // Vienna
    (21.01, 52.23, 3.1, 0.15), // Warsaw
    (11.58, 48.14, 2.6, 0.12), // Munich
    (4.84, 45.76, 2.2, 0.10),  // Lyon
    (9.99, 53.55, 2.5, 0.12),  // Hamburg
    (14.42, 50.08, 2.2, 0.10), // Prague
    (4.35, 50.85, 2.1, 0.10),  // Brussels
];

/// Share of background posts spread uniformly over the area (the rest is in cities).
const RURAL_SHARE: f64 = 0.12;

/// A standard normal variate (Box-Muller).
fn normal(rng: &mut StdRng) -> f64 {
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A point drawn around `(lon, lat)` with spread `sigma`, redrawn until it is in the area.
fn around(rng: &mut StdRng, lon: f64, lat: f64, sigma: f64) -> (f64, f64) {
    loop {
        let p = (lon + sigma * normal(rng), lat + sigma * normal(rng));
        if AREA.contains(p.0, p.1) {
            return p;
        }
    }
}

fn uniform_point(rng: &mut StdRng) -> (f64, f64) {
    (rng.random_range(AREA.min_x..AREA.max_x), rng.random_range(AREA.min_y..AREA.max_y))
}

/// Draws the stream of `cfg` (the same for the same configuration).
pub fn generate(cfg: &Config) -> Stream {
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    // Bursts first: where, when, how many posts. Every other one is in a city.
    let earliest = cfg.window_ms * u64::from(cfg.warmup + 3);
    let mut bursts = Vec::with_capacity(cfg.bursts);
    for i in 0..cfg.bursts {
        let (lon, lat) = if i % 2 == 0 {
            let (clon, clat, _, s) = CITIES[rng.random_range(0..CITIES.len())];
            around(&mut rng, clon, clat, 2.0 * s)
        } else {
            uniform_point(&mut rng)
        };
        let len = rng.random_range(10 * MINUTE..=40 * MINUTE).min(cfg.duration_ms);
        let latest = cfg.duration_ms - len;
        let start = rng.random_range(earliest.min(latest)..=latest);
        let share = rng.random_range(0.002..0.005);
        bursts.push(Burst {
            lon,
            lat,
            sigma_deg: rng.random_range(0.01..0.04),
            start_ms: start,
            end_ms: start + len,
            posts: (cfg.posts as f64 * share).round() as u64,
        });
    }
    let burst_posts: u64 = bursts.iter().map(|b| b.posts).sum();
    let background = cfg.posts.saturating_sub(burst_posts);
    let total_weight: f64 = CITIES.iter().map(|c| c.2).sum();
    let mut posts = Vec::with_capacity(cfg.posts as usize);
    for _ in 0..background {
        let t_ms = rng.random_range(0..cfg.duration_ms);
        let (lon, lat) = if rng.random::<f64>() < RURAL_SHARE {
            uniform_point(&mut rng)
        } else {
            let mut pick = rng.random::<f64>() * total_weight;
            let city = CITIES
                .iter()
                .find(|c| {
                    pick -= c.2;
                    pick < 0.0
                })
                .unwrap_or(&CITIES[CITIES.len() - 1]);
            around(&mut rng, city.0, city.1, city.3)
        };
        posts.push(Post { t_ms, lon, lat });
    }
    for b in &bursts {
        for _ in 0..b.posts {
            let t_ms = rng.random_range(b.start_ms..b.end_ms);
            let (lon, lat) = around(&mut rng, b.lon, b.lat, b.sigma_deg);
            posts.push(Post { t_ms, lon, lat });
        }
    }
    posts.sort_by_key(|p| p.t_ms);
    Stream { posts, bursts }
}

/// The baseline of one cell: an exponentially weighted average of its count per
/// window, over the windows in which it existed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellStat {
    /// The average.
    pub ewma: f64,
    /// Windows it has seen.
    pub windows: u32,
}

/// A detected event: cells with unexpectedly many posts in consecutive windows.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Start of the first window it was detected in (ms).
    pub start_ms: u64,
    /// End of the last window it was detected in (ms).
    pub end_ms: u64,
    /// Union of its detected cells.
    pub bounds: Rect,
    /// Windows it was detected in.
    pub windows: u32,
    /// Largest number of posts in its detected cells in one window.
    pub peak_count: u64,
    /// The baseline of those cells in that window.
    pub peak_expected: f64,
    /// Start of that window (ms).
    pub peak_window_ms: u64,
    /// The densest quadtree leaf (posts per square degree) inside its cells in that
    /// window: where the event is.
    pub hotspot: Rect,
    /// The detected cells (quadtree node ids), ascending.
    pub cells: Vec<u64>,
    /// Index of the last window it was detected in.
    last_window: u64,
    /// Posts of its cells in that window.
    last_count: u64,
    last_expected: f64,
    last_hotspot: Rect,
    last_density: f64,
}

impl Event {
    /// Whether the event covers the burst: its cells, widened by two of the burst's
    /// standard deviations, hold the burst's centre, and their times overlap.
    pub fn covers(&self, b: &Burst) -> bool {
        let m = 2.0 * b.sigma_deg;
        let wide = Rect {
            min_x: self.bounds.min_x - m,
            min_y: self.bounds.min_y - m,
            max_x: self.bounds.max_x + m,
            max_y: self.bounds.max_y + m,
        };
        wide.contains(b.lon, b.lat) && self.start_ms < b.end_ms && b.start_ms < self.end_ms
    }
}

/// `h:mm` of a stream time.
pub fn clock(ms: u64) -> String {
    let m = ms / MINUTE;
    format!("{}:{:02}", m / 60, m % 60)
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (x, y) = self.hotspot.center();
        write!(
            f,
            "{}-{}  at ({x:.3}, {y:.3})  in {:.3} x {:.3} deg  peak {} posts (baseline {:.1}) \
             in the window from {}, {} window(s), {} cell(s)",
            clock(self.start_ms),
            clock(self.end_ms),
            self.bounds.max_x - self.bounds.min_x,
            self.bounds.max_y - self.bounds.min_y,
            self.peak_count,
            self.peak_expected,
            clock(self.peak_window_ms),
            self.windows,
            self.cells.len()
        )
    }
}

/// Live state measured over a run: keys and their key + value bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateSize {
    /// Live keys.
    pub keys: u64,
    /// Bytes of their keys and values.
    pub bytes: u64,
}

impl StateSize {
    /// Bytes an L1 needs to hold this state: key + value + [`L1_ENTRY_OVERHEAD`] per key.
    pub fn l1_weight(&self) -> u64 {
        self.bytes + self.keys * L1_ENTRY_OVERHEAD
    }
}

/// What a run found and what it cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Detected events, ordered by start, then position.
    pub events: Vec<Event>,
    /// The bursts planted in the stream.
    pub bursts: Vec<Burst>,
    /// Posts processed.
    pub posts: u64,
    /// Of those, posts of planted bursts.
    pub burst_posts: u64,
    /// Windows examined.
    pub windows: u64,
    /// Quadtree nodes tested (all windows).
    pub cells_tested: u64,
    /// Largest number of nodes in one window's tree.
    pub max_tree_nodes: u64,
    /// The largest live state seen at a window close, if [`Config::measure_state`].
    pub peak_state: Option<StateSize>,
    /// Wall time of the processing (not of the generation).
    pub elapsed: Duration,
}

impl Report {
    /// For each planted burst, the index of the first event that covers it.
    pub fn burst_matches(&self) -> Vec<Option<usize>> {
        self.bursts.iter().map(|b| self.events.iter().position(|e| e.covers(b))).collect()
    }

    /// Events that cover no planted burst.
    pub fn unmatched_events(&self) -> usize {
        self.events.iter().filter(|e| !self.bursts.iter().any(|b| e.covers(b))).count()
    }
}

/// Generates the stream of `cfg` and runs the detector over `store`, which must have
/// the namespace [`NAMESPACE`] (see [`namespace_spec`]) and no collection state of an
/// earlier run in it.
pub fn run(cfg: &Config, store: &mut dyn StateStore) -> Result<Report> {
    let stream = generate(cfg);
    run_stream(cfg, &stream, store)
}

/// Runs the detector over a generated stream (see [`run`]).
pub fn run_stream(cfg: &Config, stream: &Stream, store: &mut dyn StateStore) -> Result<Report> {
    cfg.validate()?;
    let ns = store.namespace(NAMESPACE).context("the event-detection namespace")?;
    let mut det = Detector {
        cfg,
        baseline: CachedMap::new(ns, "baseline"),
        ns,
        open: Vec::new(),
        closed: Vec::new(),
        cells_tested: 0,
        max_tree_nodes: 0,
        peak: None,
    };
    let start = Instant::now();
    let mut next_close = 0u64;
    for p in &stream.posts {
        while cfg.window_end(next_close) <= p.t_ms {
            det.close(store, next_close)?;
            next_close += 1;
        }
        for w in cfg.first_window(p.t_ms).max(next_close)..=p.t_ms / cfg.slide_ms {
            det.tree(w).insert(store, p.lon, p.lat)?;
        }
    }
    while cfg.window_end(next_close) <= cfg.duration_ms {
        det.close(store, next_close)?;
        next_close += 1;
    }
    // Windows the stream ended inside: dropped unexamined.
    if let Some(last) = stream.posts.last() {
        for w in next_close..=last.t_ms / cfg.slide_ms {
            det.tree(w).clear(store)?;
        }
    }
    let elapsed = start.elapsed();
    let mut events = det.closed;
    events.append(&mut det.open);
    events.sort_by(|a, b| {
        (a.start_ms, a.end_ms)
            .cmp(&(b.start_ms, b.end_ms))
            .then(a.bounds.min_x.total_cmp(&b.bounds.min_x))
            .then(a.bounds.min_y.total_cmp(&b.bounds.min_y))
    });
    Ok(Report {
        events,
        bursts: stream.bursts.clone(),
        posts: stream.posts.len() as u64,
        burst_posts: stream.bursts.iter().map(|b| b.posts).sum(),
        windows: next_close,
        cells_tested: det.cells_tested,
        max_tree_nodes: det.max_tree_nodes,
        peak_state: det.peak,
        elapsed,
    })
}

/// Runs `cfg` over a [`MemStore`] in a temporary directory with
/// [`Config::measure_state`] on, and returns the peak live state (the size the
/// tiered store's `--l1 PCT` is a share of).
pub fn measure_state(cfg: &Config) -> Result<StateSize> {
    let dir = tempfile::tempdir().context("temporary directory")?;
    let mut store = MemStore::open(
        StoreOptions::new(dir.path()).memory_budget(u64::MAX / 4).namespace(namespace_spec()),
    )?;
    let cfg = Config { measure_state: true, ..cfg.clone() };
    let report = run(&cfg, &mut store)?;
    Ok(report.peak_state.unwrap_or_default())
}

/// A detected cell of one window.
#[derive(Clone, Copy, Debug)]
struct Detection {
    cell: Cell,
    /// Its baseline.
    expected: f64,
    /// Its densest leaf and that leaf's posts per square degree.
    hotspot: Rect,
    density: f64,
}

/// Detected cells of one window that touch one another.
struct Cluster {
    bounds: Rect,
    count: u64,
    expected: f64,
    cells: Vec<u64>,
    hotspot: Rect,
    density: f64,
}

/// The detector's working state besides the store.
struct Detector<'a> {
    cfg: &'a Config,
    ns: spillway_store::Ns,
    baseline: CachedMap<u64, CellStat>,
    /// Events detected in the last window examined (or the one before).
    open: Vec<Event>,
    closed: Vec<Event>,
    cells_tested: u64,
    max_tree_nodes: u64,
    peak: Option<StateSize>,
}

impl Detector<'_> {
    fn tree(&self, w: u64) -> CachedQuadTree {
        let opts =
            QuadTreeOptions::default().capacity(self.cfg.capacity).max_depth(self.cfg.max_depth);
        CachedQuadTree::new(self.ns, &format!("w{w}"), AREA, opts)
    }

    /// Examines window `w`, merges its detections into the events, drops its tree.
    fn close(&mut self, store: &mut dyn StateStore, w: u64) -> Result<()> {
        if self.cfg.measure_state {
            self.measure(store)?;
        }
        let tree = self.tree(w);
        let cells = tree.cells(store)?;
        self.cells_tested += cells.len() as u64;
        self.max_tree_nodes = self.max_tree_nodes.max(cells.len() as u64);
        // Test and update every node's baseline: one read-modify-write each.
        let mut detected: Vec<Detection> = Vec::new();
        for cell in &cells {
            let mut hit = None;
            let cfg = self.cfg;
            self.baseline.update(store, &cell.id, |stat| {
                let n = cell.count as f64;
                Some(match stat {
                    None => CellStat { ewma: n, windows: 1 },
                    Some(s) => {
                        if s.windows >= cfg.warmup
                            && cell.count >= cfg.min_count
                            && n > cfg.k * s.ewma.max(1.0)
                        {
                            hit = Some(s.ewma);
                            s
                        } else {
                            CellStat {
                                ewma: s.ewma + cfg.alpha * (n - s.ewma),
                                windows: s.windows.saturating_add(1),
                            }
                        }
                    }
                })
            })?;
            if let Some(expected) = hit {
                let (hotspot, density) = densest_leaf(&cells, cell);
                detected.push(Detection { cell: *cell, expected, hotspot, density });
            }
        }
        // Keep the deepest detections: drop a cell with a detected cell below it.
        let mut above: HashSet<u64> = HashSet::new();
        for d in &detected {
            let mut id = d.cell.id;
            while let Some(p) = CachedQuadTree::parent_id(id) {
                if !above.insert(p) {
                    break;
                }
                id = p;
            }
        }
        detected.retain(|d| !above.contains(&d.cell.id));
        let clusters = cluster(&detected);
        self.merge(w, clusters);
        tree.clear(store)?;
        Ok(())
    }

    /// Extends the open events with the clusters of window `w`, or opens new ones;
    /// events not extended since window `w - 1` are closed.
    fn merge(&mut self, w: u64, clusters: Vec<Cluster>) {
        let cfg = self.cfg;
        let (start, end) = (cfg.window_start(w), cfg.window_end(w));
        for c in clusters {
            let found = self
                .open
                .iter_mut()
                .find(|e| e.last_window + 1 >= w && e.bounds.intersects(&c.bounds));
            let e = match found {
                Some(e) => e,
                None => {
                    self.open.push(Event {
                        start_ms: start,
                        end_ms: end,
                        bounds: c.bounds,
                        windows: 0,
                        peak_count: 0,
                        peak_expected: 0.0,
                        peak_window_ms: start,
                        hotspot: c.hotspot,
                        cells: Vec::new(),
                        last_window: u64::MAX,
                        last_count: 0,
                        last_expected: 0.0,
                        last_hotspot: c.hotspot,
                        last_density: f64::NEG_INFINITY,
                    });
                    self.open.last_mut().expect("just pushed")
                }
            };
            if e.last_window != w {
                e.windows += 1;
                e.last_window = w;
                e.end_ms = end;
                e.last_count = 0;
                e.last_expected = 0.0;
                e.last_density = f64::NEG_INFINITY;
            }
            e.last_count += c.count;
            e.last_expected += c.expected;
            if c.density > e.last_density {
                e.last_density = c.density;
                e.last_hotspot = c.hotspot;
            }
            // A new peak, or more of the peak window.
            if e.last_count > e.peak_count || e.peak_window_ms == start {
                e.peak_count = e.last_count;
                e.peak_expected = e.last_expected;
                e.peak_window_ms = start;
                e.hotspot = e.last_hotspot;
            }
            e.bounds = e.bounds.union(&c.bounds);
            e.cells.extend(c.cells);
            e.cells.sort_unstable();
            e.cells.dedup();
        }
        let (still, done): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.open).into_iter().partition(|e| e.last_window == w);
        self.open = still;
        self.closed.extend(done);
    }

    /// Adds up the live keys and values of the namespace; keeps the peak.
    fn measure(&mut self, store: &mut dyn StateStore) -> Result<()> {
        let mut now = StateSize::default();
        store.scan_prefix(self.ns, &[], &mut |k, v| {
            now.keys += 1;
            now.bytes += (k.len() + v.len()) as u64;
            true
        })?;
        let peak = self.peak.get_or_insert(now);
        if now.l1_weight() > peak.l1_weight() {
            *peak = now;
        }
        Ok(())
    }
}

/// The densest leaf (posts per square degree) in the subtree of `top` among the
/// nodes of one window (`cells`, every node of its tree), and its density.
fn densest_leaf(cells: &[Cell], top: &Cell) -> (Rect, f64) {
    let under = |c: &Cell| {
        let mut id = c.id;
        for _ in top.depth..c.depth {
            id = CachedQuadTree::parent_id(id).unwrap_or(0);
        }
        c.depth >= top.depth && id == top.id
    };
    let mut best = (top.bounds, top.count as f64 / top.bounds.area());
    for c in cells.iter().filter(|c| c.leaf && c.count > 0 && under(c)) {
        let d = c.count as f64 / c.bounds.area();
        if d > best.1 {
            best = (c.bounds, d);
        }
    }
    best
}

/// Groups detected cells that touch (union-find); clusters come in the order of their
/// first cell, cells ascending.
fn cluster(detected: &[Detection]) -> Vec<Cluster> {
    let n = detected.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for i in 0..n {
        for j in i + 1..n {
            if detected[i].cell.bounds.intersects(&detected[j].cell.bounds) {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let mut out: Vec<(usize, Cluster)> = Vec::new();
    for (i, d) in detected.iter().enumerate() {
        let r = root(&mut parent, i);
        match out.iter_mut().find(|(root, _)| *root == r) {
            Some((_, c)) => {
                c.bounds = c.bounds.union(&d.cell.bounds);
                c.count += d.cell.count;
                c.expected += d.expected;
                c.cells.push(d.cell.id);
                if d.density > c.density {
                    c.density = d.density;
                    c.hotspot = d.hotspot;
                }
            }
            None => out.push((
                r,
                Cluster {
                    bounds: d.cell.bounds,
                    count: d.cell.count,
                    expected: d.expected,
                    cells: vec![d.cell.id],
                    hotspot: d.hotspot,
                    density: d.density,
                },
            )),
        }
    }
    out.into_iter()
        .map(|(_, mut c)| {
            c.cells.sort_unstable();
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_of_a_time() {
        let cfg = Config::default();
        assert_eq!(cfg.first_window(0), 0);
        assert_eq!(cfg.first_window(9 * MINUTE), 0);
        assert_eq!(cfg.first_window(10 * MINUTE), 1);
        assert_eq!(cfg.first_window(12 * MINUTE), 1);
        assert_eq!(12 * MINUTE / cfg.slide_ms, 2);
        let tumbling = Config { slide_ms: 10 * MINUTE, ..Config::default() };
        assert_eq!(tumbling.first_window(25 * MINUTE), 2);
    }

    #[test]
    fn the_generator_is_seeded() {
        let cfg = Config { posts: 5_000, ..Config::default() };
        let a = generate(&cfg);
        assert_eq!(a, generate(&cfg));
        assert_eq!(a.posts.len(), 5_000);
        assert!(a.posts.windows(2).all(|p| p[0].t_ms <= p[1].t_ms));
        assert!(a.posts.iter().all(|p| AREA.contains(p.lon, p.lat) && p.t_ms < cfg.duration_ms));
        assert_ne!(a, generate(&Config { seed: 8, ..cfg }));
    }

    #[test]
    fn touching_cells_cluster() {
        let cell = |id, x0, y0, x1, y1| {
            let bounds = Rect::new(x0, y0, x1, y1);
            let cell = Cell { id, depth: 1, bounds, count: 40, leaf: true };
            Detection { cell, expected: 5.0, hotspot: bounds, density: 40.0 }
        };
        let cs = cluster(&[
            cell(9, 0.0, 0.0, 1.0, 1.0),
            cell(3, 5.0, 5.0, 6.0, 6.0),
            cell(4, 1.0, 0.0, 2.0, 1.0),
        ]);
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0].cells, vec![4, 9]);
        assert_eq!(cs[0].count, 80);
        assert_eq!(cs[1].cells, vec![3]);
    }
}
