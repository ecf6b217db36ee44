//! An order-statistics tree kept in a [`StateStore`]: a counted B+tree of byte keys
//! with multiplicities, spread over many small store values, so that adding or removing
//! one occurrence costs O(log n) store work for a multiset of n occurrences — where a
//! multiset kept in one value rewrites the whole of it per update.
//!
//! It answers rank queries over byte keys in byte order: [`OsTree::select`] (the k-th
//! smallest occurrence), [`OsTree::rank`], [`OsTree::distinct`], [`OsTree::first`] and
//! [`OsTree::last`]. The caller encodes its keys so that byte order is the order it
//! wants: [`f64_key`] for floats; fixed-width big-endian integers (signed ones with the
//! sign bit flipped), or a self-delimiting encoding, for the rest. The tree knows
//! nothing of what its keys mean.
//!
//! The engine keeps its tree-backed holistic aggregates in these trees
//! (`spillway_engine::aggregate::external`, for `RANGE` frames and aligned window TVFs):
//! `MEDIAN` / `PERCENTILE_CONT` select ranks `floor` and `ceil` of `p * (n - 1)` over
//! [`f64_key`] keys, `COUNT(DISTINCT)` reads the distinct count of keys from
//! `Value::encode_key`, and `FIRST_VALUE` / `LAST_VALUE` take the first or last key, the
//! event's ordered `(time, seq)` encoding followed by the value's. The engine's
//! `benches/ostree.rs` compares one tree update with the whole-value rewrite of the
//! inline layout.
//!
//! # Design
//!
//! * One tree per (namespace, `prefix`): its *header* is the store value at key
//!   `[prefix]` and its nodes the values at `[prefix][node id u64 BE]`. Prefixes of trees
//!   sharing a namespace must be prefix-free (none a prefix of another), as a
//!   self-delimiting encoding such as the engine's `Value::encode_key`
//!   of the partition key is; the namespace should hold nothing else under them.
//! * Leaves hold sorted `(key, multiplicity)` entries; a branch holds, per child, the
//!   child's node id, its subtree's total (sum of multiplicities) and distinct count
//!   (number of entries), and a separator: a lower bound of the child's keys (the
//!   separator of child 0 is stored but never used for routing). A key goes to the last
//!   child whose separator is `<=` it. Removing a key never needs a separator change, so
//!   separators may be stale lower bounds; they are recomputed when entries move.
//! * Every node holds at most `cap` entries (the leaf or branch capacity, fixed per tree
//!   at its creation and recorded in its header) and every node but the root at least
//!   `cap / 2` (capacities are at least 4, so at least 2). An update descends from the
//!   root to one leaf, changes it, then walks back up: a node over capacity is split in
//!   two halves; a node under `cap / 2` takes one entry from a sibling that has more
//!   than `cap / 2` or is merged with it (the right node into the left). A root branch
//!   left with one child is replaced by that child; a root over capacity gets a new root
//!   above it. So the height stays at most `1 + log_{cap/2}(distinct / 2)`, and an update
//!   reads the header, the path and at most one sibling per level and writes back the
//!   changed nodes and the header — all of them with one
//!   [`apply_batch`](StateStore::apply_batch) of puts and deletes, after every read has
//!   succeeded and every check passed (a failed update changes nothing).
//! * Node ids come from a counter in the header and are never reused; an emptied tree
//!   deletes its last node and its header, so an empty multiset leaves no state.
//! * Nodes are written whole with `put`: nothing assumes in-place updates.
//!
//! # Cost
//!
//! For a tree of `d` distinct keys and capacity `c` (default 64), height
//! `h <= 1 + log_{c/2}(d/2)` (at most 4 for `d = 10^5`; 3 in the engine's
//! `benches/ostree.rs`):
//!
//! | operation | store reads | store writes | CPU |
//! |---|---|---|---|
//! | [`add`](OsTree::add) | `1 + h` + at most one sibling per underfull level | the changed nodes + header (usually `h + 1` puts) | O(c h) |
//! | [`total`](OsTree::total), [`distinct`](OsTree::distinct), [`stats`](OsTree::stats) | 1 (header) | 0 | O(1) |
//! | [`select`](OsTree::select), [`rank`](OsTree::rank), [`multiplicity`](OsTree::multiplicity), [`first`](OsTree::first), [`last`](OsTree::last) | `1 + h` | 0 | O(c h) |
//! | [`for_each`](OsTree::for_each), [`check`](OsTree::check) | every node | 0 | O(n) |
//! | [`clear`](OsTree::clear) | header + every branch | every node | O(nodes) |
//!
//! Each node read checks the node's checksum, id, level and entry framing: O(node bytes)
//! (key order and counts across nodes are checked by [`check`](OsTree::check)).
//!
//! # FORMAT
//!
//! All integers are little-endian except the node id inside a store key, which is
//! big-endian so that on ordered stores a tree's nodes sort together by id. Every value
//! starts with `crc32c(bytes 4..end) u32`; the checksum and the position of the version
//! byte are the same in every format version. Format version 1:
//!
//! ```text
//! header  (key [prefix], 56 bytes):
//!   0  crc32c u32 | 4 magic "OSTR" | 8 version u8 (1) | 9 height u8 (>= 1, leaves = 1)
//!   10 leaf capacity u16 | 12 branch capacity u16 | 14 reserved u16 (0)
//!   16 root node id u64 | 24 next node id u64 | 32 total u64 | 40 distinct u64
//!   48 node count u64
//! node    (key [prefix][id u64 BE]):
//!   0  crc32c u32 | 4 version u8 (1) | 5 level u8 (0 = leaf) | 6 entry count u16 (>= 1)
//!   8  node id u64 (the id in its key)
//!   16 entries, back to back, in increasing key order:
//!      leaf   entry: key_len u16 | key | multiplicity u64 (>= 1)
//!      branch entry: child id u64 | subtree total u64 | subtree distinct u64 |
//!                    separator_len u16 | separator
//! ```
//!
//! A node is at most `16 + cap * (26 + MAX_KEY_LEN)` bytes (34 KiB for the default
//! capacity 64 and 512-byte keys); with 8- to 16-byte keys a leaf of 64 entries is
//! about 1.2–1.7 KiB and a branch 2.2–2.7 KiB. Reading a value whose checksum, version,
//! id, level or entry framing is wrong fails with [`OsTreeError::Corrupt`] or
//! [`OsTreeError::UnknownVersion`] naming the prefix and the node (or the header).
//!
//! # Limits
//!
//! Keys are at most [`MAX_KEY_LEN`] bytes (a longer key is refused with
//! [`OsTreeError::KeyTooLong`]); capacities are [`MIN_FANOUT`]..=[`MAX_FANOUT`]; the
//! total stays below 2^64 ([`OsTreeError::Overflow`]).
//!
//! # Example
//!
//! ```
//! use spillway_store::collections::ostree::{f64_key, decode_f64_key, OsTree};
//! use spillway_store::{NamespaceSpec, StoreKind, StoreOptions};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let opts = StoreOptions::new(dir.path()).namespace(NamespaceSpec::list("median"));
//! let mut store = StoreKind::Mem.open(opts).unwrap();
//! let mut tree = OsTree::new(store.namespace("median").unwrap());
//! let prefix = b"card-42";
//! for x in [3.0, -1.5, 7.25, 3.0] {
//!     let mut k = Vec::new();
//!     f64_key(x, &mut k);
//!     tree.add(&mut *store, prefix, &k, 1).unwrap();
//! }
//! assert_eq!(tree.total(&mut *store, prefix).unwrap(), 4);
//! assert_eq!(tree.distinct(&mut *store, prefix).unwrap(), 3);
//! let at = |tree: &mut OsTree, store: &mut dyn spillway_store::StateStore, k| {
//!     decode_f64_key(&tree.select(store, prefix, k).unwrap().unwrap()).unwrap()
//! };
//! // Sorted: -1.5, 3, 3, 7.25; the median interpolates ranks 1 and 2.
//! assert_eq!((at(&mut tree, &mut *store, 1) + at(&mut tree, &mut *store, 2)) / 2.0, 3.0);
//! // Removing an occurrence that is not there is an error, and changes nothing.
//! let mut k = Vec::new();
//! f64_key(100.0, &mut k);
//! assert!(tree.add(&mut *store, prefix, &k, -1).is_err());
//! // Emptying the multiset leaves no state behind.
//! assert_eq!(tree.clear(&mut *store, prefix).unwrap(), 1);
//! assert_eq!(tree.total(&mut *store, prefix).unwrap(), 0);
//! ```

use crate::bytes::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::StateStoreExt;
use crate::{BatchKind, BatchOp, Ns, Rmw, StateStore};
use std::collections::HashSet;
use std::fmt;

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u8 = 1;
/// Longest key a tree accepts, in bytes.
pub const MAX_KEY_LEN: usize = 512;
/// Default leaf and branch capacity (entries per node).
pub const DEFAULT_FANOUT: usize = 64;
/// Smallest capacity a tree accepts (so that every non-root node keeps two entries).
pub const MIN_FANOUT: usize = 4;
/// Largest capacity a tree accepts.
pub const MAX_FANOUT: usize = 1024;
/// Greatest height a header may record (a tree of capacity 4 reaches it only beyond
/// 2^63 entries).
const MAX_HEIGHT: u8 = 64;

