//! Models behind one trait: forward a batch of sequences, get one row of logits each.
//!
//! The router owns the batch; a model owns each sequence's cache (keyed by
//! [`SeqId`]) and frees it on [`Model::release`]. A row of a forward carries the
//! sequence's new tokens: the whole prompt on its first step (prefill), then the
//! sampled token plus any jump-forward tokens, so prefill and decode rows mix in one
//! call.

mod simulated;

pub use simulated::{ForwardTime, SimulatedModel};

use crate::step::SeqId;

/// One row of a forward.
#[derive(Debug, Clone, Copy)]
pub struct ForwardRow<'a> {
    /// The sequence.
    pub id: SeqId,
    /// Tokens to append to its cache; the logits are those after the last one.
    pub tokens: &'a [u32],
}

/// A model failed; the router finishes the step's sequences with this error.
#[derive(Debug, thiserror::Error)]
#[error("model: {0}")]
pub struct ModelError(pub String);

/// A language model the router can drive.
pub trait Model: Send + 'static {
    /// Columns of a logits row (may exceed the tokenizer's vocabulary: padding).
    fn vocab_size(&self) -> usize;

    /// Appends each row's tokens to its sequence's cache and writes the next-token
    /// logits: `logits` is resized to `rows.len() × vocab_size()`, row `r` for `rows[r]`.
    fn forward(&mut self, rows: &[ForwardRow<'_>], logits: &mut Vec<f32>) -> Result<(), ModelError>;

    /// Frees a sequence's cache (finished, cancelled). Unknown ids are ignored.
    fn release(&mut self, id: SeqId);

    /// A name for `/info`.
    fn name(&self) -> String;
}
