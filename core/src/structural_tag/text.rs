//! Free text as a regular expression: "any text up to the first trigger", "any text
//! containing no exclude".
//!
//! # Why an expression, not a rule per state
//! The mask cache classifies a token as context-independent when its bytes stay inside
//! one rule's DFA. Free text written as one right-linear rule per automaton state would
//! end a rule at every character, making most of the vocabulary context-dependent at
//! every step. Written as one regular [`Expr`] inlined where the text is used, the
//! free text, the trigger that ends it and the literal rest of the tag's `begin` are one
//! DFA: a token holding `text<tool_` or `_call>` is classified wholesale, exactly, and
//! only tokens that run on into a tag's content (a JSON rule) are checked at run time.
//!
//! # Construction
//! An Aho–Corasick automaton over the characters of the patterns: a trie of the patterns
//! whose failure links give, from every state and character, the longest pattern prefix
//! that the text read so far ends with. A state where a pattern has just ended is
//! terminal: a *final* pattern (a trigger) ends the text there, a *dead* one (an
//! exclude, the enclosing tag's `end`) rejects it. Characters no pattern contains all go
//! back to the root, so the alphabet is the patterns' characters plus one class for the
//! rest. The automaton is turned into an expression by state elimination, deepest
//! states first: every state but the root has a single trie parent, so each elimination
//! nests the state's edges under the character that enters it and the expression stays
//! linear in the patterns' length (plus a few alternatives per failure target).

use crate::grammar::class::{complement_class, normalize_class};
use crate::grammar::Expr;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeMap;

/// Most pattern characters in one free-text region (triggers, excludes and ends
/// together); each is an automaton state.
pub(crate) const MAX_PATTERN_CHARS: usize = 8_192;

/// Largest expression built for one free-text region, in [`Expr::size`] nodes.
pub(crate) const MAX_TEXT_SIZE: usize = 400_000;

/// The free-text languages over one set of patterns.
#[derive(Debug)]
pub(crate) struct FreeText {
    /// Per final pattern `j`: text in which the first pattern occurrence is final pattern
    /// `j`, ending right after it (the pattern included).
    pub until: Vec<Expr>,
    /// Text in which no pattern occurs (ending anywhere, a pattern's prefix included).
    pub rest: Expr,
}

/// Why free text could not be built: `(what, given, limit)`.
pub(crate) type TooLarge = (&'static str, usize, usize);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Out {
    Dead,
    Final(usize),
}

struct Trie {
    next: Vec<BTreeMap<char, usize>>,
    fail: Vec<usize>,
    depth: Vec<usize>,
    out: Vec<Option<Out>>,
}

impl Trie {
    fn build(finals: &[String], dead: &[String]) -> Trie {
        let mut t = Trie { next: vec![BTreeMap::new()], fail: vec![0], depth: vec![0], out: vec![None] };
        let patterns = finals.iter().enumerate().map(|(j, p)| (p, Out::Final(j)));
        for (p, out) in patterns.chain(dead.iter().map(|p| (p, Out::Dead))) {
            if p.is_empty() {
                continue;
            }
            let mut q = 0;
            for c in p.chars() {
                q = match t.next[q].get(&c) {
                    Some(&n) => n,
                    None => {
                        let n = t.next.len();
                        t.next.push(BTreeMap::new());
                        t.fail.push(0);
                        t.depth.push(t.depth[q] + 1);
                        t.out.push(None);
                        t.next[q].insert(c, n);
                        n
                    }
                };
            }
            // A trigger ends the text even where an exclude ends at the same character
            // (it is what the text was waiting for); among triggers the first listed wins.
            t.out[q] = Some(match t.out[q] {
                Some(Out::Final(k)) => Out::Final(k),
                _ => out,
            });
        }
        // Failure links and inherited outputs, breadth first (a node's failure target is
        // shallower, so it is complete when the node is reached).
        let mut queue = std::collections::VecDeque::from([0usize]);
        while let Some(q) = queue.pop_front() {
            let children: Vec<(char, usize)> = t.next[q].iter().map(|(&c, &n)| (c, n)).collect();
            for (c, n) in children {
                t.fail[n] = if q == 0 { 0 } else { t.step(t.fail[q], c) };
                let inherited = t.out[t.fail[n]];
                t.out[n] = match (t.out[n], inherited) {
                    (None, x) | (x @ Some(Out::Final(_)), _) => x,
                    (Some(Out::Dead), Some(Out::Final(j))) => Some(Out::Final(j)),
                    (x, _) => x,
                };
                queue.push_back(n);
            }
        }
        t
    }

