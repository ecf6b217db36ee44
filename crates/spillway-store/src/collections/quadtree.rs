//! [`CachedQuadTree`]: a region quadtree of points whose nodes are each one store key,
//! so a tiered store moves them between its levels independently.
//!
//! The tree covers fixed root bounds. A leaf holds its points; when a point would
//! take it past [`QuadTreeOptions::capacity`] it splits into four children (unless it
//! is at [`QuadTreeOptions::max_depth`], where leaves grow without bound). Every node
//! keeps the count of points below it, so a rectangle count reads only the nodes its
//! border crosses. Node ids use heap numbering (children of `n` are `4n+1 ..= 4n+4`),
//! so an id names the same cell in every tree with the same root bounds: per-cell state
//! kept elsewhere (a baseline per cell, say) can be keyed by node id.

use serde::{Deserialize, Serialize};

use super::{try_rmw, Collection, Kind, FORMAT_VERSION};
use crate::error::Result;
use crate::{Ns, Rmw, StateStore};

/// Deepest level a tree may have (node ids of deeper levels would not fit a `u64`).
pub const MAX_DEPTH: u8 = 31;

/// Tag byte after the prefix of the header key.
const HEADER_TAG: u8 = 0x00;
/// Tag byte after the prefix of a node key.
const NODE_TAG: u8 = 0x01;

/// A closed axis-aligned rectangle `[min_x, max_x] x [min_y, max_y]` (for geographic
/// data: x = longitude, y = latitude).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rect {
    /// Smallest x.
    pub min_x: f64,
    /// Smallest y.
    pub min_y: f64,
    /// Largest x.
    pub max_x: f64,
    /// Largest y.
    pub max_y: f64,
}

impl Rect {
    /// The rectangle with these corners.
    ///
    /// # Panics
    /// If a coordinate is not finite or a minimum exceeds its maximum.
    pub fn new(min_x: f64, min_y: f64, max_x: f64, max_y: f64) -> Self {
        assert!(
            [min_x, min_y, max_x, max_y].iter().all(|v| v.is_finite())
                && min_x <= max_x
                && min_y <= max_y,
            "a Rect needs finite coordinates with min <= max, got \
             ({min_x}, {min_y}) .. ({max_x}, {max_y})"
        );
        Rect { min_x, min_y, max_x, max_y }
    }

    /// Whether the point lies in the rectangle (borders included; NaN never does).
    pub fn contains(&self, x: f64, y: f64) -> bool {
        self.min_x <= x && x <= self.max_x && self.min_y <= y && y <= self.max_y
    }

    /// Whether the two rectangles share at least a point (touching borders count).
    pub fn intersects(&self, o: &Rect) -> bool {
        self.min_x <= o.max_x
            && o.min_x <= self.max_x
            && self.min_y <= o.max_y
            && o.min_y <= self.max_y
    }

    /// Whether `o` lies wholly inside this rectangle.
    pub fn contains_rect(&self, o: &Rect) -> bool {
        self.min_x <= o.min_x
            && o.max_x <= self.max_x
            && self.min_y <= o.min_y
            && o.max_y <= self.max_y
    }

    /// The smallest rectangle holding both.
    pub fn union(&self, o: &Rect) -> Rect {
        Rect {
            min_x: self.min_x.min(o.min_x),
            min_y: self.min_y.min(o.min_y),
            max_x: self.max_x.max(o.max_x),
            max_y: self.max_y.max(o.max_y),
        }
    }

    /// Width times height.
    pub fn area(&self) -> f64 {
        (self.max_x - self.min_x) * (self.max_y - self.min_y)
    }

    /// The centre point.
    pub fn center(&self) -> (f64, f64) {
        ((self.min_x + self.max_x) / 2.0, (self.min_y + self.max_y) / 2.0)
    }

    /// Quadrant `q` (0 SW, 1 SE, 2 NW, 3 NE): the four share the centre lines.
    pub fn quadrant(&self, q: usize) -> Rect {
        let (mx, my) = self.center();
        let (x0, x1) = if q & 1 == 0 { (self.min_x, mx) } else { (mx, self.max_x) };
        let (y0, y1) = if q & 2 == 0 { (self.min_y, my) } else { (my, self.max_y) };
        Rect { min_x: x0, min_y: y0, max_x: x1, max_y: y1 }
    }

