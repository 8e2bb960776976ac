//! Member sets in the automata: which part each rule edge of a member-set rule plays, and
//! the gate the parser applies at those edges (see [`crate::grammar::MemberSet`]).
//!
//! The parser tracks, per instance of a member-set rule, the members written so far and a
//! count of extra members; a rule edge is followed only when [`SetInfo::gate`] allows it,
//! and its target carries the updated progress. Building checks the two facts that keep
//! the mask cache context-independent: the rule's start state calls no rule (static
//! predictions never reach a gated edge), and no state reached over a gated edge scans a
//! byte (no cached mask depends on the progress).

use super::AutomataError;
use super::{Automata, DEAD};
use crate::grammar::{can_finish, MemberSet};
use crate::grammar::{GrammarError, GrammarErrorKind};

/// The part a rule edge of a member-set rule plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Writes member `i` (bit `i` of the written set).
    Member(u8),
    /// Writes one extra member.
    Extra,
    /// The separator before a further member.
    Sep,
    /// Ends the object.
    Close,
}

/// A member set as the parser uses it.
#[derive(Debug, Clone)]
pub(crate) struct SetInfo {
    /// `(rule, role)` for every rule the set names, sorted by rule.
    roles: Vec<(u32, Role)>,
    required: u64,
    /// Members that have an edge (a member whose value is unsatisfiable has none).
    writable: u64,
    extra: bool,
    min: u32,
    max: Option<u32>,
    /// Extra members are counted up to this (0: counts are not constrained).
    cap: u32,
}

impl SetInfo {
    fn new(set: &MemberSet, has_edge: impl Fn(u32) -> bool) -> SetInfo {
        let mut roles = Vec::new();
        let mut writable = 0u64;
        for (i, m) in set.members.iter().enumerate() {
            if has_edge(m.0 .0) {
                roles.push((m.0 .0, Role::Member(i as u8)));
                writable |= 1 << i;
            }
        }
        let extra = set.extra.is_some_and(|r| has_edge(r.0));
        if let Some(r) = set.extra.filter(|_| extra) {
            roles.push((r.0, Role::Extra));
        }
        roles.push((set.sep.0, Role::Sep));
        roles.push((set.close.0, Role::Close));
        roles.sort_unstable_by_key(|r| r.0);
        // Past `max + 1` (or `min` with no `max`), more extras change nothing.
        let cap = set.max.map_or(set.min, |m| set.min.max(m.saturating_add(1)));
        SetInfo { roles, required: set.required_bits(), writable, extra, min: set.min, max: set.max, cap }
    }

    /// Heap and inline bytes.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.roles.capacity() * std::mem::size_of::<(u32, Role)>()
    }

    /// The part rule `rule` plays, if any.
    pub fn role(&self, rule: u32) -> Option<Role> {
        self.roles.binary_search_by_key(&rule, |r| r.0).ok().map(|i| self.roles[i].1)
    }

    /// Whether an instance that has written `written` (and `extra` extra members) may
    /// follow an edge calling `rule`, and with what progress after it. An edge is allowed
    /// only into a progress from which the object can still be finished — every required
    /// member written, the count within bounds — so the matcher never lets a token into a
    /// dead end (a fourth member when `maxProperties: 4` leaves no room for a required one).
    #[inline]
    pub fn gate(&self, rule: u32, written: u64, extra: u32) -> Option<(u64, u32)> {
        let count = written.count_ones() + extra;
        match self.role(rule)? {
            Role::Member(i) => {
                let after = (written | 1 << i, extra);
                (written >> i & 1 == 0 && self.finishable(after.0, after.1)).then_some(after)
            }
            Role::Extra => {
                let after = (written, (extra + 1).min(self.cap));
                (self.extra && self.finishable(after.0, after.1)).then_some(after)
            }
            Role::Sep => {
                let left = self.writable & !written;
                let more =
                    (0..64).filter(|i| left >> i & 1 == 1).any(|i| self.finishable(written | 1 << i, extra))
                        || self.extra && self.finishable(written, (extra + 1).min(self.cap));
                more.then_some((written, extra))
            }
            // The end carries no progress: nothing follows it in the rule.
            Role::Close => {
                let done = written & self.required == self.required
                    && count >= self.min
                    && self.max.map_or(true, |m| count <= m);
                done.then_some((0, 0))
            }
        }
    }

    /// Whether an instance with this progress can still be finished: the members it must
    /// still write (the missing required ones, enough to reach `min`) fit under `max` and
    /// are available (extra members are unlimited).
    fn finishable(&self, written: u64, extra: u32) -> bool {
        let missing = (self.required & !written).count_ones();
        let available = (!self.extra).then(|| (self.writable & !written).count_ones());
        can_finish(written.count_ones() + extra, missing, available, self.min, self.max)
    }
}

