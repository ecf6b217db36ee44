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
    #[arg(long, value_name = "FILE")]
    html: PathBuf,
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
