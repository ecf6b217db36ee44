//! The engine's error type: one enum over every layer a job touches, each variant
//! keeping its source's message (which names the file, line, column or key).

use std::fmt;

use crate::plan::PlanError;
use crate::reservoir::ReservoirError;
use crate::source::SourceError;
use crate::sql::SqlError;

/// Anything that stops a job.
///
/// The wrapped errors of the other layers are boxed, so an `Error` is 32 bytes and every
/// fallible call on the per-event path returns a small `Result` (unboxed, the largest
/// variant made it 88 bytes, written and read on every call).
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The query did not parse or type-check.
    Sql(Box<SqlError>),
    /// The query parsed but no plan can run it.
    Plan(PlanError),
    /// Reading input or writing output failed, or an input row was malformed.
    Source(Box<SourceError>),
    /// The event reservoir failed.
    Reservoir(Box<ReservoirError>),
    /// The state store failed.
    Store(Box<spillway_store::Error>),
    /// Aggregation state bytes did not decode, or an aggregate got a value it cannot take
    /// (a bug or a damaged store; the message names the namespace).
    State(String),
    /// A checkpoint could not be written, read or matched to this run.
    Checkpoint(String),
    /// A bad option value.
    Config(String),
    /// The Kafka client or broker failed (the message names the broker address and the
    /// topic or operation).
    Kafka(String),
    /// A job stopped on `error` after writing output: `outputs` says what became of the
    /// output files (left as `.partial` files, or cut back to the last checkpoint).
    Stopped {
        /// Why the job stopped.
        error: Box<Error>,
        /// What the output files hold now, naming their paths.
        outputs: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Sql(e) => write!(f, "query: {e}"),
            Error::Plan(e) => write!(f, "plan: {e}"),
            Error::Source(e) => write!(f, "{e}"),
            Error::Reservoir(e) => write!(f, "event reservoir: {e}"),
            Error::Store(e) => write!(f, "state store: {e}"),
            Error::State(m) => write!(f, "aggregation state: {m}"),
            Error::Checkpoint(m) => write!(f, "checkpoint: {m}"),
            Error::Config(m) => f.write_str(m),
            Error::Kafka(m) => write!(f, "kafka: {m}"),
            Error::Stopped { error, outputs } => write!(f, "{error}; {outputs}"),
        }
    }
}

/// `Display` already includes the wrapped error's message, so `source()` skips it and
/// returns *its* source: error chains (`{:#}` in the CLI) print each message once. The
/// source, reservoir and store errors' own messages include their I/O error's (`x.csv:
/// cannot open: No such file or directory`), so that one is skipped too.
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        fn past_io(e: &dyn std::error::Error) -> Option<&(dyn std::error::Error + 'static)> {
            e.source().and_then(std::error::Error::source)
        }
        match self {
            Error::Sql(e) => e.source(),
            Error::Plan(e) => e.source(),
            Error::Source(e) => past_io(e),
            Error::Reservoir(e) => past_io(e),
            Error::Store(e) => past_io(e),
            Error::Stopped { error, .. } => error.source(),
            Error::State(_) | Error::Checkpoint(_) | Error::Config(_) | Error::Kafka(_) => None,
        }
    }
}

macro_rules! from {
    ($t:ty, $v:ident) => {
        impl From<$t> for Error {
            #[cold]
            fn from(e: $t) -> Self {
                Error::$v(Box::new(e))
            }
        }
    };
}
from!(SqlError, Sql);
from!(SourceError, Source);
from!(ReservoirError, Reservoir);
from!(spillway_store::Error, Store);

impl From<PlanError> for Error {
    fn from(e: PlanError) -> Self {
        Error::Plan(e)
    }
}

impl From<crate::aggregate::external::HolisticError> for Error {
    fn from(e: crate::aggregate::external::HolisticError) -> Self {
        Error::State(e.to_string())
    }
}

/// Result alias of the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every message of `e`'s chain, as `{:#}` prints them.
    fn chain(e: &dyn std::error::Error) -> Vec<String> {
        let mut out = vec![e.to_string()];
        let mut s = e.source();
        while let Some(x) = s {
            out.push(x.to_string());
            s = x.source();
        }
        out
    }

    #[test]
    fn an_error_is_small() {
        assert!(std::mem::size_of::<Error>() <= 32, "{}", std::mem::size_of::<Error>());
    }

    #[test]
    fn an_io_error_is_printed_once() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let what = io.to_string();
        let source = SourceError::Io { file: "out.csv".into(), action: "open", error: io };
        let e = Error::Stopped { error: Box::new(Error::from(source)), outputs: "none".into() };
        let text = chain(&e).join(": ");
        assert_eq!(text.matches(&what).count(), 1, "{text}");
        let io = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let what = io.to_string();
        let reservoir = ReservoirError::Io { op: "open", path: "/d/res".into(), source: io };
        let text = chain(&Error::from(reservoir)).join(": ");
        assert_eq!(text.matches(&what).count(), 1, "{text}");
    }
}
