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
    /// This node's entry in [`TokenTrie::sib_byte`] (kept here: the walk reads it with
    /// the node, where a separate array would cost a cache miss of its own).
    pub sib: u32,
}

/// Flattened byte trie over the producible tokens.
#[derive(Debug, Default)]
pub(crate) struct TokenTrie {
    pub nodes: Vec<TrieNode>,
    pub token_ids: Vec<u32>,
    /// Longest token, in bytes.
    pub max_depth: usize,
    /// Per node: the longest token in its subtree, in bytes (a walk that needs only the
    /// tokens longer than some length skips the subtrees below it).
    pub deepest: Vec<u32>,
    /// `longer[n]`: how many tokens have more than `n` bytes.
    longer: Vec<u32>,
    /// Every rank, the longest tokens first (ties in rank order): the tokens of more than
    /// `n` bytes are its first `longer[n]` entries.
    by_length: Vec<u32>,
    /// Sibling bytes: the children of each node (and the one-byte prefixes) lie together,
    /// in byte order, each group ended by an [`END_OF_SIBLINGS`] entry standing for the
    /// node after the group ([`TrieNode::sib`] is a node's entry). A walk that rejects a
    /// node scans the bytes of the siblings after it here, a dense array, instead of
    /// jumping from subtree to subtree through the node array (a cache miss per sibling,
    /// and most siblings die on their byte: a chess move reads a dozen of the hundreds of
    /// bytes after `a`).
    pub sib_byte: Vec<u16>,
    /// The node of each `sib_byte` entry (for an end entry: the node after the group).
    pub sib_node: Vec<u32>,
    /// The rank of the first token at or after each entry's node: a subtree's tokens are
    /// `sib_rank[i]..sib_rank[i + 1]`, read without touching the node after it.
    pub sib_rank: Vec<u32>,
    /// Every token's bytes in rank order ([`Self::bytes_of`]). The matcher's run-time
    /// checks read uncertain tokens in rank order, usually whole runs of neighbours: laid
    /// out by id, each token cost a cache miss or two on a fill's first visit (20–50 µs
    /// for the ~120 tokens after a string's opening quote), laid out by rank they share
    /// cache lines.
    rank_bytes: Vec<u8>,
    /// `rank_ends[r]`: end of rank `r`'s bytes in `rank_bytes` (it starts where `r - 1` ends).
    rank_ends: Vec<u32>,
    /// Per rank: how many of its bytes start a UTF-8 character (all but continuation
    /// bytes). Read from a character boundary, a token's tail of clean bytes starts this
    /// many characters less those of its head: how far it moves along a chain of
    /// one-character positions (a JSON string with `maxLength`).
    pub char_starts: Vec<u16>,
    /// [`TokenTrie::whole_siblings`] bitsets already built, by byte set (plain sets).
    whole_plain: TableCache<u64>,
    /// The same, by ASCII byte set, for states that also loop on every UTF-8 character.
    whole_utf8: TableCache<u64>,
}

/// Ends a group of siblings in [`TokenTrie::sib_byte`] (no byte has this value).
pub(crate) const END_OF_SIBLINGS: u16 = 0x100;

/// The first position at or after `i` whose bit is clear in `bits` (bit `i` of word
/// `i / 64`); positions past the end count as clear.
#[inline]
pub(crate) fn first_clear_bit(bits: &[u64], i: usize) -> usize {
    let (mut w, shift) = (i / 64, i % 64);
    // The positions below `i` in the first word count as set.
    let mut word = bits.get(w).copied().unwrap_or(0) | ((1u64 << shift) - 1);
    while word == u64::MAX {
        w += 1;
        word = bits.get(w).copied().unwrap_or(0);
    }
    w * 64 + word.trailing_ones() as usize
}

/// Per-byte-set tables, built on first use.
type TableCache<T> = std::sync::Mutex<Vec<([u64; 4], std::sync::Arc<[T]>)>>;

/// Most byte sets whose [`TokenTrie::whole_siblings`] tables are kept (string bodies, comments and the like: a grammar family uses a
/// handful; a server compiling many schemas sees more, so the least recently used goes).
const OUTSIDE_CACHE: usize = 32;

