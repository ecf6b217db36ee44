//! Errors of every store: one hand-written, `#[non_exhaustive]` enum whose messages say
//! what happened, where (file and offset) and what to do about it.

use std::fmt;
use std::path::PathBuf;

/// Result alias for store operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a store operation can fail with.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed.
    Io {
        /// What the store was doing ("write log page", "fsync segment", ...).
        op: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A read or write transferred fewer bytes than requested.
    ShortIo {
        /// "read" or "write" and what for.
        op: &'static str,
        /// The file involved.
        path: PathBuf,
        /// Byte offset of the transfer.
        offset: u64,
        /// Bytes requested.
        expected: usize,
        /// Bytes transferred.
        actual: usize,
    },
    /// Bytes on disk failed a checksum or structural check.
    Corrupt {
        /// The file involved.
        path: PathBuf,
        /// Byte offset of the bad structure.
        offset: u64,
        /// What was wrong.
        what: String,
    },
    /// The directory holds something other than a store of this kind.
    NotAStore {
        /// The directory or file.
        path: PathBuf,
        /// Why it was rejected.
        reason: String,
    },
    /// The files were written by a newer format version than this build reads.
    NewerFormat {
        /// The file.
        path: PathBuf,
        /// Version found in the file.
        found: u32,
        /// Newest version this build reads.
        supported: u32,
    },
    /// The memory budget cannot hold what the store needs to run.
    BudgetTooSmall {
        /// The configured budget in bytes.
        budget: u64,
        /// Bytes needed.
        needed: u64,
        /// What needed them.
        what: String,
    },
    /// A key is longer than the store's documented maximum.
    KeyTooLarge {
        /// Length given.
        len: usize,
        /// Maximum allowed.
        max: usize,
    },
    /// A value (or a merged list) is longer than the store's documented maximum.
    ValueTooLarge {
        /// Length given (or that the merge would produce).
        len: usize,
        /// Maximum allowed.
        max: usize,
    },
    /// The backend does not implement this operation.
    Unsupported {
        /// Store name.
        store: &'static str,
        /// Operation name.
        op: &'static str,
        /// What to use instead.
        hint: &'static str,
    },
    /// A namespace name was not declared when the store was opened.
    UnknownNamespace {
        /// The name asked for.
        name: String,
    },
    /// The namespaces declared at open differ from those the checkpoint was written with.
    NamespaceMismatch {
        /// Description of the difference.
        detail: String,
    },
    /// The options given at open are invalid.
    InvalidOption {
        /// Option name.
        option: &'static str,
        /// What is wrong and what is allowed.
        detail: String,
    },
    /// A previous I/O or corruption error left the store in an unknown state; it
    /// refuses reads and writes until reopened.
    Poisoned {
        /// The error that poisoned it.
        cause: String,
    },
    /// Direct I/O was asked for ([`StoreOptions::direct_io`](crate::StoreOptions)) but
    /// the file system refused to open a file with `O_DIRECT`.
    DirectIoUnsupported {
        /// The file that could not be opened for direct I/O.
        path: PathBuf,
        /// The OS error (EINVAL from the file system).
        source: std::io::Error,
    },
    /// The log's address space (documented in the hashlog FORMAT section) is used up.
    AddressSpaceExhausted,
    /// A value (or key) of a typed collection ([`crate::collections`]) does not decode
    /// as its declared type, or a value cannot be encoded.
    Decode {
        /// The collection: namespace, kind and id.
        collection: String,
        /// The key, in hex (empty when encoding a value failed).
        key: String,
        /// What was wrong.
        detail: String,
    },
    /// The Redis level of the tiered store failed (unreachable, killed, out of memory,
    /// or its data was lost under the store).
    Redis {
        /// The server's address as configured (`redis://…`, `redis+unix://…`, `auto`).
        addr: String,
        /// What the store was doing ("connect", "read", "demote", "flush to L3", ...).
        op: &'static str,
        /// What went wrong.
        detail: String,
    },
    /// An adaptive store abandoned a migration because an entry could not be moved
    /// (an error that does not poison): its target part refused it (a value written before the
    /// parts shared their bound, e.g. under larger pages). The store is whole and
    /// usable: the namespace moves back to the layout it came from.
    /// Boxed: every store operation returns this error type, so its size stays small.
    MigrationAbandoned(Box<AbandonedMigration>),
    /// An error reported by an external engine (RocksDB).
    Backend {
        /// Which engine.
        engine: &'static str,
        /// Its message.
        message: String,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { op, path: path.into(), source }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, offset: u64, what: impl Into<String>) -> Self {
        Error::Corrupt { path: path.into(), offset, what: what.into() }
    }

    /// True for errors after which the store must not accept further writes.
    pub fn poisons(&self) -> bool {
        matches!(
            self,
            Error::Io { .. }
                | Error::ShortIo { .. }
                | Error::Corrupt { .. }
                | Error::DirectIoUnsupported { .. }
                | Error::Redis { .. }
        )
    }
}

