//! Lark grammars, in the dialect llguidance accepts (what mistral.rs's
//! `Constraint::Lark` passes on) → grammar IR.
//!
//! ```text
//! Lark text ──lex──▶ tokens ──parse──▶ syntax tree (rules, terminals, statements)
//!           ──lower──▶ Grammar: one rule per reachable rule and terminal, %ignore as a
//!                      rule before each lexeme, %json schemas' rules embedded
//! ```
//!
//! The contract is llguidance's `docs/syntax.md` and what llguidance does with a grammar
//! (its answers on 70 grammars are pinned in `core/tests/integration/lark.rs`). This module is
//! written from those, not from their code.
//!
//! # Syntax
//! | form | meaning |
//! |---|---|
//! | `name: expr` (lowercase) | a rule; `?name` / `!name` are `name` (Lark tree shaping) |
//! | `NAME: expr` (uppercase) | a terminal: a regular expression, matched as one lexeme |
//! | `a b`, `a \| b`, `( )` | sequence, alternatives, grouping; a line starting with `\|` continues the definition |
//! | `[a]`, `a?`, `a*`, `a+` | optional, repetitions |
//! | `a{n}`, `a{n,}`, `a{,m}`, `a{n,m}`, `a ~ n..m` | bounded repetition, for rules and terminals |
//! | `"…"`, `"…"i` | a string (JSON escapes and `\xHH`); `i`: case-insensitive |
//! | `/…/flags` | a regex in Rust's `regex` syntax, flags `imsux` |
//! | `"a".."z"` | a character range |
//! | `A & B` | intersection (terminals only) |
//! | `%ignore expr` | what may be skipped between lexemes (several are alternatives) |
//! | `%import common.NAME [-> ALIAS]`, `%import common (A, B)` | terminals of Lark's `common.lark` |
//! | `%json {schema}` | a JSON value the schema accepts (via [`crate::json_schema`]) |
//! | `%regex {"substring_chunks": […]}` (`_words`, `_chars`) | any contiguous run of the chunks |
//! | `%llguidance {…}` | options: `ignore_once`, `allow_initial_skip` (others have no language meaning) |
//! | `name[capture]`, `[temperature=…]`, `-> alias` | accepted; no language meaning (a rule with `temperature` is one lexeme, as in llguidance) |
//! | `//`, `#` | comments |
//!
//! `start` is the root. Names may contain `-`.
//!
//! # Lexemes and `%ignore`
//! llguidance parses text in two layers: a lexer cuts it into lexemes (every string,
//! regex and terminal that a *rule* uses is one), and skips `%ignore` text wherever a
//! lexeme may come next: between two lexemes, and after the last one if the grammar
//! could have gone on with another — never inside a terminal, never before the first
//! lexeme (unless `%llguidance {"allow_initial_skip": true}`), never before a `%json`
//! value. So with `%ignore " "`, `start: "a" "b"` accepts `a b` and `ab` but not ` ab`
//! nor `ab ` (nothing can follow `b`), while `start: "a"+` accepts `a a ` (another `a`
//! could follow); `WORD: "a" "b"` accepts only `ab`, and a lowercase `word: "a" "b"`
//! accepts `a  b`. Under `"ignore_once"` each skip is one match of the `%ignore`
//! expression (`%ignore /[ \t]{1,8}/` bounds each gap) instead of any number of them.
//!
//! grammask has no lexer: each lexeme becomes `Ignore T` in the grammar; the root is
//! rewritten so that the first lexeme has no `Ignore` before it (`First_…` copies of
//! the rules that can begin the text), and so that the text may end with a skip when its
//! last lexeme is a terminal that a lexeme can follow somewhere in the grammar
//! (`Last_…` copies). That last condition is per terminal, where llguidance's is per
//! text: `start: "a" "b" | "b" "c"` accepts `a b ` here (a `b` can be followed, by `c`)
//! and not in llguidance (after `a b` nothing can). It only ever accepts more.
//!
//! # The main difference from llguidance: greedy lexing
//! llguidance's lexer is greedy: a lexeme goes on as long as the next byte can continue
//! any lexeme allowed at that point, and only then ends. grammask's grammar lets a
//! terminal end anywhere its language allows. So grammask accepts every text
//! llguidance accepts, and also texts that parse only by ending a lexeme early:
//! - `start: A A` with `A: /a+/` accepts `aa` here and nothing in llguidance (the first
//!   `A` takes every `a`);
//! - `start: NUMBER "." NUMBER` (`%import common.NUMBER`) accepts `1.5` here; llguidance
//!   reads `1.5` as one `NUMBER` and then finds no `.`;
//! - `start: "a" "b" | "ab" "c"` accepts `ab` here; llguidance's lexer reads `ab` as
//!   one lexeme and then wants `c`.
//!
//! Grammars whose lexemes are delimited (a keyword, then a space or a symbol; JSON; the
//! grammars in llguidance's docs) have the same language in both. Where several
//! terminals match the same longest text, llguidance keeps every reading, as the
//! grammar does here. With the trailing-skip rule above, this is the whole story: every
//! text llguidance accepts, grammask accepts (the tests check 230 texts on 70 grammars
//! against llguidance 1.9.1).
//!
//! # Not supported (typed errors, never silent acceptance)
//! Each is a [`LarkErrorKind::Unsupported`] error pointing at the construct:
//! - special tokens `<|eot_id|>` and token ids or ranges `<[128010]>`, `<[*]>`:
//!   grammask's grammars match text, never token ids;
//! - `lazy`, `stop=…`, `suffix=…` (the shortest match of a terminal, or text hidden from
//!   the model) and `max_tokens=…` (counts LLM tokens); `max_tokens=0` is supported (the
//!   empty string, as in llguidance);
//! - negation `~A` in terminals (the IR has no complement);
//! - `@grammar` references, nested `%lark {…}`, parametric rules (`name::_`, `%if`);
//! - what llguidance rejects too: `%override`, `%declare`, templates, priorities.
//!
//! Regex anchors: `^` at the start and `$` at the end of a regex are accepted (a lexeme
//! is matched whole); elsewhere, and `\b`, they are errors, as in llguidance.
//!
//! # `%json`
//! llguidance's JSON defaults: any JSON whitespace between the value's tokens (none
//! before or after it), members in the schema's `properties` order, undeclared members
//! allowed (after the declared ones) unless `additionalProperties` says otherwise —
//! [`Whitespace::Any`](crate::json_schema::Whitespace::Any) unbounded,
//! [`PropertyOrder::Schema`](crate::json_schema::PropertyOrder::Schema), `strict: false`.
//! A schema error is a [`LarkErrorKind::Schema`] at the `%json`'s position, carrying the
//! schema's own JSON pointer.
//!
//! # Errors and input safety
//! Every error is a [`LarkError`] with line and column. Only what `start` reaches is
//! lowered (an undefined name in an unused rule is no error, as in llguidance); syntax
//! is checked everywhere. [`LarkLimits`] bounds the text size, nesting (the parser and
//! chains of terminals are recursive), repetition counts, the size of each terminal's
//! expression (inlining terminals into terminals can grow exponentially) and the number
//! of rules; each breach is an error, never a panic or a hang.
//!
//! ```
//! use std::sync::Arc;
//! use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, TokenizerInfo, TokenizerOptions};
//! use grammask::lark::lark_to_grammar;
//! let lark = r#"
//! start: "call " NAME "(" [arg ("," arg)*] ")"
//! arg: NUMBER | ESCAPED_STRING
//! NAME: /[a-z_]+/
//! %import common.NUMBER
//! %import common.ESCAPED_STRING
//! %ignore " "
//! "#;
//! let bytes: Vec<Vec<u8>> = (1u8..128).map(|b| vec![b]).collect();
//! let tok = TokenizerInfo::from_byte_tokens(bytes, &TokenizerOptions::default())?;
//! let compiled = GrammarCompiler::new(Arc::new(tok)).compile(&GrammarSpec::Lark(lark.into()))?;
//! let mut m = GrammarMatcher::new(compiled.clone());
//! m.accept_string(r#"call f(1, "x" ,2.5)"#)?;
//! assert!(m.can_terminate());
//! // Nothing is skipped inside a terminal, nor before the first lexeme.
//! assert!(GrammarMatcher::new(compiled.clone()).accept_string("call f o()").is_err());
//! assert!(GrammarMatcher::new(compiled).accept_string(" call f()").is_err());
//! // Errors point into the text.
//! let err = lark_to_grammar("start: a\na: \"x\" B\n").unwrap_err();
//! assert_eq!((err.line, err.column), (2, 8));
//! assert_eq!(err.to_string(), "2:8: `B` is used but never defined\n  a: \"x\" B\n         ^");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod common;
mod error;
mod lex;
mod lower;
mod parse;
mod rx;

