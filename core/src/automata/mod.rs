//! Byte-level automata: the grammar IR turned into one minimized DFA per rule.
//!
//! ```text
//! Grammar IR ──optimize──▶ IR (inlined, trimmed) ──Thompson──▶ NFA per rule
//!            ──subset construction──▶ DFA per rule ──trim, minimize──▶ Automata
//! ```
//!
//! Edges of a rule's DFA read either a byte or a whole rule (a reference). All DFAs live in
//! one arena of [`StateId`]s so the matcher can index them directly. Bytes are first
//! mapped to equivalence classes (bytes that no edge distinguishes share a class), so a
//! state's row of transitions has a cell per class rather than per byte, and states whose
//! rows agree relative to themselves share one (`table`).
//!
//! Alongside the DFAs, three analyses feed the compiler and the matcher:
//! - `nullable[rule]`: the rule can match the empty string (Earley needs this to complete
//!   empty rules at prediction time, the Aycock–Horspool fix);
//! - `follow[rule]`: bytes that can come right after the rule completes, anywhere it is used
//!   (context expansion, paper §3.2: a token that straddles the end of the rule is rejected
//!   at compile time when its next byte cannot follow the rule);
//! - `scannable[state]`: the state has byte edges, so it can be on top during matching and
//!   owns a token-mask cache entry.

mod bounded;
mod chain;
mod cont;
mod dfa;
mod error;
mod members;
mod nfa;
mod table;
mod tail;
pub use error::AutomataError;
pub mod optimize;

use crate::crew::{self, Share};
use crate::grammar::{Expr, Grammar, RuleId};
use dfa::Dfa;
use nfa::Nfa;

/// "No transition".
pub(crate) const DEAD: u32 = u32::MAX;

/// Most DFA states whatever [`AutomataLimits::max_dfa_states`] says: state numbers are
/// `u32`, and the table's distances between states must stay below 2³¹ ([`table`]).
const MAX_STATES: usize = (1 << 31) - 1;

/// Index of a DFA state in the [`Automata`] arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateId(pub u32);

/// Size limits for automata construction.
#[derive(Debug, Clone)]
pub struct AutomataLimits {
    /// Most NFA states per rule (default 1,000,000; about 80 bytes each while compiling).
    pub max_nfa_states: usize,
    /// Most DFA states over all rules (default 300,000: every JSON spelling of the
    /// characters of 587 declared keys and their values took the largest Kubernetes
    /// schema of the dev split to 200,145). The transition table costs 4 bytes per state,
    /// and `4 × byte classes` per distinct row; the compile's work budget bounds the time.
    pub max_dfa_states: usize,
}

impl Default for AutomataLimits {
    fn default() -> Self {
        Self { max_nfa_states: 1_000_000, max_dfa_states: 300_000 }
    }
}

/// Per-state facts, packed for the matcher's inner loop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeInfo {
    pub rule: u32,
    pub is_final: bool,
    pub scannable: bool,
    /// The rule carries a member set: its rule edges are gated ([`Automata::set_info`]).
    pub gated: bool,
    /// The state's one rule edge is a tail call of a pure rule ([`Automata::tail_callee`]).
    pub tail: bool,
    /// `rule_edges[edges.0..edges.1]`.
    pub edges: (u32, u32),
    /// Where the state's byte transitions start in the [`table::Table`].
    pub row: u32,
}

/// 256-bit byte set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ByteSet(pub [u64; 4]);

