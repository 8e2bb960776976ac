//! Counted repetitions built by copying: `X{m,n}` as `n` copies of `X`'s DFA.
//!
//! The subset construction pays for every DFA state it makes (the state's NFA set, its
//! edges spread over the byte classes, sorted, closed and hashed), and a counted
//! repetition makes a copy of every state of `X`'s DFA per count: a JSON string with
//! `maxLength: 300` is 4,200 states (a character is a start, six UTF-8 continuation
//! states and five escape states), and determinizing, trimming and minimizing them was
//! most of the compile time of the MaskBench schemas that hold a few such strings.
//!
//! When `X`'s DFA is a *link* — its start is not final and has no incoming edge, and it has
//! exactly one final state, with no outgoing edge (`X` is prefix-free: a character, an
//! escape, `", " item`) — the DFA of `X{m,n}` is `n` copies of it joined end to start.
//! So a rule `A X{m,n} B` is determinized with the repetition replaced by a placeholder
//! letter, and the copies are spliced in afterwards. Exact when the placeholder is one
//! edge `s → t` and the letters that meet at a join are disjoint: `X`'s first letters,
//! `t`'s (what follows the repetition), and `s`'s other ones. Otherwise the rule takes
//! the ordinary construction.

use super::dfa::Dfa;
use super::AutomataError;
use super::DEAD;
use crate::grammar::{Expr, RuleId};

/// Repetitions with fewer copies are left to the subset construction.
const MIN_COPIES: u32 = 4;

/// A rule body with its largest top-level counted repetition taken out.
pub(crate) struct Split<'e> {
    /// The body with the repetition replaced by a reference to the placeholder rule.
    pub outer: Expr,
    /// The repeated expression.
    pub link: &'e Expr,
    pub min: u32,
    pub max: u32,
}

/// Takes the repetition with the most copies (at least [`MIN_COPIES`]) out of `body`,
/// when it is the body or one element of the body's sequence.
pub(crate) fn split(body: &Expr, placeholder: RuleId) -> Option<Split<'_>> {
    fn parts(e: &Expr) -> Option<(&Expr, u32, u32)> {
        match e {
            Expr::Repeat { expr, min, max: Some(max) } => Some((&**expr, *min, *max)),
            _ => None,
        }
    }
    let counted = |e: &Expr| match e {
        Expr::Repeat { max: Some(max), .. } if *max >= MIN_COPIES => Some(*max),
        _ => None,
    };
    match body {
        Expr::Seq(v) => {
            let (i, _) =
                v.iter().enumerate().filter_map(|(i, e)| Some((i, counted(e)?))).max_by_key(|p| p.1)?;
            let (link, min, max) = parts(&v[i])?;
            let outer =
                v.iter().enumerate().map(|(j, e)| if j == i { Expr::Rule(placeholder) } else { e.clone() });
            Some(Split { outer: Expr::Seq(outer.collect()), link, min, max })
        }
        e => {
            counted(e)?;
            let (link, min, max) = parts(e)?;
            Some(Split { outer: Expr::Rule(placeholder), link, min, max })
        }
    }
}

/// Where the copies of a spliced repetition lie in its rule's DFA (local state numbers),
/// for deciding how far two of its states agree without walking them
/// ([`Automata::agreement_depth`](super::Automata::agreement_depth)).
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// Position `k` (after `k` copies, `1..=max`) is state `positions + k - 1`.
    pub positions: u32,
    /// Link state `i` (an index among the link's inner states) of copy `k` (`0..max`) is
    /// state `inner + k · to_end.len() + i`.
    pub inner: u32,
    pub min: u32,
    pub max: u32,
    /// Per inner link state: fewest bytes from it to the end of its copy.
    pub to_end: Vec<u32>,
    /// Fewest bytes through one copy.
    pub link_bytes: u32,
}

/// Fewest bytes from each state of `link` to its final state `f` (`None` if the link
/// calls a rule: its length is then not a count of bytes).
fn bytes_to_end(link: &Dfa, f: usize) -> Option<Vec<u32>> {
    if link.edges.iter().any(|e| e.0 as usize >= link.n_classes) {
        return None;
    }
    let mut dist = vec![u32::MAX; link.len()];
    dist[f] = 0;
    // Few states (a character: a dozen): relax until nothing changes.
    loop {
        let mut changed = false;
        for q in 0..link.len() {
            let best = link.edges(q).iter().map(|e| dist[e.1 as usize].saturating_add(1)).min();
            if let Some(d) = best.filter(|&d| d < dist[q]) {
                dist[q] = d;
                changed = true;
            }
        }
        if !changed {
            return Some(dist);
        }
    }
}

