//! `spillway bench disk`: the disk's random 4 KiB read rate (`spillway_bench::disk_bench`).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use spillway_bench::disk_bench::{self, DiskProbeConfig};
use spillway_bench::units::parse_size;

#[derive(Debug, Args)]
pub struct DiskArgs {
    /// Directory under which the probe file is created (and removed) [default: the
    /// system temporary directory]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,

    /// Size of the probe file, e.g. 2GiB
    #[arg(long, value_parser = parse_size, default_value = "2GiB", value_name = "SIZE")]
    file_size: u64,

    /// Seconds of random reads
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,

    /// Also write the figures, machine and date as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

pub fn run(args: DiskArgs) -> Result<()> {
    let cfg = DiskProbeConfig {
        dir: args.dir,
        file_size: args.file_size,
        seconds: args.seconds,
        ..Default::default()
    };
    let r = disk_bench::probe(&cfg)?;
    println!("{}", r.summary());
    if let Some(path) = &args.json {
        r.write_json(path)?;
    }
    Ok(())
}
