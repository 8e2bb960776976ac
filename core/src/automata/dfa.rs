//! Subset construction, trimming and minimization of one rule's NFA.
//!
//! Determinizing over the alphabet "byte classes ∪ rule references" removes epsilon edges
//! and merges alternatives with common prefixes, so at run time one rule instance is one
//! Earley item instead of a set of NFA states. Trimming removes states that cannot reach a
//! final state (so every accepted prefix can be completed); Hopcroft's partition refinement
//! then merges equivalent states (paper §3.4, "node merging").

use super::nfa::Nfa;
use super::AutomataError;
use super::DEAD;
use crate::budget::{self, Phase};
use crate::interner::SliceInterner;

/// A DFA for one rule over byte classes and rule references. State 0 is the start.
///
/// Edges are stored sparsely (one flat list, grouped by source state): a rule's states
/// read one or two of the ~70 byte classes on average, so the passes below (trim,
/// minimize, renumber) cost the real edges rather than `states × classes`. The table
/// the matcher indexes ([`super::table`]) is built once, by [`super::Automata`] when it
/// assembles the rules.
#[derive(Debug, Clone)]
pub(crate) struct Dfa {
    pub n_classes: usize,
    /// Edges of state `s`: `edges[ends[s]..ends[s + 1]]`, sorted by letter. A letter below
    /// `n_classes` is a byte class; `n_classes + r` reads rule `r`.
    pub edges: Vec<(u32, u32)>,
    pub ends: Vec<u32>,
    pub finals: Vec<bool>,
    /// Built over the rule's own byte classes ([`Dfa::minimal_narrow`]): the grammar's
    /// classes (first, last) each of its `n_classes` covers. `None`: the grammar's.
    pub spans: Option<Box<[(u32, u32)]>>,
}

/// Where [`Dfa::straight_walk`] stopped.
enum Walk {
    /// At the final state: the NFA is one path.
    Whole,
    /// At this NFA state, the first that branches.
    At(u32),
    /// Somewhere a chain cannot end (a final state with a way on, a cycle).
    No,
}

/// Fewest NFA states for which a rule's DFA is built over its own byte classes
/// ([`Dfa::minimal_narrow`]): below it the classes cost about what they save.
const NARROW_MIN_NFA_STATES: usize = 32;

/// Buffers of the subset construction, reused across the rules of one grammar.
pub(crate) struct Scratch {
    /// Class of each byte: the grammar's classes, or the rule's own while
    /// [`Scratch::localize`] is in effect.
    class_of: Vec<usize>,
    /// Number of classes of `class_of`.
    n_classes: usize,
    /// The grammar's classes: of each byte, and each class's first byte.
    global_of: Vec<usize>,
    global_rep: Vec<u8>,
    /// Under [`Scratch::localize`]: the grammar's classes each rule class covers.
    local_spans: Vec<(u32, u32)>,
    /// Indexed by class: at most the grammar's count is in use.
    per_class: Vec<Vec<u32>>,
    /// Classes with at least one target in the current state, in increasing order.
    touched: Vec<usize>,
    prev_targets: Vec<u32>,
    set: Vec<u32>,
    by_rule: Vec<(u32, u32)>,
    next: Vec<u32>,
    /// The byte edges of a DFA state's few NFA states, sorted ([`Dfa::determinize_from`]'s
    /// disjoint-edges path).
    single: Vec<(u8, u8, u32)>,
    /// Per NFA state `t`, the DFA state of the closure of `{t}` once interned (`DEAD`
    /// before): a character automaton's states are entered from many edges.
    single_ids: Vec<u32>,
    /// Tests: the per-class path only, to hold the disjoint-edges path to it; how many
    /// states took that path, and how many of them were sets of several NFA states.
    #[cfg(test)]
    per_class_only: bool,
    #[cfg(test)]
    single_hits: usize,
    #[cfg(test)]
    multi_hits: usize,
    /// All false between uses (`Nfa::closure` clears what it sets).
    seen: Vec<bool>,
    sets: SliceInterner,
    /// NFA states passed by the last [`Dfa::straight_walk`].
    walked: Vec<u32>,
    work: Work,
}

/// Buffers of trimming and minimization, reused across rules: most of a grammar's rules
/// are small, and allocating a dozen vectors for each (and Hopcroft's bucket per letter)
/// cost more than the passes themselves (a 85-state rule took 28 µs to minimize).
#[derive(Default)]
pub(crate) struct Work {
    offsets: Vec<u32>,
    fill: Vec<u32>,
    rev: Vec<u32>,
    inv: Vec<(u32, u32)>,
    flags: Vec<bool>,
    stack: Vec<u32>,
    map: Vec<u32>,
    order: Vec<u32>,
    class: Vec<u32>,
    sig: Vec<u32>,
    rule_letters: Vec<u32>,
    blocks: Blocks,
    /// Renumbered lists are written here, then swapped with the DFA's.
    lists: Lists,
}

/// Hopcroft's partition: `elems` grouped by block (`start[b]..end[b]`), `pos` its inverse.
#[derive(Default)]
struct Blocks {
    elems: Vec<u32>,
    pos: Vec<u32>,
    start: Vec<u32>,
    end: Vec<u32>,
    block_of: Vec<u32>,
    marked: Vec<u32>,
    work: Vec<u32>,
    in_work: Vec<bool>,
    /// Per letter, the sources found by the current splitter; empty between splitters.
    buckets: Vec<Vec<u32>>,
    touched_letters: Vec<usize>,
    touched: Vec<u32>,
    splitter: Vec<u32>,
}

/// A DFA's three lists, as [`Dfa::renumber`] writes them.
#[derive(Default)]
struct Lists {
    edges: Vec<(u32, u32)>,
    ends: Vec<u32>,
    finals: Vec<bool>,
}

impl Scratch {
    /// Buffers for byte classes with representatives `class_rep` (classes are contiguous
    /// byte ranges in increasing order).
    pub fn new(class_rep: &[u8]) -> Self {
        let mut class_of = vec![0usize; 256];
        let mut cur = 0;
        for (b, slot) in class_of.iter_mut().enumerate() {
            if class_rep.get(cur + 1).is_some_and(|&r| r as usize == b) {
                cur += 1;
            }
            *slot = cur;
        }
        Scratch {
            global_of: class_of.clone(),
            class_of,
            n_classes: class_rep.len(),
            global_rep: class_rep.to_vec(),
            local_spans: Vec::new(),
            per_class: vec![Vec::new(); class_rep.len()],
            touched: Vec::new(),
            prev_targets: Vec::new(),
            set: Vec::new(),
            by_rule: Vec::new(),
            next: Vec::new(),
            single: Vec::new(),
            single_ids: Vec::new(),
            #[cfg(test)]
            per_class_only: false,
            #[cfg(test)]
            single_hits: 0,
            #[cfg(test)]
            multi_hits: 0,
            seen: Vec::new(),
            sets: SliceInterner::default(),
            walked: Vec::new(),
            work: Work::default(),
        }
    }
}

