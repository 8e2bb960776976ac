//! The Earley recognizer over rule DFAs: the matcher's parse state.
//!
//! An item is `(state, origin)`: a DFA state of some rule, and the position (Earley set)
//! where that rule instance started. One set per input byte; the sets are kept in a single
//! run of flat vectors with end offsets, so pushing a byte appends and popping truncates.
//! That gives unlimited, O(1)-per-byte rollback.
//!
//! # Sharing history between forks
//! Sets are never modified once built, so older ones can be shared. The newest sets live
//! in a mutable `tail`; every [`FREEZE_SETS`] positions the tail's older sets move into an
//! immutable, `Arc`-shared [`Segment`]. Cloning (forking) a parser copies the segment list
//! (a pointer per segment) and the tail (at most about `2 × FREEZE_SETS` sets), never the
//! whole history. Completion reads an origin set from the tail or, for older origins, from
//! its segment (binary search). Rolling back below the tail copies that segment's prefix
//! back into the tail.
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
use std::sync::Arc;

/// One Earley item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Item {
    pub state: u32,
    pub origin: u32,
}

/// A state of a member-set rule together with one instance's progress: the members it has
/// written and how many extra ones (saturating; see `automata::members`). Such states are
/// the parser's own, numbered past the automaton's; they scan no byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Progress {
    base: u32,
    /// The written set itself for a set of up to 64 members; for a wider set, the index
    /// of the written set in [`Earley::wide`] (0: nothing written).
    written: u64,
    extra: u32,
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

/// The tail is frozen into a shared segment once it holds twice this many sets.
pub(crate) const FREEZE_SETS: usize = 256;

/// A run of consecutive Earley sets in flat vectors.
#[derive(Debug, Clone, Default)]
struct Sets {
    items: Vec<Item>,
    /// `item_ends[i]`: end of this run's `i`-th set in `items`.
    item_ends: Vec<u32>,
    /// `can_end[i]`: the seed rule completed at this run's `i`-th set.
    can_end: Vec<bool>,
    /// Items waiting on a rule: `(rule, target state, origin)` for every rule edge of every
    /// item. Completion scans only its origin set's compact list, not items and edges.
    waits: Vec<Wait>,
    wait_ends: Vec<u32>,
    /// A unique id per built set. A set's id stands for the whole history up to it (older
    /// sets cannot change without destroying it), which makes it a sound memo key.
    uids: Vec<u64>,
}

impl Sets {
    #[inline]
    fn len(&self) -> usize {
        self.item_ends.len()
    }

    #[inline]
    fn items_of(&self, i: usize) -> &[Item] {
        let lo = if i == 0 { 0 } else { self.item_ends[i - 1] as usize };
        &self.items[lo..self.item_ends[i] as usize]
    }

    #[inline]
    fn waits_of(&self, i: usize) -> &[Wait] {
        let lo = if i == 0 { 0 } else { self.wait_ends[i - 1] as usize };
        &self.waits[lo..self.wait_ends[i] as usize]
    }

    /// Keeps the first `n` sets.
    fn truncate(&mut self, n: usize) {
        if n < self.len() {
            self.item_ends.truncate(n);
            self.can_end.truncate(n);
            self.wait_ends.truncate(n);
            self.uids.truncate(n);
            self.items.truncate(self.item_ends.last().map_or(0, |&e| e as usize));
            self.waits.truncate(self.wait_ends.last().map_or(0, |&e| e as usize));
        }
    }

    /// A copy of sets `from..self.len()`.
    fn suffix(&self, from: usize) -> Sets {
        let i0 = if from == 0 { 0 } else { self.item_ends[from - 1] };
        let w0 = if from == 0 { 0 } else { self.wait_ends[from - 1] };
        Sets {
            items: self.items[i0 as usize..].to_vec(),
            item_ends: self.item_ends[from..].iter().map(|e| e - i0).collect(),
            can_end: self.can_end[from..].to_vec(),
            waits: self.waits[w0 as usize..].to_vec(),
            wait_ends: self.wait_ends[from..].iter().map(|e| e - w0).collect(),
            uids: self.uids[from..].to_vec(),
        }
    }

