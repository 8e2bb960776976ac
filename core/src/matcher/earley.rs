//! The Earley recognizer over rule DFAs: the matcher's parse state.
//!
//! An item is `(state, origin)`: a DFA state of some rule, and the position (Earley set)
//! where that rule instance started. One set per input byte; the sets are kept in a single
//! `Vec` with end offsets, so pushing a byte appends and popping truncates. That gives
//! unlimited, O(1)-per-byte rollback, and forking is a copy of two flat vectors.
//!
//! Position 0 is a virtual empty set; the seed item sits in set 1 with origin 0. An item
//! with origin 0 that reaches a final state therefore has no parent to complete into: the
//! seed rule is done. For the matcher the seed is the root rule's start, so that event
//! means "the output may end here". For the compiler's per-state classification the seed
//! is the state being classified, and the event means "the token straddles the end of this
//! rule" (the context-dependent case).
//!
//! Why Earley rather than a pushdown automaton: left recursion and ambiguity need no
//! grammar rewriting, the parse state is bounded by the number of distinct items per set
//! (a PDA's stack set can grow exponentially under ambiguity), and rollback is trivial.
//! Empty rules are completed at prediction time (Aycock & Horspool), which is why an item
//! whose origin is the current set is never completed explicitly.

use crate::automata::{Automata, DEAD};

/// One Earley item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Item {
    pub state: u32,
    pub origin: u32,
}

/// An item of some set that waits for `rule` to complete, then moves to `target`.
#[derive(Debug, Clone, Copy)]
struct Wait {
    rule: u32,
    target: u32,
    origin: u32,
}

/// Above this many items in one set, duplicate checks use a hash set.
const LINEAR_DEDUP_MAX: usize = 24;

/// Earley sets for one input, with cheap push/pop of bytes.
#[derive(Debug, Clone)]
pub(crate) struct Earley {
    items: Vec<Item>,
    /// `set_ends[k]`: end of set `k` in `items` (set 0 is the virtual empty set).
    set_ends: Vec<u32>,
    /// `can_end[k]`: the seed rule completed at position `k`.
    can_end: Vec<bool>,
    /// Items waiting on a rule, per set: `(rule, target state, origin)` for every rule edge
    /// of every item. Completion scans only this compact list of its origin set instead of
    /// every item and its edges. Set `k` is `waits[wait_ends[k - 1]..wait_ends[k]]`.
    waits: Vec<Wait>,
    wait_ends: Vec<u32>,
    seen: rustc_hash::FxHashSet<Item>,
    /// `stamp[state] == generation`: the item `(state, current position)` is already in
    /// the set being built. Predictions (the bulk of a closure) are deduplicated with one
    /// load instead of a scan; the generation grows with every set built, so truncation
    /// never leaves stale stamps.
    stamp: Vec<u32>,
    generation: u32,
}

impl Earley {
    /// A parser whose seed is `seed` (a DFA state), with its closure computed.
    pub fn new(a: &Automata, seed: u32) -> Earley {
        let mut e = Earley {
            items: Vec::with_capacity(64),
            set_ends: vec![0],
            can_end: vec![false],
            waits: Vec::with_capacity(64),
            wait_ends: vec![0],
            seen: Default::default(),
            stamp: vec![0; a.num_states()],
            generation: 0,
        };
        let start = e.items.len();
        e.items.push(Item { state: seed, origin: 0 });
        let end = e.closure(a, start);
        e.finish_set(end);
        e
    }

    /// Seals the set being built.
    #[inline]
    fn finish_set(&mut self, can_end: bool) {
        self.set_ends.push(self.items.len() as u32);
        self.can_end.push(can_end);
        self.wait_ends.push(self.waits.len() as u32);
    }

    /// Number of positions after the seed set (bytes consumed).
    #[inline]
    pub fn depth(&self) -> usize {
        self.set_ends.len() - 2
    }

    /// Items of the latest set.
    #[inline]
    pub fn last_set(&self) -> &[Item] {
        let n = self.set_ends.len();
        &self.items[self.set_ends[n - 2] as usize..self.set_ends[n - 1] as usize]
    }

    /// Whether the seed rule can be complete at the latest position.
    #[inline]
    pub fn can_end(&self) -> bool {
        self.can_end[self.can_end.len() - 1]
    }