    /// The quadrant a point of this rectangle belongs to: points on a centre line go
    /// east or north.
    pub fn quadrant_of(&self, x: f64, y: f64) -> usize {
        let (mx, my) = self.center();
        usize::from(x >= mx) | (usize::from(y >= my) << 1)
    }
}

/// Shape of a quadtree, fixed when the tree is created (kept in its header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub struct QuadTreeOptions {
    capacity: u32,
    max_depth: u8,
}

impl Default for QuadTreeOptions {
    fn default() -> Self {
        QuadTreeOptions { capacity: 64, max_depth: 16 }
    }
}

impl QuadTreeOptions {
    /// Points a leaf holds before it splits (default 64; at least 1).
    pub fn capacity(mut self, n: u32) -> Self {
        self.capacity = n.max(1);
        self
    }

    /// Depth below which no leaf splits (default 16; at most [`MAX_DEPTH`]; the root
    /// has depth 0).
    pub fn max_depth(mut self, d: u8) -> Self {
        self.max_depth = d.min(MAX_DEPTH);
        self
    }

    /// Points a leaf holds before it splits.
    pub fn leaf_capacity(&self) -> u32 {
        self.capacity
    }

    /// Depth below which no leaf splits.
    pub fn depth_limit(&self) -> u8 {
        self.max_depth
    }
}

/// One node of a tree as queries report it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    /// Node id (heap numbering; 0 is the root).
    pub id: u64,
    /// Depth (the root is 0).
    pub depth: u8,
    /// The cell's rectangle.
    pub bounds: Rect,
    /// Points in the cell.
    pub count: u64,
    /// Whether the node is a leaf.
    pub leaf: bool,
}

/// The tree's header value (see the [FORMAT](super#format)).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
struct TreeHeader {
    version: u8,
    bounds: Rect,
    capacity: u32,
    max_depth: u8,
}

/// A node's value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Node {
    bounds: Rect,
    depth: u8,
    count: u64,
    body: Body,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum Body {
    /// The points of a leaf, in insertion order.
    Leaf(Vec<(f64, f64)>),
    /// An inner node: its children are `4n+1 ..= 4n+4`.
    Inner,
}

/// A region quadtree of `(x, y)` points kept in a namespace of a store, one store key
/// per node (see the [module docs](self) and the [FORMAT](super#format)).
///
/// An insert reads and rewrites the nodes on the path from the root to a leaf, one
/// read-modify-write per level; a split writes the new children, then the node. Nodes
/// migrate between the levels of a tiered store independently: a query touches only
/// the nodes it needs.
///
/// An insert that fails part-way (a store error) can leave the counts of the nodes
/// above the failing one one too high; the store errors that matter (I/O, corruption)
/// poison the store, and recovery returns the last checkpoint.
///
/// ```
/// # use spillway_store::{MemStore, NamespaceSpec, StateStore, StoreOptions};
/// # use spillway_store::collections::{CachedQuadTree, QuadTreeOptions, Rect};
/// # let dir = tempfile::tempdir().unwrap();
/// let mut store = MemStore::open(StoreOptions::new(dir.path()).namespace(NamespaceSpec::list("s")))?;
/// let world = Rect::new(-180.0, -90.0, 180.0, 90.0);
/// let tree = CachedQuadTree::new(store.namespace("s")?, "w0", world, QuadTreeOptions::default());
/// tree.insert(&mut store, 2.35, 48.86)?;
/// tree.insert(&mut store, 13.40, 52.52)?;
/// assert_eq!(tree.count_in(&mut store, &Rect::new(0.0, 40.0, 10.0, 50.0))?, 1);
/// tree.clear(&mut store)?;
/// # Ok::<(), spillway_store::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct CachedQuadTree {
    c: Collection,
    bounds: Rect,
    opts: QuadTreeOptions,
}

/// What the read-modify-write of one node on an insert's path decided.
enum Next {
    Descend(u64),
    Done,
    Split(Rect, u8, Vec<(f64, f64)>),
}

