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
    /// The expression it was built from ([`CharDfa::from_expr`]), which it prints as:
    /// state elimination can make an expression far larger than the one written.
    source: Option<std::sync::Arc<Expr>>,
}

/// Per state, whether a final state can be reached from it: backwards from the finals over
/// the moves [`reversed`], so linear in the moves. `targets(s)` are the targets of state
/// `s`'s moves, each `< finals.len()`.
pub(crate) fn coreachable<I: Iterator<Item = u32>>(
    finals: &[bool],
    targets: impl Fn(usize) -> I,
) -> Vec<bool> {
    let n = finals.len();
    let (first, sources) = reversed(n, targets);
    let mut live = finals.to_vec();
    let mut stack: Vec<usize> = (0..n).filter(|&s| finals[s]).collect();
    while let Some(t) = stack.pop() {
        for &s in &sources[first[t]..first[t + 1]] {
            if !live[s as usize] {
                live[s as usize] = true;
                stack.push(s as usize);
            }
        }
    }
    live
}

/// Whether every target of `moves` is a state and no state's classes overlap.
fn well_formed(moves: &[Vec<CharMove>]) -> bool {
    let n = moves.len();
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    for m in moves {
        ranges.clear();
        for (class, t) in m {
            if *t as usize >= n {
                return false;
            }
            ranges.extend(class.iter().copied());
        }
        ranges.sort_unstable();
        if ranges.windows(2).any(|w| w[1].0 <= w[0].1) {
            return false;
        }
    }
    true
}