impl ByteSet {
    pub fn insert(&mut self, b: u8) {
        self.0[(b >> 6) as usize] |= 1 << (b & 63);
    }
    pub fn contains(&self, b: u8) -> bool {
        self.0[(b >> 6) as usize] >> (b & 63) & 1 == 1
    }
    /// Adds `other`; true if something was new.
    pub fn union(&mut self, other: &ByteSet) -> bool {
        let mut changed = false;
        for i in 0..4 {
            let n = self.0[i] | other.0[i];
            changed |= n != self.0[i];
            self.0[i] = n;
        }
        changed
    }
    pub fn len(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
}

/// The compiled automata of a grammar. Immutable.
#[derive(Debug)]
pub struct Automata {
    pub(crate) grammar: Grammar,
    pub(crate) rule_start: Vec<u32>,
    pub(crate) nullable: Vec<bool>,
    pub(crate) follow: Vec<ByteSet>,
    pub(crate) nodes: Vec<NodeInfo>,
    pub(crate) byte_class: [u8; 256],
    pub(crate) n_classes: usize,
    /// Bytes of each class.
    pub(crate) class_bytes: Vec<Vec<u8>>,
    /// Every state's byte transitions ([`table`]).
    pub(crate) table: table::Table,
    /// `(rule, target)`.
    pub(crate) rule_edges: Vec<(u32, u32)>,
    /// Per rule, every state that predicting it adds at the current position: its start,
    /// the starts it predicts in turn, and the states reached over nullable rules — all
    /// with origin = the current position, so the list does not depend on where the
    /// prediction happens. `prediction[prediction_ends[r - 1]..prediction_ends[r]]`.
    pub(crate) prediction: Vec<u32>,
    pub(crate) prediction_ends: Vec<u32>,
    /// Per rule, whether predicting it adds the start of a stand-in rule
    /// ([`crate::grammar::Rule::stand_in`]); empty when the grammar has none. A parser
    /// that makes such a prediction flags itself ([`crate::matcher::earley`]).
    pub(crate) predicts_stand_in: Box<[bool]>,
    /// The member sets of the grammar's rules ([`members`]), and per rule the index of
    /// its set (`u32::MAX`: none).
    pub(crate) sets: Vec<members::SetInfo>,
    pub(crate) set_of: Vec<u32>,
    /// Spliced counted repetitions, by rule (sorted), with absolute state numbers
    /// ([`chain::Layout`]).
    pub(crate) chains: Vec<(u32, chain::Layout)>,
    /// `(sink, continuation, copies)`, sorted: where a mask walk goes on after the end of
    /// a rule that every context continues alike ([`cont`]).
    pub(crate) conts: Vec<(u32, u32, u32)>,
}

impl Automata {
    /// Optimizes a copy of `grammar` and builds its automata.
    pub fn build(grammar: &Grammar, limits: &AutomataLimits) -> Result<Automata, AutomataError> {
        Self::build_owned(grammar.clone(), limits)
    }

    /// Optimizes `grammar` in place and builds its automata.
    pub fn build_owned(grammar: Grammar, limits: &AutomataLimits) -> Result<Automata, AutomataError> {
        let g = optimize::optimize_owned(grammar).map_err(AutomataError::Grammar)?;
        Self::build_optimized(g, limits)
    }

    /// Builds the automata of a grammar the optimizer already ran on (the grammar of
    /// other automata: [`Self::grammar`]), checking only what the builder relies on.
    /// The same grammar gives the same automata ([`Self::digest`]), state for state:
    /// what lets a serialized mask cache name states by number.
    pub(crate) fn rebuild(g: Grammar, limits: &AutomataLimits) -> Result<Automata, AutomataError> {
        optimize::check_optimized(&g).map_err(AutomataError::Grammar)?;
        Self::build_optimized(g, limits)
    }

