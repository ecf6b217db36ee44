//! Cacheable collections: typed maps, lists, sets and a quadtree whose elements are
//! each their own store key, so that a tiered store moves them between its levels one
//! by one (the DEBS'22 paper's cacheable data structures, and its nested structure
//! whose nodes migrate independently).
//!
//! A handle ([`CachedMap`], [`CachedList`], [`CachedSet`], [`CachedQuadTree`]) is a
//! small value naming a namespace ([`Ns`]) and a collection id; it holds no state of
//! its own. Every operation takes the store (`&mut S` for any
//! `S: StateStore + ?Sized`, so `&mut dyn StateStore` works too), so one collection runs
//! unchanged over [`MemStore`](crate::MemStore), [`HashLogStore`](crate::HashLogStore)
//! or the tiered store. Two handles with the same namespace, kind and id are the same
//! collection.
//!
//! The order-statistics tree ([`OsTree`], module [`ostree`]) is a collection of another
//! make, for rank queries (medians, percentiles, distinct counts, first and last): a
//! counted B+tree of byte keys with multiplicities. Like the others it spreads over many
//! store values, holds nothing but buffers in its handle and takes the store in every
//! operation; unlike them its keys start with a prefix the caller chooses (no kind byte
//! or id), its values are a fixed-width little-endian layout with checksums (not
//! postcard), its errors are its own ([`OsTreeError`]), and its layout is in its own
//! [FORMAT](ostree#format) section. Give its trees a namespace of their own, or prefixes
//! no other key starts with.
//!
//! - Keys and values are encoded with [postcard]. A value that does not decode as the
//!   collection's type is an error naming the collection and the key (see
//!   [Errors](#errors)), never a panic.
//! - Single-entry updates are one [`rmw`](crate::StateStore::rmw): no get+put pair.
//! - Nothing needs an ordered store: maps and sets are walked with
//!   [`scan_prefix`](crate::StateStoreExt::scan_prefix) (in the store's order, which is
//!   no order on a hash store); lists and quadtrees compute the keys they read. A scan
//!   visits the whole namespace on a hash store, and the tiered store first writes
//!   every level down to run one, so iterating a map or set (and `len`, `clear`) is
//!   for occasional use; point operations are the hot path.
//!
//! # FORMAT
//! Version 1 ([`FORMAT_VERSION`]) of the maps, sets, lists and quadtrees (the
//! order-statistics tree has its own, in [`ostree`]). Every key of a collection starts
//! with its prefix; integers in keys are big-endian so that an ordered store keeps
//! chunks and nodes in numeric order; everything else is postcard (varints,
//! little-endian floats).
//! ```text
//! prefix      : kind u8 | id_len u8 | id (1..=255 bytes of UTF-8)
//! kind        : b'M' map, b'S' set, b'L' list, b'Q' quadtree
//!
//! map entry   : prefix('M') | postcard(K)              -> postcard(V)
//! set member  : prefix('S') | postcard(T)              -> (empty)
//!
//! list header : prefix('L') | 0x00                     -> postcard(ListHeader)
//!               ListHeader = { version u8, chunk_len u32, head u64, len u64 }
//! list chunk  : prefix('L') | 0x01 | chunk u64 BE      -> postcard(Vec<T>)
//!               element at position p (head <= p < head + len) is element
//!               p % chunk_len of chunk p / chunk_len; chunk c holds the elements of
//!               positions c*chunk_len .. (front positions below head may remain, unread,
//!               until their chunk is wholly popped); chunks outside the live range do
//!               not exist; an empty list has no keys at all (the header goes with the
//!               last element, and the next push starts again at head = 0).
//!
//! tree header : prefix('Q') | 0x00                     -> postcard(TreeHeader)
//!               TreeHeader = { version u8, bounds Rect, capacity u32, max_depth u8 }
//! tree node   : prefix('Q') | 0x01 | node id u64 BE    -> postcard(Node)
//!               Node = { bounds Rect, depth u8, count u64,
//!                        body: Leaf(Vec<(x f64, y f64)>) | Inner }
//!               Rect = { min_x, min_y, max_x, max_y: f64 }
//!               the root is node 0; the children of node n are 4n+1 ..= 4n+4 in
//!               quadrant order SW, SE, NW, NE (heap numbering), so a node id names the
//!               same cell in every tree with the same root bounds.
//! ```
//! The prefix carries the id's length, so the prefix of one collection is never a
//! prefix of another's: a prefix scan of map `a` sees nothing of map `ab`. A
//! collection's keys share its namespace with other collections and with plain keys;
//! plain keys must not start with a collection prefix.
//!
//! Versioning: the list and tree headers begin with the format version; a header of
//! another version is refused (an error naming the collection). Map and set entries
//! carry no version: their bytes are exactly the postcard encoding of the user's types,
//! and postcard is not self-describing, so a change of `K`, `V` or `T` that changes
//! their encoding needs a new collection id (or a migration). A new layout of the
//! collections themselves gets new kind bytes, so old and new keys never alias.
//!
//! # Errors
//! A stored value (or key) that does not decode is reported as [`Error::Decode`]
//! naming the namespace, collection kind and id, the key (in hex) and the postcard
//! error. An unencodable value (a type postcard cannot serialize, such as a sequence of
//! unknown length) is [`Error::Decode`] with an empty key.

