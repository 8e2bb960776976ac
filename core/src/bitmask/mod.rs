//! Token bitmasks in XGrammar's layout, and applying them to logits on the CPU.
//!
//! [`TokenBitmask`] holds a batch of mask rows as a matcher fills them;
//! [`apply_token_bitmask`] sets the disallowed logits to −∞. This module is the
//! crate's one CPU implementation; `grammask-gpu` re-exports it for its
//! `Device::Cpu` path and adds a CUDA kernel with identical results.
//!
//! # Layout and semantics
//!
//! The conventions are XGrammar's (`xgrammar.apply_token_bitmask_inplace`), so
//! masks produced for XGrammar work unchanged:
//!
//! * **logits**: `[batch, vocab]`, f32, f16 or bf16 ([`Logit`]); row `r` starts at
//!   element `r * row_stride` with `row_stride >= vocab` (see [`LogitsLayout`]).
//! * **bitmask**: `[rows, words]` 32-bit words (`u32`, or `i32` as PyTorch stores
//!   them: [`MaskWord`]), dense. Bit `k` of word `w` is token `32 * w + k`; a **set
//!   bit means allowed**. Normally `words = ceil(vocab / 32)` ([`words_per_row`],
//!   [`MaskLayout::for_vocab`]).
//! * **indices** (optional): the rows to mask in a mixed batch, as `i32`. Entry `r`
//!   masks logits row `r` with bitmask row `r`: the *same* row of both, exactly as
//!   XGrammar's `for batch_id in indices: … bitmask[batch_id] … logits[batch_id]`.
//!   Rows not listed are untouched, and the bitmask may then have a different
//!   number of rows than the logits as long as every index is in range for both.
//!   Without indices every row is masked and the bitmask must have `batch` rows.
//! * **vocabulary padding**: the model's vocabulary may be larger or smaller than
//!   the mask's `32 * words` bits. Tokens at or beyond `32 * words` are disallowed
//!   (−∞): a token the grammar cannot know about is never sampled. Mask bits at or
//!   beyond `vocab` are ignored. (XGrammar instead leaves logits beyond the mask
//!   untouched; grammask masks them, which is the safe choice for padded heads.)
//! * Allowed logits are left bit-for-bit unchanged (NaNs included); disallowed ones
//!   become exactly −∞ of the element type. Duplicate indices are harmless.
//!
//! Every shape, stride, index and dtype problem is a typed [`ApplyError`], reported
//! before any memory is written. No input makes the functions here panic or touch
//! memory outside the described rows.
//!
//! # The kernel
//!
//! One mask word (32 logits) at a time on the bit patterns of the logits,
//! branch-free and auto-vectorised, skipping all-ones words, and parallel over rows
//! (rayon) once the batch is large; see [`apply_token_bitmask_with`] and
//! [`Parallelism`].

mod apply;
mod layout;

pub use apply::{
    apply_token_bitmask, apply_token_bitmask_bytes, apply_token_bitmask_with, Parallelism,
    PARALLEL_MIN_ELEMENTS, PARALLEL_TILE,
};
pub use layout::{
    cast_logits_bytes, check_rows, ApplyError, DType, Logit, LogitsLayout, MaskLayout, MaskWord,
};

/// Words per mask row for `vocab_size` tokens.
#[inline]
pub fn words_per_row(vocab_size: usize) -> usize {
    vocab_size.div_ceil(32)
}

#[inline]
pub(crate) fn set_bit(row: &mut [u32], id: u32) {
    row[id as usize / 32] |= 1 << (id % 32);
}

/// The positions of the set bits of `words` (bit `b` of word `w` is `32 w + b`), in
/// increasing order; costs one step per word plus one per set bit.
pub(crate) fn set_bits(words: impl IntoIterator<Item = u32>) -> impl Iterator<Item = u32> {
    words.into_iter().enumerate().flat_map(|(w, mut x)| {
        std::iter::from_fn(move || {
            (x != 0).then(|| {
                let b = x.trailing_zeros();
                x &= x - 1;
                (w * 32) as u32 + b
            })
        })
    })
}