    fn build_optimized(g: Grammar, limits: &AutomataLimits) -> Result<Automata, AutomataError> {
        // A placeholder rule id (one past the last) stands for a counted repetition taken
        // out of its rule to be spliced back in as copies (`chain`).
        let placeholder = RuleId(g.rules.len() as u32);
        // Rules are independent until they are assembled: their NFAs, then (once the
        // byte classes over all of them are known) their DFAs are built in parallel when
        // there is enough work to share (a tool-calling tag: a large root beside dozens
        // of argument rules). Results come back in rule order and each rule's automaton
        // does not depend on which thread or scratch built it, so the automata are the
        // same state for state (`digest`) however many threads ran.
        let plan = |_: &mut (), r: &crate::grammar::Rule| match chain::split(&r.body, placeholder) {
            Some(sp) => Ok(Plan {
                nfa: Nfa::build(&sp.outer, limits.max_nfa_states)?,
                chain: Some((Nfa::build(sp.link, limits.max_nfa_states)?, sp.min, sp.max)),
            }),
            None => Ok(Plan { nfa: Nfa::build(&r.body, limits.max_nfa_states)?, chain: None }),
        };
        // NFAs are cheap: shared only with helpers an earlier phase woke (a tag's schema
        // conversions), or in a large grammar.
        let share_nfas = if g.rules.len() < PARALLEL_MIN_RULES {
            Share::Never
        } else if g.rules.len() >= PARALLEL_MANY_RULES {
            Share::Hire
        } else {
            Share::IfHired
        };
        let plans: Vec<Result<Plan, AutomataError>> = crew::map_init(&g.rules, share_nfas, || (), plan);
        // The first failing rule's error, as a sequential build reports it.
        let plans = plans.into_iter().collect::<Result<Vec<_>, AutomataError>>()?;
        let (byte_class, n_classes) = byte_classes(
            plans.iter().flat_map(|p| std::iter::once(&p.nfa).chain(p.chain.as_ref().map(|c| &c.0))),
        );
        let mut class_bytes = vec![Vec::new(); n_classes];
        for b in 0..=255u8 {
            class_bytes[byte_class[b as usize] as usize].push(b);
        }
        let class_rep: Vec<u8> = class_bytes.iter().map(|v| v[0]).collect();
        let nfa_states: usize = plans.iter().map(|p| p.nfa.len()).sum();
        let build = |sc: &mut dfa::Scratch, &(plan, rule): &(&Plan, &crate::grammar::Rule)| {
            rule_dfa(plan, rule, placeholder, n_classes, sc, limits)
        };
        let share_dfas = if g.rules.len() < PARALLEL_MIN_RULES || nfa_states < PARALLEL_MIN_NFA_STATES {
            Share::Never
        } else if nfa_states >= PARALLEL_ALONE_MIN_NFA_STATES {
            Share::HireAlone
        } else {
            Share::Hire
        };
        let work: Vec<(&Plan, &crate::grammar::Rule)> = plans.iter().zip(&g.rules).collect();
        let built: Vec<Result<(Dfa, Option<chain::Layout>), AutomataError>> =
            crew::map_init(&work, share_dfas, || dfa::Scratch::new(&class_rep), build);
        let mut dfas = Vec::with_capacity(plans.len());
        let mut layouts: Vec<(usize, chain::Layout)> = Vec::new();
        let mut total = 0;
        // (States are `u32`, and a row's distances must stay clear of `table::NONE`.)
        let limit = limits.max_dfa_states.min(MAX_STATES);
        // In rule order, so that the error is the one a sequential build stops at.
        for d in built {
            let (d, layout) = d?;
            total += d.len();
            if total > limit {
                return Err(AutomataError::Limit {
                    what: "automaton size (DFA states)",
                    given: total,
                    limit,
                });
            }
            layouts.extend(layout.map(|l| (dfas.len(), l)));
            dfas.push(d);
        }
        // An intersection can be empty, which the IR's productivity analysis (operand by
        // operand) cannot see: a rule whose automaton matches nothing becomes the empty
        // set and the grammar is built again, so that what calls it is pruned as well
        // and every prefix the matcher accepts can still be finished.
        let dead = |d: &Dfa| !d.finals.first().copied().unwrap_or(false) && d.edges(0).is_empty();
        // (Only rules not already the empty set: no loop.)
        let empty: Vec<usize> = (0..dfas.len())
            .filter(|&r| dead(&dfas[r]) && !matches!(&g.rules[r].body, Expr::Alt(v) if v.is_empty()))
            .collect();
        if !empty.is_empty() {
            let mut g = g;
            for &r in &empty {
                g.rules[r].body = Expr::Alt(vec![]);
            }
            return Self::build_owned(g, limits);
        }
        let mut a = Self::assemble(g, dfas, byte_class, n_classes, class_bytes)?;
        a.chains = layouts
            .into_iter()
            .map(|(r, mut l)| {
                let base = a.rule_start[r];
                l.positions += base;
                l.inner += base;
                (r as u32, l)
            })
            .collect();
        a.compute_conts();
        Ok(a)
    }

