//! Subset construction, trimming and minimization of one rule's NFA.
//!
//! Determinizing over the alphabet "byte classes ∪ rule references" removes epsilon edges
//! and merges alternatives with common prefixes, so at run time one rule instance is one
//! Earley item instead of a set of NFA states. Trimming removes states that cannot reach a
//! final state (so every accepted prefix can be completed); Hopcroft's partition refinement
//! then merges equivalent states (paper §3.4, "node merging").

use super::nfa::Nfa;
use super::DEAD;
use crate::error::Error;
use rustc_hash::FxHashMap;

/// A DFA for one rule over byte classes and rule references. State 0 is the start.
///
/// Edges are stored sparsely (one flat list, grouped by source state): a rule's states
/// read one or two of the ~70 byte classes on average, so the passes below (trim,
/// minimize, renumber) cost the real edges rather than `states × classes`. The dense
/// table the matcher indexes is built once, by [`super::Automata`] when it assembles
/// the rules.
#[derive(Debug, Clone)]
pub(crate) struct Dfa {
    pub n_classes: usize,
    /// Edges of state `s`: `edges[ends[s]..ends[s + 1]]`, sorted by letter. A letter below
    /// `n_classes` is a byte class; `n_classes + r` reads rule `r`.
    pub edges: Vec<(u32, u32)>,
    pub ends: Vec<u32>,
    pub finals: Vec<bool>,
}

impl Dfa {
    pub fn len(&self) -> usize {
        self.finals.len()
    }

    /// `(letter, target)` edges of `s`, byte classes first.
    pub fn edges(&self, s: usize) -> &[(u32, u32)] {
        &self.edges[self.ends[s] as usize..self.ends[s + 1] as usize]
    }

