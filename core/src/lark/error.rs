//! [`LarkError`]: what went wrong, and the line and column of where.

use crate::json_schema::SchemaError;
use std::fmt;

/// A Lark grammar that could not be converted, pointing at a line and column (both
/// 1-based; 0 when the error concerns the grammar as a whole, such as a missing `start`).
#[derive(Debug, Clone, PartialEq)]
pub struct LarkError {
    /// What went wrong.
    pub kind: LarkErrorKind,
    /// 1-based line of the fault (0: the whole grammar).
    pub line: usize,
    /// 1-based column, in characters (0: the whole grammar).
    pub column: usize,
    /// The text of the faulty line, for display with a caret.
    pub line_text: String,
}

/// The kinds of [`LarkError`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LarkErrorKind {
    /// Text that no Lark token starts with (a stray `$`, an unterminated string).
    BadToken(String),
    /// Something other than what the grammar syntax allows here.
    Expected {
        /// What the parser expected.
        expected: String,
        /// What it found.
        found: String,
    },
    /// A `%` directive Lark does not have.
    UnknownDirective(String),
    /// A name used in a rule or terminal that no rule, terminal or import defines.
    UndefinedName(String),
    /// A rule or terminal defined twice (an import counts as a definition).
    DuplicateName(String),
    /// The grammar has no `start` rule.
    NoStartRule,
    /// `%import` of something other than a `common` terminal.
    UnknownImport(String),
    /// A string literal with a malformed escape or a lone surrogate.
    BadString(String),
    /// A `"a".."z"` range whose ends are not single characters, or are reversed.
    BadRange(String),
    /// A repetition whose bounds are malformed (`{3,1}`, `{0}`, negative) or over the
    /// limit.
    BadRepetition(String),
    /// A `/regex/` that Rust's `regex` syntax (llguidance's dialect) rejects, or that
    /// uses something a grammar cannot express (anchors, word boundaries).
    BadRegex {
        /// The pattern as written between the slashes.
        pattern: String,
        /// Why.
        message: String,
    },
    /// A terminal that refers to itself, directly or through other terminals:
    /// terminals are regular expressions.
    RecursiveTerminal(String),
    /// Something only rules may contain, used in a terminal (a rule name, `%json`).
    NotInTerminal(String),
    /// A `&` (intersection) in a rule: llguidance allows it in terminals only.
    AndInRule,
    /// The JSON after `%json`, `%llguidance` or `%regex` is not JSON, or not the shape
    /// the directive takes.
    BadJson(String),
    /// The schema after `%json` could not be converted (with the schema's pointer;
    /// boxed to keep [`crate::Error`] small).
    Schema(Box<SchemaError>),
    /// Valid llguidance syntax whose meaning grammask cannot express: special tokens,
    /// token ranges, lazy terminals, negation, … (the message says which, and why).
    Unsupported(String),
    /// Nesting deeper than the parser allows (protects the stack).
    TooDeep(usize),
    /// A size limit was exceeded.
    TooLarge {
        /// What was measured.
        what: &'static str,
        /// The size reached.
        given: usize,
        /// The limit.
        limit: usize,
    },
}

impl fmt::Display for LarkErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadToken(t) => write!(f, "unexpected text {t}"),
            Self::Expected { expected, found } => write!(f, "expected {expected}, found {found}"),
            Self::UnknownDirective(d) => write!(f, "unknown directive {d}"),
            Self::UndefinedName(n) => write!(f, "`{n}` is used but never defined"),
            Self::DuplicateName(n) => write!(f, "`{n}` is defined more than once"),
            Self::NoStartRule => write!(f, "the grammar has no `start` rule"),
            Self::UnknownImport(p) => write!(
                f,
                "cannot import `{p}`: only terminals of `common` are available ({})",
                super::common::names().join(", ")
            ),
            Self::BadString(s) => write!(f, "invalid string literal {s}"),
            Self::BadRange(r) => write!(f, "invalid character range {r}"),
            Self::BadRepetition(r) => write!(f, "invalid repetition {r}"),
            Self::BadRegex { pattern, message } => write!(f, "invalid regex /{pattern}/: {message}"),
            Self::RecursiveTerminal(n) => {
                write!(f, "terminal `{n}` refers to itself (terminals are regular expressions)")
            }
            Self::NotInTerminal(what) => write!(f, "{what} cannot be used in a terminal"),
            Self::AndInRule => {
                write!(f, "`&` is only supported in terminals, not rules (rename the rule to UPPERCASE)")
            }
            Self::BadJson(m) => write!(f, "invalid JSON: {m}"),
            Self::Schema(e) => write!(f, "%json schema: {e}"),
            Self::Unsupported(what) => write!(f, "not supported: {what}"),
            Self::TooDeep(d) => write!(f, "nesting deeper than {d} levels"),
            Self::TooLarge { what, given, limit } => {
                write!(f, "{what} is {given}, over the limit of {limit}")
            }
        }
    }
}

impl fmt::Display for LarkError {
    /// `line:column: message`, then the line and a caret under the fault.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::grammar::write_located(f, "lark grammar", self.line, self.column, &self.line_text, &self.kind)
    }
}

impl std::error::Error for LarkError {}

impl LarkError {
    /// An error at byte offset `at` of `src` (clamped to the text, and to a character
    /// boundary).
    pub(crate) fn at(src: &str, at: usize, kind: LarkErrorKind) -> Self {
        let mut at = at.min(src.len());
        while !src.is_char_boundary(at) {
            at -= 1;
        }
        let before = &src[..at];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = src[line_start..at].chars().count() + 1;
        let line_end = src[line_start..].find('\n').map_or(src.len(), |i| line_start + i);
        let line_text = src[line_start..line_end].trim_end_matches('\r').to_string();
        LarkError { kind, line, column, line_text }
    }

    /// An error about the grammar as a whole (no position).
    pub(crate) fn global(kind: LarkErrorKind) -> Self {
        LarkError { kind, line: 0, column: 0, line_text: String::new() }
    }
}