    fn assemble(
        g: Grammar,
        dfas: Vec<Dfa>,
        byte_class: [u8; 256],
        n_classes: usize,
        class_bytes: Vec<Vec<u8>>,
    ) -> Result<Automata, AutomataError> {
        let mut rule_start = Vec::with_capacity(dfas.len());
        let mut nodes = Vec::new();
        let total: usize = dfas.iter().map(Dfa::len).sum();
        let mut table = table::Builder::new(n_classes);
        let mut rule_edges = Vec::new();
        nodes.reserve(total);
        for (r, d) in dfas.iter().enumerate() {
            let base = nodes.len() as u32;
            rule_start.push(base);
            // Byte classes sort before rule letters; a rule's own class stands for a run
            // of the grammar's ([`Dfa::spans`]).
            let spans = d.spans.as_deref();
            let group = spans.map(|_| r as u32);
            for s in 0..d.len() {
                let edges = d.edges(s);
                let n_bytes = edges.partition_point(|e| (e.0 as usize) < d.n_classes);
                let row =
                    table.push(s as u32, &edges[..n_bytes], group, spans).ok_or(AutomataError::Limit {
                        what: "transition table cells",
                        given: total.saturating_mul(n_classes),
                        limit: u32::MAX as usize,
                    })?;
                let e0 = rule_edges.len() as u32;
                rule_edges.extend(edges[n_bytes..].iter().map(|&(l, t)| (l - d.n_classes as u32, t + base)));
                nodes.push(NodeInfo {
                    rule: r as u32,
                    is_final: d.finals[s],
                    scannable: n_bytes > 0,
                    gated: false,
                    tail: false,
                    edges: (e0, rule_edges.len() as u32),
                    row,
                });
            }
        }
        let mut a = Automata {
            grammar: g,
            rule_start,
            nullable: Vec::new(),
            follow: Vec::new(),
            nodes,
            byte_class,
            n_classes,
            class_bytes,
            table: table.finish(),
            rule_edges,
            prediction: Vec::new(),
            prediction_ends: Vec::new(),
            predicts_stand_in: Box::default(),
            sets: Vec::new(),
            set_of: vec![u32::MAX; dfas.len()],
            chains: Vec::new(),
            conts: Vec::new(),
        };
        a.compute_sets()?;
        let with_edges = a.states_with_rule_edges();
        a.nullable = a.compute_nullable(&with_edges);
        a.follow = a.compute_follow(&with_edges);
        a.compute_predictions();
        a.mark_tail_calls();
        #[cfg(test)]
        a.check_table(&dfas);
        Ok(a)
    }

    /// Every state's row against its rule DFA's edges, cell by cell (every automaton a
    /// unit test builds): the targets the flat table of targets held.
    #[cfg(test)]
    fn check_table(&self, dfas: &[Dfa]) {
        for (r, d) in dfas.iter().enumerate() {
            let base = self.rule_start[r];
            for s in 0..d.len() {
                let mut want = vec![DEAD; self.n_classes];
                for &(c, t) in d.edges(s).iter().take_while(|e| (e.0 as usize) < d.n_classes) {
                    match &d.spans {
                        None => want[c as usize] = t + base,
                        Some(spans) => {
                            if let Some(&(a, b)) = spans.get(c as usize) {
                                want[a as usize..=b as usize].fill(t + base);
                            }
                        }
                    }
                }
                let got: Vec<u32> = self.row(base + s as u32).iter().collect();
                assert_eq!(got, want, "rule {r}, state {s}");
            }
        }
    }

    /// Fills [`Automata::prediction`]: a closure per rule over "predict" and "advance over
    /// a nullable rule" edges.
    fn compute_predictions(&mut self) {
        let mut seen = vec![u32::MAX; self.nodes.len()];
        let mut out = Vec::new();
        let mut ends = Vec::with_capacity(self.rule_start.len());
        for r in 0..self.rule_start.len() {
            let begin = out.len();
            let start = self.rule_start[r];
            seen[start as usize] = r as u32;
            out.push(start);
            let mut i = begin;
            while i < out.len() {
                let s = out[i];
                i += 1;
                for &(sub, t) in self.edges(s) {
                    let p = self.rule_start[sub as usize];
                    for next in [Some(p), self.nullable[sub as usize].then_some(t)].into_iter().flatten() {
                        if seen[next as usize] != r as u32 {
                            seen[next as usize] = r as u32;
                            out.push(next);
                        }
                    }
                }
            }
            ends.push(out.len() as u32);
        }
        self.prediction = out;
        self.prediction_ends = ends;
        let stand_in: Vec<bool> = self.grammar.rules.iter().map(|r| r.stand_in).collect();
        if stand_in.contains(&true) {
            self.predicts_stand_in = (0..self.rule_start.len() as u32)
                .map(|r| self.predicted(r).iter().any(|&s| stand_in[self.nodes[s as usize].rule as usize]))
                .collect();
        }
    }

    /// Whether predicting `rule` adds the start of a stand-in rule.
    #[inline]
    pub(crate) fn predicts_stand_in(&self, rule: u32) -> bool {
        self.predicts_stand_in.get(rule as usize).copied().unwrap_or(false)
    }

    /// States added by predicting `rule` (see [`Automata::prediction`]).
    #[inline]
    pub(crate) fn predicted(&self, rule: u32) -> &[u32] {
        let r = rule as usize;
        let lo = if r == 0 { 0 } else { self.prediction_ends[r - 1] as usize };
        &self.prediction[lo..self.prediction_ends[r] as usize]
    }