/// The table for `set`, from `cache` or built now and kept, evicting the least recently
/// used one when full. (Not keeping it when full, as before, rebuilt a 1.6 MB table on
/// every use once a long-running compiler had seen 32 sets: seconds per mask.)
fn cached_table<T>(
    cache: &TableCache<T>,
    set: &[u64; 4],
    build: impl FnOnce() -> Vec<T>,
) -> std::sync::Arc<[T]> {
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = cache.iter().position(|(s, _)| s == set) {
        let entry = cache.remove(i);
        let table = entry.1.clone();
        cache.push(entry);
        return table;
    }
    let table: std::sync::Arc<[T]> = build().into();
    if cache.len() >= OUTSIDE_CACHE {
        cache.remove(0);
    }
    cache.push((*set, table.clone()));
    table
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
                trie.nodes.push(TrieNode {
                    byte: b,
                    depth: d as u32 + 1,
                    subtree_end: 0,
                    tokens: (n, n),
                    sib: 0,
                });
            }
            if let Some(&k) = stack.last() {
                trie.token_ids.push(id);
                trie.rank_bytes.extend_from_slice(t);
                trie.rank_ends.push(trie.rank_bytes.len() as u32);
                trie.nodes[k as usize].tokens.1 = trie.token_ids.len() as u32;
            }
            trie.max_depth = trie.max_depth.max(t.len());
            prev = t;
        }
        while let Some(k) = stack.pop() {
            trie.nodes[k as usize].subtree_end = trie.nodes.len() as u32;
        }
        // Children come after their parent: fold the subtrees bottom-up.
        trie.deepest = vec![0; trie.nodes.len()];
        for k in (0..trie.nodes.len()).rev() {
            let n = trie.nodes[k];
            let mut deepest = if n.tokens.0 < n.tokens.1 { n.depth } else { 0 };
            let mut c = k + 1;
            while c < n.subtree_end as usize {
                deepest = deepest.max(trie.deepest[c]);
                c = trie.nodes[c].subtree_end as usize;
            }
            trie.deepest[k] = deepest;
        }
        trie.longer = vec![0; trie.max_depth + 1];
        let mut length = vec![0u32; trie.token_ids.len()];
        for n in &trie.nodes {
            for len in 0..n.depth as usize {
                trie.longer[len] += n.tokens.1 - n.tokens.0;
            }
            length[n.tokens.0 as usize..n.tokens.1 as usize].fill(n.depth);
        }
        trie.char_starts = (0..trie.token_ids.len() as u32)
            .map(|r| trie.bytes_of(r).iter().filter(|&&b| b & 0xC0 != 0x80).count() as u16)
            .collect();
        trie.by_length = (0..trie.token_ids.len() as u32).collect();
        trie.by_length.sort_by_key(|&r| std::cmp::Reverse(length[r as usize]));
        trie.group_siblings();
        trie
    }

    /// Lays out [`Self::sib_byte`] / [`Self::sib_node`] / [`Self::sib_rank`]: the one-byte
    /// prefixes first, then the children of each node with any, in preorder.
    fn group_siblings(&mut self) {
        let n = self.nodes.len();
        let group = |first: usize, end: usize, trie: &mut TokenTrie| {
            let mut c = first;
            while c < end {
                trie.nodes[c].sib = trie.sib_byte.len() as u32;
                trie.sib_byte.push(trie.nodes[c].byte as u16);
                trie.sib_node.push(c as u32);
                c = trie.nodes[c].subtree_end as usize;
            }
            trie.sib_byte.push(END_OF_SIBLINGS);
            trie.sib_node.push(end as u32);
        };
        group(0, n, self);
        for k in 0..n {
            let end = self.nodes[k].subtree_end as usize;
            if end > k + 1 {
                group(k + 1, end, self);
            }
        }
        let rank_at = |k: u32| self.nodes.get(k as usize).map_or(self.token_ids.len() as u32, |n| n.tokens.0);
        self.sib_rank = self.sib_node.iter().map(|&k| rank_at(k)).collect();
    }

    /// The first sibling after node `k` (in byte order) whose byte satisfies `stop`, or the
    /// node after the last sibling, with the rank of its first token: the walk jumps there
    /// over siblings that all die alike, their tokens being the ranks up to that one.
    #[inline]
    pub fn next_sibling_where(&self, k: usize, mut stop: impl FnMut(u8) -> bool) -> (usize, u32) {
        let mut i = self.nodes[k].sib as usize + 1;
        loop {
            let b = self.sib_byte[i];
            if b == END_OF_SIBLINGS || stop(b as u8) {
                return (self.sib_node[i] as usize, self.sib_rank[i]);
            }
            i += 1;
        }
    }

    /// The top-level subtrees grouped into at most `parts` consecutive runs holding about
    /// as many tokens each: per run, its node range and its token ranks (a walk of the
    /// whole vocabulary split between threads). Runs end only at top-level subtrees, so
    /// the split is as even as the largest one allows (the tokens after a space: about
    /// half of a byte-level vocabulary).
    pub fn top_level_parts(&self, parts: usize) -> Vec<((u32, u32), (u32, u32))> {
        let total = self.token_ids.len();
        let rank_at = |k: usize| self.nodes.get(k).map_or(total as u32, |n| n.tokens.0);
        let mut out = Vec::with_capacity(parts);
        let (mut start, mut k) = (0usize, 0usize);
        while k < self.nodes.len() {
            let end = self.nodes[k].subtree_end as usize;
            // A run closes once it reaches its share of the tokens (the last takes the rest).
            let share = total * (out.len() + 1) / parts.max(1);
            if out.len() + 1 < parts && rank_at(end) as usize >= share {
                out.push(((start as u32, end as u32), (rank_at(start), rank_at(end))));
                start = end;
            }
            k = end;
        }
        if start < self.nodes.len() || out.is_empty() {
            out.push(((start as u32, self.nodes.len() as u32), (rank_at(start), total as u32)));
        }
        out
    }

    /// Node `k`'s first later sibling whose subtree holds node `target` (which lies past
    /// `k`'s subtree), or the node after the last sibling: a walk that needs only the
    /// subtree of `target` goes there over the sibling entries, a dense array, instead of
    /// loading the first node of every sibling subtree in between.
    #[inline]
    pub fn sibling_towards(&self, k: usize, target: u32) -> usize {
        let mut i = self.nodes[k].sib as usize + 1;
        // Each sibling's subtree ends where the next entry's node begins.
        while self.sib_byte[i] != END_OF_SIBLINGS && self.sib_node[i + 1] <= target {
            i += 1;
        }
        self.sib_node[i] as usize
    }

    /// The ranks of the tokens of more than `n` bytes, longest first (ties in rank order):
    /// a mask derived from another that agrees on every shorter token only needs these
    /// ([`StateMask::compute_beyond`](crate::compiler::StateMask)). A slice of one table
    /// laid out with the trie: no per-length list to build on first use (a pass over the
    /// vocabulary, 0.1–0.3 ms here, which showed in the first fills of a process).
    pub fn ranks_longer_than(&self, n: usize) -> &[u32] {
        &self.by_length[..self.longer_than(n)]
    }

    /// How many tokens have more than `n` bytes.
    pub fn longer_than(&self, n: usize) -> usize {
        self.longer.get(n).map_or(0, |&c| c as usize)
    }

    /// The bytes of the token of rank `rank` (its position in `token_ids`).
    #[inline]
    pub fn bytes_of(&self, rank: u32) -> &[u8] {
        let r = rank as usize;
        let start = if r == 0 { 0 } else { self.rank_ends[r - 1] as usize };
        &self.rank_bytes[start..self.rank_ends[r] as usize]
    }

    /// The ranks (positions in `token_ids`) of the tokens in the subtree of node `k`:
    /// a subtree's tokens are consecutive in byte order.
    #[inline]
    pub fn ranks_below(&self, k: usize) -> (u32, u32) {
        let n = &self.nodes[k];
        (n.tokens.0, self.sib_rank[n.sib as usize + 1])
    }

    /// For a state that loops on the byte set `set`: bit `i` is set iff sibling entry `i`
    /// ([`Self::sib_byte`]) is a node whose subtree the state reads whole without leaving
    /// it — every byte in `set` or, with `utf8`, every byte in the ASCII set `set` or part
    /// of a well-formed UTF-8 encoding of a non-ASCII scalar value other than a surrogate
    /// (a token may end inside one; a JSON string body loops on all of them). End entries
    /// are clear, so a run of set bits is a run of siblings the walk accepts at once
    /// ([`first_clear_bit`]): one bit per entry (~50 KB for a 128k vocabulary) instead of
    /// a node and a table entry loaded per sibling. Built once per tokenizer and set.
    pub fn whole_siblings(&self, set: &[u64; 4], utf8: bool) -> std::sync::Arc<[u64]> {
        // Built in one pass over the nodes in order (a pass over the sibling entries would
        // load their nodes in random order: a cache miss each, ~10 ms per set).
        let words = self.sib_byte.len().div_ceil(64);
        let mark = |bits: &mut [u64], k: usize| {
            let i = self.nodes[k].sib as usize;
            bits[i / 64] |= 1 << (i % 64);
        };
        if utf8 {
            cached_table(&self.whole_utf8, set, || {
                let clean = self.build_clean(set);
                let mut bits = vec![0u64; words];
                for k in (0..self.nodes.len()).filter(|&k| clean[k / 64] >> (k % 64) & 1 == 1) {
                    mark(&mut bits, k);
                }
                bits
            })
        } else {
            cached_table(&self.whole_plain, set, || {
                let mut bits = vec![0u64; words];
                // `at`: the first node at or after `k` whose byte is outside the set.
                let mut at = self.nodes.len() as u32;
                for k in (0..self.nodes.len()).rev() {
                    let node = &self.nodes[k];
                    if set[node.byte as usize / 64] >> (node.byte % 64) & 1 == 0 {
                        at = k as u32;
                    }
                    if at >= node.subtree_end {
                        mark(&mut bits, k);
                    }
                }
                bits
            })
        }
    }

    /// Node-level [`Self::whole_siblings`] with `utf8`: bit `k` is set iff node `k`'s
    /// subtree, read from a character boundary, is clean.
    fn build_clean(&self, set: &[u64; 4]) -> Vec<u64> {
        // clean[k]: bit p set iff the subtree of k is clean when entered in phase p.
        let n = self.nodes.len();
        let mut clean = vec![0u8; n];
        let mut bits = vec![0u64; n.div_ceil(64)];
        for k in (0..n).rev() {
            let node = self.nodes[k];
            let mut children = 0xFFu8;
            let mut c = k + 1;
            while c < node.subtree_end as usize {
                children &= clean[c];
                c = self.nodes[c].subtree_end as usize;
            }
            let mut here = 0u8;
            for p in 0..utf8::PHASES {
                let next = if p == utf8::BOUNDARY && node.byte < 0x80 {
                    (set[node.byte as usize / 64] >> (node.byte % 64) & 1 == 1).then_some(utf8::BOUNDARY)
                } else {
                    utf8::step(p, node.byte)
                };
                if next.is_some_and(|q| children >> q & 1 == 1) {
                    here |= 1 << p;
                }
            }
            clean[k] = here;
            if here & 1 << utf8::BOUNDARY != 0 {
                bits[k / 64] |= 1 << (k % 64);
            }
        }
        bits
    }

    pub fn memory_bytes(&self) -> usize {
        self.nodes.len() * std::mem::size_of::<TrieNode>()
            + self.token_ids.len() * 4
            + self.deepest.len() * 4
            + self.by_length.len() * 4
            + self.sib_byte.len() * 10
            + self.rank_bytes.len()
            + self.rank_ends.len() * 4
    }
}