/// What [`Error::MigrationAbandoned`] reports.
#[derive(Debug)]
pub struct AbandonedMigration {
    /// The namespace.
    pub namespace: String,
    /// The layout the namespace was leaving ("appendlog", ...), and moves back to.
    pub from: &'static str,
    /// The layout it was moving to.
    pub to: &'static str,
    /// The key of the entry that could not be moved, in hex (empty when the walk itself
    /// failed).
    pub key: String,
    /// The part's error.
    pub cause: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, path, source } => {
                write!(f, "I/O error during {op} on {}: {source}", path.display())
            }
            Error::ShortIo { op, path, offset, expected, actual } => write!(
                f,
                "short {op} on {} at offset {offset}: expected {expected} bytes, got {actual} \
                 (file truncated or disk full?)",
                path.display()
            ),
            Error::Corrupt { path, offset, what } => write!(
                f,
                "corrupt data in {} at offset {offset}: {what}; the store will not return \
                 data from it (restore the directory from a backup or move the damaged \
                 checkpoint aside)",
                path.display()
            ),
            Error::NotAStore { path, reason } => {
                write!(f, "{} is not a store of this kind: {reason}", path.display())
            }
            Error::NewerFormat { path, found, supported } => write!(
                f,
                "{} has format version {found}, but this build reads versions up to \
                 {supported}; upgrade spillway to open it",
                path.display()
            ),
            Error::BudgetTooSmall { budget, needed, what } => write!(
                f,
                "memory budget of {budget} bytes is too small: {what} needs {needed} bytes; \
                 raise the memory budget"
            ),
            Error::KeyTooLarge { len, max } => {
                write!(f, "key of {len} bytes exceeds the maximum of {max} bytes")
            }
            Error::ValueTooLarge { len, max } => write!(
                f,
                "value of {len} bytes exceeds this store's maximum of {max} bytes (for hashlog \
                 the maximum follows from the page size; raise it with page_size)"
            ),
            Error::Unsupported { store, op, hint } => {
                write!(f, "the {store} store does not support {op}: {hint}")
            }
            Error::UnknownNamespace { name } => write!(
                f,
                "namespace {name:?} was not declared when the store was opened; declare it \
                 in the store options"
            ),
            Error::NamespaceMismatch { detail } => {
                write!(f, "the namespaces declared at open do not match the checkpoint: {detail}")
            }
            Error::InvalidOption { option, detail } => {
                write!(f, "invalid store option {option}: {detail}")
            }
            Error::Poisoned { cause } => write!(
                f,
                "the store refuses reads and writes after an earlier I/O or corruption error \
                 ({cause}); close it and reopen it to recover the last checkpoint"
            ),
            Error::DirectIoUnsupported { path, source } => write!(
                f,
                "cannot open {} for direct I/O: the file system does not support direct I/O \
                 (O_DIRECT: {source}); put the store on a disk-backed file system (ext4, xfs) \
                 or turn the direct_io option off",
                path.display()
            ),
            Error::AddressSpaceExhausted => write!(
                f,
                "the hybrid log has used its whole address space (128 TiB of appends); \
                 checkpoint, then copy the state into a fresh store"
            ),
            Error::Decode { collection, key, detail } if key.is_empty() => {
                write!(f, "{collection}: {detail}")
            }
            Error::Decode { collection, key, detail } => {
                write!(f, "{collection}, key {key}: {detail}")
            }
            Error::Redis { addr, op, detail } => {
                write!(f, "Redis at {addr} failed during {op}: {detail}")?;
                if !matches!(*op, "start" | "connect" | "open") {
                    f.write_str(
                        "; the tiered store does not guess what Redis held: reopen the store \
                         to recover its last checkpoint",
                    )?;
                }
                Ok(())
            }
            Error::MigrationAbandoned(m) => {
                let AbandonedMigration { namespace, from, to, key, cause } = &**m;
                write!(f, "the adaptive store abandoned migrating namespace {namespace:?} from {from} to {to}: ")?;
                if key.is_empty() {
                    write!(f, "a step failed ({cause})")?;
                } else {
                    write!(f, "moving key {key} (hex) failed ({cause})")?;
                }
                write!(
                    f,
                    "; the namespace moves back to {from}, where its state is whole, and is not \
                     moved to {to} again unless asked to (migrate) or reopened"
                )
            }
            Error::Backend { engine, message } => write!(f, "{engine} error: {message}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } | Error::DirectIoUnsupported { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Passes `r` through; an error that [poisons](Error::poisons) marks the store as
/// poisoned with its message (the first such error is kept). Every store calls this
/// once per operation: the `Ok` path is one branch, the error path out of line.
#[inline(always)]
pub(crate) fn poison_on<T>(poisoned: &mut Option<String>, r: Result<T>) -> Result<T> {
    match r {
        Ok(v) => Ok(v),
        Err(e) => Err(mark_poisoned(poisoned, e)),
    }
}

#[cold]
#[inline(never)]
fn mark_poisoned(poisoned: &mut Option<String>, e: Error) -> Error {
    if e.poisons() && poisoned.is_none() {
        *poisoned = Some(e.to_string());
    }
    e
}

/// `Ok` unless `poisoned` holds the cause of an earlier failure, which it returns as
/// [`Error::Poisoned`]: the check every store makes before a write.
pub(crate) fn writable(poisoned: &Option<String>) -> Result<()> {
    match poisoned {
        Some(cause) => Err(Error::Poisoned { cause: cause.clone() }),
        None => Ok(()),
    }
}

/// The check every store makes before a read: after a failed write or flush its
/// in-memory state (page frames, memtables) may not match what its indexes say, so a
/// poisoned store answers [`Error::Poisoned`] instead of reading it.
pub(crate) fn readable(poisoned: &Option<String>) -> Result<()> {
    writable(poisoned)
}
