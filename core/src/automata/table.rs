//! The byte transitions of every state, with rows shared where they are equal relative to
//! their state.
//!
//! A row holds, per byte class, the target's distance from the row's state rather than
//! the target itself. The states of a long string are copies of a few: a counted
//! repetition's positions, a length counter beside a pattern's automaton, every rule of one
//! shape. Their rows differ in absolute targets and agree in distances, so they are stored
//! once: the 105,997 states of a schema with two 254-character email patterns share 8,298
//! rows (39 MB as a `states × classes` table of targets, 3 MB shared). A large table was
//! not only memory: every page of it was written, then faulted in, at compile time, which
//! made such grammars' time to first mask grow with the process's age.
//!
//! A move reads the state's row offset from its per-state facts
//! ([`super::NodeInfo::row`], which a walk reads at every state anyway; they grew from
//! 16 to 20 bytes), then the cell: one dependent load as with a flat table, from far
//! fewer rows.

use std::hash::Hasher;

use rustc_hash::{FxHashMap, FxHasher};

use super::DEAD;

/// A cell with no transition. No distance between two states of a rule takes this value:
/// the automata have fewer than 2³¹ states (`super::MAX_STATES`, whatever
/// [`super::AutomataLimits::max_dfa_states`] allows).
const NONE: u32 = 1 << 31;

/// Rows of `n_classes` cells; a state finds its row by the offset its
/// [`super::NodeInfo::row`] holds (beside the facts a walk reads at each state anyway).
#[derive(Debug, Default)]
pub(crate) struct Table {
    n_classes: usize,
    /// Target − state (wrapping), or [`NONE`].
    cells: Vec<u32>,
}

impl Table {
    /// The state after a byte of class `class` from `state`, whose row is at `row`:
    /// [`DEAD`] if none.
    #[inline]
    pub(crate) fn next(&self, row: u32, state: u32, class: usize) -> u32 {
        absolute(state, self.cells[row as usize + class])
    }

    /// The row at `row`, of `state`.
    #[inline]
    pub(crate) fn row(&self, row: u32, state: u32) -> Row<'_> {
        Row { state, cells: &self.cells[row as usize..row as usize + self.n_classes] }
    }

    /// Bytes held by the rows.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.cells.len() * 4
    }

    /// Distinct rows stored.
    #[cfg(test)]
    pub(crate) fn rows(&self) -> usize {
        self.cells.len() / self.n_classes.max(1)
    }

    /// The rows' cells, for a digest: their layout follows from the automata alone (rows
    /// are stored in the order states first use them), so equal automata hash alike.
    pub(crate) fn cells(&self) -> &[u32] {
        &self.cells
    }
}

/// The target a cell names from `state`.
#[inline]
fn absolute(state: u32, cell: u32) -> u32 {
    if cell == NONE {
        DEAD
    } else {
        state.wrapping_add(cell)
    }
}

/// One state's row: its targets by byte class.
#[derive(Clone, Copy)]
pub(crate) struct Row<'a> {
    state: u32,
    cells: &'a [u32],
}

impl<'a> Row<'a> {
    /// The row of a state that reads no byte and has no place in the table.
    pub(crate) const EMPTY: Row<'static> = Row { state: 0, cells: &[] };

    /// The target on class `class` ([`DEAD`] if none).
    #[inline]
    pub(crate) fn get(&self, class: usize) -> u32 {
        self.cells.get(class).map_or(DEAD, |&c| absolute(self.state, c))
    }

    /// The targets in class order ([`DEAD`] where none).
    pub(crate) fn iter(self) -> impl Iterator<Item = u32> + 'a {
        let state = self.state;
        self.cells.iter().map(move |&c| absolute(state, c))
    }

    /// Whether the state reads no byte.
    pub(crate) fn is_empty(&self) -> bool {
        self.cells.iter().all(|&c| c == NONE)
    }
}

/// A rule's byte classes as runs of the grammar's ([`super::dfa::Dfa::spans`]).
type Spans<'a> = &'a [(u32, u32)];

