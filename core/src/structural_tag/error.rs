//! [`StructuralTagError`]: what went wrong, and the JSON pointer of where.

use crate::grammar::GrammarError;
use crate::json_schema::SchemaError;
use crate::regex::RegexError;
use std::fmt;

/// A structural tag that could not be converted, with the JSON pointer (RFC 6901) of the
/// value at fault in the structural tag document (`""`: the document itself).
#[derive(Debug, Clone, PartialEq)]
pub struct StructuralTagError {
    /// What went wrong.
    pub kind: StructuralTagErrorKind,
    /// JSON pointer to the value at fault.
    pub pointer: String,
}

/// The kinds of [`StructuralTagError`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StructuralTagErrorKind {
    /// The text is not JSON.
    InvalidJson {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A format `type` that XGrammar's structural tags do not define.
    UnknownFormat(String),
    /// A required field is absent.
    MissingField(String),
    /// A field the format does not define (a misspelling, usually).
    UnknownField(String),
    /// A value of the wrong JSON type.
    WrongType {
        /// What the field must be.
        expected: &'static str,
    },
    /// A value of the right type that is not allowed (an empty `elements` list,
    /// `min > max`, …).
    InvalidValue(String),
    /// `triggers` is empty.
    EmptyTriggers,
    /// One trigger is a prefix of another, so a text could start two tags at once.
    TriggerIsPrefix {
        /// The shorter trigger.
        trigger: String,
        /// The trigger it is a prefix of.
        of: String,
    },
    /// A tag's `begin` starts with none of the triggers: it could never be entered.
    TagWithoutTrigger {
        /// The tag's `begin`.
        begin: String,
    },
    /// A trigger that begins no tag (it could only make the text fail).
    TriggerWithoutTag {
        /// The trigger.
        trigger: String,
    },
    /// A tag's content is free text but every `end` string is empty: nothing would end it.
    UnlimitedContentWithoutEnd,
    /// Valid in XGrammar, not supported by grammask (yet): the format, field or value,
    /// and why.
    Unsupported {
        /// The format, field or value.
        what: String,
        /// Why, and what to use instead where there is something.
        detail: String,
    },
    /// An embedded JSON Schema could not be converted; the error keeps its own pointer
    /// inside the schema.
    Schema(SchemaError),
    /// An embedded regex could not be converted (the error keeps its byte offset).
    Regex(RegexError),
    /// An embedded EBNF grammar could not be parsed (the error keeps line and column).
    Grammar(GrammarError),
    /// A size limit was exceeded.
    Limit {
        /// What was measured.
        what: &'static str,
        /// The size reached.
        given: usize,
        /// The limit.
        limit: usize,
    },
}

impl fmt::Display for StructuralTagErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidJson { line, column, message } => {
                write!(f, "invalid JSON at {line}:{column}: {message}")
            }
            Self::UnknownFormat(t) => write!(f, "unknown format type `{t}`"),
            Self::MissingField(n) => write!(f, "missing field `{n}`"),
            Self::UnknownField(n) => write!(f, "unknown field `{n}`"),
            Self::WrongType { expected } => write!(f, "expected {expected}"),
            Self::InvalidValue(s) => write!(f, "invalid value: {s}"),
            Self::EmptyTriggers => write!(f, "`triggers` must not be empty"),
            Self::TriggerIsPrefix { trigger, of } => {
                write!(f, "trigger {trigger:?} is a prefix of trigger {of:?}")
            }
            Self::TagWithoutTrigger { begin } => write!(f, "tag begin {begin:?} starts with no trigger"),
            Self::TriggerWithoutTag { trigger } => write!(f, "trigger {trigger:?} begins no tag"),
            Self::UnlimitedContentWithoutEnd => {
                write!(f, "the tag's content is free text, so at least one `end` string must be non-empty")
            }
            Self::Unsupported { what, detail } => write!(f, "{what} is not supported yet: {detail}"),
            Self::Schema(e) => write!(f, "{e}"),
            Self::Regex(e) => write!(f, "{e}"),
            Self::Grammar(e) => write!(f, "grammar {e}"),
            Self::Limit { what, given, limit } => write!(f, "{what} is {given}, over the limit of {limit}"),
        }
    }
}

impl fmt::Display for StructuralTagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() { "#" } else { &self.pointer };
        write!(f, "structural tag at `{at}`: {}", self.kind)
    }
}

impl std::error::Error for StructuralTagError {}

impl StructuralTagError {
    pub(crate) fn new(pointer: &str, kind: StructuralTagErrorKind) -> Self {
        Self { kind, pointer: pointer.to_string() }
    }
}

/// `pointer/token`, escaped as RFC 6901 requires.
pub(crate) fn child(pointer: &str, token: &str) -> String {
    // Written out rather than formatted: a tag's parse builds a pointer for every node
    // (formatting them was 3 % of a 20-tool tag's compile).
    let token = crate::json_schema::resolve::escape_token(token);
    let mut out = String::with_capacity(pointer.len() + 1 + token.len());
    out.push_str(pointer);
    out.push('/');
    out.push_str(&token);
    out
}

#[cfg(test)]
mod tests {
    use super::child;

    #[test]
    fn a_child_pointer_escapes_its_token() {
        assert_eq!(child("", "format"), "/format");
        assert_eq!(child("/format/tags", "0"), "/format/tags/0");
        assert_eq!(child("/a", "b/c~d"), "/a/b~1c~0d");
        assert_eq!(child("/a", "~1"), "/a/~01");
        assert_eq!(child("/a", ""), "/a/");
    }
}
