//! Bounded equivalence of states: do two states behave alike on every input of at most
//! `depth` bytes?
//!
//! A token mask only looks `max token length` bytes ahead, so states that agree that far
//! have the same mask even when the automata tell them apart later. The typical case is a
//! long counted repetition — a JSON string with `maxLength: 2000` is a chain of 2,000
//! states, one per character — where every position at least a token's length from the
//! end has the same mask. The compiler computes one of them and shares it. Nearer the
//! end, consecutive positions still agree on every token shorter than the room left, so
//! only the longer tokens are walked (`StateMask::compute_beyond`).

use super::{Automata, DEAD};
use rustc_hash::FxHashSet;

impl Automata {
    /// How far states `s` and `t` agree: the largest `n ≤ depth` such that along every
    /// path of fewer than `n` bytes the paired states are equal, or belong to the same
    /// rule, are both final or both not, read the same byte classes and call the same
    /// rules — so a token of at most `n` bytes is classified alike from both. Rule edges
    /// pair their targets one byte deeper when the rule cannot be empty (it consumes at
    /// least one byte), at the same depth otherwise. Past `max_pairs` pairs the answer is
    /// the depth checked in full so far.
    pub(crate) fn agreement_depth(&self, s: u32, t: u32, depth: usize, max_pairs: usize) -> usize {
        match self.chain_agreement(s, t) {
            Some(n) => n.min(depth),
            None => self.walked_agreement(s, t, depth, max_pairs),
        }
    }

    /// [`Automata::agreement_depth`] by walking pairs of states.
    fn walked_agreement(&self, s: u32, t: u32, depth: usize, max_pairs: usize) -> usize {
        let mut seen: FxHashSet<(u32, u32)> = FxHashSet::default();
        let mut level = vec![(s, t)];
        for n in 0..depth {
            if level.is_empty() {
                return depth;
            }
            let mut next = Vec::new();
            let mut i = 0;
            while i < level.len() {
                let (p, q) = level[i];
                i += 1;
                if p == q || !seen.insert((p, q)) {
                    continue;
                }
                if seen.len() > max_pairs {
                    return n;
                }
                let (np, nq) = (self.nodes[p as usize], self.nodes[q as usize]);
                if np.rule != nq.rule || np.is_final != nq.is_final {
                    return n;
                }
                let (ep, eq) = (self.edges(p), self.edges(q));
                if ep.len() != eq.len() {
                    return n;
                }
                for (&(rp, tp), &(rq, tq)) in ep.iter().zip(eq) {
                    if rp != rq {
                        return n;
                    }
                    if self.nullable[rp as usize] {
                        level.push((tp, tq));
                    } else {
                        next.push((tp, tq));
                    }
                }
                let (rowp, rowq) = (self.row(p), self.row(q));
                // Neighbouring classes mostly lead to the same pair: push it once per run
                // (the `seen` set drops the remaining repeats).
                let mut last = (DEAD, DEAD);
                for (a, b) in rowp.iter().zip(rowq.iter()) {
                    if (a == DEAD) != (b == DEAD) {
                        return n;
                    }
                    if a != b && (a, b) != last {
                        last = (a, b);
                        next.push((a, b));
                    }
                }
            }
            // Pairs first reached one byte deeper: checked in the next round, if any.
            level = next;
        }
        depth
    }
}

impl Automata {
    /// Where `s` lies in a spliced repetition, if it is one of its positions: the chain
    /// (an index into `chains`) and `k`, the copies written (`1..=max`).
    pub(crate) fn chain_position(&self, s: u32) -> Option<(usize, u32)> {
        let rule = self.nodes.get(s as usize)?.rule;
        let i = self.chains.binary_search_by_key(&rule, |c| c.0).ok()?;
        let l = &self.chains[i].1;
        (l.positions..l.positions + l.max).contains(&s).then(|| (i, s - l.positions + 1))
    }

    /// The same state `back` copies earlier in its spliced repetition, if any (positions
    /// from 1, copies from 0).
    pub(crate) fn earlier_copy(&self, s: u32, back: u32) -> Option<u32> {
        let rule = self.nodes.get(s as usize)?.rule;
        let i = self.chains.binary_search_by_key(&rule, |c| c.0).ok()?;
        let l = &self.chains[i].1;
        if (l.positions..l.positions + l.max).contains(&s) {
            return (s - l.positions >= back).then(|| s - back);
        }
        let k = s.checked_sub(l.inner)?;
        let step = back.checked_mul(l.to_end.len() as u32)?;
        (k < l.max * l.to_end.len() as u32 && k >= step).then(|| s - step)
    }

