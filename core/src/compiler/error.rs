//! The compiler's own error: faults it finds itself, below the front-ends (whose errors
//! reach the caller unchanged through [`crate::Error`]).

use crate::automata::AutomataError;

/// A fault of the compiler's own: bytes that are not a compiled grammar, a cache folder that
/// cannot be used, automata that cannot be rebuilt.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompileError {
    /// Bytes given to [`CompiledGrammar::from_bytes`](super::CompiledGrammar::from_bytes)
    /// are not a compiled grammar this build can load.
    #[error("compiled grammar bytes, offset {offset}: {what}")]
    Format {
        /// Where in the bytes the fault was found.
        offset: usize,
        /// What is wrong.
        what: String,
    },
    /// The automata could not be built (a limit, a grammar they cannot take).
    #[error(transparent)]
    Automata(#[from] AutomataError),
    /// An I/O error on a cache file.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}
