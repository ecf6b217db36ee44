//! Namespaces: one per operator state (like a RocksDB column family), each declaring
//! how `merge` combines an operand with the current value.

use std::fmt;
use std::sync::Arc;

/// A handle to a namespace of an open store, returned by
/// [`StateStore::namespace`](crate::StateStore::namespace). Cheap to copy; only valid
/// for the store that returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ns(pub(crate) u16);

impl Ns {
    /// Position of the namespace in the declaration list given at open.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A user merge function: given the current value (if any) and one operand, write the
/// new value into `out` (which arrives empty).
pub type MergeFnPtr = dyn Fn(Option<&[u8]>, &[u8], &mut Vec<u8>) + Send + Sync;

/// How `merge` behaves in a namespace.
#[derive(Clone)]
#[non_exhaustive]
pub enum MergeOp {
    /// The operand is appended as one element of a list (see [`crate::list`]).
    ListAppend,
    /// A named user function computes the new value from the old value and the operand.
    /// The name is recorded in checkpoints: reopening with a different name is an error.
    /// Like a namespace's, it is 1..=255 bytes without control characters (checked when
    /// a store is opened with it).
    Function {
        /// Stable name of the function.
        name: String,
        /// The function.
        f: Arc<MergeFnPtr>,
    },
}

impl MergeOp {
    /// A user merge function with a stable name.
    pub fn function(
        name: impl Into<String>,
        f: impl Fn(Option<&[u8]>, &[u8], &mut Vec<u8>) + Send + Sync + 'static,
    ) -> Self {
        MergeOp::Function { name: name.into(), f: Arc::new(f) }
    }

    /// The identifier written into checkpoints ("list" or "fn:NAME").
    pub fn tag(&self) -> String {
        match self {
            MergeOp::ListAppend => "list".to_string(),
            MergeOp::Function { name, .. } => format!("fn:{name}"),
        }
    }

    /// Applies the merge to `old` and `operand`, writing the result to `out`.
    pub fn apply(&self, old: Option<&[u8]>, operand: &[u8], out: &mut Vec<u8>) {
        match self {
            MergeOp::ListAppend => {
                if let Some(old) = old {
                    out.extend_from_slice(old);
                }
                crate::list::push(out, operand);
            }
            MergeOp::Function { f, .. } => f(old, operand, out),
        }
    }
}

impl fmt::Debug for MergeOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.tag())
    }
}

/// How an operator accesses a namespace: the layout hint of the APSys'18 paper's static
/// choice. Stores that have one layout ignore it; MemStore keeps [`AccessHint::Range`]
/// namespaces in an ordered map; the adaptive store starts each namespace in the layout
/// its hint names (and may migrate it later, see `adaptive`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AccessHint {
    /// Point reads and updates of small values (incremental aggregates, value state):
    /// a hash index over a hybrid log.
    #[default]
    Point,
    /// Appends to per-key lists that are read whole or from the front (holistic window
    /// contents, list state): chunked append lists.
    ListAppend,
    /// Range reads in key order, usually `(key prefix, time)` (interval-join buffers,
    /// event history): a time-ordered layout.
    Range,
}

impl AccessHint {
    /// The name used in configurations and reports ("point", "list", "range").
    pub fn name(self) -> &'static str {
        match self {
            AccessHint::Point => "point",
            AccessHint::ListAppend => "list",
            AccessHint::Range => "range",
        }
    }
}

impl std::str::FromStr for AccessHint {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "point" => Ok(AccessHint::Point),
            "list" | "list-append" => Ok(AccessHint::ListAppend),
            "range" => Ok(AccessHint::Range),
            other => Err(format!("unknown access hint {other:?}; expected point, list or range")),
        }
    }
}

/// Declaration of one namespace, given when a store is opened.
#[derive(Clone, Debug)]
pub struct NamespaceSpec {
    /// Unique name: 1..=255 bytes of UTF-8 without control characters (spaces, `=`,
    /// `:`, `%` and non-ASCII are fine), checked when a store is opened with it.
    pub name: String,
    /// Merge semantics.
    pub merge: MergeOp,
    /// How the namespace is accessed (a layout hint). Default: [`AccessHint::Point`].
    pub hint: AccessHint,
}

impl NamespaceSpec {
    /// A namespace whose merges append list elements.
    pub fn list(name: impl Into<String>) -> Self {
        NamespaceSpec { name: name.into(), merge: MergeOp::ListAppend, hint: AccessHint::Point }
    }

    /// A namespace whose merges call a user function.
    pub fn with_merge(name: impl Into<String>, merge: MergeOp) -> Self {
        NamespaceSpec { name: name.into(), merge, hint: AccessHint::Point }
    }

    /// Declares how the namespace is accessed (default [`AccessHint::Point`]).
    #[must_use]
    pub fn hint(mut self, hint: AccessHint) -> Self {
        self.hint = hint;
        self
    }

    /// Whether [`hint`](Self::hint) asks for key order.
    pub fn wants_order(&self) -> bool {
        self.hint == AccessHint::Range
    }
}

/// Built-in merge functions with stable names.
pub mod merges {
    use super::MergeOp;

    /// Adds a little-endian u64 operand to a little-endian u64 value (missing = 0,
    /// wrapping). Values of another length are treated as 0.
    pub fn add_u64() -> MergeOp {
        MergeOp::function("add_u64", |old, op, out| {
            let a = old.and_then(|v| <[u8; 8]>::try_from(v).ok()).map_or(0, u64::from_le_bytes);
            let b = <[u8; 8]>::try_from(op).map_or(0, u64::from_le_bytes);
            out.extend_from_slice(&a.wrapping_add(b).to_le_bytes());
        })
    }
}
