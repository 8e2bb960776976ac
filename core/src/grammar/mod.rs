//! Grammar IR: the first stage after a spec.
//!
//! ```text
//! spec (EBNF text, builtin JSON, …) ──parse──▶ Grammar (this module) ──▶ automata ──▶ mask cache
//! ```
//!
//! A [`Grammar`] is a list of named rules, each an [`Expr`] tree over Unicode text:
//! literal strings, character classes, rule references, sequences, alternations and bounded
//! or unbounded repetition. Nothing is byte-level yet; the automata stage turns characters
//! into UTF-8 byte ranges. The IR prints back as EBNF ([`Grammar`]'s `Display`), and the
//! printed text parses to the same IR.

mod builtin;
mod chardfa;
pub(crate) mod class;
mod ebnf;
mod error;
mod members;
mod print;
#[cfg(test)]
pub(crate) mod testing;

pub use builtin::{json_grammar, JSON_EBNF};
pub(crate) use chardfa::{alt2, alts, seq2};
pub(crate) use chardfa::{coreachable, reversed};
pub use chardfa::{CharDfa, CharMove};
pub use ebnf::{parse_ebnf, parse_ebnf_bytes, ParseLimits};
pub(crate) use error::write_located;
pub use error::{GrammarError, GrammarErrorKind};
pub(crate) use members::can_finish;
pub use members::MemberSet;

/// Index of a rule in [`Grammar::rules`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub u32);

impl RuleId {
    /// The index as `usize`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One named rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The rule's name as written.
    pub name: String,
    /// Its body.
    pub body: Expr,
    /// Never inline this rule into its callers, however small: it is shared by design
    /// (the member-set rules of an any-order JSON object), and inlining would multiply
    /// it into every caller. Front-ends set it; it changes no language.
    pub keep: bool,
    /// A stand-in for a part built later (a staged compile's argument schemas, see
    /// `CompileOptions::staged`): its body only marks where the part goes, and a parse
    /// that predicts the rule can no longer be trusted to agree with the finished
    /// grammar (the matcher then moves to it). Front-ends set it with `keep`.
    pub stand_in: bool,
    /// Members written in any order, each at most once: a side condition the matcher
    /// enforces on top of the body (see [`MemberSet`]). The rule and every rule the set
    /// names stay rules.
    pub members: Option<Box<MemberSet>>,
}

impl Rule {
    /// A rule with no flags and no side condition.
    pub fn new(name: impl Into<String>, body: Expr) -> Self {
        Rule { name: name.into(), body, keep: false, stand_in: false, members: None }
    }
}

/// A grammar expression over Unicode scalar values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Expr {
    /// Matches the empty string.
    Empty,
    /// A literal string (UTF-8 text; escapes already decoded).
    Literal(String),
    /// A set of Unicode scalar values: sorted, non-overlapping, non-adjacent inclusive ranges.
    /// An empty set matches nothing.
    Class(Vec<(u32, u32)>),
    /// A reference to another rule.
    Rule(RuleId),
    /// Each element in turn.
    Seq(Vec<Expr>),
    /// Any one of the alternatives.
    Alt(Vec<Expr>),
    /// `min..=max` repetitions (`max == None`: unbounded).
    Repeat {
        /// The repeated expression.
        expr: Box<Expr>,
        /// Minimum count.
        min: u32,
        /// Maximum count, if bounded.
        max: Option<u32>,
    },
    /// The strings every operand matches (intersection), written `a & b`. Operands must
    /// not call rules once the optimizer has inlined what it inlines: the automata
    /// builder takes the product of their automata. The JSON Schema front-end uses it
    /// for a `pattern` under `minLength`/`maxLength` or a `format`.
    And(Vec<Expr>),
    /// A deterministic automaton over characters, kept whole: a structural tag's free
    /// text, which as an expression is many times larger than its automaton. Prints as
    /// the equivalent expression ([`CharDfa::to_expr`]).
    Dfa(std::sync::Arc<CharDfa>),
}

impl Expr {
    /// Number of nodes in the tree (a size measure for inlining and limits).
    pub fn size(&self) -> usize {
        match self {
            Expr::Empty | Expr::Literal(_) | Expr::Class(_) | Expr::Rule(_) => 1,
            Expr::Dfa(d) => d.len() + d.num_moves(),
            Expr::Seq(v) | Expr::Alt(v) | Expr::And(v) => 1 + v.iter().map(Expr::size).sum::<usize>(),
            Expr::Repeat { expr, .. } => 1 + expr.size(),
        }
    }