impl Scratch {
    /// Switches to `nfa`'s own byte classes (bytes its edges treat alike) when it has
    /// fewer than the grammar's: a rule reads a few of them (a JSON string's characters
    /// are one class of its own, a tool-calling tag's free text a dozen, against ~90 for
    /// the whole grammar), and every pass over a DFA costs its edges, one per class.
    /// The grammar's classes refine the rule's, so each rule class is a run of grammar
    /// classes ([`Dfa::spans`] maps it back). Returns whether it switched.
    pub fn localize(&mut self, nfa: &Nfa) -> bool {
        let mut boundary = [false; 257];
        for &(lo, hi, _) in nfa.bytes.all() {
            boundary[lo as usize] = true;
            boundary[hi as usize + 1] = true;
        }
        self.local_spans.clear();
        for (g, &rep) in self.global_rep.iter().enumerate() {
            match self.local_spans.last_mut() {
                Some(span) if !boundary[rep as usize] => span.1 = g as u32,
                _ => self.local_spans.push((g as u32, g as u32)),
            }
        }
        let n = self.local_spans.len();
        if n >= self.global_rep.len() {
            return false;
        }
        // Bytes and classes both ascend: one pass over the bytes.
        let mut l = 0;
        for (slot, &g) in self.class_of.iter_mut().zip(&self.global_of) {
            while g as u32 > self.local_spans[l].1 {
                l += 1;
            }
            *slot = l;
        }
        self.n_classes = n;
        true
    }

    /// Back to the grammar's byte classes after [`Scratch::localize`].
    pub fn globalize(&mut self) {
        self.class_of.copy_from_slice(&self.global_of);
        self.n_classes = self.global_rep.len();
    }
}

/// Most NFA states in a DFA state whose byte edges the subset construction tries as one
/// disjoint list (see [`Dfa::determinize_from`]): larger sets rarely are, and gathering
/// and sorting their edges would be spent for nothing.
const DISJOINT_MAX_SET: usize = 4;

/// Byte edges from which an NFA's subset construction reserves its edge list (see
/// [`Dfa::determinize_from`]); below it the list grows as it fills.
const RESERVE_MIN_NFA_EDGES: usize = 4096;

/// Bounds on that reservation, which overshoots where DFA states are sets of NFA states
/// that share wide edges: per NFA state (a spelled string's DFA has ~13 edges per NFA
/// state), and in all (32 MB of edges; a larger list grows as usual). Room left unused
/// past a quarter is given back when the construction ends.
const RESERVE_PER_NFA_STATE: usize = 16;
const RESERVE_MAX_EDGES: usize = 1 << 22;

impl Dfa {
    pub fn len(&self) -> usize {
        self.finals.len()
    }

    /// `(letter, target)` edges of `s`, byte classes first.
    pub fn edges(&self, s: usize) -> &[(u32, u32)] {
        &self.edges[self.ends[s] as usize..self.ends[s + 1] as usize]
    }

    /// Subset construction. `class_rep[c]` is one byte of class `c`.
    #[cfg(test)]
    pub fn determinize(nfa: &Nfa, class_rep: &[u8], max_states: usize) -> Result<Dfa, AutomataError> {
        Self::determinize_with(nfa, &mut Scratch::new(class_rep), max_states)
    }

    /// The minimal DFA of `nfa`: [`Self::straight_line`] when the NFA is one path, else the
    /// subset construction, trimmed and minimized — with a straight start (an object
    /// member's `"key": ` before its value) built as a chain and only the rest determinized
    /// when the two provably give the same automaton ([`Self::followed_by`]). About half
    /// the states of a large schema's non-straight rules are such chains.
    pub fn minimal(nfa: &Nfa, sc: &mut Scratch, max_states: usize) -> Result<Dfa, AutomataError> {
        if sc.seen.len() < nfa.len() {
            sc.seen.resize(nfa.len(), false);
        }
        let (chain, walk) = Self::straight_walk(nfa, sc);
        match walk {
            Walk::Whole => return Ok(chain),
            Walk::At(p) if chain.len() >= 2 && nfa.entered_only_along(&sc.walked, &mut sc.seen) => {
                let mut rest = Self::determinize_from(nfa, p, sc, max_states)?;
                rest.trim_unless_live(nfa, sc);
                budget::charge(Phase::Minimization, 1 + rest.edges.len() as u64)?;
                rest.minimize_in(sc);
                if let Some(d) = chain.followed_by(rest) {
                    return Ok(d);
                }
            }
            _ => {}
        }
        let mut d = Self::determinize_with(nfa, sc, max_states)?;
        d.trim_unless_live(nfa, sc);
        budget::charge(Phase::Minimization, 1 + d.edges.len() as u64)?;
        d.minimize_in(sc);
        Ok(d)
    }

    /// [`Self::minimal`], built over `nfa`'s own byte classes when it has fewer than the
    /// grammar's ([`Scratch::localize`]); its [`Dfa::spans`] map them back. Each rule
    /// class is a run of grammar classes with equal targets, so the construction meets the
    /// same target sets in the same order: the same DFA, state for state, as one built over
    /// the grammar's classes, at a fraction of the edges (a 20-tool tag's root: 64
    /// classes of 89; its argument rules: 13–40).
    pub fn minimal_narrow(nfa: &Nfa, sc: &mut Scratch, max_states: usize) -> Result<Dfa, AutomataError> {
        if nfa.len() < NARROW_MIN_NFA_STATES || !sc.localize(nfa) {
            return Self::minimal(nfa, sc, max_states);
        }
        let built = Self::minimal(nfa, sc, max_states);
        sc.globalize();
        let mut d = built?;
        d.spans = Some(sc.local_spans.as_slice().into());
        Ok(d)
    }

    /// Trims a DFA just determinized from `nfa`, unless every state of `nfa` can reach
    /// its end ([`Nfa::all_live`]): then every DFA state (a non-empty set of such states)
    /// can reach a final one, and since the subset construction numbers states in the
    /// breadth-first order trimming renumbers them in, trimming would change nothing.
    fn trim_unless_live(&mut self, nfa: &Nfa, sc: &mut Scratch) {
        if !nfa.all_live() {
            self.trim_in(&mut sc.work);
        }
    }

    /// Subset construction with buffers reused across rules (a schema has hundreds of
    /// small rules: allocating the per-class lists for each cost more than filling them).
    pub fn determinize_with(nfa: &Nfa, sc: &mut Scratch, max_states: usize) -> Result<Dfa, AutomataError> {
        Self::determinize_from(nfa, 0, sc, max_states)
    }