/// Builds a [`Table`] state by state: rows are found first (keyed by their sparse
/// edges), then written once, each into a table allocated at its final size.
pub(crate) struct Builder<'a> {
    n_classes: usize,
    /// The keys of the distinct rows, one after another (see [`Builder::push`]).
    keys: Vec<u64>,
    /// Per distinct row: where its key ends in `keys`, and its class spans.
    rows: Vec<(usize, Option<Spans<'a>>)>,
    /// A key's hash → the last row with that hash; `same_hash[row]` → the one before.
    /// (Hashes kept as words, not keys in boxes: an allocation and a rehash of the whole
    /// key per distinct row took kb_1161's table 3.4–5.5 ms against 2.3–2.8 ms.)
    by_hash: FxHashMap<u64, u32>,
    same_hash: Vec<u32>,
    key: Vec<u64>,
}

impl<'a> Builder<'a> {
    pub(crate) fn new(n_classes: usize) -> Self {
        Self {
            n_classes,
            keys: Vec::new(),
            rows: Vec::new(),
            by_hash: FxHashMap::default(),
            same_hash: Vec::new(),
            key: Vec::new(),
        }
    }

    /// The offset of a row for a state: `edges` are `(class, target)` in a numbering of
    /// `group`'s own (the rule's DFA: a class stands for the grammar's classes
    /// `spans[class]` when given, else for itself), its state being `state` in that
    /// numbering. Rows are shared when their edges are alike at the same distances within
    /// the same class numbering; `group` names a numbering with spans (`None`: the
    /// grammar's classes). `None` when the table would pass 2³² cells.
    pub(crate) fn push(
        &mut self,
        state: u32,
        edges: &[(u32, u32)],
        group: Option<u32>,
        spans: Option<Spans<'a>>,
    ) -> Option<u32> {
        // The key: the numbering, then each edge's class and distance, an edge a word (a
        // key of the sparse edges, not of the row's cells: rows have ~16 live cells of
        // ~100).
        self.key.clear();
        self.key.push(u64::from(group.unwrap_or(u32::MAX)));
        self.key.extend(edges.iter().map(|&(c, t)| u64::from(c) << 32 | u64::from(t.wrapping_sub(state))));
        let mut h = FxHasher::default();
        self.key.iter().for_each(|&w| h.write_u64(w));
        let hash = h.finish();
        let head = self.by_hash.get(&hash).copied();
        let mut at = head.unwrap_or(u32::MAX);
        while at != u32::MAX {
            if self.key_of(at) == self.key.as_slice() {
                return Some(at * self.n_classes as u32);
            }
            at = self.same_hash[at as usize];
        }
        // Offsets are `u32` (in `NodeInfo`): the last row must start below 2³².
        let row = self.rows.len();
        let at = u32::try_from(row.checked_mul(self.n_classes)?).ok()?;
        self.keys.extend_from_slice(&self.key);
        self.rows.push((self.keys.len(), spans));
        self.same_hash.push(head.unwrap_or(u32::MAX));
        self.by_hash.insert(hash, row as u32);
        Some(at)
    }

    /// The key of distinct row `row`.
    fn key_of(&self, row: u32) -> &[u64] {
        let start = match row.checked_sub(1) {
            Some(p) => self.rows[p as usize].0,
            None => 0,
        };
        &self.keys[start..self.rows[row as usize].0]
    }

