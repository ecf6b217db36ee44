//! `spillway trace gen|stats|convert`: argument parsing and printing around
//! `spillway_bench::trace` and `spillway_bench::workload`.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use spillway_bench::trace::gadget::GadgetTextWriter;
use spillway_bench::trace::open::TraceFile;
use spillway_bench::trace::stats::{characterize, CharacterizeOptions};
use spillway_bench::trace::{convert_records, TraceFormat};
use spillway_bench::workload::run::{generate, generate_trace_file};

use crate::cmd::args::{create_parent, load_experiment};

/// `spillway trace`.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Generate a state-access trace from an experiment (TOML or a Gadget config file).
    Gen(GenArgs),
    /// Characterize a trace: op mix, amplification, stack distances and miss-ratio
    /// curve, key-sequence uniqueness, working set, key time-to-live.
    #[command(override_usage = "spillway trace stats [OPTIONS] --trace <FILE>")]
    Stats(StatsArgs),
    /// Convert a trace between Spillway's binary format and Gadget's text format.
    #[command(override_usage = "spillway trace convert [OPTIONS] --trace <FILE> --output <FILE>")]
    Convert(ConvertArgs),
}

/// `spillway trace stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The trace (binary or Gadget text, gzip- or xz-compressed or not; detected from
    /// its first bytes)
    #[arg(long, value_name = "FILE", required_unless_present = "file")]
    trace: Option<PathBuf>,

    /// The trace as a positional argument, the spelling before --trace (kept for one
    /// release)
    #[arg(hide = true, value_name = "FILE", conflicts_with = "trace")]
    file: Option<PathBuf>,

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
    /// The trace to convert (format and gzip/xz compression detected from its first
    /// bytes)
    #[arg(long, value_name = "FILE", required_unless_present = "input")]
    trace: Option<PathBuf>,
    /// Output trace file
    #[arg(long, value_name = "FILE", required_unless_present = "output_file")]
    output: Option<PathBuf>,
    /// The input trace as the first positional argument, the spelling before --trace
    /// (kept for one release)
    #[arg(hide = true, value_name = "INPUT", conflicts_with = "trace")]
    input: Option<PathBuf>,
    /// The output trace as the second positional argument, the spelling before --output
    /// (kept for one release)
    #[arg(hide = true, value_name = "OUTPUT", conflicts_with = "output")]
    output_file: Option<PathBuf>,
    /// Output format: bin or gadget [default: gadget for .log/.txt, else bin]
    #[arg(long, value_name = "FORMAT")]
    to: Option<String>,
}

/// `spillway trace gen`.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// Experiment: a TOML file or a Gadget `key=value` config file
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Output trace file
    // `--out`: the spelling before `--output`, kept for one release.
    #[arg(long, value_name = "FILE", alias = "out")]
    output: PathBuf,
    /// Trace format: bin (Spillway's checksummed binary), gadget (Gadget's text), or null
    /// (count the ops and write nothing: measures generation alone)
    #[arg(long, default_value = "bin", value_name = "FORMAT")]
    format: String,
}

/// Runs a `spillway trace` command.
pub fn run(cmd: TraceCommand) -> Result<()> {
    match cmd {
        TraceCommand::Gen(a) => gen(a),
        TraceCommand::Stats(a) => stats(a),
        TraceCommand::Convert(a) => convert(a),
    }
}