    /// The subset construction from the closure of NFA state `start`. Its edge list is
    /// sized up front for NFAs of at least [`RESERVE_MIN_NFA_EDGES`] byte edges.
    fn determinize_from(
        nfa: &Nfa,
        start: u32,
        sc: &mut Scratch,
        max_states: usize,
    ) -> Result<Dfa, AutomataError> {
        let nc = sc.n_classes;
        if sc.seen.len() < nfa.len() {
            sc.seen.resize(nfa.len(), false);
        }
        #[cfg(test)]
        let single_path = !sc.per_class_only;
        #[cfg(test)]
        let (mut hits, mut multi) = (0, 0);
        #[cfg(not(test))]
        let single_path = true;
        let Scratch {
            class_of,
            per_class,
            touched,
            prev_targets,
            set,
            by_rule,
            next,
            single,
            single_ids,
            seen,
            sets,
            ..
        } = sc;
        single_ids.clear();
        single_ids.resize(nfa.len(), DEAD);
        // A construction stopped by the state limit returns mid-state, with targets still
        // in the per-class lists: the next rule built with this scratch must not see them.
        for c in touched.drain(..) {
            per_class[c].clear();
        }
        // DFA state id = id of its (closed) NFA set.
        sets.clear();
        let mut start = vec![start];
        nfa.closure(&mut start, seen);
        sets.intern(&start);
        // Room for the edges a DFA has whose states are single NFA states (a character
        // automaton's, `Expr::Dfa`): a spelled string's million edges written into a
        // growing list were copied as it doubled, each copy onto freshly faulted pages.
        let room = match nfa.bytes.all() {
            es if es.len() >= RESERVE_MIN_NFA_EDGES => es
                .iter()
                .map(|&(lo, hi, _)| class_of[hi as usize] - class_of[lo as usize] + 1)
                .sum::<usize>()
                .min(nfa.len().saturating_mul(RESERVE_PER_NFA_STATE))
                .min(RESERVE_MAX_EDGES),
            _ => 0,
        };
        let mut dfa = Dfa {
            n_classes: nc,
            edges: Vec::with_capacity(room),
            ends: vec![0],
            finals: Vec::new(),
            spans: None,
        };
        let mut i = 0;
        while i < sets.len() {
            // `intern` appends to `sets`: copy into a reused buffer.
            set.clear();
            set.extend_from_slice(sets.get(i as u32));
            i += 1;
            // The state's work: its NFA states' edges are spread over the classes below.
            budget::charge(Phase::Dfa, 1 + set.len() as u64)?;
            dfa.finals.push(set.binary_search(&nfa.end).is_ok());
            // A few NFA states whose byte edges do not overlap, and no rule edge (a state of
            // a character automaton, `Expr::Dfa`: most of a spelled string's 70,000; a
            // final one, with the closing quote's state beside it): each edge leads to its
            // target's closure, found once per edge instead of once per class it covers,
            // and written to its classes directly. The same DFA as the per-class lists
            // below build: a class that one edge alone covers leads to that closure.
            if single_path && set.len() <= DISJOINT_MAX_SET && set.iter().all(|&s| nfa.rules.of(s).is_empty())
            {
                single.clear();
                for &s in set.iter() {
                    single.extend_from_slice(nfa.bytes.of(s));
                }
                single.sort_unstable();
                if single.windows(2).all(|w| w[0].1 < w[1].0) {
                    for &(lo, hi, t) in single.iter() {
                        let id = match single_ids[t as usize] {
                            DEAD => {
                                next.clear();
                                next.push(t);
                                let id = Self::intern(nfa, next, seen, sets, max_states)?;
                                single_ids[t as usize] = id;
                                id
                            }
                            id => id,
                        };
                        let (first, last) = (class_of[lo as usize], class_of[hi as usize]);
                        // Byte classes refine every edge: its classes hold its bytes only.
                        debug_assert!(lo == 0 || class_of[lo as usize - 1] != first);
                        debug_assert!(hi == 255 || class_of[hi as usize + 1] != last);
                        dfa.edges.extend((first..=last).map(|c| (c as u32, id)));
                    }
                    dfa.ends.push(dfa.edges.len() as u32);
                    #[cfg(test)]
                    {
                        hits += 1;
                        multi += usize::from(set.len() > 1);
                    }
                    continue;
                }
            }
            // Per-class target lists. Byte edges are ranges, so each edge is spread over
            // the consecutive classes it covers.
            for &s in set.iter() {
                for &(lo, hi, t) in nfa.bytes.of(s) {
                    let (first, last) = (class_of[lo as usize], class_of[hi as usize]);
                    for (c, targets) in per_class[first..=last].iter_mut().enumerate() {
                        if targets.is_empty() {
                            touched.push(first + c);
                        }
                        targets.push(t);
                    }
                }
            }
            touched.sort_unstable();
            // Neighbouring classes usually lead to the same set: reuse its id.
            let mut prev: Option<u32> = None;
            for &c in touched.iter() {
                let targets = &mut per_class[c];
                targets.sort_unstable();
                targets.dedup();
                let id = match prev {
                    Some(id) if *targets == *prev_targets => id,
                    _ => {
                        prev_targets.clear();
                        prev_targets.extend_from_slice(targets);
                        let id = Self::intern(nfa, targets, seen, sets, max_states)?;
                        prev = Some(id);
                        id
                    }
                };
                dfa.edges.push((c as u32, id));
                // `intern` may have closed or taken the list: it is done either way.
                targets.clear();
            }
            touched.clear();
            by_rule.clear();
            by_rule.extend(set.iter().flat_map(|&s| nfa.rules.of(s).iter().copied()));
            by_rule.sort_unstable();
            let mut k = 0;
            while k < by_rule.len() {
                let r = by_rule[k].0;
                next.clear();
                while k < by_rule.len() && by_rule[k].0 == r {
                    next.push(by_rule[k].1);
                    k += 1;
                }
                let id = Self::intern(nfa, next, seen, sets, max_states)?;
                dfa.edges.push((nc as u32 + r, id));
            }
            dfa.ends.push(dfa.edges.len() as u32);
        }
        #[cfg(test)]
        {
            sc.single_hits += hits;
            sc.multi_hits += multi;
        }
        if room > 0 && dfa.edges.capacity() > dfa.edges.len() + dfa.edges.len() / 4 {
            dfa.edges.shrink_to_fit();
        }
        Ok(dfa)
    }

    /// The minimal DFA of an NFA that is one straight path (each state has one way on: an
    /// epsilon, a rule, or byte ranges that all lead to the same state) ending at `end`:
    /// an object member's key and value reference, a literal. `None` for any other shape.
    /// Equal to determinizing, trimming and minimizing such an NFA (its states are the
    /// path in order, which is also the order those passes number them), at a fraction of
    /// the cost: a third of a large schema's rules are straight.
    #[cfg(test)]
    pub fn straight_line(nfa: &Nfa, sc: &mut Scratch) -> Option<Dfa> {
        match Self::straight_walk(nfa, sc) {
            (d, Walk::Whole) => Some(d),
            _ => None,
        }
    }

