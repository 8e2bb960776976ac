//! Boolean combinations of string languages, for JSON object keys.
//!
//! An object schema sorts every possible key into exactly one class: a declared property,
//! a key matched by some set of `patternProperties`, or an "additional" key. Which value
//! schema applies depends on the class, so the grammar needs each class as its own key
//! language — `pattern₁ ∧ ¬pattern₂ ∧ ¬names`, and so on. Grammar IR has no intersection
//! or complement, so this module does them on a small character-level automaton: every
//! component language becomes a Thompson NFA over Unicode scalar ranges, one subset
//! construction runs them all at once, and each DFA state is labelled with the set of
//! components that accept there. A key class is then "the DFA with these labels final",
//! written back as grammar rules by [`KeySet::class_rules`].

use super::lower::{split_anchors, Branch};
use super::parse::{Node, Parser};
use super::{json_string_char, RegexError, RegexErrorKind, RegexLimits};
use crate::grammar::class::subtract_class;
use crate::grammar::{Expr, RuleId};
use crate::interner::SliceInterner;
use rustc_hash::FxHashMap;
use std::collections::HashMap;

/// Every scalar value a JSON string can hold.
const ANY: &[(u32, u32)] = &[(0, 0xD7FF), (0xE000, 0x10FFFF)];

/// One language in the combination.
#[derive(Debug, Clone)]
pub(crate) enum Component<'a> {
    /// Strings the ECMA-262 pattern matches somewhere (JSON Schema semantics: unanchored
    /// unless `^` / `$`).
    Pattern(&'a str),
    /// Exactly these strings.
    Names(&'a [&'a str]),
    /// Strings of `min..=max` characters.
    Length {
        /// Fewest characters.
        min: u32,
        /// Most characters (`None`: unbounded).
        max: Option<u32>,
    },
}

/// The joint DFA of several [`Component`]s. State 0 is the start.
#[derive(Debug)]
pub(crate) struct KeySet {
    /// Per state: `(lo, hi, target)` edges over disjoint scalar ranges, sorted.
    edges: Vec<Vec<(u32, u32, u32)>>,
    /// Per state: bit `i` set when component `i` accepts there.
    labels: Vec<u64>,
}

/// NFA under construction: epsilon edges and range edges per state.
#[derive(Default)]
struct Nfa {
    eps: Vec<Vec<u32>>,
    ranges: Vec<Vec<(u32, u32, u32)>>,
}

impl Nfa {
    fn state(&mut self) -> u32 {
        self.eps.push(Vec::new());
        self.ranges.push(Vec::new());
        (self.eps.len() - 1) as u32
    }

    /// Adds `n` between `from` and a new state, which is returned.
    fn node(&mut self, n: &Node, from: u32, limit: usize) -> Result<u32, usize> {
        if self.eps.len() > limit {
            return Err(self.eps.len());
        }
        Ok(match n {
            Node::Empty | Node::Start | Node::End => from,
            Node::Class(r) => {
                let to = self.state();
                self.ranges[from as usize].extend(r.iter().map(|&(a, b)| (a, b, to)));
                to
            }
            Node::Seq(v) => {
                let mut at = from;
                for x in v {
                    at = self.node(x, at, limit)?;
                }
                at
            }
            Node::Alt(v) => {
                let to = self.state();
                for x in v {
                    let s = self.state();
                    self.eps[from as usize].push(s);
                    let e = self.node(x, s, limit)?;
                    self.eps[e as usize].push(to);
                }
                to
            }
            Node::Repeat { node, min, max } => {
                let mut at = from;
                for _ in 0..*min {
                    at = self.node(node, at, limit)?;
                }
                match max {
                    None => {
                        // at —ε→ loop —node→ back to loop; loop —ε→ out.
                        let lp = self.state();
                        self.eps[at as usize].push(lp);
                        let e = self.node(node, lp, limit)?;
                        self.eps[e as usize].push(lp);
                        let out = self.state();
                        self.eps[lp as usize].push(out);
                        out
                    }
                    Some(max) => {
                        let out = self.state();
                        self.eps[at as usize].push(out);
                        for _ in *min..*max {
                            at = self.node(node, at, limit)?;
                            self.eps[at as usize].push(out);
                        }
                        out
                    }
                }
            }
        })
    }

    /// Extends `set` with every state its ε edges reach, then sorts it.
    fn closure(&self, set: &mut Vec<u32>, marks: &mut Marks) {
        if marks.stamp == u32::MAX {
            marks.seen.fill(0);
            marks.stamp = 0;
        }
        marks.stamp += 1;
        let stamp = marks.stamp;
        for &s in set.iter() {
            marks.seen[s as usize] = stamp;
        }
        let mut i = 0;
        while i < set.len() {
            let s = set[i] as usize;
            for &t in &self.eps[s] {
                if marks.seen[t as usize] != stamp {
                    marks.seen[t as usize] = stamp;
                    set.push(t);
                }
            }
            i += 1;
        }
        set.sort_unstable();
    }
}

/// Membership marks for closures: a state is in the set being closed when its mark is
/// the current stamp (no clearing between closures).
struct Marks {
    seen: Vec<u32>,
    stamp: u32,
}