/// Replaces the edge reading `letter` in `outer` by `min..=max` copies of `link`; `None`
/// when the shapes do not allow it (see the module documentation). Both DFAs are trimmed.
/// With the DFA comes where the copies lie, when the link reads bytes only.
pub(crate) fn splice(
    outer: &Dfa,
    letter: u32,
    link: &Dfa,
    (min, max): (u32, u32),
    max_states: usize,
) -> Option<Result<(Dfa, Option<Layout>), AutomataError>> {
    let mut placed = (0..outer.len()).flat_map(|s| outer.edges(s).iter().map(move |&(l, t)| (s, l, t)));
    let (s, _, t) = placed.find(|e| e.1 == letter)?;
    if placed.any(|e| e.1 == letter) || min > max {
        return None;
    }
    let t = t as usize;
    // The link: start 0 (not final, never re-entered), one final state with no way on.
    let finals: Vec<usize> = (0..link.len()).filter(|&q| link.finals[q]).collect();
    let f = match finals[..] {
        [f] if f != 0 && link.edges(f).is_empty() => f,
        _ => return None,
    };
    if link.edges.iter().any(|e| e.1 == 0) {
        return None;
    }
    let letters =
        |d: &Dfa, q: usize| d.edges(q).iter().map(|e| e.0).filter(|&l| l != letter).collect::<Vec<_>>();
    let (first, after, others) = (letters(link, 0), letters(outer, t), letters(outer, s));
    let disjoint = |a: &[u32], b: &[u32]| a.iter().all(|l| b.binary_search(l).is_err());
    if !disjoint(&first, &after) || !disjoint(&first, &others) || (min == 0 && !disjoint(&others, &after)) {
        return None;
    }
    // New states: position `k` (1..=max) after `k` copies, then per copy the link's inner
    // states (all but its start and final).
    let inner = link.len() - 2;
    let total = outer.len() + max as usize * (1 + inner);
    if total > max_states {
        return Some(Err(AutomataError::Limit {
            what: "automaton size (DFA states of one rule)",
            given: total,
            limit: max_states,
        }));
    }
    let base = outer.len();
    let position = |k: u32| if k == 0 { s } else { base + k as usize - 1 };
    let inner_base = base + max as usize;
    // Where link state `q` of copy `k` (from position `k` to `k + 1`) lives.
    let place = |k: u32, q: usize| -> u32 {
        let at = match q {
            0 => position(k),
            q if q == f => position(k + 1),
            q => inner_base + k as usize * inner + if q < f { q - 1 } else { q - 2 },
        };
        at as u32
    };
    let mut d = Dfa {
        n_classes: outer.n_classes,
        edges: Vec::new(),
        ends: vec![0],
        finals: Vec::with_capacity(total),
        spans: None,
    };
    d.edges.reserve(outer.edges.len() + max as usize * (link.edges.len() + outer.edges(t).len()));
    let seal = |d: &mut Dfa, fin: bool| {
        d.ends.push(d.edges.len() as u32);
        d.finals.push(fin);
    };
    // Position `k`'s edges: the next copy's first letters merged with what follows the
    // repetition (both sorted, disjoint).
    let join = |d: &mut Dfa, k: u32| {
        let (mut a, mut b) =
            (if k < max { link.edges(0) } else { &[] }, if k >= min { outer.edges(t) } else { &[] });
        while let (Some(&(la, qa)), Some(&(lb, _))) = (a.first(), b.first()) {
            if la < lb {
                d.edges.push((la, place(k, qa as usize)));
                a = &a[1..];
            } else {
                d.edges.push(b[0]);
                b = &b[1..];
            }
        }
        d.edges.extend(a.iter().map(|&(l, q)| (l, place(k, q as usize))));
        d.edges.extend_from_slice(b);
    };
    for q in 0..outer.len() {
        let from = d.edges.len();
        d.edges.extend(outer.edges(q).iter().copied().filter(|e| e.0 != letter));
        if q == s {
            join(&mut d, 0);
            d.edges[from..].sort_unstable();
        }
        seal(&mut d, outer.finals[q] || (q == s && min == 0 && outer.finals[t]));
    }
    for k in 1..=max {
        join(&mut d, k);
        seal(&mut d, k >= min && outer.finals[t]);
    }
    for k in 0..max {
        for q in (1..link.len()).filter(|&q| q != f) {
            d.edges.extend(link.edges(q).iter().map(|&(l, r)| (l, place(k, r as usize))));
            seal(&mut d, false);
        }
    }
    debug_assert!(d.edges.iter().all(|e| e.1 != DEAD));
    let mut layout = bytes_to_end(link, f).map(|dist| {
        let to_end: Vec<u32> = (1..link.len()).filter(|&q| q != f).map(|q| dist[q]).collect();
        Layout { positions: base as u32, inner: inner_base as u32, min, max, to_end, link_bytes: dist[0] }
    });
    // `t` is unreachable when the placeholder was its only way in: drop it.
    if t != 0 && !outer.edges.iter().any(|&(l, q)| q as usize == t && l != letter) {
        // (Every copy lies past the outer states, `t` among them: one lower.)
        if let Some(l) = &mut layout {
            l.positions -= 1;
            l.inner -= 1;
        }
        let order: Vec<u32> = (0..d.len() as u32).filter(|&q| q as usize != t).collect();
        let map: Vec<u32> = (0..d.len())
            .map(|q| match q.cmp(&t) {
                std::cmp::Ordering::Less => q as u32,
                std::cmp::Ordering::Equal => DEAD,
                std::cmp::Ordering::Greater => q as u32 - 1,
            })
            .collect();
        d.renumber(&order, &map);
    }
    Some(Ok((d, layout)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::automata::nfa::Nfa;
    use crate::grammar::Grammar;

    /// A one-rule grammar's body split for splicing, as the compiler sees it.
    struct Parts {
        outer: Dfa,
        link: Dfa,
        letter: u32,
        bounds: (u32, u32),
        /// The whole body by the subset construction, over the same byte classes.
        plain: Dfa,
    }

    fn parts(ebnf: &str) -> Parts {
        let g = Grammar::from_ebnf(ebnf).unwrap();
        let body = &g.rules[0].body;
        let placeholder = RuleId(g.rules.len() as u32);
        let sp = split(body, placeholder).unwrap_or_else(|| panic!("{ebnf}: no repetition taken out"));
        let nfas = [&sp.outer, sp.link, body].map(|e| Nfa::build(e, 1 << 20).unwrap());
        let (class, n) = super::super::byte_classes(&nfas[..2]);
        assert_eq!((class, n), super::super::byte_classes(&nfas[2..]), "{ebnf}: the parts split bytes alike");
        let rep: Vec<u8> =
            (0..n).map(|c| (0..=255u8).find(|&b| class[b as usize] as usize == c).unwrap()).collect();
        let [outer, link, plain] = nfas.map(|nfa| {
            let mut d = Dfa::determinize(&nfa, &rep, 1 << 20).unwrap();
            d.trim();
            d.minimize();
            d
        });
        Parts { outer, link, letter: n as u32 + placeholder.0, bounds: (sp.min, sp.max), plain }
    }

    /// Whether two DFAs over the same letters accept the same language (both trimmed):
    /// a walk over pairs of states that must agree on finality and on their letters.
    fn equivalent(a: &Dfa, b: &Dfa) -> bool {
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![(0usize, 0usize)];
        while let Some((p, q)) = stack.pop() {
            if !seen.insert((p, q)) {
                continue;
            }
            let (ep, eq) = (a.edges(p), b.edges(q));
            if a.finals[p] != b.finals[q] || ep.len() != eq.len() {
                return false;
            }
            for (x, y) in ep.iter().zip(eq) {
                if x.0 != y.0 {
                    return false;
                }
                stack.push((x.1 as usize, y.1 as usize));
            }
        }
        true
    }

    #[test]
    fn spliced_repetitions_are_the_subset_construction() {
        // Each body: the spliced DFA must accept exactly what the plain one does, with no
        // more states (the plain one is minimal; the copies are too, up to the unreachable
        // or duplicated join).
        let cases = [
            (r#"root ::= "\"" [a-c]{0,20} "\"""#, true),
            (
                r#"root ::= "\"" ([ -!#-\[\]-\U0010ffff] | "\\" ["\\/bfnrt] | "\\u" [0-9a-f]{4}){2,40} "\"""#,
                true,
            ),
            (r#"root ::= [ab]{3,17}"#, true),
            (r#"root ::= "[" ("\"ab\"" | "\"c\"") (", " ("\"ab\"" | "\"c\"")){0,5} "]""#, true),
            (r#"root ::= "x" [a-c]{4} "y""#, true),
            (r#"root ::= "[" ("x" | "yz"){0,16} "]" "q"?"#, true),
            (r#"root ::= "k" ("," [0-9]){5,18} ("," | "")"#, false),
            (r#"root ::= ("ab" | "a"){0,16}"#, false),
            (r#"root ::= "s" [a-z]{0,30} [a-c]"#, false),
            (r#"root ::= "q" ([a-z] [0-9]?){1,20} "!""#, false),
        ];
        for (ebnf, spliced) in cases {
            let p = parts(ebnf);
            let got = splice(&p.outer, p.letter, &p.link, p.bounds, 1 << 20);
            assert_eq!(got.is_some(), spliced, "{ebnf}");
            if let Some(d) = got {
                let (d, _) = d.unwrap();
                assert!(equivalent(&d, &p.plain), "{ebnf}: spliced DFA differs");
                assert!(d.len() <= p.plain.len() + 1, "{ebnf}: {} states vs {}", d.len(), p.plain.len());
            }
        }
    }

    #[test]
    fn spliced_repetitions_respect_the_state_limit() {
        let p = parts(r#"root ::= "\"" [a-c]{0,5000} "\"""#);
        let got = splice(&p.outer, p.letter, &p.link, p.bounds, 1000).unwrap();
        assert!(matches!(got, Err(AutomataError::Limit { given: 5004, limit: 1000, .. })), "{got:?}");
    }
}
