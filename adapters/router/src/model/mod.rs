//! Models behind one trait: forward a batch of sequences, get one row of logits each.
//!
//! The router owns the batch; a model owns each sequence's cache (keyed by
//! [`SeqId`]) and frees it on [`Model::release`]. A row of a forward carries the
//! sequence's new tokens: the whole prompt on its first step (prefill), then the
//! sampled token plus any jump-forward tokens, so prefill and decode rows mix in one
//! call.
//!
//! A row may also carry a draft tree ([`ForwardRow::draft`], speculative decoding): the
//! model computes logits for every draft node in the same forward, each node attending
//! to its own ancestors only, and keeps nothing of the draft until [`Model::commit`]
//! names the accepted path. A model that cannot verify trees says so with
//! [`Model::max_draft_nodes`] `== 0` and is never given one.
//!
//! A forward leaves its logits where the model computed them: in host memory
//! ([`StepLogits::Host`]) or, for a model on a GPU, in device memory
//! ([`StepLogits::Cuda`], feature `cuda`). The router then masks and samples them
//! there, so device logits never cross to the host.

mod gguf;
mod llama;
mod quant;
pub(crate) mod simulated;
#[cfg(feature = "cuda")]
mod simulated_cuda;

pub use gguf::{hf_tokenizer_from_gguf, GgufModel, MAX_CONTEXT};
pub use llama::WeightFormat;
pub use simulated::{ForwardTime, SimulatedModel};
#[cfg(feature = "cuda")]
pub use simulated_cuda::CudaSimulatedModel;

use crate::step::SeqId;
use grammask::matcher::DraftTree;
use grammask_gpu::Device;

/// One row of a forward.
#[derive(Debug, Clone, Copy)]
pub struct ForwardRow<'a> {
    /// The sequence.
    pub id: SeqId,
    /// Tokens to append to its cache; the logits are those after the last one.
    pub tokens: &'a [u32],
    /// A draft tree to verify after `tokens` (speculative decoding): its root (node 0)
    /// stands for the last of `tokens`, every other node `v` for its token after the path
    /// from the root to `v`. The row then has [`DraftTree::len`] logits rows, node `v`'s
    /// at the row's first logits row + `v` (node 0's: the logits after `tokens`). Draft
    /// nodes stay out of the cache until [`Model::commit`].
    pub draft: Option<&'a DraftTree>,
    /// Logits after every one of `tokens`, not only the last (a prompt's log-probabilities:
    /// TGI's `decoder_input_details`, OpenAI's `echo` with `logprobs`): the row's first
    /// `tokens.len()` logits rows, in order, then the draft nodes'.
    pub all_logits: bool,
    /// A new sequence that starts as a copy of `fork_of`'s context after this forward (its
    /// prefill shared: `n` choices of one prompt), with no `tokens` of its own; its logits
    /// row is a copy of `fork_of`'s row after its last token. `fork_of`'s row must come
    /// earlier in the same forward. Only for a model whose [`Model::can_fork`] is true.
    pub fork_of: Option<SeqId>,
}

impl<'a> ForwardRow<'a> {
    /// A row without a draft, giving the logits after its last token.
    pub fn new(id: SeqId, tokens: &'a [u32]) -> Self {
        Self { id, tokens, draft: None, all_logits: false, fork_of: None }
    }

    /// Logits rows this row gives: one (or one per token with
    /// [`all_logits`](Self::all_logits)), plus one per draft node.
    pub fn logits_rows(&self) -> usize {
        self.own_rows() + self.draft.map_or(0, |t| t.len().saturating_sub(1))
    }

    /// Logits rows of its own tokens: one, or one per token with `all_logits`.
    pub(crate) fn own_rows(&self) -> usize {
        if self.all_logits {
            self.tokens.len().max(1)
        } else {
            1
        }
    }
}

/// A model failed: on a row ([`Forward::failed`]), that sequence ends with this error;
/// on the whole forward, every sequence of the step does.
#[derive(Debug, thiserror::Error)]
#[error("model: {0}")]
pub struct ModelError(pub String);

