//! The worker's test seam: `SPILLWAY_KAFKA_FAULT=POINT@N:MARKER` makes a worker stop at
//! one point of the exactly-once protocol, create the file `MARKER` and block until it
//! is killed (at most 10 minutes), so a test can SIGKILL it exactly there (the file job's `--halt-after` is
//! the same idea). Unset, nothing changes. Points:
//! - `replay-commit@N`: after the N-th replayed message (a restore behind the committed
//!   offset), commit as if the commit interval were due, then halt: the commit must not
//!   lower the group's committed offset.
//! - `before-commit@N`: in the N-th commit, after the offsets were added to the
//!   transaction (`send_offsets_to_transaction`) and before `commit_transaction`.
//! - `mid-checkpoint@N`: in the N-th checkpoint, after the first task's state was written
//!   and before the others'.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// How long a halted worker waits to be killed before it exits by itself.
const HALT_LIMIT: Duration = Duration::from_secs(600);

/// The environment variable that arms the seam.
pub const FAULT_ENV: &str = "SPILLWAY_KAFKA_FAULT";

/// Where the worker halts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultPoint {
    ReplayCommit,
    BeforeCommit,
    MidCheckpoint,
}

/// An armed (or unarmed) seam.
#[derive(Debug, Default)]
pub struct Fault {
    /// The point, `None` when unarmed.
    pub point: Option<FaultPoint>,
    after: u64,
    marker: PathBuf,
}

impl Fault {
    /// The seam `SPILLWAY_KAFKA_FAULT` describes; unarmed when it is unset.
    pub fn from_env() -> Result<Fault> {
        match std::env::var(FAULT_ENV) {
            Ok(spec) => Fault::parse(&spec),
            Err(_) => Ok(Fault::default()),
        }
    }

    fn parse(spec: &str) -> Result<Fault> {
        let bad = || {
            Error::Config(format!(
                "{FAULT_ENV}={spec:?}: expected POINT@N:MARKER with POINT one of replay-commit, \
                 before-commit, mid-checkpoint"
            ))
        };
        let (point, rest) = spec.split_once('@').ok_or_else(bad)?;
        let (n, marker) = rest.split_once(':').ok_or_else(bad)?;
        let point = match point {
            "replay-commit" => FaultPoint::ReplayCommit,
            "before-commit" => FaultPoint::BeforeCommit,
            "mid-checkpoint" => FaultPoint::MidCheckpoint,
            _ => return Err(bad()),
        };
        let after = n.parse::<u64>().ok().filter(|&n| n > 0).ok_or_else(bad)?;
        if marker.is_empty() {
            return Err(bad());
        }
        Ok(Fault { point: Some(point), after, marker: marker.into() })
    }

    /// Whether the armed count is reached at `count`.
    pub fn due(&self, count: u64) -> bool {
        count >= self.after
    }

    /// Halts here, for good, if the seam is armed at `point` and `count` reached its N.
    pub fn reached(&self, point: FaultPoint, count: u64) {
        if self.point != Some(point) || !self.due(count) {
            return;
        }
        if let Err(e) = std::fs::write(&self.marker, format!("{point:?} {count}\n")) {
            eprintln!("{FAULT_ENV}: cannot create {}: {e}", self.marker.display());
        }
        // Killed long before this in a test; bounded so a seam nobody kills ends too.
        std::thread::sleep(HALT_LIMIT);
        eprintln!(
            "{FAULT_ENV}: halted at {point:?} for {} s and nobody killed this worker",
            HALT_LIMIT.as_secs()
        );
        std::process::exit(3);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_say_what_is_expected() {
        let f = Fault::parse("replay-commit@500:/tmp/m").unwrap();
        assert_eq!(f.point, Some(FaultPoint::ReplayCommit));
        assert!(!f.due(499) && f.due(500));
        assert_eq!(
            Fault::parse("mid-checkpoint@2:m").unwrap().point,
            Some(FaultPoint::MidCheckpoint)
        );
        for bad in [
            "",
            "replay-commit",
            "replay-commit@0:m",
            "x@1:m",
            "before-commit@1:",
            "before-commit@a:m",
        ] {
            let e = Fault::parse(bad).unwrap_err().to_string();
            assert!(e.contains("POINT@N:MARKER"), "{bad}: {e}");
        }
        assert_eq!(Fault::default().point, None);
    }
}