    fn memory_bytes(&self) -> usize {
        self.items.capacity() * 8
            + self.item_ends.capacity() * 4
            + self.can_end.capacity()
            + self.waits.capacity() * 12
            + self.wait_ends.capacity() * 4
            + self.uids.capacity() * 8
    }
}

/// Frozen sets shared between forks; the first covers position `start`.
#[derive(Debug)]
struct Segment {
    start: u32,
    sets: Sets,
}

/// Earley sets for one input, with cheap push/pop of bytes and cheap cloning.
#[derive(Debug, Clone)]
pub(crate) struct Earley {
    /// Older sets, oldest first, contiguous: segment `i + 1` starts where `i` ends.
    frozen: Vec<Arc<Segment>>,
    /// Position of the tail's first set.
    base: u32,
    /// The newest sets (never empty: it always holds the latest set).
    tail: Sets,
    seen: rustc_hash::FxHashSet<Item>,
    /// `stamp[state] == generation`: the item `(state, current position)` is already in
    /// the set being built. Predictions (the bulk of a closure) are deduplicated with one
    /// load instead of a scan; the generation grows with every set built, so truncation
    /// never leaves stale stamps.
    stamp: Vec<u32>,
    /// `state_stamp[state] == generation`: some item with this state and an older origin
    /// is in the set being built (so a full duplicate check is needed only then).
    state_stamp: Vec<u32>,
    generation: u32,
    scratch: Vec<Item>,
    next_uid: u64,
    /// Closures of single-item sets, keyed by the item's state and its origin set's uid
    /// (see [`Memo`]).
    memo: rustc_hash::FxHashMap<u64, Memo>,
    scratch_key: Vec<(u32, u64)>,
    /// Whether closures are memoized. Worth it when the same kernels recur — walking a
    /// vocabulary trie, checking uncertain tokens — but not when consuming an output
    /// once, where every kernel is new and the memo would only cost.
    memoize: bool,
    /// Number of automaton states; state `n_static + i` is `progress[i]`.
    n_static: u32,
    /// Member-set progress states, interned (never removed: a rolled-back id is only
    /// unused, and forks copy the table, so ids in shared segments stay valid).
    progress: Vec<Progress>,
    progress_ids: rustc_hash::FxHashMap<Progress, u32>,
    /// Written sets of member sets wider than one word, interned like `progress` (index 0,
    /// the empty set, is implicit).
    wide: Vec<Arc<[u64]>>,
    wide_ids: rustc_hash::FxHashMap<Arc<[u64]>, u64>,
    /// Scratch written sets for [`Earley::gated_edges`].
    bits: (Vec<u64>, Vec<u64>),
    /// Set when a closure predicted a stand-in rule ([`Automata::predicts_stand_in`]);
    /// cleared only by [`Earley::take_stand_in`]. A staged compile's first grammar
    /// answers like the finished one until this happens.
    stand_in: bool,
}

/// The closure computed for a set whose scanned items (its kernel) were `key`, as
/// `(state, uid of the origin set)` pairs. It depends only on the kernel and the history up
/// to the origins (which the uids identify), so every later set with the same kernel reuses
/// it: walking an identifier inside an expression repeats the same `factor → term → expr`
/// completion cascade once per byte. Items and waits that start at the new set are stored
/// with origin [`Memo::HERE`].
#[derive(Debug, Clone)]
struct Memo {
    key: Vec<(u32, u64)>,
    items: Vec<Item>,
    waits: Vec<Wait>,
    can_end: bool,
    /// The closure predicted a stand-in rule.
    stand_in: bool,
}

impl Memo {
    const HERE: u32 = u32::MAX;
}

/// The memo is cleared when it grows past this many entries.
const MEMO_MAX: usize = 4096;

