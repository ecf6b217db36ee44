//! Replaying an outside trace against the stores (`spillway bench replay`): a binary or
//! Gadget text trace file, gzip- or xz-compressed or not ([`crate::trace::open`]),
//! checked first for Gadget's dump defects ([`crate::trace::check`]: trailing garbage
//! rows dropped, a missing first op reported), then replayed on each store by the same
//! engine and driver as a generated trace of `bench workload`
//! ([`super::run::replay_on_stores`]), so the rows are the same.
//!
//! The first pass over the file checks it whole before any store is opened (a
//! malformed line fails fast, naming the line), counts the op kinds and, when asked,
//! characterizes it for the report's plots. Each store's replay reads the file again.
//!
//! The store layout hint is the generating operator's when a binary trace carries its
//! experiment, else it follows the op mix: `seek`/`next`/`scan` ops ask for range
//! reads, `merge` ops for list appends, anything else for point access.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use serde::Serialize;
use spillway_store::{AccessHint, StoreKind};

use super::config::Experiment;
use super::replay::{self, ReplayConfig};
use super::run::{replay_on_stores, series_of, store_dir, WorkloadResult};
use super::OpKind;
use crate::report::TraceSeries;
use crate::trace::check::{Checked, TraceWarnings};
use crate::trace::open::{open, TraceFile};
use crate::trace::stats::{characterize, CharacterizeOptions, OpCounts};
use crate::trace::AnyTraceReader;

/// What to replay a trace against and how.
#[derive(Clone, Debug)]
pub struct TraceReplayConfig {
    /// Stores, each replayed fresh in turn.
    pub stores: Vec<StoreKind>,
    /// Memory budget of every store.
    pub memory_budget: u64,
    /// Directory under which the stores are created (made if missing); `None` for the
    /// system's temporary directory.
    pub dir: Option<PathBuf>,
    /// Pacing and warm-up (the latency sampling is set per store, as `bench workload`
    /// does).
    pub replay: ReplayConfig,
    /// Also characterize the trace for the report's plots.
    pub characterize: bool,
}

/// The trace a replay read.
#[derive(Clone, Debug, Serialize)]
pub struct TraceInfo {
    /// The file.
    pub path: PathBuf,
    /// `binary` or `gadget`.
    pub format: &'static str,
    /// `none`, `gzip` or `xz`.
    pub compression: &'static str,
    /// Ops replayed per store (garbage rows excluded).
    pub ops: u64,
    /// Ops per kind.
    pub op_counts: OpCounts,
    /// The store layout hint used (`point`, `range` or `list-append`).
    pub access_hint: &'static str,
    /// Gadget dump defects found (see [`crate::trace::check`]).
    pub warnings: TraceWarnings,
}

/// The outcome of [`replay_trace_file`].
#[derive(Clone, Debug)]
pub struct TraceReplay {
    /// Workload name of the rows: the file name.
    pub name: String,
    /// What was read.
    pub trace: TraceInfo,
    /// One result per store.
    pub results: Vec<WorkloadResult>,
    /// The plot series, if asked for.
    pub series: Option<TraceSeries>,
}

fn hint_name(h: AccessHint) -> &'static str {
    match h {
        AccessHint::Point => "point",
        AccessHint::Range => "range",
        AccessHint::ListAppend => "list-append",
        _ => "other",
    }
}

/// The generating operator's hint, if the file carries its experiment.
fn operator_hint(file: &TraceFile) -> Option<AccessHint> {
    file.experiment_toml()
        .and_then(|t| Experiment::from_toml_str(t).ok())
        .map(|e| e.operator.access_hint())
}

fn hint_of_mix(counts: &OpCounts) -> AccessHint {
    if counts.seek + counts.next + counts.scan > 0 {
        AccessHint::Range
    } else if counts.merge > 0 {
        AccessHint::ListAppend
    } else {
        AccessHint::Point
    }
}

fn open_file(path: &Path) -> Result<TraceFile> {
    open(path).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// A fresh source of the checked ops of `path` for one replay.
fn fill(path: &Path, fast: bool) -> Result<replay::BatchFill<'static>> {
    let file = open_file(path)?;
    let path = path.to_path_buf();
    Ok(match file.reader {
        // No garbage rows: the binary reader decodes blocks straight into the batches.
        AnyTraceReader::Binary(r) if fast => replay::fill_from_trace(r),
        reader => replay::fill_from_iter(Checked::new(reader).map(move |r| {
            r.map(|rec| (rec.input_event, rec.op))
                .map_err(|e| replay::BoxError::from(format!("{}: {e}", path.display())))
        })),
    })
}