    /// The Aho–Corasick move from `q` on `c`.
    fn step(&self, mut q: usize, c: char) -> usize {
        loop {
            if let Some(&n) = self.next[q].get(&c) {
                return n;
            }
            if q == 0 {
                return 0;
            }
            q = self.fail[q];
        }
    }
}

/// Free text over `finals` (triggers: the text ends right after the first one) and
/// `dead` (strings the text must not contain). Empty patterns are ignored.
pub(crate) fn free_text(finals: &[String], dead: &[String]) -> Result<FreeText, TooLarge> {
    let chars: usize = finals.iter().chain(dead).map(|p| p.chars().count()).sum();
    if chars > MAX_PATTERN_CHARS {
        return Err(("free-text pattern characters", chars, MAX_PATTERN_CHARS));
    }
    let trie = Trie::build(finals, dead);
    let n = trie.next.len();
    let alphabet: Vec<char> = {
        let mut a: Vec<char> = finals.iter().chain(dead).flat_map(|p| p.chars()).collect();
        a.sort_unstable();
        a.dedup();
        a
    };
    let others = complement_class(&alphabet.iter().map(|&c| (c as u32, c as u32)).collect::<Vec<_>>());

    // Graph nodes: trie states 0..n (only live ones get edges), then start, one final per
    // trigger, and the end of text.
    let start = n;
    let final_node = |j: usize| n + 1 + j;
    let end = n + 1 + finals.len();
    let mut g = Graph::new(end + 1);
    g.add(start, 0, Expr::Empty);
    for q in (0..n).filter(|&q| trie.out[q].is_none()) {
        let mut classes: BTreeMap<usize, Vec<(u32, u32)>> = BTreeMap::new();
        for &c in &alphabet {
            let t = trie.step(q, c);
            let target = match trie.out[t] {
                None => t,
                Some(Out::Final(j)) => final_node(j),
                Some(Out::Dead) => continue,
            };
            classes.entry(target).or_default().push((c as u32, c as u32));
        }
        classes.entry(0).or_default().extend(others.iter().copied());
        for (target, ranges) in classes {
            let class = normalize_class(ranges);
            if !class.is_empty() {
                g.add(q, target, Expr::Class(class));
            }
        }
        g.add(q, end, Expr::Empty);
    }
    // Deepest first; the root last.
    let mut order: Vec<usize> = (0..n).filter(|&q| trie.out[q].is_none()).collect();
    order.sort_by_key(|&q| std::cmp::Reverse(trie.depth[q]));
    for q in order {
        g.eliminate(q);
        if g.spent > MAX_TEXT_SIZE * 4 {
            // Patterns that overlap in many ways (`abab…` beside `baba…`) can make the
            // expression grow faster than the automaton: stop before the memory does.
            return Err(("free-text expression size", g.spent, MAX_TEXT_SIZE * 4));
        }
    }
    let mut take = |to: usize| g.out[start].remove(&to).unwrap_or_else(nothing);
    let until: Vec<Expr> = (0..finals.len()).map(|j| take(final_node(j))).collect();
    let rest = take(end);
    let size = until.iter().map(Expr::size).sum::<usize>() + rest.size();
    if size > MAX_TEXT_SIZE {
        return Err(("free-text expression size", size, MAX_TEXT_SIZE));
    }
    Ok(FreeText { until, rest })
}

