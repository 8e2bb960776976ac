//! IR passes that run before automata construction, in this order (see [`optimize`]):
//!
//! 1. [`remove_unproductive`] — rules that can never finish (`a ::= "x" a`) become the
//!    empty set. AFTER THIS: every remaining path through a rule can complete, which the
//!    matcher relies on so that every prefix it accepts can still be finished.
//! 2. [`merge_duplicate_rules`] — rules with equal bodies (after their references are
//!    merged the same way) become one: a JSON Schema's `anyOf` branches that each copy the
//!    same object members share those members' rules instead of building an automaton
//!    per copy. AFTER THIS: no two reachable rules have equal bodies (up to recursion
//!    through each other).
//! 3. [`inline_fragments`] — small non-recursive rules are substituted into their callers,
//!    so lexical pieces (`ws`, `string`, `number`) become part of one automaton instead of
//!    separate Earley items. Growth is bounded. AFTER THIS: references remain only to
//!    recursive or large rules.
//! 4. [`outline_large_repeats`] — a bounded repetition whose unrolled copies would be
//!    large (`minItems: 600` of an object) gets its body moved into a rule of its own, so
//!    unrolling copies one rule reference instead of the whole body. AFTER THIS: no
//!    repetition unrolls to more than [`UNROLL_MAX_SIZE`] IR nodes of inline body
//!    ([`UNROLL_MAX_SIZE_REGULAR`] for small rule-free bodies).
//! 5. [`drop_unreachable`] — rules not reachable from the root are removed and rules are
//!    renumbered. AFTER THIS: every rule is reachable from the root.

use crate::grammar::{Expr, Grammar, Rule, RuleId};
use crate::grammar::{GrammarError, GrammarErrorKind};

/// Largest rule body (in [`Expr::size`] nodes) that is inlined into its callers.
pub const INLINE_MAX_SIZE: usize = 100;

/// Largest rule body (in [`Expr::expanded_size`] nodes) inlined into more than one place.
pub const INLINE_SHARED_MAX: u64 = 48;

/// Most IR nodes that inlining may add to a grammar in total.
pub const INLINE_GROWTH_MAX: usize = 10_000;

/// Largest `body size × repetition bound` unrolled inline; larger bodies are outlined.
pub const UNROLL_MAX_SIZE: usize = 2_000;

/// The same bound for small bodies that reference no rule (at most [`CHAR_MAX_SIZE`]
/// nodes: `maxLength: 1024` of a JSON string character, 34 nodes with every spelling): their copies stay one DFA, built
/// by splicing copies of the body's (`chain`), whose positions share one mask. Outlined,
/// every character was a rule call: each token longer than one character straddled the
/// call's end, so a fill inside such a string ran ~120,000 uncertain tokens through the
/// parser (0.7 ms at every position of a `maxLength: 1024` string).
pub const UNROLL_MAX_SIZE_REGULAR: usize = 1024 * CHAR_MAX_SIZE;

/// Largest rule-free body that [`UNROLL_MAX_SIZE_REGULAR`] applies to.
pub const CHAR_MAX_SIZE: usize = 40;

/// Runs all IR passes in order on a copy of `g` (see [`optimize_owned`]).
pub fn optimize(g: &Grammar) -> Result<Grammar, GrammarError> {
    optimize_owned(g.clone())
}

/// Runs all IR passes in order, in place: a compile owns the grammar it converted, and
/// copying then freeing a large schema's IR costs a millisecond.
pub fn optimize_owned(mut g: Grammar) -> Result<Grammar, GrammarError> {
    check_grammar(&g)?;
    remove_unproductive(&mut g)?;
    merge_duplicate_rules(&mut g);
    inline_fragments(&mut g);
    outline_large_repeats(&mut g);
    let g = drop_unreachable(g);
    check_intersections(&g)?;
    Ok(g)
}

/// What the automata builder relies on in an optimized grammar (one read back from
/// bytes, say): valid references and member sets, a root that can finish, rule-free
/// intersections. Rewrites nothing.
pub(crate) fn check_optimized(g: &Grammar) -> Result<(), GrammarError> {
    check_grammar(g)?;
    productive_rules(g)?;
    check_intersections(g)
}

