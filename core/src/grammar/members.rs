//! Member sets: the members of a JSON object in any order, each at most once (see
//! [`MemberSet`]).

use super::error::{GrammarError, GrammarErrorKind};
use super::{Expr, Rule, RuleId};

/// The id a dropped member keeps (see [`MemberSet::map_rules`]).
const DROPPED: RuleId = RuleId(u32::MAX);

/// The side condition of a rule whose members come in any order, each at most once.
///
/// No context-free grammar of polynomial size says "each of these `n` members at most
/// once, in any order" (the permutations of `n` symbols need exponentially many rules),
/// so the IR states it as a side condition on one rule instead. The rule's body is the
/// over-approximation
///
/// ```text
/// open (member | extra) (sep (member | extra))* close
/// ```
///
/// where `member` is any of the member rules ([`MemberSet::body`]). Automata, FOLLOW sets
/// and masks are built from that body as from any other. The matcher's parser enforces
/// the rest: each instance of the rule carries the set of members it has written (and a
/// count of extra members) and, at its rule edges, predicts only the members not yet
/// written, the separator only while something may still follow it, and the close only
/// once every required member is in and the count is within bounds — and only into a
/// progress from which the object can still be finished. All of it happens at
/// predictions, and the states that carry a progress scan no bytes, so every mask in the
/// cache stays context-independent: the members not predicted contribute no tokens.
///
/// ```
/// use grammask::grammar::{Expr, Grammar, MemberSet, Rule, RuleId};
/// let lit = |s: &str| Expr::Literal(s.into());
/// // {"a": 1} and {"b": 2} in either order, `a` required.
/// let set = MemberSet {
///     members: vec![(RuleId(1), true), (RuleId(2), false)],
///     extra: None,
///     sep: RuleId(3),
///     close: RuleId(4),
///     min: 0,
///     max: None,
/// };
/// let mut obj = Rule::new("root", set.body(lit("{")));
/// obj.members = Some(Box::new(set));
/// let g = Grammar {
///     rules: vec![
///         obj,
///         Rule::new("a", lit("\"a\": 1")),
///         Rule::new("b", lit("\"b\": 2")),
///         Rule::new("sep", lit(", ")),
///         Rule::new("close", lit("}")),
///     ],
///     root: RuleId(0),
///     markers: Vec::new(),
/// };
/// # use std::sync::Arc;
/// # use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenizerInfo, TokenizerOptions};
/// # let bytes: Vec<Vec<u8>> = (1u8..128).map(|b| vec![b]).collect();
/// # let tok = TokenizerInfo::from_byte_tokens(bytes, &TokenizerOptions::default())?;
/// let compiled = GrammarCompiler::new(Arc::new(tok)).compile(&GrammarSpec::Grammar(g))?;
/// let accepts = |text: &str| {
///     let mut m = GrammarMatcher::new(compiled.clone());
///     m.accept_string(text).is_ok() && m.can_terminate()
/// };
/// assert!(accepts(r#"{"b": 2, "a": 1}"#));
/// assert!(!accepts(r#"{"b": 2}"#)); // `a` is required
/// assert!(!accepts(r#"{"a": 1, "a": 1}"#)); // at most once
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MemberSet {
    /// Per member: the rule that writes it (key and value, no separator) and whether it is
    /// required. Member `i` is bit `i` of the written set (any number of members).
    pub members: Vec<(RuleId, bool)>,
    /// The rule writing one extra member (any number of them, not tracked one by one).
    pub extra: Option<RuleId>,
    /// The separator between two members (`", "`).
    pub sep: RuleId,
    /// What ends the object (`"}"`).
    pub close: RuleId,
    /// Fewest members (declared and extra) in all.
    pub min: u32,
    /// Most members (declared and extra) in all.
    pub max: Option<u32>,
}

impl MemberSet {
    /// The rule body this set constrains: `open (m | x) (sep (m | x))* close`.
    pub fn body(&self, open: Expr) -> Expr {
        let any = self.any();
        let more = Expr::Seq(vec![Expr::Rule(self.sep), any.clone()]);
        Expr::Seq(vec![
            open,
            any,
            Expr::Repeat { expr: Box::new(more), min: 0, max: None },
            Expr::Rule(self.close),
        ])
    }

