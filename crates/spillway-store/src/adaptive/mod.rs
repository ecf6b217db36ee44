//! AdaptiveStore: each namespace in the layout that suits how it is accessed, chosen
//! statically from the namespace's [`AccessHint`] and at run time by an observer, with
//! migration between layouts in the background, in bounded steps.
//!
//! # Design
//! - **Parts.** The store owns up to three stores, one per [`Layout`], each in a
//!   subdirectory and each declaring every namespace (so a namespace handle means the
//!   same in all of them): `hash/` a [`HashLogStore`] (point updates), `list/` an
//!   [`AppendLogStore`](crate::AppendLogStore) (chunked append lists), `time/` a
//!   [`TimeLogStore`](crate::TimeLogStore) (time-ordered range reads). A part is opened
//!   when the first namespace needs it. Every operation on a namespace that is not
//!   migrating goes straight to its part (one `match` and an observer update on the hot
//!   path).
//! - **Static choice.** At first open each namespace starts in the layout its hint names:
//!   [`AccessHint::Point`] → hash, [`AccessHint::ListAppend`] → list,
//!   [`AccessHint::Range`] → time (the APSys'18 paper's choice by operator type).
//! - **Dynamic choice.** Each namespace has an [`observer`] that weighs its recent
//!   operations with a documented cost model; every
//!   [`decide_every`](AdaptiveOptions::decide_every) operations of a namespace, if
//!   another layout is cheaper than its current one by more than the
//!   [`hysteresis`](AdaptiveOptions::hysteresis), the namespace starts migrating there.
//!   One namespace migrates at a time. A range read that had to walk an unordered
//!   layout decides at once and, during a migration, moves up to 4096 entries right
//!   after it (a walk costs about as much, and each walk until the end costs it again).
//! - **Migration in bounded steps.** While namespace N migrates from A to B, every
//!   operation on the store is followed by one step that walks A with
//!   [`StateStore::scan_step`] for at most [`step_entries`](AdaptiveOptions::step_entries)
//!   entries or [`step_bytes`](AdaptiveOptions::step_bytes) bytes, writes them to B
//!   and deletes them from A. Operations on N meanwhile: a read looks in B, then in A
//!   (a key is never in both between operations); a write (put, delete, merge,
//!   read-modify-write) first moves the key's value from A to B, if A holds it, then
//!   applies to B; scans merge both. So A receives no new entry and the walk ends. A
//!   move puts into B, then deletes from A; if A refuses the delete, the copy in B is
//!   deleted again (and if B refuses that, the store is poisoned).
//! - **Abandoned migrations.** A step is background work of the operation it follows,
//!   which is complete by then, so a step's failure is never that operation's error.
//!   If B refuses an entry with an error that does not poison (a value larger than its
//!   records, left by a directory whose parts had larger pages; see Limits), the entry
//!   stays in A and the migration is abandoned: N migrates back from B to A, from the
//!   start of B, in the same bounded steps (the entries moved so far and those written
//!   since go back; A held the former and the shared value cap bounds the latter).
//!   [`StoreStats::layouts`] counts it and says why (`failed_migrations`,
//!   `migration_error`), [`finish_migration`](AdaptiveStore::finish_migration) returns
//!   [`Error::MigrationAbandoned`] when it ran the refused step, and neither the
//!   observer nor the forced-migration knob moves N to B again until the store is
//!   reopened ([`migrate`](AdaptiveStore::migrate) may). An update of a key whose value
//!   B refuses abandons the migration the same way and applies in A. If A refuses an
//!   entry on the way back, neither layout holds N: the store is poisoned, naming both.
//! - **Range reads in every layout.** Every namespace answers ordered scans and
//!   cursors ([`is_ordered`](StateStore::is_ordered) is true): in the time layout
//!   natively; in the hash and list layouts by walking the namespace, keeping the
//!   entries within the bounds and sorting them (O(namespace) per range read — the
//!   price the observer charges them, which moves a range-read namespace to the time
//!   layout).
//! - **Memory.** One budget, shared: the parts that hold namespaces get it. Each part
//!   opens with a share by weights that depend on the declared hints only (so every
//!   open recovers its parts alike): 4 for the hash layout (the observer's usual target
//!   for point-like and short-list state), 2 for each other layout some namespace's
//!   hint names, 1 for the rest. From then on the budget follows the namespaces: an open
//!   part that holds none (as its layout or as a migration's target) keeps only what it
//!   needs (its index and minimum pages, at least 1/64 of the budget), and the parts
//!   that hold namespaces share the rest by weight (hash 4, list and time 2). The
//!   targets change when a migration starts or ends; the budgets move toward them in
//!   bounded steps after operations, like migration steps: one step takes at most
//!   [`BUDGET_STEP`] (1 MiB) from one part (writing at most that much of its pages, or
//!   flushing its memtables) and gives what is free to the parts below their targets. A part that
//!   cannot shrink (its index needs the memory) keeps its budget. Measured: hashlog
//!   slows down sharply once its log outgrows its budget (tumbling.keyed.incremental at
//!   1M events: 0.3-0.5x when the hash part had 128 or 170 of 256 MiB). The hash part's
//!   page size is chosen from its opening share (1/16 of it, between 64 KiB and 4 MiB,
//!   or [`page_size`](AdaptiveOptions::page_size)), which also bounds its values.
//!
//! # FORMAT and checkpoint protocol
//! The directory holds `STORE` (store `adaptive`), `MANIFEST-<seq>` files (see
//! [`crate::manifest`]) and the parts' subdirectories `hash/`, `list/`, `time/`, each
//! a store directory of its own format. An adaptive checkpoint is a two-phase commit:
//! 1. checkpoint every open part (each atomic on its own);
//! 2. publish `MANIFEST-<seq>` naming each part's checkpoint (`part.hash=<seq>`, 0 when
//!    the part was not open) and each namespace's state: `ns.<i>=<layout>` or, while
//!    migrating, `ns.<i>=<from>><to>@<token>` with the walk's resume token in hex
//!    (`-` before the first step). A namespace moving back after an abandoned
//!    migration is recorded as migrating back (`<to>><from>@<token>`): a migration is
//!    recorded as done only once its walk ended. The checkpoint exists from this
//!    rename on.
//! 3. Delete adaptive manifests older than the previous one.
//!
//! Recovery opens each part at exactly the checkpoint the newest manifest names
//! ([`StoreOptions::recover_at`]), discarding any newer part checkpoint left by a crash
//! between steps 1 and 2, and resumes a migration from its recorded token (the part
//! being walked recovered the state that token refers to). A part the manifest does not
//! name is opened empty when needed. So a crash at any point, during a migration too,
//! recovers the last completed adaptive checkpoint exactly.
//!
//! Errors of a part that poison (I/O, corruption) poison the adaptive store (it refuses
//! reads and writes until reopened); a part's refusals (a value too large, a full
//! index) are returned by the operation they refuse, which changes nothing, or, met by
//! a migration step, abandon the migration (above).
//!
//! # Limits
//! A namespace can migrate to any layout, so every layout must hold whatever it
//! accepted: each part bounds values, lists included, by what a record of the hash
//! part holds and what a list chunk of the list part holds (its key is 4 bytes
//! longer), i.e. `(room - key length) & !7` bytes where `room` is the smaller of the
//! two parts' pages less their record overheads (64 bytes, and 4 more for the list
//! part's chunk number), and never more than [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN).
//! Keys of list namespaces are bounded by the list layout's,
//! [`MAX_KEY_LEN`](crate::MAX_KEY_LEN) less 4 bytes. Both are checked when the value
//! is written ([`Error::ValueTooLarge`], [`Error::KeyTooLarge`], the store unchanged),
//! so a migration never meets a value or key its target refuses, with one exception:
//! values already in a directory opened again with smaller pages (a recovered part
//! keeps its pages, a new part gets the ones its options say, and the cap follows the
//! smaller) can exceed what a new part holds. A migration that meets one is abandoned
//! (see Design).

