//! Subset construction, trimming and minimization of one rule's NFA.
//!
//! Determinizing over the alphabet "byte classes ∪ rule references" removes epsilon edges
//! and merges alternatives with common prefixes, so at run time one rule instance is one
//! Earley item instead of a set of NFA states. Trimming removes states that cannot reach a
//! final state (so every accepted prefix can be completed); Moore's partition refinement
//! then merges equivalent states (paper §3.4, "node merging").

use super::nfa::Nfa;
use super::DEAD;
use crate::error::Error;
use rustc_hash::FxHashMap;

/// A DFA for one rule over byte classes and rule references. State 0 is the start.
#[derive(Debug, Clone)]
pub(crate) struct Dfa {
    pub n_classes: usize,
    /// `trans[s * n_classes + c]`: target or [`DEAD`].
    pub trans: Vec<u32>,
    /// Sorted `(rule, target)` edges per state.
    pub rules: Vec<Vec<(u32, u32)>>,
    pub finals: Vec<bool>,
}

impl Dfa {
    pub fn len(&self) -> usize {
        self.finals.len()
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
        let mut dfa = Dfa { n_classes: nc, trans: Vec::new(), rules: Vec::new(), finals: Vec::new() };
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
        let mut i = 0;
        while i < sets.len() {
            let set = sets[i].clone();
            i += 1;
            dfa.finals.push(set.binary_search(&nfa.end).is_ok());
            for &s in &set {
                for &(lo, hi, t) in nfa.bytes.of(s) {
                    for targets in &mut per_class[class_of[lo as usize]..=class_of[hi as usize]] {
                        targets.push(t);
                    }
                }
            }
            let mut prev: Option<(Vec<u32>, u32)> = None;
            for targets in per_class.iter_mut() {
                targets.sort_unstable();
                targets.dedup();
                // Neighbouring classes usually lead to the same set: reuse its id.
                let id = match &prev {
                    Some((p, id)) if p == targets => *id,
                    _ => {
                        let key = targets.clone();
                        let id = Self::intern(nfa, targets, &mut seen, &mut ids, &mut sets, max_states)?;
                        prev = Some((key, id));
                        id
                    }
                };
                targets.clear();
                dfa.trans.push(id);
            }
            let mut by_rule: Vec<(u32, u32)> =
                set.iter().flat_map(|&s| nfa.rules.of(s).iter().copied()).collect();
            by_rule.sort_unstable();
            let mut edges = Vec::new();
            let mut k = 0;
            while k < by_rule.len() {
                let r = by_rule[k].0;
                let mut next = Vec::new();
                while k < by_rule.len() && by_rule[k].0 == r {
                    next.push(by_rule[k].1);
                    k += 1;
                }
                let id = Self::intern(nfa, &mut next, &mut seen, &mut ids, &mut sets, max_states)?;
                edges.push((r, id));
            }
            dfa.rules.push(edges);
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

    /// Removes states that cannot reach a final state (edges to them become dead). The
    /// start state is kept even if dead, so the rule still has a start.
    pub fn trim(&mut self) {
        let n = self.len();
        let nc = self.n_classes;
        let mut rev: Vec<Vec<u32>> = vec![Vec::new(); n];
        for s in 0..n {
            for c in 0..nc {
                let t = self.trans[s * nc + c];
                if t != DEAD {
                    rev[t as usize].push(s as u32);
                }
            }
            for &(_, t) in &self.rules[s] {
                rev[t as usize].push(s as u32);
            }
        }
        let mut live = self.finals.clone();
        let mut stack: Vec<u32> = (0..n as u32).filter(|&s| live[s as usize]).collect();
        while let Some(s) = stack.pop() {
            for &p in &rev[s as usize] {
                if !live[p as usize] {
                    live[p as usize] = true;
                    stack.push(p);
                }
            }
        }
        for s in 0..n {
            for c in 0..nc {
                let t = &mut self.trans[s * nc + c];
                if *t != DEAD && !live[*t as usize] {
                    *t = DEAD;
                }
            }
            self.rules[s].retain(|&(_, t)| live[t as usize]);
        }
        self.keep_reachable();
    }

    /// Renumbers so that only states reachable from the start remain.
    fn keep_reachable(&mut self) {
        let n = self.len();
        let nc = self.n_classes;
        let mut map = vec![DEAD; n];
        let mut order = vec![0u32];
        map[0] = 0;
        let mut i = 0;
        while i < order.len() {
            let s = order[i] as usize;
            i += 1;
            let targets =
                self.trans[s * nc..(s + 1) * nc].iter().copied().chain(self.rules[s].iter().map(|e| e.1));
            for t in targets {
                if t != DEAD && map[t as usize] == DEAD {
                    map[t as usize] = order.len() as u32;
                    order.push(t);
                }
            }
        }
        self.renumber(&order, &map);
    }

    /// Keeps states `order` (new id = position), remapping targets through `map`.
    fn renumber(&mut self, order: &[u32], map: &[u32]) {
        let nc = self.n_classes;
        let remap = |t: u32| if t == DEAD { DEAD } else { map[t as usize] };
        let mut trans = Vec::with_capacity(order.len() * nc);
        let mut rules = Vec::with_capacity(order.len());
        let mut finals = Vec::with_capacity(order.len());
        for &s in order {
            let s = s as usize;
            trans.extend(self.trans[s * nc..(s + 1) * nc].iter().map(|&t| remap(t)));
            let mut e: Vec<(u32, u32)> = self.rules[s].iter().map(|&(r, t)| (r, remap(t))).collect();
            e.sort_unstable();
            e.dedup();
            rules.push(e);
            finals.push(self.finals[s]);
        }
        self.trans = trans;
        self.rules = rules;
        self.finals = finals;
    }

    /// Moore minimization: merges states with identical futures.
    ///
    /// Each round gives every state a signature (its class, then its transitions' classes,
    /// run-length encoded over byte classes, then its rule edges) in one flat buffer, and
    /// renumbers classes by sorting states on their signatures — no per-state allocation.
    pub fn minimize(&mut self) {
        let n = self.len();
        let nc = self.n_classes;
        let mut class: Vec<u32> = self.finals.iter().map(|&f| f as u32).collect();
        let mut count = 0usize;
        let mut buf: Vec<u32> = Vec::new();
        let mut spans: Vec<(u32, u32)> = Vec::with_capacity(n);
        // Transition rows run-length encoded once: `(first class, target)` per run.
        let mut runs: Vec<(u32, u32)> = Vec::new();
        let mut run_ends: Vec<u32> = Vec::with_capacity(n);
        for s in 0..n {
            let mut last = DEAD - 1;
            for (c, &t) in self.trans[s * nc..(s + 1) * nc].iter().enumerate() {
                if t != last {
                    runs.push((c as u32, t));
                    last = t;
                }
            }
            run_ends.push(runs.len() as u32);
        }
        loop {
            buf.clear();
            spans.clear();
            for s in 0..n {
                let cls = |t: u32| if t == DEAD { u32::MAX } else { class[t as usize] };
                let start = buf.len() as u32;
                buf.push(class[s]);
                let mut last = u32::MAX - 1;
                let r0 = if s == 0 { 0 } else { run_ends[s - 1] as usize };
                for &(c, t) in &runs[r0..run_ends[s] as usize] {
                    let k = cls(t);
                    if k != last {
                        buf.push(c);
                        buf.push(k);
                        last = k;
                    }
                }
                buf.push(u32::MAX);
                for &(r, t) in &self.rules[s] {
                    buf.push(r);
                    buf.push(cls(t));
                }
                spans.push((start, buf.len() as u32));
            }
            let sig = |s: u32| {
                let (a, b) = spans[s as usize];
                &buf[a as usize..b as usize]
            };
            let mut ids: FxHashMap<&[u32], u32> = FxHashMap::default();
            ids.reserve(n);
            let mut next = vec![0u32; n];
            for (st, slot) in next.iter_mut().enumerate() {
                let len = ids.len() as u32;
                *slot = *ids.entry(sig(st as u32)).or_insert(len);
            }
            let id = ids.len().saturating_sub(1) as u32;
            let new_count = if n == 0 { 0 } else { id as usize + 1 };
            drop(ids);
            class = next;
            if new_count == count {
                break;
            }
            count = new_count;
        }
        // Representative of each class: its first state; the start's class stays first.
        let mut map = vec![DEAD; n];
        let mut rep_of_class: FxHashMap<u32, u32> = FxHashMap::default();
        let mut order = Vec::new();
        for s in 0..n {
            let id = *rep_of_class.entry(class[s]).or_insert_with(|| {
                order.push(s as u32);
                order.len() as u32 - 1
            });
            map[s] = id;
        }
        self.renumber(&order, &map);
    }
}
