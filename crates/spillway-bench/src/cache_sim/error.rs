//! What can go wrong in a simulation: bad arguments and bad trace files.

use std::fmt;
use std::path::PathBuf;

use super::POLICIES;

/// An error of the cache simulator. Each names the argument or the file (and line) at
/// fault and what was expected.
#[derive(Debug)]
#[non_exhaustive]
pub enum SimError {
    /// A policy name that is not one of [`POLICIES`].
    UnknownPolicy {
        /// The name given.
        name: String,
    },
    /// A capacity that is not a positive entry count or percentage.
    BadCapacity {
        /// The capacity as given.
        text: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A trace file that cannot be opened.
    Open {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A read (or gzip decoding) error in a trace.
    Read {
        /// The file.
        path: PathBuf,
        /// The line being read (1-based).
        line: u64,
        /// The cause.
        source: std::io::Error,
    },
    /// A trace line that is not a decimal `u64`.
    BadLine {
        /// The file.
        path: PathBuf,
        /// The line (1-based).
        line: u64,
        /// The line's text (shortened if long).
        text: String,
    },
    /// A trace with no accesses.
    EmptyTrace {
        /// The file.
        path: PathBuf,
    },
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::UnknownPolicy { name } => {
                write!(f, "unknown policy `{name}`; known policies: {}", POLICIES.join(", "))
            }
            SimError::BadCapacity { text, reason } => write!(
                f,
                "bad capacity `{text}`: {reason}; give a number of entries (5000) or a \
                 percentage of the trace's distinct keys (5%)"
            ),
            SimError::Open { path, .. } => write!(f, "cannot open trace {}", path.display()),
            SimError::Read { path, line, .. } => {
                write!(f, "{}:{line}: cannot read the trace", path.display())
            }
            SimError::BadLine { path, line, text } => write!(
                f,
                "{}:{line}: `{text}` is not a key; expected one decimal unsigned 64-bit \
                 integer per line",
                path.display()
            ),
            SimError::EmptyTrace { path } => write!(
                f,
                "{}: the trace is empty; expected one key per line, each line an access",
                path.display()
            ),
        }
    }
}

impl std::error::Error for SimError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SimError::Open { source, .. } | SimError::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}