pub use error::{LarkError, LarkErrorKind};

use crate::grammar::Grammar;

/// Bounds that keep hostile grammar text cheap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LarkLimits {
    /// Longest grammar text, in bytes (default 4 MiB).
    pub max_input_bytes: usize,
    /// Deepest nesting of parentheses and brackets in one definition, and longest chain
    /// of terminals naming terminals (default 50; llguidance allows about 30). Each
    /// level costs a few stack frames.
    pub max_nesting: usize,
    /// Largest repetition bound in `{n,m}` or `~ n..m` (default 10,000): bounded
    /// repetition is unrolled by the automata stage.
    pub max_repeat: u32,
    /// Largest expression for one terminal, in IR nodes with bounded repetitions
    /// expanded (default 100,000; each node costs a few NFA states later).
    pub max_terminal_size: usize,
    /// Most rules in the result, embedded `%json` schemas included (default 100,000).
    pub max_rules: usize,
}

impl Default for LarkLimits {
    fn default() -> Self {
        Self {
            max_input_bytes: 4 << 20,
            max_nesting: 50,
            max_repeat: 10_000,
            max_terminal_size: 100_000,
            max_rules: 100_000,
        }
    }
}

/// Converts a Lark grammar (llguidance's dialect) to a grammar whose root generates
/// exactly the texts it accepts, except for the greedy-lexing difference described in
/// the [module docs](self).
pub fn lark_to_grammar(text: &str) -> Result<Grammar, LarkError> {
    lark_to_grammar_with(text, &LarkLimits::default())
}

/// [`lark_to_grammar`] with explicit limits.
pub fn lark_to_grammar_with(text: &str, limits: &LarkLimits) -> Result<Grammar, LarkError> {
    if text.len() > limits.max_input_bytes {
        return Err(LarkError::global(LarkErrorKind::TooLarge {
            what: "grammar text (bytes)",
            given: text.len(),
            limit: limits.max_input_bytes,
        }));
    }
    let tokens = lex::lex(text)?;
    let ast = parse::Parser::new(text, tokens, limits.max_nesting, limits.max_repeat).parse()?;
    lower::lower(text, ast, limits)
}
