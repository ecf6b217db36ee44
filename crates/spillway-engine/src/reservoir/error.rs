//! The reservoir's error type: one hand-written enum whose messages name the file, the byte
//! offset or the event index involved and what was expected there.

use std::fmt;
use std::path::PathBuf;

/// Everything a reservoir operation can fail with.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReservoirError {
    /// An operating-system I/O call failed.
    Io {
        /// What the reservoir was doing ("create segment", "fsync segment", ...).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Bytes on disk (or, for `path` `<memory>`, in a chunk held in memory) failed a
    /// checksum, length or structural check. No event of such a chunk is ever returned.
    Corrupt {
        /// The file involved.
        path: PathBuf,
        /// Byte offset in the file of the bad structure (a chunk frame's offset for
        /// problems inside its payload; `what` then gives the offset inside the payload).
        offset: u64,
        /// What was wrong and what was expected.
        what: String,
    },
    /// The schema given to [`Reservoir::recover`](super::Reservoir::recover) differs from
    /// the one the reservoir was created with.
    SchemaMismatch {
        /// The schema file.
        path: PathBuf,
        /// How the two schemas differ.
        what: String,
    },
    /// [`Reservoir::create`](super::Reservoir::create) was pointed at a directory that
    /// already holds a reservoir.
    AlreadyExists {
        /// The directory.
        path: PathBuf,
    },
    /// [`Reservoir::recover`](super::Reservoir::recover) was pointed at a directory that
    /// holds no reservoir (no schema file).
    NotAReservoir {
        /// The directory.
        path: PathBuf,
        /// Why it was rejected.
        reason: String,
    },
    /// An option is out of range.
    InvalidOption {
        /// Which option and why.
        what: String,
    },
    /// An appended event does not fit the schema (wrong field count or a value of the
    /// wrong type). Nothing was appended.
    InvalidEvent {
        /// The index the event would have had.
        index: u64,
        /// What did not fit.
        what: String,
    },
    /// A cursor was asked for an event whose segment was released by
    /// [`Reservoir::release_before`](super::Reservoir::release_before).
    Released {
        /// The requested event index.
        index: u64,
        /// The oldest event index still in the reservoir.
        first_live: u64,
    },
    /// A cursor was asked to start past the end of the reservoir.
    OutOfRange {
        /// The requested event index.
        index: u64,
        /// Events in the reservoir.
        len: u64,
    },
    /// A [`CursorId`](super::CursorId) that this reservoir did not hand out.
    UnknownCursor {
        /// The id's number.
        id: u32,
    },
    /// A background thread failed earlier (the error was returned then); the reservoir
    /// accepts no more calls and must be recovered from the last synced position.
    Broken {
        /// The original error's message.
        what: String,
    },
}

impl ReservoirError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ReservoirError::Io { op, path: path.into(), source }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, offset: u64, what: impl Into<String>) -> Self {
        ReservoirError::Corrupt { path: path.into(), offset, what: what.into() }
    }
}

impl fmt::Display for ReservoirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReservoirError::Io { op, path, source } => {
                write!(f, "reservoir: {op} `{}` failed: {source}", path.display())
            }
            ReservoirError::Corrupt { path, offset, what } => write!(
                f,
                "reservoir file `{}` is corrupt at byte offset {offset}: {what}",
                path.display()
            ),
            ReservoirError::SchemaMismatch { path, what } => write!(
                f,
                "reservoir schema mismatch: `{}` holds a different schema than the one given: {what}",
                path.display()
            ),
            ReservoirError::AlreadyExists { path } => write!(
                f,
                "directory `{}` already holds a reservoir; use recover to reopen it or pick an \
                 empty directory",
                path.display()
            ),
            ReservoirError::NotAReservoir { path, reason } => {
                write!(f, "`{}` is not a reservoir: {reason}", path.display())
            }
            ReservoirError::InvalidOption { what } => write!(f, "invalid reservoir option: {what}"),
            ReservoirError::InvalidEvent { index, what } => {
                write!(f, "event {index} does not fit the reservoir schema: {what}")
            }
            ReservoirError::Released { index, first_live } => write!(
                f,
                "event {index} was released from the reservoir (oldest live event is {first_live})"
            ),
            ReservoirError::OutOfRange { index, len } => {
                write!(f, "event index {index} is past the end of the reservoir ({len} events)")
            }
            ReservoirError::UnknownCursor { id } => {
                write!(f, "cursor {id} was not created by this reservoir")
            }
            ReservoirError::Broken { what } => write!(
                f,
                "reservoir stopped after an earlier background error ({what}); recover it from \
                 the last synced position"
            ),
        }
    }
}

impl std::error::Error for ReservoirError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReservoirError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
