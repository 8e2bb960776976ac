//! Boolean combinations of string languages, for JSON object keys.
//!
//! An object schema sorts every possible key into exactly one class: a declared property,
//! a key matched by some set of `patternProperties`, or an "additional" key. Which value
//! schema applies depends on the class, so the grammar needs each class as its own key
//! language — `pattern₁ ∧ ¬pattern₂ ∧ ¬names`, and so on. Grammar IR has no intersection
//! or complement, so this module does them on a small character-level automaton: every
//! component language but the lengths becomes a Thompson NFA over Unicode scalar ranges,
//! one subset construction runs them all at once, the lengths are a count of characters
//! beside it, and each state is labelled with the set of components that accept there. A
//! key class is then "the DFA with these labels final", spelled in JSON as one character
//! automaton by [`KeySet::spelled`]. String values use it too: a `pattern` with a
//! `format`, under lengths it cannot carry, in a complement, or large without lengths is
//! such a class.

use super::lower::{split_anchors, Branch};
use super::parse::{Node, Parser};
use super::{RegexError, RegexErrorKind, RegexLimits};
use crate::grammar::class::subtract_class;
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
    ///
    /// Lengths are counted beside the other components, not determinized with them: a
    /// `pattern` under `maxLength: 254` is the pattern's own DFA times a counter. In the
    /// subset construction every state carried the length NFA's copy for its count, and
    /// each of its thousands of states re-read every window of the alphabet (21 ms of a
    /// 94 ms compile, measured).
    pub(crate) fn build(components: &[Component<'_>], limits: &RegexLimits) -> Result<KeySet, RegexError> {
        let components = &components[..components.len().min(64)];
        let (mut lengths, mut others) = (Vec::new(), Vec::new());
        for (i, c) in components.iter().enumerate() {
            match c {
                Component::Length { min, max } => lengths.push((i as u32, *min, *max)),
                _ => others.push((i, c)),
            }
        }
        let set = Self::subsets(&others, limits)?;
        if lengths.is_empty() {
            return Ok(set);
        }
        set.counted(&lengths, limits)
    }

    /// The subset construction over `components`, component `(i, c)` labelling bit `i`.
    fn subsets(components: &[(usize, &Component<'_>)], limits: &RegexLimits) -> Result<KeySet, RegexError> {
        let too_large = |given: usize, pattern: &str| RegexError {
            kind: RegexErrorKind::TooLarge { given: given as u64, limit: limits.max_size },
            pattern: pattern.to_string(),
            offset: 0,
        };
        let mut nfa = Nfa::default();
        let start = nfa.state();
        // `(bit, final state)` per component.
        let mut finals: Vec<(usize, u32)> = Vec::new();
        for &(bit, c) in components {
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
            finals.push((bit, end));
        }
        // Alphabet partition: the boundaries of every range edge, and the surrogates'
        // (never a character: a class that spans them, `[^@]`, would otherwise give
        // states that differ only there, and so cannot be merged).
        let mut cuts = vec![0u32, 0xD800, 0xE000, 0x11_0000];
        for es in &nfa.ranges {
            for &(a, b, _) in es {
                cuts.push(a);
                cuts.push(b + 1);
            }
        }
        cuts.sort_unstable();
        cuts.dedup();
        let label = |set: &[u32]| -> u64 {
            finals.iter().fold(0, |acc, &(i, f)| acc | ((set.binary_search(&f).is_ok() as u64) << i))
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
            // The state's work: its NFA states' edges spread over the alphabet windows (a
            // unit per window an edge covers), each window's targets sorted, then each
            // distinct target set closed and looked up — all charged below.
            let mut work = 1 + (set.len() + cuts.len()) as u64;
            labels.push(label(&set));
            // Targets per alphabet window, found by binary search on each edge's ends.
            for ts in &mut targets {
                ts.clear();
            }
            for &st in &set {
                for &(a, b, t) in &nfa.ranges[st as usize] {
                    let (i0, i1) = (cuts.partition_point(|&c| c < a), cuts.partition_point(|&c| c <= b));
                    work += (i1 - i0) as u64;
                    for ts in &mut targets[i0..i1] {
                        ts.push(t);
                    }
                }
            }
            resolved.clear();
            let mut out: Vec<(u32, u32, u32)> = Vec::new();
            for (w, ts) in targets.iter_mut().enumerate() {
                if ts.is_empty() || (0xD800..0xE000).contains(&cuts[w]) {
                    continue;
                }
                let (lo, hi) = (cuts[w], cuts[w + 1] - 1);
                ts.sort_unstable();
                ts.dedup();
                work += ts.len() as u64;
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

    /// This automaton (no length among its components) times a count of characters:
    /// `(bit, min, max)` labels bit `bit` where the count is within `min..=max` (never
    /// when `min > max`). The count stops at the first value past which no label changes:
    /// the largest, over the lengths, of `max + 1`, or of `min` for one without a `max`.
    /// Characters this automaton does not take lead to a sink that only counts, kept
    /// while a length can still label it.
    fn counted(
        self,
        lengths: &[(u32, u32, Option<u32>)],
        limits: &RegexLimits,
    ) -> Result<KeySet, RegexError> {
        let too_large = |given: usize| RegexError {
            kind: RegexErrorKind::TooLarge { given: given as u64, limit: limits.max_size },
            pattern: String::new(),
            offset: 0,
        };
        let cap =
            lengths.iter().map(|&(_, min, max)| max.map_or(min, |m| m.saturating_add(1))).max().unwrap_or(0);
        // Every count below the cap is some string's, so a state of its own: a cap past
        // the limit is refused before its states are built (`maxLength: 10^9` on keys).
        if cap as usize > limits.max_size {
            return Err(too_large(cap as usize));
        }
        let length_label = |c: u32| {
            lengths
                .iter()
                .filter(|&&(_, min, max)| c >= min && max.map_or(true, |m| c <= m))
                .fold(0u64, |acc, &(bit, _, _)| acc | 1 << bit)
        };
        // The sink: state `n`, taking every character to itself.
        let n = self.edges.len() as u32;
        let total: Vec<Vec<(u32, u32, u32)>> = self
            .edges
            .iter()
            .map(|es| {
                let taken: Vec<(u32, u32)> = es.iter().map(|e| (e.0, e.1)).collect();
                let mut out = es.clone();
                out.extend(subtract_class(ANY, &taken).into_iter().map(|(a, b)| (a, b, n)));
                out.sort_unstable();
                out
            })
            .chain(std::iter::once(ANY.iter().map(|&(a, b)| (a, b, n)).collect()))
            .collect();
        let base_label = |p: u32| self.labels.get(p as usize).copied().unwrap_or(0);
        // The sink at the cap labels nothing, now or later: characters leading there leave.
        let gone = |p: u32, c: u32| p == n && c == cap && length_label(cap) == 0;
        let mut ids: FxHashMap<(u32, u32), u32> = FxHashMap::default();
        let mut order: Vec<(u32, u32)> = vec![(0, 0)];
        ids.insert((0, 0), 0);
        let (mut edges, mut labels) = (Vec::new(), Vec::new());
        while let Some(&(p, c)) = order.get(edges.len()) {
            labels.push(base_label(p) | length_label(c));
            let next = c.saturating_add(1).min(cap);
            let mut out: Vec<(u32, u32, u32)> = Vec::new();
            for &(a, b, t) in &total[p as usize] {
                if gone(t, next) {
                    continue;
                }
                let id = match ids.get(&(t, next)) {
                    Some(&id) => id,
                    None => {
                        let id = order.len() as u32;
                        if order.len() >= limits.max_size {
                            return Err(too_large(order.len() + 1));
                        }
                        order.push((t, next));
                        ids.insert((t, next), id);
                        id
                    }
                };
                match out.last_mut() {
                    Some(last) if last.2 == id && last.1 + 1 == a => last.1 = b,
                    _ => out.push((a, b, id)),
                }
            }
            crate::budget::charge(crate::budget::Phase::Intersection, 1 + total[p as usize].len() as u64)
                .map_err(|e| RegexError {
                    kind: RegexErrorKind::Budget(Box::new(e)),
                    pattern: String::new(),
                    offset: 0,
                })?;
            edges.push(out);
        }
        Ok(KeySet { edges, labels }.minimized())
    }

    /// The same automaton with equivalent states on cycles merged (same label, and every
    /// character leads to equivalent states; a missing edge only to a missing edge).
    ///
    /// The subset construction keeps apart states that only its NFA tells apart: for the
    /// key pattern `[a-zA-Z]+` (unanchored: "holds a letter"), "inside the letters" and
    /// "after them" both accept anything, yet were two states entered from each other;
    /// merged, the state is one self-loop. States on no cycle (other than a self-loop)
    /// are merged later, bottom-up, where they are spelled ([`super::spell`]).
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

    /// The JSON string bodies (without quotes) of the keys whose label satisfies
    /// `accept`, as one automaton over their JSON spelling ([`super::spell`]); `None`
    /// when no key qualifies. Strings that leave the automaton have label 0: where it is
    /// accepted they go to a sink state that takes any character.
    pub(crate) fn spelled(
        &self,
        accept: impl Fn(u64) -> bool,
    ) -> Result<Option<crate::grammar::CharDfa>, crate::budget::BudgetError> {
        let n = self.edges.len();
        let sink = n as u32;
        let sink_used = accept(0) && self.edges.iter().any(|e| covered(e) < ANY_LEN);
        // Per state: its `(lo, hi, target)` moves, sorted, the sink's gaps included.
        let mut edges: Vec<Vec<(u32, u32, u32)>> = self
            .edges
            .iter()
            .map(|es| {
                let mut out = es.clone();
                if sink_used {
                    let taken: Vec<(u32, u32)> = es.iter().map(|e| (e.0, e.1)).collect();
                    out.extend(subtract_class(ANY, &taken).into_iter().map(|(a, b)| (a, b, sink)));
                    out.sort_unstable();
                }
                out
            })
            .collect();
        edges.push(if sink_used { ANY.iter().map(|&(a, b)| (a, b, sink)).collect() } else { Vec::new() });
        let finals: Vec<bool> =
            (0..=n).map(|s| if s == n { sink_used } else { accept(self.labels[s]) }).collect();
        // Live states (a final one reachable), so that only they are spelled.
        let moves: usize = edges.iter().map(Vec::len).sum();
        crate::budget::charge(crate::budget::Phase::Intersection, (n + moves) as u64)?;
        let live = crate::grammar::coreachable(&finals, |s| edges[s].iter().map(|e| e.2));
        if !live[0] {
            return Ok(None);
        }
        for es in &mut edges {
            es.retain(|e| live[e.2 as usize]);
        }
        super::spell::spelled(&edges, &finals)
    }
}

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
    // First pass: finishing order. (The stack holds each state's next edge by index:
    // finding the i-th successor by iterating made a state of 30 edges cost 450 steps,
    // a tenth of a spelled string's compile.)
    let mut seen = vec![false; n];
    let mut finished = Vec::with_capacity(n);
    let mut stack: Vec<(usize, usize)> = Vec::new();
    for root in 0..n {
        if seen[root] {
            continue;
        }
        seen[root] = true;
        stack.push((root, 0));
        while let Some((s, i)) = stack.pop() {
            match edges[s].get(i) {
                Some(e) => {
                    stack.push((s, i + 1));
                    let t = e.2 as usize;
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
    // Self-loops do not make a cycle of two or more.
    let (first, sources) =
        crate::grammar::reversed(n, |s| edges[s].iter().map(|e| e.2).filter(move |&t| t as usize != s));
    let preds = |t: usize| sources[first[t]..first[t + 1]].iter().map(|&p| p as usize);
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
            for p in preds(s) {
                if comp[p] == usize::MAX {
                    comp[p] = c;
                    stack.push(p);
                }
            }
        }
    }
    (0..n).map(|s| size[comp[s]] > 1).collect()
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

    /// The spelled automaton of the keys with label `label`.
    fn class(k: &KeySet, label: u64) -> crate::grammar::CharDfa {
        k.spelled(|l| l == label).unwrap().unwrap()
    }

    /// `s` as written inside a JSON string (the canonical escapes only).
    fn to_json_body(s: &str) -> String {
        let quoted = serde_json::to_string(s).unwrap_or_default();
        quoted[1..quoted.len() - 1].to_string()
    }

    #[test]
    fn any_key_but_these_is_every_other_spelled_key() {
        // "Any key but these": exactly the JSON string bodies that spell no declared name
        // (names with escaped and non-ASCII characters included, in any of their
        // spellings), judged by `serde_json` decoding the body.
        let names = ["apiVersion", "kind", "metadata", "spec", "status", "a\"b", "é1"];
        let k = ks(&[Component::Names(&names)]);
        let (other, declared) = (class(&k, 0), class(&k, 1));
        let alphabet = [
            "a", "p", "i", "V", "k", "s", "\\\"", "b", "é", "\\u00e9", "1", "\\u001f", "\\n", "😀", "x", "\"",
        ];
        let mut keys = vec![String::new()];
        for _ in 0..3 {
            let longer: Vec<String> =
                keys.iter().flat_map(|k| alphabet.iter().map(move |c| format!("{k}{c}"))).collect();
            keys.extend(longer);
        }
        keys.extend(
            ["apiVersio", "apiVersionX", "spe", "statuses", "é", "é12", "a\\\"b", "\\u00e91"]
                .map(String::from),
        );
        for key in &keys {
            let decoded = serde_json::from_str::<String>(&format!("\"{key}\"")).ok();
            let is_declared = decoded.as_deref().is_some_and(|d| names.contains(&d));
            assert_eq!(other.matches(key), decoded.is_some() && !is_declared, "{key:?}");
            assert_eq!(declared.matches(key), is_declared, "{key:?}");
        }
        assert!(declared.matches(&to_json_body("a\"b")) && declared.matches("\\u0061\\u0022b"));
    }

    #[test]
    fn equivalent_states_are_merged() {
        // "Holds a letter" (the key class of `patternProperties: {"[a-zA-Z]+": …}` with
        // `additionalProperties: false`): once a letter is read, anything goes. The subset
        // construction made that two states entered from each other ("in the letters",
        // "after them"); merged, it is one state looping on everything, and the spelled
        // automaton is its two states with their escape states.
        let k = ks(&[Component::Names(&[]), Component::Pattern("[a-zA-Z]+")]);
        let merged = class(&k, 0b10);
        let one = ks(&[Component::Pattern(r"^[^a-zA-Z]*[a-zA-Z][\s\S]*$")]);
        assert_eq!(merged.len(), class(&one, 1).len());
        assert!(merged.matches("1\\u0041") && !merged.matches("12\\n"));
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
    fn counted_lengths_are_the_subset_construction() {
        // Lengths counted beside the other components label every string as the subset
        // construction over all of them does, and spell to no larger an automaton: for
        // strings over an alphabet the patterns tell apart, up to 5 characters (past
        // several caps), and longer ones at random.
        let limits = RegexLimits::default();
        let names = ["ab", "abc", "é@"];
        let cases: Vec<Vec<Component>> = vec![
            vec![Component::Pattern("^[a-z]+@"), Component::Length { min: 2, max: Some(4) }],
            vec![
                Component::Pattern("a"),
                Component::Length { min: 0, max: Some(3) },
                Component::Pattern("b$"),
            ],
            vec![Component::Names(&names), Component::Length { min: 3, max: None }],
            vec![Component::Length { min: 1, max: Some(4) }],
            vec![
                Component::Pattern("^(ab)*$"),
                Component::Length { min: 2, max: Some(5) },
                Component::Length { min: 4, max: None },
            ],
            vec![Component::Pattern(r"^[^@^\s]+@[^@^.^\s]+"), Component::Length { min: 3, max: Some(5) }],
            vec![Component::Length { min: 2, max: Some(3) }, Component::Names(&[])],
            // A real schema's (JSONSchemaBench Github_easy o21456, `maxLength: 254`).
            vec![
                Component::Pattern(r"^[^@^\s]+@[^@^\.^\s]+(\.[^@^\.^\s]*)*.gov.uk"),
                Component::Length { min: 5, max: Some(16) },
            ],
        ];
        let alphabet = ['a', 'b', 'c', '@', '.', 'é', ' ', '😀'];
        let mut strings = vec![String::new()];
        let mut layer = vec![String::new()];
        for _ in 0..5 {
            layer = layer.iter().flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}"))).collect();
            strings.extend(layer.iter().cloned());
        }
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = 6 + (seed % 8) as usize;
            strings.push((0..len).map(|i| alphabet[(seed >> (3 * i)) as usize % alphabet.len()]).collect());
        }
        strings.extend(
            [
                "a@b.gov.uk",
                "a@b.c.gov.uk",
                "a@bxgov.uk",
                "ab@c.gov.ukzz",
                " a@b.gov.uk",
                "a@b..gov.uk",
                "a@@b.gov.uk",
            ]
            .map(String::from),
        );
        for comps in &cases {
            let counted = KeySet::build(comps, &limits).unwrap();
            let all: Vec<(usize, &Component)> = comps.iter().enumerate().collect();
            let subsets = KeySet::subsets(&all, &limits).unwrap();
            assert_eq!(counted.labels(), subsets.labels(), "{comps:?}");
            for s in &strings {
                assert_eq!(counted.label_of(s), subsets.label_of(s), "{comps:?} on {s:?}");
            }
            for label in subsets.labels() {
                let size = |k: &KeySet| k.spelled(|l| l == label).unwrap().map(|d| d.len());
                // (Smaller where a length has no maximum: the counter's last value is one
                // self-looping state, where the subset construction kept a cycle.)
                assert!(size(&counted) <= size(&subsets), "{comps:?}, label {label:#b}");
            }
        }
    }

    #[test]
    fn lengths_no_string_has_label_nothing() {
        // `minLength: 5, maxLength: 3` holds no string (the subset construction's
        // repetition took exactly 5 characters there); `maxLength: 0` only the empty one.
        let limits = RegexLimits::default();
        let k =
            KeySet::build(&[Component::Pattern("a"), Component::Length { min: 5, max: Some(3) }], &limits)
                .unwrap();
        assert!(k.labels().iter().all(|l| l & 0b10 == 0), "{:?}", k.labels());
        assert_eq!((k.label_of("aaaaa"), k.label_of("aaaa")), (0b01, 0b01));
        let k =
            KeySet::build(&[Component::Names(&["x"]), Component::Length { min: 0, max: Some(0) }], &limits)
                .unwrap();
        assert_eq!((k.label_of(""), k.label_of("x"), k.label_of("y")), (0b10, 0b01, 0));
        // A count past the size limit is refused at once.
        let small = RegexLimits { max_size: 1000, ..RegexLimits::default() };
        let e = KeySet::build(
            &[Component::Pattern("a"), Component::Length { min: 0, max: Some(1_000_000_000) }],
            &small,
        )
        .unwrap_err();
        assert!(matches!(e.kind, RegexErrorKind::TooLarge { .. }), "{e:?}");
    }

    #[test]
    fn surrogates_are_not_keys() {
        let k = ks(&[Component::Pattern(r"^[\s\S]*$")]);
        assert_eq!(k.labels(), vec![1]);
    }
}