/// Byte offsets of the header fields.
mod hdr {
    pub(super) const CRC: usize = 0;
    pub(super) const MAGIC: usize = 4;
    pub(super) const VERSION: usize = 8;
    pub(super) const HEIGHT: usize = 9;
    pub(super) const LEAF_CAP: usize = 10;
    pub(super) const BRANCH_CAP: usize = 12;
    pub(super) const RESERVED: usize = 14;
    pub(super) const ROOT: usize = 16;
    pub(super) const NEXT_ID: usize = 24;
    pub(super) const TOTAL: usize = 32;
    pub(super) const DISTINCT: usize = 40;
    pub(super) const NODES: usize = 48;
    pub(super) const LEN: usize = 56;
    pub(super) const MAGIC_BYTES: [u8; 4] = *b"OSTR";
}

/// Byte offsets of the node header fields and of the fields of an entry.
mod nd {
    pub(super) const CRC: usize = 0;
    pub(super) const VERSION: usize = 4;
    pub(super) const LEVEL: usize = 5;
    pub(super) const COUNT: usize = 6;
    pub(super) const ID: usize = 8;
    /// Length of the node header; entries follow.
    pub(super) const LEN: usize = 16;
    /// Leaf entry: `key_len u16 | key | multiplicity u64`.
    pub(super) const LEAF_FIXED: usize = 2 + 8;
    /// Branch entry offsets: `child u64 | total u64 | distinct u64 | sep_len u16 | sep`.
    pub(super) const BR_CHILD: usize = 0;
    pub(super) const BR_TOTAL: usize = 8;
    pub(super) const BR_DISTINCT: usize = 16;
    pub(super) const BR_SEP_LEN: usize = 24;
    pub(super) const BR_SEP: usize = 26;
}

/// Why a tree operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum OsTreeError {
    /// The state store failed.
    Store(crate::Error),
    /// A key is longer than [`MAX_KEY_LEN`].
    KeyTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A removal asked for more occurrences of a key than the tree holds.
    NotPresent {
        /// The key.
        key: Vec<u8>,
        /// Its multiplicity in the tree (0: absent).
        present: u64,
        /// The change asked for.
        delta: i64,
    },
    /// A multiplicity or the tree's total would pass `u64::MAX`.
    Overflow {
        /// The key being added.
        key: Vec<u8>,
    },
    /// A stored header or node does not decode.
    Corrupt {
        /// The tree's prefix.
        prefix: Vec<u8>,
        /// The node id (`None`: the header).
        node: Option<u64>,
        /// What is wrong.
        what: String,
    },
    /// A header or node was written by a newer (or unknown) format version.
    UnknownVersion {
        /// The tree's prefix.
        prefix: Vec<u8>,
        /// The node id (`None`: the header).
        node: Option<u64>,
        /// The version byte found.
        version: u8,
    },
    /// Capacities outside [`MIN_FANOUT`]..=[`MAX_FANOUT`] were asked for.
    InvalidFanout {
        /// Leaf capacity asked for.
        leaf: usize,
        /// Branch capacity asked for.
        branch: usize,
    },
}

/// Short hexadecimal rendering of a byte string (keys and prefixes are binary).
struct Hex<'a>(&'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 48;
        f.write_str("0x")?;
        for b in self.0.iter().take(SHOWN) {
            write!(f, "{b:02x}")?;
        }
        if self.0.len() > SHOWN {
            write!(f, "... ({} bytes)", self.0.len())?;
        }
        Ok(())
    }
}

struct Place<'a>(&'a [u8], Option<u64>);

impl fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(id) => write!(f, "node {id} of the tree at prefix {}", Hex(self.0)),
            None => write!(f, "the header of the tree at prefix {}", Hex(self.0)),
        }
    }
}

impl fmt::Display for OsTreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OsTreeError::Store(e) => write!(f, "order-statistics tree: state store: {e}"),
            OsTreeError::KeyTooLong { len, max } => write!(
                f,
                "order-statistics tree key of {len} bytes is longer than the {max}-byte limit \
                 (encode long values by a bounded prefix and a hash)"
            ),
            OsTreeError::NotPresent { key, present, delta } => write!(
                f,
                "order-statistics tree: cannot remove {} occurrence(s) of key {}: the tree \
                 holds {present} (removals must follow additions of the same key)",
                delta.unsigned_abs(),
                Hex(key)
            ),
            OsTreeError::Overflow { key } => write!(
                f,
                "order-statistics tree: adding key {} would take a count past 2^64",
                Hex(key)
            ),
            OsTreeError::Corrupt { prefix, node, what } => write!(
                f,
                "order-statistics tree is corrupt: {} {what}; the tree cannot be read (remove \
                 it with OsTree::purge and rebuild it from the window's events)",
                Place(prefix, *node)
            ),
            OsTreeError::UnknownVersion { prefix, node, version } => write!(
                f,
                "order-statistics tree: {} has format version {version}, but this build reads \
                 version {FORMAT_VERSION} (open the state with the build that wrote it)",
                Place(prefix, *node)
            ),
            OsTreeError::InvalidFanout { leaf, branch } => write!(
                f,
                "order-statistics tree capacities must be {MIN_FANOUT}..={MAX_FANOUT}, got \
                 leaf {leaf} and branch {branch}"
            ),
        }
    }
}

impl std::error::Error for OsTreeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OsTreeError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<crate::Error> for OsTreeError {
    fn from(e: crate::Error) -> Self {
        OsTreeError::Store(e)
    }
}

/// Result of tree operations.
pub type Result<T, E = OsTreeError> = std::result::Result<T, E>;

fn corrupt(prefix: &[u8], node: Option<u64>, what: impl Into<String>) -> OsTreeError {
    OsTreeError::Corrupt { prefix: prefix.to_vec(), node, what: what.into() }
}

/// Branch `id` links `child`, which the walk reached already: a node linked twice.
fn linked_twice(prefix: &[u8], id: u64, child: u64) -> OsTreeError {
    corrupt(prefix, Some(id), format!("links node {child}, which the tree links twice"))
}

// ---------------------------------------------------------------------------------------
// Key encodings.

/// Appends the 8-byte order-preserving encoding of `x`: byte order equals
/// [`f64::total_cmp`] order (`-NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN`), and
/// [`decode_f64_key`] returns the same bits. This is the order of the `MEDIAN` /
/// `PERCENTILE_CONT` state.
pub fn f64_key(x: f64, out: &mut Vec<u8>) {
    let b = x.to_bits();
    let k = if b >> 63 == 1 { !b } else { b ^ (1 << 63) };
    out.extend_from_slice(&k.to_be_bytes());
}

/// The float of an [`f64_key`] encoding (`None` unless `bytes` is 8 bytes long).
pub fn decode_f64_key(bytes: &[u8]) -> Option<f64> {
    let k = u64::from_be_bytes(bytes.try_into().ok()?);
    let b = if k >> 63 == 1 { k ^ (1 << 63) } else { !k };
    Some(f64::from_bits(b))
}

fn node_key(out: &mut Vec<u8>, prefix: &[u8], id: u64) {
    out.clear();
    out.extend_from_slice(prefix);
    out.extend_from_slice(&id.to_be_bytes());
}

// ---------------------------------------------------------------------------------------
// Header.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    height: u8,
    leaf_cap: u16,
    branch_cap: u16,
    root: u64,
    next_id: u64,
    total: u64,
    distinct: u64,
    nodes: u64,
}

impl Header {
    fn encode(&self) -> [u8; hdr::LEN] {
        let mut b = [0u8; hdr::LEN];
        b[hdr::MAGIC..hdr::MAGIC + 4].copy_from_slice(&hdr::MAGIC_BYTES);
        b[hdr::VERSION] = FORMAT_VERSION;
        b[hdr::HEIGHT] = self.height;
        put_u16(&mut b, hdr::LEAF_CAP, self.leaf_cap);
        put_u16(&mut b, hdr::BRANCH_CAP, self.branch_cap);
        put_u16(&mut b, hdr::RESERVED, 0);
        put_u64(&mut b, hdr::ROOT, self.root);
        put_u64(&mut b, hdr::NEXT_ID, self.next_id);
        put_u64(&mut b, hdr::TOTAL, self.total);
        put_u64(&mut b, hdr::DISTINCT, self.distinct);
        put_u64(&mut b, hdr::NODES, self.nodes);
        let crc = crc32c::crc32c(&b[hdr::CRC + 4..]);
        put_u32(&mut b, hdr::CRC, crc);
        b
    }

