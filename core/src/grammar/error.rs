//! The grammar IR's error: a fault in grammar text, with its line and column.
//!
//! The text front-ends (EBNF here, Lark, structural tags) share [`write_located`] so that
//! every located message reads the same way.

use std::fmt;

/// An error in grammar text, pointing at a line and column (both 1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrammarError {
    /// What went wrong.
    pub kind: GrammarErrorKind,
    /// 1-based line of the fault (0 when the error concerns the whole grammar).
    pub line: usize,
    /// 1-based column in characters (0 when the error concerns the whole grammar).
    pub column: usize,
    /// The text of the faulty line, for display with a caret.
    pub line_text: String,
}

/// The kinds of [`GrammarError`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GrammarErrorKind {
    /// Something other than what the grammar syntax allows here.
    Expected {
        /// What the parser expected.
        expected: String,
        /// What it found.
        found: String,
    },
    /// A rule is referenced but never defined.
    UndefinedRule(String),
    /// A rule is defined twice.
    DuplicateRule(String),
    /// The grammar has no rule named like the root.
    NoRootRule(String),
    /// An escape sequence is malformed or names no Unicode scalar value.
    BadEscape(String),
    /// A character class range is reversed (`[z-a]`).
    BadRange(String),
    /// A repetition bound is malformed (`{3,1}`) or too large.
    BadRepetition(String),
    /// Nesting deeper than the parser allows (protects the stack).
    TooDeep(usize),
    /// The grammar text is not UTF-8.
    NotUtf8 {
        /// Byte offset of the first invalid byte.
        offset: usize,
    },
    /// The root rule (after removing rules that can never finish) matches nothing.
    EmptyLanguage,
    /// An operand of an intersection (`a & b`) in this rule still calls a rule after
    /// inlining: intersections are built over rule-free expressions.
    IntersectionCallsRule(String),
    /// A rule's [`MemberSet`](super::MemberSet) does not fit its body.
    BadMemberSet {
        /// The rule.
        rule: String,
        /// What does not fit.
        why: String,
    },
}

impl fmt::Display for GrammarErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Expected { expected, found } => write!(f, "expected {expected}, found {found}"),
            Self::UndefinedRule(n) => write!(f, "rule `{n}` is used but never defined"),
            Self::DuplicateRule(n) => write!(f, "rule `{n}` is defined more than once"),
            Self::NoRootRule(n) => write!(f, "the grammar has no root rule `{n}`"),
            Self::BadEscape(e) => write!(f, "invalid escape sequence {e}"),
            Self::BadRange(r) => write!(f, "invalid character range {r}"),
            Self::BadRepetition(r) => write!(f, "invalid repetition {r}"),
            Self::TooDeep(d) => write!(f, "nesting deeper than {d} levels"),
            Self::NotUtf8 { offset } => write!(f, "grammar is not valid UTF-8 (byte offset {offset})"),
            Self::EmptyLanguage => write!(f, "the root rule can never match a complete string"),
            Self::IntersectionCallsRule(r) => write!(
                f,
                "rule `{r}`: an operand of `&` calls a rule (intersections need rule-free operands)"
            ),
            Self::BadMemberSet { rule, why } => write!(f, "rule `{rule}`: member set: {why}"),
        }
    }
}

impl fmt::Display for GrammarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_located(f, "grammar", self.line, self.column, &self.line_text, &self.kind)
    }
}

/// `line:column: message`, then the line and a caret under the fault; `what: message` when
/// the fault has no position (line 0). Shared by the text front-ends' errors.
pub(crate) fn write_located(
    f: &mut fmt::Formatter<'_>,
    what: &str,
    line: usize,
    column: usize,
    line_text: &str,
    message: &dyn fmt::Display,
) -> fmt::Result {
    if line == 0 {
        return write!(f, "{what}: {message}");
    }
    write!(f, "{line}:{column}: {message}")?;
    if !line_text.is_empty() {
        // Tabs stay tabs so that the caret lines up however the terminal expands them.
        let pad: String = line_text
            .chars()
            .take(column.saturating_sub(1))
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        write!(f, "\n  {line_text}\n  {pad}^")?;
    }
    Ok(())
}

impl std::error::Error for GrammarError {}

impl GrammarError {
    /// An error about the grammar as a whole (no position).
    pub fn global(kind: GrammarErrorKind) -> Self {
        Self { kind, line: 0, column: 0, line_text: String::new() }
    }
}
