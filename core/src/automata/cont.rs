//! What every context reads after a rule: the continuation a mask walk may follow past
//! the end of the rule it classifies.
//!
//! A token that runs past the end of its rule is context-dependent in general, and the
//! matcher checks such tokens against the live parse at every fill. Inside a long JSON
//! string written as blocks (`block{0,q} chars`, see `json_schema::string`) that is most
//! of the vocabulary near each block's end: every token of string characters crosses into
//! the next block — a run-time check of ~100k tokens per fill, 10 ms on Llama 3.
//!
//! Yet there the context does not matter: wherever the block is called, another block or
//! a run of at least as many characters may follow it. Formally, for a rule `R` whose
//! every call site `s —R→ t` (and `R` is not the root, whose end has nothing after it)
//! calls at `t` a rule `Q'` that *simulates* a pure repetition rule `Q` — every byte
//! string `Q` reads from its start, `Q'` reads too — whatever `Q` reads from its start is
//! a viable continuation after `R` in every context. So the walk classifying a state of
//! `R`, on reaching a final state of `R` with nowhere to go inside it, goes on from `Q`'s
//! start ([`Automata::cont_at`]), and the tokens it reads there are accepted outright. `Q`
//! is *pure*: a spliced repetition calling no rule, so a walk inside it stays in DFA mode.

use super::{Automata, DEAD};
use crate::grammar::Expr;
use rustc_hash::{FxHashMap, FxHashSet};

/// Most state pairs one simulation check visits (a block of 256 JSON characters and its
/// partner: ~3,600).
const MAX_PAIRS: usize = 50_000;

impl Automata {
    /// The state a walk goes on from after reaching `sink`, a final state of its seed rule
    /// with no byte transitions, when every context of that rule reads what it reads
    /// (see the module documentation).
    #[inline]
    pub(crate) fn cont_at(&self, sink: u32) -> Option<u32> {
        self.cont(sink).map(|c| c.0)
    }

    /// [`Automata::cont_at`] with how many copies of the sink's own repetition the
    /// continuation reads for sure (0 unless the sink ends a pure repetition rule that
    /// the continuation's rule simulates): a walk at a position `k` copies before the
    /// sink has room for `k` plus that many.
    #[inline]
    pub(crate) fn cont(&self, sink: u32) -> Option<(u32, u32)> {
        if self.conts.is_empty() {
            return None;
        }
        self.conts.binary_search_by_key(&sink, |c| c.0).ok().map(|i| (self.conts[i].1, self.conts[i].2))
    }

    /// Whether some state of `rule` has a continuation (its masks then depend on the
    /// rule's call sites, not only on its own automaton).
    pub(crate) fn has_cont(&self, rule: u32) -> bool {
        let (lo, hi) = self.rule_range(rule);
        let i = self.conts.partition_point(|c| c.0 < lo);
        self.conts.get(i).is_some_and(|c| c.0 < hi)
    }

    /// Fills [`Automata::conts`]: `(sink, continuation, copies)` sorted by sink.
    pub(crate) fn compute_conts(&mut self) {
        self.conts = self.find_conts();
    }