impl KeySet {
    /// Builds the joint DFA. At most 64 components; `limits.max_size` bounds both the
    /// NFA and the DFA (a typed [`RegexErrorKind::TooLarge`] beyond it).
    pub(crate) fn build(components: &[Component<'_>], limits: &RegexLimits) -> Result<KeySet, RegexError> {
        let too_large = |given: usize, pattern: &str| RegexError {
            kind: RegexErrorKind::TooLarge { given: given as u64, limit: limits.max_size },
            pattern: pattern.to_string(),
            offset: 0,
        };
        let mut nfa = Nfa::default();
        let start = nfa.state();
        let mut finals: Vec<u32> = Vec::new();
        for c in components.iter().take(64) {
            let s = nfa.state();
            nfa.eps[start as usize].push(s);
            let end = match c {
                Component::Pattern(p) => {
                    let any =
                        || Node::Repeat { node: Box::new(Node::Class(ANY.to_vec())), min: 0, max: None };
                    let mut alts = Vec::new();
                    for b in split_anchors(Parser::new(p, limits).parse()?, p)?
                        .into_iter()
                        .map(Branch::trim_free_sides)
                    {
                        let mut seq = Vec::new();
                        if !b.start {
                            seq.push(any());
                        }
                        seq.push(b.body);
                        if !b.end {
                            seq.push(any());
                        }
                        alts.push(Node::Seq(seq));
                    }
                    nfa.node(&Node::Alt(alts), s, limits.max_size).map_err(|n| too_large(n, p))?
                }
                Component::Names(names) => {
                    let alts = names
                        .iter()
                        .map(|n| {
                            Node::Seq(n.chars().map(|c| Node::Class(vec![(c as u32, c as u32)])).collect())
                        })
                        .collect();
                    nfa.node(&Node::Alt(alts), s, limits.max_size).map_err(|n| too_large(n, ""))?
                }
                Component::Length { min, max } => {
                    let n = Node::Repeat { node: Box::new(Node::Class(ANY.to_vec())), min: *min, max: *max };
                    nfa.node(&n, s, limits.max_size).map_err(|n| too_large(n, ""))?
                }
            };
            finals.push(end);
        }
        // Alphabet partition: the boundaries of every range edge.
        let mut cuts = vec![0u32, 0x11_0000];
        for es in &nfa.ranges {
            for &(a, b, _) in es {
                cuts.push(a);
                cuts.push(b + 1);
            }
        }
        cuts.sort_unstable();
        cuts.dedup();
        let label = |set: &[u32]| -> u64 {
            finals
                .iter()
                .enumerate()
                .fold(0, |acc, (i, f)| acc | ((set.binary_search(f).is_ok() as u64) << i))
        };
        let mut marks = Marks { seen: vec![0; nfa.eps.len()], stamp: 0 };
        let mut first = vec![start];
        nfa.closure(&mut first, &mut marks);
        // The DFA states' NFA sets, each stored once.
        let mut sets = SliceInterner::default();
        sets.intern(&first);
        let mut edges = Vec::new();
        let mut labels = Vec::new();
        // Per window, the targets before closure; and per distinct such set this state,
        // its DFA state (windows that read alike — most of a class — are closed once).
        let mut targets: Vec<Vec<u32>> = vec![Vec::new(); cuts.len() - 1];
        let mut resolved: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
        let mut set: Vec<u32> = Vec::new();
        let mut closed: Vec<u32> = Vec::new();
        while edges.len() < sets.len() {
            set.clear();
            set.extend_from_slice(sets.get(edges.len() as u32));
            // The state's work: its NFA states' edges spread over the alphabet windows,
            // then each distinct window's target set closed, sorted and looked up
            // (charged below).
            let mut work = 1 + (set.len() + cuts.len()) as u64;
            labels.push(label(&set));
            // Targets per alphabet window, found by binary search on each edge's ends.
            for ts in &mut targets {
                ts.clear();
            }
            for &st in &set {
                for &(a, b, t) in &nfa.ranges[st as usize] {
                    let (i0, i1) = (cuts.partition_point(|&c| c < a), cuts.partition_point(|&c| c <= b));
                    for ts in &mut targets[i0..i1] {
                        if ts.last() != Some(&t) && !ts.contains(&t) {
                            ts.push(t);
                        }
                    }
                }
            }
            resolved.clear();
            let mut out: Vec<(u32, u32, u32)> = Vec::new();
            for (w, ts) in targets.iter_mut().enumerate() {
                if ts.is_empty() {
                    continue;
                }
                let (lo, hi) = (cuts[w], cuts[w + 1] - 1);
                ts.sort_unstable();
                let id = match resolved.get(ts.as_slice()) {
                    Some(&id) => id,
                    None => {
                        closed.clear();
                        closed.extend_from_slice(ts);
                        nfa.closure(&mut closed, &mut marks);
                        work += 2 * closed.len() as u64;
                        let (id, new) = sets.intern(&closed);
                        if new && sets.len() > limits.max_size {
                            return Err(too_large(sets.len(), ""));
                        }
                        resolved.insert(ts.clone(), id);
                        id
                    }
                };
                match out.last_mut() {
                    Some(last) if last.2 == id && last.1 + 1 == lo => last.1 = hi,
                    _ => out.push((lo, hi, id)),
                }
            }
            edges.push(out);
            crate::budget::charge(crate::budget::Phase::Intersection, work).map_err(|e| RegexError {
                kind: RegexErrorKind::Budget(Box::new(e)),
                pattern: String::new(),
                offset: 0,
            })?;
        }
        Ok(KeySet { edges, labels }.minimized())
    }

    /// The same automaton with equivalent states on cycles merged (same label, and every
    /// character leads to equivalent states; a missing edge only to a missing edge).
    ///
    /// The subset construction keeps apart states that only its NFA tells apart: for the
    /// key pattern `[a-zA-Z]+` (unanchored: "holds a letter"), "inside the letters" and
    /// "after them" both accept anything, yet were two states entered from each other,
    /// which [`KeySet::class_rules`] writes as two mutually recursive rules — every key
    /// character then one more Earley item and rule call (a quarter of a millisecond per
    /// token mask on a long key). Merged, the state is one self-loop. States on no cycle
    /// (other than a self-loop) stay apart: merging the leaves of a trie of names would
    /// give them several parents, and so rules of their own.
    fn minimized(self) -> KeySet {
        let n = self.edges.len();
        let cyclic = on_cycles(&self.edges);
        if !cyclic.contains(&true) {
            return self;
        }
        // Moore's refinement over the states on cycles, each other state a class of its
        // own (a finer partition: still only equivalent states merge), from the labels,
        // split by where each range leads. Classes `0..n` name single states.
        let mut class: Vec<u32> = (0..n as u32).collect();
        let mut count = {
            let mut ids: HashMap<u64, u32> = HashMap::new();
            for s in (0..n).filter(|&s| cyclic[s]) {
                let k = ids.len() as u32;
                class[s] = n as u32 + *ids.entry(self.labels[s]).or_insert(k);
            }
            ids.len()
        };
        loop {
            let mut ids: HashMap<Signature, u32> = HashMap::new();
            let mut next = class.clone();
            for s in (0..n).filter(|&s| cyclic[s]) {
                let k = ids.len() as u32;
                next[s] = n as u32
                    + *ids.entry((class[s], retarget(&self.edges[s], |t| class[t as usize]))).or_insert(k);
            }
            let done = ids.len() == count;
            class = next;
            count = ids.len();
            if done {
                break;
            }
        }
        if count == cyclic.iter().filter(|&&c| c).count() {
            return self;
        }
        // Each state on a cycle goes to the first state of its class.
        let mut rep: Vec<Option<u32>> = vec![None; count];
        let map: Vec<u32> = (0..n)
            .map(|s| match cyclic[s] {
                true => *rep[class[s] as usize - n].get_or_insert(s as u32),
                false => s as u32,
            })
            .collect();
        // Keep the states still reachable from the start (first), renumbered in order.
        let mut order = vec![map[0]];
        let mut index = vec![u32::MAX; n];
        index[map[0] as usize] = 0;
        let mut i = 0;
        while let Some(&s) = order.get(i) {
            i += 1;
            for &(_, _, t) in &self.edges[s as usize] {
                let t = map[t as usize];
                if index[t as usize] == u32::MAX {
                    index[t as usize] = order.len() as u32;
                    order.push(t);
                }
            }
        }
        let edges = order
            .iter()
            .map(|&s| retarget(&self.edges[s as usize], |t| index[map[t as usize] as usize]))
            .collect();
        let labels = order.iter().map(|&s| self.labels[s as usize]).collect();
        KeySet { edges, labels }
    }

    /// The label (bit `i`: component `i` accepts) of `key`.
    pub(crate) fn label_of(&self, key: &str) -> u64 {
        let mut s = 0usize;
        for c in key.chars() {
            let c = c as u32;
            match self.edges[s].iter().find(|e| e.0 <= c && c <= e.1) {
                Some(e) => s = e.2 as usize,
                None => return 0,
            }
        }
        self.labels[s]
    }

    /// The distinct labels of the states, i.e. every label some string has (the start
    /// state's label included). The set of all strings with no accepting component is
    /// label 0, which is present whenever some string escapes every component.
    pub(crate) fn labels(&self) -> Vec<u64> {
        let mut v = self.labels.clone();
        // A string that leaves the automaton has label 0 too.
        if self.edges.iter().any(|e| covered(e) < ANY_LEN) {
            v.push(0);
        }
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The automaton of the keys whose label satisfies `accept`, with a sink state
    /// (index `n`, label 0, looping on every character) for the strings that leave the
    /// automaton where label 0 is accepted; `None` when no key qualifies.
    fn graph(&self, accept: &impl Fn(u64) -> bool) -> Option<Graph> {
        let n = self.edges.len();
        let sink = n;
        let sink_used = accept(0) && self.edges.iter().any(|e| covered(e) < ANY_LEN);
        // Per state: (ranges, target) edges, the sink's gaps included.
        let succs: Vec<Edges> = (0..=n)
            .map(|s| {
                if s == sink {
                    return if sink_used { vec![(ANY.to_vec(), sink)] } else { Vec::new() };
                }
                let mut by_target: Vec<(Vec<(u32, u32)>, usize)> = Vec::new();
                for &(a, b, t) in &self.edges[s] {
                    match by_target.iter_mut().find(|x| x.1 == t as usize) {
                        Some(x) => x.0.push((a, b)),
                        None => by_target.push((vec![(a, b)], t as usize)),
                    }
                }
                if sink_used {
                    let taken: Vec<(u32, u32)> = self.edges[s].iter().map(|e| (e.0, e.1)).collect();
                    let gaps = subtract_class(ANY, &taken);
                    if !gaps.is_empty() {
                        by_target.push((gaps, sink));
                    }
                }
                by_target
            })
            .collect();
        let finals: Vec<bool> = (0..=n)
            .map(|s| if s == sink { sink_used && accept(0) } else { accept(self.labels[s]) })
            .collect();
        // Live states: those from which a final state is reachable (backward fixpoint).
        let mut live = finals.clone();
        loop {
            let mut changed = false;
            for s in 0..=n {
                if !live[s] && succs[s].iter().any(|(_, t)| live[*t]) {
                    live[s] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        live[0].then_some(Graph { succs, finals, live, sink })
    }

    /// The JSON string bodies (without quotes) of the keys whose label satisfies
    /// `accept`, as one automaton over their JSON spelling ([`super::spell`]); `None`
    /// when no key qualifies. Where [`KeySet::class_rules`] writes a rule per state with
    /// the escapes of each class in place, this shares the escape states between the
    /// states and classes that spell alike: a pattern under a length bound compiles in a
    /// fraction of the time, to a fraction of the states.
    pub(crate) fn spelled(
        &self,
        accept: impl Fn(u64) -> bool,
    ) -> Result<Option<crate::grammar::CharDfa>, crate::budget::BudgetError> {
        let Some(Graph { succs, finals, live, .. }) = self.graph(&accept) else { return Ok(None) };
        let edges: Vec<Vec<(u32, u32, u32)>> = succs
            .iter()
            .map(|edges| {
                let mut pieces: Vec<(u32, u32, u32)> = edges
                    .iter()
                    .filter(|(_, t)| live[*t])
                    .flat_map(|(ranges, t)| ranges.iter().map(move |&(a, b)| (a, b, *t as u32)))
                    .collect();
                pieces.sort_unstable();
                pieces
            })
            .collect();
        super::spell::spelled(&edges, &finals)
    }

    /// The JSON string bodies (without quotes) of the keys whose label satisfies
    /// `accept`: an expression for the whole class, and the bodies of the consecutive
    /// grammar rules, numbered from `first`, that it refers to (states entered from more
    /// than one place). `None` when no key qualifies.
    pub(crate) fn class_rules(&self, accept: impl Fn(u64) -> bool, first: u32) -> Option<(Expr, Vec<Expr>)> {
        let Graph { succs, finals, live, sink } = self.graph(&accept)?;
        let n = sink;
        let is_final = |s: usize| finals[s];
        // One rule per state would leave a key class as a chain of rule calls, which the
        // matcher walks item by item; instead a state reached from exactly one other
        // state is written inside that state's body (a trie becomes one expression).
        let mut indegree = vec![0u32; n + 1];
        for s in (0..=n).filter(|&s| live[s]) {
            for (_, t) in &succs[s] {
                if *t != s && live[*t] {
                    indegree[*t] += 1;
                }
            }
        }
        // Each edge's characters as an expression, once (every pass reads them).
        let classes: Vec<Vec<EdgeClass>> = succs
            .iter()
            .enumerate()
            .map(|(s, edges)| {
                if !live[s] {
                    return Vec::new();
                }
                edges
                    .iter()
                    .map(|(ranges, t)| {
                        if *t != sink {
                            return EdgeClass::Stay(json_string_char(ranges));
                        }
                        // Where the gap holds all of OTHER, only its printable ASCII
                        // part is written at the state (see `Emit::body`).
                        if subtract_class(OTHER, ranges).is_empty() {
                            let ascii = subtract_class(ranges, OTHER);
                            EdgeClass::Leave {
                                by_other: true,
                                rest: (!ascii.is_empty()).then(|| json_string_char(&ascii)),
                            }
                        } else {
                            EdgeClass::Leave { by_other: false, rest: Some(json_string_char(ranges)) }
                        }
                    })
                    .collect()
            })
            .collect();
        let mut emit = Emit {
            succs: &succs,
            classes: &classes,
            live: &live,
            indegree: &indegree,
            is_final: &is_final,
            rule_of: vec![None; n + 1],
            queue: Vec::new(),
            first,
        };
        // The start is written in place too unless some state leads back to it.
        let start = if indegree[0] == 0 { emit.body(0) } else { Expr::Rule(emit.rule_for(0)) };
        let mut bodies = Vec::new();
        while let Some(s) = emit.queue.get(bodies.len()).copied() {
            let body = emit.body(s);
            bodies.push(body);
        }
        Some((start, bodies))
    }
}

/// A state's `(ranges, target)` edges.
type Edges = Vec<(Vec<(u32, u32)>, usize)>;

/// A key class's automaton (see [`KeySet::graph`]).
struct Graph {
    succs: Vec<Edges>,
    finals: Vec<bool>,
    live: Vec<bool>,
    sink: usize,
}

/// The characters no key of printable ASCII spells: those written escaped (`"`, `\`,
/// control characters) and all non-ASCII. At a state of such keys, each of them leaves
/// the automaton.
const OTHER: &[(u32, u32)] = &[(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x80, 0xD7FF), (0xE000, 0x10FFFF)];

/// An edge's characters, written as an expression.
enum EdgeClass {
    /// To a state of the automaton.
    Stay(Expr),
    /// To the sink: whether the gap holds all of [`OTHER`], and the rest of it.
    Leave { by_other: bool, rest: Option<Expr> },
}

/// Which paths of a rule body one pass writes (see [`Emit::body`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Paths that stay in the automaton: to final states and to other rules.
    Stay,
    /// Paths that leave it: a prefix, then the state's gap (what no edge takes), less
    /// [`OTHER`] where the gap holds all of it.
    Leave,
    /// Prefixes whose state's gap holds all of [`OTHER`].
    LeaveByOther,
}

/// Writes a key-class automaton back as grammar rules (see [`KeySet::class_rules`]).
struct Emit<'a> {
    succs: &'a [Edges],
    /// `classes[s][k]`: the characters of `succs[s][k]`.
    classes: &'a [Vec<EdgeClass>],
    live: &'a [bool],
    indegree: &'a [u32],
    is_final: &'a dyn Fn(usize) -> bool,
    /// The rule of each state that has one.
    rule_of: Vec<Option<RuleId>>,
    /// States with a rule, in rule order.
    queue: Vec<usize>,
    first: u32,
}

/// How deep one rule body may nest states before the next one gets a rule of its own
/// (long chains, e.g. `^a{300}$`, would otherwise make deeply nested expressions).
const EMBED_DEPTH_MAX: usize = 48;

impl Emit<'_> {
    fn rule_for(&mut self, s: usize) -> RuleId {
        if let Some(r) = self.rule_of[s] {
            return r;
        }
        let r = RuleId(self.first + self.queue.len() as u32);
        self.rule_of[s] = Some(r);
        self.queue.push(s);
        r
    }

    /// The body of state `s`'s rule (or of the start, written in place).
    ///
    /// Leaving the automaton — a gap character, then anything — is possible at nearly
    /// every state of "any key but these names". Written at each state, every copy of
    /// that tail (a cyclic UTF-8 automaton) was determinized and minimized again before
    /// the copies collapsed into one: a Kubernetes schema with extra properties allowed
    /// spent ~1.6G instructions on it. So a body is written as
    /// `stay | (leave | leave_by_other OTHER) tail`: the paths are spelled out per pass
    /// (the prefixes are shared again by the subset construction, which walks the copies
    /// in step), and the tail and the [`OTHER`] class appear once.
    fn body(&mut self, s: usize) -> Expr {
        let stay = self.pass_from(s, Pass::Stay);
        let leave = self.pass_from(s, Pass::Leave);
        let by_other = self.pass_from(s, Pass::LeaveByOther);
        let by_other = by_other.map(|p| Expr::Seq(vec![p, json_string_char(OTHER)]));
        let exits: Vec<Expr> = leave.into_iter().chain(by_other).collect();
        let mut alts: Vec<Expr> = stay.into_iter().collect();
        if !exits.is_empty() {
            let tail = Expr::Repeat { expr: Box::new(json_string_char(ANY)), min: 0, max: None };
            alts.push(Expr::Seq(vec![alt_of(exits), tail]));
        }
        alt_of(alts)
    }

    /// One pass's paths from `s`, `None` when it has none. States reached from one place
    /// are nested; the decision is made in the [`Pass::Stay`] pass, which runs first and
    /// gives the other states their rules, so the later passes nest the same states.
    fn pass(&mut self, s: usize, depth: usize, pass: Pass) -> Option<Expr> {
        // Self-loops become a repetition, so that the rules of a DFA whose only cycles
        // are self-loops (tries, `[a-z]+`, `.{1,9}`) are not recursive and the grammar
        // optimizer can inline them into one automaton.
        let mut alts = Vec::new();
        let mut self_loop = None;
        if pass == Pass::Stay && (self.is_final)(s) {
            alts.push(Expr::Empty);
        }
        let (succs, classes) = (self.succs, self.classes);
        for ((_, t), class) in succs[s].iter().zip(&classes[s]) {
            let t = *t;
            let c = match class {
                EdgeClass::Leave { by_other, rest } => {
                    match pass {
                        Pass::Stay => {}
                        Pass::Leave => alts.extend(rest.iter().cloned()),
                        Pass::LeaveByOther if *by_other => alts.push(Expr::Empty),
                        Pass::LeaveByOther => {}
                    }
                    continue;
                }
                EdgeClass::Stay(c) => c,
            };
            if t == s {
                self_loop = Some(c.clone());
                continue;
            }
            if !self.live[t] {
                continue;
            }
            let nest = match pass {
                Pass::Stay => self.indegree[t] == 1 && depth < EMBED_DEPTH_MAX && self.rule_of[t].is_none(),
                _ => self.rule_of[t].is_none(),
            };
            let next = if nest {
                match self.run_from(t) {
                    Some(run) => self.run(run, depth, pass),
                    None => self.pass(t, depth + 1, pass),
                }
            } else if pass == Pass::Stay {
                Some(Expr::Rule(self.rule_for(t)))
            } else {
                None
            };
            if let Some(next) = next {
                alts.push(Expr::Seq(vec![c.clone(), next]));
            }
        }
        if alts.is_empty() {
            return None;
        }
        let rest = alt_of(alts);
        Some(match self_loop {
            Some(c) => Expr::Seq(vec![Expr::Repeat { expr: Box::new(c), min: 0, max: None }, rest]),
            None => rest,
        })
    }
}

/// Shortest run of states written as a counted repetition by [`Emit::run_from`].
const RUN_MIN: usize = 8;

impl<'a> Emit<'a> {
    /// A run of states from `t` that each read one class `c` to the next (entered only
    /// from the previous one) and all may end the key, or none: `(length, c, the state
    /// after it)`.
    /// `^[0-9a-z_-]{1,255}$` is such a run of 254; nested one state per level it was six
    /// rules, each ending where the next began, so every token running past one of
    /// those ends was parsed item by item in the mask walks (~6 ms per fill near them).
    fn run_from(&self, t: usize) -> Option<Run<'a>> {
        let classes: &'a [Vec<EdgeClass>] = self.classes;
        let mut class: Option<&'a Expr> = None;
        let (mut len, mut cur) = (0, t);
        loop {
            // The one way on: the state's only edge to a live state, and no way out.
            let mut on = None;
            for (edge, &(_, next)) in classes[cur].iter().zip(&self.succs[cur]) {
                match edge {
                    EdgeClass::Stay(_) if !self.live[next] => {}
                    EdgeClass::Stay(c) if on.is_none() => on = Some((c, next)),
                    _ => {
                        on = None;
                        break;
                    }
                }
            }
            let Some((c, next)) = on.filter(|_| (self.is_final)(cur) == (self.is_final)(t)) else { break };
            if next == cur || self.indegree[next] != 1 || self.rule_of[next].is_some() {
                break;
            }
            if class.is_some_and(|k| k != c) {
                break;
            }
            class = Some(c);
            len += 1;
            cur = next;
        }
        Some((len, class?, cur, (self.is_final)(t))).filter(|r| r.0 >= RUN_MIN)
    }

    /// One pass's paths from the state a body starts at (a run may start there too).
    fn pass_from(&mut self, s: usize, pass: Pass) -> Option<Expr> {
        match self.run_from(s) {
            Some(run) => self.run(run, 0, pass),
            None => self.pass(s, 0, pass),
        }
    }

    /// One pass's paths through a run ([`Emit::run_from`]): `c{0,len-1} | c{len} rest`
    /// for the paths that stay (each state of the run may end the key), `c{len} rest`
    /// for the others (no state of the run leaves the automaton).
    fn run(&mut self, (len, c, end, ends): Run<'a>, depth: usize, pass: Pass) -> Option<Expr> {
        let rep = |lo: usize, hi: usize| Expr::Repeat {
            expr: Box::new(c.clone()),
            min: lo as u32,
            max: Some(hi as u32),
        };
        let rest = self.pass(end, depth + 1, pass);
        if !(ends && pass == Pass::Stay) {
            return rest.map(|r| Expr::Seq(vec![rep(len, len), r]));
        }
        // (A run to the end of the key is one repetition, which the automata builder
        // splices where it stands in a sequence.)
        Some(match rest {
            Some(Expr::Empty) => rep(0, len),
            Some(r) => Expr::Alt(vec![rep(0, len - 1), Expr::Seq(vec![rep(len, len), r])]),
            None => rep(0, len - 1),
        })
    }
}

/// A run of states ([`Emit::run_from`]): its length, class, the state after it, and
/// whether its states may end the key.
type Run<'a> = (usize, &'a Expr, usize, bool);