    /// [`Automata::agreement_depth`] of two copies of the same state of a spliced
    /// repetition, read off its layout instead of walked (the walk visits every pair of
    /// states a token's length apart: for a JSON character, a few thousand pairs per
    /// position, so it gave up before a long string's positions were found alike).
    ///
    /// Positions `a < b` (copies written) behave alike until a later join tells them
    /// apart: `b` reaches `max` copies first, after `max - b` more, or only `b` may leave
    /// the repetition, which happens once `b` reaches `min`. A join `j` copies on is
    /// reached after at least `j` copies' worth of bytes. Inner states add the bytes left
    /// in their copy. `None` when the two are not such a pair.
    fn chain_agreement(&self, s: u32, t: u32) -> Option<usize> {
        let rule = self.nodes.get(s as usize)?.rule;
        if s == t || self.nodes.get(t as usize)?.rule != rule {
            return None;
        }
        let i = self.chains.binary_search_by_key(&rule, |c| c.0).ok()?;
        let l = &self.chains[i].1;
        let n = l.to_end.len() as u32;
        // (copies written at the next join, bytes before it)
        let place = |q: u32| -> Option<(u32, u32, Option<u32>)> {
            if (l.positions..l.positions + l.max).contains(&q) {
                return Some((q - l.positions + 1, 0, None));
            }
            let k = q.checked_sub(l.inner)?;
            (n > 0 && k < l.max * n).then(|| (k / n + 1, l.to_end[(k % n) as usize], Some(k % n)))
        };
        let ((ka, da, ia), (kb, db, ib)) = (place(s)?, place(t)?);
        if ia != ib {
            return None;
        }
        debug_assert_eq!(da, db);
        let (lo, hi) = (ka.min(kb), ka.max(kb));
        let joins = (l.max - hi).min(if lo < l.min { l.min.saturating_sub(hi) } else { u32::MAX });
        Some(da as usize + joins as usize * l.link_bytes as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::Grammar;

    /// The layout of a spliced repetition gives exactly what walking the pairs gives, for
    /// every pair of copies of a state (positions and inner states), near `min`, `max` and
    /// far from both, with multi-byte links.
    #[test]
    fn chain_layouts_agree_with_walking() {
        let grammars = [
            r#"root ::= "<" [a-z]{0,40} ">""#,
            r#"root ::= "\"" ([ -!#-\[\]-\U0010ffff] | "\\" ["\\/bfnrt] | "\\u" [0-9a-f]{4}){3,30} "\"""#,
            r#"root ::= "[" ("xy" | "z") (", " ("xy" | "z")){6,25} "]""#,
            r#"root ::= "k" [0-9]{12,12} "!""#,
        ];
        for ebnf in grammars {
            let a = Automata::build(&Grammar::from_ebnf(ebnf).unwrap(), &Default::default()).unwrap();
            assert_eq!(a.chains.len(), 1, "{ebnf}: not spliced");
            let n = a.num_states() as u32;
            let mut compared = 0;
            for s in 0..n {
                for t in 0..n {
                    if let Some(k) = a.chain_agreement(s, t) {
                        assert_eq!(k.min(500), a.walked_agreement(s, t, 500, usize::MAX), "{ebnf}: {s} {t}");
                        compared += 1;
                    }
                }
            }
            assert!(compared > 100, "{ebnf}: {compared} pairs");
        }
    }

    #[test]
    fn chain_positions_agree_up_to_the_room_left() {
        let g = Grammar::from_ebnf(r#"root ::= "<" [a-z]{0,40} ">""#).unwrap();
        let a = Automata::build(&g, &Default::default()).unwrap();
        // After "<" + i letters, 40 - i more may come, then ">": positions i and i + 1
        // differ first on an input of 40 - i letters (one side may still read a letter).
        for i in [0usize, 5, 20, 38] {
            let s = a.after(&[b"<".as_slice(), &vec![b'a'; i]].concat());
            let t = a.after(&[b"<".as_slice(), &vec![b'a'; i + 1]].concat());
            assert_eq!(a.agreement_depth(s, t, 64, 4096), 39 - i, "position {i}");
            assert_eq!(a.agreement_depth(s, t, 8, 4096), 8.min(39 - i));
        }
        // Equal states agree everywhere; the pair limit cuts the answer short.
        let s = a.after(b"<ab");
        assert_eq!(a.agreement_depth(s, s, 64, 4096), 64);
        let t = a.after(b"<abc");
        assert!(a.walked_agreement(s, t, 64, 3) < 37);
    }
}