/// True if token `id` is allowed in `row`.
#[inline]
pub fn is_allowed(row: &[u32], id: u32) -> bool {
    row.get(id as usize / 32).is_some_and(|w| w >> (id % 32) & 1 == 1)
}

/// A batch of token masks.
///
/// ```
/// use grammask::TokenBitmask;
/// let mut m = TokenBitmask::new(2, 40);
/// assert_eq!(m.row(0).len(), 2);
/// assert_eq!(m.count_allowed(0), 40);
/// m.row_mut(1).copy_from_slice(&[0b101, 0]); // row 1 allows tokens 0 and 2
/// assert_eq!(m.count_allowed(1), 2);
/// assert_eq!(m.allowed_ids(1), [0, 2]);
/// let mut logits = vec![1.0f32; 2 * 40];
/// m.apply(&mut logits, 40, Some(&[1]))?;
/// assert_eq!(logits[40], 1.0);
/// assert_eq!(logits[41], f32::NEG_INFINITY);
/// assert_eq!(logits[42], 1.0);
/// assert_eq!(logits[40 + 39], f32::NEG_INFINITY);
/// assert!(logits[..40].iter().all(|&x| x == 1.0)); // row 0 not listed in indices: untouched
/// # Ok::<(), grammask::bitmask::ApplyError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBitmask {
    words: Vec<u32>,
    rows: usize,
    vocab_size: usize,
}

impl TokenBitmask {
    /// `rows` rows for `vocab_size` tokens, all allowed.
    pub fn new(rows: usize, vocab_size: usize) -> Self {
        let mut m = Self { words: vec![0; rows * words_per_row(vocab_size)], rows, vocab_size };
        for r in 0..rows {
            m.reset_row(r);
        }
        m
    }

