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
    Member(u32),
    /// Writes one extra member.
    Extra,
    /// The separator before a further member.
    Sep,
    /// Ends the object.
    Close,
}

/// A member set as the parser uses it.
///
/// The written set is a bit set of [`SetInfo::words`] 64-bit words, any number of members
/// (the parser stores one word inline and interns wider sets).
#[derive(Debug, Clone)]
pub(crate) struct SetInfo {
    /// `(rule, role)` for every rule the set names, sorted by rule.
    roles: Vec<(u32, Role)>,
    required: Box<[u64]>,
    /// Members that have an edge (a member whose value is unsatisfiable has none).
    writable: Box<[u64]>,
    extra: bool,
    min: u32,
    max: Option<u32>,
    /// Extra members are counted up to this (0: counts are not constrained).
    cap: u32,
}

/// `(required, optional)` counts of `writable & !written` — the members that
/// could still be written, and which of them are required.
#[inline]
fn left(required: &[u64], writable: &[u64], written: &[u64]) -> (u32, u32) {
    let (mut req, mut opt) = (0, 0);
    for ((&r, &w), &d) in required.iter().zip(writable).zip(written) {
        let l = w & !d;
        req += (l & r).count_ones();
        opt += (l & !r).count_ones();
    }
    (req, opt)
}

/// The number of set bits.
#[inline]
fn ones(bits: &[u64]) -> u32 {
    bits.iter().map(|w| w.count_ones()).sum()
}

