//! Thompson construction: one rule's [`Expr`] to a byte-level NFA whose edges are byte
//! ranges, rule references or epsilon. Characters become UTF-8 byte sequences here
//! (`regex-syntax`'s `Utf8Sequences` splits a code-point range into byte-range chains).

use super::AutomataError;
use crate::budget::{self, Phase};
use crate::grammar::Expr;
use crate::grammar::{GrammarError, GrammarErrorKind};
use regex_syntax::utf8::{Utf8Sequence, Utf8Sequences};
use rustc_hash::FxHashMap;

/// Edges out of each state in one flat array (compressed sparse rows): state `s`'s edges
/// are `edges[starts[s]..starts[s + 1]]`. Built once from an unsorted edge list, so
/// construction allocates three vectors instead of three per state.
#[derive(Debug, Default)]
pub(crate) struct Csr<T> {
    starts: Vec<u32>,
    edges: Vec<T>,
}

impl<T: Copy> Csr<T> {
    fn build(n: usize, list: Vec<(u32, T)>) -> Self {
        // A counting sort by source state, keeping each state's edges in the order they
        // were added (what a stable sort gave, without its comparisons and buffer).
        let mut starts = vec![0u32; n + 1];
        for &(from, _) in &list {
            starts[from as usize + 1] += 1;
        }
        for i in 0..n {
            starts[i + 1] += starts[i];
        }
        let Some(&(_, any)) = list.first() else { return Csr { starts, edges: Vec::new() } };
        let mut next: Vec<u32> = starts[..n].to_vec();
        let mut edges = vec![any; list.len()];
        for (from, e) in list {
            let at = &mut next[from as usize];
            edges[*at as usize] = e;
            *at += 1;
        }
        Csr { starts, edges }
    }

    /// Every edge, of all states.
    pub fn all(&self) -> &[T] {
        &self.edges
    }

    #[inline]
    pub fn of(&self, s: u32) -> &[T] {
        &self.edges[self.starts[s as usize] as usize..self.starts[s as usize + 1] as usize]
    }
}

/// An NFA for one rule. State 0 is the start; `end` is the single final state.
#[derive(Debug, Default)]
pub(crate) struct Nfa {
    pub eps: Csr<u32>,
    /// `(lo, hi, target)` byte-range edges.
    pub bytes: Csr<(u8, u8, u32)>,
    /// `(rule, target)` rule-reference edges.
    pub rules: Csr<(u32, u32)>,
    pub end: u32,
    len: usize,
    /// States with a byte or rule edge, and `end`: the only states a DFA state's future
    /// depends on.
    important: Vec<bool>,
    /// Every state can reach `end` (see [`Builder::dead_ends`]).
    all_live: bool,
}

/// Edge lists while building.
#[derive(Default)]
struct Builder {
    len: usize,
    eps: Vec<(u32, u32)>,
    bytes: Vec<(u32, (u8, u8, u32))>,
    rules: Vec<(u32, (u32, u32))>,
    /// Something built may leave states that cannot reach the end: an empty set (an empty
    /// alternation, a class with no valid character) or a product. Otherwise every
    /// fragment's states lie on a path from its entry to its exit (Thompson's
    /// construction), so every state reaches the end and DFA trimming can be skipped.
    dead_ends: bool,
    /// The shared tail states of the class being built: `((lo, hi, target), state)`.
    tails: Vec<((u8, u8, u32), u32)>,
    /// The UTF-8 sequences of each range met (a spelled string's thousands of states
    /// read the same few classes: splitting them again was a tenth of its NFA).
    utf8: FxHashMap<(u32, u32), Box<[Utf8Sequence]>>,
    /// Scratch: the sequences of the range being built.
    seqs: Vec<Utf8Sequence>,
}

