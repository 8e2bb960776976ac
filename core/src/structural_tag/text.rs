//! Free text as an automaton: "any text up to the first trigger", "any text containing
//! no exclude".
//!
//! # Why one inlined automaton, not a rule per state
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
//! rest. The automaton goes into the IR as it is ([`Expr::Dfa`]): as an expression (state
//! elimination) it was thousands of nodes that every later pass walked and the subset
//! construction folded back into these few states — half of a 20-tool tag's compile.

use crate::grammar::class::{complement_class, normalize_class};
pub(crate) use crate::grammar::{alt2, seq2};
use crate::grammar::{CharDfa, CharMove, Expr};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most pattern characters in one free-text region (triggers, excludes and ends
/// together); each is an automaton state.
pub(crate) const MAX_PATTERN_CHARS: usize = 8_192;

/// Largest free text, in [`Expr::size`] over its automata (one per trigger, one for the
/// text that ends anywhere): each is a copy of the patterns' automaton, so thousands of
/// one-character triggers would make thousands of copies of thousands of states.
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

    // States: the trie's (a state where a pattern has ended has no moves), then one per
    // trigger, where the text has just written it.
    let final_state = |j: usize| (n + j) as u32;
    let mut moves: Vec<Vec<CharMove>> = vec![Vec::new(); n + finals.len()];
    for q in (0..n).filter(|&q| trie.out[q].is_none()) {
        let mut classes: BTreeMap<u32, Vec<(u32, u32)>> = BTreeMap::new();
        for &c in &alphabet {
            let t = trie.step(q, c);
            let target = match trie.out[t] {
                None => t as u32,
                Some(Out::Final(j)) => final_state(j),
                Some(Out::Dead) => continue,
            };
            classes.entry(target).or_default().push((c as u32, c as u32));
        }
        classes.entry(0).or_default().extend(others.iter().copied());
        moves[q] = classes.into_iter().map(|(t, ranges)| (normalize_class(ranges), t)).collect();
    }
    let size = moves.len() + moves.iter().map(Vec::len).sum::<usize>();
    let total = size.saturating_mul(finals.len() + 1);
    if total > MAX_TEXT_SIZE {
        return Err(("free-text automaton size", total, MAX_TEXT_SIZE));
    }
    let automaton = |finals: Vec<bool>| {
        CharDfa::new(moves.clone(), finals).map_or_else(nothing, |d| Expr::Dfa(Arc::new(d)))
    };
    let until = (0..finals.len())
        .map(|j| automaton((0..moves.len()).map(|s| s == final_state(j) as usize).collect()))
        .collect();
    // Anywhere no pattern has ended.
    let rest = automaton((0..moves.len()).map(|s| s < n && trie.out[s].is_none()).collect());
    Ok(FreeText { until, rest })
}

/// The empty language.
pub(crate) fn nothing() -> Expr {
    Expr::Alt(Vec::new())
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
            // An automaton: as large as the trie (one state per pattern character, plus
            // one per trigger), whatever the overlaps; only printing it can grow.
            let chars: usize = finals.iter().chain(&dead).map(String::len).sum();
            let ft = free_text(&finals, &dead).unwrap();
            for e in ft.until.iter().chain([&ft.rest]) {
                if let Expr::Dfa(d) = e {
                    assert!(d.len() <= chars + finals.len() + 1, "{} states for {chars} characters", d.len());
                }
            }
        }
        let too_long = vec!["ab".repeat(MAX_PATTERN_CHARS)];
        assert!(matches!(free_text(&too_long, &[]), Err((_, given, limit)) if given > limit));
        // Within the character limit, but a copy of a 4,000-state automaton per trigger.
        let too_many: Vec<String> = (0..2_000).map(|i| format!("{:04}", i)).collect();
        assert!(
            matches!(free_text(&too_many, &[]), Err(("free-text automaton size", given, limit)) if given > limit)
        );
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
            // Both the automaton as the builder reads it and the expression it prints as.
            let rest = compile(&ft.rest);
            let until: Vec<regex::Regex> = ft.until.iter().map(compile).collect();
            let run = |e: &Expr, t: &str| crate::grammar::testing::matches(e, t);
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
                assert_eq!(run(&ft.rest, t), want_rest, "{finals:?} {dead:?} rest (automaton) {t:?}");
                for (j, re) in until.iter().enumerate() {
                    let want = hit == Some((t.len(), Some(j)));
                    assert_eq!(re.is_match(t), want, "{finals:?} {dead:?} until {j} {t:?}");
                    assert_eq!(run(&ft.until[j], t), want, "{finals:?} {dead:?} until {j} (automaton) {t:?}");
                }
            }
        }
    }
}
