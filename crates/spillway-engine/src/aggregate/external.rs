//! Holistic aggregates kept in order-statistics trees in the store, one tree per
//! (aggregate, partition), so that an update costs O(log n) in the window's size n
//! instead of rewriting a value that holds the whole window (the inline states of
//! the `holistic` module).
//!
//! This module owns the mapping from an aggregate's events to tree keys and from the
//! tree back to the aggregate's result. The [`AggSet`] built with
//! [`AggSet::external_holistic`] keeps the row count and every other aggregate inline;
//! the caller applies each insert (`+1`) and removal (`-1`) to [`HolisticTrees::update`]
//! beside the inline read-modify-write and replaces the placeholders of
//! [`AggSet::results`] with [`HolisticTrees::results`].
//!
//! | aggregate | tree key | result |
//! |---|---|---|
//! | `COUNT(DISTINCT x)` | `x` by [`Value::encode_key`] (NULL skipped) | the tree's distinct count (1 read) |
//! | `MEDIAN` / `PERCENTILE_CONT(p)` | [`f64_key`] of `x` (ints widened, NULL skipped) | ranks `floor`/`ceil` of `p (n - 1)` by [`OsTree::select_into`], interpolated as PostgreSQL does |
//! | `FIRST_VALUE` / `LAST_VALUE` | [`EventKey::encode_ordered`] then the value (NULL kept: RESPECT NULLS) | [`OsTree::first`] / [`OsTree::last`] |
//!
//! A tree's prefix is `[aggregate position u16 BE][partition key]` (the partition key is
//! a concatenation of [`Value::encode_key`] encodings, self-delimiting, so prefixes are
//! prefix-free as [`OsTree`] requires). An emptied tree leaves no state behind.
//!
//! A late event's own result is computed by applying the differences between the
//! running window and its window to the trees, reading the results, and applying the
//! differences back ([`HolisticTrees::adjusted_results`]): O(k log n) for k differences,
//! where the inline states copy the whole window.
//!
//! # FORMAT
//! The trees' byte layout is [`spillway_store::collections::ostree`]'s (version 1). The value encoding after
//! a `FIRST_VALUE`/`LAST_VALUE` event key is [`Value::encode_key`]'s, except a float,
//! written as tag `5` and its exact bits (big-endian) so that `-0.0` and NaN payloads
//! come back unchanged.
//!
//! # Limits
//! A `COUNT(DISTINCT)` value or a `FIRST_VALUE`/`LAST_VALUE` value must encode to at most
//! [`MAX_KEY_LEN`] bytes (496 for the latter, after the 16-byte event key): a longer
//! string fails the update with an error naming the aggregate.

use super::holistic::{pct_interpolate, pct_ranks};
use super::{AggKind, AggSet};
use crate::value::{EventKey, Value};
use spillway_store::collections::ostree::{
    decode_f64_key, f64_key, OsTree, OsTreeError, MAX_KEY_LEN,
};
use spillway_store::{Ns, StateStore};
use std::fmt;

/// Tag of an exact float in a `FIRST_VALUE`/`LAST_VALUE` key (after the event key).
const EXACT_FLOAT: u8 = 5;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Distinct,
    Percentile(f64),
    First,
    Last,
}

/// Why a tree-backed aggregate could not be updated or read.
#[derive(Debug)]
pub struct HolisticError {
    /// The trees' namespace.
    pub namespace: String,
    /// Position of the aggregate in its set.
    pub agg: usize,
    /// Its SQL name.
    pub name: &'static str,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for HolisticError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "namespace `{}`: aggregate #{} ({}): {}",
            self.namespace, self.agg, self.name, self.message
        )
    }
}

impl std::error::Error for HolisticError {}

/// Moves the holistic aggregates of `set` (a group-by or filter node's, whose state
/// namespace is `namespace`) into trees: the set to use, and the trees' namespace
/// (`<namespace>.ost`) when it has any such aggregate.
pub fn tree_layout(set: AggSet, namespace: &str) -> (AggSet, Option<String>) {
    let set = set.external_holistic();
    let trees = set.external().next().is_some().then(|| format!("{namespace}.ost"));
    (set, trees)
}

/// The trees of one group-by node's external aggregates (in one namespace).
#[derive(Debug)]
pub struct HolisticTrees {
    tree: OsTree,
    /// The namespace's name (for errors).
    namespace: String,
    aggs: Vec<(usize, Kind, &'static str)>,
    prefix: Vec<u8>,
    key: Vec<u8>,
    buf: Vec<u8>,
}

/// One difference between a running window and a late event's window.
pub type Adjustment<'a> = (EventKey, &'a [Value], i64);