/// UTF-8 well-formedness as a byte automaton over "phases" (RFC 3629 table 3-7, without
/// surrogates), shared by [`TokenTrie::whole_siblings`] and the mask compiler's check that
/// a DFA state accepts every non-ASCII character.
pub(crate) mod utf8 {
    /// At a character boundary.
    pub const BOUNDARY: u8 = 0;
    /// Number of phases.
    pub const PHASES: u8 = 8;
    // 1..=3: that many continuation bytes (80–BF) left; 4..=7: the constrained second
    // byte after E0 (A0–BF), ED (80–9F), F0 (90–BF), F4 (80–8F).

    /// The phase after non-ASCII-aware byte `b` in phase `p` (`None`: ill-formed). ASCII
    /// bytes at a boundary are the caller's business (they return `None` here).
    pub fn step(p: u8, b: u8) -> Option<u8> {
        let cont = (0x80..=0xBF).contains(&b);
        match p {
            BOUNDARY => match b {
                0xC2..=0xDF => Some(1),
                0xE0 => Some(4),
                0xE1..=0xEC | 0xEE..=0xEF => Some(2),
                0xED => Some(5),
                0xF0 => Some(6),
                0xF1..=0xF3 => Some(3),
                0xF4 => Some(7),
                _ => None,
            },
            1..=3 => cont.then_some(p - 1),
            4 => (0xA0..=0xBF).contains(&b).then_some(1),
            5 => (0x80..=0x9F).contains(&b).then_some(1),
            6 => (0x90..=0xBF).contains(&b).then_some(2),
            7 => (0x80..=0x8F).contains(&b).then_some(2),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_set_tables_stay_cached_after_many_sets() {
        let toks: Vec<Vec<u8>> = ["ab", "a", "b", "abc"].iter().map(|s| s.as_bytes().to_vec()).collect();
        let t = TokenTrie::build(&toks, |_| true);
        let set = |i: usize| [i as u64 + 1, 0, 0, 0];
        // Far more sets than the cache holds: each new one is still kept (the least
        // recently used goes), so its second use is the same table, not a rebuild.
        for i in 0..3 * OUTSIDE_CACHE {
            let (a, b) = (t.whole_siblings(&set(i), false), t.whole_siblings(&set(i), false));
            assert!(std::sync::Arc::ptr_eq(&a, &b), "set {i}");
            let (a, b) = (t.whole_siblings(&set(i), true), t.whole_siblings(&set(i), true));
            assert!(std::sync::Arc::ptr_eq(&a, &b), "set {i}");
        }
        // A set in steady use survives the churn.
        let hot = t.whole_siblings(&set(0), false);
        for i in 1..2 * OUTSIDE_CACHE {
            t.whole_siblings(&set(1000 + i), false);
            assert!(std::sync::Arc::ptr_eq(&hot, &t.whole_siblings(&set(0), false)));
        }
        assert!(t.whole_plain.lock().unwrap().len() <= OUTSIDE_CACHE);
    }

    #[test]
    fn rank_bytes_are_each_ranks_token() {
        let toks: Vec<Vec<u8>> =
            ["ab", "a", "", "b", "abc", "ab", "\u{ff}", "ba"].iter().map(|s| s.as_bytes().to_vec()).collect();
        let t = TokenTrie::build(&toks, |id| id != 3);
        assert_eq!(t.token_ids.len(), 6, "the empty token and the filtered one are left out");
        for (r, &id) in t.token_ids.iter().enumerate() {
            assert_eq!(t.bytes_of(r as u32), toks[id as usize].as_slice(), "rank {r}");
        }
    }

    #[test]
    fn siblings_are_scanned_in_byte_order_to_the_group_end() {
        let toks: Vec<Vec<u8>> = ["ab", "a", "b", "abc", "ac", "ad", "ba", "d", "x"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let t = TokenTrie::build(&toks, |_| true);
        // Preorder: 0 a, 1 ab, 2 abc, 3 ac, 4 ad, 5 b, 6 ba, 7 d, 8 x.
        let bytes = |k: usize| t.nodes[k].byte;
        assert_eq!((0..9).map(bytes).collect::<Vec<_>>(), b"abccdbadx");
        // Children of `a`: ab, ac, ad; past the last one comes `b`, the node after `a`'s subtree.
        assert_eq!(t.next_sibling_where(1, |b| b == b'd'), (4, 4));
        assert_eq!(t.next_sibling_where(1, |_| false), (5, 5));
        assert_eq!(t.next_sibling_where(4, |_| true), (5, 5));
        // One-byte prefixes: a, b, d, x, then the end of the trie.
        assert_eq!(t.next_sibling_where(0, |b| b == b'x'), (8, 8));
        assert_eq!(t.next_sibling_where(5, |_| false), (t.nodes.len(), 9));
        assert_eq!(t.next_sibling_where(0, |b| b == b'c'), (t.nodes.len(), 9));
        // The only child of `ab` and of `b`.
        assert_eq!(t.next_sibling_where(2, |_| true), (3, 3));
        assert_eq!(t.next_sibling_where(6, |_| true), (7, 7));
        // Ranks below a node end where the next sibling's (or the group's end) begin.
        assert_eq!((t.ranks_below(0), t.ranks_below(1), t.ranks_below(8)), ((0, 5), (1, 3), (8, 9)));
    }

    #[test]
    fn long_token_ranks_come_longest_first() {
        let toks: Vec<Vec<u8>> = ["ab", "a", "b", "abc", "abcd", "ab", "bcdef", "bc", "x", "abce"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let t = TokenTrie::build(&toks, |_| true);
        for n in 0..7 {
            let len = |r: u32| toks[t.token_ids[r as usize] as usize].len();
            let mut want: Vec<u32> = (0..t.token_ids.len() as u32).filter(|&r| len(r) > n).collect();
            want.sort_by_key(|&r| std::cmp::Reverse(len(r)));
            assert_eq!(t.ranks_longer_than(n), want.as_slice(), "n = {n}");
            assert_eq!(t.longer_than(n), want.len(), "n = {n}");
        }
    }

    #[test]
    fn first_clear_bit_crosses_words() {
        let bits = [u64::MAX, 0b1011, 0];
        assert_eq!(first_clear_bit(&bits, 0), 66);
        assert_eq!(first_clear_bit(&bits, 64), 66);
        assert_eq!(first_clear_bit(&bits, 66), 66);
        assert_eq!(first_clear_bit(&bits, 67), 68);
        assert_eq!(first_clear_bit(&[u64::MAX], 5), 64);
        assert_eq!(first_clear_bit(&bits, 200), 200);
    }

    #[test]
    fn preorder_ranges() {
        let toks: Vec<Vec<u8>> =
            ["ab", "a", "b", "abc", "ab", "ba"].iter().map(|s| s.as_bytes().to_vec()).collect();
        let t = TokenTrie::build(&toks, |_| true);
        // a, ab, abc, b, ba
        let bytes: Vec<u8> = t.nodes.iter().map(|n| n.byte).collect();
        assert_eq!(bytes, b"abcba");
        let ids = |(a, b): (u32, u32)| t.token_ids[a as usize..b as usize].to_vec();
        assert_eq!(ids(t.nodes[1].tokens), [0, 4]);
        assert_eq!(t.nodes[0].subtree_end, 3);
        let mut below = ids(t.ranks_below(0));
        below.sort();
        assert_eq!(below, vec![0, 1, 3, 4]);
        assert_eq!(ids(t.ranks_below(3)), [2, 5]);
    }

    #[test]
    fn skip_tables() {
        let toks: Vec<Vec<u8>> = vec![
            b"ab".to_vec(),
            b"a\xC3".to_vec(),            // ends inside a character: fine
            b"a\xC3\xA9b".to_vec(),       // "aéb"
            b"c\xC3\xA9".to_vec(),        // 'c' is outside the set
            b"\x80x".to_vec(),            // starts with a continuation byte
            b"\xED\xA0\x80".to_vec(),     // a surrogate
            b"\xF0\x9F\x98\x80".to_vec(), // U+1F600
        ];
        let t = TokenTrie::build(&toks, |_| true);
        let mut set = [0u64; 4];
        for b in [b'a', b'b'] {
            set[b as usize / 64] |= 1 << (b % 64);
        }
        let clean = t.build_clean(&set);
        let is_clean = |k: usize| clean[k / 64] >> (k % 64) & 1 == 1;
        let node = |prefix: &[u8]| {
            let mut k = 0;
            let mut depth = 0;
            while depth < prefix.len() {
                while t.nodes[k].byte != prefix[depth] {
                    k = t.nodes[k].subtree_end as usize;
                }
                depth += 1;
                if depth < prefix.len() {
                    k += 1;
                }
            }
            k
        };
        assert!(is_clean(node(b"a")));
        assert!(!is_clean(node(b"c")));
        assert!(!is_clean(node(b"\x80")));
        assert!(!is_clean(node(b"\xED")));
        assert!(is_clean(node(b"\xF0")));
        // Brute force: every byte of the subtree in the set.
        let inside = |k: usize| {
            (k..t.nodes[k].subtree_end as usize)
                .all(|c| set[t.nodes[c].byte as usize / 64] >> (t.nodes[c].byte % 64) & 1 == 1)
        };
        let a = node(b"a");
        assert!(!inside(a), "the subtree of `a` holds non-ASCII bytes");
        // The same per sibling entry, plain and UTF-8 aware.
        let bit = |bits: &[u64], k: usize| {
            let i = t.nodes[k].sib as usize;
            bits[i / 64] >> (i % 64) & 1 == 1
        };
        let (plain, utf8) = (t.whole_siblings(&set, false), t.whole_siblings(&set, true));
        for k in 0..t.nodes.len() {
            assert_eq!(bit(&utf8, k), is_clean(k), "node {k}");
            assert_eq!(bit(&plain, k), inside(k), "node {k}");
        }
        assert!(bit(&utf8, a) && !bit(&plain, a));
        for (i, &b) in t.sib_byte.iter().enumerate() {
            if b == END_OF_SIBLINGS {
                assert_eq!(utf8[i / 64] >> (i % 64) & 1, 0, "end entries stay clear");
            }
        }
    }
}