impl CachedQuadTree {
    /// The tree `id` in namespace `ns` over `bounds`. The bounds and options are
    /// recorded when the first point creates the tree; reopen an existing tree with
    /// [`open`](Self::open).
    ///
    /// # Panics
    /// If `id` is empty or longer than [`MAX_ID_LEN`](super::MAX_ID_LEN) bytes.
    pub fn new(ns: Ns, id: &str, bounds: Rect, opts: QuadTreeOptions) -> Self {
        CachedQuadTree { c: Collection::new(ns, Kind::QuadTree, id), bounds, opts }
    }

    /// The existing tree `id` in namespace `ns` with the bounds and options recorded
    /// in its header, or `None` if it has no points.
    ///
    /// # Panics
    /// If `id` is empty or longer than [`MAX_ID_LEN`](super::MAX_ID_LEN) bytes.
    pub fn open<S: StateStore + ?Sized>(store: &mut S, ns: Ns, id: &str) -> Result<Option<Self>> {
        let c = Collection::new(ns, Kind::QuadTree, id);
        let key = c.key(&[HEADER_TAG]);
        let mut buf = Vec::new();
        if !store.get_into(ns, &key, &mut buf)? {
            return Ok(None);
        }
        let h: TreeHeader = c.decode(&key, &buf)?;
        if h.version != FORMAT_VERSION {
            return Err(c.corrupt(
                &key,
                format!(
                    "the quadtree header has format version {}; this build reads version \
                     {FORMAT_VERSION}",
                    h.version
                ),
            ));
        }
        let opts = QuadTreeOptions::default().capacity(h.capacity).max_depth(h.max_depth);
        Ok(Some(CachedQuadTree { c, bounds: h.bounds, opts }))
    }

    /// The namespace the tree lives in.
    pub fn ns(&self) -> Ns {
        self.c.ns()
    }

    /// The tree's id.
    pub fn id(&self) -> &str {
        self.c.id()
    }

    /// The root bounds.
    pub fn bounds(&self) -> Rect {
        self.bounds
    }

    /// The tree's shape options.
    pub fn options(&self) -> QuadTreeOptions {
        self.opts
    }

    /// Id of child `q` (0 SW, 1 SE, 2 NW, 3 NE) of node `id`.
    pub fn child_id(id: u64, q: usize) -> u64 {
        4 * id + 1 + q as u64
    }

    /// Id of the parent of node `id` (`None` for the root).
    pub fn parent_id(id: u64) -> Option<u64> {
        id.checked_sub(1).map(|i| i / 4)
    }

    /// Depth of node `id` (the root is 0).
    pub fn depth_of(id: u64) -> u8 {
        let (mut d, mut i) = (0u8, id);
        while let Some(p) = Self::parent_id(i) {
            d += 1;
            i = p;
        }
        d
    }

    /// The rectangle of node `id` in a tree with this tree's root bounds (whether or
    /// not the node exists).
    pub fn cell_bounds(&self, id: u64) -> Rect {
        let mut path = Vec::new();
        let mut i = id;
        while let Some(p) = Self::parent_id(i) {
            path.push(((i - 1) % 4) as usize);
            i = p;
        }
        path.iter().rev().fold(self.bounds, |r, &q| r.quadrant(q))
    }