    /// A hash of every table the matcher reads: equal digests mean the same automata,
    /// state for state.
    pub(crate) fn digest(&self) -> u64 {
        use std::hash::Hasher;
        let mut h = rustc_hash::FxHasher::default();
        let words = |h: &mut rustc_hash::FxHasher, v: &[u32]| {
            h.write_usize(v.len());
            v.iter().for_each(|&x| h.write_u32(x));
        };
        h.write_usize(self.n_classes);
        h.write(&self.byte_class);
        words(&mut h, self.table.cells());
        words(&mut h, &self.rule_start);
        words(&mut h, &self.prediction);
        words(&mut h, &self.prediction_ends);
        words(&mut h, &self.set_of);
        for n in &self.nodes {
            h.write_u32(n.rule);
            h.write_u8(
                n.is_final as u8 | (n.scannable as u8) << 1 | (n.gated as u8) << 2 | (n.tail as u8) << 3,
            );
            h.write_u32(n.edges.0);
            h.write_u32(n.edges.1);
            h.write_u32(n.row);
        }
        for &(r, t) in &self.rule_edges {
            h.write_u32(r);
            h.write_u32(t);
        }
        for (r, l) in &self.chains {
            [*r, l.positions, l.inner, l.min, l.max, l.link_bytes].iter().for_each(|&x| h.write_u32(x));
            words(&mut h, &l.to_end);
        }
        h.finish()
    }

    /// The optimized grammar these automata were built from.
    pub fn grammar(&self) -> &Grammar {
        &self.grammar
    }

    /// Number of DFA states over all rules.
    pub fn num_states(&self) -> usize {
        self.nodes.len()
    }

    /// Number of byte equivalence classes.
    pub fn num_byte_classes(&self) -> usize {
        self.n_classes
    }

    /// The start state of the root rule.
    pub fn root_start(&self) -> StateId {
        StateId(self.rule_start[self.grammar.root.index()])
    }

    /// The states of `rule`: `lo..hi`.
    pub(crate) fn rule_range(&self, rule: u32) -> (u32, u32) {
        let lo = self.rule_start[rule as usize];
        let hi = self.rule_start.get(rule as usize + 1).copied().unwrap_or(self.nodes.len() as u32);
        (lo, hi)
    }

    /// Whether no state of `rule` calls a rule or is gated: a walk inside it stays in DFA
    /// mode.
    pub(crate) fn is_pure(&self, rule: u32) -> bool {
        let (lo, hi) = self.rule_range(rule);
        (lo..hi).all(|s| self.edges(s).is_empty() && !self.nodes[s as usize].gated)
    }

    #[inline]
    pub(crate) fn edges(&self, state: u32) -> &[(u32, u32)] {
        let (a, b) = self.nodes[state as usize].edges;
        &self.rule_edges[a as usize..b as usize]
    }

    /// Whether `state` scans bytes. A parser's own states (a member set's progress, see
    /// [`members`]) are numbered past the automaton's and never do.
    #[inline]
    pub(crate) fn scans(&self, state: u32) -> bool {
        self.nodes.get(state as usize).is_some_and(|n| n.scannable)
    }

    /// The state after a byte of class `class` from `state` ([`DEAD`] if none, and for a
    /// parser's own states, which scan nothing).
    #[inline]
    pub(crate) fn next(&self, state: u32, class: usize) -> u32 {
        match self.nodes.get(state as usize) {
            Some(n) => self.table.next(n.row, state, class),
            None => DEAD,
        }
    }

    /// The byte transitions of `state` (none for a parser's own states, which scan
    /// nothing).
    #[inline]
    pub(crate) fn row(&self, state: u32) -> table::Row<'_> {
        match self.nodes.get(state as usize) {
            Some(n) => self.table.row(n.row, state),
            None => table::Row::EMPTY,
        }
    }

    /// Bytes with a transition out of `state`.
    pub(crate) fn out_bytes(&self, state: u32) -> ByteSet {
        let mut set = ByteSet::default();
        for (c, t) in self.row(state).iter().enumerate() {
            if t != DEAD {
                self.class_bytes[c].iter().for_each(|&b| set.insert(b));
            }
        }
        set
    }

    /// States with at least one rule edge, in order: the only ones the fixpoints below
    /// update (a state without rule edges has its facts from its own bytes and finality).
    fn states_with_rule_edges(&self) -> Vec<u32> {
        (0..self.nodes.len() as u32).filter(|&s| !self.edges(s).is_empty()).collect()
    }