/// The per-state stamp arrays of a parser, kept between short-lived parsers: a parser
/// for one mask computation on a grammar of 20k states would otherwise clear 160 KB
/// before its first byte, which cost more than many of the walks themselves. The
/// generation travels with the arrays, so every stamp left in them is older than any
/// set the next parser builds, whichever automaton wrote it.
#[derive(Debug, Default)]
pub(crate) struct Stamps {
    stamp: Vec<u32>,
    state_stamp: Vec<u32>,
    generation: u32,
}

impl Earley {
    /// A parser whose seed is `seed` (a DFA state), with its closure computed.
    pub fn new(a: &Automata, seed: u32) -> Earley {
        Earley::with_stamps(a, seed, Stamps::default())
    }

    /// Like [`Earley::new`], reusing `stamps` (from [`Earley::into_stamps`]).
    pub fn with_stamps(a: &Automata, seed: u32, mut stamps: Stamps) -> Earley {
        let n = a.num_states();
        if stamps.stamp.len() < n {
            stamps.stamp.resize(n, 0);
            stamps.state_stamp.resize(n, 0);
        }
        let mut tail =
            Sets { items: Vec::with_capacity(64), waits: Vec::with_capacity(64), ..Sets::default() };
        // Position 0: the virtual empty set.
        tail.item_ends.push(0);
        tail.can_end.push(false);
        tail.wait_ends.push(0);
        tail.uids.push(0);
        let mut e = Earley {
            frozen: Vec::new(),
            base: 0,
            tail,
            seen: Default::default(),
            stamp: stamps.stamp,
            state_stamp: stamps.state_stamp,
            generation: stamps.generation,
            scratch: Vec::new(),
            next_uid: 0,
            memo: Default::default(),
            scratch_key: Vec::new(),
            memoize: false,
            n_static: n as u32,
            progress: Vec::new(),
            progress_ids: Default::default(),
            wide: Vec::new(),
            wide_ids: Default::default(),
            bits: Default::default(),
            stand_in: false,
        };
        let start = e.tail.items.len();
        e.next_generation();
        e.tail.items.push(Item { state: seed, origin: 0 });
        e.state_stamp[seed as usize] = e.generation;
        let end = e.closure(a, start);
        e.finish_set(end);
        e
    }

    /// Whether a closure predicted a stand-in rule since the last call; clears the flag.
    pub fn take_stand_in(&mut self) -> bool {
        std::mem::take(&mut self.stand_in)
    }

    /// Gives back the stamp arrays for the next short-lived parser.
    pub fn into_stamps(self) -> Stamps {
        Stamps { stamp: self.stamp, state_stamp: self.state_stamp, generation: self.generation }
    }

    /// Number of sets, the virtual one included.
    #[inline]
    fn num_sets(&self) -> usize {
        self.base as usize + self.tail.len()
    }

    /// Seals the set being built.
    #[inline]
    fn finish_set(&mut self, can_end: bool) {
        self.tail.item_ends.push(self.tail.items.len() as u32);
        self.tail.can_end.push(can_end);
        self.tail.wait_ends.push(self.tail.waits.len() as u32);
        self.next_uid += 1;
        self.tail.uids.push(self.next_uid);
    }

    /// The unique id of set `o` (any position).
    #[inline]
    pub fn uid_at(&self, o: u32) -> u64 {
        self.uid_of(o as usize)
    }

    /// The unique id of set `o` (any position).
    #[inline]
    fn uid_of(&self, o: usize) -> u64 {
        let base = self.base as usize;
        if o >= base {
            return self.tail.uids[o - base];
        }
        let k = self.frozen.partition_point(|s| s.start as usize <= o) - 1;
        let seg = &self.frozen[k];
        seg.sets.uids[o - seg.start as usize]
    }

    /// Number of positions after the seed set (bytes consumed).
    #[inline]
    pub fn depth(&self) -> usize {
        self.num_sets() - 2
    }