    fn find_conts(&self) -> Vec<(u32, u32, u32)> {
        if self.chains.is_empty() {
            return Vec::new();
        }
        let n_rules = self.rule_start.len();
        // Pure rules: no state calls a rule or is gated (a walk inside stays in DFA mode);
        // with the copies of their spliced repetition, if any.
        // (A stand-in is never one: what it reads says nothing of the part it stands for.)
        let mut pure: Vec<Option<u32>> = (0..n_rules as u32)
            .map(|r| (self.is_pure(r) && !self.grammar.rules[r as usize].stand_in).then_some(0))
            .collect();
        for (r, l) in &self.chains {
            if let Some(p) = &mut pure[*r as usize] {
                *p = l.max;
            }
        }
        if !self.chains.iter().any(|(r, _)| pure[*r as usize].is_some()) {
            return Vec::new();
        }
        // Call sites per rule; a rule called from a gated state (a member set's progress)
        // is left alone.
        let mut sites: Vec<Vec<u32>> = vec![Vec::new(); n_rules];
        let mut bad = vec![false; n_rules];
        bad[self.grammar.root.index()] = true;
        for s in 0..self.nodes.len() as u32 {
            for &(r, t) in self.edges(s) {
                if self.nodes[s as usize].gated || self.nodes.get(t as usize).map_or(true, |n| n.gated) {
                    bad[r as usize] = true;
                } else {
                    sites[r as usize].push(t);
                }
            }
        }
        let mut sim: FxHashMap<(u32, u32), bool> = FxHashMap::default();
        let mut out = Vec::new();
        for r in 0..n_rules {
            if bad[r] || sites[r].is_empty() {
                continue;
            }
            sites[r].sort_unstable();
            sites[r].dedup();
            // Candidates: the pure repetitions some site calls, longest first (any pure
            // rule may stand in for one at a site).
            let mut cands: Vec<u32> = sites[r]
                .iter()
                .flat_map(|&t| self.edges(t).iter().map(|e| e.0))
                .filter(|&q| pure[q as usize].is_some_and(|m| m > 0))
                .collect();
            cands.sort_unstable_by_key(|&q| std::cmp::Reverse((pure[q as usize], q)));
            cands.dedup();
            let found = cands.into_iter().find(|&q| {
                sites[r].iter().all(|&t| {
                    self.edges(t).iter().any(|&(q2, _)| {
                        pure[q2 as usize].is_some()
                            && *sim.entry((q, q2)).or_insert_with(|| self.simulates(q, q2))
                    })
                })
            });
            let Some(q) = found else { continue };
            let j = self.rule_start[q as usize];
            let copies = match pure[r] {
                Some(max)
                    if max > 0
                        && *sim.entry((r as u32, q)).or_insert_with(|| self.simulates(r as u32, q)) =>
                {
                    // `q` reads what `r` reads: `max` copies of `r`'s body, and as many as
                    // `q` repeats when both repeat the same body (a `minLength` run and a
                    // block of the same characters).
                    match (self.counted(r as u32), self.counted(q)) {
                        (Some((a, _)), Some((b, m))) if a == b => max.max(m),
                        _ => max,
                    }
                }
                _ => 0,
            };
            let (lo, hi) = self.rule_range(r as u32);
            for s in lo..hi {
                if self.nodes[s as usize].is_final && self.row(s).is_empty() {
                    out.push((s, j, copies));
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// The body a pure rule repeats and at most how often: `x{lo,hi}`, or `x x{lo,hi}`
    /// (`hi + 1`; a repetition that ends its rule is spliced, one that starts it may not).
    fn counted(&self, rule: u32) -> Option<(&Expr, u32)> {
        match &self.grammar.rules[rule as usize].body {
            Expr::Repeat { expr, max: Some(m), .. } => Some((&**expr, *m)),
            Expr::Seq(v) => match &v[..] {
                [x, Expr::Repeat { expr, max: Some(m), .. }] if x == &**expr => Some((x, m + 1)),
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether rule `q2` reads, from its start, every byte string rule `q` reads from its
    /// start (both pure: byte transitions only): a simulation of `q`'s states by `q2`'s.
    fn simulates(&self, q: u32, q2: u32) -> bool {
        if q == q2 {
            return true;
        }
        // Repetitions of one body: the one repeated at least as often reads the other's
        // strings (read off the grammar; the walk over a block's ~3,600 state pairs took
        // a third of a millisecond per pair of rules).
        if let (Some((a, n)), Some((b, m))) = (self.counted(q), self.counted(q2)) {
            if a == b {
                return n <= m;
            }
        }
        let nc = self.n_classes;
        let start = (self.rule_start[q as usize], self.rule_start[q2 as usize]);
        let mut seen: FxHashSet<(u32, u32)> = FxHashSet::default();
        seen.insert(start);
        let mut todo = vec![start];
        while let Some((x, y)) = todo.pop() {
            for c in 0..nc {
                let tx = self.next(x, c);
                if tx == DEAD {
                    continue;
                }
                let ty = self.next(y, c);
                if ty == DEAD {
                    return false;
                }
                if seen.insert((tx, ty)) {
                    if seen.len() > MAX_PAIRS {
                        return false;
                    }
                    todo.push((tx, ty));
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_schema::{json_schema_str_to_grammar, JsonSchemaOptions};

    fn automata(schema: &str) -> Automata {
        let g = json_schema_str_to_grammar(schema, &JsonSchemaOptions::default()).unwrap();
        Automata::build(&g, &Default::default()).unwrap()
    }

    fn rule_named(a: &Automata, name: &str) -> u32 {
        let g = a.grammar();
        (0..g.rules.len() as u32).find(|&r| g.rules[r as usize].name == name).unwrap()
    }

    /// The sinks of `rule` that continue, as (continuation's rule, copies).
    fn conts_of(a: &Automata, rule: u32) -> Vec<(u32, u32)> {
        let (lo, hi) = a.rule_range(rule);
        a.conts
            .iter()
            .filter(|c| (lo..hi).contains(&c.0))
            .map(|c| (a.nodes[c.1 as usize].rule, c.2))
            .collect()
    }

    /// A long string's `minLength` characters and its blocks go on into a block (a run
    /// of 256 characters after any of them, wherever the string is); the last block and
    /// the runs, followed by fewer characters or the closing quote, do not; nor does the
    /// root, or a string that never calls a repetition rule.
    #[test]
    fn long_string_blocks_continue_into_blocks() {
        let a = automata(r#"{"type":"array","items":{"type":"string","minLength":5,"maxLength":32767}}"#);
        let (min, block, last) =
            (rule_named(&a, "r1_chars"), rule_named(&a, "r2_block"), rule_named(&a, "r3_block"));
        assert_eq!(a.grammar().rules[last as usize].name, "r3_block");
        assert_eq!(conts_of(&a, min), [(block, 256)]);
        assert_eq!(conts_of(&a, block), [(block, 256)]);
        // The last block is followed by at most 250 more (`maxLength` - 5 = 127·256 + 250).
        let rest = rule_named(&a, "r5_chars");
        assert_eq!(conts_of(&a, last), [(rest, 0)]);
        assert_eq!(a.conts.len(), 3);
        assert!(!a.has_cont(a.grammar().root.0) && a.has_cont(block));
        let a = automata(r#"{"type":"array","items":{"type":"string","maxLength":300}}"#);
        assert!(a.conts.is_empty());
    }
}