    /// Adds the point; returns `false` (storing nothing) if it lies outside the root
    /// bounds or has a NaN coordinate. Reads and rewrites one node per level.
    pub fn insert<S: StateStore + ?Sized>(&self, store: &mut S, x: f64, y: f64) -> Result<bool> {
        if !self.bounds.contains(x, y) {
            return Ok(false);
        }
        let mut id = 0u64;
        let mut created = false;
        loop {
            let key = self.node_key(id);
            let mut next = Next::Done;
            try_rmw(store, self.c.ns(), &key, |old, out| {
                let mut node = match old {
                    Some(bytes) => self.c.decode::<Node>(&key, bytes)?,
                    None if id == 0 => {
                        created = true;
                        Node {
                            bounds: self.bounds,
                            depth: 0,
                            count: 0,
                            body: Body::Leaf(Vec::new()),
                        }
                    }
                    None => return Err(self.missing(&key)),
                };
                let Some(count) = node.count.checked_add(1) else {
                    return Err(self.c.corrupt(&key, "the node counts 2^64 - 1 points".into()));
                };
                match &mut node.body {
                    Body::Inner => {
                        node.count = count;
                        let q = node.bounds.quadrant_of(x, y);
                        next = Next::Descend(self.checked_child(&key, id, q)?);
                    }
                    Body::Leaf(points) => {
                        if points.len() as u64 >= u64::from(self.opts.capacity)
                            && node.depth < self.opts.max_depth
                        {
                            // Split: the children are written first, then this node.
                            let mut points = std::mem::take(points);
                            points.push((x, y));
                            next = Next::Split(node.bounds, node.depth, points);
                            return Ok(Rmw::Keep);
                        }
                        points.push((x, y));
                        node.count = count;
                        next = Next::Done;
                    }
                }
                self.c.encode_into(&key, &node, out)?;
                Ok(Rmw::Put)
            })?;
            match next {
                Next::Descend(child) => id = child,
                Next::Done => break,
                Next::Split(bounds, depth, points) => {
                    self.write_split(store, id, bounds, depth, points)?;
                    break;
                }
            }
        }
        if created {
            let key = self.c.key(&[HEADER_TAG]);
            let h = TreeHeader {
                version: FORMAT_VERSION,
                bounds: self.bounds,
                capacity: self.opts.capacity,
                max_depth: self.opts.max_depth,
            };
            let mut buf = Vec::new();
            self.c.encode_into(&key, &h, &mut buf)?;
            store.put(self.c.ns(), &key, &buf)?;
        }
        Ok(true)
    }

    /// Writes node `id` as an inner node over `points`, and its subtree: children that
    /// are still too full split again.
    fn write_split<S: StateStore + ?Sized>(
        &self,
        store: &mut S,
        id: u64,
        bounds: Rect,
        depth: u8,
        points: Vec<(f64, f64)>,
    ) -> Result<()> {
        let count = points.len() as u64;
        let mut quads: [Vec<(f64, f64)>; 4] = Default::default();
        for (x, y) in points {
            quads[bounds.quadrant_of(x, y)].push((x, y));
        }
        for (q, pts) in quads.into_iter().enumerate() {
            let child = Self::child_id(id, q);
            let cb = bounds.quadrant(q);
            if pts.len() as u64 > u64::from(self.opts.capacity) && depth + 1 < self.opts.max_depth {
                self.write_split(store, child, cb, depth + 1, pts)?;
            } else {
                let node = Node {
                    bounds: cb,
                    depth: depth + 1,
                    count: pts.len() as u64,
                    body: Body::Leaf(pts),
                };
                self.put_node(store, child, &node)?;
            }
        }
        self.put_node(store, id, &Node { bounds, depth, count, body: Body::Inner })
    }

    /// Number of points in the tree. One store read.
    pub fn len<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<u64> {
        Ok(self.node(store, 0)?.map_or(0, |n| n.count))
    }

    /// Whether the tree has no points.
    pub fn is_empty<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<bool> {
        Ok(self.len(store)? == 0)
    }

    /// Number of points in `rect` (borders included). Reads the nodes that `rect`
    /// overlaps without covering, and no node below one it covers.
    pub fn count_in<S: StateStore + ?Sized>(&self, store: &mut S, rect: &Rect) -> Result<u64> {
        // `None` once the counts sum past 2^64 (damaged counts).
        let mut total = Some(0u64);
        self.walk(store, rect, &mut |node, _| {
            if rect.contains_rect(&node.bounds) {
                total = total.and_then(|t| t.checked_add(node.count));
                return false;
            }
            if let Body::Leaf(points) = &node.body {
                let n = points.iter().filter(|&&(x, y)| rect.contains(x, y)).count() as u64;
                total = total.and_then(|t| t.checked_add(n));
            }
            total.is_some()
        })?;
        total.ok_or_else(|| {
            self.c.corrupt(&self.node_key(0), "the cells' counts sum past 2^64".into())
        })
    }

    /// The points in `rect` (borders included), leaf by leaf in quadrant order.
    pub fn points_in<S: StateStore + ?Sized>(
        &self,
        store: &mut S,
        rect: &Rect,
    ) -> Result<Vec<(f64, f64)>> {
        let mut out = Vec::new();
        self.walk(store, rect, &mut |node, _| {
            if let Body::Leaf(points) = &node.body {
                out.extend(points.iter().filter(|&&(x, y)| rect.contains(x, y)));
            }
            true
        })?;
        Ok(out)
    }