    /// `nullable_from[s]`: a final state is reachable from `s` through nullable rule edges only.
    fn nullable_from(&self, nullable: &[bool], with_edges: &[u32]) -> Vec<bool> {
        let mut nf: Vec<bool> = self.nodes.iter().map(|x| x.is_final).collect();
        loop {
            let mut changed = false;
            for &s in with_edges.iter().rev() {
                let s = s as usize;
                if !nf[s] && self.edges(s as u32).iter().any(|&(r, t)| nullable[r as usize] && nf[t as usize])
                {
                    nf[s] = true;
                    changed = true;
                }
            }
            if !changed {
                return nf;
            }
        }
    }

    fn compute_nullable(&self, with_edges: &[u32]) -> Vec<bool> {
        let mut nullable = vec![false; self.rule_start.len()];
        loop {
            let nf = self.nullable_from(&nullable, with_edges);
            let next: Vec<bool> = self.rule_start.iter().map(|&s| nf[s as usize]).collect();
            if next == nullable {
                return nullable;
            }
            nullable = next;
        }
    }

    /// FIRST bytes of the states that follow a rule or start one (bytes they can scan,
    /// directly or through predicted rules), then FOLLOW bytes of each rule. Only those
    /// states need FIRST, and they are closed under the recursion, so the fixpoint runs
    /// over them rather than over every state.
    fn compute_follow(&self, with_edges: &[u32]) -> Vec<ByteSet> {
        let n = self.nodes.len();
        let nf = self.nullable_from(&self.nullable, with_edges);
        let mut slot = vec![u32::MAX; n];
        let mut needed: Vec<u32> = Vec::new();
        let targets = self.rule_edges.iter().map(|e| e.1);
        for s in self.rule_start.iter().copied().chain(targets) {
            if slot[s as usize] == u32::MAX {
                slot[s as usize] = needed.len() as u32;
                needed.push(s);
            }
        }
        let at = |s: u32| slot[s as usize] as usize;
        let mut first: Vec<ByteSet> = needed.iter().map(|&s| self.out_bytes(s)).collect();
        loop {
            let mut changed = false;
            for (i, &s) in needed.iter().enumerate() {
                let mut acc = first[i];
                for &(r, t) in self.edges(s) {
                    acc.union(&first[at(self.rule_start[r as usize])]);
                    if self.nullable[r as usize] {
                        acc.union(&first[at(t)]);
                    }
                }
                changed |= first[i].union(&acc);
            }
            if !changed {
                break;
            }
        }
        let mut follow = vec![ByteSet::default(); self.rule_start.len()];
        loop {
            let mut changed = false;
            for &s in with_edges {
                let parent = self.nodes[s as usize].rule as usize;
                for &(r, t) in self.edges(s) {
                    let mut acc = first[at(t)];
                    if nf[t as usize] {
                        acc.union(&follow[parent]);
                    }
                    changed |= follow[r as usize].union(&acc);
                }
            }
            if !changed {
                return follow;
            }
        }
    }

    /// Approximate heap bytes.
    pub fn memory_bytes(&self) -> usize {
        self.table.memory_bytes()
            + self.nodes.len() * std::mem::size_of::<NodeInfo>()
            + self.rule_edges.len() * 8
            + self.prediction.len() * 4
            + self.sets.iter().map(members::SetInfo::memory_bytes).sum::<usize>()
            + self.chains.iter().map(|c| std::mem::size_of_val(c) + c.1.to_end.len() * 4).sum::<usize>()
            + self.conts.len() * 12
    }

    /// A human-readable dump of every rule's DFA (for `grammask inspect`).
    pub fn dump(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for (r, rule) in self.grammar.rules.iter().enumerate() {
            let start = self.rule_start[r];
            let end = self.rule_start.get(r + 1).copied().unwrap_or(self.nodes.len() as u32);
            let _ = writeln!(
                out,
                "rule {} (states {}..{}{})",
                rule.name,
                start,
                end,
                if self.nullable[r] { ", nullable" } else { "" }
            );
            for s in start..end {
                let node = self.nodes[s as usize];
                let _ = write!(out, "  {s}{}:", if node.is_final { " (final)" } else { "" });
                for (c, bytes) in self.class_bytes.iter().enumerate() {
                    let t = self.next(s, c);
                    if t != DEAD {
                        let _ = write!(out, " {}→{t}", show_bytes(bytes));
                    }
                }
                for &(rr, t) in self.edges(s) {
                    let _ = write!(out, " <{}>→{t}", self.grammar.rules[rr as usize].name);
                }
                if node.tail {
                    out.push_str(" (tail call)");
                }
                out.push('\n');
            }
        }
        out
    }
}