    fn decode(prefix: &[u8], b: &[u8]) -> Result<Header> {
        let bad = |what: String| corrupt(prefix, None, what);
        if b.len() < hdr::MAGIC {
            return Err(bad(format!("is {} bytes, shorter than its checksum", b.len())));
        }
        let (stored, computed) = (u32_at(b, hdr::CRC), crc32c::crc32c(&b[hdr::CRC + 4..]));
        if stored != computed {
            return Err(bad(format!(
                "fails its checksum (stored {stored:#010x}, computed {computed:#010x})"
            )));
        }
        if b.len() <= hdr::VERSION || b[hdr::MAGIC..hdr::MAGIC + 4] != hdr::MAGIC_BYTES {
            return Err(bad("lacks the \"OSTR\" magic (the key holds something else)".into()));
        }
        if b[hdr::VERSION] != FORMAT_VERSION {
            return Err(OsTreeError::UnknownVersion {
                prefix: prefix.to_vec(),
                node: None,
                version: b[hdr::VERSION],
            });
        }
        if b.len() != hdr::LEN {
            return Err(bad(format!("is {} bytes, not {}", b.len(), hdr::LEN)));
        }
        let h = Header {
            height: b[hdr::HEIGHT],
            leaf_cap: u16_at(b, hdr::LEAF_CAP),
            branch_cap: u16_at(b, hdr::BRANCH_CAP),
            root: u64_at(b, hdr::ROOT),
            next_id: u64_at(b, hdr::NEXT_ID),
            total: u64_at(b, hdr::TOTAL),
            distinct: u64_at(b, hdr::DISTINCT),
            nodes: u64_at(b, hdr::NODES),
        };
        let caps = (MIN_FANOUT..=MAX_FANOUT).contains(&(h.leaf_cap as usize))
            && (MIN_FANOUT..=MAX_FANOUT).contains(&(h.branch_cap as usize));
        let what = if !(1..=MAX_HEIGHT).contains(&h.height) {
            "a height outside 1..=64"
        } else if !caps {
            "capacities outside the accepted range"
        } else if h.root == 0 || h.root >= h.next_id {
            "a root id that was never allocated"
        } else if h.distinct == 0 || h.distinct > h.total {
            "counts with distinct = 0 or distinct > total"
        } else if h.nodes == 0 || h.nodes >= h.next_id {
            "a node count of 0 or above the ids allocated"
        } else {
            return Ok(h);
        };
        Err(bad(format!("holds {what}")))
    }

    fn cap(&self, level: u8) -> usize {
        usize::from(if level == 0 { self.leaf_cap } else { self.branch_cap })
    }

    /// A fresh node id; a header whose next id is `u64::MAX` (no valid tree gets there)
    /// has none to give.
    fn alloc(&mut self, prefix: &[u8]) -> Result<u64> {
        let id = self.next_id;
        self.next_id = id
            .checked_add(1)
            .ok_or_else(|| corrupt(prefix, None, format!("has no node id left (next id {id})")))?;
        Ok(id)
    }