    /// Subset construction. `class_rep[c]` is one byte of class `c`.
    pub fn determinize(nfa: &Nfa, class_rep: &[u8], max_states: usize) -> Result<Dfa, Error> {
        let nc = class_rep.len();
        let mut seen = vec![false; nfa.len()];
        let mut ids: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
        let mut sets: Vec<Vec<u32>> = Vec::new();
        let mut start = vec![0u32];
        nfa.closure(&mut start, &mut seen);
        ids.insert(start.clone(), 0);
        sets.push(start);
        let mut dfa = Dfa { n_classes: nc, edges: Vec::new(), ends: vec![0], finals: Vec::new() };
        // Per-class target lists, reused across states. Byte edges are ranges, so each edge
        // is spread over the consecutive classes it covers.
        let class_of: Vec<usize> = {
            let mut v = vec![0usize; 256];
            for (c, &rep) in class_rep.iter().enumerate() {
                v[rep as usize] = c;
            }
            // Fill bytes between representatives: classes are contiguous byte ranges.
            let mut cur = 0;
            for (b, slot) in v.iter_mut().enumerate() {
                if class_rep.get(cur + 1).is_some_and(|&r| r as usize == b) {
                    cur += 1;
                }
                *slot = cur;
            }
            v
        };
        let mut per_class: Vec<Vec<u32>> = vec![Vec::new(); nc];
        // Classes with at least one target in the current state, in increasing order.
        let mut touched: Vec<usize> = Vec::new();
        let mut prev_targets: Vec<u32> = Vec::new();
        let mut set: Vec<u32> = Vec::new();
        let mut by_rule: Vec<(u32, u32)> = Vec::new();
        let mut next: Vec<u32> = Vec::new();
        let mut i = 0;
        while i < sets.len() {
            // `intern` only appends to `sets`: a copy into a reused buffer, not a clone.
            set.clear();
            set.extend_from_slice(&sets[i]);
            i += 1;
            dfa.finals.push(set.binary_search(&nfa.end).is_ok());
            for &s in &set {
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
            for &c in &touched {
                let targets = &mut per_class[c];
                targets.sort_unstable();
                targets.dedup();
                let id = match prev {
                    Some(id) if *targets == prev_targets => id,
                    _ => {
                        prev_targets.clear();
                        prev_targets.extend_from_slice(targets);
                        let id = Self::intern(nfa, targets, &mut seen, &mut ids, &mut sets, max_states)?;
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
                let id = Self::intern(nfa, &mut next, &mut seen, &mut ids, &mut sets, max_states)?;
                dfa.edges.push((nc as u32 + r, id));
            }
            dfa.ends.push(dfa.edges.len() as u32);
        }
        Ok(dfa)
    }

    fn intern(
        nfa: &Nfa,
        next: &mut Vec<u32>,
        seen: &mut [bool],
        ids: &mut FxHashMap<Vec<u32>, u32>,
        sets: &mut Vec<Vec<u32>>,
        max_states: usize,
    ) -> Result<u32, Error> {
        if next.is_empty() {
            return Ok(DEAD);
        }
        next.sort_unstable();
        next.dedup();
        nfa.closure(next, seen);
        if let Some(&id) = ids.get(next.as_slice()) {
            return Ok(id);
        }
        if sets.len() >= max_states {
            return Err(Error::Limit {
                what: "automaton size (DFA states of one rule)",
                given: sets.len() + 1,
                limit: max_states,
            });
        }
        let id = sets.len() as u32;
        ids.insert(next.clone(), id);
        sets.push(std::mem::take(next));
        Ok(id)
    }

    /// Removes states that cannot reach a final state (edges to them are dropped). The
    /// start state is kept even if dead, so the rule still has a start.
    pub fn trim(&mut self) {
        let n = self.len();
        // Reverse edges as one flat list grouped by target (CSR), not a Vec per state.
        let mut offsets = vec![0u32; n + 1];
        for &(_, t) in &self.edges {
            offsets[t as usize + 1] += 1;
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        let mut fill = offsets.clone();
        let mut rev = vec![0u32; offsets[n] as usize];
        for s in 0..n {
            for &(_, t) in self.edges(s) {
                rev[fill[t as usize] as usize] = s as u32;
                fill[t as usize] += 1;
            }
        }
        let preds = |t: u32| &rev[offsets[t as usize] as usize..offsets[t as usize + 1] as usize];
        let mut live = self.finals.clone();
        let mut stack: Vec<u32> = (0..n as u32).filter(|&s| live[s as usize]).collect();
        while let Some(s) = stack.pop() {
            for &p in preds(s) {
                if !live[p as usize] {
                    live[p as usize] = true;
                    stack.push(p);
                }
            }
        }
        // Reachable from the start through live states only, numbered in BFS order.
        let mut map = vec![DEAD; n];
        let mut order = vec![0u32];
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
        self.renumber(&order, &map);
    }

    /// Keeps states `order` (new id = position), remapping targets through `map`; edges
    /// into states `map` drops (`DEAD`) are dropped.
    fn renumber(&mut self, order: &[u32], map: &[u32]) {
        let mut edges = Vec::with_capacity(self.edges.len());
        let mut ends = Vec::with_capacity(order.len() + 1);
        let mut finals = Vec::with_capacity(order.len());
        ends.push(0);
        for &s in order {
            let s = s as usize;
            edges
                .extend(self.edges(s).iter().map(|&(l, t)| (l, map[t as usize])).filter(|&(_, t)| t != DEAD));
            ends.push(edges.len() as u32);
            finals.push(self.finals[s]);
        }
        self.edges = edges;
        self.ends = ends;
        self.finals = finals;
    }

    /// Hopcroft minimization: merges states with identical futures.
    ///
    /// Letters are the byte classes plus one letter per rule referenced; the automaton is
    /// completed with a virtual sink (missing edges and `DEAD` lead there), because
    /// Hopcroft's "process only the smaller half" step is only sound on complete DFAs.
    /// `O(m log n)` for `m` edges: long chains (`maxLength: 254`, `{1,255}`) that make
    /// round-based Moore refinement quadratic stay linear-logarithmic here.
    pub fn minimize(&mut self) {
        let n = self.len();
        let nc = self.n_classes;
        let sink = n;
        let total = n + 1;
        // Rule letters renumbered densely after the byte classes.
        let mut rule_letters: Vec<u32> =
            self.edges.iter().filter(|e| e.0 as usize >= nc).map(|e| e.0).collect();
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
        let mut offsets = vec![0u32; total + 1];
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
        let mut fill = offsets.clone();
        let mut inv = vec![(0u32, 0u32); offsets[total] as usize];
        for st in 0..n {
            for &(l, t) in self.edges(st) {
                inv[fill[t as usize] as usize] = (letter(l), st as u32);
                fill[t as usize] += 1;
            }
        }
        // Partition refinement: `elems` grouped by block, `pos` its inverse.
        let finals: Vec<bool> = (0..total).map(|s| s < n && self.finals[s]).collect();
        let mut elems: Vec<u32> = (0..n as u32).filter(|&s| finals[s as usize]).collect();
        let n_final = elems.len();
        elems.extend((0..n as u32).filter(|&s| !finals[s as usize]));
        elems.push(sink as u32);
        let mut pos = vec![0u32; total];
        for (i, &s) in elems.iter().enumerate() {
            pos[s as usize] = i as u32;
        }
        let mut start: Vec<u32> = Vec::new();
        let mut end: Vec<u32> = Vec::new();
        let mut block_of = vec![0u32; total];
        for (a, b) in [(0, n_final), (n_final, n), (n, total)] {
            if a < b {
                for &s in &elems[a..b] {
                    block_of[s as usize] = start.len() as u32;
                }
                start.push(a as u32);
                end.push(b as u32);
            }
        }
        let mut marked: Vec<u32> = vec![0; start.len()];
        // Every initial block but the sink's (the last) is a splitter.
        let mut work: Vec<u32> = (0..start.len() as u32 - 1).collect();
        let mut in_work: Vec<bool> = (0..start.len()).map(|b| b + 1 < start.len()).collect();
        let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); nl];
        let mut touched_letters: Vec<usize> = Vec::new();
        let mut touched: Vec<u32> = Vec::new();
        let mut splitter: Vec<u32> = Vec::new();
        while let Some(a) = work.pop() {
            in_work[a as usize] = false;
            splitter.clear();
            splitter.extend_from_slice(&elems[start[a as usize] as usize..end[a as usize] as usize]);
            for &t in &splitter {
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
                    // The marked prefix becomes a new block.
                    let nb = start.len() as u32;
                    start.push(start[b]);
                    end.push(start[b] + m);
                    start[b] += m;
                    marked.push(0);
                    for &s in &elems[start[nb as usize] as usize..end[nb as usize] as usize] {
                        block_of[s as usize] = nb;
                    }
                    let smaller = if m <= end[b] - start[b] { nb } else { b as u32 };
                    if in_work[b] {
                        in_work.push(true);
                        work.push(nb);
                    } else {
                        in_work.push(false);
                        in_work[smaller as usize] = true;
                        work.push(smaller);
                    }
                }
            }
        }
        // Representative of each block: its first state; the start's block stays first.
        let mut id_of_block = vec![DEAD; start.len()];
        let mut map = vec![DEAD; n];
        let mut order = Vec::new();
        for s in 0..n {
            let b = block_of[s] as usize;
            if id_of_block[b] == DEAD {
                id_of_block[b] = order.len() as u32;
                order.push(s as u32);
            }
            map[s] = id_of_block[b];
        }
        self.renumber(&order, &map);
    }
}
