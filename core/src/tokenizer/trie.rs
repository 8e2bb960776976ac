//! The vocabulary sorted by bytes, as a flattened trie.
//!
//! Nodes are stored in depth-first preorder, one per distinct token prefix. Node `k`'s
//! subtree is the contiguous range `k..subtree_end[k]`, so a walk that finds a prefix
//! impossible skips every token below it with one jump. Sorting puts tokens sharing a
//! prefix next to each other, so a parser walking the trie only pushes the bytes that
//! differ from the previous token and pops back to the common prefix.

/// One trie node: the prefix ending in `byte` at `depth`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TrieNode {
    /// Last byte of the prefix.
    pub byte: u8,
    /// Length of the prefix (1 for children of the implicit root).
    pub depth: u32,
    /// One past the last node of this subtree.
    pub subtree_end: u32,
    /// Tokens whose bytes are exactly this prefix: `token_ids[tokens.0..tokens.1]`.
    pub tokens: (u32, u32),
}

/// Flattened byte trie over the producible tokens.
#[derive(Debug, Default)]
pub(crate) struct TokenTrie {
    pub nodes: Vec<TrieNode>,
    pub token_ids: Vec<u32>,
    /// Longest token, in bytes.
    pub max_depth: usize,
}

impl TokenTrie {
    /// Builds the trie over the tokens for which `keep(id)` holds (empty tokens are skipped).
    pub fn build(tokens: &[Vec<u8>], keep: impl Fn(usize) -> bool) -> Self {
        let mut order: Vec<u32> =
            (0..tokens.len()).filter(|&i| keep(i) && !tokens[i].is_empty()).map(|i| i as u32).collect();
        order.sort_by(|&a, &b| tokens[a as usize].cmp(&tokens[b as usize]).then(a.cmp(&b)));
        let mut trie = TokenTrie::default();
        // stack[d] = node index of the prefix of length d + 1 on the current path.
        let mut stack: Vec<u32> = Vec::new();
        let mut prev: &[u8] = &[];
        for &id in &order {
            let t = tokens[id as usize].as_slice();
            let lcp = t.iter().zip(prev).take_while(|(a, b)| a == b).count();
            while stack.len() > lcp {
                if let Some(k) = stack.pop() {
                    trie.nodes[k as usize].subtree_end = trie.nodes.len() as u32;
                }
            }
            for (d, &b) in t.iter().enumerate().skip(lcp) {
                stack.push(trie.nodes.len() as u32);
                let n = trie.token_ids.len() as u32;
                trie.nodes.push(TrieNode { byte: b, depth: d as u32 + 1, subtree_end: 0, tokens: (n, n) });
            }
            if let Some(&k) = stack.last() {
                trie.token_ids.push(id);
                trie.nodes[k as usize].tokens.1 = trie.token_ids.len() as u32;
            }
            trie.max_depth = trie.max_depth.max(t.len());
            prev = t;
        }
        while let Some(k) = stack.pop() {
            trie.nodes[k as usize].subtree_end = trie.nodes.len() as u32;
        }
        trie
    }

    /// Token ids whose bytes equal node `k`'s prefix.
    pub fn tokens_at(&self, k: usize) -> &[u32] {
        let (a, b) = self.nodes[k].tokens;
        &self.token_ids[a as usize..b as usize]
    }

    /// Token ids in the subtree of node `k` (all tokens with `k`'s prefix).
    #[cfg(test)]
    pub fn tokens_below(&self, k: usize) -> &[u32] {
        let a = self.nodes[k].tokens.0 as usize;
        let end = self.nodes[k].subtree_end as usize;
        let b = if end < self.nodes.len() { self.nodes[end].tokens.0 as usize } else { self.token_ids.len() };
        &self.token_ids[a..b]
    }

    pub fn memory_bytes(&self) -> usize {
        self.nodes.len() * std::mem::size_of::<TrieNode>() + self.token_ids.len() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preorder_ranges() {
        let toks: Vec<Vec<u8>> =
            ["ab", "a", "b", "abc", "ab", "ba"].iter().map(|s| s.as_bytes().to_vec()).collect();
        let t = TokenTrie::build(&toks, |_| true);
        // a, ab, abc, b, ba
        let bytes: Vec<u8> = t.nodes.iter().map(|n| n.byte).collect();
        assert_eq!(bytes, b"abcba");
        assert_eq!(t.tokens_at(1), &[0, 4]);
        assert_eq!(t.nodes[0].subtree_end, 3);
        let mut below = t.tokens_below(0).to_vec();
        below.sort();
        assert_eq!(below, vec![0, 1, 3, 4]);
        assert_eq!(t.tokens_below(3), &[2, 5]);
    }
}
