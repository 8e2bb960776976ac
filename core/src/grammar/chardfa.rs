//! [`CharDfa`]: a deterministic automaton over characters, carried in an expression whole.
//!
//! # Why
//! A structural tag's free text ("any text up to the first trigger") is an Aho–Corasick
//! automaton of a few dozen states. Written as a regular expression (state elimination)
//! it became thousands of nodes — nested alternatives repeated for every way back to
//! the root — that the optimizer walked, the NFA builder expanded (2,400 of a 20-tool
//! tag's 3,900 root NFA states) and the subset construction folded back into the same
//! few dozen states: half a millisecond of a 2 ms compile. Carried as an automaton, the
//! builder copies its states directly. The expression form is still what it prints as
//! ([`CharDfa::to_expr`]), so the IR still prints as EBNF.

use super::Expr;
use rustc_hash::{FxHashMap, FxHashSet};

/// A move: the characters it reads (a class, as in [`Expr::Class`]) and its target.
pub type CharMove = (Vec<(u32, u32)>, u32);

/// A deterministic automaton over Unicode scalar values. State 0 is the start; a string
/// matches when its moves end in a final state. Every state can reach a final one
/// ([`CharDfa::new`] trims the others), and no two moves of a state share a character.
///
/// ```
/// use grammask::grammar::{CharDfa, Expr};
/// use std::sync::Arc;
/// // `a* b`: state 0 loops on `a`, `b` leads to the final state 1.
/// let (a, b) = ('a' as u32, 'b' as u32);
/// let d = CharDfa::new(vec![vec![(vec![(a, a)], 0), (vec![(b, b)], 1)], vec![]], vec![false, true]).unwrap();
/// assert!(d.matches("aab") && !d.matches("ba"));
/// // In an expression it prints as the equivalent EBNF.
/// let e = Expr::Dfa(Arc::new(d));
/// assert_eq!(e.size(), 4); // 2 states, 2 moves
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CharDfa {
    moves: Vec<Vec<CharMove>>,
    finals: Vec<bool>,
}

impl CharDfa {
    /// The automaton with these moves (per state: a character class, as in
    /// [`Expr::Class`], and the state it leads to) and final states, with the states that
    /// cannot reach a final one removed. `None` when the start cannot (the empty
    /// language) or the moves are malformed (a target out of range, a state's classes
    /// overlapping).
    pub fn new(moves: Vec<Vec<CharMove>>, finals: Vec<bool>) -> Option<CharDfa> {
        let n = finals.len();
        if moves.len() != n || n == 0 {
            return None;
        }
        let mut sources: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (s, m) in moves.iter().enumerate() {
            let mut ranges: Vec<(u32, u32)> = Vec::new();
            for (class, t) in m {
                if *t as usize >= n {
                    return None;
                }
                sources[*t as usize].push(s);
                ranges.extend(class.iter().copied());
            }
            ranges.sort_unstable();
            if ranges.windows(2).any(|w| w[1].0 <= w[0].1) {
                return None;
            }
        }
        // Co-reachability: backwards from the finals.
        let mut live = finals.clone();
        let mut stack: Vec<usize> = (0..n).filter(|&s| finals[s]).collect();
        while let Some(t) = stack.pop() {
            for &s in &sources[t] {
                if !live[s] {
                    live[s] = true;
                    stack.push(s);
                }
            }
        }
        if !live[0] {
            return None;
        }
        // Live states reachable from the start, numbered in breadth-first order.
        let mut id = vec![u32::MAX; n];
        let mut order = vec![0usize];
        id[0] = 0;
        let mut i = 0;
        while i < order.len() {
            let s = order[i];
            i += 1;
            for (_, t) in &moves[s] {
                let t = *t as usize;
                if live[t] && id[t] == u32::MAX {
                    id[t] = order.len() as u32;
                    order.push(t);
                }
            }
        }
        let new_moves = order
            .iter()
            .map(|&s| {
                moves[s]
                    .iter()
                    .filter(|(class, t)| live[*t as usize] && !class.is_empty())
                    .map(|(class, t)| (class.clone(), id[*t as usize]))
                    .collect()
            })
            .collect();
        let new_finals = order.iter().map(|&s| finals[s]).collect();
        Some(CharDfa { moves: new_moves, finals: new_finals })
    }

    /// Number of states.
    pub fn len(&self) -> usize {
        self.finals.len()
    }

    /// Always false: an automaton has a start state.
    pub fn is_empty(&self) -> bool {
        self.finals.is_empty()
    }

    /// The moves of state `s`: `(characters, target)`.
    pub fn moves(&self, s: usize) -> &[CharMove] {
        &self.moves[s]
    }

    /// Whether a match may end at state `s`.
    pub fn is_final(&self, s: usize) -> bool {
        self.finals[s]
    }

    /// Number of moves (a size measure, beside the states).
    pub fn num_moves(&self) -> usize {
        self.moves.iter().map(Vec::len).sum()
    }