impl SetInfo {
    fn new(set: &MemberSet, has_edge: impl Fn(u32) -> bool) -> SetInfo {
        let words = set.members.len().div_ceil(64).max(1);
        let mut roles = Vec::new();
        let mut writable = vec![0u64; words];
        let mut required = vec![0u64; words];
        for (i, m) in set.members.iter().enumerate() {
            if m.1 {
                required[i / 64] |= 1 << (i % 64);
            }
            if has_edge(m.0 .0) {
                roles.push((m.0 .0, Role::Member(i as u32)));
                writable[i / 64] |= 1 << (i % 64);
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
        SetInfo {
            roles,
            required: required.into(),
            writable: writable.into(),
            extra,
            min: set.min,
            max: set.max,
            cap,
        }
    }

    /// Words in a written set of this member set (one for up to 64 members).
    #[inline]
    pub fn words(&self) -> usize {
        self.required.len()
    }

    /// Heap and inline bytes.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.roles.capacity() * std::mem::size_of::<(u32, Role)>()
            + 2 * self.words() * std::mem::size_of::<u64>()
    }

    /// The part rule `rule` plays, if any.
    pub fn role(&self, rule: u32) -> Option<Role> {
        self.roles.binary_search_by_key(&rule, |r| r.0).ok().map(|i| self.roles[i].1)
    }

    /// Whether an instance that has written `written` ([`SetInfo::words`] words) and
    /// `extra` extra members may follow an edge calling `rule`; if so, the written set
    /// after it is left in `after` and the extra count after it returned. An edge is
    /// allowed only into a progress from which the object can still be finished — every
    /// required member written, the count within bounds — so the matcher never lets a
    /// token into a dead end (a fourth member when `maxProperties: 4` leaves no room for
    /// a required one).
    pub fn gate(&self, rule: u32, written: &[u64], extra: u32, after: &mut Vec<u64>) -> Option<u32> {
        after.clear();
        after.extend_from_slice(written);
        let n = ones(written);
        let count = n + extra;
        let (req_left, opt_left) = left(&self.required, &self.writable, written);
        let missing = self.missing(written);
        // Extra members counted after one more (saturating at `cap`).
        let more_extra = (extra + 1).min(self.cap);
        match self.role(rule)? {
            Role::Member(i) => {
                let (w, b) = (i as usize / 64, 1u64 << (i % 64));
                if written[w] & b != 0 {
                    return None;
                }
                after[w] |= b;
                let missing = missing - u32::from(self.required[w] & b != 0);
                let available = req_left + opt_left - 1;
                self.finishable(count + 1, missing, available).then_some(extra)
            }
            Role::Extra => (self.extra && self.finishable(n + more_extra, missing, req_left + opt_left))
                .then_some(more_extra),
            Role::Sep => {
                // Some member still writable (a required one takes one off the missing,
                // an optional one does not), or an extra one, after which the object can
                // still be finished.
                let available = (req_left + opt_left).saturating_sub(1);
                let more = req_left > 0 && self.finishable(count + 1, missing - 1, available)
                    || opt_left > 0 && self.finishable(count + 1, missing, available)
                    || self.extra && self.finishable(n + more_extra, missing, req_left + opt_left);
                more.then_some(extra)
            }
            // The end carries no progress: nothing follows it in the rule.
            Role::Close => {
                let done = missing == 0 && count >= self.min && self.max.map_or(true, |m| count <= m);
                after.iter_mut().for_each(|w| *w = 0);
                done.then_some(0)
            }
        }
    }

    /// Required members not in `written`.
    #[inline]
    fn missing(&self, written: &[u64]) -> u32 {
        self.required.iter().zip(written).map(|(&r, &w)| (r & !w).count_ones()).sum()
    }

    /// Whether an instance with `count` members written, `missing` required ones not
    /// written yet and `available` more writable members can still be finished: the
    /// members it must still write (the missing required ones, enough to reach `min`) fit
    /// under `max` and are available (extra members are unlimited).
    #[inline]
    fn finishable(&self, count: u32, missing: u32, available: u32) -> bool {
        let available = (!self.extra).then_some(available);
        can_finish(count, missing, available, self.min, self.max)
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
                stack.extend(self.row(s).iter().filter(|&t| t != DEAD));
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
        // `(written, extra)` after the edge calling `rule`, if allowed.
        let gate = |s: &SetInfo, rule: u32, written: u64, extra: u32| {
            let mut after = Vec::new();
            s.gate(rule, &[written], extra, &mut after).map(|x| (after[0], x))
        };
        // No bounds: extras are not counted at all (one progress for any number of them).
        assert_eq!(gate(&set(0, None), 3, 1, 0), Some((1, 0)));
        // Only `minProperties: 3`: counted up to 3, then the count stops changing.
        let s = set(3, None);
        assert_eq!(gate(&s, 3, 1, 1), Some((1, 2)));
        assert_eq!(gate(&s, 3, 1, 3), Some((1, 3)));
        assert_eq!(gate(&s, 5, 1, 3), Some((0, 0)));
        assert_eq!(gate(&s, 5, 1, 1), None);
        // `maxProperties: 3` with a required member missing: two extras leave room for
        // it, a third does not.
        let s = set(0, Some(3));
        assert_eq!(gate(&s, 3, 0, 1), Some((0, 2)));
        assert_eq!(gate(&s, 3, 0, 2), None);
        assert_eq!(gate(&s, 1, 0, 2), Some((1, 2)));
        // The separator only while something may still follow.
        assert_eq!(gate(&s, 4, 0b11, 1), None);
        assert_eq!(gate(&s, 4, 0b11, 0), Some((0b11, 0)));
        // Member 0 twice: never.
        assert_eq!(gate(&s, 1, 1, 0), None);
    }

    #[test]
    fn wide_sets_gate_members_past_the_first_word() {
        // 130 members, the last one required, no extras, at most 3 in all.
        let mut members: Vec<(RuleId, bool)> = (0..130).map(|i| (RuleId(10 + i), false)).collect();
        members[129].1 = true;
        let set = MemberSet { members, extra: None, sep: RuleId(1), close: RuleId(2), min: 0, max: Some(3) };
        let s = SetInfo::new(&set, |_| true);
        assert_eq!(s.words(), 3);
        let mut after = Vec::new();
        // Member 100 (word 1, bit 36), then member 129: the close is allowed after both.
        let mut w = vec![0u64; 3];
        assert_eq!(s.gate(110, &w, 0, &mut after), Some(0));
        assert_eq!(after, [0, 1 << 36, 0]);
        w.clone_from(&after);
        assert_eq!(s.gate(110, &w, 0, &mut after), None, "written twice");
        assert_eq!(s.gate(2, &w, 0, &mut after), None, "member 129 is required");
        assert_eq!(s.gate(1, &w, 0, &mut after), Some(0));
        // A second optional member leaves room for the required one (3 in all)...
        assert_eq!(s.gate(10, &w, 0, &mut after), Some(0));
        let two = after.clone();
        // ... and then only the required one may follow the separator.
        assert_eq!(s.gate(1, &two, 0, &mut after), Some(0));
        assert_eq!(s.gate(11, &two, 0, &mut after), None);
        assert_eq!(s.gate(139, &two, 0, &mut after), Some(0));
        assert_eq!(s.gate(2, &after.clone(), 0, &mut after), Some(0));
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