fn show_bytes(bytes: &[u8]) -> String {
    let lo = bytes[0];
    let hi = bytes[bytes.len() - 1];
    let one = |b: u8| if b.is_ascii_graphic() { (b as char).to_string() } else { format!("\\x{b:02x}") };
    if lo == hi {
        one(lo)
    } else if bytes.len() == (hi - lo) as usize + 1 {
        format!("[{}-{}]", one(lo), one(hi))
    } else {
        format!("{{{} bytes}}", bytes.len())
    }
}

/// One rule's NFA, and the counted repetition taken out of it to be spliced back in.
struct Plan {
    nfa: Nfa,
    chain: Option<(Nfa, u32, u32)>,
}

/// Fewest rules for which the automata builder shares rules out between threads: below
/// it a grammar's whole build costs about what waking a helper does.
const PARALLEL_MIN_RULES: usize = 8;

/// Rules from which the NFAs alone are worth hiring helpers for.
const PARALLEL_MANY_RULES: usize = 500;

/// Fewest NFA states (all rules) for which DFAs are built in parallel (~1.5 µs of
/// subset construction each: at 2,000 states a build is worth splitting).
const PARALLEL_MIN_NFA_STATES: usize = 2_000;

/// Fewest NFA states for which a build outside a compile ([`crate::crew::scope`]) hires
/// helpers for its DFAs alone (~30 ms of subset construction).
const PARALLEL_ALONE_MIN_NFA_STATES: usize = 20_000;

/// The minimal DFA of one rule, with the layout of its spliced counted repetition (if
/// the repetition could be spliced).
fn rule_dfa(
    plan: &Plan,
    rule: &crate::grammar::Rule,
    placeholder: RuleId,
    n_classes: usize,
    sc: &mut dfa::Scratch,
    limits: &AutomataLimits,
) -> Result<(Dfa, Option<chain::Layout>), AutomataError> {
    let mut minimal = |nfa: &Nfa| Dfa::minimal(nfa, sc, limits.max_dfa_states);
    let spliced = match &plan.chain {
        Some((link, min, max)) => {
            let letter = n_classes as u32 + placeholder.0;
            chain::splice(&minimal(&plan.nfa)?, letter, &minimal(link)?, (*min, *max), limits.max_dfa_states)
                .transpose()?
        }
        None => None,
    };
    // (A spliced repetition's two parts share one alphabet: they keep the grammar's.)
    Ok(match (spliced, &plan.chain) {
        (Some(built), _) => built,
        (None, None) => (Dfa::minimal_narrow(&plan.nfa, sc, limits.max_dfa_states)?, None),
        // The shapes did not allow splicing: the whole body, as usual.
        (None, Some(_)) => {
            let nfa = Nfa::build(&rule.body, limits.max_nfa_states)?;
            (Dfa::minimal_narrow(&nfa, sc, limits.max_dfa_states)?, None)
        }
    })
}

/// Byte equivalence classes: two bytes share a class when every edge of every rule treats
/// them alike.
fn byte_classes<'n>(nfas: impl IntoIterator<Item = &'n Nfa>) -> ([u8; 256], usize) {
    let mut boundary = [false; 257];
    for nfa in nfas {
        for s in 0..nfa.len() as u32 {
            for &(lo, hi, _) in nfa.bytes.of(s) {
                boundary[lo as usize] = true;
                boundary[hi as usize + 1] = true;
            }
        }
    }
    let mut class = [0u8; 256];
    let mut c = 0usize;
    for b in 0..256 {
        if b > 0 && boundary[b] {
            c += 1;
        }
        class[b] = c as u8;
    }
    (class, c + 1)
}