mod observer;

/// Most memory one budget step takes from a part (see Memory): at most this much of its
/// pages written or memtables flushed after one operation.
const BUDGET_STEP: u64 = 1 << 20;

use std::ops::Bound;
use std::sync::Arc;

use self::observer::{Observer, Seen};
use crate::backend::StoreCore;
use crate::error::{Error, Result};
use crate::io::{join, Fs};
use crate::manifest::{self, Manifest};
use crate::stats::NamespaceLayout;
use crate::{
    AccessHint, CheckpointInfo, HashLogOptions, HashLogStore, MergeOp, Ns, Order, RmwFn,
    StateStore, StateStoreExt, StoreOptions, StoreStats, ValueCap, Visitor,
};

const FORMAT_VERSION: u32 = 1;
/// Entries a migration moves right after a range read that walked its unordered
/// source (see `AdaptiveStore::after_walk`).
const WALK_BOOST: u64 = 4096;
/// Walked entries that count as one moved entry against the boost after a walk (see
/// `AdaptiveStore::after_walk`). Chosen in `bench phase` (a 160k-entry namespace
/// moving from hash to time): at 32 or 128 the boost was too small and the range phase
/// ran at 0.28-0.72x timelog; at 512, 0.77-0.82x (a full boost: 0.74-0.85x) with
/// pauses of 8-14 ms (a full boost: 11-19 ms).
const WALKED_PER_MOVE: u64 = 512;
const STORE_NAME: &str = "adaptive";

/// The layouts an adaptive store can keep a namespace in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Hash index over a hybrid log ([`HashLogStore`]): point reads and updates.
    Hash,
    /// Chunked per-key append lists ([`AppendLogStore`](crate::AppendLogStore)).
    List,
    /// Time-ordered segments ([`TimeLogStore`](crate::TimeLogStore)): range reads.
    Time,
}

impl Layout {
    /// All layouts.
    pub const ALL: [Layout; 3] = [Layout::Hash, Layout::List, Layout::Time];

    /// Position in [`Layout::ALL`].
    pub fn index(self) -> usize {
        match self {
            Layout::Hash => 0,
            Layout::List => 1,
            Layout::Time => 2,
        }
    }

    /// The store that implements the layout ("hashlog", "appendlog", "timelog").
    pub fn name(self) -> &'static str {
        match self {
            Layout::Hash => "hashlog",
            Layout::List => "appendlog",
            Layout::Time => "timelog",
        }
    }

    /// The layout a namespace with this hint starts in.
    pub fn for_hint(hint: AccessHint) -> Layout {
        match hint {
            AccessHint::ListAppend => Layout::List,
            AccessHint::Range => Layout::Time,
            _ => Layout::Hash,
        }
    }

    fn dir(self) -> &'static str {
        match self {
            Layout::Hash => "hash",
            Layout::List => "list",
            Layout::Time => "time",
        }
    }

    fn parse(s: &str) -> Option<Layout> {
        Layout::ALL.into_iter().find(|l| l.dir() == s)
    }
}

/// Tuning of an [`AdaptiveStore`]. Every setter documents its default.
#[derive(Clone, Debug)]
#[must_use]
pub struct AdaptiveOptions {
    dynamic: bool,
    window_ops: u64,
    decide_every: u64,
    hysteresis: f64,
    step_entries: usize,
    step_bytes: usize,
    page_size: Option<usize>,
    forced: Option<(u64, u64)>,
}

impl Default for AdaptiveOptions {
    fn default() -> Self {
        AdaptiveOptions {
            dynamic: true,
            window_ops: 8192,
            decide_every: 1024,
            hysteresis: 0.5,
            step_entries: 32,
            step_bytes: 256 << 10,
            page_size: None,
            forced: None,
        }
    }
}

impl AdaptiveOptions {
    /// Whether the observer may migrate namespaces (default true; false keeps the
    /// static choice).
    pub fn dynamic(mut self, on: bool) -> Self {
        self.dynamic = on;
        self
    }

    /// Operations after which the observer's counts are halved (default 8192).
    pub fn window_ops(mut self, ops: u64) -> Self {
        self.window_ops = ops;
        self
    }

    /// Operations of a namespace between two decisions (default 1024).
    pub fn decide_every(mut self, ops: u64) -> Self {
        self.decide_every = ops.max(1);
        self
    }

    /// How much cheaper (a fraction of the current layout's estimated cost) another
    /// layout must be before a namespace migrates (default 0.5).
    pub fn hysteresis(mut self, f: f64) -> Self {
        self.hysteresis = f;
        self
    }

    /// Most entries one migration step moves (default 32).
    pub fn step_entries(mut self, n: usize) -> Self {
        self.step_entries = n.max(1);
        self
    }

    /// Most bytes one migration step moves, past its first entry (default 256 KiB).
    pub fn step_bytes(mut self, n: usize) -> Self {
        self.step_bytes = n.max(1);
        self
    }

    /// Page size of the hash and list parts' hybrid logs (default: 1/16 of the part's
    /// memory share, between 64 KiB and 4 MiB). It bounds their values.
    pub fn page_size(mut self, bytes: usize) -> Self {
        self.page_size = Some(bytes);
        self
    }

    /// Test and chaos knob: about every `every` operations (jittered by `seed`), when
    /// no migration is under way, start migrating a random namespace to a random other
    /// layout, whatever the observer says (default off).
    pub fn forced_migrations(mut self, every: u64, seed: u64) -> Self {
        self.forced = Some((every.max(1), seed));
        self
    }
}

/// An open part, typed so that the adaptive store can set its value bound.
enum Part {
    Hash(Box<HashLogStore>),
    List(Box<crate::AppendLogStore>),
    Time(Box<crate::TimeLogStore>),
}

impl Part {
    fn store(&mut self) -> &mut dyn StateStore {
        match self {
            Part::Hash(s) => &mut **s,
            Part::List(s) => &mut **s,
            Part::Time(s) => &mut **s,
        }
    }

    fn store_ref(&self) -> &dyn StateStore {
        match self {
            Part::Hash(s) => &**s,
            Part::List(s) => &**s,
            Part::Time(s) => &**s,
        }
    }

    fn set_value_cap(&mut self, cap: ValueCap) {
        match self {
            Part::Hash(s) => s.set_value_cap(cap, usize::MAX),
            Part::List(s) => s.set_value_cap(cap),
            Part::Time(s) => s.set_value_cap(cap),
        }
    }

