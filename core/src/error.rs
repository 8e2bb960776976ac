//! Error types.
//!
//! Every fallible operation in grammask returns [`Error`]. Grammar text errors carry a
//! line and column ([`GrammarError`]); limit errors carry the value that was given and the
//! limit it broke, so a caller can decide whether to raise the limit.

use std::fmt;

/// Everything that can go wrong in grammask.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The grammar text is malformed (syntax, undefined rule, …).
    #[error(transparent)]
    Grammar(#[from] GrammarError),
    /// A JSON Schema could not be converted (the error carries the JSON pointer).
    #[error(transparent)]
    Schema(#[from] crate::json_schema::SchemaError),
    /// A regex could not be converted (the error carries the byte offset).
    #[error(transparent)]
    Regex(#[from] crate::regex::RegexError),
    /// A structural tag could not be converted (the error carries the JSON pointer, and
    /// the embedded schema's, regex's or grammar's own location).
    #[error(transparent)]
    StructuralTag(#[from] crate::structural_tag::StructuralTagError),
    /// A Lark grammar could not be converted (the error carries line and column).
    #[error(transparent)]
    Lark(#[from] crate::lark::LarkError),
    /// The tokenizer could not be loaded or decoded.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A size limit was exceeded while compiling.
    #[error("{what} is {given}, over the limit of {limit}")]
    Limit {
        /// What was measured.
        what: &'static str,
        /// The size that was reached.
        given: usize,
        /// The configured limit.
        limit: usize,
    },
    /// A token id outside the model's vocabulary.
    #[error("token id {id} is out of range (vocabulary size {vocab_size})")]
    InvalidTokenId {
        /// The offending id.
        id: u32,
        /// The model's vocabulary size.
        vocab_size: usize,
    },
    /// The grammar does not allow this token here. The matcher's state is unchanged.
    #[error("token {id} is not allowed by the grammar here")]
    TokenRejected {
        /// The rejected id.
        id: u32,
    },
    /// Bytes (from `accept_bytes` / `accept_string`) are not allowed here; state unchanged.
    #[error("the grammar rejects byte {offset} of the input")]
    BytesRejected {
        /// Offset of the first byte that did not fit.
        offset: usize,
    },
    /// `accept_tokens` took none of a chain: the grammar rejects the id at `index`.
    #[error("token {id} at index {index} of the chain is not allowed by the grammar; nothing was accepted")]
    TokensRejected {
        /// Position of the first rejected id in the chain.
        index: usize,
        /// The rejected id.
        id: u32,
    },
    /// A draft tree is malformed (cycle, link out of range, unreachable node, …).
    #[error("draft tree, node {node}: {why}")]
    DraftTree {
        /// The node where the fault was found.
        node: usize,
        /// What is wrong.
        why: String,
    },
    /// The matcher accepted a stop token already; only `rollback` or `reset` can continue.
    #[error("the matcher is terminated: it accepted a stop token")]
    Terminated,
    /// `rollback(n)` asked for more tokens than were accepted.
    #[error("cannot roll back {requested} tokens: only {available} were accepted")]
    Rollback {
        /// Tokens asked for.
        requested: usize,
        /// Tokens in the history.
        available: usize,
    },
    /// The finished grammar of a staged compile (see
    /// [`CompileOptions::staged`](crate::CompileOptions::staged)) could not be built: a
    /// limit its argument schemas' automata exceed, found after the first masks. Every
    /// matcher of the compile reports it once it needs that grammar.
    #[error("building the grammar of the tool arguments failed: {0}")]
    Staged(std::sync::Arc<Error>),
    /// A bitmask row passed to a matcher has the wrong length.
    #[error("shape mismatch: {0}")]
    Shape(String),
    /// Applying a bitmask to logits failed (shape, stride, index or dtype).
    #[error(transparent)]
    Bitmask(#[from] crate::bitmask::ApplyError),
    /// Bytes given to [`CompiledGrammar::from_bytes`](crate::CompiledGrammar::from_bytes)
    /// are not a compiled grammar this build can load (corrupt, truncated, another
    /// version, another tokenizer).
    #[error("compiled grammar bytes, offset {offset}: {what}")]
    Format {
        /// Where in the bytes the fault was found.
        offset: usize,
        /// What is wrong.
        what: String,
    },
    /// A GGUF model file is malformed or has no usable tokenizer.
    #[error("GGUF file, offset {offset}: {what}")]
    Gguf {
        /// Byte offset of the fault in the file.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// An I/O error reading a file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// A `Result` with grammask's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

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
    /// A rule's [`MemberSet`](crate::grammar::MemberSet) does not fit its body.
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