/// A state's class and its edges with targets named by class (Moore's refinement).
type Signature = (u32, Vec<(u32, u32, u32)>);

/// `edges` with each target renamed by `f`, neighbouring ranges to the same target joined.
fn retarget(edges: &[(u32, u32, u32)], f: impl Fn(u32) -> u32) -> Vec<(u32, u32, u32)> {
    let mut out: Vec<(u32, u32, u32)> = Vec::new();
    for &(a, b, t) in edges {
        let t = f(t);
        match out.last_mut() {
            Some(last) if last.2 == t && last.1 + 1 == a => last.1 = b,
            _ => out.push((a, b, t)),
        }
    }
    out
}

/// Per state, whether it lies on a cycle of two or more states (Kosaraju's strongly
/// connected components, iteratively: key automata can have thousands of states).
pub(super) fn on_cycles(edges: &[Vec<(u32, u32, u32)>]) -> Vec<bool> {
    let n = edges.len();
    let succ = |s: usize| edges[s].iter().map(|e| e.2 as usize).filter(move |&t| t != s);
    // First pass: finishing order.
    let mut seen = vec![false; n];
    let mut finished = Vec::with_capacity(n);
    for root in 0..n {
        if seen[root] {
            continue;
        }
        seen[root] = true;
        let mut stack = vec![(root, 0usize)];
        while let Some((s, i)) = stack.pop() {
            match succ(s).nth(i) {
                Some(t) => {
                    stack.push((s, i + 1));
                    if !seen[t] {
                        seen[t] = true;
                        stack.push((t, 0));
                    }
                }
                None => finished.push(s),
            }
        }
    }
    // Second pass on the reversed graph, in reverse finishing order: one component each.
    let mut preds = vec![Vec::new(); n];
    for s in 0..n {
        for t in succ(s) {
            preds[t].push(s);
        }
    }
    let mut comp = vec![usize::MAX; n];
    let mut size = Vec::new();
    for &root in finished.iter().rev() {
        if comp[root] != usize::MAX {
            continue;
        }
        let c = size.len();
        size.push(0usize);
        comp[root] = c;
        let mut stack = vec![root];
        while let Some(s) = stack.pop() {
            size[c] += 1;
            for &p in &preds[s] {
                if comp[p] == usize::MAX {
                    comp[p] = c;
                    stack.push(p);
                }
            }
        }
    }
    (0..n).map(|s| size[comp[s]] > 1).collect()
}

