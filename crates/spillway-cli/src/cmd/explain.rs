//! `spillway explain`: the plan DAG of a query, from `spillway_engine::plan`.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use clap::Args;
use spillway_engine::operator::windowed::WindowPlan;
use spillway_engine::plan::Plan;
use spillway_engine::source::{self, OnError};
use spillway_engine::sql::Query;
use spillway_engine::value::{Field, Schema};

use crate::cmd::args::{check_from, read_query, source_options, InputArgs, FILE_TABLE};

/// `spillway explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The SQL query: a file, or the query text itself
    #[arg(long, value_name = "FILE|SQL")]
    query: String,

    /// Input file whose columns and types the query refers to (inferred as `run` does);
    /// without it, --schema must list every column
    #[arg(long, value_name = "FILE")]
    input: Option<PathBuf>,

    /// The input's table name, which the query's FROM must name [default: the --input
    /// file's name without its extension; without --input, any name]
    #[arg(long, value_name = "NAME")]
    table: Option<String>,

    #[command(flatten)]
    input_args: InputArgs,
}

/// `spillway explain`.
pub fn explain(a: ExplainArgs) -> Result<()> {
    let query = read_query(&a.query)?;
    check_from(
        &query,
        a.table.as_deref(),
        a.input.as_deref().and_then(source::table_name),
        FILE_TABLE,
    )?;
    let mut sopts = source_options(&a.input_args, OnError::Stop)?;
    sopts.type_hints = spillway_engine::sql::column_type_hints(&query);
    let schema = match &a.input {
        Some(p) => source::open(p, &sopts)?.schema().clone(),
        None => {
            if sopts.schema_overrides.is_empty() {
                bail!("explain needs the input's columns: give --input FILE or --schema name:type,...");
            }
            let fields = sopts
                .schema_overrides
                .iter()
                .map(|(n, t)| Field { name: n.clone(), ty: *t })
                .collect();
            Schema::new(fields, &sopts.time_column, sopts.time_unit).map_err(|e| anyhow!(e))?
        }
    };
    match spillway_engine::sql::parse(&query, &schema)? {
        Query::Over(spec) => print!("{}", Plan::build(&spec, &schema)?.explain(&schema)),
        Query::Windowed(q) => print!("{}", WindowPlan::build(&q).explain(&schema)),
    }
    Ok(())
}