/// Every operand of an intersection is rule-free once inlining is done: the automata
/// builder intersects byte automata, and a rule call is not one.
fn check_intersections(g: &Grammar) -> Result<(), GrammarError> {
    fn calls_in_and(e: &Expr, inside: bool) -> bool {
        match e {
            Expr::Rule(_) => inside,
            Expr::Seq(v) | Expr::Alt(v) => v.iter().any(|x| calls_in_and(x, inside)),
            Expr::And(v) => v.iter().any(|x| calls_in_and(x, true)),
            Expr::Repeat { expr, .. } => calls_in_and(expr, inside),
            Expr::Empty | Expr::Literal(_) | Expr::Class(_) | Expr::Dfa(_) => false,
        }
    }
    match g.rules.iter().find(|r| calls_in_and(&r.body, false)) {
        Some(r) => Err(GrammarError::global(GrammarErrorKind::IntersectionCallsRule(r.name.clone()))),
        None => Ok(()),
    }
}

/// Every rule reference names a rule, and every [`MemberSet`](crate::grammar::MemberSet)
/// fits its rule: a grammar built in code is checked before any pass relies on it.
fn check_grammar(g: &Grammar) -> Result<(), GrammarError> {
    g.check_references()?;
    for rule in &g.rules {
        if let Some(set) = &rule.members {
            set.check(rule)?;
        }
    }
    Ok(())
}

/// Whether rule `r` can complete, given which rules can (`p`). A member set decides for its
/// rule: its body over-approximates.
fn productive_rule(r: &Rule, p: &[bool]) -> bool {
    match (&r.members, &r.body) {
        // (Its opening too: the text before the members.)
        (Some(set), Expr::Seq(v)) => set.productive(|id| p[id.index()]) && productive(&v[0], p),
        (Some(_), _) => false,
        (None, body) => productive(body, p),
    }
}

fn productive(e: &Expr, p: &[bool]) -> bool {
    match e {
        // (A `CharDfa`'s start always reaches a final state: it trims the rest.)
        Expr::Empty | Expr::Literal(_) | Expr::Dfa(_) => true,
        Expr::Class(r) => !r.is_empty(),
        Expr::Rule(r) => p[r.index()],
        // (An intersection of productive operands may still be empty: its automaton then
        // has no final state, and trimming leaves the rule nothing to match.)
        Expr::Seq(v) | Expr::And(v) => v.iter().all(|x| productive(x, p)),
        Expr::Alt(v) => v.iter().any(|x| productive(x, p)),
        Expr::Repeat { expr, min, .. } => *min == 0 || productive(expr, p),
    }
}

/// Replaces references to rules that derive no finite string with the empty set.
pub fn remove_unproductive(g: &mut Grammar) -> Result<(), GrammarError> {
    let p = productive_rules(g)?;
    if p.iter().all(|&x| x) {
        return Ok(());
    }
    for r in &mut g.rules {
        r.body.map_rules(&mut |id| if p[id.index()] { Expr::Rule(id) } else { Expr::Alt(vec![]) });
    }
    Ok(())
}

