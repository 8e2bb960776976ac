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
        let nc = self.n_classes;
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
                let (rowp, rowq) =
                    (&self.trans[p as usize * nc..][..nc], &self.trans[q as usize * nc..][..nc]);
                // Neighbouring classes mostly lead to the same pair: push it once per run
                // (the `seen` set drops the remaining repeats).
                let mut last = (DEAD, DEAD);
                for (&a, &b) in rowp.iter().zip(rowq) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::Grammar;

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
        assert!(a.agreement_depth(s, t, 64, 3) < 37);
    }
}