impl Automata {
    /// Fills [`Automata::sets`] and marks the gated states, checking the two facts the
    /// mask cache relies on (see the module documentation).
    pub(super) fn compute_sets(&mut self) -> Result<(), AutomataError> {
        let bad = |rule: &str, why: &str| {
            AutomataError::Grammar(GrammarError::global(GrammarErrorKind::BadMemberSet {
                rule: rule.to_string(),
                why: why.to_string(),
            }))
        };
        for r in 0..self.grammar.rules.len() {
            let Some(set) = self.grammar.rules[r].members.as_deref() else { continue };
            let name = &self.grammar.rules[r].name;
            let (lo, hi) =
                (self.rule_start[r], self.rule_start.get(r + 1).copied().unwrap_or(self.nodes.len() as u32));
            let called = |rule: u32| (lo..hi).any(|s| self.edges(s).iter().any(|e| e.0 == rule));
            let info = SetInfo::new(set, called);
            // (The optimizer may have merged two of the set's rules: their edges would
            // be told apart by nothing.)
            if info.roles.windows(2).any(|w| w[0].0 == w[1].0) {
                return Err(bad(name, "two of its rules became one"));
            }
            if !self.edges(lo).is_empty() || self.nodes[lo as usize].is_final {
                return Err(bad(name, "the rule must begin with text, not a rule"));
            }
            // States reached over an edge, and everything after them, scan no byte.
            let mut seen = vec![false; (hi - lo) as usize];
            let mut stack: Vec<u32> = Vec::new();
            for s in lo..hi {
                for &(rule, t) in self.edges(s) {
                    if info.role(rule).is_none() {
                        return Err(bad(name, "a rule edge plays no part in the set"));
                    }
                    stack.push(t);
                }
            }
            while let Some(s) = stack.pop() {
                let k = (s - lo) as usize;
                if std::mem::replace(&mut seen[k], true) {
                    continue;
                }
                if self.nodes[s as usize].scannable {
                    return Err(bad(name, "text after a member (separators and the end must be rules)"));
                }
                stack.extend(
                    self.trans[s as usize * self.n_classes..][..self.n_classes]
                        .iter()
                        .filter(|&&t| t != DEAD),
                );
                stack.extend(self.edges(s).iter().map(|e| e.1));
            }
            for s in lo..hi {
                self.nodes[s as usize].gated = true;
            }
            self.set_of[r] = self.sets.len() as u32;
            self.sets.push(info);
        }
        Ok(())
    }

    /// The member set of `rule`'s instances (for a state whose node is `gated`).
    #[inline]
    pub(crate) fn set_info(&self, rule: u32) -> &SetInfo {
        &self.sets[self.set_of[rule as usize] as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::{Grammar, RuleId};
    use crate::json_schema::{json_schema_str_to_grammar, JsonSchemaOptions, Whitespace};

    fn set(min: u32, max: Option<u32>) -> SetInfo {
        let members = vec![(RuleId(1), true), (RuleId(2), false)];
        let set = MemberSet { members, extra: Some(RuleId(3)), sep: RuleId(4), close: RuleId(5), min, max };
        SetInfo::new(&set, |_| true)
    }

    #[test]
    fn extra_members_are_counted_only_as_far_as_the_bounds_care() {
        // No bounds: extras are not counted at all (one progress for any number of them).
        assert_eq!(set(0, None).gate(3, 1, 0), Some((1, 0)));
        // Only `minProperties: 3`: counted up to 3, then the count stops changing.
        let s = set(3, None);
        assert_eq!(s.gate(3, 1, 1), Some((1, 2)));
        assert_eq!(s.gate(3, 1, 3), Some((1, 3)));
        assert_eq!(s.gate(5, 1, 3), Some((0, 0)));
        assert_eq!(s.gate(5, 1, 1), None);
        // `maxProperties: 3` with a required member missing: two extras leave room for
        // it, a third does not.
        let s = set(0, Some(3));
        assert_eq!(s.gate(3, 0, 1), Some((0, 2)));
        assert_eq!(s.gate(3, 0, 2), None);
        assert_eq!(s.gate(1, 0, 2), Some((1, 2)));
        // The separator only while something may still follow.
        assert_eq!(s.gate(4, 0b11, 1), None);
        assert_eq!(s.gate(4, 0b11, 0), Some((0b11, 0)));
    }

    #[test]
    fn optimized_member_set_grammars_build_again() {
        // The optimizer splices `open` (`"{" ws`) into the body's sequence; the result,
        // compiled again, is the same language.
        let schema = r#"{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"boolean"}},"required":["a"]}"#;
        let opts = JsonSchemaOptions { whitespace: Whitespace::Any { max: 2 }, ..Default::default() };
        let g = json_schema_str_to_grammar(schema, &opts).unwrap();
        let once = Automata::build(&g, &Default::default()).unwrap();
        let again: Grammar = once.grammar().clone();
        let twice = Automata::build(&again, &Default::default()).unwrap();
        assert_eq!(once.num_states(), twice.num_states());
    }
}