    fn min_budget(&self) -> u64 {
        match self {
            Part::Hash(s) => s.min_budget(),
            Part::List(s) => s.min_budget(),
            Part::Time(s) => s.min_budget(),
        }
    }

    fn set_memory_budget(&mut self, budget: u64) -> Result<()> {
        match self {
            Part::Hash(s) => s.set_memory_budget(budget),
            Part::List(s) => s.set_memory_budget(budget),
            Part::Time(s) => s.set_memory_budget(budget),
        }
    }

    /// What a record of the part's hybrid log holds besides its key (hash and list).
    fn record_room(&self) -> Option<usize> {
        match self {
            Part::Hash(s) => Some(s.record_room()),
            Part::List(s) => Some(s.record_room()),
            Part::Time(_) => None,
        }
    }
}

struct Migration {
    to: Layout,
    /// Resume token of the walk over the source part; `None` before the first step.
    token: Option<Vec<u8>>,
    /// Moving back after an abandoned migration (not recorded in the manifest: a
    /// reopen resumes it as an ordinary migration).
    back: bool,
}

/// Why a migration step failed: the error and the key of the entry that could not be
/// moved (none: the walk failed). Boxed: the error path is cold.
type StepError = Box<(Error, Option<Vec<u8>>)>;

/// An abandoned migration: the target `to` refused `key` (none: the walk failed).
struct Failure {
    from: Layout,
    to: Layout,
    key: Option<Vec<u8>>,
    cause: String,
}

impl Failure {
    fn error(&self, namespace: &str) -> Error {
        Error::MigrationAbandoned(Box::new(crate::error::AbandonedMigration {
            namespace: namespace.to_string(),
            from: self.from.name(),
            to: self.to.name(),
            key: self.key.as_deref().map(hex).unwrap_or_default(),
            cause: self.cause.clone(),
        }))
    }
}

struct NsState {
    layout: Layout,
    migration: Option<Migration>,
    observer: Observer,
    list: bool,
    migrations: u64,
    moved: u64,
    /// Layouts whose part refused an entry of this namespace: the observer and the
    /// forced-migration knob do not choose them again until reopened.
    refused: [bool; 3],
    failed_migrations: u64,
    last_failure: Option<Failure>,
}

/// The adaptive store. See the [module docs](self).
pub struct AdaptiveStore {
    opts: StoreOptions,
    aopts: AdaptiveOptions,
    fs: Arc<dyn Fs>,
    parts: [Option<Part>; 3],
    /// The bound on values every part keeps (see the module docs, Limits); set once
    /// the parts named by the recovered checkpoint are open.
    value_cap: Option<ValueCap>,
    /// Each part's memory budget now, and where the budget steps move it (see Memory).
    part_budget: [u64; 3],
    budget_target: [u64; 3],
    /// The value lengths a batch's gets saw, for the observer (kept to reuse).
    batch_sizes: Vec<usize>,
    /// Whether `part_budget` still differs from `budget_target`.
    rebalancing: bool,
    ns: Vec<NsState>,
    /// The namespace migrating now, if any.
    migrating: Option<usize>,
    ops: u64,
    rng: u64,
    /// The sequence number, the poison flag and the checkpoint counters (the operation
    /// counters are the parts').
    core: StoreCore,
    move_buf: Vec<(Vec<u8>, Vec<u8>)>,
    scratch: Vec<u8>,
    /// Decisions that looked at list merges (see [`Self::decide`]).
    decisions: u64,
    /// Whether the state seemed to fit in memory at the last look.
    in_memory: bool,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

fn in_bounds(k: &[u8], start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    let lo = match start {
        Bound::Included(s) => k >= s,
        Bound::Excluded(s) => k > s,
        Bound::Unbounded => true,
    };
    let hi = match end {
        Bound::Included(e) => k <= e,
        Bound::Excluded(e) => k < e,
        Bound::Unbounded => true,
    };
    lo && hi
}

impl AdaptiveStore {
    /// Opens the store in `opts.dir`, recovering its last checkpoint if there is one; its
    /// files go through [`StoreOptions::fs`] (default the real file system).
    pub fn open(opts: StoreOptions, aopts: AdaptiveOptions) -> Result<Self> {
        let fs = opts.file_system();
        Self::open_with_fs(opts, aopts, fs)
    }

    /// Like [`open`](Self::open), doing all file I/O through `fs` (the test seam; the
    /// parts use it too).
    pub fn open_with_fs(
        opts: StoreOptions,
        aopts: AdaptiveOptions,
        fs: Arc<dyn Fs>,
    ) -> Result<Self> {
        opts.validate()?;
        opts.refuse_direct_io("adaptive")?;
        let dir = opts.dir.clone();
        manifest::init_dir(&*fs, &dir, STORE_NAME, FORMAT_VERSION)?;
        let retained = manifest::list_manifests(&*fs, &dir)?;
        let recovered = opts.checkpoint_to_recover(&retained)?;
        let mut ns: Vec<NsState> = opts
            .namespaces
            .iter()
            .map(|n| NsState {
                layout: Layout::for_hint(n.hint),
                migration: None,
                observer: Observer::new(aopts.window_ops),
                list: matches!(n.merge, MergeOp::ListAppend),
                migrations: 0,
                moved: 0,
                refused: [false; 3],
                failed_migrations: 0,
                last_failure: None,
            })
            .collect();
        let mut part_seq = [0u64; 3];
        if let Some(seq) = recovered {
            let m = manifest::read_manifest(&*fs, &dir, seq)?;
            let mpath = join(&dir, &manifest::manifest_name(seq));
            if m.get_str(&mpath, "store")? != STORE_NAME {
                return Err(Error::NotAStore {
                    path: mpath,
                    reason: "manifest of another store".into(),
                });
            }
            m.check_namespaces(&opts)?;
            for l in Layout::ALL {
                part_seq[l.index()] = m.get_u64(&mpath, &format!("part.{}", l.dir()))?;
            }
            for (i, st) in ns.iter_mut().enumerate() {
                let v = m.get_str(&mpath, &format!("ns.{i}"))?;
                let at = m.offset_of(&format!("ns.{i}"));
                let bad =
                    || Error::corrupt(&mpath, at, format!("bad namespace state ns.{i}={v:?}"));
                match v.split_once('>') {
                    None => st.layout = Layout::parse(v).ok_or_else(bad)?,
                    Some((from, rest)) => {
                        let (to, token) = rest.split_once('@').ok_or_else(bad)?;
                        st.layout = Layout::parse(from).ok_or_else(bad)?;
                        let to = Layout::parse(to).ok_or_else(bad)?;
                        let token =
                            if token == "-" { None } else { Some(unhex(token).ok_or_else(bad)?) };
                        st.migration = Some(Migration { to, token, back: false });
                    }
                }
            }
        }
        manifest::discard_newer(&*fs, &dir, &retained, recovered.unwrap_or(0))?;
        // Shares depend on the declared hints only, so they are the same at every open
        // whatever migrations happened in between.
        // The hash layout is where the observer sends point-like and short-list state
        // whatever its hint, so it always gets a full share.
        let mut named = [true, false, false];
        for spec in &opts.namespaces {
            named[Layout::for_hint(spec.hint).index()] = true;
        }
        let weight = Layout::ALL.map(|l| if named[l.index()] { Self::budget_weight(l) } else { 1 });
        let total: u64 = weight.iter().sum();
        let part_budget = weight.map(|w| opts.memory_budget / total * w);
        let migrating = ns.iter().position(|s| s.migration.is_some());
        let seed = aopts.forced.map_or(0, |(_, s)| s);
        let mut store = AdaptiveStore {
            opts,
            aopts,
            fs,
            parts: [None, None, None],
            value_cap: None,
            part_budget,
            budget_target: part_budget,
            batch_sizes: Vec::new(),
            rebalancing: false,
            ns,
            migrating,
            core: StoreCore { seq: recovered.unwrap_or(0), ..StoreCore::default() },
            ops: 0,
            rng: seed ^ 0x9E37_79B9_7F4A_7C15,
            move_buf: Vec::new(),
            scratch: Vec::new(),
            decisions: 0,
            in_memory: true,
        };
        // Parts named by the checkpoint are opened at exactly its part checkpoints;
        // parts some namespace needs are opened now too (empty if not named).
        let mut needed = [false; 3];
        for st in &store.ns {
            needed[st.layout.index()] = true;
            if let Some(m) = &st.migration {
                needed[m.to.index()] = true;
            }
        }
        // With dynamic choice every part may be needed: open them all now, so a
        // migration does not pause for a part's directory creation and fsyncs.
        for l in Layout::ALL {
            if needed[l.index()] || part_seq[l.index()] > 0 || store.aopts.dynamic {
                store.open_part(l, part_seq[l.index()])?;
            }
        }
        // Every part accepts what a record of the hash part holds, and what a list
        // chunk of the list part holds (its key is 4 bytes longer): a part opened later
        // is new and gets the pages its options say.
        let room = |l: Layout| {
            store.parts[l.index()]
                .as_ref()
                .and_then(Part::record_room)
                .unwrap_or_else(|| store.hashlog_options(l).record_room())
        };
        let cap = ValueCap {
            room: room(Layout::Hash).min(room(Layout::List) - crate::appendlog::CHUNK_NO_LEN),
        };
        for p in store.parts.iter_mut().flatten() {
            p.set_value_cap(cap);
        }
        store.value_cap = Some(cap);
        store.retarget_budgets();
        Ok(store)
    }

