//! Bounded equivalence of states: do two states behave alike on every input of at most
//! `depth` bytes?
//!
//! A token mask only looks `max token length` bytes ahead, so states that agree that far
//! have the same mask even when the automata tell them apart later. The typical case is a
//! long counted repetition — a JSON string with `maxLength: 2000` is a chain of 2,000
//! states, one per character — where every position at least a token's length from the
//! end has the same mask. The compiler computes one of them and shares it.

use super::{Automata, DEAD};
use rustc_hash::FxHashSet;

impl Automata {
    /// Whether states `s` and `t` agree on all inputs of fewer than `depth` bytes: along
    /// every path the paired states are equal, or belong to the same rule, are both final
    /// or both not, read the same byte classes and call the same rules. Rule edges pair
    /// their targets one byte deeper when the rule cannot be empty (it consumes at least
    /// one byte), at the same depth otherwise. Gives up (`false`) after `max_pairs` pairs.
    pub(crate) fn agree_within(&self, s: u32, t: u32, depth: usize, max_pairs: usize) -> bool {
        let nc = self.n_classes;
        let mut seen: FxHashSet<(u32, u32)> = FxHashSet::default();
        let mut level = vec![(s, t)];
        for _ in 0..depth {
            if level.is_empty() {
                return true;
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
                    return false;
                }
                let (np, nq) = (self.nodes[p as usize], self.nodes[q as usize]);
                if np.rule != nq.rule || np.is_final != nq.is_final {
                    return false;
                }
                let (ep, eq) = (self.edges(p), self.edges(q));
                if ep.len() != eq.len() {
                    return false;
                }
                for (&(rp, tp), &(rq, tq)) in ep.iter().zip(eq) {
                    if rp != rq {
                        return false;
                    }
                    if self.nullable[rp as usize] {
                        level.push((tp, tq));
                    } else {
                        next.push((tp, tq));
                    }
                }
                let (rowp, rowq) =
                    (&self.trans[p as usize * nc..][..nc], &self.trans[q as usize * nc..][..nc]);
                for (&a, &b) in rowp.iter().zip(rowq) {
                    if (a == DEAD) != (b == DEAD) {
                        return false;
                    }
                    if a != b {
                        next.push((a, b));
                    }
                }
            }
            // Pairs first reached one byte deeper: checked in the next round, if any.
            level = next;
        }
        true
    }
}
