//! Argument groups several commands share, and what they mean: how an input file is
//! read (`run`, `explain`, `kafka produce`), the tiered store's levels (`run`, `demo`),
//! the SQL query and its table (`run`, `explain`), an experiment file (`trace gen`,
//! `bench workload`), the stores of a replay (`bench workload`, `bench replay`),
//! wall-clock durations (the Kafka commands) and the directory of an output file.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use spillway_bench::units::parse_size;
use spillway_bench::workload::config::Experiment;
use spillway_engine::reservoir::Compression;
use spillway_engine::source::{parse_schema_overrides, OnError, SourceOptions};
use spillway_engine::value::TimeUnit;
use spillway_store::StoreKind;

/// What to do with malformed input rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnErrorArg {
    /// Stop with a message naming the line, column and expected type.
    Stop,
    /// Write the row to the dead-letter file, count it and go on.
    Skip,
}

/// Reservoir chunk compression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompressionArg {
    /// LZ4 (fast).
    Lz4,
    /// Zstandard level 3 (smaller).
    Zstd,
}

impl From<CompressionArg> for Compression {
    fn from(c: CompressionArg) -> Compression {
        match c {
            CompressionArg::Lz4 => Compression::Lz4,
            CompressionArg::Zstd => Compression::Zstd(3),
        }
    }
}

/// How the input is read (shared by `run`, `explain` and `kafka produce`). The time flags
/// are options so that a Kafka worker can tell a given value from the default (it checks
/// a given one against the topic's schema); [`source_options`] applies the defaults.
#[derive(Debug, Args)]
pub struct InputArgs {
    /// Event-time column: integers in --time-unit, or RFC 3339 / ISO 8601 timestamps
    /// (2023-11-14T22:13:20.663Z, an offset, or 2023-11-14 22:13:20.663 taken as UTC)
    /// converted to them [default: ts; with a kafka:// input, the topic's schema's, and
    /// another is refused]
    #[arg(long, value_name = "NAME")]
    pub(crate) time_column: Option<String>,

    /// Unit of the event-time column (of its integers since 1970-01-01, and of the
    /// engine's time): s, ms, us, ns [default: ms; with a kafka:// input, the topic's
    /// schema's, and another is refused]
    #[arg(long, value_parser = parse_unit, value_name = "UNIT")]
    pub(crate) time_unit: Option<TimeUnit>,

    /// Column types overriding inference, e.g. `card:string,amount:float`
    #[arg(long, value_name = "NAME:TYPE,...")]
    pub(crate) schema: Option<String>,
}

/// The levels of `--store tiered` (shared by `run` and `demo`).
#[derive(Debug, Default, Args)]
pub struct TierArgs {
    /// With --store tiered: capacity of the in-process L1 cache (adaptive W-TinyLFU), a
    /// size (64KiB, 16MiB) or a percentage of --memory-budget; 0 leaves L1 out
    /// [default: 25%]
    #[arg(long, value_name = "SIZE|PCT", value_parser = spillway_bench::units::parse_size_or_share)]
    pub(crate) l1: Option<spillway_bench::units::SizeOrShare>,

    /// With --store tiered: the Redis level: redis://HOST:PORT, redis+unix:///PATH, auto
    /// (a private redis-server child, stopped when the run ends) or none [default: auto]
    #[arg(long, value_name = "URL|auto|none")]
    pub(crate) l2: Option<spillway_store::tiered::L2Config>,

    /// With --store tiered: the durable level: hashlog or none (then the store cannot
    /// checkpoint) [default: hashlog]
    #[arg(long, value_name = "hashlog|none")]
    pub(crate) l3: Option<spillway_store::tiered::L3Kind>,
}

impl TierArgs {
    /// The tiered store's options; an error if levels are given for another store.
    pub(crate) fn options(
        &self,
        store: StoreKind,
        budget: u64,
    ) -> Result<spillway_store::TieredOptions> {
        use spillway_store::tiered::{L2Config, L3Kind};
        let given = self.l1.is_some() || self.l2.is_some() || self.l3.is_some();
        if store != StoreKind::Tiered {
            if given {
                bail!("--l1, --l2 and --l3 configure the tiered store: add --store tiered");
            }
            return Ok(spillway_store::TieredOptions::default());
        }
        let l1 = self.l1.map_or(budget / 4, |s| s.of(budget));
        let l3 = self.l3.unwrap_or(L3Kind::HashLog);
        if l3 == L3Kind::None {
            eprintln!(
                "note: the tiered store has no durable level (--l3 none): it refuses checkpoints \
                 and nothing it holds outlives the run"
            );
        }
        Ok(spillway_store::TieredOptions::new(l1)
            .l2(self.l2.clone().unwrap_or(L2Config::Auto))
            .l3(l3))
    }
}