    /// Number of nodes with bounded repetitions expanded (what the automata builder
    /// sees), saturating.
    pub fn expanded_size(&self) -> u64 {
        match self {
            Expr::Empty | Expr::Literal(_) | Expr::Class(_) | Expr::Rule(_) => 1,
            Expr::Dfa(d) => (d.len() + d.num_moves()) as u64,
            Expr::Seq(v) | Expr::Alt(v) => {
                1 + v.iter().map(Expr::expanded_size).fold(0u64, u64::saturating_add)
            }
            Expr::Repeat { expr, min, max } => {
                1u64.saturating_add(expr.expanded_size().saturating_mul(expanded_copies(*min, *max)))
            }
            // The product automaton may have as many states as the product of sizes.
            Expr::And(v) => v.iter().map(Expr::expanded_size).fold(1u64, u64::saturating_mul),
        }
    }

    /// Calls `f` on every rule this expression references.
    pub fn for_each_rule(&self, f: &mut impl FnMut(RuleId)) {
        match self {
            Expr::Empty | Expr::Literal(_) | Expr::Class(_) | Expr::Dfa(_) => {}
            Expr::Rule(r) => f(*r),
            Expr::Seq(v) | Expr::Alt(v) | Expr::And(v) => v.iter().for_each(|e| e.for_each_rule(f)),
            Expr::Repeat { expr, .. } => expr.for_each_rule(f),
        }
    }

    /// Rewrites every rule reference with `f`.
    pub fn map_rules(&mut self, f: &mut impl FnMut(RuleId) -> Expr) {
        match self {
            Expr::Empty | Expr::Literal(_) | Expr::Class(_) | Expr::Dfa(_) => {}
            Expr::Rule(r) => *self = f(*r),
            Expr::Seq(v) | Expr::Alt(v) | Expr::And(v) => v.iter_mut().for_each(|e| e.map_rules(f)),
            Expr::Repeat { expr, .. } => expr.map_rules(f),
        }
    }
}

/// A context-free grammar: rules plus the root rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grammar {
    /// All rules; [`RuleId`] indexes this list.
    pub rules: Vec<Rule>,
    /// The rule a complete output must match.
    pub root: RuleId,
    /// Texts the grammar writes as markers (a structural tag's `begin`, `end`, triggers):
    /// a special token of the tokenizer whose text occurs in one of them may be produced
    /// where its text is allowed. Models emit `<|python_tag|>` or `[TOOL_CALLS]` as one
    /// special token, never spelled out; elsewhere special tokens stay forbidden.
    pub markers: Vec<String>,
}

impl Grammar {
    /// Appends this grammar's rules to `rules` (names prefixed with `prefix`, rule ids shifted
    /// past the rules already there) and returns a call of its root: how a front-end embeds
    /// a sub-grammar (a JSON schema inside Lark or a structural tag).
    pub(crate) fn append_to(self, rules: &mut Vec<Rule>, prefix: &str) -> Expr {
        let base = rules.len() as u32;
        for mut rule in self.rules {
            rule.name = format!("{prefix}{}", rule.name);
            rule.body.map_rules(&mut |r| Expr::Rule(RuleId(r.0 + base)));
            if let Some(set) = rule.members.as_mut() {
                set.map_rules(&mut |r| Some(RuleId(r.0 + base)));
            }
            rules.push(rule);
        }
        Expr::Rule(RuleId(self.root.0 + base))
    }

    /// The rule with this id.
    pub fn rule(&self, id: RuleId) -> &Rule {
        &self.rules[id.index()]
    }

    /// Looks a rule up by name.
    pub fn rule_id(&self, name: &str) -> Option<RuleId> {
        self.rules.iter().position(|r| r.name == name).map(|i| RuleId(i as u32))
    }

    /// Checks that the root and every rule reference (in bodies and member sets) name a
    /// rule of this grammar, as parsed grammars always do and grammars built in code may
    /// not.
    pub fn check_references(&self) -> Result<(), GrammarError> {
        let n = self.rules.len();
        let undefined =
            |id: RuleId| GrammarError::global(GrammarErrorKind::UndefinedRule(format!("#{}", id.0)));
        if self.root.index() >= n {
            return Err(undefined(self.root));
        }
        for rule in &self.rules {
            let mut bad = None;
            let mut check = |id: RuleId| {
                if id.index() >= n && bad.is_none() {
                    bad = Some(id);
                }
            };
            rule.body.for_each_rule(&mut check);
            if let Some(set) = &rule.members {
                set.for_each_rule(&mut check);
            }
            if let Some(id) = bad {
                return Err(undefined(id));
            }
        }
        Ok(())
    }

    /// Parses EBNF text with root rule `root`; see [`parse_ebnf`].
    pub fn from_ebnf(text: &str) -> Result<Grammar, GrammarError> {
        parse_ebnf(text, "root", &ParseLimits::default())
    }

    /// The builtin ECMA-404 JSON grammar; see [`json_grammar`].
    pub fn builtin_json() -> Grammar {
        json_grammar()
    }
}

/// The copies of a repetition's body that [`Expr::expanded_size`] counts (an unbounded
/// one: `min + 1`).
pub(crate) fn expanded_copies(min: u32, max: Option<u32>) -> u64 {
    max.unwrap_or(min.saturating_add(1)).max(min).max(1) as u64
}