/// The empty language.
pub(crate) fn nothing() -> Expr {
    Expr::Alt(Vec::new())
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
    fn eliminate(&mut self, q: usize) {
        let mut outs = std::mem::take(&mut self.out[q]);
        let self_loop = outs.remove(&q);
        let preds: Vec<usize> = std::mem::take(&mut self.inc[q]).into_iter().filter(|&p| p != q).collect();
        let mut succs: Vec<(usize, Expr)> = outs.into_iter().collect();
        succs.sort_by_key(|&(r, _)| r);
        for &(r, _) in &succs {
            self.inc[r].remove(&q);
        }
        let mut preds = preds;
        preds.sort_unstable();
        for p in preds {
            let Some(into) = self.out[p].remove(&q) else { continue };
            let into = match &self_loop {
                Some(l) => seq2(into, Expr::Repeat { expr: Box::new(l.clone()), min: 0, max: None }),
                None => into,
            };
            for (r, from) in &succs {
                if self.spent > MAX_TEXT_SIZE * 4 {
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
    let mut v = Vec::new();
    for e in [a, b] {
        match e {
            Expr::Alt(items) => v.extend(items),
            e => v.push(e),
        }
    }
    // One class for all the single-character alternatives keeps the NFA small.
    let mut ranges = Vec::new();
    let mut rest: Vec<Expr> = Vec::with_capacity(v.len());
    for e in v {
        match e {
            Expr::Class(r) => ranges.extend(r),
            e if !rest.contains(&e) => rest.push(e),
            _ => {}
        }
    }
    if !ranges.is_empty() {
        rest.insert(0, Expr::Class(normalize_class(ranges)));
    }
    if rest.len() == 1 {
        return rest.pop().unwrap_or_else(nothing);
    }
    Expr::Alt(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brute-force reference: the first pattern occurrence (earliest end; at equal ends
    /// the trigger wins), by scanning prefixes.
    fn first_hit(text: &str, finals: &[&str], dead: &[&str]) -> Option<(usize, Option<usize>)> {
        for (i, _) in text.char_indices().skip(1).chain([(text.len(), ' ')]) {
            let prefix = &text[..i];
            if let Some(j) = finals.iter().position(|f| prefix.ends_with(f)) {
                return Some((i, Some(j)));
            }
            if dead.iter().any(|d| prefix.ends_with(d)) {
                return Some((i, None));
            }
        }
        None
    }

    fn compile(e: &Expr) -> regex::Regex {
        crate::grammar::testing::recognizer(e)
    }

    #[test]
    fn overlapping_patterns_stay_small_or_fail_fast() {
        let t0 = std::time::Instant::now();
        let long = |p: &str, n: usize| p.repeat(n);
        let sets: Vec<(Vec<String>, Vec<String>)> = vec![
            (vec![long("a", 200)], vec![]),
            (vec![long("ab", 50)], vec![long("ba", 50)]),
            (vec![], (0..32).map(|i| format!("{:05b}", i).replace('0', "a").replace('1', "b")).collect()),
            (vec!["<tool_call>".into(), "<function=".into(), "[TOOL_CALLS]".into()], vec!["</think>".into()]),
        ];
        for (finals, dead) in sets {
            match free_text(&finals, &dead) {
                Ok(ft) => assert!(ft.rest.size() <= MAX_TEXT_SIZE),
                Err((_, given, limit)) => assert!(given > limit),
            }
        }
        assert!(t0.elapsed().as_secs() < 10, "{:?}", t0.elapsed());
    }

    #[test]
    fn agrees_with_brute_force_on_every_short_text() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["<t"], &[]),
            (&["aa"], &[]),
            (&["ab", "ba"], &["bb"]),
            (&["aab"], &["aba"]),
            (&[], &["ab"]),
            (&["<a>", "<b"], &["</a>"]),
        ];
        for (finals, dead) in cases {
            let f: Vec<String> = finals.iter().map(|s| s.to_string()).collect();
            let d: Vec<String> = dead.iter().map(|s| s.to_string()).collect();
            let ft = free_text(&f, &d).unwrap();
            let rest = compile(&ft.rest);
            let until: Vec<regex::Regex> = ft.until.iter().map(compile).collect();
            let alphabet = ['a', 'b', '<', 't', '/', '>', 'x'];
            let mut texts = vec![String::new()];
            for len in 1..=5 {
                let mut next = Vec::new();
                for t in texts.iter().filter(|t| t.chars().count() == len - 1) {
                    for c in alphabet {
                        next.push(format!("{t}{c}"));
                    }
                }
                texts.extend(next);
            }
            for t in &texts {
                let hit = first_hit(t, finals, dead);
                let want_rest = hit.is_none();
                assert_eq!(rest.is_match(t), want_rest, "{finals:?} {dead:?} rest {t:?}");
                for (j, re) in until.iter().enumerate() {
                    let want = hit == Some((t.len(), Some(j)));
                    assert_eq!(re.is_match(t), want, "{finals:?} {dead:?} until {j} {t:?}");
                }
            }
        }
    }
}