impl HolisticTrees {
    /// The trees of `set`'s external aggregates in namespace `ns` (named `namespace`);
    /// `None` when the set keeps every aggregate inline.
    pub fn new(ns: Ns, namespace: &str, set: &AggSet) -> Option<HolisticTrees> {
        let aggs: Vec<(usize, Kind, &'static str)> = set
            .external()
            .filter_map(|(i, k)| {
                let kind = match k {
                    AggKind::CountDistinct => Kind::Distinct,
                    AggKind::Median => Kind::Percentile(0.5),
                    AggKind::PercentileCont(p) => Kind::Percentile(p),
                    AggKind::FirstValue => Kind::First,
                    AggKind::LastValue => Kind::Last,
                    _ => return None,
                };
                Some((i, kind, k.name()))
            })
            .collect();
        if aggs.is_empty() {
            return None;
        }
        Some(HolisticTrees {
            tree: OsTree::new(ns),
            namespace: namespace.to_string(),
            aggs,
            prefix: Vec::new(),
            key: Vec::new(),
            buf: Vec::new(),
        })
    }

    /// `e` with this node's namespace.
    fn named(&self, mut e: HolisticError) -> HolisticError {
        e.namespace.clone_from(&self.namespace);
        e
    }

    /// Adds (`delta = 1`) or removes (`delta = -1`) the event `key` with aggregate
    /// arguments `args` (one per aggregate of the set) in partition `pk`.
    pub fn update(
        &mut self,
        store: &mut dyn StateStore,
        pk: &[u8],
        key: EventKey,
        args: &[Value],
        delta: i64,
    ) -> Result<(), HolisticError> {
        self.update_unnamed(store, pk, key, args, delta).map_err(|e| self.named(e))
    }

    /// Replaces the external aggregates' placeholders in `out` (one value per aggregate
    /// of the set, as [`AggSet::results`] wrote them) with their results for partition
    /// `pk`.
    pub fn results(
        &mut self,
        store: &mut dyn StateStore,
        pk: &[u8],
        out: &mut [Value],
    ) -> Result<(), HolisticError> {
        self.results_unnamed(store, pk, out).map_err(|e| self.named(e))
    }

    fn set_prefix(&mut self, agg: usize, pk: &[u8]) {
        self.prefix.clear();
        self.prefix.extend_from_slice(&(agg as u16).to_be_bytes());
        self.prefix.extend_from_slice(pk);
    }

    fn update_unnamed(
        &mut self,
        store: &mut dyn StateStore,
        pk: &[u8],
        key: EventKey,
        args: &[Value],
        delta: i64,
    ) -> Result<(), HolisticError> {
        for j in 0..self.aggs.len() {
            let (i, kind, name) = self.aggs[j];
            let err =
                |message: String| HolisticError { namespace: String::new(), agg: i, name, message };
            let arg =
                args.get(i).ok_or_else(|| err(format!("no argument (got {})", args.len())))?;
            self.key.clear();
            match kind {
                Kind::Distinct => {
                    if arg.is_null() {
                        continue;
                    }
                    arg.encode_key(&mut self.key);
                }
                Kind::Percentile(_) => match arg {
                    Value::Null => continue,
                    Value::Int(v) => f64_key(*v as f64, &mut self.key),
                    Value::Float(v) => f64_key(*v, &mut self.key),
                    other => {
                        return Err(err(format!("needs a numeric argument, got {other:?}")));
                    }
                },
                Kind::First | Kind::Last => {
                    key.encode_ordered(&mut self.key);
                    match arg {
                        Value::Float(f) => {
                            self.key.push(EXACT_FLOAT);
                            self.key.extend_from_slice(&f.to_bits().to_be_bytes());
                        }
                        v => v.encode_key(&mut self.key),
                    }
                }
            }
            if self.key.len() > MAX_KEY_LEN {
                return Err(err(format!(
                    "the value of the event at time {} seq {} encodes to {} bytes; tree-backed \
                     holistic aggregates take values of at most {MAX_KEY_LEN} bytes",
                    key.time,
                    key.seq,
                    self.key.len()
                )));
            }
            self.set_prefix(i, pk);
            self.tree
                .add(store, &self.prefix, &self.key, delta)
                .map_err(|e| err(tree_message(e, key)))?;
        }
        Ok(())
    }

    fn results_unnamed(
        &mut self,
        store: &mut dyn StateStore,
        pk: &[u8],
        out: &mut [Value],
    ) -> Result<(), HolisticError> {
        for j in 0..self.aggs.len() {
            let (i, kind, name) = self.aggs[j];
            let err =
                |message: String| HolisticError { namespace: String::new(), agg: i, name, message };
            let at = EventKey { time: 0, seq: 0 };
            self.set_prefix(i, pk);
            let (tree, prefix, buf) = (&mut self.tree, &self.prefix[..], &mut self.buf);
            let v = match kind {
                Kind::Distinct => {
                    let n = tree.distinct(store, prefix).map_err(|e| err(tree_message(e, at)))?;
                    Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
                }
                Kind::Percentile(p) => {
                    let n = tree.total(store, prefix).map_err(|e| err(tree_message(e, at)))?;
                    if n == 0 {
                        Value::Null
                    } else {
                        let (lo, hi, rank) = pct_ranks(p, n);
                        let mut value_at = |k: u64| -> Result<f64, HolisticError> {
                            let found = tree
                                .select_into(store, prefix, k, buf)
                                .map_err(|e| err(tree_message(e, at)))?;
                            match found.then(|| decode_f64_key(buf)).flatten() {
                                Some(v) => Ok(v),
                                None => Err(err(format!("the tree has no 8-byte key at rank {k}"))),
                            }
                        };
                        let a = value_at(lo)?;
                        let b = if hi == lo { a } else { value_at(hi)? };
                        Value::Float(pct_interpolate(a, b, rank))
                    }
                }
                Kind::First | Kind::Last => {
                    let k = if matches!(kind, Kind::First) {
                        tree.first(store, prefix)
                    } else {
                        tree.last(store, prefix)
                    }
                    .map_err(|e| err(tree_message(e, at)))?;
                    match k {
                        None => Value::Null,
                        Some(k) => decode_value(&k).ok_or_else(|| {
                            err("a FIRST_VALUE/LAST_VALUE key that does not decode".to_string())
                        })?,
                    }
                }
            };
            match out.get_mut(i) {
                Some(slot) => *slot = v,
                None => return Err(err(format!("no result slot (got {})", out.len()))),
            }
        }
        Ok(())
    }

    /// Deletes partition `pk`'s trees (a window that fired for good).
    pub fn clear(&mut self, store: &mut dyn StateStore, pk: &[u8]) -> Result<(), HolisticError> {
        for j in 0..self.aggs.len() {
            let (i, _, name) = self.aggs[j];
            self.set_prefix(i, pk);
            self.tree.clear(store, &self.prefix).map_err(|e| HolisticError {
                namespace: self.namespace.clone(),
                agg: i,
                name,
                message: e.to_string(),
            })?;
        }
        Ok(())
    }

    /// The results of a window that differs from the running one of partition `pk` by
    /// `adjust` (events to add with `+1`, to take out with `-1`): the differences are
    /// applied to the trees, the results read into `out`, and the differences undone,
    /// so the trees end as they began (unless an error stops it midway: the caller then
    /// stops the run, and a resume starts from the last checkpoint).
    pub fn adjusted_results(
        &mut self,
        store: &mut dyn StateStore,
        pk: &[u8],
        adjust: &[Adjustment<'_>],
        out: &mut [Value],
    ) -> Result<(), HolisticError> {
        for &(key, args, delta) in adjust {
            self.update(store, pk, key, args, delta)?;
        }
        let r = self.results(store, pk, out);
        for &(key, args, delta) in adjust.iter().rev() {
            self.update(store, pk, key, args, -delta)?;
        }
        r
    }
}

fn tree_message(e: OsTreeError, key: EventKey) -> String {
    match e {
        OsTreeError::NotPresent { .. } => format!(
            "the event at time {} seq {} was removed but is not in the order-statistics \
             tree (the store does not match the reservoir): {e}",
            key.time, key.seq
        ),
        e => e.to_string(),
    }
}

/// The value after the event key of a `FIRST_VALUE`/`LAST_VALUE` tree key.
fn decode_value(k: &[u8]) -> Option<Value> {
    EventKey::decode_ordered(k)?;
    let mut rest = &k[EventKey::ORDERED_LEN..];
    match rest.first() {
        Some(&EXACT_FLOAT) => {
            let bits = u64::from_be_bytes(rest.get(1..9)?.try_into().ok()?);
            (rest.len() == 9).then_some(Value::Float(f64::from_bits(bits)))
        }
        _ => {
            let v = Value::decode_key(&mut rest)?;
            rest.is_empty().then_some(v)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// A FIRST_VALUE/LAST_VALUE tree key that is any bytes, or a valid one with a byte
        /// changed or cut, decodes to a value or to `None`, never a panic.
        #[test]
        fn hostile_first_last_keys_are_none_not_a_panic(
            garbage in prop::collection::vec(any::<u8>(), 0..48),
            value in prop_oneof![
                Just(Value::Null),
                any::<i64>().prop_map(Value::Int),
                any::<f64>().prop_map(Value::Float),
                ".{0,5}".prop_map(|s| Value::Str(s.into())),
                any::<bool>().prop_map(Value::Bool),
            ],
            at in any::<usize>(),
            byte in any::<u8>(),
            cut in any::<usize>(),
        ) {
            let _ = decode_value(&garbage);
            let mut key = Vec::new();
            EventKey { time: -3, seq: 9 }.encode_ordered(&mut key);
            match &value {
                Value::Float(f) => {
                    key.push(EXACT_FLOAT);
                    key.extend_from_slice(&f.to_bits().to_be_bytes());
                }
                v => v.encode_key(&mut key),
            }
            let back = decode_value(&key);
            prop_assert!(back.is_some(), "{:?} did not decode", value);
            let _ = decode_value(&key[..cut % (key.len() + 1)]);
            let i = at % key.len();
            key[i] = byte;
            let _ = decode_value(&key);
        }
    }
}