/// Checks the trace at `path`, then replays it against each store of `cfg` (see the
/// module docs). Fails, before any store is opened, on a file that cannot be read, a
/// malformed record (the error names the file and the line or record) or a trace with
/// no ops.
pub fn replay_trace_file(path: &Path, cfg: &TraceReplayConfig) -> Result<TraceReplay> {
    let name = path
        .file_name()
        .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let file = open_file(path)?;
    let (compression, format) = (file.compression, file.format);
    let operator = operator_hint(&file);
    let mut checked = Checked::new(file.reader);
    let (counts, series) = if cfg.characterize {
        let opts = CharacterizeOptions { sequence_len: 0, ..CharacterizeOptions::default() };
        let stats = characterize(checked.by_ref(), &opts)
            .map_err(|e| anyhow!("{}: {e}", path.display()))?;
        (stats.op_counts.clone(), Some(series_of(&name, &stats)))
    } else {
        let mut c = [0u64; OpKind::ALL.len()];
        for rec in checked.by_ref() {
            c[rec.map_err(|e| anyhow!("{}: {e}", path.display()))?.op.kind as usize] += 1;
        }
        let n = |k: OpKind| c[k as usize];
        let counts = OpCounts {
            get: n(OpKind::Get),
            put: n(OpKind::Put),
            merge: n(OpKind::Merge),
            delete: n(OpKind::Delete),
            scan: n(OpKind::Scan),
            seek: n(OpKind::Seek),
            next: n(OpKind::Next),
        };
        (counts, None)
    };
    let warnings = checked.warnings();
    if warnings.replayed == 0 {
        let why = if warnings.garbage_rows > 0 {
            format!("only {} garbage row(s) with an empty key", warnings.garbage_rows)
        } else {
            "the file is empty".to_string()
        };
        bail!("{}: no ops to replay ({why})", path.display());
    }
    let hint = operator.unwrap_or_else(|| hint_of_mix(&counts));
    let work = store_dir(cfg.dir.as_deref())?;
    let fast = warnings.garbage_rows == 0;
    let open = || fill(path, fast);
    let results = replay_on_stores(
        &name,
        &open,
        &cfg.stores,
        cfg.memory_budget,
        work.path(),
        hint,
        &cfg.replay,
    )?;
    Ok(TraceReplay {
        name,
        trace: TraceInfo {
            path: path.to_path_buf(),
            format: format.name(),
            compression: compression.name(),
            ops: warnings.replayed,
            op_counts: counts,
            access_hint: hint_name(hint),
            warnings,
        },
        results,
        series,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{TraceWriter, TraceWriterOptions};
    use crate::workload::StateOp;
    use std::io::Write;

    fn cfg(dir: &Path) -> TraceReplayConfig {
        TraceReplayConfig {
            stores: vec![StoreKind::Mem],
            memory_budget: 64 << 20,
            dir: Some(dir.join("stores/nested")),
            replay: ReplayConfig::default(),
            characterize: true,
        }
    }

    #[test]
    fn replays_gadget_text_without_its_garbage_rows() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("gadget.log");
        let mut text = String::new();
        for i in 1..=50u64 {
            let op = if i % 2 == 1 { "put" } else { "get" };
            text.push_str(&format!("{i} {op} {:010} userkey gadget gadgetFile\n", i / 2));
        }
        text.push_str("51 get  userkey gadget gadgetFile\n52 get  userkey gadget gadgetFile\n");
        std::fs::write(&p, &text).unwrap();
        let r = replay_trace_file(&p, &cfg(d.path())).unwrap();
        assert_eq!(r.name, "gadget.log");
        assert_eq!(r.trace.ops, 50);
        assert_eq!(r.trace.warnings.garbage_rows, 2);
        assert_eq!(r.trace.warnings.missing_first_op, 1);
        assert_eq!((r.trace.format, r.trace.compression), ("gadget", "none"));
        assert_eq!(r.results.len(), 1);
        assert_eq!(r.results[0].replay.ops, 50);
        assert_eq!(r.results[0].replay.store, "mem");
        assert!(r.series.is_some());
        assert!(d.path().join("stores/nested").is_dir(), "--dir is created");
    }

    #[test]
    fn replays_a_compressed_binary_trace_with_its_operators_hint() {
        let d = tempfile::tempdir().unwrap();
        let opts = TraceWriterOptions {
            metadata: Some(serde_json::json!({
                "experiment": "[operator]\ntype = \"join.interval\"\n"
            })),
            ..TraceWriterOptions::default()
        };
        let mut w = TraceWriter::new(Vec::new(), opts).unwrap();
        for i in 0..100u64 {
            let key = format!("k{:03}", i % 10).into_bytes();
            w.write(i, &StateOp { kind: OpKind::Put, key: key.clone(), value: vec![b'0'; 4] })
                .unwrap();
            w.write(i, &StateOp { kind: OpKind::Seek, key, value: vec![] }).unwrap();
        }
        let bin = w.finish().unwrap();
        let p = d.path().join("t.trace.gz");
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&bin).unwrap();
        std::fs::write(&p, e.finish().unwrap()).unwrap();
        let mut c = cfg(d.path());
        c.characterize = false;
        let r = replay_trace_file(&p, &c).unwrap();
        assert_eq!((r.trace.format, r.trace.compression), ("binary", "gzip"));
        assert_eq!(r.trace.access_hint, "range");
        assert_eq!(r.results[0].replay.ops, 200);
        assert!(r.series.is_none());
        assert!(r.trace.warnings.missing_first_op == 1, "starts with a put");
    }

    #[test]
    fn bad_inputs_name_the_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("empty.log");
        std::fs::write(&p, "").unwrap();
        let e = replay_trace_file(&p, &cfg(d.path())).unwrap_err().to_string();
        assert!(e.contains("empty.log") && e.contains("no ops"), "{e}");
        std::fs::write(&p, "1 get a\n2 frob b\n").unwrap();
        let e = format!("{:#}", replay_trace_file(&p, &cfg(d.path())).unwrap_err());
        assert!(e.contains("empty.log") && e.contains("line 2"), "{e}");
        let e =
            replay_trace_file(&d.path().join("none.log"), &cfg(d.path())).unwrap_err().to_string();
        assert!(e.contains("none.log"), "{e}");
    }
}