#[cfg(test)]
impl Automata {
    /// The state after reading `input` from the root's start, by DFA moves only (tests).
    pub(crate) fn after(&self, input: &[u8]) -> u32 {
        input.iter().fold(self.root_start().0, |s, &b| {
            let t = self.next(s, self.byte_class[b as usize] as usize);
            assert_ne!(t, DEAD, "{input:?} dies");
            t
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool-calling tag's grammar: many rules, thousands of NFA states.
    fn tools_grammar(n: usize) -> Grammar {
        let tags: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                serde_json::json!({
                    "begin": format!("<tool_call>{{\"name\": \"tool_{i}\", \"arguments\": "),
                    "content": {"type": "json_schema", "json_schema": {
                        "type": "object",
                        "properties": {
                            "city": {"type": "string", "maxLength": 20 + i},
                            "days": {"type": "integer", "minimum": 1, "maximum": 10 + i},
                            "when": {"type": "string", "format": "date"}
                        },
                        "required": ["city"]
                    }},
                    "end": "}</tool_call>"
                })
            })
            .collect();
        let tag = serde_json::json!({"type": "structural_tag", "format": {
            "type": "triggered_tags", "triggers": ["<tool_call>"], "tags": tags}});
        crate::structural_tag::structural_tag_to_grammar(&tag.to_string()).unwrap()
    }

    #[test]
    fn the_automata_are_the_same_however_many_threads_build_them() {
        let g = tools_grammar(12);
        let limits = AutomataLimits::default();
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let serial = one.install(|| Automata::build_owned(g.clone(), &limits).unwrap());
        let two = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        // In a compile's scope, where the phases hire a crew; and outside one, where this
        // build is too small to hire for itself.
        let parallel = two.install(|| crew::scope(|| Automata::build_owned(g.clone(), &limits).unwrap()));
        let outside = two.install(|| Automata::build_owned(g.clone(), &limits).unwrap());
        assert!(serial.grammar().rules.len() >= PARALLEL_MIN_RULES);
        assert!(serial.num_states() > 500, "{} states: too small to split", serial.num_states());
        assert_eq!(serial.digest(), parallel.digest());
        assert_eq!(serial.digest(), outside.digest());
    }

    #[test]
    fn long_strings_share_their_rows() {
        // Github_easy o21456's address: a pattern under a length limit, tens of thousands
        // of states that are copies of a few.
        let schema = serde_json::json!({"type": "object", "properties": {"from": {
            "type": "string", "minLength": 5, "maxLength": 254,
            "pattern": "^[^@^\\s]+@[^@^\\.^\\s]+(\\.[^@^\\.^\\s]*)*.gov.uk"}}, "required": ["from"]});
        let g = crate::json_schema::json_schema_to_grammar(&schema, &Default::default()).unwrap();
        let a = Automata::build_owned(g, &AutomataLimits::default()).unwrap();
        let (states, rows) = (a.num_states(), a.table.rows());
        assert!(states > 20_000 && rows * 8 < states, "{states} states, {rows} rows");
        assert!(a.table.memory_bytes() * 8 < states * a.n_classes * 4);
        // Moves stay the language's: from the string rule's start (the largest rule), 254
        // characters end the value, 255 do not.
        let rule =
            (0..a.rule_start.len()).max_by_key(|&r| a.rule_range(r as u32).1 - a.rule_start[r]).unwrap();
        let read = |s: &str| {
            s.bytes().try_fold(a.rule_start[rule], |q, b| {
                let t = a.next(q, a.byte_class[b as usize] as usize);
                (t != DEAD).then_some(t)
            })
        };
        let local = "a".repeat(254 - "@b.gov.uk".len());
        assert!(read(&format!("\"{local}@b.gov.uk\"")).is_some_and(|q| a.nodes[q as usize].is_final));
        assert!(!read(&format!("\"a{local}@b.gov.uk\"")).is_some_and(|q| a.nodes[q as usize].is_final));
        assert!(read(&format!("\"{local}@b.gov.ukx")).is_none());
    }

    #[test]
    fn a_rule_over_the_state_limit_is_an_error_for_the_rules_after_it_too() {
        // The first rule's subset construction stops at the limit in the middle of a
        // state; the small rule built next with the same scratch must not see the
        // targets it left (it indexed them into its own NFA and panicked).
        // 400 words of letters from a multiplicative hash: a trie of ~2,000 states.
        let words: Vec<String> = (0..400u64)
            .map(|i| {
                let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let w: String = (0..6).map(|k| (b'a' + ((h >> (8 * k)) % 26) as u8) as char).collect();
                format!("\"{w}\"")
            })
            .collect();
        // `small` calls itself: it stays a rule of its own, built after the root.
        let text = format!("root ::= ({}) small\nsmall ::= \"y\" small | \"z\"", words.join(" | "));
        let g = crate::grammar::parse_ebnf(&text, "root", &Default::default()).unwrap();
        let limits = AutomataLimits { max_dfa_states: 60, ..Default::default() };
        // Serially, and in a pool where each worker's scratch builds several rules.
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            match pool.install(|| crew::scope(|| Automata::build_owned(g.clone(), &limits))) {
                Err(AutomataError::Limit { what, .. }) => assert!(what.contains("DFA states"), "{what}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