    /// Sets where the budget steps move the parts' memory: an open part that holds no
    /// namespace (as its layout or as a migration's target) keeps what it needs now
    /// (its index and minimum pages, at least 1/64 of the budget); the open parts that
    /// hold namespaces share the rest by the layouts' weights (hash 4, list and time 2).
    /// A part not open keeps its share for when it opens.
    fn retarget_budgets(&mut self) {
        let mut held = [false; 3];
        for st in &self.ns {
            held[st.layout.index()] = true;
            if let Some(m) = &st.migration {
                held[m.to.index()] = true;
            }
        }
        let total = self.opts.memory_budget;
        let mut target = self.part_budget;
        let mut left = total;
        let mut weights = 0;
        for l in Layout::ALL {
            let x = l.index();
            match &self.parts[x] {
                None => left = left.saturating_sub(self.part_budget[x]),
                Some(p) if !held[x] => {
                    target[x] = p.min_budget().max(total / 64);
                    left = left.saturating_sub(target[x]);
                }
                Some(_) => weights += Self::budget_weight(l),
            }
        }
        for l in Layout::ALL {
            let x = l.index();
            if self.parts[x].is_some() && held[x] {
                target[x] = left / weights.max(1) * Self::budget_weight(l);
            }
        }
        self.budget_target = target;
        self.rebalancing = target != self.part_budget;
    }

    fn budget_weight(l: Layout) -> u64 {
        match l {
            Layout::Hash => 4,
            Layout::List | Layout::Time => 2,
        }
    }

    /// One bounded step toward the target budgets (background work after an
    /// operation, like a migration step): shrinks one part by at most
    /// [`BUDGET_STEP`] (evicting or flushing at most that much of its memory), then
    /// gives what the parts hold less than the budget to the parts below their targets.
    /// A part that cannot shrink further (its index grew) keeps its budget, and the
    /// target follows.
    fn budget_step(&mut self) -> Result<()> {
        if let Some(l) = Layout::ALL.into_iter().find(|l| {
            self.parts[l.index()].is_some()
                && self.part_budget[l.index()] > self.budget_target[l.index()]
        }) {
            let x = l.index();
            let b = self.budget_target[x].max(self.part_budget[x].saturating_sub(BUDGET_STEP));
            let p = self.parts[x].as_mut().expect("open");
            match p.set_memory_budget(b) {
                Ok(()) => self.part_budget[x] = b,
                Err(e) if !e.poisons() => self.budget_target[x] = self.part_budget[x],
                Err(e) => return Err(e),
            }
        }
        let used: u64 = self.part_budget.iter().sum();
        let mut free = self.opts.memory_budget.saturating_sub(used);
        for l in Layout::ALL {
            let x = l.index();
            if free == 0 || self.parts[x].is_none() || self.part_budget[x] >= self.budget_target[x]
            {
                continue;
            }
            let b = self.part_budget[x] + free.min(self.budget_target[x] - self.part_budget[x]);
            let p = self.parts[x].as_mut().expect("open");
            match p.set_memory_budget(b) {
                Ok(()) => {
                    free -= b - self.part_budget[x];
                    self.part_budget[x] = b;
                }
                Err(e) if !e.poisons() => self.budget_target[x] = self.part_budget[x],
                Err(e) => return Err(e),
            }
        }
        // Done once no part is over its target: growth then used what was free.
        self.rebalancing = Layout::ALL.into_iter().any(|l| {
            self.parts[l.index()].is_some()
                && self.part_budget[l.index()] > self.budget_target[l.index()]
        });
        Ok(())
    }

    fn part_options(&self, l: Layout, at: u64) -> StoreOptions {
        let mut o = self.opts.clone();
        o.dir = join(&self.opts.dir, l.dir());
        o.memory_budget = self.part_budget[l.index()];
        o.recover_at = Some(at);
        if l == Layout::Time {
            for n in &mut o.namespaces {
                n.hint = AccessHint::Range;
            }
        }
        o
    }

    fn hashlog_options(&self, l: Layout) -> HashLogOptions {
        let share = self.part_budget[l.index()];
        let mut h = match self.aopts.page_size {
            Some(page) => HashLogOptions::with_pages(page),
            None => HashLogOptions::for_budget(share),
        };
        if let Some(k) = self.opts.expected_keys {
            h = h.expected_keys(k.min(share / 64));
        }
        h
    }

    /// Opens part `l` at its checkpoint `at` (0: empty).
    fn open_part(&mut self, l: Layout, at: u64) -> Result<()> {
        let o = self.part_options(l, at);
        crate::io::create_dir_durable(self.fs.as_ref(), &o.dir)
            .map_err(|e| Error::io("create directory", &o.dir, e))?;
        let mut part = match l {
            Layout::Hash => {
                let h = self.hashlog_options(l);
                Part::Hash(Box::new(HashLogStore::open_with_fs(o, h, self.fs.clone())?))
            }
            Layout::List => Part::List(Box::new(crate::AppendLogStore::open_with_fs(
                o,
                crate::AppendLogOptions::default().hashlog(self.hashlog_options(l)),
                self.fs.clone(),
            )?)),
            // The namespaces declare no time field, so the time part keeps each one in a
            // single partition: one sorted run per namespace (range reads touch one
            // memtable and its segments instead of every time partition).
            Layout::Time => Part::Time(Box::new(crate::TimeLogStore::open_with_fs(
                o,
                crate::TimeLogOptions::default().partition_span(u64::MAX).memtable_fraction(0.85),
                self.fs.clone(),
            )?)),
        };
        if let Some(cap) = self.value_cap {
            part.set_value_cap(cap);
        }
        self.parts[l.index()] = Some(part);
        Ok(())
    }