    /// The state after reading `s` from the start, if any move reads it all.
    pub fn run(&self, s: &str) -> Option<usize> {
        let mut q = 0usize;
        for c in s.chars() {
            let c = c as u32;
            let (_, t) =
                self.moves[q].iter().find(|(class, _)| class.iter().any(|&(a, b)| a <= c && c <= b))?;
            q = *t as usize;
        }
        Some(q)
    }

    /// Whether the automaton matches `s`.
    pub fn matches(&self, s: &str) -> bool {
        self.run(s).is_some_and(|q| self.finals[q])
    }

    /// The same language as an expression, by state elimination (farthest states from
    /// the start first, which for an Aho–Corasick automaton nests each state's moves
    /// under the character that enters it). `None` past `max_size` expression nodes:
    /// automata whose patterns overlap in many ways can grow expressions far faster
    /// than themselves.
    pub fn to_expr(&self, max_size: usize) -> Option<Expr> {
        let n = self.len();
        let (start, end) = (n, n + 1);
        let mut g = Graph::new(n + 2);
        g.add(start, 0, Expr::Empty);
        for s in 0..n {
            for (class, t) in &self.moves[s] {
                g.add(s, *t as usize, Expr::Class(class.clone()));
            }
            if self.finals[s] {
                g.add(s, end, Expr::Empty);
            }
        }
        // Distances from the start, farthest eliminated first.
        let mut dist = vec![usize::MAX; n];
        dist[0] = 0;
        let mut queue = std::collections::VecDeque::from([0usize]);
        while let Some(s) = queue.pop_front() {
            for (_, t) in &self.moves[s] {
                if dist[*t as usize] == usize::MAX {
                    dist[*t as usize] = dist[s] + 1;
                    queue.push_back(*t as usize);
                }
            }
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&q| (std::cmp::Reverse(dist[q]), q));
        for q in order {
            g.eliminate(q, max_size);
            if g.spent > max_size {
                return None;
            }
        }
        let e = g.out[start].remove(&end).unwrap_or(Expr::Alt(Vec::new()));
        (e.size() <= max_size).then_some(e)
    }
}

/// A graph whose edges are expressions, for state elimination.
struct Graph {
    out: Vec<FxHashMap<usize, Expr>>,
    inc: Vec<FxHashSet<usize>>,
    /// Expression nodes built so far (each edge's size when added).
    spent: usize,
}

impl Graph {
    fn new(n: usize) -> Self {
        Self { out: vec![FxHashMap::default(); n], inc: vec![FxHashSet::default(); n], spent: 0 }
    }

    /// Adds `e` as another way from `p` to `r`.
    fn add(&mut self, p: usize, r: usize, e: Expr) {
        self.spent += e.size();
        let merged = match self.out[p].remove(&r) {
            Some(old) => alt2(old, e),
            None => e,
        };
        self.out[p].insert(r, merged);
        self.inc[r].insert(p);
    }

    /// Removes `q`, routing every path through it directly: `p → r` gains
    /// `(p→q) (q→q)* (q→r)`.
    fn eliminate(&mut self, q: usize, max_size: usize) {
        let mut outs = std::mem::take(&mut self.out[q]);
        let self_loop = outs.remove(&q);
        let mut preds: Vec<usize> =
            std::mem::take(&mut self.inc[q]).into_iter().filter(|&p| p != q).collect();
        let mut succs: Vec<(usize, Expr)> = outs.into_iter().collect();
        succs.sort_by_key(|&(r, _)| r);
        for &(r, _) in &succs {
            self.inc[r].remove(&q);
        }
        preds.sort_unstable();
        for p in preds {
            let Some(into) = self.out[p].remove(&q) else { continue };
            let into = match &self_loop {
                Some(l) => seq2(into, Expr::Repeat { expr: Box::new(l.clone()), min: 0, max: None }),
                None => into,
            };
            for (r, from) in &succs {
                if self.spent > max_size {
                    return;
                }
                self.add(p, *r, seq2(into.clone(), from.clone()));
            }
        }
    }
}

/// `a b`, flattening sequences and dropping empty strings.
pub(crate) fn seq2(a: Expr, b: Expr) -> Expr {
    let mut v = Vec::new();
    for e in [a, b] {
        match e {
            Expr::Empty => {}
            Expr::Seq(items) => v.extend(items),
            e => v.push(e),
        }
    }
    match v.len() {
        0 => Expr::Empty,
        1 => v.pop().unwrap_or(Expr::Empty),
        _ => Expr::Seq(v),
    }
}

/// `a | b`, flattening alternatives and merging character classes.
pub(crate) fn alt2(a: Expr, b: Expr) -> Expr {
    alts([a, b])
}