/// One expression for alternatives (a single one stands alone).
fn alt_of(mut alts: Vec<Expr>) -> Expr {
    if alts.len() == 1 {
        alts.pop().unwrap_or(Expr::Empty)
    } else {
        Expr::Alt(alts)
    }
}

/// Number of scalar values covered by a state's edges.
fn covered(e: &[(u32, u32, u32)]) -> u64 {
    e.iter().map(|&(a, b, _)| intersect_len(a, b)).sum()
}

fn intersect_len(a: u32, b: u32) -> u64 {
    ANY.iter().map(|&(x, y)| (b.min(y) as i64 - a.max(x) as i64 + 1).max(0) as u64).sum()
}

const ANY_LEN: u64 = 0xD800 + (0x11_0000 - 0xE000);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::testing::{matches, recognizer};

    fn ks(c: &[Component<'_>]) -> KeySet {
        KeySet::build(c, &RegexLimits::default()).unwrap()
    }

    #[test]
    fn labels_follow_components() {
        let names = ["id", "name"];
        let k = ks(&[Component::Names(&names), Component::Pattern("^[a-z]+$"), Component::Pattern("d")]);
        assert_eq!(k.label_of("id"), 0b111);
        assert_eq!(k.label_of("name"), 0b011);
        assert_eq!(k.label_of("abc"), 0b010);
        assert_eq!(k.label_of("x1"), 0b000);
        assert_eq!(k.label_of("D1d"), 0b100);
        assert_eq!(k.labels(), vec![0, 0b010, 0b011, 0b100, 0b110, 0b111]);
    }

    fn count_rule_calls(e: &Expr) -> usize {
        let mut n = 0;
        e.for_each_rule(&mut |_| n += 1);
        n
    }

    #[test]
    fn key_tries_are_written_as_one_expression() {
        // "Any key but these" is a trie with a sink: no rule of its own, no rule calls
        // (a chain of calls makes every key character an Earley step).
        let names = ["length", "radius", "width", "widths"];
        let k = ks(&[Component::Names(&names)]);
        let (start, rules) = k.class_rules(|l| l == 0, 7).unwrap();
        assert!(rules.is_empty());
        assert_eq!(count_rule_calls(&start), 0);
        for key in
            ["", "len", "lengthy", "width_", "x", "r\\\"", "widt", "é", "lé", "w\\n", "\\u0001x", "\\\\"]
        {
            assert!(matches(&start, key), "{key:?}");
        }
        for key in ["length", "radius", "width", "widths"] {
            assert!(!matches(&start, key), "{key:?}");
        }
        let (declared, rules) = k.class_rules(|l| l == 1, 0).unwrap();
        assert!(rules.is_empty());
        assert!(matches(&declared, "widths") && !matches(&declared, "wid"));
    }

    #[test]
    fn leaving_the_automaton_is_written_once() {
        // "Any key but these": exactly the JSON string bodies that spell no declared name
        // (names with escaped and non-ASCII characters take the other path at their
        // states), with the "then anything" tail and the OTHER class written once.
        let names = ["apiVersion", "kind", "metadata", "spec", "status", "a\"b", "é1"];
        let k = ks(&[Component::Names(&names)]);
        let (start, rules) = k.class_rules(|l| l == 0, 0).unwrap();
        assert!(rules.is_empty());
        let any_body = recognizer(&Expr::Repeat { expr: Box::new(json_string_char(ANY)), min: 0, max: None });
        let re = recognizer(&start);
        let alphabet = ["a", "p", "i", "V", "k", "s", "\\\"", "b", "é", "1", "\\u001f", "\\n", "😀", "x"];
        let mut keys = vec![String::new()];
        for _ in 0..3 {
            let longer: Vec<String> =
                keys.iter().flat_map(|k| alphabet.iter().map(move |c| format!("{k}{c}"))).collect();
            keys.extend(longer);
        }
        keys.extend(["apiVersio", "apiVersionX", "spe", "statuses", "é", "é12", "a\\\"b"].map(String::from));
        for key in &keys {
            let declared = names.iter().any(|n| to_json_body(n) == *key);
            assert_eq!(re.is_match(key), any_body.is_match(key) && !declared, "{key:?}");
        }
        let mut tails = 0;
        count_tails(&start, &mut tails);
        assert_eq!(tails, 1);
    }

    /// The bounds of the counted repetitions in `e`.
    fn repeats(e: &Expr, out: &mut Vec<(u32, u32)>) {
        match e {
            Expr::Repeat { expr, min, max: Some(max) } => {
                out.push((*min, *max));
                repeats(expr, out);
            }
            Expr::Seq(v) | Expr::Alt(v) => v.iter().for_each(|x| repeats(x, out)),
            Expr::Repeat { expr, .. } => repeats(expr, out),
            _ => {}
        }
    }

    /// Unbounded repetitions of a class reaching past ASCII: the "anything" tails.
    fn count_tails(e: &Expr, n: &mut usize) {
        match e {
            Expr::Repeat { expr, max: None, .. } if expr.size() > 8 => *n += 1,
            Expr::Seq(v) | Expr::Alt(v) => v.iter().for_each(|x| count_tails(x, n)),
            Expr::Repeat { expr, .. } => count_tails(expr, n),
            _ => {}
        }
    }

    /// `s` as written inside a JSON string (the canonical escapes only).
    fn to_json_body(s: &str) -> String {
        let quoted = serde_json::to_string(s).unwrap_or_default();
        quoted[1..quoted.len() - 1].to_string()
    }

    #[test]
    fn long_chains_and_cycles_get_rules() {
        // A chain of 200 states alternating two classes is cut into rules of bounded
        // nesting.
        let k = ks(&[Component::Pattern("^(ab){100}$")]);
        let (start, rules) = k.class_rules(|l| l == 1, 0).unwrap();
        assert_eq!(count_rule_calls(&start), 1);
        assert_eq!(rules.len(), 200 / (EMBED_DEPTH_MAX + 1));
        // Runs of one class are counted repetitions instead, with no rule: exact ones,
        // and runs of states that may all end the key (written as one repetition).
        for (p, (lo, hi)) in [("^a{200}$", (200, 200)), ("^[a-z]{1,255}$", (0, 254))] {
            let (start, rules) = ks(&[Component::Pattern(p)]).class_rules(|l| l == 1, 0).unwrap();
            assert!(rules.is_empty(), "{p}");
            let mut reps = Vec::new();
            repeats(&start, &mut reps);
            assert!(reps.contains(&(lo, hi)), "{p}: {reps:?}");
        }
        // A state entered from two places (the loop of `(ab)*`) is a rule.
        let k = ks(&[Component::Pattern("^(ab)*$")]);
        let (start, rules) = k.class_rules(|l| l == 1, 3).unwrap();
        assert_eq!(count_rule_calls(&start), 1);
        assert_eq!(rules.len(), 1);
        assert_eq!(count_rule_calls(&rules[0]), 1);
    }

    #[test]
    fn equivalent_states_are_merged() {
        // "Holds a letter" (the key class of `patternProperties: {"[a-zA-Z]+": …}` with
        // `additionalProperties: false`): once a letter is read, anything goes. The subset
        // construction made that two states entered from each other ("in the letters",
        // "after them"), written as two rules calling each other; merged, it is one state
        // looping on everything, and no rule calls another.
        let k = ks(&[Component::Names(&[]), Component::Pattern("[a-zA-Z]+")]);
        let (start, rules) = k.class_rules(|l| l == 0b10, 0).unwrap();
        assert!(rules.len() <= 1, "{rules:?}");
        let mut called = Vec::new();
        start.for_each_rule(&mut |r| called.push(r));
        assert!(called.iter().all(|&r| r == RuleId(0)), "{start:?}");
        assert!(rules.iter().all(|r| count_rule_calls(r) == 0), "{rules:?}");
        // Labels still tell the classes apart: merging never crosses them.
        let names = ["ab"];
        let k = ks(&[Component::Names(&names), Component::Pattern("b")]);
        assert_eq!(
            (k.label_of("ab"), k.label_of("b"), k.label_of("a"), k.label_of("abc")),
            (0b11, 0b10, 0, 0b10)
        );
        let k = ks(&[Component::Pattern("^(ab)*$"), Component::Pattern("^(abab)*$")]);
        assert_eq!(
            (k.label_of("ab"), k.label_of("abab"), k.label_of("ababab"), k.label_of("a")),
            (1, 3, 1, 0)
        );
    }

    #[test]
    fn surrogates_are_not_keys() {
        let k = ks(&[Component::Pattern(r"^[\s\S]*$")]);
        assert_eq!(k.labels(), vec![1]);
    }
}