    /// Counts one node less; a header counting fewer nodes than the tree holds is
    /// corrupt.
    fn drop_node(&mut self, prefix: &[u8]) -> Result<()> {
        self.nodes = self.nodes.checked_sub(1).ok_or_else(|| {
            corrupt(prefix, None, "counts fewer nodes than the tree holds".to_string())
        })?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Nodes: the encoded bytes plus the offset of each entry (no per-entry allocation).

#[derive(Debug, Default)]
struct Node {
    id: u64,
    level: u8,
    /// The whole encoded node; its header fields are written by [`Node::seal`].
    buf: Vec<u8>,
    /// Start of each entry in `buf`, plus `buf.len()` as a last element.
    offs: Vec<u32>,
}

impl Node {
    fn reset(&mut self, id: u64, level: u8) {
        self.id = id;
        self.level = level;
        self.buf.clear();
        self.buf.resize(nd::LEN, 0);
        self.offs.clear();
        self.offs.push(nd::LEN as u32);
    }

    fn len(&self) -> usize {
        self.offs.len() - 1
    }

    fn is_leaf(&self) -> bool {
        self.level == 0
    }

    fn start(&self, i: usize) -> usize {
        self.offs[i] as usize
    }

    // Leaf entries.

    fn key(&self, i: usize) -> &[u8] {
        let s = self.start(i);
        let l = usize::from(u16_at(&self.buf, s));
        &self.buf[s + 2..s + 2 + l]
    }

    fn mult_at(&self, i: usize) -> usize {
        self.start(i + 1) - 8
    }

    fn mult(&self, i: usize) -> u64 {
        u64_at(&self.buf, self.mult_at(i))
    }

    fn set_mult(&mut self, i: usize, m: u64) {
        let at = self.mult_at(i);
        put_u64(&mut self.buf, at, m);
    }

    /// Position of `key` among the leaf's entries: `Ok(i)` if present, `Err(i)` where it
    /// would go.
    fn search(&self, key: &[u8]) -> std::result::Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key(mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    // Branch entries.

    fn child(&self, i: usize) -> u64 {
        u64_at(&self.buf, self.start(i) + nd::BR_CHILD)
    }

    fn child_total(&self, i: usize) -> u64 {
        u64_at(&self.buf, self.start(i) + nd::BR_TOTAL)
    }

    fn child_distinct(&self, i: usize) -> u64 {
        u64_at(&self.buf, self.start(i) + nd::BR_DISTINCT)
    }

    fn sep(&self, i: usize) -> &[u8] {
        let s = self.start(i);
        &self.buf[s + nd::BR_SEP..self.start(i + 1)]
    }

    fn set_counts(&mut self, i: usize, (total, distinct): (u64, u64)) {
        let s = self.start(i);
        put_u64(&mut self.buf, s + nd::BR_TOTAL, total);
        put_u64(&mut self.buf, s + nd::BR_DISTINCT, distinct);
    }

    fn set_sep(&mut self, i: usize, sep: &[u8]) {
        let s = self.start(i);
        let (from, to) = (s + nd::BR_SEP, self.start(i + 1));
        let old = to - from;
        self.buf.splice(from..to, sep.iter().copied());
        put_u16(&mut self.buf, s + nd::BR_SEP_LEN, sep.len() as u16);
        for o in &mut self.offs[i + 1..] {
            *o = (*o as usize + sep.len() - old) as u32;
        }
    }

    /// The child `key` belongs to: the last one whose separator is `<= key` (child 0
    /// when none is).
    fn route(&self, key: &[u8]) -> usize {
        let (mut lo, mut hi) = (1, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.sep(mid) <= key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo - 1
    }

    /// The key this node's parent separates it by: its first key (leaf) or its first
    /// child's separator (branch).
    fn first_sep(&self) -> &[u8] {
        if self.is_leaf() {
            self.key(0)
        } else {
            self.sep(0)
        }
    }

    // Entry moves.

    fn insert_raw(&mut self, i: usize, e: &[u8]) {
        let at = self.start(i);
        self.buf.splice(at..at, e.iter().copied());
        self.offs.insert(i, at as u32);
        for o in &mut self.offs[i + 1..] {
            *o += e.len() as u32;
        }
    }

    fn push_raw(&mut self, e: &[u8]) {
        self.buf.extend_from_slice(e);
        self.offs.push(self.buf.len() as u32);
    }

    fn insert_leaf(&mut self, i: usize, key: &[u8], mult: u64, scratch: &mut Vec<u8>) {
        scratch.clear();
        scratch.extend_from_slice(&(key.len() as u16).to_le_bytes());
        scratch.extend_from_slice(key);
        scratch.extend_from_slice(&mult.to_le_bytes());
        self.insert_raw(i, scratch);
    }

    fn insert_branch(
        &mut self,
        i: usize,
        child: u64,
        (total, distinct): (u64, u64),
        sep: &[u8],
        scratch: &mut Vec<u8>,
    ) {
        scratch.clear();
        scratch.extend_from_slice(&child.to_le_bytes());
        scratch.extend_from_slice(&total.to_le_bytes());
        scratch.extend_from_slice(&distinct.to_le_bytes());
        scratch.extend_from_slice(&(sep.len() as u16).to_le_bytes());
        scratch.extend_from_slice(sep);
        self.insert_raw(i, scratch);
    }

    /// Removes entry `i`, leaving its bytes in `out`.
    fn take(&mut self, i: usize, out: &mut Vec<u8>) {
        let (s, e) = (self.start(i), self.start(i + 1));
        out.clear();
        out.extend(self.buf.drain(s..e));
        self.offs.remove(i);
        for o in &mut self.offs[i..] {
            *o -= (e - s) as u32;
        }
    }

    fn remove(&mut self, i: usize) {
        let (s, e) = (self.start(i), self.start(i + 1));
        self.buf.drain(s..e);
        self.offs.remove(i);
        for o in &mut self.offs[i..] {
            *o -= (e - s) as u32;
        }
    }

    /// Moves the upper half of the entries into `right` (an empty node of the same level).
    fn split_half(&mut self, right: &mut Node) {
        let at = self.len() / 2;
        let cut = self.start(at);
        right.buf.extend_from_slice(&self.buf[cut..]);
        right.offs.pop();
        right.offs.extend(self.offs[at..].iter().map(|&o| o - cut as u32 + nd::LEN as u32));
        self.buf.truncate(cut);
        self.offs.truncate(at + 1);
    }

    /// Appends every entry of `other` (a node of the same level).
    fn append_from(&mut self, other: &Node) {
        let base = self.buf.len() as u32;
        self.buf.extend_from_slice(&other.buf[nd::LEN..]);
        self.offs.pop();
        self.offs.extend(other.offs.iter().map(|&o| o - nd::LEN as u32 + base));
    }

    /// (total, distinct) of the subtree this node roots. Saturating: only the counts
    /// of a damaged tree pass 2^64 (the header's total bounds a valid tree's), which
    /// [`checked_total`](Self::checked_total) reports.
    fn summary(&self) -> (u64, u64) {
        if self.is_leaf() {
            let t = (0..self.len()).fold(0u64, |t, i| t.saturating_add(self.mult(i)));
            (t, self.len() as u64)
        } else {
            (0..self.len())
                .map(|i| (self.child_total(i), self.child_distinct(i)))
                .fold((0, 0), |(t, d), (ct, cd)| (t.saturating_add(ct), d.saturating_add(cd)))
        }
    }

    /// The sum of the multiplicities (leaf) or subtree totals (branch) of entries
    /// `..end`; `None` past 2^64 (a damaged node).
    fn checked_total(&self, end: usize) -> Option<u64> {
        (0..end).try_fold(0u64, |t, i| {
            t.checked_add(if self.is_leaf() { self.mult(i) } else { self.child_total(i) })
        })
    }

    /// Writes the node header fields and the checksum.
    fn seal(&mut self) {
        let (id, level, count) = (self.id, self.level, self.len() as u16);
        let b = &mut self.buf;
        b[nd::VERSION] = FORMAT_VERSION;
        b[nd::LEVEL] = level;
        put_u16(b, nd::COUNT, count);
        put_u64(b, nd::ID, id);
        let crc = crc32c::crc32c(&b[nd::CRC + 4..]);
        put_u32(b, nd::CRC, crc);
    }

    /// Checks the bytes in `buf` as node `id` at `level` (checksum, version, id, level,
    /// entry framing and counts, so that no later access can fail) and indexes its
    /// entries. Key order is left to [`OsTree::check`]: the checksum already covers it.
    fn parse(&mut self, prefix: &[u8], id: u64, level: u8) -> Result<()> {
        let bad = |what: String| corrupt(prefix, Some(id), what);
        let b = &self.buf;
        if b.len() < nd::LEN {
            return Err(bad(format!(
                "is {} bytes, shorter than the {}-byte node header",
                b.len(),
                nd::LEN
            )));
        }
        let (stored, computed) = (u32_at(b, nd::CRC), crc32c::crc32c(&b[nd::CRC + 4..]));
        if stored != computed {
            return Err(bad(format!(
                "fails its checksum (stored {stored:#010x}, computed {computed:#010x})"
            )));
        }
        if b[nd::VERSION] != FORMAT_VERSION {
            return Err(OsTreeError::UnknownVersion {
                prefix: prefix.to_vec(),
                node: Some(id),
                version: b[nd::VERSION],
            });
        }
        let found_id = u64_at(b, nd::ID);
        if found_id != id {
            return Err(bad(format!(
                "carries node id {found_id} (a value was written under the wrong key)"
            )));
        }
        if b[nd::LEVEL] != level {
            return Err(bad(format!(
                "is at level {} where its parent expects level {level}",
                b[nd::LEVEL]
            )));
        }
        let count = usize::from(u16_at(b, nd::COUNT));
        if count == 0 || count > MAX_FANOUT {
            return Err(bad(format!("holds {count} entries (1..={MAX_FANOUT} expected)")));
        }
        self.offs.clear();
        let mut at = nd::LEN;
        for i in 0..count {
            self.offs.push(at as u32);
            let short = |what: &str| {
                bad(format!("is truncated in {what} of entry {i} at byte {at} ({} bytes)", b.len()))
            };
            if level == 0 {
                let l = usize::from(*b.get(at).ok_or_else(|| short("the key length"))?)
                    | usize::from(*b.get(at + 1).ok_or_else(|| short("the key length"))?) << 8;
                if l > MAX_KEY_LEN {
                    return Err(bad(format!("holds a {l}-byte key in entry {i}")));
                }
                let end = at + nd::LEAF_FIXED + l;
                if end > b.len() {
                    return Err(short("the key or multiplicity"));
                }
                if u64_at(b, end - 8) == 0 {
                    return Err(bad(format!("holds multiplicity 0 in entry {i}")));
                }
                at = end;
            } else {
                if at + nd::BR_SEP > b.len() {
                    return Err(short("the child fields"));
                }
                let (child, total, distinct) = (
                    u64_at(b, at + nd::BR_CHILD),
                    u64_at(b, at + nd::BR_TOTAL),
                    u64_at(b, at + nd::BR_DISTINCT),
                );
                if child == 0 || distinct == 0 || distinct > total {
                    return Err(bad(format!(
                        "holds child {child} with total {total} and distinct {distinct} in \
                         entry {i}"
                    )));
                }
                let l = usize::from(u16_at(b, at + nd::BR_SEP_LEN));
                if l > MAX_KEY_LEN {
                    return Err(bad(format!("holds a {l}-byte separator in entry {i}")));
                }
                let end = at + nd::BR_SEP + l;
                if end > b.len() {
                    return Err(short("the separator"));
                }
                at = end;
            }
        }
        if at != b.len() {
            return Err(bad(format!("has {} bytes after its last entry", b.len() - at)));
        }
        self.offs.push(at as u32);
        self.id = id;
        self.level = level;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// The tree.

/// Shape and counts of one tree (all zero for an empty tree, except the capacities,
/// which are then those a new tree would get).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeStats {
    /// Sum of the multiplicities.
    pub total: u64,
    /// Number of keys with a multiplicity above 0.
    pub distinct: u64,
    /// Levels (1: the root is a leaf; 0: empty).
    pub height: u32,
    /// Nodes stored.
    pub nodes: u64,
    /// Most entries per leaf.
    pub leaf_capacity: usize,
    /// Most children per branch.
    pub branch_capacity: usize,
}

/// The operations on the order-statistics trees of one namespace (see the
/// [module docs](self)). It holds the capacities of trees it creates and reusable
/// buffers; the trees themselves live entirely in the store, so any `OsTree` of the
/// same namespace reads and updates them.
#[derive(Debug)]
pub struct OsTree {
    ns: Ns,
    leaf_cap: u16,
    branch_cap: u16,
    /// Node buffers for reuse.
    pool: Vec<Node>,
    /// Store key being built.
    keybuf: Vec<u8>,
    /// The header value read.
    hbuf: Vec<u8>,
    /// One encoded entry.
    scratch: Vec<u8>,
}

impl OsTree {
    /// Trees in namespace `ns` with leaf and branch capacity [`DEFAULT_FANOUT`].
    pub fn new(ns: Ns) -> OsTree {
        OsTree {
            ns,
            leaf_cap: DEFAULT_FANOUT as u16,
            branch_cap: DEFAULT_FANOUT as u16,
            pool: Vec::new(),
            keybuf: Vec::new(),
            hbuf: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Sets the capacities of the trees this handle creates (default [`DEFAULT_FANOUT`]
    /// both). A tree keeps the capacities it was created with (they are in its header),
    /// so they can differ between trees. Small capacities make tall trees for tests.
    pub fn with_fanout(mut self, leaf: usize, branch: usize) -> Result<OsTree> {
        let ok = |c: usize| (MIN_FANOUT..=MAX_FANOUT).contains(&c);
        if !ok(leaf) || !ok(branch) {
            return Err(OsTreeError::InvalidFanout { leaf, branch });
        }
        self.leaf_cap = leaf as u16;
        self.branch_cap = branch as u16;
        Ok(self)
    }

    /// The namespace.
    pub fn ns(&self) -> Ns {
        self.ns
    }

    fn fresh(&mut self, id: u64, level: u8) -> Node {
        let mut n = self.pool.pop().unwrap_or_default();
        n.reset(id, level);
        n
    }

    fn recycle(&mut self, n: Node) {
        if self.pool.len() < 64 {
            self.pool.push(n);
        }
    }

    fn read_header<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
    ) -> Result<Option<Header>> {
        let mut b = std::mem::take(&mut self.hbuf);
        let found = store.get_into(self.ns, prefix, &mut b);
        let r = match found {
            Ok(true) => Header::decode(prefix, &b).map(Some),
            Ok(false) => Ok(None),
            Err(e) => Err(e.into()),
        };
        self.hbuf = b;
        r
    }

    /// Reads node `id`, which its parent places at `level`.
    fn load<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
        id: u64,
        level: u8,
    ) -> Result<Node> {
        let mut n = self.pool.pop().unwrap_or_default();
        node_key(&mut self.keybuf, prefix, id);
        if !store.get_into(self.ns, &self.keybuf, &mut n.buf)? {
            return Err(corrupt(
                prefix,
                Some(id),
                "is missing from the store (its parent names it)",
            ));
        }
        n.parse(prefix, id, level)?;
        Ok(n)
    }

    /// Adds `delta` occurrences of `key` (removes `-delta` if negative) to the tree at
    /// `prefix`, creating the tree on its first key; an entry whose multiplicity
    /// reaches 0 is removed, and the tree's last removal deletes every value of the
    /// tree. Returns the key's new multiplicity.
    ///
    /// Removing more occurrences than the tree holds fails with
    /// [`OsTreeError::NotPresent`] and changes nothing; so does any other error raised
    /// before the update's single batch of writes.
    pub fn add<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
        key: &[u8],
        delta: i64,
    ) -> Result<u64> {
        if key.len() > MAX_KEY_LEN {
            return Err(OsTreeError::KeyTooLong { len: key.len(), max: MAX_KEY_LEN });
        }
        if delta == 0 {
            return self.multiplicity(store, prefix, key);
        }
        let not_present =
            |present: u64| OsTreeError::NotPresent { key: key.to_vec(), present, delta };
        let Some(mut h) = self.read_header(store, prefix)? else {
            if delta < 0 {
                return Err(not_present(0));
            }
            let mult = delta as u64;
            let mut leaf = self.fresh(1, 0);
            leaf.insert_leaf(0, key, mult, &mut self.scratch);
            let h = Header {
                height: 1,
                leaf_cap: self.leaf_cap,
                branch_cap: self.branch_cap,
                root: 1,
                next_id: 2,
                total: mult,
                distinct: 1,
                nodes: 1,
            };
            self.commit(store, prefix, Some(&h), vec![leaf], &[])?;
            return Ok(mult);
        };
        if delta > 0 && h.total.checked_add(delta as u64).is_none() {
            return Err(OsTreeError::Overflow { key: key.to_vec() });
        }

        // Descend to the leaf, keeping each branch and the child taken.
        let mut path: Vec<(Node, usize)> = Vec::with_capacity(usize::from(h.height));
        let (mut id, mut level) = (h.root, h.height - 1);
        let mut cur = loop {
            let n = self.load(store, prefix, id, level)?;
            if level == 0 {
                break n;
            }
            let i = n.route(key);
            id = n.child(i);
            level -= 1;
            path.push((n, i));
        };

        // Change the leaf entry.
        let found = cur.search(key);
        let present = found.map_or(0, |i| cur.mult(i));
        let new = match present.checked_add_signed(delta) {
            Some(m) => m,
            None if delta < 0 => return Err(not_present(present)),
            None => return Err(OsTreeError::Overflow { key: key.to_vec() }),
        };
        let d_distinct: i64 = match found {
            Ok(i) if new == 0 => {
                cur.remove(i);
                -1
            }
            Ok(i) => {
                cur.set_mult(i, new);
                0
            }
            Err(i) => {
                cur.insert_leaf(i, key, new, &mut self.scratch);
                1
            }
        };
        // Every subtree on the path changes by (delta, d_distinct); counts of nodes whose
        // entries moved are recomputed from their entries instead.
        let shift = |n: &Node, i: usize| {
            let t = n.child_total(i).checked_add_signed(delta);
            let d = n.child_distinct(i).checked_add_signed(d_distinct);
            t.zip(d).ok_or_else(|| {
                corrupt(prefix, Some(n.id), "holds subtree counts below the path's contents")
            })
        };

        // Walk back up: split, borrow or merge, and refresh each parent's counts.
        let mut writes: Vec<Node> = Vec::with_capacity(path.len() * 2 + 3);
        let mut deletes: Vec<u64> = Vec::new();
        let mut sep: Vec<u8> = Vec::new();
        while let Some((mut parent, i)) = path.pop() {
            let cap = h.cap(cur.level);
            let min = cap / 2;
            if cur.len() > cap {
                let mut right = self.fresh(h.alloc(prefix)?, cur.level);
                cur.split_half(&mut right);
                parent.set_counts(i, cur.summary());
                let (rid, rsum) = (right.id, right.summary());
                parent.insert_branch(i + 1, rid, rsum, right.first_sep(), &mut self.scratch);
                h.nodes += 1;
                writes.push(cur);
                writes.push(right);
            } else if cur.len() < min {
                // `parent` has two children at least: a non-root branch has `min >= 2`
                // and a root branch left with one is replaced by it below (a stored
                // branch of one child is damage).
                if parent.len() < 2 {
                    return Err(corrupt(
                        prefix,
                        Some(parent.id),
                        "is a branch of one child above an underfull node (a branch holds two)",
                    ));
                }
                let cur_is_left = i == 0;
                let (j, sib_at) = if cur_is_left { (i, i + 1) } else { (i - 1, i - 1) };
                let sib = self.load(store, prefix, parent.child(sib_at), cur.level)?;
                let (mut l, mut r) = if cur_is_left { (cur, sib) } else { (sib, cur) };
                if l.len() + r.len() <= cap {
                    // Merge r into l; r's first child gets the separator pulled down.
                    if !r.is_leaf() {
                        sep.clear();
                        sep.extend_from_slice(parent.sep(j + 1));
                        r.set_sep(0, &sep);
                    }
                    l.append_from(&r);
                    parent.set_counts(j, l.summary());
                    parent.remove(j + 1);
                    deletes.push(r.id);
                    h.drop_node(prefix)?;
                    writes.push(l);
                    self.recycle(r);
                } else {
                    if l.len() > r.len() {
                        // l's last entry moves to the front of r.
                        let mut e = std::mem::take(&mut self.scratch);
                        l.take(l.len() - 1, &mut e);
                        if !r.is_leaf() {
                            sep.clear();
                            sep.extend_from_slice(parent.sep(j + 1));
                            r.set_sep(0, &sep);
                        }
                        r.insert_raw(0, &e);
                        self.scratch = e;
                    } else {
                        // r's first entry moves to the end of l, with the separator
                        // pulled down if it is a child.
                        let mut e = std::mem::take(&mut self.scratch);
                        r.take(0, &mut e);
                        l.push_raw(&e);
                        self.scratch = e;
                        if !l.is_leaf() {
                            sep.clear();
                            sep.extend_from_slice(parent.sep(j + 1));
                            let last = l.len() - 1;
                            l.set_sep(last, &sep);
                        }
                    }
                    sep.clear();
                    sep.extend_from_slice(r.first_sep());
                    parent.set_sep(j + 1, &sep);
                    parent.set_counts(j, l.summary());
                    parent.set_counts(j + 1, r.summary());
                    writes.push(l);
                    writes.push(r);
                }
            } else {
                let counts = shift(&parent, i)?;
                parent.set_counts(i, counts);
                writes.push(cur);
            }
            cur = parent;
        }

        // `cur` is the root.
        if cur.len() == 0 {
            // Only a leaf root empties: the tree is gone.
            deletes.push(cur.id);
            self.recycle(cur);
            self.commit(store, prefix, None, writes, &deletes)?;
            return Ok(0);
        }
        // The header's counts were checked against overflow and `present` above.
        h.total = h.total.wrapping_add_signed(delta);
        h.distinct = h.distinct.wrapping_add_signed(d_distinct);
        if !cur.is_leaf() && cur.len() == 1 {
            h.root = cur.child(0);
            h.height -= 1;
            h.drop_node(prefix)?;
            deletes.push(cur.id);
            self.recycle(cur);
        } else if cur.len() > h.cap(cur.level) {
            if h.height >= MAX_HEIGHT {
                return Err(corrupt(prefix, None, "would grow past height 64"));
            }
            let mut right = self.fresh(h.alloc(prefix)?, cur.level);
            cur.split_half(&mut right);
            let mut root = self.fresh(h.alloc(prefix)?, cur.level + 1);
            root.insert_branch(0, cur.id, cur.summary(), cur.first_sep(), &mut self.scratch);
            root.insert_branch(1, right.id, right.summary(), right.first_sep(), &mut self.scratch);
            h.root = root.id;
            h.height += 1;
            h.nodes += 2;
            writes.push(cur);
            writes.push(right);
            writes.push(root);
        } else {
            writes.push(cur);
        }
        self.commit(store, prefix, Some(&h), writes, &deletes)?;
        Ok(new)
    }

    /// Writes the nodes, deletes the ids and writes (or, with `None`, deletes) the
    /// header, in one batch.
    fn commit<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
        h: Option<&Header>,
        mut writes: Vec<Node>,
        deletes: &[u64],
    ) -> Result<()> {
        let kl = prefix.len() + 8;
        let mut keys = Vec::with_capacity((writes.len() + deletes.len()) * kl);
        for n in &mut writes {
            n.seal();
            keys.extend_from_slice(prefix);
            keys.extend_from_slice(&n.id.to_be_bytes());
        }
        for id in deletes {
            keys.extend_from_slice(prefix);
            keys.extend_from_slice(&id.to_be_bytes());
        }
        let hbytes = h.map(Header::encode);
        let mut ops: Vec<BatchOp<'_>> = Vec::with_capacity(writes.len() + deletes.len() + 1);
        for (i, k) in keys.chunks_exact(kl).enumerate() {
            let kind = match writes.get(i) {
                Some(n) => BatchKind::Put(&n.buf),
                None => BatchKind::Delete,
            };
            ops.push(BatchOp { ns: self.ns, key: k, kind });
        }
        let kind = match &hbytes {
            Some(b) => BatchKind::Put(b),
            None => BatchKind::Delete,
        };
        ops.push(BatchOp { ns: self.ns, key: prefix, kind });
        store.apply_batch(&ops, &mut |_, _, _| Rmw::Keep)?;
        drop(ops);
        for n in writes {
            self.recycle(n);
        }
        Ok(())
    }

    /// Counts and shape of the tree at `prefix` (one store read).
    pub fn stats<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
    ) -> Result<TreeStats> {
        Ok(match self.read_header(store, prefix)? {
            Some(h) => TreeStats {
                total: h.total,
                distinct: h.distinct,
                height: u32::from(h.height),
                nodes: h.nodes,
                leaf_capacity: usize::from(h.leaf_cap),
                branch_capacity: usize::from(h.branch_cap),
            },
            None => TreeStats {
                total: 0,
                distinct: 0,
                height: 0,
                nodes: 0,
                leaf_capacity: usize::from(self.leaf_cap),
                branch_capacity: usize::from(self.branch_cap),
            },
        })
    }

    /// Sum of the multiplicities (0 for an absent tree). One store read.
    pub fn total<S: StateStore + ?Sized>(&mut self, store: &mut S, prefix: &[u8]) -> Result<u64> {
        Ok(self.read_header(store, prefix)?.map_or(0, |h| h.total))
    }

    /// Number of keys with a multiplicity above 0. One store read.
    pub fn distinct<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
    ) -> Result<u64> {
        Ok(self.read_header(store, prefix)?.map_or(0, |h| h.distinct))
    }

    /// Walks from the root of the tree with header `h` to a leaf, choosing at each branch
    /// the child `pick` returns (given the branch); returns the leaf.
    fn descend<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
        h: &Header,
        pick: &mut dyn FnMut(&Node) -> Result<usize>,
    ) -> Result<Node> {
        let (mut id, mut level) = (h.root, h.height - 1);
        loop {
            let n = self.load(store, prefix, id, level)?;
            if level == 0 {
                return Ok(n);
            }
            let i = pick(&n)?;
            id = n.child(i);
            level -= 1;
            self.recycle(n);
        }
    }

    /// The multiplicity of `key` (0 if absent).
    pub fn multiplicity<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
        key: &[u8],
    ) -> Result<u64> {
        let Some(h) = self.read_header(store, prefix)? else {
            return Ok(0);
        };
        let leaf = self.descend(store, prefix, &h, &mut |n| Ok(n.route(key)))?;
        let m = leaf.search(key).map_or(0, |i| leaf.mult(i));
        self.recycle(leaf);
        Ok(m)
    }

