//! Where the masks of two states of one rule can differ, as subtrees of the token trie.
//!
//! [`Automata::agreement_depth`] answers "up to which token length do two states agree";
//! that is all or nothing per length. Indentation positions (`"\n" [ \t]{0,20}` after
//! 3 and after 9 spaces) agree to a depth of only a dozen bytes, yet differ on nothing
//! but the tokens that are long runs of blanks: every other path leaves the blanks and
//! lands in the *same* state from both. Walking the trie with the pair of states finds
//! exactly those subtrees, so the second position takes the first one's mask and
//! classifies a few dozen tokens instead of every token longer than the agreement depth.
//!
//! A path is settled (its tokens classify alike from both states) once the pair becomes
//! one state, or both sides die on the same byte, provided every pair met on the way
//! agrees locally: same rule, both final or both not (so the rule completes at the same
//! places, into the same context), and the same rule edges with the same targets (so
//! what the callees read continues alike). Where a pair does not agree locally, its
//! whole subtree is left to the walk.

use crate::automata::{Automata, DEAD};
use crate::tokenizer::{TokenTrie, END_OF_SIBLINGS};

/// Whether `p` and `q` behave alike at the current position, apart from their own byte
/// transitions (which the trie walk follows).
fn local_agree(a: &Automata, p: u32, q: u32) -> bool {
    let (np, nq) = (a.nodes[p as usize], a.nodes[q as usize]);
    np.rule == nq.rule && np.is_final == nq.is_final && a.edges(p) == a.edges(q)
}

/// The trie subtrees (node ranges `k..subtree_end`, ascending) outside which states `s`
/// and `t` classify every token alike, with the number of tokens in them; `None` when
/// the states differ at the root, or the walk would visit more than `max_nodes` trie
/// nodes or find more than `max_tokens` tokens to classify.
pub(crate) fn divergent_subtrees(
    a: &Automata,
    trie: &TokenTrie,
    (s, t): (u32, u32),
    max_nodes: usize,
    max_tokens: usize,
) -> Option<(Vec<(u32, u32)>, usize)> {
    if !local_agree(a, s, t) {
        return None;
    }
    let nodes = &trie.nodes;
    if nodes.is_empty() {
        return Some((Vec::new(), 0));
    }
    // Sibling groups are read from the dense sibling arrays (a node is loaded only to
    // find its children's group): most groups settle on their first byte, and loading
    // the first node of every root subtree would cost a cache miss each.
    // Stack: (entry of the next sibling to read, the pair before its byte).
    let mut stack = vec![(nodes[0].sib as usize, (s, t))];
    let mut out = Vec::new();
    let (mut visited, mut tokens) = (0usize, 0usize);
    while let Some((mut i, (p, q))) = stack.pop() {
        while trie.sib_byte[i] != END_OF_SIBLINGS {
            visited += 1;
            if visited > max_nodes {
                return None;
            }
            let (node, end) = (trie.sib_node[i], trie.sib_node[i + 1]);
            let class = a.byte_class[trie.sib_byte[i] as usize] as usize;
            let (x, y) = (a.next(p, class), a.next(q, class));
            i += 1;
            if x == y {
                // One state (or both dead on this byte: the callees and the completed
                // rule's context, alike on both sides, read it).
                continue;
            }
            if x == DEAD || y == DEAD || !local_agree(a, x, y) {
                tokens += (trie.sib_rank[i] - trie.sib_rank[i - 1]) as usize;
                if tokens > max_tokens {
                    return None;
                }
                out.push((node, end));
                continue;
            }
            if end > node + 1 {
                // Children first (the output stays in node order), then the siblings.
                stack.push((i, (p, q)));
                stack.push((nodes[node as usize + 1].sib as usize, (x, y)));
                break;
            }
        }
    }
    Some((out, tokens))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::Grammar;
    use crate::tokenizer::{TokenizerInfo, TokenizerOptions};

    #[test]
    fn indentation_positions_differ_only_on_long_blank_runs() {
        let vocab: Vec<Vec<u8>> = [" ", "  ", "    ", "       ", " \"a", "\"", "]", "abc", " ]", "     ]"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let tok = TokenizerInfo::from_byte_tokens(vocab, &TokenizerOptions::default()).unwrap();
        let trie = tok.trie();
        let g = Grammar::from_ebnf(r#"root ::= "[" "\n" [ \t]{0,8} ("\"a" | "]")"#).unwrap();
        let a = Automata::build(&g, &Default::default()).unwrap();
        let at = |n: usize| a.after(format!("[\n{}", " ".repeat(n)).as_bytes());
        let tokens_in = |subtrees: &[(u32, u32)]| -> Vec<String> {
            let mut v: Vec<String> = subtrees
                .iter()
                .flat_map(|&(k, e)| (k..e).map(|n| trie.nodes[n as usize].tokens))
                .flat_map(|(lo, hi)| lo..hi)
                .map(|r| String::from_utf8(tok.token_bytes(trie.token_ids[r as usize]).to_vec()).unwrap())
                .collect();
            v.sort();
            v
        };
        // After 2 and after 5 blanks: 6 and 3 more may come. Runs of up to 3 blanks
        // (then anything) agree; 4 blanks, 7 blanks and "     ]" (5 blanks then "]")
        // sit at or below the 4-blank prefix, where position 5's side dies.
        let (d, n) = divergent_subtrees(&a, trie, (at(2), at(5)), 1000, 100).unwrap();
        assert_eq!(n, 3);
        assert_eq!(tokens_in(&d), ["    ", "       ", "     ]"]);
        // One state: nothing to walk.
        assert_eq!(divergent_subtrees(&a, trie, (at(3), at(3)), 1000, 100).unwrap().0, []);
        // The budgets.
        assert_eq!(divergent_subtrees(&a, trie, (at(2), at(5)), 1, 100), None);
        assert_eq!(divergent_subtrees(&a, trie, (at(2), at(5)), 1000, 2), None);
    }
}