    /// Whether `state` is an automaton state (not one of this parser's progress states).
    #[inline]
    pub fn is_automaton_state(&self, state: u32) -> bool {
        state < self.n_static
    }

    /// Items of the latest set.
    #[inline]
    pub fn last_set(&self) -> &[Item] {
        self.tail.items_of(self.tail.len() - 1)
    }

    /// Items of the set before the latest one, when it is still in the tail (`None` at the
    /// seed set or right after a freeze).
    #[inline]
    pub fn previous_set(&self) -> Option<&[Item]> {
        let n = self.tail.len();
        (n >= 2).then(|| self.tail.items_of(n - 2))
    }

    /// The latest set's unique id: equal ids mean the same set over the same history.
    #[inline]
    pub fn last_uid(&self) -> u64 {
        self.tail.uids[self.tail.len() - 1]
    }

    /// The uid of the set before the latest one (`u64::MAX` at the seed set).
    #[inline]
    pub fn previous_uid(&self) -> u64 {
        let n = self.tail.len();
        if n >= 2 {
            self.tail.uids[n - 2]
        } else {
            u64::MAX
        }
    }

    /// Turns closure memoization on or off (see [`Memo`]); turning it off frees the memo.
    pub fn set_memoize(&mut self, on: bool) {
        self.memoize = on;
        if !on {
            self.memo.clear();
        }
    }

    /// Whether the seed rule can be complete at the latest position.
    #[inline]
    pub fn can_end(&self) -> bool {
        self.tail.can_end[self.tail.len() - 1]
    }

    /// Drops positions until `depth()` is `depth`.
    #[inline]
    pub fn truncate(&mut self, depth: usize) {
        let sets = depth + 2;
        if sets >= self.num_sets() {
            return;
        }
        if sets > self.base as usize {
            self.tail.truncate(sets - self.base as usize);
            return;
        }
        self.unfreeze(sets);
    }

    /// Rolls back into the frozen segments: keeps `sets` sets, copying the part of the
    /// segment that holds the new latest set into the tail.
    #[cold]
    fn unfreeze(&mut self, sets: usize) {
        while let Some(seg) = self.frozen.pop() {
            if (seg.start as usize) < sets {
                let keep = sets - seg.start as usize;
                let mut tail = seg.sets.suffix(0);
                tail.truncate(keep);
                self.tail = tail;
                self.base = seg.start;
                return;
            }
        }
    }

    /// Moves all but the latest set of a long tail into a shared segment. Called by the
    /// matcher between steps (never inside a mask fill, which pushes and pops around the
    /// current position and would otherwise freeze and unfreeze at a boundary).
    pub fn maybe_freeze(&mut self) {
        let n = self.tail.len();
        if n < 2 * FREEZE_SETS {
            return;
        }
        let latest = self.tail.suffix(n - 1);
        let mut older = std::mem::replace(&mut self.tail, latest);
        older.truncate(n - 1);
        self.frozen.push(Arc::new(Segment { start: self.base, sets: older }));
        self.base += (n - 1) as u32;
    }

    /// Waiting items of set `o` (any position).
    #[inline]
    fn waits_of(&self, o: usize) -> &[Wait] {
        let base = self.base as usize;
        if o >= base {
            return self.tail.waits_of(o - base);
        }
        let k = self.frozen.partition_point(|s| s.start as usize <= o) - 1;
        let seg = &self.frozen[k];
        seg.sets.waits_of(o - seg.start as usize)
    }

