//! Error types.
//!
//! Every fallible operation in grammask returns [`Error`]. Grammar text errors carry a
//! line and column ([`GrammarError`]); limit errors carry the value that was given and the
//! limit it broke, so a caller can decide whether to raise the limit.

use crate::automata::AutomataError;
use crate::compiler::CompileError;
use crate::grammar::GrammarError;
use crate::tokenizer::TokenizerError;

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
    /// A compile's work budget ran out ([`CompileOptions::work_limit`](crate::CompileOptions::work_limit)),
    /// or it was cancelled or ran past its deadline ([`CompileControl`](crate::CompileControl)).
    /// Only [`BudgetError::Exceeded`](crate::budget::BudgetError::Exceeded) is a verdict on
    /// the input; the others belong to the attempt.
    #[error(transparent)]
    Budget(#[from] crate::budget::BudgetError),
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
    /// The error of a compile made once for several callers at the same time (single
    /// flight: see [`GrammarCompiler::compile_with`](crate::GrammarCompiler::compile_with)),
    /// as each of them gets it. [`Error::root`] looks through it.
    #[error("{0}")]
    Shared(std::sync::Arc<Error>),
    /// A call panicked (a bug) and the panic was caught where one row's work could be
    /// failed alone ([`BatchFiller`](crate::batch::BatchFiller)): that row's result.
    #[error("internal error (a panic, caught): {0}")]
    Panicked(String),
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

// Conversions upward: each layer below keeps its own error type, and a fault reaches the
// caller as the same `Error` variant (and message) it always had.

impl Error {
    /// The error itself, looking through [`Error::Shared`] (a compile made once for
    /// several callers): what to match on.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use grammask::{budget::{BudgetError, Phase}, Error};
    /// let e = Error::Shared(Arc::new(Error::Budget(BudgetError::Cancelled { phase: Phase::Nfa })));
    /// assert!(matches!(e.root(), Error::Budget(BudgetError::Cancelled { .. })));
    /// ```
    pub fn root(&self) -> &Error {
        match self {
            Error::Shared(e) => e.root(),
            e => e,
        }
    }
}

impl From<AutomataError> for Error {
    fn from(e: AutomataError) -> Self {
        match e {
            AutomataError::Grammar(e) => Error::Grammar(e),
            AutomataError::Limit { what, given, limit } => Error::Limit { what, given, limit },
            AutomataError::Budget(e) => Error::Budget(e),
        }
    }
}

impl From<TokenizerError> for Error {
    fn from(e: TokenizerError) -> Self {
        match e {
            TokenizerError::Load(why) => Error::Tokenizer(why),
            TokenizerError::Gguf { offset, what } => Error::Gguf { offset, what },
            TokenizerError::Limit { what, given, limit } => Error::Limit { what, given, limit },
            TokenizerError::InvalidTokenId { id, vocab_size } => Error::InvalidTokenId { id, vocab_size },
            TokenizerError::Io { path, source } => Error::Io { path, source },
        }
    }
}

impl From<CompileError> for Error {
    fn from(e: CompileError) -> Self {
        match e {
            CompileError::Format { offset, what } => Error::Format { offset, what },
            CompileError::Automata(e) => e.into(),
            CompileError::Io { path, source } => Error::Io { path, source },
        }
    }
}