    /// Follows the straight start of `nfa` (see [`Self::straight_line`]), one DFA state per
    /// byte or rule step; the last state's edges lead to state `len()`, the one where the
    /// walk stopped. The NFA states passed are left in `sc.walked`.
    fn straight_walk(nfa: &Nfa, sc: &mut Scratch) -> (Dfa, Walk) {
        let nc = sc.n_classes;
        let mut dfa =
            Dfa { n_classes: nc, edges: Vec::new(), ends: vec![0], finals: Vec::new(), spans: None };
        sc.walked.clear();
        let mut s = 0u32;
        // A path visits each state once: more steps than states means a cycle.
        for _ in 0..=nfa.len() {
            let (eps, bytes, rules) = (nfa.eps.of(s), nfa.bytes.of(s), nfa.rules.of(s));
            let next = match (eps, bytes, rules) {
                ([t], [], []) if s != nfa.end => {
                    sc.walked.push(s);
                    s = *t;
                    continue;
                }
                ([], [], []) if s == nfa.end => {
                    dfa.finals.push(true);
                    dfa.ends.push(dfa.edges.len() as u32);
                    return (dfa, Walk::Whole);
                }
                ([], [(_, _, t), ..], []) if bytes.iter().all(|e| e.2 == *t) => {
                    let id = dfa.finals.len() as u32 + 1;
                    let from = dfa.edges.len();
                    for &(lo, hi, _) in bytes {
                        dfa.edges.extend(
                            (sc.class_of[lo as usize]..=sc.class_of[hi as usize]).map(|c| (c as u32, id)),
                        );
                    }
                    // Only this state's edges: deduplicating the whole list at every step
                    // made a long straight path quadratic (found by the compiled-grammar
                    // fuzz target: 2.6 s for a 275-byte input).
                    dfa.edges[from..].sort_unstable();
                    let mut keep = from;
                    for i in from..dfa.edges.len() {
                        if keep == from || dfa.edges[i] != dfa.edges[keep - 1] {
                            dfa.edges[keep] = dfa.edges[i];
                            keep += 1;
                        }
                    }
                    dfa.edges.truncate(keep);
                    *t
                }
                ([], [], [(r, t)]) => {
                    dfa.edges.push((nc as u32 + r, dfa.finals.len() as u32 + 1));
                    *t
                }
                // Where the path branches, the general construction takes over.
                _ if s != nfa.end => return (dfa, Walk::At(s)),
                _ => return (dfa, Walk::No),
            };
            if s == nfa.end {
                // The end with a way on: final in the middle of the path.
                return (dfa, Walk::No);
            }
            sc.walked.push(s);
            dfa.finals.push(false);
            dfa.ends.push(dfa.edges.len() as u32);
            s = next;
        }
        (dfa, Walk::No)
    }

    /// This chain (from [`Self::straight_walk`]) followed by `rest`, the trimmed minimal DFA
    /// from where the walk stopped, if that is the minimal DFA of the whole: `rest`'s start
    /// is live, and no state of `rest` is equivalent to the chain's last state (then no
    /// other chain state has an equivalent either: each one's only successor is the next
    /// chain state). States are numbered as the general construction numbers them: the
    /// chain in order, then `rest` in its order.
    fn followed_by(mut self, rest: Dfa) -> Option<Dfa> {
        let k = self.len() as u32;
        if rest.len() == 1 && !rest.finals[0] && rest.edges(0).is_empty() {
            return None;
        }
        let last = self.edges(k as usize - 1);
        // Equivalent to the last chain state: not final, and the same letters, all into
        // `rest`'s start (in a trimmed minimal DFA, equivalent targets are equal).
        let same_as_last = |q: usize| {
            !rest.finals[q]
                && rest.edges(q).len() == last.len()
                && rest.edges(q).iter().zip(last).all(|(a, b)| a.0 == b.0 && a.1 == 0)
        };
        if (0..rest.len()).any(same_as_last) {
            return None;
        }
        let base = self.edges.len() as u32;
        self.edges.extend(rest.edges.iter().map(|&(l, t)| (l, t + k)));
        self.ends.extend(rest.ends[1..].iter().map(|&e| e + base));
        self.finals.extend_from_slice(&rest.finals);
        Some(self)
    }

    /// The DFA state of the closure of `next` (clobbered), added if new.
    fn intern(
        nfa: &Nfa,
        next: &mut Vec<u32>,
        seen: &mut [bool],
        sets: &mut SliceInterner,
        max_states: usize,
    ) -> Result<u32, AutomataError> {
        if next.is_empty() {
            return Ok(DEAD);
        }
        next.sort_unstable();
        next.dedup();
        nfa.closure(next, seen);
        let (id, new) = sets.intern(next);
        if new && sets.len() > max_states {
            return Err(AutomataError::Limit {
                what: "automaton size (DFA states of one rule)",
                given: sets.len(),
                limit: max_states,
            });
        }
        Ok(id)
    }

    /// Removes states that cannot reach a final state (edges to them are dropped). The
    /// start state is kept even if dead, so the rule still has a start.
    #[cfg(test)]
    pub fn trim(&mut self) {
        self.trim_in(&mut Work::default())
    }