pub mod list;
pub mod map;
pub mod ostree;
pub mod quadtree;
pub mod set;

use std::fmt::Write as _;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::Ns;

pub use list::CachedList;
pub use map::CachedMap;
pub use ostree::{OsTree, OsTreeError, TreeStats};
pub use quadtree::{CachedQuadTree, Cell, QuadTreeOptions, Rect};
pub use set::CachedSet;

/// Version of the key and value layout described in the [FORMAT](self#format) section.
pub const FORMAT_VERSION: u8 = 1;

/// Longest collection id, in bytes.
pub const MAX_ID_LEN: usize = 255;

/// The kind byte that starts every key of a collection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Map,
    Set,
    List,
    QuadTree,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Map => b'M',
            Kind::Set => b'S',
            Kind::List => b'L',
            Kind::QuadTree => b'Q',
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Map => "map",
            Kind::Set => "set",
            Kind::List => "list",
            Kind::QuadTree => "quadtree",
        }
    }
}

/// The identity of one collection: namespace, kind and id, with its key prefix.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Collection {
    ns: Ns,
    kind: Kind,
    /// `kind | id_len | id`.
    prefix: Box<[u8]>,
}

impl Collection {
    /// # Panics
    /// If `id` is empty or longer than [`MAX_ID_LEN`] bytes.
    pub(crate) fn new(ns: Ns, kind: Kind, id: &str) -> Self {
        assert!(
            !id.is_empty() && id.len() <= MAX_ID_LEN,
            "a collection id must be 1..={MAX_ID_LEN} bytes, got {} bytes",
            id.len()
        );
        let mut prefix = Vec::with_capacity(2 + id.len());
        prefix.push(kind.byte());
        prefix.push(id.len() as u8);
        prefix.extend_from_slice(id.as_bytes());
        Collection { ns, kind, prefix: prefix.into() }
    }

    pub(crate) fn ns(&self) -> Ns {
        self.ns
    }

    pub(crate) fn id(&self) -> &str {
        // The prefix was built from a &str.
        std::str::from_utf8(&self.prefix[2..]).unwrap_or_default()
    }

    pub(crate) fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The prefix followed by `suffix`.
    pub(crate) fn key(&self, suffix: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + suffix.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(suffix);
        k
    }

    /// The prefix followed by a tag byte and a big-endian number (list chunks, nodes).
    pub(crate) fn numbered_key(&self, tag: u8, n: u64) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + 9);
        k.extend_from_slice(&self.prefix);
        k.push(tag);
        k.extend_from_slice(&n.to_be_bytes());
        k
    }

    /// The prefix followed by the postcard encoding of `item` (map keys, set members).
    pub(crate) fn item_key<T: Serialize + ?Sized>(&self, item: &T) -> Result<Vec<u8>> {
        let mut k = self.prefix.to_vec();
        self.encode_into(&self.prefix, item, &mut k)?;
        Ok(k)
    }

    /// Appends the postcard encoding of `value` to `out`; `key` is only for the error.
    pub(crate) fn encode_into<T: Serialize + ?Sized>(
        &self,
        key: &[u8],
        value: &T,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        postcard::to_io(value, &mut *out).map(|_| ()).map_err(|e| Error::Decode {
            collection: self.describe(),
            key: hex(key),
            detail: format!("the value cannot be encoded: {e}"),
        })
    }

    /// Decodes the whole of `bytes` as a `T` (trailing bytes are an error too).
    pub(crate) fn decode<T: DeserializeOwned>(&self, key: &[u8], bytes: &[u8]) -> Result<T> {
        match postcard::take_from_bytes::<T>(bytes) {
            Ok((v, [])) => Ok(v),
            Ok((_, rest)) => Err(self.corrupt(
                key,
                format!(
                    "the value ({} bytes) has {} bytes left over after decoding",
                    bytes.len(),
                    rest.len()
                ),
            )),
            Err(e) => Err(self.corrupt(
                key,
                format!(
                    "the value ({} bytes) does not decode ({e}): it was written with another \
                     type or is damaged",
                    bytes.len()
                ),
            )),
        }
    }

    /// Decodes the part of a stored key after the prefix (map keys, set members).
    pub(crate) fn decode_key<T: DeserializeOwned>(&self, key: &[u8]) -> Result<T> {
        let suffix = key.get(self.prefix.len()..).unwrap_or_default();
        match postcard::take_from_bytes::<T>(suffix) {
            Ok((v, [])) => Ok(v),
            Ok(_) => Err(self.corrupt(key, "the key has bytes left over after decoding".into())),
            Err(e) => Err(self.corrupt(
                key,
                format!("the key does not decode ({e}): it was written with another type"),
            )),
        }
    }

    /// The error for a stored key or value that is not what the layout says.
    pub(crate) fn corrupt(&self, key: &[u8], what: String) -> Error {
        Error::Decode { collection: self.describe(), key: hex(key), detail: what }
    }

    /// "namespace #N, KIND \"ID\"", for messages.
    fn describe(&self) -> String {
        format!("namespace #{}, {} {:?}", self.ns.index(), self.kind.name(), self.id())
    }
}