    /// `(m | x)`: any member (but those dropped), or the extra rule.
    fn any(&self) -> Expr {
        let mut any: Vec<Expr> =
            self.members.iter().filter(|m| m.0 != DROPPED).map(|m| Expr::Rule(m.0)).collect();
        any.extend(self.extra.map(Expr::Rule));
        Expr::Alt(any)
    }

    /// Calls `f` on every rule the set names (not the members dropped by
    /// [`MemberSet::map_rules`]).
    pub fn for_each_rule(&self, f: &mut impl FnMut(RuleId)) {
        self.members.iter().filter(|m| m.0 != DROPPED).for_each(|m| f(m.0));
        self.extra.into_iter().for_each(&mut *f);
        f(self.sep);
        f(self.close);
    }

    /// Renames every rule the set names; a member (or the extra rule) renamed to `None`
    /// is dropped — it can never be written — keeping the other members' bits.
    pub fn map_rules(&mut self, f: &mut impl FnMut(RuleId) -> Option<RuleId>) {
        // A dropped member keeps its place (bits are positions) under an id no edge uses.
        let mut map = |r: RuleId| if r == DROPPED { DROPPED } else { f(r).unwrap_or(DROPPED) };
        for m in &mut self.members {
            m.0 = map(m.0);
        }
        self.extra = self.extra.map(&mut map).filter(|&r| r != DROPPED);
        self.sep = map(self.sep);
        self.close = map(self.close);
    }

    /// Whether the rule can complete, given which rules can (`productive`): every required
    /// member can be written, and enough members can be written to reach `min` (at least
    /// one: the body writes one) without passing `max`.
    pub fn productive(&self, productive: impl Fn(RuleId) -> bool) -> bool {
        let ok = |r: RuleId| r != DROPPED && productive(r);
        if !ok(self.close) || self.members.iter().any(|m| m.1 && !ok(m.0)) {
            return false;
        }
        let writable = self.members.iter().filter(|m| ok(m.0)).count() as u32;
        let available = (!self.extra.is_some_and(ok)).then_some(writable);
        let required = self.members.iter().filter(|m| m.1).count() as u32;
        // More than one member needs the separator.
        can_finish(0, required, available, self.min.max(1), self.max)
            && (required.max(self.min) <= 1 || ok(self.sep))
    }

    /// Checks that `rule` (which carries this set) has the body the set constrains — as
    /// built, or as the optimizer leaves it (`open` spliced into the sequence, dropped
    /// members gone) — and that the set is one the parser can track.
    pub(crate) fn check(&self, rule: &Rule) -> Result<(), GrammarError> {
        let bad = |why: String| {
            Err(GrammarError::global(GrammarErrorKind::BadMemberSet { rule: rule.name.clone(), why }))
        };
        let shape = || "the body is not `open (m | x) (sep (m | x))* close` over its own rules".to_string();
        let v = match &rule.body {
            Expr::Seq(v) if v.len() >= 4 => v,
            _ => return bad(shape()),
        };
        let (open, tail) = v.split_at(v.len() - 3);
        let mut refs = false;
        open.iter().for_each(|e| e.for_each_rule(&mut |_| refs = true));
        let expected = self.body(Expr::Empty);
        if refs || !matches!(&expected, Expr::Seq(w) if w[1..] == *tail) {
            return bad(shape());
        }
        let mut rules: Vec<RuleId> = Vec::new();
        self.for_each_rule(&mut |r| rules.push(r));
        rules.sort_unstable();
        if rules.windows(2).any(|w| w[0] == w[1]) {
            return bad("a rule plays two parts".into());
        }
        Ok(())
    }
}

/// Whether a member set with `count` members written, `missing` required ones among
/// those not written yet and `available` more that could be written (`None`: no limit,
/// extra members) can still end with its count within `min..=max`.
pub(crate) fn can_finish(
    count: u32,
    missing: u32,
    available: Option<u32>,
    min: u32,
    max: Option<u32>,
) -> bool {
    let least = (count + missing).max(min);
    let most = available.map_or(u32::MAX, |a| count.saturating_add(a)).min(max.unwrap_or(u32::MAX));
    least <= most
}
