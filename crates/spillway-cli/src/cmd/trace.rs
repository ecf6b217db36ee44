//! `spillway trace ...` and `spillway report`: argument parsing and printing around
//! `spillway_bench::trace` and `spillway_bench::report`.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use spillway_bench::report::{render_html, ReportInput};
use spillway_bench::trace::open::TraceFile;
use spillway_bench::trace::stats::{characterize, CharacterizeOptions};
use spillway_bench::trace::{convert_records, TraceFormat};

/// `spillway trace`.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Generate a state-access trace from an experiment (TOML or a Gadget config file).
    Gen(crate::cmd::bench::workload::GenArgs),
    /// Characterize a trace: op mix, amplification, stack distances and miss-ratio
    /// curve, key-sequence uniqueness, working set, key time-to-live.
    Stats(StatsArgs),
    /// Convert a trace between Spillway's binary format and Gadget's text format.
    Convert(ConvertArgs),
}

/// `spillway trace stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The trace (binary or Gadget text, gzip- or xz-compressed or not; detected from
    /// its first bytes)
    file: PathBuf,

    /// Also compute the Kolmogorov-Smirnov distance between this trace's key
    /// rank-frequency distribution and that of another trace
    #[arg(long, value_name = "TRACE")]
    compare: Option<PathBuf>,

    /// Longest key sequence counted for the uniqueness statistic (0 turns it off)
    #[arg(long, default_value_t = 4, value_name = "L")]
    sequence_len: usize,

    /// Ops per working-set window
    #[arg(long, default_value_t = 10_000, value_name = "OPS")]
    window_ops: u64,

    /// Write the statistics as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// `spillway trace convert`.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// Input trace (format and gzip/xz compression detected from its first bytes)
    input: PathBuf,
    /// Output trace
    output: PathBuf,
    /// Output format: bin or gadget [default: gadget for .log/.txt, else bin]
    #[arg(long, value_name = "FORMAT")]
    to: Option<String>,
}

/// `spillway report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A results JSON written by `spillway bench suite` or `bench workload`
    results: PathBuf,
    /// Write the HTML page (self-contained, SVG plots) to FILE
    #[arg(long, value_name = "FILE")]
    html: PathBuf,
}

/// Opens a trace in its detected compression and format; errors name the file.
pub fn open_trace(path: &Path) -> Result<TraceFile> {
    spillway_bench::trace::open::open(path).map_err(|e| anyhow!("{}: {e}", path.display()))
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

/// The output format named by `to`, or implied by the file's extension.
pub fn output_format(path: &Path, to: Option<&str>) -> Result<TraceFormat> {
    match to {
        Some(s) => TraceFormat::parse(s)
            .ok_or_else(|| anyhow!("unknown trace format `{s}`; use bin or gadget")),
        None => Ok(match path.extension().and_then(|e| e.to_str()) {
            Some("log" | "txt") => TraceFormat::GadgetText,
            _ => TraceFormat::Binary,
        }),
    }
}

/// `spillway trace stats`.
pub fn stats(a: StatsArgs) -> Result<()> {
    let mut opts = CharacterizeOptions {
        sequence_len: a.sequence_len,
        window_ops: a.window_ops,
        ..Default::default()
    };
    if let Some(other) = &a.compare {
        let freq = spillway_bench::trace::stats::key_frequencies(open_trace(other)?.reader)
            .with_context(|| format!("{}", other.display()))?;
        opts.reference_counts = Some(freq);
    }
    let t = open_trace(&a.file)?;
    opts.input_events = t.input_events();
    let s = characterize(t.reader, &opts).with_context(|| format!("{}", a.file.display()))?;
    print!("{}", s.table());
    if let Some(p) = &a.json {
        create_parent(p)?;
        std::fs::write(p, serde_json::to_string_pretty(&s)? + "\n")
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(())
}

/// `spillway trace convert`.
pub fn convert_cmd(a: ConvertArgs) -> Result<()> {
    let to = output_format(&a.output, a.to.as_deref())?;
    if a.input == a.output {
        bail!("input and output are the same file");
    }
    let t = open_trace(&a.input)?;
    let from = t.format;
    create_parent(&a.output)?;
    let out =
        File::create(&a.output).with_context(|| format!("cannot create {}", a.output.display()))?;
    let n = convert_records(t.reader, BufWriter::with_capacity(1 << 20, out), to)
        .with_context(|| format!("{} -> {}", a.input.display(), a.output.display()))?;
    eprintln!(
        "{n} records: {} ({}) -> {} ({})",
        a.input.display(),
        from.name(),
        a.output.display(),
        to.name()
    );
    Ok(())
}

/// `spillway report`.
pub fn report(a: ReportArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.results)
        .with_context(|| format!("cannot read {}", a.results.display()))?;
    let input: ReportInput = serde_json::from_str(&text).with_context(|| {
        format!("{}: expected a results JSON with a `rows` array", a.results.display())
    })?;
    create_parent(&a.html)?;
    std::fs::write(&a.html, render_html(&input))
        .with_context(|| format!("cannot write {}", a.html.display()))?;
    eprintln!(
        "wrote {} ({} rows, {} traces)",
        a.html.display(),
        input.rows.len(),
        input.traces.len()
    );
    Ok(())
}