    pub(crate) fn finish(self) -> Table {
        let nc = self.n_classes;
        let mut cells = vec![NONE; self.rows.len() * nc];
        for (r, row) in cells.chunks_exact_mut(nc.max(1)).enumerate() {
            let spans = self.rows[r].1;
            for &k in &self.key_of(r as u32)[1..] {
                let (c, d) = ((k >> 32) as u32, k as u32);
                match spans {
                    None => row[c as usize] = d,
                    Some(spans) => {
                        if let Some(&(a, b)) = spans.get(c as usize) {
                            row[a as usize..=b as usize].fill(d);
                        }
                    }
                }
            }
        }
        Table { n_classes: nc, cells }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The targets of `state`'s row at `row`.
    fn targets(t: &Table, row: u32, state: u32) -> Vec<u32> {
        t.row(row, state).iter().collect()
    }

    #[test]
    fn rows_alike_at_the_same_distances_are_shared() {
        // Three copies of a two-state loop (a → b on class 0, b → a on class 1), then a
        // state reading class 2 to itself, then one reading nothing.
        let mut b = Builder::new(3);
        let mut rows = Vec::new();
        for copy in 0..3u32 {
            let (x, y) = (2 * copy, 2 * copy + 1);
            rows.push(b.push(x, &[(0, y)], None, None).unwrap());
            rows.push(b.push(y, &[(1, x)], None, None).unwrap());
        }
        rows.push(b.push(6, &[(2, 6)], None, None).unwrap());
        rows.push(b.push(7, &[], None, None).unwrap());
        // A second rule's start, numbered from 0 in its own DFA: the first loop's row,
        // read from wherever the rule starts.
        let other = b.push(0, &[(0, 1)], None, None).unwrap();
        let t = b.finish();
        assert_eq!(t.rows(), 4);
        assert_eq!((other, t.next(other, 8, 0), t.next(other, 20, 0)), (rows[0], 9, 21));
        for copy in 0..3u32 {
            let (x, y) = (2 * copy, 2 * copy + 1);
            let (rx, ry) = (rows[x as usize], rows[y as usize]);
            assert_eq!((rx, ry), (rows[0], rows[1]));
            assert_eq!(targets(&t, rx, x), [y, DEAD, DEAD]);
            assert_eq!(targets(&t, ry, y), [DEAD, x, DEAD]);
            assert_eq!((t.next(rx, x, 0), t.next(ry, y, 1), t.next(ry, y, 0)), (y, x, DEAD));
        }
        assert_eq!(t.next(rows[6], 6, 2), 6);
        assert!(t.row(rows[7], 7).is_empty() && !t.row(rows[6], 6).is_empty());
        assert_eq!(t.row(rows[6], 6).get(3), DEAD);
    }

    #[test]
    fn spans_expand_a_class_and_are_shared_only_within_their_numbering() {
        let spans = [(0u32, 1u32), (2, 3)];
        let mut b = Builder::new(4);
        let r0 = b.push(0, &[(1, 1)], Some(7), Some(&spans)).unwrap();
        // The same edges in another numbering: a row of its own.
        let r1 = b.push(1, &[(1, 2)], Some(8), Some(&[(0, 2), (3, 3)])).unwrap();
        // The grammar's own classes: class 1 is class 1.
        let r2 = b.push(2, &[(1, 3)], None, None).unwrap();
        // Alike in the first numbering: shared.
        let r3 = b.push(5, &[(1, 6)], Some(7), Some(&spans)).unwrap();
        let t = b.finish();
        assert_eq!(t.rows(), 3);
        assert_eq!((r3, targets(&t, r3, 5)), (r0, vec![DEAD, DEAD, 6, 6]));
        assert_eq!(targets(&t, r0, 0), [DEAD, DEAD, 1, 1]);
        assert_eq!(targets(&t, r1, 1), [DEAD, DEAD, DEAD, 2]);
        assert_eq!(targets(&t, r2, 2), [DEAD, 3, DEAD, DEAD]);
    }

    #[test]
    fn backward_edges_are_distances_too() {
        let mut b = Builder::new(1);
        let mut rows = vec![b.push(0, &[(0, 0)], None, None).unwrap()];
        rows.extend((1..4).map(|s| b.push(s, &[(0, s - 1)], None, None).unwrap()));
        let t = b.finish();
        assert_eq!(t.rows(), 2);
        assert_eq!((0..4).map(|s| t.next(rows[s as usize], s, 0)).collect::<Vec<_>>(), [0, 0, 1, 2]);
    }
}
