//! The automata layer's error: a grammar the construction cannot take, or a size limit.

use crate::grammar::GrammarError;

/// Why [`Automata::build`](super::Automata::build) (or an intersection check) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AutomataError {
    /// The grammar IR is not one the automata can be built from (an intersection operand
    /// that calls a rule, a root that matches nothing, …).
    #[error(transparent)]
    Grammar(#[from] GrammarError),
    /// The compile's work budget ran out, or it was cancelled or past its deadline.
    #[error(transparent)]
    Budget(#[from] crate::budget::BudgetError),
    /// A size limit was exceeded while building.
    #[error("{what} is {given}, over the limit of {limit}")]
    Limit {
        /// What was measured.
        what: &'static str,
        /// The size that was reached.
        given: usize,
        /// The configured limit.
        limit: usize,
    },
}