    /// The layout namespace `ns` lives in (the source while it migrates).
    pub fn layout(&self, ns: Ns) -> Option<Layout> {
        self.ns.get(ns.index()).map(|s| s.layout)
    }

    /// The migration under way: (namespace, from, to).
    pub fn migration(&self) -> Option<(Ns, Layout, Layout)> {
        let i = self.migrating?;
        let st = &self.ns[i];
        st.migration.as_ref().map(|m| (Ns(i as u16), st.layout, m.to))
    }

    /// Starts migrating `ns` to layout `to` (finishing a migration under way first; a
    /// no-op if `ns` is already there). It may choose a layout an abandoned migration
    /// left (the observer does not).
    pub fn migrate(&mut self, ns: Ns, to: Layout) -> Result<()> {
        let i = self.ns_index(ns)?;
        self.check_writable()?;
        match self.finish_migration() {
            // Reported by stats; the store is whole and this migration starts.
            Ok(()) | Err(Error::MigrationAbandoned(_)) => {}
            Err(e) => return Err(e),
        }
        self.ns[i].refused[to.index()] = false;
        self.start_migration(i, to)
    }

    /// Each part's memory budget now (hash, list, time; 0 for a part not open with no
    /// share), and whether the budget steps are still moving memory between them.
    pub fn part_budgets(&self) -> ([u64; 3], bool) {
        (self.part_budget, self.rebalancing)
    }

    /// Runs migration steps until no migration is under way. If a migration it runs is
    /// abandoned (its target refused an entry), it runs the way back to the end and
    /// returns [`Error::MigrationAbandoned`] saying why; the store is whole and usable.
    pub fn finish_migration(&mut self) -> Result<()> {
        let mut abandoned = None;
        while let Some(i) = self.migrating {
            let failed = self.ns[i].failed_migrations;
            let r = self.migrate_step(i);
            self.poison(r)?;
            if self.ns[i].failed_migrations > failed {
                abandoned = Some(i);
            }
        }
        match abandoned.and_then(|i| self.ns[i].last_failure.as_ref().map(|f| (i, f))) {
            Some((i, f)) => Err(f.error(&self.opts.namespaces[i].name)),
            None => Ok(()),
        }
    }

    fn start_migration(&mut self, i: usize, to: Layout) -> Result<()> {
        if self.ns[i].layout == to || self.migrating.is_some() {
            return Ok(());
        }
        if self.parts[to.index()].is_none() {
            let r = self.open_part(to, 0);
            self.poison(r)?;
        }
        self.ns[i].migration = Some(Migration { to, token: None, back: false });
        self.migrating = Some(i);
        self.retarget_budgets();
        Ok(())
    }

    fn ns_index(&self, ns: Ns) -> Result<usize> {
        if ns.index() < self.ns.len() {
            Ok(ns.index())
        } else {
            Err(Error::UnknownNamespace { name: format!("#{}", ns.index()) })
        }
    }

    fn check_writable(&self) -> Result<()> {
        self.core.writable()
    }

    /// Keys of a list namespace are bounded by the list layout's (a chunk's key adds
    /// 4 bytes) in every layout, so the namespace can always migrate there.
    fn check_key(&self, i: usize, key: &[u8]) -> Result<()> {
        let max =
            crate::MAX_KEY_LEN - if self.ns[i].list { crate::appendlog::CHUNK_NO_LEN } else { 0 };
        if key.len() > max {
            return Err(Error::KeyTooLarge { len: key.len(), max });
        }
        Ok(())
    }

    #[inline(always)]
    fn poison<T>(&mut self, r: Result<T>) -> Result<T> {
        self.core.poison_on(r)
    }

    fn part(&mut self, l: Layout) -> &mut dyn StateStore {
        self.parts[l.index()].as_mut().expect("a part in use is open").store()
    }

    /// (current layout, migration target) of namespace `i`.
    #[inline]
    fn route(&self, i: usize) -> (Layout, Option<Layout>) {
        let st = &self.ns[i];
        (st.layout, st.migration.as_ref().map(|m| m.to))
    }

    /// Work after each operation: a migration step, the observer's decision, the
    /// forced-migration knob.
    #[inline(always)]
    fn after_op(&mut self, i: usize) -> Result<()> {
        self.ops += 1;
        // The common case, no work at all, without a call (measured: the call and the
        // `Result` it returned were a fifth of the store's overhead over hashlog alone).
        if self.migrating.is_none()
            && !self.rebalancing
            && self.aopts.forced.is_none()
            && (!self.aopts.dynamic || self.ns[i].observer.since_decision < self.aopts.decide_every)
        {
            return Ok(());
        }
        self.after_op_work(i)
    }

    #[cold]
    #[inline(never)]
    fn after_op_work(&mut self, i: usize) -> Result<()> {
        if self.rebalancing {
            let r = self.budget_step();
            self.poison(r)?;
        }
        if let Some(m) = self.migrating {
            let r = self.migrate_step(m);
            self.poison(r)?;
        }
        if self.aopts.dynamic && self.ns[i].observer.since_decision >= self.aopts.decide_every {
            self.decide(i)?;
        }
        if let Some((every, _)) = self.aopts.forced {
            if self.ops.is_multiple_of(every) && self.migrating.is_none() {
                self.force_random_migration()?;
            }
        }
        Ok(())
    }

    /// After a range read that had to walk an unordered layout (O(namespace)): decide
    /// at once instead of waiting for `decide_every` operations, and if the namespace
    /// is migrating, move up to [`WALK_BOOST`] entries now, less the walk's own size
    /// (its entries over [`WALKED_PER_MOVE`]). A walk already cost about as much as
    /// moving that many entries, and every walk until the migration ends costs it
    /// again, so finishing sooner pays for itself; counting the walk keeps a long walk
    /// and a full boost from adding up in one read's pause. The bound is counted in
    /// entries, not time, so what a store does (and writes) follows from its
    /// operations alone. At least one step runs, so the migration always advances.
    fn after_walk(&mut self, i: usize) -> Result<()> {
        if self.aopts.dynamic && self.ns[i].observer.since_decision >= 16 {
            self.decide(i)?;
        }
        if self.migrating == Some(i) {
            let boost =
                WALK_BOOST.saturating_sub(self.ns[i].observer.walked_entries / WALKED_PER_MOVE);
            let before = self.ns[i].moved;
            loop {
                let r = self.migrate_step(i);
                self.poison(r)?;
                if self.migrating != Some(i) || self.ns[i].moved - before >= boost {
                    break;
                }
            }
        }
        Ok(())
    }