impl Nfa {
    /// Builds the NFA for `body`, failing once it has more than `max_states` states.
    pub fn build(body: &Expr, max_states: usize) -> Result<Nfa, AutomataError> {
        let mut b = Builder::default();
        let start = b.state(max_states)?;
        let end = b.expr(body, start, max_states)?;
        // Charged once per rule, not per state: the size limit already bounds one build,
        // and a state is built in a few instructions (a charge per state was the hot path).
        budget::charge(Phase::Nfa, b.len as u64)?;
        Ok(b.finish(end))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether every state can reach the end: no empty set or intersection was built.
    pub fn all_live(&self) -> bool {
        self.all_live
    }

    /// No edge enters `path` (states along a path from the start) except from `path`
    /// itself: nothing else can lead back into it. `seen` is all false, and left so.
    pub fn entered_only_along(&self, path: &[u32], seen: &mut [bool]) -> bool {
        for &s in path {
            seen[s as usize] = true;
        }
        let seen_ = &*seen;
        let ok = (0..self.len as u32).filter(|&s| !seen_[s as usize]).all(|s| {
            self.eps.of(s).iter().all(|&t| !seen_[t as usize])
                && self.bytes.of(s).iter().all(|e| !seen_[e.2 as usize])
                && self.rules.of(s).iter().all(|e| !seen_[e.1 as usize])
        });
        for &s in path {
            seen[s as usize] = false;
        }
        ok
    }

    /// Epsilon closure of `set` (sorted, deduplicated), keeping only the states with a byte
    /// or rule edge and the final state. Two subsets that differ only in pass-through
    /// states (the joins and loop heads of the Thompson construction) have the same future,
    /// so the subset construction keys DFA states by what is left: the ends of `(a | b) c`
    /// meet in one DFA state instead of two that minimization would have to merge.
    pub fn closure(&self, set: &mut Vec<u32>, seen: &mut [bool]) {
        let mut i = 0;
        for &s in set.iter() {
            seen[s as usize] = true;
        }
        while i < set.len() {
            let s = set[i];
            i += 1;
            for &t in self.eps.of(s) {
                if !seen[t as usize] {
                    seen[t as usize] = true;
                    set.push(t);
                }
            }
        }
        for &s in set.iter() {
            seen[s as usize] = false;
        }
        set.retain(|&s| self.important[s as usize]);
        set.sort_unstable();
    }
}

/// One operand of a product: its NFA and the closures of its states, each computed once.
struct Side<'n> {
    nfa: &'n Nfa,
    closures: Vec<Option<Box<[u32]>>>,
    seen: Vec<bool>,
}

impl<'n> Side<'n> {
    fn new(nfa: &'n Nfa) -> Self {
        Side { nfa, closures: vec![None; nfa.len], seen: vec![false; nfa.len] }
    }

    fn closure(&mut self, s: u32) -> &[u32] {
        let (nfa, seen) = (self.nfa, &mut self.seen);
        self.closures[s as usize].get_or_insert_with(|| {
            let mut set = vec![s];
            nfa.closure(&mut set, seen);
            set.into_boxed_slice()
        })
    }
}

/// The NFAs of the operands of an intersection, which must not call rules: a product of
/// automata cannot follow a rule reference (the optimizer reports it first, with the
/// rule's name, so the name is not known here).
fn operands(parts: &[Expr], max: usize) -> Result<Vec<Nfa>, AutomataError> {
    let mut nfas = Vec::with_capacity(parts.len());
    for p in parts {
        let nfa = Nfa::build(p, max)?;
        if (0..nfa.len as u32).any(|s| !nfa.rules.of(s).is_empty()) {
            let kind = GrammarErrorKind::IntersectionCallsRule("?".into());
            return Err(AutomataError::Grammar(GrammarError::global(kind)));
        }
        nfas.push(nfa);
    }
    Ok(nfas)
}