    /// Consumes `byte`; returns false (state unchanged) if no item can scan it.
    pub fn push(&mut self, a: &Automata, byte: u8) -> bool {
        self.next_generation();
        let n = self.tail.len();
        let lo = if n >= 2 { self.tail.item_ends[n - 2] as usize } else { 0 };
        let hi = self.tail.item_ends[n - 1] as usize;
        let start = self.tail.items.len();
        let class = a.byte_class[byte as usize] as usize;
        // Fast path: one item moving to a state with no rule edges and no completion (the
        // inside of strings, numbers, keywords) needs no closure.
        if hi - lo == 1 {
            let it = self.tail.items[lo];
            let t = a.next(it.state, class);
            if t == DEAD {
                return false;
            }
            let node = a.nodes[t as usize];
            if !(node.is_final || node.edges.0 != node.edges.1) {
                self.tail.items.push(Item { state: t, origin: it.origin });
                self.finish_set(false);
                return true;
            }
            self.tail.items.push(Item { state: t, origin: it.origin });
            self.state_stamp[t as usize] = self.generation;
            self.close_memoized(a, start);
            return true;
        }
        for i in lo..hi {
            let it = self.tail.items[i];
            let t = a.next(it.state, class);
            if t != DEAD {
                self.add(start, Item { state: t, origin: it.origin });
            }
        }
        if self.tail.items.len() == start {
            return false;
        }
        self.close_memoized(a, start);
        true
    }

    /// Closes and seals the set being built, whose kernel (scanned items) is
    /// `items[start..]`, reusing a memoized closure of the same kernel when there is one.
    fn close_memoized(&mut self, a: &Automata, start: usize) {
        use std::hash::Hasher;
        if !self.memoize {
            let end = self.closure(a, start);
            self.finish_set(end);
            return;
        }
        let pos = self.num_sets() as u32;
        let mut key = std::mem::take(&mut self.scratch_key);
        key.clear();
        let mut h = rustc_hash::FxHasher::default();
        for i in start..self.tail.items.len() {
            let it = self.tail.items[i];
            let uid = self.uid_of(it.origin as usize);
            h.write_u32(it.state);
            h.write_u64(uid);
            key.push((it.state, uid));
        }
        let hash = h.finish();
        if let Some(m) = self.memo.get(&hash).filter(|m| m.key == key) {
            let here = |o: u32| if o == Memo::HERE { pos } else { o };
            self.tail.items.truncate(start);
            self.tail.items.extend(m.items.iter().map(|i| Item { state: i.state, origin: here(i.origin) }));
            self.tail.waits.extend(m.waits.iter().map(|w| Wait { origin: here(w.origin), ..*w }));
            let end = m.can_end;
            self.stand_in |= m.stand_in;
            self.scratch_key = key;
            self.finish_set(end);
            return;
        }
        let wstart = self.tail.waits.len();
        let before = std::mem::replace(&mut self.stand_in, false);
        let end = self.closure(a, start);
        let stand_in = self.stand_in;
        self.stand_in |= before;
        if self.memo.len() >= MEMO_MAX {
            self.memo.clear();
        }
        let rel = |o: u32| if o == pos { Memo::HERE } else { o };
        let memo = Memo {
            key,
            items: self.tail.items[start..]
                .iter()
                .map(|i| Item { state: i.state, origin: rel(i.origin) })
                .collect(),
            waits: self.tail.waits[wstart..].iter().map(|w| Wait { origin: rel(w.origin), ..*w }).collect(),
            can_end: end,
            stand_in,
        };
        self.memo.insert(hash, memo);
        self.finish_set(end);
    }