/// Opens a trace in its detected compression and format; errors name the file.
pub fn open_trace(path: &Path) -> Result<TraceFile> {
    spillway_bench::trace::open::open(path).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// The output format named by `to`, or implied by the file's extension.
fn output_format(path: &Path, to: Option<&str>) -> Result<TraceFormat> {
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
fn stats(a: StatsArgs) -> Result<()> {
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
    let file = a.trace.or(a.file).expect("clap requires --trace");
    let t = open_trace(&file)?;
    opts.input_events = t.input_events();
    let s = characterize(t.reader, &opts).with_context(|| format!("{}", file.display()))?;
    print!("{}", s.table());
    if let Some(p) = &a.json {
        create_parent(p)?;
        std::fs::write(p, serde_json::to_string_pretty(&s)? + "\n")
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(())
}

/// `spillway trace convert`.
fn convert(a: ConvertArgs) -> Result<()> {
    let input = a.trace.or(a.input).expect("clap requires --trace");
    let output = a.output.or(a.output_file).expect("clap requires --output");
    let to = output_format(&output, a.to.as_deref())?;
    if input == output {
        bail!("input and output are the same file");
    }
    let t = open_trace(&input)?;
    let from = t.format;
    create_parent(&output)?;
    let out =
        File::create(&output).with_context(|| format!("cannot create {}", output.display()))?;
    let n = convert_records(t.reader, BufWriter::with_capacity(1 << 20, out), to)
        .with_context(|| format!("{} -> {}", input.display(), output.display()))?;
    eprintln!(
        "{n} records: {} ({}) -> {} ({})",
        input.display(),
        from.name(),
        output.display(),
        to.name()
    );
    Ok(())
}

/// `spillway trace gen`.
fn gen(a: GenArgs) -> Result<()> {
    let exp = load_experiment(&a.config)?;
    if a.format != "null" {
        create_parent(&a.output)?;
    }
    if a.format == "null" {
        let r = generate(&exp, &mut |_, op| {
            std::hint::black_box(op);
            Ok(())
        })?;
        eprintln!(
            "{} input events -> {} state ops in {:.3} s: {:.2}M ops/s generated (null sink)",
            r.input_events,
            r.ops,
            r.seconds,
            r.ops as f64 / r.seconds.max(1e-9) / 1e6
        );
        return Ok(());
    }
    let format = TraceFormat::parse(&a.format)
        .ok_or_else(|| anyhow!("--format {}: use bin, gadget or null", a.format))?;
    let r = match format {
        TraceFormat::Binary => generate_trace_file(&exp, &a.output)
            .with_context(|| format!("writing {}", a.output.display()))?,
        TraceFormat::GadgetText => {
            let f = std::fs::File::create(&a.output)
                .with_context(|| format!("cannot create {}", a.output.display()))?;
            let f = BufWriter::with_capacity(1 << 20, f);
            let mut w = GadgetTextWriter::new(f);
            let r = generate(&exp, &mut |_, op| Ok(w.write(op)?))?;
            w.finish()?;
            r
        }
    };
    eprintln!(
        "{}: {} input events -> {} state ops ({:.2} per event) in {:.2} s ({:.2}M ops/s); ops {:?}; events generated {}, emitted {}; late beyond allowed lateness {}",
        a.output.display(),
        r.input_events,
        r.ops,
        r.ops as f64 / r.input_events.max(1) as f64,
        r.seconds,
        r.ops as f64 / r.seconds.max(1e-9) / 1e6,
        r.op_counts,
        r.stream.generated,
        r.stream.emitted,
        r.operator.late_dropped,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Trace {
        #[command(subcommand)]
        c: TraceCommand,
    }

    fn parse(argv: &[&str]) -> Result<TraceCommand, clap::Error> {
        Trace::try_parse_from(std::iter::once("trace").chain(argv.iter().copied())).map(|t| t.c)
    }

    /// The spellings before `--output` and `--trace` (documented until this release) still
    /// parse, to the same values; giving both spellings of one argument is refused.
    #[test]
    fn old_spellings_still_parse() {
        let gen = |argv: &[&str]| match parse(argv).unwrap() {
            TraceCommand::Gen(a) => a.output,
            other => panic!("{other:?}"),
        };
        assert_eq!(gen(&["gen", "--config", "c.toml", "--out", "t.bin"]), Path::new("t.bin"));
        assert_eq!(gen(&["gen", "--config", "c.toml", "--output", "t.bin"]), Path::new("t.bin"));

        let stats = |argv: &[&str]| match parse(argv).unwrap() {
            TraceCommand::Stats(a) => a.trace.or(a.file).unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(stats(&["stats", "t.bin", "--json", "s.json"]), Path::new("t.bin"));
        assert_eq!(stats(&["stats", "--trace", "t.bin"]), Path::new("t.bin"));
        assert!(parse(&["stats", "--trace", "a", "b"]).is_err());
        let e = parse(&["stats"]).unwrap_err().to_string();
        assert!(e.contains("--trace <FILE>"), "{e}");

        let convert = |argv: &[&str]| match parse(argv).unwrap() {
            TraceCommand::Convert(a) => {
                (a.trace.or(a.input).unwrap(), a.output.or(a.output_file).unwrap())
            }
            other => panic!("{other:?}"),
        };
        let want = (PathBuf::from("t.bin"), PathBuf::from("t.log"));
        assert_eq!(convert(&["convert", "t.bin", "t.log"]), want);
        assert_eq!(convert(&["convert", "--trace", "t.bin", "--output", "t.log"]), want);
        assert_eq!(convert(&["convert", "t.bin", "--output", "t.log", "--to", "gadget"]), want);
        let e = parse(&["convert", "--trace", "t.bin"]).unwrap_err().to_string();
        assert!(e.contains("--output <FILE>"), "{e}");
    }
}
