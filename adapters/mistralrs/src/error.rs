//! Errors: at request-build time ([`Error`]) and inside the sampler ([`ProcessorError`]).

/// An error building a constrained request or loading a model's vocabulary. Everything that
/// can be checked before the request reaches mistral.rs is checked here, so that a bad
/// schema or grammar never surfaces as a failure inside the engine.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The constraint does not compile (bad schema, regex, Lark or EBNF; a limit exceeded):
    /// the message carries grammask's JSON pointer or line:column.
    #[error("constraint: {0}")]
    Compile(Box<grammask::Error>),
    /// The constraint is well-formed but has no grammask equivalent.
    #[error("unsupported constraint: {0}")]
    Unsupported(String),
    /// A model file (tokenizer, config) is missing or malformed.
    #[error("{path}: {what}")]
    ModelFile {
        /// The file.
        path: String,
        /// What is wrong.
        what: String,
    },
}

impl From<grammask::Error> for Error {
    fn from(e: grammask::Error) -> Self {
        Error::Compile(Box::new(e))
    }
}

/// An error inside [`GrammaskProcessor::apply`](crate::GrammaskProcessor): mistral.rs
/// reports it for the sequence that hit it (the request's other sequences go on).
#[derive(Debug, thiserror::Error)]
pub enum ProcessorError {
    /// The context does not start with the prompt this processor saw first: the processor
    /// was shared between requests, or the engine rewrote the prompt.
    #[error("the context differs from this request's prompt at token {at} (prompt length {prompt_len}); use one processor per request")]
    PromptMismatch {
        /// First differing position.
        at: usize,
        /// Length of the prompt the processor saw first.
        prompt_len: usize,
    },
    /// The context that was just served by taking tokens back came again: mistral.rs's
    /// speculative pipeline verifies draft rows this way (every verified row gets the same
    /// context), so no correct mask exists for the later rows.
    #[error("the context after {generated} generated tokens came again right after it was reached by taking tokens back: the caller asks for a position the context does not describe (mistral.rs's speculative decoding verifies draft rows this way; run grammask without a draft model)")]
    RepeatedContext {
        /// Generated tokens in the context.
        generated: usize,
    },
    /// More sequences called at once than the processor was built for.
    #[error("more than {sequences} sequences share this processor")]
    TooManySequences {
        /// Sequences the processor was built for.
        sequences: usize,
    },
    /// A generated token is not allowed by the grammar at its position (sampled without the
    /// mask, or by another processor).
    #[error("generated token {position} (id {token}) is rejected by the grammar: {source}")]
    TokenRejected {
        /// Position among the generated tokens.
        position: usize,
        /// The token id.
        token: u32,
        /// grammask's reason.
        source: Box<grammask::Error>,
    },
    /// No token is allowed: the request's stop ids cover every continuation the grammar
    /// has, or the vocabulary has no stop token for a finished grammar.
    #[error("no token is allowed after {generated} generated tokens (the request's stop ids cover every continuation, or the vocabulary has no stop token)")]
    NothingAllowed {
        /// Generated tokens in the context.
        generated: usize,
    },
    /// A grammar error while filling or rolling back.
    #[error("grammar: {0}")]
    Grammar(Box<grammask::Error>),
    /// The logits tensor is not what mistral.rs documents (CPU, f32, at least one logit per
    /// token of the vocabulary).
    #[error("logits: {0}")]
    Logits(String),
    /// An invariant of the slot table failed (a bug: please report it).
    #[error("internal: {0}")]
    Internal(&'static str),
}