    /// Starts a new set: a fresh generation for the stamps (called before any item of
    /// the new set is added).
    #[inline]
    fn next_generation(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.stamp.fill(0);
            self.state_stamp.fill(0);
            self.generation = 1;
        }
    }

    /// The state for automaton state `base` with progress `(written, extra)`: `base` itself
    /// when nothing is written (the progress at the rule's start).
    fn progress_state(&mut self, base: u32, written: u64, extra: u32) -> u32 {
        if written == 0 && extra == 0 {
            return base;
        }
        let key = Progress { base, written, extra };
        if let Some(&id) = self.progress_ids.get(&key) {
            return id;
        }
        let id = self.n_static + self.progress.len() as u32;
        self.progress.push(key);
        self.progress_ids.insert(key, id);
        if self.stamp.len() <= id as usize {
            let len = (id as usize + 1).next_power_of_two();
            self.stamp.resize(len, 0);
            self.state_stamp.resize(len, 0);
        }
        id
    }

    /// Follows the gated rule edges of an item with origin `origin` at progress `p` (a
    /// member-set rule's state): only the edges the set allows, each target carrying the
    /// progress after it.
    #[cold]
    fn gated_edges(&mut self, a: &Automata, origin: u32, p: Progress, start: usize, pos: u32) {
        let set = a.set_info(a.nodes[p.base as usize].rule);
        let words = set.words();
        let (mut cur, mut after) = std::mem::take(&mut self.bits);
        cur.clear();
        match (words, p.written) {
            (1, w) => cur.push(w),
            (_, 0) => cur.resize(words, 0),
            (_, id) => cur.extend_from_slice(&self.wide[id as usize - 1]),
        }
        for &(r, t) in a.edges(p.base) {
            let Some(x) = set.gate(r, &cur, p.extra, &mut after) else { continue };
            let w = if words == 1 { after[0] } else { self.intern_wide(&after) };
            let target = self.progress_state(t, w, x);
            self.tail.waits.push(Wait { rule: r, target, origin });
            self.predict(a, r, pos);
            if a.nullable[r as usize] {
                self.add(start, Item { state: target, origin });
            }
        }
        self.bits = (cur, after);
    }

    /// The id of a written set wider than one word (0 when empty).
    fn intern_wide(&mut self, bits: &[u64]) -> u64 {
        if bits.iter().all(|&w| w == 0) {
            return 0;
        }
        if let Some(&id) = self.wide_ids.get(bits) {
            return id;
        }
        let bits: Arc<[u64]> = bits.into();
        self.wide.push(bits.clone());
        let id = self.wide.len() as u64;
        self.wide_ids.insert(bits, id);
        id
    }

    /// Predicts `rule` at `pos`: adds its precomputed prediction closure, with the waits
    /// of each newly added state.
    #[inline]
    fn predict(&mut self, a: &Automata, rule: u32, pos: u32) {
        if a.predicts_stand_in(rule) {
            self.stand_in = true;
        }
        let predicted = a.predicted(rule);
        if self.stamp[predicted[0] as usize] == self.generation {
            return; // already predicted here, closure included
        }
        for &s in predicted {
            let stamp = &mut self.stamp[s as usize];
            if *stamp != self.generation {
                *stamp = self.generation;
                self.tail.items.push(Item { state: s, origin: pos });
                for &(r, t) in a.edges(s) {
                    self.tail.waits.push(Wait { rule: r, target: t, origin: pos });
                }
            }
        }
    }

    /// Adds `item` to the set being built (which starts at `start`) unless present.
    #[inline]
    fn add(&mut self, start: usize, item: Item) {
        let items = &mut self.tail.items;
        let len = items.len() - start;
        let first = &mut self.state_stamp[item.state as usize];
        if *first != self.generation {
            // No item of this set has this state yet: cannot be a duplicate.
            *first = self.generation;
            if len == LINEAR_DEDUP_MAX {
                self.seen.clear();
                self.seen.extend(items[start..].iter().copied());
            }
            if len >= LINEAR_DEDUP_MAX {
                self.seen.insert(item);
            }
            items.push(item);
            return;
        }
        if len <= LINEAR_DEDUP_MAX {
            if items[start..].contains(&item) {
                return;
            }
            if len == LINEAR_DEDUP_MAX {
                self.seen.clear();
                self.seen.extend(items[start..].iter().copied());
                self.seen.insert(item);
            }
        } else if !self.seen.insert(item) {
            return;
        }
        items.push(item);
    }

    /// Predict/complete closure of the set being built; returns whether the seed rule
    /// completed in it.
    fn closure(&mut self, a: &Automata, start: usize) -> bool {
        // The set being built is at position `pos`.
        let pos = self.num_sets() as u32;
        let mut can_end = false;
        let mut j = start;
        while j < self.tail.items.len() {
            let it = self.tail.items[j];
            j += 1;
            let p = match it.state.checked_sub(self.n_static) {
                None => Progress { base: it.state, written: 0, extra: 0 },
                Some(k) => self.progress[k as usize],
            };
            let node = a.nodes[p.base as usize];
            if node.is_final {
                if it.origin == 0 {
                    can_end = true;
                } else if it.origin < pos {
                    // Complete: advance every item of the origin set waiting on this rule.
                    let o = it.origin as usize;
                    if o >= self.base as usize {
                        // Origin in the tail: index the waits directly (no copy).
                        let i = o - self.base as usize;
                        let lo = if i == 0 { 0 } else { self.tail.wait_ends[i - 1] as usize };
                        for w in lo..self.tail.wait_ends[i] as usize {
                            let w = self.tail.waits[w];
                            if w.rule == node.rule {
                                self.add(start, Item { state: w.target, origin: w.origin });
                            }
                        }
                    } else {
                        let mut advanced = std::mem::take(&mut self.scratch);
                        advanced.clear();
                        advanced.extend(
                            self.waits_of(o)
                                .iter()
                                .filter(|w| w.rule == node.rule)
                                .map(|w| Item { state: w.target, origin: w.origin }),
                        );
                        for &item in &advanced {
                            self.add(start, item);
                        }
                        self.scratch = advanced;
                    }
                }
            }
            if it.origin == pos {
                // Added by a prediction below, together with everything it predicts and
                // its waits: nothing left to do (and it cannot complete: Aycock–Horspool).
                continue;
            }
            if node.gated {
                self.gated_edges(a, it.origin, p, start, pos);
                continue;
            }
            for &(r, t) in a.edges(p.base) {
                self.tail.waits.push(Wait { rule: r, target: t, origin: it.origin });
                self.predict(a, r, pos);
                if a.nullable[r as usize] {
                    self.add(start, Item { state: t, origin: it.origin });
                }
            }
        }
        can_end
    }

    /// Heap bytes owned by this parser (shared segments are counted in full: an upper bound).
    pub fn memory_bytes(&self) -> usize {
        self.tail.memory_bytes()
            + self.frozen.iter().map(|s| s.sets.memory_bytes()).sum::<usize>()
            + self.stamp.capacity() * 4
            + self.progress.capacity() * std::mem::size_of::<Progress>()
            + self.progress_ids.capacity() * (std::mem::size_of::<Progress>() + 4)
            + self.wide.iter().map(|w| 2 * (std::mem::size_of_val(&**w) + 16)).sum::<usize>()
            + self.wide_ids.capacity() * 24
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::automata::AutomataLimits;
    use crate::grammar::Grammar;

    /// A parser given used stamp arrays builds the same sets as a fresh one: the
    /// generation carried with the arrays keeps every stale stamp in the past.
    #[test]
    fn reused_stamps_change_no_set() {
        let g = Grammar::from_ebnf("root ::= \"(\" root \")\" | x\nx ::= \"a\" x | \"b\"").unwrap();
        let a = Automata::build(&g, &AutomataLimits::default()).unwrap();
        let n = a.num_states();
        // The worst arrays allowed: every stamp as new as the carried generation; and
        // arrays from a smaller automaton.
        for len in [n, 2] {
            let used = Stamps { stamp: vec![1; len], state_stamp: vec![1; len], generation: 1 };
            let seed = a.root_start().0;
            let (mut fresh, mut reused) = (Earley::new(&a, seed), Earley::with_stamps(&a, seed, used));
            for &byte in b"((aab))" {
                assert_eq!(fresh.last_set(), reused.last_set());
                assert!(fresh.push(&a, byte) && reused.push(&a, byte));
            }
            assert!(fresh.can_end() && reused.can_end());
        }
    }
}