/// The moves of `n` states reversed, held flat (one counting pass, no list per state):
/// the states moving to `t` are `sources[first[t]..first[t + 1]]`. `targets(s)` are the
/// targets of state `s`'s moves, each `< n`.
pub(crate) fn reversed<I: Iterator<Item = u32>>(
    n: usize,
    targets: impl Fn(usize) -> I,
) -> (Vec<usize>, Vec<u32>) {
    let mut first = vec![0usize; n + 1];
    for s in 0..n {
        for t in targets(s) {
            first[t as usize + 1] += 1;
        }
    }
    for t in 0..n {
        first[t + 1] += first[t];
    }
    let mut fill = first.clone();
    let mut sources = vec![0u32; first[n]];
    for s in 0..n {
        for t in targets(s) {
            sources[fill[t as usize]] = s as u32;
            fill[t as usize] += 1;
        }
    }
    (first, sources)
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
        if !well_formed(&moves) {
            return None;
        }
        Self::trimmed(moves, finals)
    }

    /// [`CharDfa::new`] of moves known to be well formed (built by the library, never
    /// overlapping), without checking them again: the check sorts every state's ranges,
    /// and a spelled string automaton has tens of thousands of states (the spelling's
    /// tests hold its output to the check).
    pub(crate) fn trimmed(moves: Vec<Vec<CharMove>>, finals: Vec<bool>) -> Option<CharDfa> {
        debug_assert!(moves.len() == finals.len() && well_formed(&moves));
        if finals.is_empty() {
            return None;
        }
        let n = finals.len();
        let live = coreachable(&finals, |s| moves[s].iter().map(|m| m.1));
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
        let mut moves = moves;
        let new_moves = order
            .iter()
            .map(|&s| {
                std::mem::take(&mut moves[s])
                    .into_iter()
                    .filter(|(class, t)| live[*t as usize] && !class.is_empty())
                    .map(|(class, t)| (class, id[t as usize]))
                    .collect()
            })
            .collect();
        let new_finals = order.iter().map(|&s| finals[s]).collect();
        Some(CharDfa { moves: new_moves, finals: new_finals, source: None })
    }

    /// The expression it was built from ([`CharDfa::from_expr`]), if any.
    pub(crate) fn source(&self) -> Option<&Expr> {
        self.source.as_deref()
    }

    /// The same automaton, printing as `e` (which must match the same language: a
    /// compiled grammar read back from its bytes).
    pub(crate) fn with_source(self, e: Expr) -> CharDfa {
        CharDfa { source: Some(std::sync::Arc::new(e)), ..self }
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

    /// The automaton of a rule-free expression (no [`Expr::Rule`], no [`Expr::And`]), by
    /// subset construction over characters, minimized: `None` for those, for the empty
    /// language, and past `max_states` states of the subset construction (before trimming
    /// and minimisation) or 4 times as many NFA states (which ends the attempt before the
    /// subset construction). It prints as `e` ([`CharDfa::to_expr`]). For an expression
    /// built once and used in many grammars — a `format`'s JSON spelling — where every
    /// use of the tree would copy it, and every use of the automaton shares it.
    ///
    /// ```
    /// use grammask::grammar::{CharDfa, Expr};
    /// // `(ab|a)c*`
    /// let e = Expr::Seq(vec![
    ///     Expr::Alt(vec![Expr::Literal("ab".into()), Expr::Literal("a".into())]),
    ///     Expr::Repeat { expr: Box::new(Expr::Literal("c".into())), min: 0, max: None },
    /// ]);
    /// let d = CharDfa::from_expr(&e, 100).unwrap();
    /// assert!(d.matches("a") && d.matches("abcc") && !d.matches("b"));
    /// assert_eq!(CharDfa::from_expr(&Expr::Rule(grammask::grammar::RuleId(0)), 100), None);
    /// ```
    pub fn from_expr(e: &Expr, max_states: usize) -> Option<CharDfa> {
        let limit = max_states.saturating_mul(4);
        let mut nfa = CharNfa { eps: vec![Vec::new()], moves: vec![Vec::new()], limit };
        let end = nfa.build(e, 0)?;
        // (A stamp per NFA state marks a closure's members: sets run to hundreds.)
        let mut stamp = vec![0u32; nfa.eps.len()];
        let mut round = 0u32;
        let mut closure = |set: &mut Vec<u32>| {
            round += 1;
            set.retain(|&q| std::mem::replace(&mut stamp[q as usize], round) != round);
            let mut i = 0;
            while i < set.len() {
                for &t in &nfa.eps[set[i] as usize] {
                    if std::mem::replace(&mut stamp[t as usize], round) != round {
                        set.push(t);
                    }
                }
                i += 1;
            }
            set.sort_unstable();
        };
        let mut start = vec![0u32];
        closure(&mut start);
        let mut ids: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
        ids.insert(start.clone(), 0);
        let mut sets = vec![start];
        let mut moves: Vec<Vec<CharMove>> = Vec::new();
        let mut i = 0;
        while i < sets.len() {
            // Every character range the set's moves read, cut where any of them starts or
            // ends: within a piece, every character has the same targets.
            let out: Vec<(u32, u32, u32)> = sets[i]
                .iter()
                .flat_map(|&q| nfa.moves[q as usize].iter())
                .flat_map(|(class, t)| class.iter().map(move |&(a, b)| (a, b, *t)))
                .collect();
            let mut cuts: Vec<u32> = out.iter().flat_map(|&(a, b, _)| [a, b.saturating_add(1)]).collect();
            cuts.sort_unstable();
            cuts.dedup();
            let mut by_target: Vec<CharMove> = Vec::new();
            for w in cuts.windows(2) {
                let (lo, hi) = (w[0], w[1] - 1);
                let mut targets: Vec<u32> =
                    out.iter().filter(|&&(a, b, _)| a <= lo && hi <= b).map(|&(_, _, t)| t).collect();
                if targets.is_empty() {
                    continue;
                }
                closure(&mut targets);
                let id = match ids.get(&targets) {
                    Some(&id) => id,
                    None => {
                        if sets.len() >= max_states {
                            return None;
                        }
                        let id = sets.len() as u32;
                        ids.insert(targets.clone(), id);
                        sets.push(targets);
                        id
                    }
                };
                match by_target.iter_mut().find(|m| m.1 == id) {
                    Some((class, _)) => match class.last_mut() {
                        Some(last) if last.1.checked_add(1) == Some(lo) => last.1 = hi,
                        _ => class.push((lo, hi)),
                    },
                    None => by_target.push((vec![(lo, hi)], id)),
                }
            }
            moves.push(by_target);
            i += 1;
        }
        let finals = sets.iter().map(|set| set.binary_search(&end).is_ok()).collect();
        let d = CharDfa::new(moves, finals)?.minimized();
        Some(CharDfa { source: Some(std::sync::Arc::new(e.clone())), ..d })
    }

    /// The same language with equivalent states merged (Moore's partition refinement):
    /// states are split by finality, then by the blocks each piece of the alphabet leads
    /// them to, until no block splits. Its table is states × alphabet pieces: past
    /// [`MINIMIZE_MAX_CELLS`] the automaton is left as it is.
    fn minimized(self) -> CharDfa {
        let n = self.len();
        // The alphabet cut where any move's characters start or end: each piece is read
        // by at most one move of each state.
        let mut cuts: Vec<u32> = (0..n)
            .flat_map(|s| {
                self.moves[s].iter().flat_map(|(c, _)| c.iter().flat_map(|&(a, b)| [a, b.saturating_add(1)]))
            })
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let pieces = cuts.len().saturating_sub(1);
        if n.saturating_mul(pieces) > MINIMIZE_MAX_CELLS {
            return self;
        }
        let mut to = vec![u32::MAX; n * pieces];
        for s in 0..n {
            for (class, t) in &self.moves[s] {
                for &(a, b) in class {
                    let first = cuts.partition_point(|&c| c < a);
                    let end = cuts.partition_point(|&c| c <= b);
                    to[s * pieces + first..s * pieces + end].fill(*t);
                }
            }
        }
        let mut block: Vec<u32> = self.finals.iter().map(|&f| u32::from(f)).collect();
        let mut count = 0;
        let mut sig: Vec<u32> = Vec::with_capacity(pieces + 1);
        loop {
            let mut ids: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
            let next: Vec<u32> = (0..n)
                .map(|s| {
                    sig.clear();
                    sig.push(block[s]);
                    sig.extend(to[s * pieces..(s + 1) * pieces].iter().map(|&t| {
                        if t == u32::MAX {
                            u32::MAX
                        } else {
                            block[t as usize]
                        }
                    }));
                    let fresh = ids.len() as u32;
                    match ids.get(&sig) {
                        Some(&b) => b,
                        None => {
                            ids.insert(sig.clone(), fresh);
                            fresh
                        }
                    }
                })
                .collect();
            let blocks = ids.len();
            block = next;
            if blocks == count {
                break;
            }
            count = blocks;
        }
        if count == n {
            return self;
        }
        // One state per block, numbered by its first member; the start's block first.
        let mut rep = vec![usize::MAX; count];
        let mut order = Vec::with_capacity(count);
        for (s, &b) in block.iter().enumerate() {
            let b = b as usize;
            if rep[b] == usize::MAX {
                rep[b] = s;
                order.push(b);
            }
        }
        let mut new_id = vec![0u32; count];
        for (i, &b) in order.iter().enumerate() {
            new_id[b] = i as u32;
        }
        let moves = order
            .iter()
            .map(|&b| {
                let mut by_target: Vec<CharMove> = Vec::new();
                for (class, t) in &self.moves[rep[b]] {
                    let t = new_id[block[*t as usize] as usize];
                    match by_target.iter_mut().find(|m| m.1 == t) {
                        Some(m) => m.0.extend(class.iter().copied()),
                        None => by_target.push((class.clone(), t)),
                    }
                }
                for m in &mut by_target {
                    m.0 = super::class::normalize_class(std::mem::take(&mut m.0));
                }
                by_target
            })
            .collect();
        let finals = order.iter().map(|&b| self.finals[rep[b]]).collect();
        CharDfa { moves, finals, source: self.source }
    }

    /// The same language as an expression: the one it was built from, if any, else by
    /// state elimination (farthest states from the start first, which for an
    /// Aho–Corasick automaton nests each state's moves under the character that enters
    /// it). `None` past `max_size` expression nodes:
    /// automata whose patterns overlap in many ways can grow expressions far faster
    /// than themselves.
    pub fn to_expr(&self, max_size: usize) -> Option<Expr> {
        if let Some(e) = &self.source {
            return (e.size() <= max_size).then(|| Expr::clone(e));
        }
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

/// The largest table (states × alphabet pieces) [`CharDfa::from_expr`] minimizes with:
/// 64 MiB of `u32`s.
const MINIMIZE_MAX_CELLS: usize = 1 << 24;

/// A Thompson automaton over characters, for [`CharDfa::from_expr`].
struct CharNfa {
    eps: Vec<Vec<u32>>,
    moves: Vec<Vec<CharMove>>,
    limit: usize,
}

impl CharNfa {
    fn state(&mut self) -> Option<u32> {
        if self.eps.len() >= self.limit {
            return None;
        }
        self.eps.push(Vec::new());
        self.moves.push(Vec::new());
        Some(self.eps.len() as u32 - 1)
    }

    /// The states of `e` entered at `from`; returns the state where it ends. Each
    /// alternative and each repetition starts at a fresh state, so that no loop takes in
    /// moves that are not its own.
    fn build(&mut self, e: &Expr, from: u32) -> Option<u32> {
        Some(match e {
            Expr::Empty => from,
            Expr::Literal(s) => {
                let mut at = from;
                for c in s.chars() {
                    let t = self.state()?;
                    self.moves[at as usize].push((vec![(c as u32, c as u32)], t));
                    at = t;
                }
                at
            }
            Expr::Class(r) => {
                let t = self.state()?;
                if !r.is_empty() {
                    self.moves[from as usize].push((r.clone(), t));
                }
                t
            }
            Expr::Seq(v) => {
                let mut at = from;
                for x in v {
                    at = self.build(x, at)?;
                }
                at
            }
            Expr::Alt(v) => {
                let out = self.state()?;
                for x in v {
                    let s = self.state()?;
                    self.eps[from as usize].push(s);
                    let end = self.build(x, s)?;
                    self.eps[end as usize].push(out);
                }
                out
            }
            Expr::Repeat { expr, min, max } => {
                let mut at = from;
                for _ in 0..*min {
                    let s = self.state()?;
                    self.eps[at as usize].push(s);
                    at = self.build(expr, s)?;
                }
                let out = self.state()?;
                match max {
                    None => {
                        let lp = self.state()?;
                        self.eps[at as usize].push(lp);
                        let end = self.build(expr, lp)?;
                        self.eps[end as usize].push(lp);
                        self.eps[lp as usize].push(out);
                    }
                    Some(max) => {
                        self.eps[at as usize].push(out);
                        for _ in *min..*max {
                            let s = self.state()?;
                            self.eps[at as usize].push(s);
                            at = self.build(expr, s)?;
                            self.eps[at as usize].push(out);
                        }
                    }
                }
                out
            }
            Expr::Dfa(d) => {
                let base = self.eps.len() as u32;
                for _ in 0..d.len() {
                    self.state()?;
                }
                let out = self.state()?;
                self.eps[from as usize].push(base);
                for s in 0..d.len() {
                    let q = (base as usize) + s;
                    self.moves[q] = d.moves(s).iter().map(|(c, t)| (c.clone(), base + t)).collect();
                    if d.is_final(s) {
                        self.eps[q].push(out);
                    }
                }
                out
            }
            Expr::Rule(_) | Expr::And(_) => return None,
        })
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

    /// A random rule-free expression over `a`..`d`, embedded automata included.
    fn random_expr(rng: &mut u64, depth: u32) -> Expr {
        fn draw(rng: &mut u64, n: u64) -> u64 {
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            *rng % n
        }
        let leaf = depth == 0 || draw(rng, 3) == 0;
        match if leaf { draw(rng, 4) } else { 4 + draw(rng, 4) } {
            0 => Expr::Empty,
            1 => Expr::Literal(["a", "ab", "ca", "d"][draw(rng, 4) as usize].into()),
            2 => Expr::Class(
                [vec![(97, 98)], vec![(99, 99)], vec![], vec![(97, 100)]][draw(rng, 4) as usize].clone(),
            ),
            3 => Expr::Dfa(std::sync::Arc::new(a_star_b())),
            4 | 5 => {
                let n = 1 + draw(rng, 3) as usize;
                let v = (0..n).map(|_| random_expr(rng, depth - 1)).collect();
                if draw(rng, 2) == 0 {
                    Expr::Seq(v)
                } else {
                    Expr::Alt(v)
                }
            }
            _ => {
                let min = draw(rng, 3) as u32;
                let max = [None, Some(min), Some(min + 1), Some(min + 2)][draw(rng, 4) as usize];
                Expr::Repeat { expr: Box::new(random_expr(rng, depth - 1)), min, max }
            }
        }
    }

    #[test]
    fn the_automaton_of_an_expression_matches_what_it_matches() {
        // Every string over `a`..`e` up to 5 characters, against the `regex` crate.
        let mut strings = vec![String::new()];
        for len in 1..=5 {
            let last: Vec<String> = strings.iter().filter(|s| s.len() == len - 1).cloned().collect();
            strings.extend(last.iter().flat_map(|s| ['a', 'b', 'c', 'd', 'e'].map(|c| format!("{s}{c}"))));
        }
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut empty = 0;
        for i in 0..400 {
            let e = random_expr(&mut rng, 4);
            let re = crate::grammar::testing::recognizer(&e);
            let Some(d) = CharDfa::from_expr(&e, 100_000) else {
                assert!(strings.iter().all(|s| !re.is_match(s)), "#{i}: {e:?} has strings but no automaton");
                empty += 1;
                continue;
            };
            for s in &strings {
                assert_eq!(d.matches(s), re.is_match(s), "#{i}: {e:?} on {s:?}");
            }
        }
        assert!(empty < 100, "{empty} of 400 expressions were empty");
        // Rule calls and intersections have no automaton here; a limit is a refusal.
        assert!(CharDfa::from_expr(&Expr::And(vec![Expr::Empty]), 100).is_none());
        let long = Expr::Repeat { expr: Box::new(Expr::Literal("ab".into())), min: 0, max: Some(1000) };
        assert!(CharDfa::from_expr(&long, 2000).is_none());
        let d = CharDfa::from_expr(&long, 100_000).unwrap();
        assert_eq!(d.len(), 2001);
        // Equivalent states merged: `(a|b)*c`, written with its loop twice, is 2 states.
        let ab = Expr::Repeat { expr: Box::new(Expr::Class(vec![(97, 98)])), min: 0, max: None };
        let twice = Expr::Seq(vec![
            Expr::Alt(vec![Expr::Seq(vec![Expr::Literal("a".into()), ab.clone()]), ab]),
            Expr::Literal("c".into()),
        ]);
        assert_eq!(CharDfa::from_expr(&twice, 100).unwrap().len(), 2);
        // It prints as the expression it was built from.
        assert_eq!(d.to_expr(10_000), Some(long));
    }
}