    /// The number of occurrences of keys smaller than `key` (so `select(rank(k)) == k`
    /// for a present `k`).
    pub fn rank<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
        key: &[u8],
    ) -> Result<u64> {
        let Some(h) = self.read_header(store, prefix)? else {
            return Ok(0);
        };
        let mut below = 0u64;
        let past = |n: &Node| corrupt(prefix, Some(n.id), "holds counts summing past 2^64");
        let leaf = self.descend(store, prefix, &h, &mut |n| {
            let i = n.route(key);
            below = n.checked_total(i).and_then(|t| below.checked_add(t)).ok_or_else(|| past(n))?;
            Ok(i)
        })?;
        let at = leaf.search(key).unwrap_or_else(|i| i);
        let r =
            leaf.checked_total(at).and_then(|t| below.checked_add(t)).ok_or_else(|| past(&leaf));
        self.recycle(leaf);
        r
    }

    /// Writes into `out` the key at rank `k` (0-based, each key counted as often as its
    /// multiplicity: the `k`-th smallest occurrence) and returns true, or returns false
    /// when `k >= total`.
    pub fn select_into<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
        k: u64,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        out.clear();
        let Some(h) = self.read_header(store, prefix)?.filter(|h| k < h.total) else {
            return Ok(false);
        };
        let mut rest = k;
        let pick = &mut |n: &Node| {
            for i in 0..n.len() {
                let t = n.child_total(i);
                if rest < t {
                    return Ok(i);
                }
                rest -= t;
            }
            Err(corrupt(prefix, Some(n.id), "has subtree totals smaller than the header's total"))
        };
        let leaf = self.descend(store, prefix, &h, pick)?;
        for i in 0..leaf.len() {
            let m = leaf.mult(i);
            if rest < m {
                out.extend_from_slice(leaf.key(i));
                self.recycle(leaf);
                return Ok(true);
            }
            rest -= m;
        }
        Err(corrupt(prefix, Some(leaf.id), "holds less than its parent's subtree total"))
    }

    /// The key at rank `k` (see [`select_into`](Self::select_into)), `None` when
    /// `k >= total`.
    pub fn select<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
        k: u64,
    ) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.select_into(store, prefix, k, &mut out)?.then_some(out))
    }

    /// The smallest key, `None` for an empty tree.
    pub fn first<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        let Some(h) = self.read_header(store, prefix)? else {
            return Ok(None);
        };
        let l = self.descend(store, prefix, &h, &mut |_| Ok(0))?;
        let k = l.key(0).to_vec();
        self.recycle(l);
        Ok(Some(k))
    }

    /// The greatest key, `None` for an empty tree.
    pub fn last<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        let Some(h) = self.read_header(store, prefix)? else {
            return Ok(None);
        };
        let l = self.descend(store, prefix, &h, &mut |n| Ok(n.len() - 1))?;
        let k = l.key(l.len() - 1).to_vec();
        self.recycle(l);
        Ok(Some(k))
    }

    /// Calls `f(key, multiplicity)` for every entry in increasing key order until it
    /// returns false. Reads every node: O(n).
    pub fn for_each<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
        f: &mut dyn FnMut(&[u8], u64) -> bool,
    ) -> Result<()> {
        if let Some(h) = self.read_header(store, prefix)? {
            let mut seen = HashSet::from([h.root]);
            self.walk(store, prefix, h.root, h.height - 1, f, &mut seen)?;
        }
        Ok(())
    }

    /// Visits the subtree of node `id`; returns false once `f` asked to stop. `seen`
    /// holds the nodes reached so far: a node linked twice (damage) is an error, not a
    /// walk along every path to it (exponential in the height).
    fn walk<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
        id: u64,
        level: u8,
        f: &mut dyn FnMut(&[u8], u64) -> bool,
        seen: &mut HashSet<u64>,
    ) -> Result<bool> {
        let n = self.load(store, prefix, id, level)?;
        let mut go = true;
        for i in 0..n.len() {
            go = if n.is_leaf() {
                f(n.key(i), n.mult(i))
            } else {
                let c = n.child(i);
                if !seen.insert(c) {
                    return Err(linked_twice(prefix, id, c));
                }
                self.walk(store, prefix, c, level - 1, f, seen)?
            };
            if !go {
                break;
            }
        }
        self.recycle(n);
        Ok(go)
    }

    /// Checks the whole tree at `prefix`: every node decodes, keys are in order and
    /// within their separators, every count matches, every non-root node holds between
    /// `cap / 2` and `cap` entries, a root branch at least 2, and the header's counts and
    /// node count are right. Reads every node: O(n). Returns the tree's stats.
    pub fn check<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
    ) -> Result<TreeStats> {
        let Some(h) = self.read_header(store, prefix)? else {
            return self.stats(store, prefix);
        };
        let mut nodes = 0u64;
        let (total, distinct) =
            self.check_node(store, prefix, &h, h.root, h.height - 1, None, None, &mut nodes)?;
        if (total, distinct, nodes) != (h.total, h.distinct, h.nodes) {
            return Err(corrupt(
                prefix,
                None,
                format!(
                    "counts total {}, distinct {}, nodes {} but the tree holds {total}, \
                     {distinct}, {nodes}",
                    h.total, h.distinct, h.nodes
                ),
            ));
        }
        self.stats(store, prefix)
    }

    /// Checks the subtree of node `id`, whose keys must lie in `[lo, hi)`; returns its
    /// (total, distinct).
    #[allow(clippy::too_many_arguments)]
    fn check_node<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
        h: &Header,
        id: u64,
        level: u8,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        nodes: &mut u64,
    ) -> Result<(u64, u64)> {
        let n = self.load(store, prefix, id, level)?;
        *nodes += 1;
        let bad = |what: String| Err(corrupt(prefix, Some(id), what));
        let is_root = id == h.root;
        let (cap, len) = (h.cap(level), n.len());
        let min = if is_root {
            if level == 0 {
                1
            } else {
                2
            }
        } else {
            cap / 2
        };
        if len < min || len > cap {
            return bad(format!("holds {len} entries, outside {min}..={cap}"));
        }
        let inside = |k: &[u8]| lo.is_none_or(|lo| lo <= k) && hi.is_none_or(|hi| k < hi);
        let ordered = if n.is_leaf() {
            (1..len).all(|i| n.key(i - 1) < n.key(i))
        } else {
            (2..len).all(|i| n.sep(i - 1) < n.sep(i))
        };
        if !ordered {
            return bad("holds keys or separators out of order".into());
        }
        let sum = if n.is_leaf() {
            if !(inside(n.key(0)) && inside(n.key(len - 1))) {
                return bad("holds keys outside its parent's separators".into());
            }
            match n.checked_total(len) {
                Some(t) => (t, len as u64),
                None => return bad("holds multiplicities summing past 2^64".into()),
            }
        } else {
            let (mut t, mut d) = (0u64, 0u64);
            for i in 0..len {
                if i > 0 && !inside(n.sep(i)) {
                    return bad(format!("has separator {i} outside its parent's separators"));
                }
                let clo = if i == 0 { lo } else { Some(n.sep(i)) };
                let chi = if i + 1 < len { Some(n.sep(i + 1)) } else { hi };
                let (clo, chi) = (clo.map(<[u8]>::to_vec), chi.map(<[u8]>::to_vec));
                let (ct, cd) = self.check_node(
                    store,
                    prefix,
                    h,
                    n.child(i),
                    level - 1,
                    clo.as_deref(),
                    chi.as_deref(),
                    nodes,
                )?;
                if (ct, cd) != (n.child_total(i), n.child_distinct(i)) {
                    return bad(format!(
                        "records total {} and distinct {} for child {} which holds {ct} and {cd}",
                        n.child_total(i),
                        n.child_distinct(i),
                        n.child(i)
                    ));
                }
                match (t.checked_add(ct), d.checked_add(cd)) {
                    (Some(nt), Some(nd)) => (t, d) = (nt, nd),
                    _ => return bad("holds subtree counts summing past 2^64".into()),
                }
            }
            (t, d)
        };
        self.recycle(n);
        Ok(sum)
    }

    /// Deletes every value of the tree at `prefix` (found from the root: reads every
    /// branch, not the leaves); returns the number of nodes deleted. A damaged branch
    /// stops it before anything is deleted (see [`purge`](Self::purge)).
    pub fn clear<S: StateStore + ?Sized>(&mut self, store: &mut S, prefix: &[u8]) -> Result<u64> {
        let Some(h) = self.read_header(store, prefix)? else {
            return Ok(0);
        };
        let mut ids = vec![h.root];
        let mut level_ids = vec![h.root];
        let mut seen = HashSet::from([h.root]);
        for level in (1..h.height).rev() {
            let mut next = Vec::new();
            for &id in &level_ids {
                let n = self.load(store, prefix, id, level)?;
                for c in (0..n.len()).map(|i| n.child(i)) {
                    if !seen.insert(c) {
                        return Err(linked_twice(prefix, id, c));
                    }
                    next.push(c);
                }
                self.recycle(n);
            }
            ids.extend_from_slice(&next);
            level_ids = next;
        }
        self.delete_keys(store, prefix, &ids)?;
        Ok(ids.len() as u64)
    }

    /// Deletes the header at `[prefix]` and every value at `[prefix][8 bytes]` found by
    /// [`scan_prefix`](crate::StateStoreExt::scan_prefix), without reading the tree: the way to
    /// remove a damaged tree. Costs a scan of the namespace on unordered stores. Returns
    /// the number of values deleted.
    pub fn purge<S: StateStore + ?Sized>(&mut self, store: &mut S, prefix: &[u8]) -> Result<u64> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        store.scan_prefix(self.ns, prefix, &mut |k, _| {
            if k.len() == prefix.len() || k.len() == prefix.len() + 8 {
                keys.push(k.to_vec());
            }
            true
        })?;
        for k in &keys {
            store.delete(self.ns, k)?;
        }
        Ok(keys.len() as u64)
    }

    /// Deletes nodes `ids`, then the header, in batches.
    fn delete_keys<S: StateStore + ?Sized>(
        &mut self,
        store: &mut S,
        prefix: &[u8],
        ids: &[u64],
    ) -> Result<()> {
        const BATCH: usize = 1024;
        let kl = prefix.len() + 8;
        let mut keys = Vec::with_capacity(BATCH.min(ids.len()) * kl);
        for chunk in ids.chunks(BATCH) {
            keys.clear();
            for id in chunk {
                keys.extend_from_slice(prefix);
                keys.extend_from_slice(&id.to_be_bytes());
            }
            let ops: Vec<BatchOp<'_>> = keys
                .chunks_exact(kl)
                .map(|k| BatchOp { ns: self.ns, key: k, kind: BatchKind::Delete })
                .collect();
            store.apply_batch(&ops, &mut |_, _, _| Rmw::Keep)?;
        }
        store.delete(self.ns, prefix)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f64_keys_sort_like_total_cmp_and_round_trip() {
        let xs = [
            f64::NEG_INFINITY,
            -1e300,
            -1.5,
            -f64::MIN_POSITIVE,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            2.0,
            1e300,
            f64::INFINITY,
            f64::NAN,
            -f64::NAN,
        ];
        for a in xs {
            let mut ka = Vec::new();
            f64_key(a, &mut ka);
            assert_eq!(decode_f64_key(&ka).map(f64::to_bits), Some(a.to_bits()));
            for b in xs {
                let mut kb = Vec::new();
                f64_key(b, &mut kb);
                assert_eq!(ka.cmp(&kb), a.total_cmp(&b), "{a} vs {b}");
            }
        }
    }

    #[test]
    fn node_edits_keep_offsets_consistent() {
        let mut n = Node::default();
        n.reset(7, 1);
        let mut s = Vec::new();
        for (i, sep) in [&b""[..], b"b", b"dd", b"fff"].iter().enumerate() {
            n.insert_branch(i, 10 + i as u64, (5, 2), sep, &mut s);
        }
        n.set_sep(2, b"c");
        n.set_counts(1, (9, 3));
        assert_eq!(n.route(b"a"), 0);
        assert_eq!(n.route(b"b"), 1);
        assert_eq!(n.route(b"cz"), 2);
        assert_eq!(n.route(b"zzz"), 3);
        let mut right = Node::default();
        right.reset(8, 1);
        n.split_half(&mut right);
        assert_eq!((n.len(), right.len()), (2, 2));
        assert_eq!(right.first_sep(), b"c");
        n.append_from(&right);
        n.seal();
        let mut m = Node { buf: n.buf.clone(), ..Node::default() };
        m.parse(b"p", 7, 1).unwrap();
        assert_eq!(m.offs, n.offs);
        assert_eq!(m.summary(), (24, 9));
        assert_eq!(m.child(3), 13);
    }

    use crate::collections::testutil;
    use crate::hostile::{damaged, damages};
    use crate::StateStore;
    use proptest::prelude::*;

    /// Rewrites the checksum of a header or node, as a hostile writer would.
    fn reseal(v: &mut [u8]) {
        if v.len() >= 4 {
            let crc = crc32c::crc32c(&v[4..]);
            v[..4].copy_from_slice(&crc.to_le_bytes());
        }
    }

    /// Every accessor of a parsed node, over each of its entries.
    fn touch(n: &Node, probe: &[u8]) {
        for i in 0..n.len() {
            if n.is_leaf() {
                let _ = (n.key(i), n.mult(i));
            } else {
                let _ = (n.child(i), n.child_total(i), n.child_distinct(i), n.sep(i));
            }
        }
        let _ = (n.first_sep(), n.summary());
        if n.is_leaf() {
            let _ = n.search(probe);
        } else {
            let _ = n.route(probe);
        }
    }

    /// A tree of 3 levels at prefix `p` in a fresh MemStore, with keys `k0`..`k59`.
    fn small_tree() -> (tempfile::TempDir, crate::MemStore, OsTree) {
        let (d, mut s, ns) = testutil::mem();
        let mut t = OsTree::new(ns).with_fanout(4, 4).unwrap();
        for i in 0..60u32 {
            t.add(&mut s, b"p", format!("k{i:02}").as_bytes(), i64::from(i % 3) + 1).unwrap();
        }
        t.check(&mut s, b"p").unwrap();
        (d, s, t)
    }

    /// Every operation of the tree at `p`: each answers `Ok` or `Err`.
    fn exercise(t: &mut OsTree, s: &mut dyn StateStore, probe: &[u8]) {
        let p = &b"p"[..];
        let _ = (t.total(s, p), t.distinct(s, p), t.stats(s, p), t.multiplicity(s, p, probe));
        let _ = (t.rank(s, p, probe), t.first(s, p), t.last(s, p));
        for k in [0, 1, 7, 59, 119, u64::MAX] {
            let _ = t.select(s, p, k);
        }
        let mut n = 0u64;
        let _ = t.for_each(s, p, &mut |_, _| {
            n += 1;
            true
        });
        let _ = t.check(s, p);
        for (k, d) in [(probe, 1), (probe, -1), (&b"k00"[..], -1), (b"k30", 5), (b"k59", -3)] {
            let _ = t.add(s, p, k, d);
        }
        let _ = t.add(s, p, b"zz", i64::MAX);
        let _ = t.clear(s, p);
        let _ = t.purge(s, p);
    }

    /// Stores a hand-made node (valid checksum) of the tree at `p`.
    fn put_node(s: &mut dyn StateStore, ns: Ns, id: u64, level: u8, build: impl Fn(&mut Node)) {
        let mut n = Node::default();
        n.reset(id, level);
        build(&mut n);
        n.seal();
        let mut k = Vec::new();
        node_key(&mut k, b"p", id);
        s.put(ns, &k, &n.buf).unwrap();
    }

    fn leaf(s: &mut dyn StateStore, ns: Ns, id: u64, entries: &[(&[u8], u64)]) {
        put_node(s, ns, id, 0, |n| {
            for (i, (k, m)) in entries.iter().enumerate() {
                n.insert_leaf(i, k, *m, &mut Vec::new());
            }
        });
    }

    /// A branch of entries (child, subtree total, separator); each subtree holds 2
    /// distinct keys, or 1 if its total is 1.
    fn branch(s: &mut dyn StateStore, ns: Ns, id: u64, level: u8, entries: &[(u64, u64, &[u8])]) {
        put_node(s, ns, id, level, |n| {
            for (i, (c, t, sep)) in entries.iter().enumerate() {
                n.insert_branch(i, *c, (*t, (*t).min(2)), sep, &mut Vec::new());
            }
        });
    }

    fn header(s: &mut dyn StateStore, ns: Ns, height: u8, next_id: u64, total: u64, nodes: u64) {
        let h = Header {
            height,
            leaf_cap: 4,
            branch_cap: 4,
            root: 1,
            next_id,
            total,
            distinct: 1,
            nodes,
        };
        s.put(ns, b"p", &h.encode()).unwrap();
    }

    /// Multiplicities of one leaf that sum past 2^64 (each valid on its own).
    #[test]
    fn multiplicities_summing_past_2_64_are_an_error_not_an_overflow() {
        let (_d, mut s, ns) = testutil::mem();
        let mut t = OsTree::new(ns);
        header(&mut s, ns, 1, 2, u64::MAX, 1);
        leaf(&mut s, ns, 1, &[(b"a", 1 << 63), (b"b", 1 << 63)]);
        assert!(matches!(t.check(&mut s, b"p"), Err(OsTreeError::Corrupt { .. })));
        assert!(matches!(t.rank(&mut s, b"p", b"c"), Err(OsTreeError::Corrupt { .. })));
    }

    /// Subtree totals of one branch that sum past 2^64.
    #[test]
    fn subtree_totals_summing_past_2_64_are_an_error_not_an_overflow() {
        let (_d, mut s, ns) = testutil::mem();
        let mut t = OsTree::new(ns);
        header(&mut s, ns, 2, 5, u64::MAX, 4);
        branch(&mut s, ns, 1, 1, &[(2, 1 << 63, b""), (3, 1 << 63, b"b"), (4, 1 << 63, b"c")]);
        for (id, k) in [(2, b"a"), (3, b"b"), (4, b"c")] {
            leaf(&mut s, ns, id, &[(k, 1 << 62), (&[k[0], b'1'], 1 << 62)]);
        }
        let e = t.rank(&mut s, b"p", b"d").unwrap_err();
        assert!(e.to_string().contains("node 1 "), "{e}");
        assert!(matches!(t.check(&mut s, b"p"), Err(OsTreeError::Corrupt { node: Some(1), .. })));
    }

    /// A root branch of one child (a valid root has two) whose leaf underflows on an
    /// update: the sibling it would borrow from does not exist.
    #[test]
    fn a_branch_of_one_child_above_an_underfull_node_is_an_error_not_a_panic() {
        let (_d, mut s, ns) = testutil::mem();
        let mut t = OsTree::new(ns).with_fanout(4, 4).unwrap();
        header(&mut s, ns, 2, 3, 1, 2);
        branch(&mut s, ns, 1, 1, &[(2, 1, b"")]);
        leaf(&mut s, ns, 2, &[(b"a", 1)]);
        let e = t.add(&mut s, b"p", b"a", 1).unwrap_err();
        assert!(matches!(e, OsTreeError::Corrupt { node: Some(1), .. }), "{e}");
    }

    /// A header counting fewer nodes than a merge and a root collapse remove.
    #[test]
    fn a_header_counting_too_few_nodes_is_an_error_not_an_underflow() {
        let (_d, mut s, ns) = testutil::mem();
        let mut t = OsTree::new(ns).with_fanout(4, 4).unwrap();
        header(&mut s, ns, 2, 4, 4, 1);
        branch(&mut s, ns, 1, 1, &[(2, 2, b""), (3, 2, b"c")]);
        leaf(&mut s, ns, 2, &[(b"a", 1), (b"b", 1)]);
        leaf(&mut s, ns, 3, &[(b"c", 1), (b"d", 1)]);
        let e = t.add(&mut s, b"p", b"a", -1).unwrap_err();
        assert!(matches!(e, OsTreeError::Corrupt { node: None, .. }), "{e}");
    }

    /// A header whose next node id is 2^64 - 1: a split has no id to give.
    #[test]
    fn a_header_out_of_node_ids_is_an_error_not_an_overflow() {
        let (_d, mut s, ns) = testutil::mem();
        let mut t = OsTree::new(ns).with_fanout(4, 4).unwrap();
        header(&mut s, ns, 1, u64::MAX, 4, 1);
        leaf(&mut s, ns, 1, &[(b"a", 1), (b"b", 1), (b"c", 1), (b"d", 1)]);
        let e = t.add(&mut s, b"p", b"e", 1).unwrap_err();
        assert!(matches!(e, OsTreeError::Corrupt { node: None, .. }), "{e}");
    }

    /// Branches that link one node twice at every level (40 levels: 2^39 paths to
    /// the one leaf): walking the tree reports the node linked twice instead of
    /// visiting it along every path (`for_each`) or listing it once per path (`clear`).
    #[test]
    fn a_node_linked_twice_is_an_error_not_an_endless_walk() {
        let (_d, mut s, ns) = testutil::mem();
        let mut t = OsTree::new(ns).with_fanout(4, 4).unwrap();
        header(&mut s, ns, 40, 41, 1, 40);
        for id in 1..40u64 {
            let level = (40 - id) as u8;
            branch(&mut s, ns, id, level, &[(id + 1, 1, b""), (id + 1, 1, b"b")]);
        }
        leaf(&mut s, ns, 40, &[(b"a", 1)]);
        let e = t.for_each(&mut s, b"p", &mut |_, _| true).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        let e = t.clear(&mut s, b"p").unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        assert!(t.check(&mut s, b"p").is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any bytes and damaged valid headers and nodes, checksums rewritten so that
        /// the fields are what is read: decoding answers `Ok` or `Err`, and every
        /// accessor of a node that parses stays inside it.
        #[test]
        fn hostile_node_and_header_bytes_are_an_error_not_a_panic(
            raw in proptest::collection::vec(any::<u8>(), 0..80),
            ds in damages(),
            id in prop_oneof![Just(7u64), any::<u64>()],
            level in 0u8..3,
            probe in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let mut leaf = Node::default();
            leaf.reset(7, 0);
            let mut branch = Node::default();
            branch.reset(7, 1);
            let mut sc = Vec::new();
            for (i, k) in [&b""[..], b"b", b"dd"].iter().enumerate() {
                leaf.insert_leaf(i, k, 3, &mut sc);
                branch.insert_branch(i, 10 + i as u64, (5, 2), k, &mut sc);
            }
            leaf.seal();
            branch.seal();
            let h = Header { height: 2, leaf_cap: 4, branch_cap: 4, root: 1, next_id: 9, total: 9, distinct: 3, nodes: 4 };
            let mut inputs = vec![raw.clone()];
            for v in [&raw[..], &leaf.buf, &branch.buf, &h.encode()] {
                let mut b = damaged(v, &ds);
                reseal(&mut b);
                inputs.push(b);
            }
            for b in inputs {
                let _ = Header::decode(b"p", &b);
                let mut n = Node { buf: b.clone(), ..Node::default() };
                if n.parse(b"p", id, level).is_ok() {
                    touch(&n, &probe);
                }
            }
        }

        /// A header or node of a stored tree damaged (checksum rewritten or not): every
        /// tree operation answers `Ok` or `Err`.
        #[test]
        fn hostile_tree_values_make_operations_fail_not_panic(
            pick in any::<usize>(),
            ds in damages(),
            seal in any::<bool>(),
            probe in prop_oneof![Just(b"k31".to_vec()), proptest::collection::vec(any::<u8>(), 0..4)],
        ) {
            let (_d, mut s, mut t) = small_tree();
            let ns = t.ns();
            let mut keys = Vec::new();
            crate::StateStoreExt::scan_prefix(&mut s, ns, b"p", &mut |k, v| {
                keys.push((k.to_vec(), v.to_vec()));
                true
            })
            .unwrap();
            keys.sort();
            let (k, v) = &keys[pick % keys.len()];
            let mut v = damaged(v, &ds);
            if seal {
                reseal(&mut v);
            }
            s.put(ns, k, &v).unwrap();
            exercise(&mut t, &mut s, &probe);
        }
    }
}