    /// Calls `f` with every node, parents before children, children in quadrant order.
    /// One read per node.
    pub fn for_each_cell<S: StateStore + ?Sized>(
        &self,
        store: &mut S,
        mut f: impl FnMut(&Cell),
    ) -> Result<()> {
        self.walk(store, &self.bounds, &mut |node, id| {
            f(&Cell {
                id,
                depth: node.depth,
                bounds: node.bounds,
                count: node.count,
                leaf: matches!(node.body, Body::Leaf(_)),
            });
            true
        })
    }

    /// Every node (see [`for_each_cell`](Self::for_each_cell)).
    pub fn cells<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<Vec<Cell>> {
        let mut out = Vec::new();
        self.for_each_cell(store, |c| out.push(*c))?;
        Ok(out)
    }

    /// Every leaf, in quadrant order.
    pub fn leaves<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<Vec<Cell>> {
        let mut out = Vec::new();
        self.for_each_cell(store, |c| {
            if c.leaf {
                out.push(*c);
            }
        })?;
        Ok(out)
    }

    /// Deletes every node and the header (a window's tree when the window expires);
    /// returns the number of nodes deleted. One read and one delete per node.
    pub fn clear<S: StateStore + ?Sized>(&self, store: &mut S) -> Result<u64> {
        let mut ids = Vec::new();
        self.walk(store, &self.bounds, &mut |_, id| {
            ids.push(id);
            true
        })?;
        for &id in &ids {
            store.delete(self.c.ns(), &self.node_key(id))?;
        }
        store.delete(self.c.ns(), &self.c.key(&[HEADER_TAG]))?;
        Ok(ids.len() as u64)
    }

    /// Depth-first walk from the root over the nodes that intersect `within`, parents
    /// first, children in quadrant order; `f(node, id)` returns whether to descend.
    fn walk<S: StateStore + ?Sized>(
        &self,
        store: &mut S,
        within: &Rect,
        f: &mut dyn FnMut(&Node, u64) -> bool,
    ) -> Result<()> {
        let mut stack = vec![0u64];
        while let Some(id) = stack.pop() {
            let Some(node) = self.node(store, id)? else {
                if id == 0 {
                    return Ok(());
                }
                return Err(self.missing(&self.node_key(id)));
            };
            if !within.intersects(&node.bounds) {
                continue;
            }
            if f(&node, id) && matches!(node.body, Body::Inner) {
                let key = self.node_key(id);
                for q in (0..4).rev() {
                    if within.intersects(&node.bounds.quadrant(q)) {
                        stack.push(self.checked_child(&key, id, q)?);
                    }
                }
            }
        }
        Ok(())
    }

    fn node_key(&self, id: u64) -> Vec<u8> {
        self.c.numbered_key(NODE_TAG, id)
    }

    /// [`child_id`](Self::child_id) of the inner node `id` stored at `key`, which is an
    /// error past [`MAX_DEPTH`] (no valid tree has inner nodes there: their children's
    /// ids do not fit a `u64`).
    fn checked_child(&self, key: &[u8], id: u64, q: usize) -> Result<u64> {
        id.checked_mul(4).and_then(|i| i.checked_add(1 + q as u64)).ok_or_else(|| {
            self.c
                .corrupt(key, format!("inner node {id} is too deep: its children's ids pass 2^64"))
        })
    }

    fn node<S: StateStore + ?Sized>(&self, store: &mut S, id: u64) -> Result<Option<Node>> {
        let key = self.node_key(id);
        let mut buf = Vec::new();
        if !store.get_into(self.c.ns(), &key, &mut buf)? {
            return Ok(None);
        }
        self.c.decode(&key, &buf).map(Some)
    }

    fn put_node<S: StateStore + ?Sized>(&self, store: &mut S, id: u64, node: &Node) -> Result<()> {
        let key = self.node_key(id);
        let mut buf = Vec::new();
        self.c.encode_into(&key, node, &mut buf)?;
        store.put(self.c.ns(), &key, &buf)
    }

    fn missing(&self, key: &[u8]) -> crate::Error {
        self.c.corrupt(key, "a child of an inner node is missing".into())
    }
}

#[cfg(test)]
mod tests {
    use crate::StateStoreExt;
    use proptest::prelude::*;