/// Points every reference to a rule at one rule with an equal body (and flags), then
/// re-examines the callers of merged rules, whose bodies may have become equal in turn;
/// the merged-away rules are left unreferenced for [`drop_unreachable`].
pub fn merge_duplicate_rules(g: &mut Grammar) {
    use std::hash::BuildHasher;
    let n = g.rules.len();
    let hasher = rustc_hash::FxBuildHasher;
    let mut callers = vec![Vec::new(); n];
    for (i, r) in g.rules.iter().enumerate() {
        r.body.for_each_rule(&mut |j| {
            if callers[j.index()].last() != Some(&i) {
                callers[j.index()].push(i);
            }
        });
    }
    // `rep` is a union-find forest: a merged rule points at the rule it merged into.
    let mut rep: Vec<usize> = (0..n).collect();
    fn find(rep: &mut [usize], mut i: usize) -> usize {
        while rep[i] != i {
            rep[i] = rep[rep[i]];
            i = rep[i];
        }
        i
    }
    let mut buckets: rustc_hash::FxHashMap<u64, Vec<usize>> = Default::default();
    let mut hash = vec![0u64; n];
    let mut work: Vec<usize> = (0..n).collect();
    let mut queued = vec![false; n];
    while !work.is_empty() {
        let mut merged = Vec::new();
        for i in std::mem::take(&mut work) {
            queued[i] = false;
            if rep[i] != i {
                continue;
            }
            if let Some(b) = buckets.get_mut(&hash[i]) {
                b.retain(|&j| j != i);
            }
            g.rules[i].body.map_rules(&mut |id| Expr::Rule(RuleId(find(&mut rep, id.index()) as u32)));
            if let Some(set) = &mut g.rules[i].members {
                set.map_rules(&mut |id| Some(RuleId(find(&mut rep, id.index()) as u32)));
            }
            let r = &g.rules[i];
            hash[i] = hasher.hash_one((&r.body, r.keep, r.stand_in, &r.members));
            let same = buckets.entry(hash[i]).or_default();
            let equal = |q: &Rule| {
                q.keep == r.keep && q.stand_in == r.stand_in && q.body == r.body && q.members == r.members
            };
            match same.iter().find(|&&j| equal(&g.rules[j])) {
                Some(&j) => {
                    rep[i] = j;
                    merged.push(i);
                }
                None => same.push(i),
            }
        }
        for i in merged {
            for &c in &callers[i] {
                if !queued[c] {
                    queued[c] = true;
                    work.push(c);
                }
            }
        }
    }
    for r in &mut g.rules {
        r.body.map_rules(&mut |id| Expr::Rule(RuleId(find(&mut rep, id.index()) as u32)));
        if let Some(set) = &mut r.members {
            set.map_rules(&mut |id| Some(RuleId(find(&mut rep, id.index()) as u32)));
        }
    }
    g.root = RuleId(find(&mut rep, g.root.index()) as u32);
}

