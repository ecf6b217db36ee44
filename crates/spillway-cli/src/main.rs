//! `spillway`: the command-line tool. It parses arguments, builds a configuration for
//! the library crates, runs them and prints; all real work lives in `spillway-bench`,
//! `spillway-store` and `spillway-engine`. Errors print as `error: ...` with exit code 1.

mod cmd;

/// mimalloc: the engine allocates event rows on one thread (the reservoir's reader
/// decodes chunks) and frees them on another; glibc malloc spends ~10% of an engine run
/// on that, mimalloc's per-thread free lists do not (measured in docs/RESULTS.md).
///
/// The crate's `override` feature also makes mimalloc the process's `malloc` and `free`
/// (the executable's symbols come before libc's), so the C libraries linked in allocate
/// with it too: librdkafka allocates and frees a block per message on the worker's and
/// its broker threads, and a Kafka worker ran 7-24% faster with it (docs/RESULTS.md);
/// the RocksDB baseline gets the same allocator as the stores it is compared with.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Spillway: state stores for stream processing.
#[derive(Debug, Parser)]
#[command(name = "spillway", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a SQL metrics query over an input file: one output row per event with its
    /// exact sliding-window metrics (with `--input kafka://...`, as a worker of a Kafka
    /// consumer group).
    Run(Box<cmd::run::RunArgs>),
    /// Generate payments and score them with Railgun's fraud metrics (no input needed).
    Demo(cmd::demo::DemoArgs),
    /// Print the plan DAG of a query.
    Explain(cmd::explain::ExplainArgs),
    /// Streaming state-access traces: generate, characterize, convert.
    #[command(subcommand)]
    Trace(cmd::trace::TraceCommand),
    /// Render a results JSON as one self-contained HTML page with SVG plots.
    Report(cmd::report::ReportArgs),
    /// Run benchmarks.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// Cache policies: simulate hit ratios on key-access traces.
    #[command(subcommand)]
    Cache(cmd::cache::CacheCommand),
    /// Kafka topics: produce a file to a topic, consume a result topic, show a group's
    /// members, offsets and lag (workers are
    /// `spillway run --input kafka://...`).
    #[cfg(feature = "kafka")]
    #[command(subcommand)]
    Kafka(cmd::kafka::KafkaCommand),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version print to stdout and succeed; usage errors exit with 1 like
            // every other error.
            let _ = e.print();
            return if e.use_stderr() { ExitCode::FAILURE } else { ExitCode::SUCCESS };
        }
    };
    let result = match cli.command {
        Command::Run(args) => cmd::run::run(*args),
        Command::Demo(args) => cmd::demo::demo(args),
        Command::Explain(args) => cmd::explain::explain(args),
        Command::Trace(cmd) => cmd::trace::run(cmd),
        Command::Report(args) => cmd::report::report(args),
        Command::Bench(cmd) => cmd::bench::run(cmd),
        Command::Cache(cmd) => cmd::cache::run(cmd),
        #[cfg(feature = "kafka")]
        Command::Kafka(cmd) => cmd::kafka::run(cmd),
    };
    // A private Redis started for `--l2 auto` stops with the run (by PID), not at exit.
    spillway_store::tiered::RedisServer::stop_shared();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Every command of the tree says what it does, and every flag has a help line, so
    /// `--help` at any level reads as documentation (hidden test hooks aside).
    #[test]
    fn every_command_and_flag_is_documented() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", cmd.get_name());
            if cmd.get_about().is_none() && cmd.get_long_about().is_none() {
                missing.push(format!("`{path}` has no about text"));
            }
            for a in cmd.get_arguments() {
                let builtin = matches!(a.get_id().as_str(), "help" | "version");
                if a.is_hide_set() || builtin {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("`{path}` argument `{}` has no help", a.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "", &mut missing);
        assert!(missing.is_empty(), "undocumented:\n{}", missing.join("\n"));
    }

    /// `--json FILE` writes a file wherever it appears; `kafka status --json` alone
    /// still prints on stdout (its spelling before it took a file), as `--json -` does.
    #[cfg(feature = "kafka")]
    #[test]
    fn kafka_status_json_takes_a_file_or_stdout() {
        use crate::cmd::kafka::KafkaCommand;
        let json = |extra: &[&str]| {
            let mut a = vec!["spillway", "kafka", "status", "--brokers", "b:1", "--group", "g"];
            a.extend_from_slice(extra);
            match Cli::try_parse_from(a).unwrap().command {
                Command::Kafka(KafkaCommand::Status(s)) => s.json,
                _ => panic!("not kafka status"),
            }
        };
        assert_eq!(json(&[]), None);
        assert_eq!(json(&["--json"]), Some("-".into()));
        assert_eq!(json(&["--json", "-"]), Some("-".into()));
        assert_eq!(json(&["--json", "st.json"]), Some("st.json".into()));
    }

    #[test]
    fn bad_values_are_clear_errors() {
        let e = Cli::try_parse_from(["spillway", "bench", "store", "--memory-budget", "12XB"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("256MiB"), "{e}");
        let e = Cli::try_parse_from(["spillway", "bench", "store", "--stores", "redis"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("hashlog"), "{e}");
    }
}