/// Lower-case hex of up to 64 bytes (more are elided), for error messages.
fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len().min(64) * 2 + 3);
    for b in bytes.iter().take(64) {
        let _ = write!(s, "{b:02x}");
    }
    if bytes.len() > 64 {
        s.push_str("...");
    }
    s
}

/// Runs a read-modify-write whose closure can fail: `f` returns the action or an
/// error; an error leaves the value as it was ([`Rmw::Keep`](crate::Rmw::Keep)) and is
/// returned after the store call.
pub(crate) fn try_rmw<S: crate::StateStore + ?Sized>(
    store: &mut S,
    ns: Ns,
    key: &[u8],
    mut f: impl FnMut(Option<&[u8]>, &mut Vec<u8>) -> Result<crate::Rmw>,
) -> Result<()> {
    let mut failed: Option<Error> = None;
    store.rmw(ns, key, &mut |old, out| match f(old, out) {
        Ok(action) => action,
        Err(e) => {
            failed = Some(e);
            out.clear();
            crate::Rmw::Keep
        }
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use crate::{MemStore, NamespaceSpec, Ns, StateStore, StoreOptions};

    /// A MemStore in a fresh temporary directory with one namespace "c".
    pub(crate) fn mem() -> (tempfile::TempDir, MemStore, Ns) {
        let dir = tempfile::tempdir().unwrap();
        let store = MemStore::open(opts(dir.path())).unwrap();
        let ns = store.namespace("c").unwrap();
        (dir, store, ns)
    }

    pub(crate) fn opts(dir: &std::path::Path) -> StoreOptions {
        StoreOptions::new(dir).namespace(NamespaceSpec::list("c"))
    }

    /// A HashLogStore in `dir` (opened or recovered) with one namespace "c".
    pub(crate) fn hashlog(dir: &std::path::Path) -> (crate::HashLogStore, Ns) {
        let store = crate::HashLogStore::open(
            opts(dir).memory_budget(16 << 20),
            crate::HashLogOptions::for_budget(16 << 20),
        )
        .unwrap();
        let ns = store.namespace("c").unwrap();
        (store, ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StateStore;
    use crate::StateStoreExt;

    #[test]
    fn prefixes_of_different_ids_do_not_nest() {
        let ns = Ns(0);
        let a = Collection::new(ns, Kind::Map, "a");
        let ab = Collection::new(ns, Kind::Map, "ab");
        assert!(!ab.prefix().starts_with(a.prefix()));
        assert!(!a.prefix().starts_with(ab.prefix()));
        assert_ne!(Collection::new(ns, Kind::Set, "a").prefix(), a.prefix());
        assert_eq!(a.prefix(), b"M\x01a");
    }

    #[test]
    #[should_panic(expected = "collection id")]
    fn empty_id_is_refused() {
        let _ = Collection::new(Ns(0), Kind::Map, "");
    }

    #[test]
    fn undecodable_value_is_an_error_naming_collection_and_key() {
        let (_d, mut store, ns) = testutil::mem();
        let m: CachedMap<u32, String> = CachedMap::new(ns, "names");
        m.insert(&mut store, &7, &"seven".to_string()).unwrap();
        // A value of another type under the same key: 0xff is not a valid varint end.
        let key = Collection::new(ns, Kind::Map, "names").item_key(&7u32).unwrap();
        store.put(ns, &key, &[0xff]).unwrap();
        let err = m.get(&mut store, &7).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Decode { .. }), "{msg}");
        assert!(msg.contains("map \"names\""), "{msg}");
        assert!(msg.contains(&hex(&key)), "{msg}");
        // Trailing bytes are refused as well.
        store.put(ns, &key, &[1, b'x', 0]).unwrap();
        assert!(m.get(&mut store, &7).unwrap_err().to_string().contains("left over"));
        // And an update through rmw leaves the bad value in place.
        assert!(m.update(&mut store, &7, |_| Some("x".into())).is_err());
        assert_eq!(store.get(ns, &key).unwrap().unwrap(), vec![1, b'x', 0]);
    }
}