/// What a forward gives back: the logits, and the rows it could not run.
#[derive(Debug)]
pub struct Forward<'a> {
    /// Every row's logits (those of the failed rows are never read).
    pub logits: StepLogits<'a>,
    /// Rows the model could not run, as `(row, why)` (a sequence past its cache, an
    /// input the model refuses): those sequences end with the error and are released;
    /// the other rows go on.
    pub failed: Vec<(usize, ModelError)>,
}

impl<'a> From<StepLogits<'a>> for Forward<'a> {
    /// A forward where every row ran.
    fn from(logits: StepLogits<'a>) -> Self {
        Self { logits, failed: Vec::new() }
    }
}

/// The logits of a forward, `[rows, vocab_size()]`: the forward's rows in order, each
/// with [`ForwardRow::logits_rows`] logits rows (one without a draft).
#[derive(Debug)]
pub enum StepLogits<'a> {
    /// In host memory, contiguous.
    Host(&'a mut [f32]),
    /// On a CUDA device, contiguous, ready to read on `stream` (work queued on
    /// `stream` after the forward sees them).
    #[cfg(feature = "cuda")]
    Cuda(DeviceLogits<'a>),
}

/// Device-resident logits and the stream that orders work on them.
#[cfg(feature = "cuda")]
#[derive(Debug)]
pub struct DeviceLogits<'a> {
    /// The logits.
    pub logits: grammask_gpu::cudarc::driver::CudaViewMut<'a, f32>,
    /// The stream the forward ran on.
    pub stream: std::sync::Arc<grammask_gpu::cudarc::driver::CudaStream>,
}

/// A language model the router can drive.
pub trait Model: Send + 'static {
    /// Columns of a logits row (may exceed the tokenizer's vocabulary: padding).
    fn vocab_size(&self) -> usize;

    /// Appends each row's tokens to its sequence's cache and returns the next-token
    /// logits, row `r` for `rows[r]`. Returns once the logits can be read (on the
    /// host) or once reading them on their stream is ordered after the forward.
    ///
    /// A row's own failure is reported in [`Forward::failed`] and must not disturb the
    /// other rows; `Err` is for a failure of the whole forward (every row ends).
    fn forward(&mut self, rows: &[ForwardRow<'_>]) -> Result<Forward<'_>, ModelError>;

    /// Frees a sequence's cache (finished, cancelled). Unknown ids are ignored.
    fn release(&mut self, id: SeqId);

    /// Whether rows may start as copies of other rows' sequences
    /// ([`ForwardRow::fork_of`]): `n` choices of one prompt then share its prefill.
    fn can_fork(&self) -> bool {
        false
    }

    /// Most draft nodes (root excluded) this model verifies in one row of a forward; `0`
    /// (the default): it does not verify drafts, and no row gets one.
    fn max_draft_nodes(&self) -> usize {
        0
    }

    /// After a forward whose row for `id` carried a draft: keeps the draft nodes `path`
    /// (a path down from the root: each node the child of the one before, the first a
    /// child of the root) in the sequence's cache, as if their tokens had been appended
    /// one by one, and drops the rest of the draft. An empty `path` keeps none. A forward
    /// of the sequence without a commit first drops the whole draft.
    fn commit(&mut self, id: SeqId, path: &[usize]) -> Result<(), ModelError> {
        if path.is_empty() {
            return Ok(());
        }
        Err(ModelError(format!("sequence {id}: this model does not verify drafts")))
    }

    /// A name for `/info`.
    fn name(&self) -> String;

    /// The type of its numbers for `/info`'s `model_dtype` (default: `float32`, the
    /// logits' type, which is all a simulated model has).
    fn dtype(&self) -> String {
        "float32".to_string()
    }

    /// The most positions (prompt and generated tokens) one sequence may hold, if the
    /// model has a limit: the router refuses a request whose prompt and `max_new_tokens`
    /// could pass it at admission (a 422 naming both), so that no row overflows its cache
    /// in the middle of a batch.
    fn max_context(&self) -> Option<usize> {
        None
    }

    /// Where masks are applied to this model's logits: `None` for host logits (the
    /// router's CPU path), the CUDA device and stream of [`StepLogits::Cuda`] for a
    /// model on a GPU.
    fn device(&self) -> Option<Device> {
        None
    }
}