/// The intersection of two rule-free NFAs: the product construction over pairs of
/// important states (closures taken on entry, so the product has no epsilon edges of
/// its own but the joins). A byte edge of the product reads the bytes both operands read
/// from their states in the pair and leads to the pairs of the targets' closures: to
/// the one pair directly, or to a join state with an epsilon edge to each.
///
/// Only live pairs become states: those whose two states read some byte in common, or
/// both end. The closures of two character automata hold the heads of every branch
/// (plain characters, `\"`, `\u` escapes, …), and most pairs of heads read nothing in
/// common: building them all made several times the states the product needs.
fn intersect(a: &Nfa, b: &Nfa, max: usize) -> Result<Nfa, AutomataError> {
    /// Marks a pair seen and found dead.
    const DEAD_PAIR: u32 = u32::MAX;
    let (mut sa, mut sb) = (Side::new(a), Side::new(b));
    let mut out = Builder::default();
    let start = out.state(max)?;
    let end = out.state(max)?;
    /// Pair states by pair, and those not expanded yet.
    #[derive(Default)]
    struct Pairs {
        ids: FxHashMap<(u32, u32), u32>,
        todo: Vec<(u32, u32, u32)>,
    }
    let mut pairs = Pairs::default();
    let overlap = |x: u32, y: u32| {
        a.bytes.of(x).iter().any(|&(lo, hi, _)| b.bytes.of(y).iter().any(|&(l, h, _)| lo.max(l) <= hi.min(h)))
    };
    // The live pair states of `xs × ys` into `found`, made on first sight.
    let live = |out: &mut Builder, pairs: &mut Pairs, xs: &[u32], ys: &[u32], found: &mut Vec<u32>| {
        let Pairs { ids, todo } = pairs;
        found.clear();
        for &x in xs {
            for &y in ys {
                let id = match ids.get(&(x, y)) {
                    Some(&id) => id,
                    None => {
                        let id = if (x == a.end && y == b.end) || overlap(x, y) {
                            let id = out.state(max)?;
                            todo.push((x, y, id));
                            id
                        } else {
                            DEAD_PAIR
                        };
                        ids.insert((x, y), id);
                        id
                    }
                };
                if id != DEAD_PAIR {
                    found.push(id);
                }
            }
        }
        Ok::<(), AutomataError>(())
    };
    let mut found = Vec::new();
    let (xs, ys) = (sa.closure(0).to_vec(), sb.closure(0).to_vec());
    live(&mut out, &mut pairs, &xs, &ys, &mut found)?;
    out.eps.extend(found.iter().map(|&id| (start, id)));
    while let Some((x, y, id)) = pairs.todo.pop() {
        if x == a.end && y == b.end {
            out.eps.push((id, end));
        }
        budget::charge(Phase::Intersection, 1 + (a.bytes.of(x).len() * b.bytes.of(y).len()) as u64)?;
        for &(lo, hi, tx) in a.bytes.of(x) {
            for &(lo2, hi2, ty) in b.bytes.of(y) {
                let (l, h) = (lo.max(lo2), hi.min(hi2));
                if l > h {
                    continue;
                }
                let (xs, ys) = (sa.closure(tx).to_vec(), sb.closure(ty).to_vec());
                live(&mut out, &mut pairs, &xs, &ys, &mut found)?;
                match found[..] {
                    [] => {}
                    [to] => out.bytes.push((id, (l, h, to))),
                    _ => {
                        let join = out.state(max)?;
                        out.bytes.push((id, (l, h, join)));
                        out.eps.extend(found.iter().map(|&to| (join, to)));
                    }
                }
            }
        }
    }
    // Pairs are expanded when they read a byte in common, not when they can finish.
    out.dead_ends = true;
    Ok(out.finish(end))
}

impl Builder {
    /// The NFA of what was built, ending at `end`.
    fn finish(self, end: u32) -> Nfa {
        let mut important = vec![false; self.len];
        important[end as usize] = true;
        for &(from, _) in &self.bytes {
            important[from as usize] = true;
        }
        for &(from, _) in &self.rules {
            important[from as usize] = true;
        }
        Nfa {
            eps: Csr::build(self.len, self.eps),
            bytes: Csr::build(self.len, self.bytes),
            rules: Csr::build(self.len, self.rules),
            end,
            len: self.len,
            important,
            all_live: !self.dead_ends,
        }
    }

    /// A copy of `nfa` entered from `from`; returns the state where it ends.
    fn embed(&mut self, nfa: &Nfa, from: u32, max: usize) -> Result<u32, AutomataError> {
        let base = self.len as u32;
        if self.len + nfa.len > max {
            return Err(AutomataError::Limit {
                what: "automaton size (NFA states of one rule)",
                given: self.len + nfa.len,
                limit: max,
            });
        }
        self.len += nfa.len;
        self.dead_ends |= !nfa.all_live;
        self.eps.push((from, base));
        for s in 0..nfa.len as u32 {
            self.eps.extend(nfa.eps.of(s).iter().map(|&t| (base + s, base + t)));
            self.bytes.extend(nfa.bytes.of(s).iter().map(|&(lo, hi, t)| (base + s, (lo, hi, base + t))));
            self.rules.extend(nfa.rules.of(s).iter().map(|&(r, t)| (base + s, (r, base + t))));
        }
        Ok(base + nfa.end)
    }

