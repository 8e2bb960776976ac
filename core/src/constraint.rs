//! [`LogitsConstraint`]: the engine-agnostic interface adapters program against.

use crate::bitmask::TokenBitmask;
use crate::compiler::{GrammarCompiler, GrammarSpec};
use crate::error::Result;
use crate::matcher::{ChainFill, DraftTree, GrammarMatcher, JumpForward, TextEncoder, TreeFill};

/// Everything an inference engine needs from a structured-generation constraint.
///
/// The decode loop is: `fill_next_token_bitmask` → apply the mask to the logits → sample →
/// `accept_token`, until `is_terminated`. Speculative decoding adds `rollback` (and `fork`
/// for draft trees); `find_jump_forward_string` lets an engine append forced text without
/// a forward pass per token.
///
/// # Example: a full decode loop
/// ```
/// use std::sync::Arc;
/// use grammask::{GrammarCompiler, GrammarMatcher, GrammarSpec, LogitsConstraint, TokenBitmask,
///                TokenizerInfo, TokenizerOptions};
///
/// // A toy vocabulary; real engines load `tokenizer.json` with `TokenizerInfo::from_path`.
/// let vocab: Vec<Vec<u8>> = ["{", "}", "\"", "a", ":", "1", " ", "<eos>"]
///     .iter().map(|s| s.as_bytes().to_vec()).collect();
/// let opts = TokenizerOptions { stop_tokens: Some(vec![7]), ..Default::default() };
/// let compiler = GrammarCompiler::new(Arc::new(TokenizerInfo::from_byte_tokens(vocab, &opts)?));
/// let spec = GrammarSpec::ebnf(r#"root ::= "{" "\"" [a]+ "\"" ":" [1]+ "}""#);
/// let mut constraint = GrammarMatcher::compile(&compiler, &spec)?;
///
/// let mut mask = TokenBitmask::new(1, constraint.vocab_size());
/// let mut out = Vec::new();
/// let mut step = 0u32;
/// while !constraint.is_terminated() {
///     // Forced text needs no model call.
///     let forced = constraint.find_jump_forward_string();
///     if !forced.is_empty() {
///         constraint.accept_bytes(&forced)?;
///         out.extend(forced);
///         continue;
///     }
///     constraint.fill_next_token_bitmask(mask.row_mut(0))?;
///     let mut logits = vec![0.0f32; 8];
///     logits[(step % 8) as usize] = 5.0; // a "model" that prefers a rotating token
///     mask.apply(&mut logits, 8, None)?;
///     let token = (0..8).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).unwrap() as u32;
///     constraint.accept_token(token)?;
///     if token != 7 { out.extend(constraint.token_bytes(token)); }
///     step += 1;
/// }
/// let text = String::from_utf8(out).unwrap();
/// assert!(text.starts_with("{\"a") && text.ends_with("}"));
/// # Ok::<(), grammask::Error>(())
/// ```
pub trait LogitsConstraint: Send {
    /// Compiles `spec` with `compiler` (cached) and returns a constraint at its start.
    fn compile(compiler: &GrammarCompiler, spec: &GrammarSpec) -> Result<Self>
    where
        Self: Sized;

    /// Bits per mask row (the model's vocabulary size).
    fn vocab_size(&self) -> usize;

    /// Writes the next-token mask into `row`; `Ok(true)` if it allows everything.
    fn fill_next_token_bitmask(&mut self, row: &mut [u32]) -> Result<bool>;

    /// Accepts a sampled token; on error the state is unchanged.
    fn accept_token(&mut self, token: u32) -> Result<()>;

    /// Accepts raw bytes (e.g. a jump-forward string) as one step.
    fn accept_bytes(&mut self, bytes: &[u8]) -> Result<()>;

    /// Undoes the last `n` accepted steps.
    fn rollback(&mut self, n: usize) -> Result<()>;

    /// An independent copy of the current state.
    fn fork(&self) -> Self
    where
        Self: Sized;