    /// Sets row `r` to "all allowed" (only the bits below `vocab_size`).
    pub fn reset_row(&mut self, r: usize) {
        let v = self.vocab_size;
        let row = self.row_mut(r);
        row.fill(u32::MAX);
        if v % 32 != 0 {
            if let Some(last) = row.last_mut() {
                *last = (1u32 << (v % 32)) - 1;
            }
        }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Vocabulary size the rows cover.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Row `r`'s words.
    pub fn row(&self, r: usize) -> &[u32] {
        let w = words_per_row(self.vocab_size);
        &self.words[r * w..(r + 1) * w]
    }

    /// Row `r`'s words, mutable.
    pub fn row_mut(&mut self, r: usize) -> &mut [u32] {
        let w = words_per_row(self.vocab_size);
        &mut self.words[r * w..(r + 1) * w]
    }

    /// All words, row-major (what a GPU upload copies).
    pub fn as_words(&self) -> &[u32] {
        &self.words
    }

    /// All words, row-major, mutable.
    pub fn as_words_mut(&mut self) -> &mut [u32] {
        &mut self.words
    }

    /// Allowed tokens in row `r`.
    pub fn count_allowed(&self, r: usize) -> usize {
        count_allowed(self.row(r), self.vocab_size)
    }

    /// Allowed token ids in row `r`.
    pub fn allowed_ids(&self, r: usize) -> Vec<u32> {
        set_bits(self.row(r).iter().copied()).take_while(|&i| (i as usize) < self.vocab_size).collect()
    }

    /// Masks `logits` in place with these rows: `batch × stride` values, every one
    /// of a row's `stride` values a real logit (so tokens at or beyond this mask's
    /// `32 * words` bits are set to −∞). Without `indices` the logits must have
    /// [`rows`](Self::rows) rows; with them, entry `r` masks logits row `r` with mask
    /// row `r` and other rows are untouched. See [`apply_token_bitmask`], which this
    /// calls, for layouts with padding beyond the vocabulary.
    pub fn apply<T: Logit>(
        &self,
        logits: &mut [T],
        stride: usize,
        indices: Option<&[i32]>,
    ) -> Result<(), ApplyError> {
        // A zero stride means rows of no logits: one per mask row.
        let batch = logits.len().checked_div(stride).unwrap_or(self.rows);
        apply_token_bitmask(
            logits,
            LogitsLayout::contiguous(batch, stride),
            &self.words,
            MaskLayout::for_vocab(self.rows, self.vocab_size),
            indices,
        )
    }
}

/// Allowed tokens among the first `vocab_size` bits of `row`.
pub fn count_allowed(row: &[u32], vocab_size: usize) -> usize {
    let full = vocab_size / 32;
    let mut n: usize = row[..full.min(row.len())].iter().map(|w| w.count_ones() as usize).sum();
    if vocab_size % 32 != 0 {
        if let Some(w) = row.get(full) {
            n += (w & ((1u32 << (vocab_size % 32)) - 1)).count_ones() as usize;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    //! `TokenBitmask::apply`'s own logic. The kernel's property tests against a
    //! scalar reference (random shapes, dtypes, strides, indices, threading) are
    //! `gpu/tests/cpu_props.rs`, which calls this module through grammask-gpu's
    //! re-exports, next to the CUDA tests that share its reference.
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn set_bits_lists_positions_in_order() {
        assert_eq!(set_bits([0b1010u32, 0, 1 << 31 | 1]).collect::<Vec<_>>(), [1, 3, 64, 95]);
        assert_eq!(set_bits([0u32; 3]).count(), 0);
        let mut m = TokenBitmask::new(1, 70);
        m.row_mut(0).fill(0);
        [0u32, 33, 69].iter().for_each(|&i| set_bit(m.row_mut(0), i));
        assert_eq!(m.allowed_ids(0), [0, 33, 69]);
    }

    #[test]
    fn logits_wider_than_the_mask_are_masked_past_it() {
        let m = TokenBitmask::new(1, 40); // 2 words; bits 40..64 clear
        let mut logits = vec![0.5f32; 70];
        m.apply(&mut logits, 70, None).unwrap();
        assert!(logits[..40].iter().all(|&x| x == 0.5));
        assert!(logits[40..].iter().all(|&x| x == f32::NEG_INFINITY));
    }

    #[test]
    fn half_types() {
        let mut m = TokenBitmask::new(2, 33);
        m.row_mut(0).copy_from_slice(&[1 << 5, 1]);
        let mut h = vec![f16::ONE; 66];
        m.apply(&mut h, 33, None).unwrap();
        let finite: Vec<usize> = (0..66).filter(|&i| h[i].is_finite()).collect();
        assert_eq!(finite, [5, 32].into_iter().chain(33..66).collect::<Vec<_>>());
        let mut b = vec![bf16::ONE; 66];
        m.apply(&mut b, 33, Some(&[0])).unwrap();
        assert_eq!(b[5], bf16::ONE);
        assert_eq!(b[6], bf16::NEG_INFINITY);
        assert!(b[33..].iter().all(|&x| x == bf16::ONE));
    }

    #[test]
    fn shape_errors_are_typed_and_write_nothing() {
        let m = TokenBitmask::new(2, 40);
        let mut logits = vec![1.0f32; 81];
        let e = m.apply(&mut logits, 40, None).unwrap_err();
        assert!(matches!(e, ApplyError::LogitsLen { len: 81, .. }), "{e:?}");
        let mut logits = vec![1.0f32; 40];
        let e = m.apply(&mut logits, 40, None).unwrap_err();
        assert_eq!(e, ApplyError::MaskRowsMismatch { batch: 1, mask_rows: 2 });
        let e = m.apply(&mut logits, 40, Some(&[1])).unwrap_err();
        assert!(matches!(e, ApplyError::IndexOutOfRange { position: 0, index: 1, .. }), "{e:?}");
        assert!(logits.iter().all(|&x| x == 1.0));
        // A zero stride: rows of no logits, one per mask row.
        m.apply::<f32>(&mut [], 0, None).unwrap();
        let e = m.apply(&mut [1.0f32], 0, None).unwrap_err();
        assert!(matches!(e, ApplyError::LogitsLen { .. }), "{e:?}");
        // `?` into grammask's error.
        let as_crate_error = || -> crate::Result<()> { Ok(m.apply(&mut [0.0f32; 3], 40, None)?) };
        assert!(matches!(as_crate_error(), Err(crate::Error::Bitmask(_))));
    }
}