    fn state(&mut self, max: usize) -> Result<u32, AutomataError> {
        if self.len >= max {
            return Err(AutomataError::Limit {
                what: "automaton size (NFA states of one rule)",
                given: self.len + 1,
                limit: max,
            });
        }
        self.len += 1;
        Ok(self.len as u32 - 1)
    }

    /// Byte paths from `from` to `to` for every character of `ranges`. Each byte sequence
    /// is built from its end, sharing the states of equal tails (with the tails built
    /// since `self.tails` was last cleared): the continuation bytes of
    /// `[\u0800-\uffff]`'s sequences lead through the same states whatever their lead
    /// byte. Separate chains were equivalent states the subset construction kept apart and
    /// minimization then merged (a third of a tool-calling tag's root DFA before
    /// minimizing).
    fn utf8_class(
        &mut self,
        ranges: &[(u32, u32)],
        from: u32,
        to: u32,
        max: usize,
    ) -> Result<(), AutomataError> {
        let mut seqs = std::mem::take(&mut self.seqs);
        for &(lo, hi) in ranges {
            // (A reversed range is empty, as `Utf8Sequences` reads it.)
            if lo > hi {
                continue;
            }
            if hi < 0x80 {
                self.bytes.push((from, (lo as u8, hi as u8, to)));
                continue;
            }
            let (Some(lo), Some(hi)) = (char::from_u32(lo), char::from_u32(hi)) else { continue };
            seqs.clear();
            match self.utf8.get(&(lo as u32, hi as u32)) {
                Some(cached) => seqs.extend_from_slice(cached),
                None => {
                    seqs.extend(Utf8Sequences::new(lo, hi));
                    self.utf8.insert((lo as u32, hi as u32), seqs.as_slice().into());
                }
            }
            for seq in &seqs {
                let seq = seq.as_slice();
                let mut next = to;
                for r in seq[1..].iter().rev() {
                    let edge = (r.start, r.end, next);
                    next = match self.tails.iter().find(|t| t.0 == edge) {
                        Some(&(_, s)) => s,
                        None => {
                            let s = self.state(max)?;
                            self.bytes.push((s, edge));
                            self.tails.push((edge, s));
                            s
                        }
                    };
                }
                self.bytes.push((from, (seq[0].start, seq[0].end, next)));
            }
        }
        self.seqs = seqs;
        Ok(())
    }