pub(crate) fn parse_unit(s: &str) -> Result<TimeUnit, String> {
    TimeUnit::parse(s).ok_or_else(|| format!("unknown time unit `{s}`; use s, ms, us or ns"))
}

pub(crate) fn read_query(q: &str) -> Result<String> {
    let p = Path::new(q);
    if p.is_file() {
        std::fs::read_to_string(p)
            .with_context(|| format!("cannot read query file {}", p.display()))
    } else if q.trim_start().to_ascii_lowercase().starts_with("select") {
        Ok(q.to_string())
    } else {
        bail!("--query {q}: no such file, and not SQL text (which starts with SELECT)")
    }
}

/// Checks that the query's FROM names the input's table: `table` (--table) if given,
/// else `default` (the input file's name without its extension, or the Kafka topic),
/// said to be `default_is`; no check without either (stdin).
pub(crate) fn check_from(
    query: &str,
    table: Option<&str>,
    default: Option<String>,
    default_is: &str,
) -> Result<()> {
    let (table, why) = match (table, default) {
        (Some(t), _) => (t.to_string(), "--table".to_string()),
        (None, Some(t)) => (t, format!("{default_is}; --table NAME names it otherwise")),
        (None, None) => return Ok(()),
    };
    spillway_engine::sql::check_table(query, &table).map_err(|e| anyhow!("{e} ({why})"))
}

/// What the input's default table name is, for [`check_from`]'s message.
pub(crate) const FILE_TABLE: &str = "the input file's name without its extension";

/// The event-time column when --time-column is not given.
pub(crate) const DEFAULT_TIME_COLUMN: &str = "ts";
/// The event-time unit when --time-unit is not given.
pub(crate) const DEFAULT_TIME_UNIT: TimeUnit = TimeUnit::Ms;

pub(crate) fn source_options(a: &InputArgs, on_error: OnError) -> Result<SourceOptions> {
    let mut o = SourceOptions::new(a.time_column.as_deref().unwrap_or(DEFAULT_TIME_COLUMN));
    o.time_unit = a.time_unit.unwrap_or(DEFAULT_TIME_UNIT);
    o.on_error = on_error;
    if let Some(s) = &a.schema {
        o.schema_overrides = parse_schema_overrides(s)?;
    }
    Ok(o)
}

/// Loads an experiment (`--config FILE`: TOML or a Gadget `key=value` file), printing
/// the notes of a Gadget import on stderr.
pub(crate) fn load_experiment(path: &Path) -> Result<Experiment> {
    let imported = spillway_bench::workload::gadget::load_experiment(path)
        .with_context(|| format!("{}", path.display()))?;
    for n in &imported.notes {
        eprintln!("note: {n}");
    }
    Ok(imported.experiment)
}

/// The store and output options of `bench workload` and `bench replay`.
#[derive(Debug, Args)]
pub struct StoreRunArgs {
    /// Stores, comma-separated (mem, hashlog, appendlog, timelog, adaptive, tiered,
    /// rocksdb) [default: bench workload: the experiment's `run.stores`; bench replay:
    /// hashlog]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub(crate) stores: Option<Vec<StoreKind>>,
    /// Memory budget of every store
    #[arg(long, default_value = "256MiB", value_parser = parse_size, value_name = "SIZE")]
    pub(crate) memory_budget: u64,
    /// Directory for the stores, created if missing [default: the system temporary
    /// directory]
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
    /// Write the results (rows and details) as JSON to FILE
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
}

/// Creates the directory `path` will be written into, if missing, with an error that
/// names it.
pub fn create_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => {
            std::fs::create_dir_all(dir).with_context(|| {
                format!("cannot create the directory {} for {}", dir.display(), path.display())
            })
        }
        _ => Ok(()),
    }
}

#[cfg(feature = "kafka")]
pub(crate) fn is_bare_number(s: &str) -> bool {
    let t = s.trim();
    !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit())
}

#[cfg(feature = "kafka")]
/// A wall-clock duration flag: a number with its unit (a bare number has no unit to be
/// taken in), positive.
pub(crate) fn wall_duration(s: &str, flag: &str) -> Result<std::time::Duration> {
    if is_bare_number(s) && s.trim() != "0" {
        bail!("{flag} {s}: give a duration with its unit, e.g. {0}s or {0}ms", s.trim());
    }
    let ns = spillway_engine::duration::parse_duration(s, TimeUnit::Ns)
        .map_err(|e| anyhow!("{flag}: {e}"))?;
    if ns <= 0 {
        bail!("{flag}: must be positive, not {s}");
    }
    Ok(std::time::Duration::from_nanos(ns as u64))
}