    /// Drops positions until `depth()` is `depth`.
    #[inline]
    pub fn truncate(&mut self, depth: usize) {
        let sets = depth + 2;
        if sets < self.set_ends.len() {
            self.set_ends.truncate(sets);
            self.can_end.truncate(sets);
            self.wait_ends.truncate(sets);
            self.items.truncate(self.set_ends[sets - 1] as usize);
            self.waits.truncate(self.wait_ends[sets - 1] as usize);
        }
    }

    /// Consumes `byte`; returns false (state unchanged) if no item can scan it.
    pub fn push(&mut self, a: &Automata, byte: u8) -> bool {
        let n = self.set_ends.len();
        let (lo, hi) = (self.set_ends[n - 2] as usize, self.set_ends[n - 1] as usize);
        let start = self.items.len();
        let class = a.byte_class[byte as usize] as usize;
        let nc = a.n_classes;
        // Fast path: one item moving to a state with no rule edges and no completion (the
        // inside of strings, numbers, keywords) needs no closure.
        if hi - lo == 1 {
            let it = self.items[lo];
            let t = a.trans[it.state as usize * nc + class];
            if t == DEAD {
                return false;
            }
            let node = a.nodes[t as usize];
            self.items.push(Item { state: t, origin: it.origin });
            let end = if node.is_final || node.edges.0 != node.edges.1 { self.closure(a, start) } else { false };
            self.finish_set(end);
            return true;
        }
        for i in lo..hi {
            let it = self.items[i];
            let t = a.trans[it.state as usize * nc + class];
            if t != DEAD {
                self.add(start, Item { state: t, origin: it.origin });
            }
        }
        if self.items.len() == start {
            return false;
        }
        let end = self.closure(a, start);
        self.finish_set(end);
        true
    }

    /// Adds `item` to the set being built (which starts at `start`) unless present.
    /// Starts a new set: a fresh generation for prediction stamps.
    #[inline]
    fn next_generation(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.stamp.fill(0);
            self.generation = 1;
        }
    }

    /// Adds `(state, pos)` — an item that starts at the set being built — unless present.
    #[inline]
    fn add_here(&mut self, state: u32, pos: u32) {
        let s = &mut self.stamp[state as usize];
        if *s != self.generation {
            *s = self.generation;
            self.items.push(Item { state, origin: pos });
        }
    }

    #[inline]
    fn add(&mut self, start: usize, item: Item) {
        let len = self.items.len() - start;
        if len <= LINEAR_DEDUP_MAX {
            if self.items[start..].contains(&item) {
                return;
            }
            if len == LINEAR_DEDUP_MAX {
                self.seen.clear();
                self.seen.extend(self.items[start..].iter().copied());
                self.seen.insert(item);
            }
        } else if !self.seen.insert(item) {
            return;
        }
        self.items.push(item);
    }

    /// Predict/complete closure of the set being built; returns whether the seed rule
    /// completed in it.
    fn closure(&mut self, a: &Automata, start: usize) -> bool {
        // The set being built is at position `pos`.
        let pos = self.set_ends.len() as u32;
        self.next_generation();
        let mut can_end = false;
        let mut j = start;
        while j < self.items.len() {
            let it = self.items[j];
            j += 1;
            let node = a.nodes[it.state as usize];
            if node.is_final {
                if it.origin == 0 {
                    can_end = true;
                } else if it.origin < pos {
                    // Complete: advance every item of the origin set waiting on this rule.
                    let o = it.origin as usize;
                    let (wlo, whi) = (self.wait_ends[o - 1] as usize, self.wait_ends[o] as usize);
                    for w in wlo..whi {
                        let w = self.waits[w];
                        if w.rule == node.rule {
                            self.add(start, Item { state: w.target, origin: w.origin });
                        }
                    }
                }
            }
            for &(r, t) in a.edges(it.state) {
                self.waits.push(Wait { rule: r, target: t, origin: it.origin });
                self.add_here(a.rule_start[r as usize], pos);
                if a.nullable[r as usize] {
                    if it.origin == pos {
                        self.add_here(t, pos);
                    } else {
                        self.add(start, Item { state: t, origin: it.origin });
                    }
                }
            }
        }
        can_end
    }

    /// Heap bytes in use.
    pub fn memory_bytes(&self) -> usize {
        self.items.capacity() * 8
            + self.set_ends.capacity() * 4
            + self.can_end.capacity()
            + self.waits.capacity() * 12
            + self.wait_ends.capacity() * 4
    }
}