    /// [`Self::trim`] with reused buffers.
    fn trim_in(&mut self, w: &mut Work) {
        let n = self.len();
        let Work { offsets, fill, rev, flags: live, stack, map, order, lists, .. } = w;
        // Reverse edges as one flat list grouped by target (CSR), not a Vec per state.
        offsets.clear();
        offsets.resize(n + 1, 0);
        for &(_, t) in &self.edges {
            offsets[t as usize + 1] += 1;
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        fill.clear();
        fill.extend_from_slice(offsets);
        rev.clear();
        rev.resize(offsets[n] as usize, 0);
        for s in 0..n {
            for &(_, t) in self.edges(s) {
                rev[fill[t as usize] as usize] = s as u32;
                fill[t as usize] += 1;
            }
        }
        live.clear();
        live.extend_from_slice(&self.finals);
        stack.clear();
        stack.extend((0..n as u32).filter(|&s| live[s as usize]));
        while let Some(s) = stack.pop() {
            for &p in &rev[offsets[s as usize] as usize..offsets[s as usize + 1] as usize] {
                if !live[p as usize] {
                    live[p as usize] = true;
                    stack.push(p);
                }
            }
        }
        // Reachable from the start through live states only, numbered in BFS order.
        map.clear();
        map.resize(n, DEAD);
        order.clear();
        order.push(0);
        map[0] = 0;
        let mut i = 0;
        while i < order.len() {
            let s = order[i] as usize;
            i += 1;
            for &(_, t) in self.edges(s) {
                if live[t as usize] && map[t as usize] == DEAD {
                    map[t as usize] = order.len() as u32;
                    order.push(t);
                }
            }
        }
        self.renumber_into(order, map, lists);
    }

    /// Keeps states `order` (new id = position), remapping targets through `map`; edges
    /// into states `map` drops (`DEAD`) are dropped.
    pub(super) fn renumber(&mut self, order: &[u32], map: &[u32]) {
        self.renumber_into(order, map, &mut Lists::default())
    }

    /// [`Self::renumber`], writing into `out`'s lists and leaving the old ones there.
    fn renumber_into(&mut self, order: &[u32], map: &[u32], out: &mut Lists) {
        let Lists { edges, ends, finals } = out;
        edges.clear();
        ends.clear();
        finals.clear();
        ends.push(0);
        for &s in order {
            let s = s as usize;
            edges
                .extend(self.edges(s).iter().map(|&(l, t)| (l, map[t as usize])).filter(|&(_, t)| t != DEAD));
            ends.push(edges.len() as u32);
            finals.push(self.finals[s]);
        }
        std::mem::swap(&mut self.edges, edges);
        std::mem::swap(&mut self.ends, ends);
        std::mem::swap(&mut self.finals, finals);
    }

    /// Merges states with identical futures: [`Self::minimize_acyclic`] when the DFA has no
    /// cycle (most rules of a JSON schema: objects, enumerations), Hopcroft otherwise.
    #[cfg(test)]
    pub fn minimize(&mut self) {
        self.minimize_with(&mut SliceInterner::default(), &mut Work::default())
    }

    /// [`Self::minimize`] with the buffers of a [`Scratch`] (reused across rules).
    pub fn minimize_in(&mut self, sc: &mut Scratch) {
        self.minimize_with(&mut sc.sets, &mut sc.work)
    }

    fn minimize_with(&mut self, sigs: &mut SliceInterner, w: &mut Work) {
        if !self.minimize_acyclic(sigs, w) {
            self.minimize_hopcroft(w);
        }
    }

    /// Minimization of an acyclic DFA in one bottom-up pass (Revuz): in reverse topological
    /// order, a state's signature — final or not, and its edges with targets replaced by
    /// their classes — names its class, since in a trimmed acyclic DFA two states are
    /// equivalent exactly when their signatures are. Linear in the edges, with one hash
    /// lookup per state. Returns false (changing nothing) when the DFA has a cycle.
    fn minimize_acyclic(&mut self, sigs: &mut SliceInterner, w: &mut Work) -> bool {
        let n = self.len();
        // Kahn's algorithm: a topological order exists exactly when there is no cycle.
        let Work { offsets: indeg, order: topo, class, sig, .. } = w;
        indeg.clear();
        indeg.resize(n, 0);
        for &(_, t) in &self.edges {
            indeg[t as usize] += 1;
        }
        topo.clear();
        topo.extend((0..n as u32).filter(|&s| indeg[s as usize] == 0));
        let mut i = 0;
        while i < topo.len() {
            let s = topo[i] as usize;
            i += 1;
            for &(_, t) in self.edges(s) {
                indeg[t as usize] -= 1;
                if indeg[t as usize] == 0 {
                    topo.push(t);
                }
            }
        }
        if topo.len() < n {
            return false;
        }
        // A signature is `[final, first letter, last letter, class, …]`: each run of
        // consecutive letters to one class written once (edges are sorted by letter, so
        // the runs are too, and equal states have equal runs). A state of a spelled string
        // reads dozens of byte classes, mostly to one target: written edge by edge, a
        // signature held every one of them, hashed and stored.
        sigs.clear();
        class.clear();
        class.resize(n, 0);
        for &s in topo.iter().rev() {
            sig.clear();
            sig.push(self.finals[s as usize] as u32);
            for &(l, t) in self.edges(s as usize) {
                let c = class[t as usize];
                match sig.len() {
                    k if k >= 4 && sig[k - 1] == c && sig[k - 2] + 1 == l => sig[k - 2] = l,
                    _ => sig.extend([l, l, c]),
                }
            }
            class[s as usize] = sigs.intern(sig).0;
        }
        let class = std::mem::take(&mut w.class);
        self.merge_classes(&class, sigs.len(), w);
        w.class = class;
        true
    }

    /// Keeps one state per class (the first, so the start stays state 0).
    fn merge_classes(&mut self, class: &[u32], n_classes: usize, w: &mut Work) {
        let Work { fill: id_of_class, map, order, lists, .. } = w;
        id_of_class.clear();
        id_of_class.resize(n_classes, DEAD);
        map.clear();
        map.resize(class.len(), DEAD);
        order.clear();
        for (s, &c) in class.iter().enumerate() {
            if id_of_class[c as usize] == DEAD {
                id_of_class[c as usize] = order.len() as u32;
                order.push(s as u32);
            }
            map[s] = id_of_class[c as usize];
        }
        // Nothing merged: every state kept where it is (a spelled string automaton of
        // 73,000 states is minimal as built; rewriting its million edges into fresh lists
        // was an eighth of its compile in a profile, mostly first-touch page faults).
        if order.len() == class.len() {
            return;
        }
        self.renumber_into(order, map, lists);
    }

    /// Hopcroft minimization: merges states with identical futures.
    ///
    /// Letters are the byte classes plus one letter per rule referenced; the automaton is
    /// completed with a virtual sink (missing edges and `DEAD` lead there), because
    /// Hopcroft's "process only the smaller half" step is only sound on complete DFAs.
    /// `O(m log n)` for `m` edges: long chains (`maxLength: 254`, `{1,255}`) that make
    /// round-based Moore refinement quadratic stay linear-logarithmic here.
    fn minimize_hopcroft(&mut self, w: &mut Work) {
        let n = self.len();
        let nc = self.n_classes;
        let sink = n;
        let total = n + 1;
        let Work { offsets, fill, inv, flags: finals, rule_letters, blocks, .. } = w;
        // Rule letters renumbered densely after the byte classes.
        rule_letters.clear();
        rule_letters.extend(self.edges.iter().filter(|e| e.0 as usize >= nc).map(|e| e.0));
        rule_letters.sort_unstable();
        rule_letters.dedup();
        let nl = nc + rule_letters.len();
        let letter = |l: u32| {
            if (l as usize) < nc {
                l
            } else {
                (nc + rule_letters.binary_search(&l).unwrap_or_else(|i| i)) as u32
            }
        };
        // Inverse edges grouped by target (CSR): `(letter, source)`.
        offsets.clear();
        offsets.resize(total + 1, 0);
        // Only real edges: the missing ones lead into the sink, and edges into the sink are
        // never needed: the sink is a block of its own that is never a splitter (Hopcroft
        // may leave any one initial block out of the work list), which keeps the cost
        // proportional to the real edges of a sparse DFA.
        for &(_, t) in &self.edges {
            offsets[t as usize + 1] += 1;
        }
        for i in 0..total {
            offsets[i + 1] += offsets[i];
        }
        fill.clear();
        fill.extend_from_slice(offsets);
        inv.clear();
        inv.resize(offsets[total] as usize, (0, 0));
        for st in 0..n {
            for &(l, t) in self.edges(st) {
                inv[fill[t as usize] as usize] = (letter(l), st as u32);
                fill[t as usize] += 1;
            }
        }
        // Partition refinement: `elems` grouped by block, `pos` its inverse.
        finals.clear();
        finals.extend((0..total).map(|s| s < n && self.finals[s]));
        let Blocks {
            elems,
            pos,
            start,
            end,
            block_of,
            marked,
            work,
            in_work,
            buckets,
            touched_letters,
            touched,
            splitter,
        } = blocks;
        elems.clear();
        elems.extend((0..n as u32).filter(|&s| finals[s as usize]));
        let n_final = elems.len();
        elems.extend((0..n as u32).filter(|&s| !finals[s as usize]));
        elems.push(sink as u32);
        pos.clear();
        pos.resize(total, 0);
        for (i, &s) in elems.iter().enumerate() {
            pos[s as usize] = i as u32;
        }
        start.clear();
        end.clear();
        block_of.clear();
        block_of.resize(total, 0);
        for (a, b) in [(0, n_final), (n_final, n), (n, total)] {
            if a < b {
                for &s in &elems[a..b] {
                    block_of[s as usize] = start.len() as u32;
                }
                start.push(a as u32);
                end.push(b as u32);
            }
        }
        marked.clear();
        marked.resize(start.len(), 0);
        // Every initial block but the sink's (the last) is a splitter.
        work.clear();
        work.extend(0..start.len() as u32 - 1);
        in_work.clear();
        in_work.extend((0..start.len()).map(|b| b + 1 < start.len()));
        // (Each bucket is emptied after use, so only the count needs to grow.)
        if buckets.len() < nl {
            buckets.resize(nl, Vec::new());
        }
        while let Some(a) = work.pop() {
            in_work[a as usize] = false;
            splitter.clear();
            splitter.extend_from_slice(&elems[start[a as usize] as usize..end[a as usize] as usize]);
            for &t in splitter.iter() {
                for &(l, src) in &inv[offsets[t as usize] as usize..offsets[t as usize + 1] as usize] {
                    if buckets[l as usize].is_empty() {
                        touched_letters.push(l as usize);
                    }
                    buckets[l as usize].push(src);
                }
            }
            for l in touched_letters.drain(..) {
                for &src in &buckets[l] {
                    // Move `src` into the marked prefix of its block.
                    let b = block_of[src as usize] as usize;
                    if marked[b] == 0 {
                        touched.push(b as u32);
                    }
                    let slot = start[b] + marked[b];
                    let other = elems[slot as usize];
                    let p = pos[src as usize];
                    elems.swap(slot as usize, p as usize);
                    pos[other as usize] = p;
                    pos[src as usize] = slot;
                    marked[b] += 1;
                }
                buckets[l].clear();
                for b in touched.drain(..) {
                    let b = b as usize;
                    let m = marked[b];
                    marked[b] = 0;
                    if m == end[b] - start[b] {
                        continue;
                    }
                    // The smaller of the marked prefix and the rest becomes a new block, so
                    // that relabelling costs the smaller part (the partition found does not
                    // depend on which part keeps the old number).
                    let nb = start.len() as u32;
                    let rest = end[b] - start[b] - m;
                    if m <= rest {
                        start.push(start[b]);
                        end.push(start[b] + m);
                        start[b] += m;
                    } else {
                        start.push(start[b] + m);
                        end.push(end[b]);
                        end[b] = start[b] + m;
                    }
                    marked.push(0);
                    for &s in &elems[start[nb as usize] as usize..end[nb as usize] as usize] {
                        block_of[s as usize] = nb;
                    }
                    // Hopcroft: when `b` waits in the work list both parts must, else the
                    // smaller one is enough — the new block either way.
                    in_work.push(true);
                    work.push(nb);
                }
            }
        }
        let n_blocks = start.len();
        let mut class = std::mem::take(&mut w.class);
        class.clear();
        class.extend_from_slice(&w.blocks.block_of[..n]);
        self.merge_classes(&class, n_blocks, w);
        w.class = class;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::{Expr, Grammar};

    /// The determinized and trimmed DFA of a one-rule grammar, with its byte → class map.
    fn dfa(ebnf: &str) -> (Dfa, [u8; 256]) {
        let g = Grammar::from_ebnf(ebnf).unwrap();
        let nfa = Nfa::build(&g.rules[0].body, 1 << 20).unwrap();
        let (class, n) = super::super::byte_classes(std::slice::from_ref(&nfa));
        let rep: Vec<u8> =
            (0..n).map(|c| (0..=255u8).find(|&b| class[b as usize] as usize == c).unwrap()).collect();
        let mut d = Dfa::determinize(&nfa, &rep, 1 << 20).unwrap();
        d.trim();
        (d, class)
    }

    /// The NFAs of a grammar's rules and one byte per byte class over all of them.
    fn rules(ebnf: &str) -> (Grammar, Vec<Nfa>, Vec<u8>) {
        let g = Grammar::from_ebnf(ebnf).unwrap();
        let nfas: Vec<Nfa> = g.rules.iter().map(|r| Nfa::build(&r.body, 1 << 20).unwrap()).collect();
        let (class, n) = super::super::byte_classes(nfas.iter());
        let rep = (0..n).map(|c| (0..=255u8).find(|&b| class[b as usize] as usize == c).unwrap()).collect();
        (g, nfas, rep)
    }

    fn accepts(d: &Dfa, class: &[u8; 256], s: &[u8]) -> bool {
        let mut cur = 0usize;
        for &b in s {
            match d.edges(cur).iter().find(|e| e.0 == class[b as usize] as u32) {
                Some(&(_, t)) => cur = t as usize,
                None => return false,
            }
        }
        d.finals[cur]
    }

    /// Strings over `alphabet` of length ≤ `max`.
    fn strings(alphabet: &[u8], max: usize) -> Vec<Vec<u8>> {
        let mut out = vec![vec![]];
        let mut level = vec![vec![]];
        for _ in 0..max {
            level = level
                .iter()
                .flat_map(|s: &Vec<u8>| alphabet.iter().map(move |&b| [s.as_slice(), &[b]].concat()))
                .collect();
            out.extend(level.iter().cloned());
        }
        out
    }

    #[test]
    fn single_states_are_determinized_as_per_class() {
        // The disjoint-edges path gives the per-class path's DFA, state for state, on every
        // rule of schemas with spelled strings (patterns under lengths, key classes,
        // formats) and of a grammar with rule references.
        let schemas = [
            r#"{"type":"object","properties":{"from":{"type":"string","pattern":"^[^@\\s]+@[^@.\\s]+(\\.[^@.\\s]*)*.gov.uk","maxLength":40},"to":{"type":"string","format":"email","maxLength":30}},"patternProperties":{"^x-[a-z]+$":{"type":"integer"}},"additionalProperties":false}"#,
            r#"{"type":"array","items":{"type":"string","pattern":"[a-f0-9]{8}","minLength":3,"maxLength":20}}"#,
            r#"{"type":"object","properties":{"a":{"type":"string","format":"date-time"},"é😀":{"enum":["x\"y",1,null]}}}"#,
        ];
        let mut grammars: Vec<Grammar> = schemas
            .iter()
            .map(|s| {
                crate::json_schema::json_schema_str_to_grammar(
                    s,
                    &crate::json_schema::JsonSchemaOptions::default(),
                )
                .unwrap()
            })
            .collect();
        grammars
            .push(Grammar::from_ebnf("root ::= (x | \"é\" [a-zé-ü]{2,4})+\nx ::= [^\"\\\\]* \"!\"").unwrap());
        let (mut hits, mut multi) = (0, 0);
        for g in &grammars {
            let nfas: Vec<Nfa> = g.rules.iter().map(|r| Nfa::build(&r.body, 1 << 20).unwrap()).collect();
            let (class, n) = super::super::byte_classes(nfas.iter());
            let rep: Vec<u8> =
                (0..n).map(|c| (0..=255u8).find(|&b| class[b as usize] as usize == c).unwrap()).collect();
            for nfa in &nfas {
                let mut fast = Scratch::new(&rep);
                let mut slow = Scratch::new(&rep);
                slow.per_class_only = true;
                let a = Dfa::determinize_with(nfa, &mut fast, 1 << 20).unwrap();
                let b = Dfa::determinize_with(nfa, &mut slow, 1 << 20).unwrap();
                assert_eq!((&a.edges, &a.ends, &a.finals), (&b.edges, &b.ends, &b.finals));
                assert_eq!(slow.single_hits, 0);
                hits += fast.single_hits;
                multi += fast.multi_hits;
            }
        }
        assert!(hits > 1000, "the disjoint-edges path was taken {hits} times");
        // Final states of a spelled string: the state and the closing quote's, disjoint.
        assert!(multi > 100, "{multi} of them for sets of several NFA states");
    }

    #[test]
    fn acyclic_minimization_matches_hopcroft() {
        // Pseudo-random alternations of short words from a 3-letter alphabet, followed by a
        // shared or a varying suffix: the shapes of enumerations and object members.
        let mut seed = 0x9e37_79b9u32;
        let mut rand = |n: u32| {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed % n
        };
        let all = strings(b"abc", 5);
        for case in 0..60 {
            let words: Vec<String> = (0..1 + rand(8))
                .map(|_| (0..1 + rand(4)).map(|_| (b'a' + rand(3) as u8) as char).collect())
                .collect();
            let alts = words.iter().map(|w| format!("\"{w}\"")).collect::<Vec<_>>().join(" | ");
            // Odd cases: ranges read alike but for one letter inside them (a signature
            // writes runs of letters, and such a run must split there).
            let ebnf = match case % 2 {
                0 => format!("root ::= ({alts}) (\"b\" | \"cb\")?"),
                _ => format!("root ::= ({alts}) ([a-c] \"b\" | \"b\" \"c\" | [ac] \"a\")?"),
            };
            let (mut a, class) = dfa(&ebnf);
            let mut h = a.clone();
            assert!(
                a.minimize_acyclic(&mut SliceInterner::default(), &mut Work::default()),
                "case {case}: {ebnf} is acyclic"
            );
            h.minimize_hopcroft(&mut Work::default());
            assert_eq!(a.len(), h.len(), "case {case}: {ebnf}");
            for s in &all {
                assert_eq!(accepts(&a, &class, s), accepts(&h, &class, s), "case {case}: {ebnf} on {s:?}");
            }
        }
        // The merge is real: the six words end in two classes of suffix.
        let (mut d, _) = dfa("root ::= (\"ab\" | \"cb\" | \"bb\") (\"a\" | \"ca\")");
        let before = d.len();
        d.minimize();
        assert!(d.len() < before, "{before} -> {}", d.len());
        assert_eq!(d.len(), 5);
    }

    #[test]
    fn trimming_changes_nothing_when_every_nfa_state_is_live() {
        // Rules of every shape: loops, alternations with common prefixes, counted
        // repetitions, rule references, multi-byte classes.
        let (_, nfas, rep) = rules(
            "root ::= (\"key\" | \"kind\" | \"keys\")+ a b [^\"\\\\]* \"\\\"\"\n\
             a ::= [a-z]{2,6} \"!\" b* ([\\u00e0-\\u00ff] | \"\\\\u\" [0-9a-f]{4})?\n\
             b ::= \"x\" | \"yz\" a? | \"\"",
        );
        for (i, nfa) in nfas.iter().enumerate() {
            assert!(nfa.all_live(), "rule {i}");
            let d = Dfa::determinize(nfa, &rep, 1 << 20).unwrap();
            let mut trimmed = d.clone();
            trimmed.trim();
            assert_eq!(
                (&trimmed.edges, &trimmed.ends, &trimmed.finals),
                (&d.edges, &d.ends, &d.finals),
                "rule {i}"
            );
        }
        // An empty set or an intersection may leave dead states: those NFAs say so.
        let (_, nfas, _) = rules("root ::= \"a\" (\"b\" | x) | \"c\"\nx ::= [^\\u0000-\\U0010ffff]");
        assert!(!nfas[1].all_live());
        let g = Grammar::from_ebnf("root ::= \"a\" [a-c]+").unwrap();
        let mut g2 = g.clone();
        g2.rules[0].body = Expr::Alt(vec![]);
        assert!(!Nfa::build(&g2.rules[0].body, 1 << 20).unwrap().all_live());
        g2.rules[0].body = Expr::And(vec![g.rules[0].body.clone(), g.rules[0].body.clone()]);
        assert!(!Nfa::build(&g2.rules[0].body, 1 << 20).unwrap().all_live());
    }

    #[test]
    fn cycles_go_to_hopcroft() {
        let (mut d, class) = dfa("root ::= (\"ab\" | \"a\" \"b\")* \"c\"");
        assert!(!d.clone().minimize_acyclic(&mut SliceInterner::default(), &mut Work::default()));
        d.minimize();
        assert_eq!(d.len(), 3);
        assert!(accepts(&d, &class, b"ababc") && !accepts(&d, &class, b"abac"));
    }

    #[test]
    fn a_reused_scratch_builds_what_a_fresh_one_builds() {
        // Rules of different sizes through one scratch (large first, so later rules see
        // stale capacity): each DFA must equal the one built from fresh buffers.
        let (_, nfas, rep) = rules(
            "root ::= (\"key\" | \"kind\" | \"keys\")+ a b\n\
             a ::= [a-z]{2,6} \"!\" b*\n\
             b ::= \"x\" | \"yz\" a?",
        );
        let mut sc = Scratch::new(&rep);
        for round in 0..2 {
            for (i, nfa) in nfas.iter().enumerate() {
                let mut reused = Dfa::determinize_with(nfa, &mut sc, 1 << 20).unwrap();
                let mut fresh = Dfa::determinize(nfa, &rep, 1 << 20).unwrap();
                for d in [&mut reused, &mut fresh] {
                    d.trim();
                }
                reused.minimize_in(&mut sc);
                fresh.minimize();
                assert_eq!(
                    (&reused.edges, &reused.ends, &reused.finals),
                    (&fresh.edges, &fresh.ends, &fresh.finals),
                    "rule {i}, round {round}"
                );
            }
        }
    }

    /// `d`'s edges and ends over the grammar's `n_classes` (each rule class's edge once
    /// per grammar class it covers).
    fn over_grammar_classes(d: &Dfa, n_classes: usize) -> (Vec<(u32, u32)>, Vec<u32>) {
        let (mut edges, mut ends) = (Vec::new(), vec![0]);
        for s in 0..d.len() {
            for &(l, t) in d.edges(s) {
                match &d.spans {
                    _ if l as usize >= d.n_classes => {
                        edges.push((l - d.n_classes as u32 + n_classes as u32, t))
                    }
                    Some(spans) => edges.extend((spans[l as usize].0..=spans[l as usize].1).map(|g| (g, t))),
                    None => edges.push((l, t)),
                }
            }
            ends.push(edges.len() as u32);
        }
        (edges, ends)
    }

    #[test]
    fn rules_built_over_their_own_classes_are_the_same_automata() {
        // Rules reading few of the grammar's classes (a JSON-like string, digits), many
        // (free text around a trigger, UTF-8), cycles, straight starts and rule calls,
        // through one scratch in turn with the grammar's classes.
        let (_, nfas, rep) = rules(concat!(
            r#"root ::= ([^<] | "<" [^t<] | "<t" [^o<])* "<tool>" (name ": " value)+ [\u00e9-\u4e00]*"#,
            "\n",
            r#"name ::= "get_weather" | "get_time" | "search_web" | "send_mail" | "run_code""#,
            "\n",
            r#"value ::= "\"" ([^"\\] | "\\" ["\\nt])* "\"" | [0-9]+ ("." [0-9]+)? | "[" value ("," value)* "]""#,
            "\n",
            r##"digits ::= "#" [1-9] [0-9]{0,8} ("e" [0-9]{1,3})?"##,
        ));
        let n_classes = rep.len();
        let (mut narrow, mut plain) = (Scratch::new(&rep), Scratch::new(&rep));
        let mut localized = 0;
        for round in 0..2 {
            for (i, nfa) in nfas.iter().enumerate() {
                let d = Dfa::minimal_narrow(nfa, &mut narrow, 1 << 20).unwrap();
                // The scratch is back on the grammar's classes for the next build.
                let again = Dfa::minimal(nfa, &mut narrow, 1 << 20).unwrap();
                let want = Dfa::minimal(nfa, &mut plain, 1 << 20).unwrap();
                assert_eq!((&again.edges, &again.ends), (&want.edges, &want.ends), "rule {i}");
                localized += d.spans.is_some() as usize;
                assert!(d.spans.as_ref().map_or(n_classes, |s| s.len()) <= n_classes);
                assert_eq!(
                    (over_grammar_classes(&d, n_classes), &d.finals),
                    ((want.edges.clone(), want.ends.clone()), &want.finals),
                    "rule {i}, round {round}"
                );
            }
        }
        assert!(localized >= 4, "only {localized} rules were built over their own classes");
    }

    #[test]
    fn straight_lines_are_built_as_the_general_construction_builds_them() {
        let (g, nfas, rep) = rules(
            "root ::= \"\\\"key\\\": \" b \"!\" [a-f0-9] b b\n\
             b ::= \"xy\"\n\
             c ::= \"\"\n\
             d ::= \"a\" | \"b\"\n\
             e ::= \"a\"*\n\
             f ::= \"ab\"?",
        );
        let mut sc = Scratch::new(&rep);
        let mut straight = Vec::new();
        for (i, nfa) in nfas.iter().enumerate() {
            let mut general = Dfa::determinize(nfa, &rep, 1 << 20).unwrap();
            general.trim();
            general.minimize();
            if let Some(d) = Dfa::straight_line(nfa, &mut sc) {
                assert_eq!(
                    (&d.edges, &d.ends, &d.finals),
                    (&general.edges, &general.ends, &general.finals),
                    "rule {i}"
                );
                straight.push(g.rules[i].name.clone());
            }
        }
        // Alternatives, loops and optional parts take the general construction.
        assert_eq!(straight, ["root", "b", "c"]);
    }

    #[test]
    fn chains_then_the_rest_build_what_the_general_construction_builds() {
        let (g, nfas, rep) = rules(
            "root ::= \"\\\"key\\\": \" (\"x\" | \"yz\" | b)\n\
             b ::= \"ab\" (\"c\" | \"d\")*\n\
             c ::= (\"ab\" \"c\")*\n\
             d ::= \"xy\" (\"z\" \"xy\")*\n\
             e ::= \"k\" b \"v\" (\"1\" | \"2\") b\n\
             f ::= \"ab\" (\"c\" | \"\")\n\
             h ::= \"xyz\" (\"q\" \"yz\")+ | \"w\"",
        );
        let mut sc = Scratch::new(&rep);
        let mut split = Vec::new();
        for (i, nfa) in nfas.iter().enumerate() {
            let mut general = Dfa::determinize(nfa, &rep, 1 << 20).unwrap();
            general.trim();
            general.minimize();
            let d = Dfa::minimal(nfa, &mut sc, 1 << 20).unwrap();
            assert_eq!(
                (&d.edges, &d.ends, &d.finals),
                (&general.edges, &general.ends, &general.finals),
                "rule {i}"
            );
            // Which rules the chain-then-rest construction took.
            if let (chain, Walk::At(p)) = Dfa::straight_walk(nfa, &mut sc) {
                if chain.len() >= 2 && nfa.entered_only_along(&sc.walked, &mut sc.seen) {
                    let mut rest = Dfa::determinize_from(nfa, p, &mut sc, 1 << 20).unwrap();
                    rest.trim();
                    rest.minimize_in(&mut sc);
                    if chain.followed_by(rest).is_some() {
                        split.push(g.rules[i].name.clone());
                    }
                }
            }
        }
        // `c` starts with a loop, `h` with a choice; in `d` the chain's last state ("x",
        // then "y" into the loop) is equivalent to the loop's own "x" state.
        assert_eq!(split, ["root", "b", "e", "f"]);
    }
}