    use super::*;
    use crate::collections::testutil;

    const WORLD: Rect = Rect { min_x: -10.0, min_y: 35.0, max_x: 30.0, max_y: 60.0 };

    /// Points: uniform, clustered (deep splits), exact duplicates (max depth) and
    /// some outside the bounds.
    fn points() -> impl Strategy<Value = Vec<(f64, f64)>> {
        let uniform = (-10.0f64..=30.0, 35.0f64..=60.0);
        let cluster = (0.0f64..0.01, 0.0f64..0.01).prop_map(|(dx, dy)| (2.35 + dx, 48.86 + dy));
        let dup = Just((13.4, 52.5));
        let corner = prop_oneof![Just((-10.0, 35.0)), Just((30.0, 60.0)), Just((10.0, 47.5))];
        let outside = prop_oneof![Just((-10.5, 40.0)), Just((0.0, 61.0)), Just((f64::NAN, 40.0))];
        proptest::collection::vec(
            prop_oneof![5 => uniform, 3 => cluster, 1 => dup, 1 => corner, 1 => outside],
            0..400,
        )
    }

    fn rect() -> impl Strategy<Value = Rect> {
        (-12.0f64..32.0, 33.0f64..62.0, 0.0f64..45.0, 0.0f64..30.0)
            .prop_map(|(x, y, w, h)| Rect::new(x, y, x + w, y + h))
    }

    fn check<S: StateStore + ?Sized>(
        store: &mut S,
        tree: &CachedQuadTree,
        pts: &[(f64, f64)],
        rects: &[Rect],
    ) {
        let mut inside = Vec::new();
        for &(x, y) in pts {
            let ok = tree.insert(store, x, y).unwrap();
            assert_eq!(ok, WORLD.contains(x, y));
            if ok {
                inside.push((x, y));
            }
        }
        assert_eq!(tree.len(store).unwrap(), inside.len() as u64);
        let mut all = rects.to_vec();
        all.extend(tree.leaves(store).unwrap().iter().map(|c| c.bounds));
        all.push(WORLD);
        for r in &all {
            let brute = inside.iter().filter(|&&(x, y)| r.contains(x, y)).count() as u64;
            assert_eq!(tree.count_in(store, r).unwrap(), brute, "rect {r:?}");
            assert_eq!(tree.points_in(store, r).unwrap().len() as u64, brute, "rect {r:?}");
        }
        // The structure: counts add up, leaves respect capacity unless at max depth,
        // and each node's stored bounds are what its id says.
        let cells = tree.cells(store).unwrap();
        let opts = tree.options();
        for c in &cells {
            assert_eq!(c.bounds, tree.cell_bounds(c.id));
            assert_eq!(c.depth, CachedQuadTree::depth_of(c.id));
            if c.leaf {
                assert!(
                    c.count <= u64::from(opts.leaf_capacity()) || c.depth == opts.depth_limit()
                );
            } else {
                let kids: u64 = (0..4)
                    .map(|q| {
                        cells
                            .iter()
                            .find(|k| k.id == CachedQuadTree::child_id(c.id, q))
                            .unwrap()
                            .count
                    })
                    .sum();
                assert_eq!(kids, c.count);
            }
        }
        let leaf_sum: u64 = cells.iter().filter(|c| c.leaf).map(|c| c.count).sum();
        assert_eq!(leaf_sum, inside.len() as u64);
        // Clearing leaves no key behind.
        let nodes = tree.clear(store).unwrap();
        assert_eq!(nodes, cells.len() as u64);
        let mut left = 0;
        store
            .scan_prefix(tree.ns(), tree.c.prefix(), &mut |_, _| {
                left += 1;
                true
            })
            .unwrap();
        assert_eq!(left, 0);
        assert_eq!(tree.len(store).unwrap(), 0);
    }

    proptest! {
        #[test]
        fn counts_match_a_brute_force_point_list(
            pts in points(),
            rects in proptest::collection::vec(rect(), 1..20),
            capacity in 1u32..12,
            max_depth in 0u8..8,
        ) {
            let (_d, mut store, ns) = testutil::mem();
            let opts = QuadTreeOptions::default().capacity(capacity).max_depth(max_depth);
            let tree = CachedQuadTree::new(ns, "t", WORLD, opts);
            check(&mut store, &tree, &pts, &rects);
        }
    }