/// Which rules derive some finite string; an error when the root does not.
pub fn productive_rules(g: &Grammar) -> Result<Vec<bool>, GrammarError> {
    let mut p = vec![false; g.rules.len()];
    loop {
        let mut changed = false;
        // Last rule first: converters create a rule before the ones it calls, so most
        // callees are decided before their callers in the same sweep.
        for (i, r) in g.rules.iter().enumerate().rev() {
            if !p[i] && productive_rule(r, &p) {
                p[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    if !p[g.root.index()] {
        return Err(GrammarError::global(GrammarErrorKind::EmptyLanguage));
    }
    Ok(p)
}

/// Rules in an order where every rule comes after the rules it calls (except within a
/// cycle), and whether each rule is recursive (on a cycle of references). Tarjan's
/// strongly connected components, which come out callees first; iterative, so deep
/// reference chains cannot overflow the stack. Linear in rules + references.
fn callees_first(calls: &[Vec<u32>]) -> (Vec<u32>, Vec<bool>) {
    const UNSEEN: u32 = u32::MAX;
    struct Walk {
        index: Vec<u32>,
        low: Vec<u32>,
        on_stack: Vec<bool>,
        stack: Vec<u32>,
        /// `(rule, next reference to visit)`: the explicit recursion stack.
        frames: Vec<(u32, usize)>,
        next: u32,
    }
    impl Walk {
        fn enter(&mut self, v: usize) {
            (self.index[v], self.low[v]) = (self.next, self.next);
            self.next += 1;
            self.stack.push(v as u32);
            self.on_stack[v] = true;
            self.frames.push((v as u32, 0));
        }
    }
    let n = calls.len();
    let mut w = Walk {
        index: vec![UNSEEN; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        frames: Vec::new(),
        next: 0,
    };
    let (mut order, mut recursive) = (Vec::with_capacity(n), vec![false; n]);
    for root in 0..n {
        if w.index[root] != UNSEEN {
            continue;
        }
        w.enter(root);
        while let Some(&(v, k)) = w.frames.last() {
            let v = v as usize;
            if let Some(&c) = calls[v].get(k) {
                let top = w.frames.len() - 1;
                w.frames[top].1 += 1;
                let c = c as usize;
                if w.index[c] == UNSEEN {
                    w.enter(c);
                } else if w.on_stack[c] {
                    w.low[v] = w.low[v].min(w.index[c]);
                }
                continue;
            }
            w.frames.pop();
            if let Some(&(p, _)) = w.frames.last() {
                w.low[p as usize] = w.low[p as usize].min(w.low[v]);
            }
            if w.low[v] == w.index[v] {
                // `v` roots a component: everything above it on the stack.
                let first = order.len();
                while let Some(x) = w.stack.pop() {
                    w.on_stack[x as usize] = false;
                    order.push(x);
                    if x as usize == v {
                        break;
                    }
                }
                let cyclic = order.len() - first > 1 || calls[v].contains(&(v as u32));
                for &x in &order[first..] {
                    recursive[x as usize] = cyclic;
                }
            }
        }
    }
    (order, recursive)
}

/// Inlines small non-recursive rules into their callers, leaves first.
///
/// One pass in callee-first order: when a rule is reached, the rules it calls already
/// have their final bodies, so each inlinable callee is substituted once, with whatever
/// it inlined itself. Whether the rule is then inlinable into its own callers depends on
/// its final body and on how often it is referenced (a reference count its callers'
/// later inlining cannot change, since a caller only gains references to rules it inlines
/// and those come before it).
pub fn inline_fragments(g: &mut Grammar) {
    for r in &mut g.rules {
        flatten(&mut r.body);
    }
    let n = g.rules.len();
    let mut refs = vec![0u32; n];
    let calls: Vec<Vec<u32>> = g
        .rules
        .iter()
        .map(|r| {
            let mut c = Vec::new();
            r.body.for_each_rule(&mut |id| {
                refs[id.index()] += 1;
                c.push(id.index() as u32);
            });
            c.sort_unstable();
            c.dedup();
            c
        })
        .collect();
    let (order, recursive) = callees_first(&calls);
    // A member set's rule and the rules it names are told apart by the parser: they stay.
    let mut pinned = vec![false; n];
    for (i, r) in g.rules.iter().enumerate() {
        if let Some(set) = &r.members {
            pinned[i] = true;
            set.for_each_rule(&mut |id| pinned[id.index()] = true);
        }
    }
    let mut sizes: Vec<usize> = g.rules.iter().map(|r| r.body.size()).collect();
    let mut size: usize = sizes.iter().sum();
    // Growth is bounded by an absolute amount: the automata of a large grammar grow with
    // every copy, so large grammars only get the inlining small ones get.
    let budget = size + INLINE_GROWTH_MAX;
    let mut inlinable = vec![false; n];
    for &i in &order {
        let i = i as usize;
        if calls[i].iter().any(|&c| inlinable[c as usize]) {
            let mut body = std::mem::replace(&mut g.rules[i].body, Expr::Empty);
            // Substitute while the growth budget lasts (flattening only shrinks, so the
            // estimate is an upper bound); past it, references stay. `i` itself is never
            // substituted: an inlinable rule is not recursive.
            let mut room = budget.saturating_sub(size);
            body.map_rules(&mut |id| {
                let grows = sizes[id.index()] - 1;
                if inlinable[id.index()] && grows <= room {
                    room -= grows;
                    // The only reference takes the body itself: the rule is unreachable
                    // from here on (a copy and a drop of it cost a tenth of a tool-calling
                    // tag's optimization).
                    if refs[id.index()] == 1 {
                        std::mem::replace(&mut g.rules[id.index()].body, Expr::Empty)
                    } else {
                        g.rules[id.index()].body.clone()
                    }
                } else {
                    Expr::Rule(id)
                }
            });
            flatten(&mut body);
            let after = body.size();
            size = size - sizes[i] + after;
            sizes[i] = after;
            g.rules[i].body = body;
        }
        let rule = &g.rules[i];
        inlinable[i] = i != g.root.index()
            && !recursive[i]
            && !rule.keep
            && !pinned[i]
            && sizes[i] <= INLINE_MAX_SIZE
            // Copies of a large rule each become automaton states (and masks).
            && (refs[i] <= 1 || rule.body.expanded_size() <= INLINE_SHARED_MAX);
    }
}

/// Moves the bodies of repetitions that would unroll to more than [`UNROLL_MAX_SIZE`]
/// nodes into new rules (named `<rule>__repeat<k>`), one rule per distinct body: the
/// 256-character blocks of every long `maxLength` string in a schema are the same rule
/// (each copy was ~3,600 DFA states to build).
pub fn outline_large_repeats(g: &mut Grammar) {
    let mut out = Outlined { rules: Vec::new(), by_body: Default::default(), base: g.rules.len() };
    for i in 0..out.base {
        // A member set's body is the set's own shape (its opening holds no rule).
        if g.rules[i].members.is_some() {
            continue;
        }
        let mut body = std::mem::replace(&mut g.rules[i].body, Expr::Empty);
        let name = g.rules[i].name.clone();
        outline_in(&mut body, &name, &mut out);
        g.rules[i].body = body;
    }
    g.rules.extend(out.rules);
}

/// Rules made by [`outline_large_repeats`] (numbered from `base`), by body.
struct Outlined {
    rules: Vec<Rule>,
    by_body: rustc_hash::FxHashMap<Expr, RuleId>,
    base: usize,
}

/// Outlines the large repetitions of `e` (innermost first); returns `e`'s
/// [`Expr::expanded_size`] and whether it calls a rule, as they are afterwards: computed
/// on the way up, since walking each repetition's body again made free text (stars
/// nested as deep as its patterns are long) quadratic.
fn outline_in(e: &mut Expr, name: &str, out: &mut Outlined) -> (u64, bool) {
    match e {
        Expr::Seq(v) | Expr::Alt(v) => v.iter_mut().fold((1, false), |(size, calls), x| {
            let (s, c) = outline_in(x, name, out);
            (size.saturating_add(s), calls || c)
        }),
        // An intersection's operands stay rule-free (its product is bounded by the
        // automata limits instead).
        Expr::And(_) => {
            let mut calls = false;
            e.for_each_rule(&mut |_| calls = true);
            (e.expanded_size(), calls)
        }
        Expr::Repeat { expr, min, max } => {
            let (body, calls) = outline_in(expr, name, out);
            let copies = max.unwrap_or(*min).max(*min) as usize;
            let sized = crate::grammar::expanded_copies(*min, *max);
            let regular = body <= CHAR_MAX_SIZE as u64 && !calls;
            let limit = if regular { UNROLL_MAX_SIZE_REGULAR } else { UNROLL_MAX_SIZE } as u64;
            if copies > 1 && body > 1 && body.saturating_mul(copies as u64) > limit {
                let next = RuleId((out.base + out.rules.len()) as u32);
                let id = *out.by_body.entry((**expr).clone()).or_insert(next);
                let body = std::mem::replace(&mut **expr, Expr::Rule(id));
                if id == next {
                    out.rules.push(Rule::new(format!("{name}__repeat{}", out.rules.len()), body));
                }
                // Now `(rule){min,max}`: one node per copy.
                return (1u64.saturating_add(sized), true);
            }
            (1u64.saturating_add(body.saturating_mul(sized)), calls)
        }
        Expr::Rule(_) => (1, true),
        Expr::Empty | Expr::Literal(_) | Expr::Class(_) => (1, false),
        Expr::Dfa(_) => (e.expanded_size(), false),
    }
}

/// Splices nested sequences into their parent sequence and nested alternations into their
/// parent alternation (inlining creates both).
fn flatten(e: &mut Expr) {
    match e {
        Expr::Seq(v) | Expr::Alt(v) => {
            v.iter_mut().for_each(flatten);
            let is_seq = matches!(e, Expr::Seq(_));
            let (Expr::Seq(v) | Expr::Alt(v)) = e else { return };
            if v.iter().any(|x| if is_seq { matches!(x, Expr::Seq(_)) } else { matches!(x, Expr::Alt(_)) }) {
                let mut out = Vec::with_capacity(v.len());
                for x in v.drain(..) {
                    match x {
                        Expr::Seq(inner) if is_seq => out.extend(inner),
                        Expr::Alt(inner) if !is_seq => out.extend(inner),
                        x => out.push(x),
                    }
                }
                *v = out;
            }
        }
        Expr::Repeat { expr, .. } => flatten(expr),
        Expr::And(v) => v.iter_mut().for_each(flatten),
        Expr::Empty | Expr::Literal(_) | Expr::Class(_) | Expr::Rule(_) | Expr::Dfa(_) => {}
    }
}

/// Removes rules unreachable from the root and renumbers the rest (root first).
pub fn drop_unreachable(mut g: Grammar) -> Grammar {
    let n = g.rules.len();
    let mut seen = vec![false; n];
    let mut stack = vec![g.root];
    seen[g.root.index()] = true;
    while let Some(r) = stack.pop() {
        g.rule(r).body.for_each_rule(&mut |j| {
            if !seen[j.index()] {
                seen[j.index()] = true;
                stack.push(j);
            }
        });
    }
    let mut new_id = vec![RuleId(u32::MAX); n];
    let mut order = vec![g.root.index()];
    order.extend((0..n).filter(|&i| seen[i] && i != g.root.index()));
    for (k, &i) in order.iter().enumerate() {
        new_id[i] = RuleId(k as u32);
    }
    let rules = order
        .iter()
        .map(|&i| {
            let mut body = std::mem::replace(&mut g.rules[i].body, Expr::Empty);
            body.map_rules(&mut |r| Expr::Rule(new_id[r.index()]));
            let mut members = g.rules[i].members.take();
            if let Some(set) = &mut members {
                set.map_rules(&mut |r| Some(new_id[r.index()]).filter(|id| id.0 != u32::MAX));
            }
            let (keep, stand_in) = (g.rules[i].keep, g.rules[i].stand_in);
            Rule { name: std::mem::take(&mut g.rules[i].name), body, keep, stand_in, members }
        })
        .collect();
    Grammar { rules, root: RuleId(0), markers: std::mem::take(&mut g.markers) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inlines_fragments_and_keeps_recursion() {
        let g = Grammar::from_ebnf(
            "root ::= a b\na ::= \"x\" ws\nb ::= \"(\" b \")\" | ws\nws ::= \" \"*\nunused ::= \"q\"",
        )
        .unwrap();
        let o = optimize(&g).unwrap();
        assert_eq!(o.to_string(), "root ::= \"x\" \" \"* b\nb ::= \"(\" b \")\" | \" \"*\n");
        // A rule marked `keep` stays a rule, however small.
        let mut g = g;
        g.rules[1].keep = true;
        let o = optimize(&g).unwrap();
        assert_eq!(o.to_string(), "root ::= a b\na ::= \"x\" \" \"*\nb ::= \"(\" b \")\" | \" \"*\n");
    }

    #[test]
    fn large_repeats_are_outlined() {
        let g =
            Grammar::from_ebnf("root ::= (\"{\" [a-z]+ \":\" v \"}\"){600,}\nv ::= \"[\" v? \"]\"").unwrap();
        let o = optimize(&g).unwrap();
        assert_eq!(o.rules.len(), 3);
        assert_eq!(
            o.to_string(),
            "root ::= root__repeat0{600,}\nv ::= \"[\" v? \"]\"\nroot__repeat0 ::= \"{\" [a-z]+ \":\" v \"}\"\n"
        );
        let small = Grammar::from_ebnf("root ::= [0-9]{0,15}").unwrap();
        assert_eq!(optimize(&small).unwrap().rules.len(), 1);
        // A small rule-free body (a JSON string character) stays inline even when long.
        let chars = Grammar::from_ebnf("root ::= ([a-z] | \"\\\\\" [nrt]){0,254}").unwrap();
        assert_eq!(optimize(&chars).unwrap().rules.len(), 1);
        // A larger rule-free body repeated many times is outlined.
        let big = Grammar::from_ebnf("root ::= (\"\\\"\" [0-9a-f]{48} \"\\\"\" \", \"){1000}").unwrap();
        assert_eq!(optimize(&big).unwrap().rules.len(), 2);
        // Equal bodies, wherever they repeat, become one rule.
        let twice = Grammar::from_ebnf(
            "root ::= a \"|\" b \"|\" ([0-9a-f]{48} \",\"){300}\na ::= \"x\" ([0-9a-f]{48} \",\"){500}\nb ::= \"y\" ([0-9a-f]{48} \",\"){200,900}",
        )
        .unwrap();
        let o = optimize(&twice).unwrap();
        assert_eq!(o.rules.len(), 2, "{o}");
        assert_eq!(o.to_string().matches("root__repeat0{").count(), 3, "{o}");
        // Sizes are those after the inner repetitions are outlined: the inner one becomes
        // a rule, and the outer one, now ~500 nodes a copy, is outlined only when its
        // copies then pass the limit (3 do not, 5 do).
        for (outer, rules) in [(3, 3), (5, 4)] {
            let nested = Grammar::from_ebnf(&format!(
                "root ::= ((\"\\\"\" [0-9a-f]{{48}} \"\\\"\" \",\"){{500}} \";\" v){{{outer}}}\nv ::= \"[\" v? \"]\""
            ))
            .unwrap();
            let o = optimize(&nested).unwrap();
            assert_eq!(o.rules.len(), rules, "{o}");
        }
    }

    #[test]
    fn large_rules_used_twice_stay_rules() {
        // `date` expands to 48+ nodes: one copy inline, two copies as a shared rule.
        let date = "date ::= [0-9]{4} \"-\" [0-9]{2} \"-\" [0-9]{2} (\"T\" [0-9]{2} \":\" [0-9]{2} \":\" [0-9]{2} [.0-9]{0,20})?";
        let once = Grammar::from_ebnf(&format!("root ::= \"[\" date \"]\"\n{date}")).unwrap();
        assert_eq!(optimize(&once).unwrap().rules.len(), 1);
        let twice = Grammar::from_ebnf(&format!("root ::= date \",\" date\n{date}")).unwrap();
        assert_eq!(optimize(&twice).unwrap().to_string().lines().next(), Some("root ::= date \",\" date"));
        // Small rules are still copied wherever they are used.
        let small = Grammar::from_ebnf("root ::= d \",\" d\nd ::= [0-9]{1,3}").unwrap();
        assert_eq!(optimize(&small).unwrap().rules.len(), 1);
    }

    #[test]
    fn callees_come_first_and_cycles_are_recursive() {
        // 0 → 1 → 2, 1 → 3 ⇄ 4, 5 → 5, 6 alone.
        let calls: Vec<Vec<u32>> = vec![vec![1], vec![2, 3], vec![], vec![4], vec![3], vec![5], vec![]];
        let (order, recursive) = callees_first(&calls);
        let pos = |r: u32| order.iter().position(|&x| x == r).unwrap();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..7).collect::<Vec<u32>>());
        for (caller, callees) in calls.iter().enumerate() {
            for &c in callees {
                if !(recursive[caller] && recursive[c as usize]) {
                    assert!(pos(c) < pos(caller as u32), "{c} must come before {caller}: {order:?}");
                }
            }
        }
        assert_eq!(recursive, [false, false, false, true, true, true, false]);
        // A long chain does not recurse on the call stack.
        let chain: Vec<Vec<u32>> =
            (0..200_000u32).map(|i| if i + 1 < 200_000 { vec![i + 1] } else { vec![] }).collect();
        let (order, recursive) = callees_first(&chain);
        assert_eq!(order[0], 199_999);
        assert!(!recursive.iter().any(|&r| r));
    }

    #[test]
    fn inlining_is_transitive_and_bounded() {
        // Chains inline fully in one pass; mutual recursion stays.
        let g = Grammar::from_ebnf(
            "root ::= a \"!\" c\na ::= \"x\" b\nb ::= \"y\"\nc ::= \"(\" d \")\"\nd ::= c?",
        )
        .unwrap();
        let o = optimize(&g).unwrap();
        assert_eq!(o.to_string().lines().next(), Some("root ::= \"x\" \"y\" \"!\" c"));
        // 300 rules of 41 nodes each, each used once: inlining all would add 12,000 nodes.
        let mut text = String::from("root ::=");
        let mut rules = String::new();
        for i in 0..300 {
            text.push_str(&format!(" r{i}"));
            let alts: Vec<String> = (0..40).map(|k| format!("\"{i}-{k}\"")).collect();
            rules.push_str(&format!("r{i} ::= {}\n", alts.join(" | ")));
        }
        let g = Grammar::from_ebnf(&format!("{text}\n{rules}")).unwrap();
        let before: usize = g.rules.iter().map(|r| r.body.size()).sum();
        let o = optimize(&g).unwrap();
        let after: usize = o.rules.iter().map(|r| r.body.size()).sum();
        assert!(after <= before + INLINE_GROWTH_MAX, "{before} -> {after}");
        assert!(o.rules.len() > 1 && o.rules.len() < 300, "{} rules", o.rules.len());
    }

    #[test]
    fn duplicate_rules_merge_through_their_references() {
        // b and c are equal; d and e become equal once b and c are one; f differs, and the
        // recursive r and s are kept apart (each refers to itself).
        let mut g = Grammar::from_ebnf(
            "root ::= d e f r s\nb ::= \"(\" x \")\"\nc ::= \"(\" x \")\"\nx ::= \"y\"\n\
             d ::= \"[\" b \"]\"\ne ::= \"[\" c \"]\"\nf ::= \"[\" b \"}\"\n\
             r ::= \"<\" r? \">\"\ns ::= \"<\" s? \">\"",
        )
        .unwrap();
        merge_duplicate_rules(&mut g);
        let names = |g: &Grammar| g.rules.iter().map(|r| r.name.clone()).collect::<Vec<_>>();
        let g = drop_unreachable(g);
        assert_eq!(names(&g), ["root", "b", "x", "d", "f", "r", "s"]);
        assert!(g.to_string().starts_with("root ::= d d f r s\n"), "{g}");
    }

    #[test]
    fn unproductive_rules_become_empty_sets() {
        let g = Grammar::from_ebnf("root ::= \"a\" | x\nx ::= \"b\" x").unwrap();
        let o = optimize(&g).unwrap();
        assert_eq!(o.to_string(), "root ::= \"a\"\n");
        let g = Grammar::from_ebnf("root ::= \"b\" root").unwrap();
        assert!(optimize(&g).is_err());
    }

    /// Backward sweeps find what forward sweeps until nothing changes find, on random
    /// grammars of rules calling each other in every order, recursion and empty
    /// alternatives included (the converters' rule orders are not the only ones).
    #[test]
    fn productive_rules_are_the_sweeps_fixpoint() {
        let mut state = 9u64;
        let mut next = move |n: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        let mut mixed = 0;
        for case in 0..3000 {
            let n = 1 + next(12) as usize;
            let mut text = String::new();
            for i in 0..n {
                let alts: Vec<String> = (0..1 + next(3))
                    .map(|_| {
                        let items: Vec<String> = (0..1 + next(3))
                            .map(|_| match next(5) {
                                0 => "\"t\"".to_string(),
                                1 => "[]".to_string(),
                                2 => format!("(r{})*", next(n as u64)),
                                _ => format!("r{}", next(n as u64)),
                            })
                            .collect();
                        items.join(" ")
                    })
                    .collect();
                let name = if i == 0 { "root".to_string() } else { format!("r{i}") };
                text.push_str(&format!("{name} ::= {}\n", alts.join(" | ").replace("r0", "root")));
            }
            let Ok(g) = Grammar::from_ebnf(&text) else { continue };
            let mut want = vec![false; g.rules.len()];
            loop {
                let mut changed = false;
                for (i, r) in g.rules.iter().enumerate() {
                    if !want[i] && productive_rule(r, &want) {
                        (want[i], changed) = (true, true);
                    }
                }
                if !changed {
                    break;
                }
            }
            mixed += usize::from(want.contains(&true) && want.contains(&false));
            match productive_rules(&g) {
                Ok(got) => assert_eq!(got, want, "case {case}:\n{text}"),
                Err(_) => assert!(!want[g.root.index()], "case {case}:\n{text}"),
            }
        }
        assert!(mixed > 300, "only {mixed} grammars with productive and unproductive rules");
    }
}