    /// Bytes the grammar forces next; the state is unchanged.
    fn find_jump_forward_string(&mut self) -> Vec<u8>;

    /// Returns to the initial state.
    fn reset(&mut self);

    /// True if a stop token would be accepted now.
    fn can_terminate(&self) -> bool;

    /// True once a stop token was accepted.
    fn is_terminated(&self) -> bool;

    /// The bytes a token stands for (for detokenizing jump-forward text).
    fn token_bytes(&self, token: u32) -> &[u8];

    /// How many leading ids of `ids` are accepted one after the other; state unchanged
    /// (see [`GrammarMatcher::validate_tokens`]).
    fn validate_tokens(&mut self, ids: &[u32]) -> usize {
        crate::matcher::draft_validate(self, ids)
    }

    /// Accepts all of `ids` or none (see [`GrammarMatcher::accept_tokens`]).
    fn accept_tokens(&mut self, ids: &[u32]) -> Result<()> {
        crate::matcher::draft_accept(self, ids)
    }

    /// `chain.len() + 1` mask rows from `first`: the mask after each prefix of a draft
    /// chain; state unchanged (see [`GrammarMatcher::fill_draft_chain_bitmasks`]).
    fn fill_draft_chain_bitmasks(
        &mut self,
        chain: &[u32],
        mask: &mut TokenBitmask,
        first: usize,
    ) -> Result<ChainFill> {
        crate::matcher::draft_chain(self, chain, mask, first)
    }

    /// One mask row per node of a draft tree from `first`; state unchanged (see
    /// [`GrammarMatcher::fill_draft_tree_bitmasks`]).
    fn fill_draft_tree_bitmasks(
        &mut self,
        tree: &DraftTree,
        mask: &mut TokenBitmask,
        first: usize,
    ) -> Result<TreeFill> {
        crate::matcher::draft_tree(self, tree, mask, first)
    }

    /// The forced continuation as token ids, re-encoded across the boundary with the
    /// last accepted tokens; state unchanged (see [`GrammarMatcher::jump_forward_tokens`]).
    fn jump_forward_tokens(&mut self, encoder: &dyn TextEncoder) -> Result<JumpForward>;
}

impl LogitsConstraint for GrammarMatcher {
    fn compile(compiler: &GrammarCompiler, spec: &GrammarSpec) -> Result<Self> {
        Ok(GrammarMatcher::new(compiler.compile(spec)?))
    }
    fn vocab_size(&self) -> usize {
        GrammarMatcher::vocab_size(self)
    }
    fn fill_next_token_bitmask(&mut self, row: &mut [u32]) -> Result<bool> {
        GrammarMatcher::fill_next_token_bitmask(self, row)
    }
    fn accept_token(&mut self, token: u32) -> Result<()> {
        GrammarMatcher::accept_token(self, token)
    }
    fn accept_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        GrammarMatcher::accept_bytes(self, bytes)
    }
    fn rollback(&mut self, n: usize) -> Result<()> {
        GrammarMatcher::rollback(self, n)
    }
    fn fork(&self) -> Self {
        GrammarMatcher::fork(self)
    }
    fn find_jump_forward_string(&mut self) -> Vec<u8> {
        GrammarMatcher::find_jump_forward_string(self)
    }
    fn reset(&mut self) {
        GrammarMatcher::reset(self)
    }
    fn can_terminate(&self) -> bool {
        GrammarMatcher::can_terminate(self)
    }
    fn is_terminated(&self) -> bool {
        GrammarMatcher::is_terminated(self)
    }
    fn token_bytes(&self, token: u32) -> &[u8] {
        self.compiled().tokenizer().token_bytes(token)
    }
    fn jump_forward_tokens(&mut self, encoder: &dyn TextEncoder) -> Result<JumpForward> {
        GrammarMatcher::jump_forward_tokens(self, encoder)
    }
}
