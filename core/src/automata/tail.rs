//! Tail calls: states whose one rule edge calls a pure rule as the last thing the
//! caller's rule reads. A mask walk reads such a state and its callee's predicted start as
//! one DFA state (`compiler::mask`), instead of running its Earley parser for the pair.

use super::{Automata, DEAD};

impl Automata {
    /// Marks the states whose only rule edge is a *tail call*: it calls a pure rule (no
    /// state of it calls a rule or is gated) that cannot match the empty string, into a
    /// final state of the caller that reads nothing more, and the callee's first bytes are
    /// not bytes the state reads itself. Such a state and the callee's start, predicted
    /// beside it, read any byte as one DFA state would: its own move, else the callee's
    /// first move; the callee's final states end the caller's rule. A mask walk from a
    /// rule's start then stays in DFA mode through the call (`compiler::mask`): a JSON
    /// member's value after flexible whitespace (`":" [ \t\n\r]* value`) is such a state,
    /// walked a few times faster than as two Earley items.
    pub(super) fn mark_tail_calls(&mut self) {
        let pure: Vec<bool> = (0..self.rule_start.len() as u32).map(|r| self.is_pure(r)).collect();
        for s in 0..self.nodes.len() {
            let n = self.nodes[s];
            let [(callee, t)] = *self.edges(s as u32) else { continue };
            let (callee, start) = (callee as usize, self.rule_start[callee as usize] as usize);
            let sink = self.nodes[t as usize];
            let row = |q: usize| self.row(q as u32);
            // (Never into a stand-in: a walk moving into its callee in DFA mode would
            // predict it without the parser seeing the prediction.)
            let tail = !n.gated
                && pure[callee]
                && !self.grammar.rules[callee].stand_in
                && !self.nullable[callee]
                && sink.is_final
                && !sink.gated
                && sink.edges.0 == sink.edges.1
                && row(t as usize).is_empty()
                && row(s).iter().zip(row(start).iter()).all(|(x, y)| x == DEAD || y == DEAD);
            self.nodes[s].tail = tail;
        }
    }

    /// The start state of the rule that tail-calling state `s` calls (see
    /// [`Self::mark_tail_calls`]).
    #[inline]
    pub(crate) fn tail_callee(&self, s: u32) -> u32 {
        let (callee, _) = self.rule_edges[self.nodes[s as usize].edges.0 as usize];
        self.rule_start[callee as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::Grammar;

    /// The value positions of members that end in a pure, non-nullable rule are tail
    /// calls, whether whitespace loops there or not; not where the caller reads on after
    /// the call, where the state's own bytes start the callee too, or where the callee
    /// may match nothing.
    #[test]
    fn value_positions_that_end_their_rule_are_tail_calls() {
        let mut g = Grammar::from_ebnf(
            r#"root ::= "{" m1 "," m2 "," m3 "," m4 "," m5 "," m6 "}"
m1 ::= "\"h\"" [ ]* ":" [ ]* num
m2 ::= "\"w\"" ":" num
m3 ::= "\"d\"" ":" [0-9]* num
m4 ::= "\"e\"" ":" [ ]* num "!"
m5 ::= "\"f\"" ":" [ ]* opt
m6 ::= "\"g\"" ":" [ ]* (num | str)
num ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)?
opt ::= [a-z]*
str ::= "\"" [a-z]* "\"""#,
        )
        .unwrap();
        // Rules as a JSON schema's are: kept, not inlined into the root.
        g.rules.iter_mut().for_each(|r| r.keep = true);
        let a = Automata::build(&g, &Default::default()).unwrap();
        let rule = |name: &str| {
            let g = a.grammar();
            (0..g.rules.len() as u32).find(|&r| g.rules[r as usize].name == name).unwrap()
        };
        let tails = |member: &str| -> Vec<u32> {
            let (lo, hi) = a.rule_range(rule(member));
            (lo..hi).filter(|&s| a.nodes[s as usize].tail).collect()
        };
        let num = a.rule_start[rule("num") as usize];
        let [s] = tails("m1")[..] else { panic!("m1: {:?}", tails("m1")) };
        assert_eq!(a.tail_callee(s), num);
        assert_ne!(a.next(s, a.byte_class[b' ' as usize] as usize), DEAD);
        assert_eq!(tails("m2").len(), 1, "a tail call with no bytes of its own");
        assert_eq!(tails("m3"), Vec::<u32>::new(), "digits start the callee too");
        assert_eq!(tails("m4"), Vec::<u32>::new(), "the caller reads on");
        assert_eq!(tails("m5"), Vec::<u32>::new(), "the callee matches nothing");
        assert_eq!(tails("m6"), Vec::<u32>::new(), "two rule edges");
    }
}