    fn decide(&mut self, i: usize) -> Result<()> {
        self.ns[i].observer.since_decision = 0;
        if self.migrating.is_some() {
            return Ok(());
        }
        let layout = self.ns[i].layout;
        // In memory: the part's resident bytes stay well below the hash part's share
        // (a hybrid log that fits in its mutable region appends lists in place).
        // Only list merges depend on it, and stats() costs a directory listing: it is
        // refreshed every 64th decision.
        if self.ns[i].observer.list_merges > 0.0 {
            if self.decisions.is_multiple_of(64) {
                let s = self.part(layout).stats();
                self.in_memory = (s.bytes_in_memory as f64)
                    < 0.7 * self.part_budget[Layout::Hash.index()] as f64;
            }
            self.decisions += 1;
        }
        let in_memory = self.in_memory;
        let st = &self.ns[i];
        match st.observer.recommend(layout, self.aopts.hysteresis, in_memory) {
            Some(to) if !st.refused[to.index()] => self.start_migration(i, to),
            _ => Ok(()),
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: a deterministic choice for the forced-migration knob.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn force_random_migration(&mut self) -> Result<()> {
        let r = self.next_random();
        let i = (r % self.ns.len() as u64) as usize;
        let cur = self.ns[i].layout;
        let others: Vec<Layout> = Layout::ALL.into_iter().filter(|l| *l != cur).collect();
        let to = others[((r >> 32) % 2) as usize];
        if self.ns[i].refused[to.index()] {
            return Ok(());
        }
        self.start_migration(i, to)
    }

    /// One bounded migration step of namespace `i`. The step is background work of the
    /// operation that ran it, which was complete before: an entry the target refuses
    /// with an error that does not poison abandons the migration
    /// ([`Self::abandon_migration`]) and the step succeeds. Only errors that poison are
    /// returned.
    fn migrate_step(&mut self, i: usize) -> Result<()> {
        match self.try_step(i) {
            Ok(()) => Ok(()),
            Err(f) => match *f {
                (e, key) if self.is_refusal(&e) => self.abandon_migration(i, key, e),
                (e, _) => Err(e),
            },
        }
    }

    /// Whether `e` is a refusal that leaves the store whole (it does not poison, and
    /// the store is not poisoned).
    fn is_refusal(&self, e: &Error) -> bool {
        !e.poisons() && !matches!(e, Error::Poisoned { .. }) && self.core.poisoned.is_none()
    }

    /// The step itself; an error comes with the key of the entry that failed to move
    /// (none if the walk failed), which stays in the source.
    fn try_step(&mut self, i: usize) -> std::result::Result<(), StepError> {
        let ns = Ns(i as u16);
        let (from, Some(to)) = self.route(i) else {
            self.migrating = None;
            return Ok(());
        };
        let token = self.ns[i].migration.as_mut().and_then(|m| m.token.take());
        let (limit, max_bytes) = (self.aopts.step_entries, self.aopts.step_bytes);
        let mut batch = std::mem::take(&mut self.move_buf);
        batch.clear();
        let mut bytes = 0usize;
        let next = self.part(from).scan_step(ns, token.as_deref(), limit, &mut |k, v| {
            bytes += k.len() + v.len();
            batch.push((k.to_vec(), v.to_vec()));
            bytes < max_bytes
        });
        let mut failed = None;
        let next = match next {
            Ok(n) => n,
            Err(e) => {
                failed = Some((e, None));
                None
            }
        };
        let mut moved = 0u64;
        if failed.is_none() {
            for (k, v) in &batch {
                if let Err(e) = self.move_entry(ns, from, to, k, v) {
                    failed = Some((e, Some(k.clone())));
                    break;
                }
                moved += 1;
            }
        }
        self.ns[i].moved += moved;
        self.move_buf = batch;
        if let Some(f) = failed {
            // Keep the token so a retry resumes where this step began (the entries it
            // moved are gone from the source).
            if let Some(m) = self.ns[i].migration.as_mut() {
                m.token = token;
            }
            return Err(Box::new(f));
        }
        match next {
            Some(t) => {
                if let Some(m) = self.ns[i].migration.as_mut() {
                    m.token = Some(t);
                }
            }
            None => {
                let st = &mut self.ns[i];
                let back = st.migration.as_ref().is_some_and(|m| m.back);
                st.layout = to;
                st.migration = None;
                if !back {
                    st.migrations += 1;
                }
                self.migrating = None;
                self.retarget_budgets();
            }
        }
        Ok(())
    }

    /// Abandons the migration of namespace `i`, whose target refused the entry `key`
    /// (none: the walk failed) with `e`, an error that does not poison. The namespace
    /// migrates back to its source from the start, so the entries moved so far and
    /// those written since go back (the source held them before, and the shared value
    /// cap bounds what was written since); the failure is kept for
    /// [`stats`](StateStore::stats) and [`finish_migration`](Self::finish_migration),
    /// and the observer and the forced-migration knob do not choose the refused layout
    /// again. A refusal while moving back means neither layout takes the namespace's
    /// entries: the store is poisoned, naming both.
    fn abandon_migration(&mut self, i: usize, key: Option<Vec<u8>>, e: Error) -> Result<()> {
        let st = &mut self.ns[i];
        let from = st.layout;
        let Some((to, back)) = st.migration.as_ref().map(|m| (m.to, m.back)) else {
            return Ok(());
        };
        let failure = Failure { from, to, key, cause: e.to_string() };
        if back {
            let name = &self.opts.namespaces[i].name;
            let cause = format!(
                "{}; it was moving namespace {name:?} back after an abandoned migration, so \
                 neither the {} nor the {} part takes all of its entries",
                failure.error(name),
                from.name(),
                to.name()
            );
            self.core.poisoned.get_or_insert(cause.clone());
            return Err(Error::Poisoned { cause });
        }
        st.refused[to.index()] = true;
        st.failed_migrations += 1;
        st.last_failure = Some(failure);
        st.layout = to;
        st.migration = Some(Migration { to: from, token: None, back: true });
        Ok(())
    }

    /// Moves the entry `key` = `value` of `ns` from part `from` to part `to`: puts it
    /// into `to`, then deletes it from `from`. A refusal leaves it where it was (a
    /// delete `from` refuses is undone by deleting the copy in `to`); if the undo fails
    /// too the key would be in both parts, and the store is poisoned.
    fn move_entry(
        &mut self,
        ns: Ns,
        from: Layout,
        to: Layout,
        key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        self.part(to).put(ns, key, value)?;
        let e = match self.part(from).delete(ns, key) {
            Ok(()) => return Ok(()),
            Err(e) if e.poisons() => return Err(e),
            Err(e) => e,
        };
        match self.part(to).delete(ns, key) {
            Ok(()) => Err(e),
            Err(undo) => {
                let cause = format!(
                    "namespace {:?}: key {} (hex) is in the {} and the {} part: the first \
                     refused its delete ({e}) and the second the undo of its copy ({undo})",
                    self.opts.namespaces[ns.index()].name,
                    hex(key),
                    from.name(),
                    to.name()
                );
                self.core.poisoned.get_or_insert(cause.clone());
                Err(Error::Poisoned { cause })
            }
        }
    }

    /// The part a write (put, delete, merge, read-modify-write) of `key` in namespace `i`
    /// applies to: the namespace's layout, or during a migration its target, once the
    /// key's value was moved there. A move refused without poisoning abandons the
    /// migration, and the write applies where the value is (the migration's new
    /// target).
    #[inline(always)]
    fn update_target(&mut self, i: usize, key: &[u8]) -> Result<Layout> {
        match self.ns[i].migration {
            None => Ok(self.ns[i].layout),
            Some(_) => self.update_target_migrating(i, key),
        }
    }

    #[cold]
    #[inline(never)]
    fn update_target_migrating(&mut self, i: usize, key: &[u8]) -> Result<Layout> {
        let (from, Some(to)) = self.route(i) else {
            return Ok(self.ns[i].layout);
        };
        match self.move_key(Ns(i as u16), from, to, key) {
            Ok(()) => Ok(to),
            Err(e) if self.is_refusal(&e) => {
                self.abandon_migration(i, Some(key.to_vec()), e)?;
                // Now moving back: the key is in the new target, where it stayed.
                self.update_target(i, key)
            }
            Err(e) => Err(e),
        }
    }

    /// During a migration: moves `key`'s value from the source to the target, so an
    /// update can apply to the target.
    fn move_key(&mut self, ns: Ns, from: Layout, to: Layout, key: &[u8]) -> Result<()> {
        let mut buf = std::mem::take(&mut self.scratch);
        let r = match self.part(from).get_into(ns, key, &mut buf) {
            Ok(true) => self.move_entry(ns, from, to, key, &buf),
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        self.scratch = buf;
        r
    }

    /// Every entry of namespace `i` within the bounds, sorted by key, from whatever
    /// parts hold it (the range-read path of unordered layouts and migrations).
    fn collect_sorted(
        &mut self,
        i: usize,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let ns = Ns(i as u16);
        let (from, to) = self.route(i);
        let mut all = Vec::new();
        let mut walked = 0u64;
        for l in std::iter::once(from).chain(to) {
            let part = self.part(l);
            if part.is_ordered(ns) {
                part.scan_range(ns, start, end, &mut |k, v| {
                    all.push((k.to_vec(), v.to_vec()));
                    true
                })?;
            } else {
                // A resumable walk reads in-memory pages in place (a prefix scan would
                // copy every page of the log).
                let mut token: Option<Vec<u8>> = None;
                loop {
                    let next = part.scan_step(ns, token.as_deref(), usize::MAX, &mut |k, v| {
                        walked += 1;
                        if in_bounds(k, start, end) {
                            all.push((k.to_vec(), v.to_vec()));
                        }
                        true
                    })?;
                    match next {
                        Some(t) => token = Some(t),
                        None => break,
                    }
                }
            }
        }
        if walked > 0 {
            self.ns[i].observer.walked_entries = walked;
        }
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }

    fn write_checkpoint(&mut self, seq: u64) -> Result<()> {
        let mut part_seq = [0u64; 3];
        for l in Layout::ALL {
            if let Some(p) = self.parts[l.index()].as_mut() {
                part_seq[l.index()] = p.store().checkpoint()?.seq;
            }
        }
        let dir = self.opts.dir.clone();
        let mut m = Manifest::new(seq, STORE_NAME, &self.opts);
        for l in Layout::ALL {
            m.set(&format!("part.{}", l.dir()), part_seq[l.index()]);
        }
        for (i, st) in self.ns.iter().enumerate() {
            let v = match &st.migration {
                None => st.layout.dir().to_string(),
                Some(mg) => format!(
                    "{}>{}@{}",
                    st.layout.dir(),
                    mg.to.dir(),
                    mg.token.as_deref().map_or_else(|| "-".to_string(), hex)
                ),
            };
            m.set(&format!("ns.{i}"), v);
        }
        manifest::write_manifest(&*self.fs, &dir, &m)?;
        // The parts keep their own last two checkpoints.
        manifest::drop_older_checkpoints(&*self.fs, &dir, seq, |_| Ok(()))
    }
}

impl StateStore for AdaptiveStore {
    fn name(&self) -> &'static str {
        STORE_NAME
    }

    fn namespace(&self, name: &str) -> Result<Ns> {
        self.opts.lookup(name)
    }

    fn get_into(&mut self, ns: Ns, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        self.core.readable()?;
        let i = self.ns_index(ns)?;
        let found = match self.route(i) {
            (l, None) => self.part(l).get_into(ns, key, out)?,
            (from, Some(to)) => {
                self.part(to).get_into(ns, key, out)? || self.part(from).get_into(ns, key, out)?
            }
        };
        self.ns[i].observer.see(Seen::Get(out.len()));
        self.after_op(i)?;
        Ok(found)
    }

    /// Forwards each key to the part that holds its namespace (both parts while it
    /// migrates), so a batch's cache misses overlap as they do in hashlog alone.
    fn prefetch(&mut self, keys: &[(Ns, &[u8])]) {
        // The usual batch: every key in one part, none migrating; passed on as it is.
        let mut one = None;
        for &(ns, _) in keys {
            match (self.ns_index(ns).map(|i| self.route(i)), one) {
                (Ok((l, None)), None) => one = Some(l),
                (Ok((l, None)), Some(o)) if o == l => {}
                _ => {
                    one = None;
                    break;
                }
            }
        }
        if let Some(l) = one {
            if let Some(p) = self.parts[l.index()].as_mut() {
                p.store().prefetch(keys);
            }
            return;
        }
        let mut by_part: [Vec<(Ns, &[u8])>; 3] = Default::default();
        for &(ns, key) in keys {
            let Ok(i) = self.ns_index(ns) else { continue };
            let (l, to) = self.route(i);
            by_part[l.index()].push((ns, key));
            if let Some(to) = to {
                by_part[to.index()].push((ns, key));
            }
        }
        for l in Layout::ALL {
            let k = &by_part[l.index()];
            if !k.is_empty() {
                if let Some(p) = self.parts[l.index()].as_mut() {
                    p.store().prefetch(k);
                }
            }
        }
    }

    /// A batch whose namespaces all sit, not migrating, in one part goes to that part
    /// whole (the engine's tree updates); any other batch runs one operation at a time.
    fn apply_batch(
        &mut self,
        ops: &[crate::BatchOp<'_>],
        f: &mut crate::MultiRmwFn<'_>,
    ) -> Result<()> {
        use crate::BatchKind;
        let mut part = None;
        for op in ops {
            let i = self.ns_index(op.ns)?;
            match (self.route(i), part) {
                ((l, None), None) => part = Some(l),
                ((l, None), Some(p)) if p == l => {}
                _ => {
                    part = None;
                    break;
                }
            }
        }
        let Some(l) = part else {
            if ops.len() > 1 {
                self.prefetch(&ops.iter().map(|o| (o.ns, o.key)).collect::<Vec<_>>());
            }
            return crate::apply_each(self, ops, f);
        };
        if ops.iter().any(|o| !matches!(o.kind, BatchKind::Get)) {
            self.check_writable()?;
        } else {
            self.core.readable()?;
        }
        for op in ops {
            if !matches!(op.kind, BatchKind::Get) {
                self.check_key(op.ns.index(), op.key)?;
            }
        }
        let mut sizes = std::mem::take(&mut self.batch_sizes);
        sizes.clear();
        let r = self.part(l).apply_batch(ops, &mut |n, old, out| {
            if matches!(ops[n].kind, BatchKind::Get) {
                sizes.push(old.map_or(0, <[u8]>::len));
            }
            f(n, old, out)
        });
        self.poison(r)?;
        let mut got = sizes.iter().copied();
        for op in ops {
            let i = op.ns.index();
            let seen = match op.kind {
                BatchKind::Get => Seen::Get(got.next().unwrap_or(0)),
                BatchKind::Put(v) => Seen::Put(v.len()),
                BatchKind::Merge(v) if self.ns[i].list => Seen::ListMerge(v.len()),
                BatchKind::Merge(v) => Seen::FnMerge(v.len()),
                BatchKind::Delete => Seen::Delete,
                BatchKind::Rmw => Seen::Rmw,
            };
            self.ns[i].observer.see(seen);
            self.after_op(i)?;
        }
        self.batch_sizes = sizes;
        Ok(())
    }

    fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> {
        let i = self.ns_index(ns)?;
        self.check_writable()?;
        self.check_key(i, key)?;
        let r = self.update_target(i, key).and_then(|l| self.part(l).put(ns, key, value));
        self.poison(r)?;
        self.ns[i].observer.see(Seen::Put(value.len()));
        self.after_op(i)
    }

    fn merge(&mut self, ns: Ns, key: &[u8], operand: &[u8]) -> Result<()> {
        let i = self.ns_index(ns)?;
        self.check_writable()?;
        self.check_key(i, key)?;
        let r = self.update_target(i, key).and_then(|l| self.part(l).merge(ns, key, operand));
        self.poison(r)?;
        let seen = if self.ns[i].list {
            Seen::ListMerge(operand.len())
        } else {
            Seen::FnMerge(operand.len())
        };
        self.ns[i].observer.see(seen);
        self.after_op(i)
    }

    fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<()> {
        let i = self.ns_index(ns)?;
        self.check_writable()?;
        let r = self.update_target(i, key).and_then(|l| self.part(l).delete(ns, key));
        self.poison(r)?;
        self.ns[i].observer.see(Seen::Delete);
        self.after_op(i)
    }

    fn rmw(&mut self, ns: Ns, key: &[u8], f: &mut RmwFn<'_>) -> Result<()> {
        let i = self.ns_index(ns)?;
        self.check_writable()?;
        self.check_key(i, key)?;
        let r = self.update_target(i, key).and_then(|l| self.part(l).rmw(ns, key, f));
        self.poison(r)?;
        self.ns[i].observer.see(Seen::Rmw);
        self.after_op(i)
    }

    fn is_ordered(&self, _: Ns) -> bool {
        true
    }

    /// Every namespace is ordered: a part that keeps it in key order scans natively;
    /// otherwise (a hash layout, or a migration under way) the range is walked and
    /// sorted, and the walk counts towards moving the namespace to an ordered layout.
    fn range(
        &mut self,
        ns: Ns,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        order: Order,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<usize> {
        self.core.readable()?;
        let i = self.ns_index(ns)?;
        let mut walked = false;
        let n = match self.route(i) {
            (l, None) if self.part(l).is_ordered(ns) => {
                self.part(l).range(ns, start, end, order, limit, visit)?
            }
            _ => {
                walked = true;
                let all = self.collect_sorted(i, start, end)?;
                let entries = all.iter().map(|(k, v)| (&k[..], &v[..]));
                crate::cursor::visit_ordered(entries, order.direction(), limit, visit)
            }
        };
        self.ns[i].observer.see(Seen::Range(n));
        if walked {
            self.after_walk(i)?;
        }
        self.after_op(i)?;
        Ok(n)
    }

    fn delete_range(&mut self, ns: Ns, start: &[u8], end: &[u8]) -> Result<u64> {
        let i = self.ns_index(ns)?;
        self.check_writable()?;
        if start >= end {
            return Ok(0);
        }
        let (from, to) = self.route(i);
        let mut deleted = 0;
        for l in std::iter::once(from).chain(to) {
            let r = if self.part(l).is_ordered(ns) {
                self.part(l).delete_range(ns, start, end)
            } else {
                let mut keys = Vec::new();
                let r = self.part(l).scan_prefix(ns, b"", &mut |k, _| {
                    if k >= start && k < end {
                        keys.push(k.to_vec());
                    }
                    true
                });
                r.and_then(|()| {
                    for k in &keys {
                        self.part(l).delete(ns, k)?;
                    }
                    Ok(keys.len() as u64)
                })
            };
            deleted += self.poison(r)?;
        }
        self.ns[i].observer.see(Seen::Range(deleted as usize));
        self.after_op(i)?;
        Ok(deleted)
    }

    fn scan_step(
        &mut self,
        ns: Ns,
        from: Option<&[u8]>,
        limit: usize,
        visit: &mut Visitor<'_>,
    ) -> Result<Option<Vec<u8>>> {
        self.core.readable()?;
        let i = self.ns_index(ns)?;
        match self.route(i) {
            (l, None) => self.part(l).scan_step(ns, from, limit, visit),
            _ => Err(Error::Unsupported {
                store: STORE_NAME,
                op: "scan_step during a migration",
                hint: "finish the migration first (finish_migration)",
            }),
        }
    }

    fn checkpoint(&mut self) -> Result<CheckpointInfo> {
        crate::backend::checkpoint(self, |s| &mut s.core, AdaptiveStore::write_checkpoint)
    }

    fn stats(&self) -> StoreStats {
        let mut s = self.core.stats();
        s.memory_budget = self.opts.memory_budget;
        let mut keys = Some(0u64);
        for p in self.parts.iter().flatten() {
            let t = p.store_ref().stats();
            s.gets += t.gets;
            s.puts += t.puts;
            s.merges += t.merges;
            s.deletes += t.deletes;
            s.rmws += t.rmws;
            s.scans += t.scans;
            s.in_place_updates += t.in_place_updates;
            s.disk_reads += t.disk_reads;
            s.bytes_written += t.bytes_written;
            s.bytes_in_memory += t.bytes_in_memory;
            s.index_bytes += t.index_bytes;
            s.bytes_on_disk += t.bytes_on_disk;
            s.compactions += t.compactions;
            s.compacted_bytes += t.compacted_bytes;
            keys = keys.zip(t.live_keys).map(|(a, b)| a + b);
        }
        s.live_keys = keys;
        let layouts = self
            .ns
            .iter()
            .zip(&self.opts.namespaces)
            .map(|(st, spec)| NamespaceLayout {
                namespace: spec.name.clone(),
                layout: st.layout.name().to_string(),
                migrating_to: st.migration.as_ref().map(|m| m.to.name().to_string()),
                migrations: st.migrations,
                moved_entries: st.moved,
                failed_migrations: st.failed_migrations,
                migration_error: st.last_failure.as_ref().map(|f| f.error(&spec.name).to_string()),
            })
            .collect();
        s.backend = crate::BackendStats::Adaptive { layouts };
        s
    }
}

#[cfg(test)]
mod tests {
    use super::{hex, unhex};

    #[test]
    fn token_hex_round_trips() {
        for t in [vec![], vec![0u8, 255, 16], (0..=255).collect::<Vec<u8>>()] {
            assert_eq!(unhex(&hex(&t)), Some(t));
        }
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }
}
