//! `spillway report`: a results JSON as one HTML page, from `spillway_bench::report`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use spillway_bench::report::{render_html, ReportInput};

use crate::cmd::args::create_parent;

/// `spillway report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A results JSON written by `spillway bench suite` or `bench workload`
    results: PathBuf,
    /// Write the HTML page (self-contained, SVG plots) to FILE
    // `--html`: the spelling before `--output`, kept for one release.
    #[arg(long, value_name = "FILE", alias = "html")]
    output: PathBuf,
}

/// `spillway report`.
pub fn report(a: ReportArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.results)
        .with_context(|| format!("cannot read {}", a.results.display()))?;
    let input: ReportInput = serde_json::from_str(&text).with_context(|| {
        format!("{}: expected a results JSON with a `rows` array", a.results.display())
    })?;
    create_parent(&a.output)?;
    std::fs::write(&a.output, render_html(&input))
        .with_context(|| format!("cannot write {}", a.output.display()))?;
    eprintln!(
        "wrote {} ({} rows, {} traces)",
        a.output.display(),
        input.rows.len(),
        input.traces.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Report {
        #[command(flatten)]
        a: ReportArgs,
    }

    /// `--html`, the spelling before `--output`, still parses.
    #[test]
    fn html_still_parses() {
        for flag in ["--output", "--html"] {
            let a = Report::try_parse_from(["report", "r.json", flag, "r.html"]).unwrap().a;
            assert_eq!(a.output, PathBuf::from("r.html"), "{flag}");
        }
    }
}
