//! The tokenizer layer's error: a tokenizer file that cannot be read, parsed or used.

/// Why a [`TokenizerInfo`](super::TokenizerInfo) or [`GgufTokenizer`](super::GgufTokenizer)
/// could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// The tokenizer could not be loaded or decoded.
    #[error("tokenizer: {0}")]
    Load(String),
    /// A GGUF model file is malformed or has no usable tokenizer.
    #[error("GGUF file, offset {offset}: {what}")]
    Gguf {
        /// Byte offset of the fault in the file.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// A size limit was exceeded (the vocabulary or its bytes do not fit 32-bit ids).
    #[error("{what} is {given}, over the limit of {limit}")]
    Limit {
        /// What was measured.
        what: &'static str,
        /// The size that was reached.
        given: usize,
        /// The limit.
        limit: usize,
    },
    /// A configured token id (a stop token) outside the vocabulary.
    #[error("token id {id} is out of range (vocabulary size {vocab_size})")]
    InvalidTokenId {
        /// The offending id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
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