    #[test]
    fn counts_match_over_hashlog() {
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(8));
        runner
            .run(&(points(), proptest::collection::vec(rect(), 1..20)), |(pts, rects)| {
                let dir = tempfile::tempdir().unwrap();
                let (mut store, ns) = testutil::hashlog(dir.path());
                let tree =
                    CachedQuadTree::new(ns, "t", WORLD, QuadTreeOptions::default().capacity(4));
                check(&mut store, &tree, &pts, &rects);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn a_tree_survives_checkpoint_and_reopen_with_its_header() {
        let dir = tempfile::tempdir().unwrap();
        let ns = crate::Ns(0);
        let pts: Vec<(f64, f64)> = (0..3000u32)
            .map(|i| {
                (-10.0 + f64::from(i * 37 % 4000) / 100.0, 35.0 + f64::from(i * 91 % 2500) / 100.0)
            })
            .collect();
        {
            let (mut store, _) = testutil::hashlog(dir.path());
            let tree = CachedQuadTree::new(
                ns,
                "t",
                WORLD,
                QuadTreeOptions::default().capacity(8).max_depth(9),
            );
            for &(x, y) in &pts {
                tree.insert(&mut store, x, y).unwrap();
            }
            store.checkpoint().unwrap();
            tree.insert(&mut store, 0.0, 40.0).unwrap();
        }
        let (mut store, _) = testutil::hashlog(dir.path());
        assert!(CachedQuadTree::open(&mut store, ns, "other").unwrap().is_none());
        let tree = CachedQuadTree::open(&mut store, ns, "t").unwrap().unwrap();
        assert_eq!(tree.bounds(), WORLD);
        assert_eq!(tree.options(), QuadTreeOptions::default().capacity(8).max_depth(9));
        assert_eq!(tree.len(&mut store).unwrap(), 3000);
        let r = Rect::new(0.0, 40.0, 12.5, 50.0);
        let brute = pts.iter().filter(|&&(x, y)| r.contains(x, y)).count() as u64;
        assert_eq!(tree.count_in(&mut store, &r).unwrap(), brute);
    }

    #[test]
    fn a_missing_child_is_an_error_naming_the_node() {
        let (_d, mut store, ns) = testutil::mem();
        let tree = CachedQuadTree::new(ns, "t", WORLD, QuadTreeOptions::default().capacity(1));
        tree.insert(&mut store, 0.0, 40.0).unwrap();
        tree.insert(&mut store, 20.0, 50.0).unwrap();
        store.delete(ns, &tree.node_key(CachedQuadTree::child_id(0, 3))).unwrap();
        let err = tree.count_in(&mut store, &Rect::new(19.0, 49.0, 21.0, 51.0)).unwrap_err();
        assert!(err.to_string().contains("quadtree \"t\""), "{err}");
        assert!(tree.insert(&mut store, 25.0, 55.0).is_err());
    }

    #[test]
    fn ids_name_fixed_cells() {
        let t = CachedQuadTree::new(crate::Ns(0), "t", WORLD, QuadTreeOptions::default());
        assert_eq!(CachedQuadTree::parent_id(0), None);
        for id in [1u64, 4, 5, 20, 21, 1000, 123_456] {
            let p = CachedQuadTree::parent_id(id).unwrap();
            assert!((0..4).any(|q| CachedQuadTree::child_id(p, q) == id));
            assert!(t.cell_bounds(p).contains_rect(&t.cell_bounds(id)));
        }
        assert_eq!(t.cell_bounds(CachedQuadTree::child_id(0, 3)), WORLD.quadrant(3));
        assert_eq!(CachedQuadTree::depth_of(CachedQuadTree::child_id(5, 2)), 3);
    }

    const UNIT: Rect = Rect { min_x: 0.0, min_y: 0.0, max_x: 1.0, max_y: 1.0 };

    fn put(store: &mut crate::MemStore, tree: &CachedQuadTree, id: u64, count: u64, body: Body) {
        let node = Node { bounds: UNIT, depth: 0, count, body };
        tree.put_node(store, id, &node).unwrap();
    }

    /// A root leaf counting 2^64 - 1 points, and two covered cells whose counts sum
    /// past 2^64.
    #[test]
    fn node_counts_past_2_64_are_an_error_not_an_overflow() {
        let (_d, mut store, ns) = testutil::mem();
        let tree = CachedQuadTree::new(ns, "t", UNIT, QuadTreeOptions::default());
        put(&mut store, &tree, 0, u64::MAX, Body::Leaf(Vec::new()));
        let e = tree.insert(&mut store, 0.5, 0.5).unwrap_err();
        assert!(e.to_string().contains("2^64"), "{e}");
        put(&mut store, &tree, 0, 1, Body::Inner);
        for q in 0..4 {
            let node = Node {
                bounds: UNIT.quadrant(q),
                depth: 1,
                count: 1 << 63,
                body: Body::Leaf(Vec::new()),
            };
            tree.put_node(&mut store, CachedQuadTree::child_id(0, q), &node).unwrap();
        }
        let e = tree.count_in(&mut store, &Rect::new(-1.0, -1.0, 0.7, 2.0)).unwrap_err();
        assert!(e.to_string().contains("2^64"), "{e}");
    }

    /// Inner nodes down the north-east path to depth 31, where a child's id no longer
    /// fits a u64 (one of them wraps to the root).
    #[test]
    fn an_inner_node_too_deep_for_child_ids_is_an_error_not_an_overflow() {
        let (_d, mut store, ns) = testutil::mem();
        let tree = CachedQuadTree::new(ns, "t", UNIT, QuadTreeOptions::default());
        let mut id = 0u64;
        for depth in 0..32 {
            put(&mut store, &tree, id, 1, Body::Inner);
            if depth < 31 {
                id = CachedQuadTree::child_id(id, 3);
            }
        }
        let e = tree.insert(&mut store, 0.95, 0.95).unwrap_err();
        assert!(e.to_string().contains("too deep"), "{e}");
        let e = tree.count_in(&mut store, &Rect::new(0.9, 0.9, 1.0, 1.0)).unwrap_err();
        assert!(e.to_string().contains("too deep"), "{e}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// A node or the header of a tree damaged, any bytes, or a well-formed node with
        /// any count, depth and body: every operation answers `Ok` or `Err`.
        #[test]
        fn hostile_quadtree_nodes_are_an_error_not_a_panic(
            pts in proptest::collection::vec((-10.0f64..=30.0, 35.0f64..=60.0), 1..40),
            pick in any::<usize>(),
            which in 0u8..3,
            raw in proptest::collection::vec(any::<u8>(), 0..24),
            ds in crate::hostile::damages(),
            fields in (prop_oneof![Just(u64::MAX), any::<u64>(), 0u64..10], any::<u8>(), any::<bool>()),
        ) {
            let (_d, mut store, ns) = testutil::mem();
            let opts = QuadTreeOptions::default().capacity(2).max_depth(6);
            let tree = CachedQuadTree::new(ns, "t", WORLD, opts);
            for &(x, y) in &pts {
                tree.insert(&mut store, x, y).unwrap();
            }
            let mut keys = Vec::new();
            store.scan_prefix(ns, tree.c.prefix(), &mut |k, v| {
                keys.push((k.to_vec(), v.to_vec()));
                true
            }).unwrap();
            keys.sort();
            let (k, v) = &keys[pick % keys.len()];
            let (count, depth, leaf) = fields;
            let v = match which {
                0 => raw,
                1 => crate::hostile::damaged(v, &ds),
                _ => {
                    let body = if leaf { Body::Leaf(pts.clone()) } else { Body::Inner };
                    postcard::to_allocvec(&Node { bounds: WORLD, depth, count, body }).unwrap()
                }
            };
            store.put(ns, k, &v).unwrap();
            let _ = CachedQuadTree::open(&mut store, ns, "t");
            let r = Rect::new(0.0, 40.0, 12.5, 50.0);
            let _ = (tree.len(&mut store), tree.count_in(&mut store, &r), tree.points_in(&mut store, &r));
            let _ = (tree.cells(&mut store), tree.leaves(&mut store));
            for &(x, y) in pts.iter().take(3) {
                let _ = tree.insert(&mut store, x, y);
            }
            let _ = tree.clear(&mut store);
        }
    }
}