/// `a | b | …` in one pass: alternatives flattened, the single-character ones merged into
/// one class (it keeps the NFA small), repeats dropped (by hash, so that a tool-calling
/// tag's hundreds of alternatives cost linear time, where folding them pairwise compared
/// each with all before it at every step).
pub(crate) fn alts(items: impl IntoIterator<Item = Expr>) -> Expr {
    use std::hash::BuildHasher;
    let hasher = rustc_hash::FxBuildHasher;
    let mut ranges = Vec::new();
    let mut rest: Vec<Expr> = Vec::new();
    // Hash of an alternative → its positions in `rest`.
    let mut seen: rustc_hash::FxHashMap<u64, Vec<usize>> = Default::default();
    let mut add = |e: Expr, ranges: &mut Vec<(u32, u32)>, rest: &mut Vec<Expr>| match e {
        Expr::Class(r) => ranges.extend(r),
        e => {
            let at = seen.entry(hasher.hash_one(&e)).or_default();
            if !at.iter().any(|&i| rest[i] == e) {
                at.push(rest.len());
                rest.push(e);
            }
        }
    };
    for e in items {
        match e {
            Expr::Alt(items) => items.into_iter().for_each(|x| add(x, &mut ranges, &mut rest)),
            e => add(e, &mut ranges, &mut rest),
        }
    }
    if !ranges.is_empty() {
        rest.insert(0, Expr::Class(super::class::normalize_class(ranges)));
    }
    if rest.len() == 1 {
        return rest.pop().unwrap_or(Expr::Alt(Vec::new()));
    }
    Expr::Alt(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `a*b` over {a, b, c}: start loops on `a`, `b` ends.
    fn a_star_b() -> CharDfa {
        let a = vec![(97, 97)];
        let b = vec![(98, 98)];
        CharDfa::new(vec![vec![(a, 0), (b, 1)], vec![]], vec![false, true]).unwrap()
    }

    #[test]
    fn alternatives_in_one_pass_are_the_pairwise_fold() {
        // Classes merged first, repeats dropped, order kept: the same expression as
        // folding with `alt2`, which compared each alternative with all before it.
        let items: Vec<Expr> = (0..300)
            .map(|i| match i % 4 {
                0 => Expr::Literal(format!("name_{}", i % 37)),
                1 => Expr::Class(vec![(97 + i % 26, 97 + i % 26)]),
                2 => Expr::Seq(vec![Expr::Literal("x".into()), Expr::Rule(crate::grammar::RuleId(i % 11))]),
                _ => Expr::Alt(vec![Expr::Literal(format!("k{}", i % 5)), Expr::Empty]),
            })
            .collect();
        // The fold as it was written before: flatten, merge the classes, keep the first
        // of equal alternatives (a linear search each time).
        let old = |a: Expr, b: Expr| {
            let mut v = Vec::new();
            for e in [a, b] {
                match e {
                    Expr::Alt(items) => v.extend(items),
                    e => v.push(e),
                }
            }
            let (mut ranges, mut rest) = (Vec::new(), Vec::<Expr>::new());
            for e in v {
                match e {
                    Expr::Class(r) => ranges.extend(r),
                    e if !rest.contains(&e) => rest.push(e),
                    _ => {}
                }
            }
            if !ranges.is_empty() {
                rest.insert(0, Expr::Class(crate::grammar::class::normalize_class(ranges)));
            }
            if rest.len() == 1 {
                return rest.pop().unwrap();
            }
            Expr::Alt(rest)
        };
        let folded = items.iter().cloned().reduce(old).unwrap();
        assert_eq!(alts(items.clone()), folded);
        assert_eq!(items.into_iter().reduce(alt2).unwrap(), folded);
        assert_eq!(alts([Expr::Literal("a".into())]), Expr::Literal("a".into()));
    }

    #[test]
    fn runs_and_expands_to_the_same_language() {
        let d = a_star_b();
        let e = d.to_expr(1000).unwrap();
        let re = crate::grammar::testing::recognizer(&e);
        for s in ["b", "ab", "aaab", "", "a", "ba", "abb", "c", "acb"] {
            assert_eq!(d.matches(s), re.is_match(s), "{s:?}");
        }
        assert!(d.matches("aab") && !d.matches("aa"));
    }

    #[test]
    fn trims_dead_states_and_rejects_malformed_moves() {
        // State 2 cannot reach the final state: its move is dropped.
        let d = CharDfa::new(
            vec![vec![(vec![(97, 97)], 1), (vec![(98, 98)], 2)], vec![], vec![(vec![(99, 99)], 2)]],
            vec![false, true, false],
        )
        .unwrap();
        assert_eq!(d.len(), 2);
        assert!(d.matches("a") && !d.matches("b"));
        // Only dead states: the empty language.
        assert!(CharDfa::new(vec![vec![]], vec![false]).is_none());
        // A target out of range; overlapping classes.
        assert!(CharDfa::new(vec![vec![(vec![(97, 97)], 5)]], vec![true]).is_none());
        assert!(CharDfa::new(vec![vec![(vec![(97, 98)], 0), (vec![(98, 99)], 0)]], vec![true]).is_none());
    }
}