    /// Adds `e` starting at `from`; returns the state where it ends.
    fn expr(&mut self, e: &Expr, from: u32, max: usize) -> Result<u32, AutomataError> {
        Ok(match e {
            Expr::Empty => from,
            Expr::Literal(s) => {
                let mut cur = from;
                for &b in s.as_bytes() {
                    let next = self.state(max)?;
                    self.bytes.push((cur, (b, b, next)));
                    cur = next;
                }
                cur
            }
            Expr::Class(ranges) => {
                let end = self.state(max)?;
                let edges = self.bytes.len();
                self.tails.clear();
                self.utf8_class(ranges, from, end, max)?;
                self.dead_ends |= self.bytes.len() == edges;
                end
            }
            Expr::Rule(r) => {
                let end = self.state(max)?;
                self.rules.push((from, (r.0, end)));
                end
            }
            // The automaton's states copied as they are, one NFA state each (plus the
            // continuation-byte states of its wide classes, shared by equal tails as for a
            // class): the subset construction then finds them already deterministic.
            Expr::Dfa(d) => {
                let end = self.state(max)?;
                let base = self.len as u32;
                for _ in 0..d.len() {
                    self.state(max)?;
                }
                self.eps.push((from, base));
                // Tails are shared only on the way to one target: each target's moves are
                // built together, so the tails searched stay a few (one list for the whole
                // automaton grew with it, and so did each search). The moves to each
                // target come from one flat list (a list per target was an allocation
                // per state: 54,000 for a spelled string).
                for s in 0..d.len() {
                    if d.is_final(s) {
                        self.eps.push((base + s as u32, end));
                    }
                }
                // Per target, its moves as `(state, move)`, states ascending (a counting
                // sort, in the order a list per target was filled).
                let mut first = vec![0usize; d.len() + 1];
                for s in 0..d.len() {
                    for m in d.moves(s) {
                        first[m.1 as usize + 1] += 1;
                    }
                }
                for t in 0..d.len() {
                    first[t + 1] += first[t];
                }
                let mut fill = first.clone();
                let mut moves = vec![(0u32, 0u32); first[d.len()]];
                for s in 0..d.len() {
                    for (k, m) in d.moves(s).iter().enumerate() {
                        moves[fill[m.1 as usize]] = (s as u32, k as u32);
                        fill[m.1 as usize] += 1;
                    }
                }
                for t in 0..d.len() {
                    self.tails.clear();
                    for &(s, k) in &moves[first[t]..first[t + 1]] {
                        let class = &d.moves(s as usize)[k as usize].0;
                        self.utf8_class(class, base + s, base + t as u32, max)?;
                    }
                }
                end
            }
            Expr::Seq(v) => {
                let mut cur = from;
                for x in v {
                    cur = self.expr(x, cur, max)?;
                }
                cur
            }
            Expr::Alt(v) => {
                self.dead_ends |= v.is_empty();
                let end = self.state(max)?;
                for x in v {
                    let s = self.state(max)?;
                    self.eps.push((from, s));
                    let e = self.expr(x, s, max)?;
                    self.eps.push((e, end));
                }
                end
            }
            Expr::And(v) => {
                self.dead_ends = true;
                let mut parts = operands(v, max.saturating_sub(self.len))?.into_iter();
                let first = parts.next().unwrap_or_default();
                let product = parts.try_fold(first, |acc, p| intersect(&acc, &p, max))?;
                self.embed(&product, from, max)?
            }
            // `x{m,}` with `m >= 1`: `m - 1` copies, then `x+` as one copy whose end loops
            // back to its start (the textbook `x x*` built a second copy: the tags of a
            // tool-calling tag's `tags_with_separator`, every tool's arguments, twice).
            Expr::Repeat { expr, min, max: None } if *min >= 1 => {
                let mut cur = from;
                for _ in 1..*min {
                    cur = self.expr(expr, cur, max)?;
                }
                let s = self.state(max)?;
                self.eps.push((cur, s));
                let e = self.expr(expr, s, max)?;
                self.eps.push((e, s));
                let end = self.state(max)?;
                self.eps.push((e, end));
                end
            }
            Expr::Repeat { expr, min, max: rep_max } => {
                let mut cur = from;
                for _ in 0..*min {
                    cur = self.expr(expr, cur, max)?;
                }
                match rep_max {
                    None => {
                        // cur -ε-> loop; loop -body-> back -ε-> loop; loop -ε-> end
                        let lp = self.state(max)?;
                        self.eps.push((cur, lp));
                        let s = self.state(max)?;
                        self.eps.push((lp, s));
                        let e = self.expr(expr, s, max)?;
                        self.eps.push((e, lp));
                        let end = self.state(max)?;
                        self.eps.push((lp, end));
                        end
                    }
                    Some(m) => {
                        let end = self.state(max)?;
                        for _ in *min..*m {
                            self.eps.push((cur, end));
                            cur = self.expr(expr, cur, max)?;
                        }
                        self.eps.push((cur, end));
                        end
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_or_more_is_one_copy_of_its_body() {
        // `x{m,}` reads the language `x^m x*` with `m` copies of `x`, not `m + 1`.
        let word = "tool_call_with_a_long_name";
        let lit = || Box::new(Expr::Literal(word.into()));
        for min in 1..=3u32 {
            let nfa = Nfa::build(&Expr::Repeat { expr: lit(), min, max: None }, 1 << 20).unwrap();
            let copies = nfa.len() / word.len();
            assert_eq!(copies, min as usize, "{} states for {min} copies", nfa.len());
            // The strings of `n` copies, accepted from `min` on.
            let accepts = |text: &str| {
                let mut set = vec![0u32];
                let mut seen = vec![false; nfa.len()];
                nfa.closure(&mut set, &mut seen);
                for &b in text.as_bytes() {
                    let mut next: Vec<u32> = set
                        .iter()
                        .flat_map(|&q| nfa.bytes.of(q).iter().filter(|e| e.0 <= b && b <= e.1).map(|e| e.2))
                        .collect();
                    next.sort_unstable();
                    next.dedup();
                    nfa.closure(&mut next, &mut seen);
                    set = next;
                }
                set.contains(&nfa.end)
            };
            for n in 0..6u32 {
                assert_eq!(accepts(&word.repeat(n as usize)), n >= min, "{n} copies, min {min}");
            }
            assert!(!accepts(&format!("{word}x")));
        }
    }
}
