//! Token bitmasks in XGrammar's layout, and applying them to CPU logits.
//!
//! A mask row is `ceil(vocab_size / 32)` `u32` words; bit `i % 32` of word `i / 32` is set
//! when token `i` is allowed. A batch is `rows × words`, row-major. Applying a row sets the
//! logit of every disallowed token to −∞. In a mixed batch, `indices` names the rows that
//! are constrained; other rows are left alone. Logits wider than the mask (model padding)
//! are masked off past the mask; mask bits past the logits are ignored.

use crate::error::{Error, Result};

/// Words per mask row for `vocab_size` tokens.
#[inline]
pub fn words_per_row(vocab_size: usize) -> usize {
    vocab_size.div_ceil(32)
}

#[inline]
pub(crate) fn set_bit(row: &mut [u32], id: u32) {
    row[id as usize / 32] |= 1 << (id % 32);
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
/// m.row_mut(1)[0] = 0b101;
/// assert_eq!(m.count_allowed(1), 2);
/// let mut logits = vec![1.0f32; 2 * 40];
/// m.apply(&mut logits, 40, Some(&[1]))?;
/// assert_eq!(logits[40], 1.0);
/// assert_eq!(logits[41], f32::NEG_INFINITY);
/// assert_eq!(logits[1], 1.0); // row 0 not listed in indices: untouched
/// # Ok::<(), grammask::Error>(())
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

    /// Allowed tokens in row `r`.
    pub fn count_allowed(&self, r: usize) -> usize {
        count_allowed(self.row(r), self.vocab_size)
    }

    /// Allowed token ids in row `r`.
    pub fn allowed_ids(&self, r: usize) -> Vec<u32> {
        (0..self.vocab_size as u32).filter(|&i| is_allowed(self.row(r), i)).collect()
    }

    /// Masks `logits` (`batch × stride` values, `stride ≥` the model's vocab) in place;
    /// see [`apply_token_bitmask`].
    pub fn apply<T: Logit>(&self, logits: &mut [T], stride: usize, indices: Option<&[usize]>) -> Result<()> {
        apply_token_bitmask(logits, stride, stride, &self.words, self.vocab_size, indices)
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

/// A logits element type: `f32`, `half::f16` or `half::bf16`.
pub trait Logit: Copy + Send + Sync {
    /// Negative infinity in this type.
    const NEG_INFINITY: Self;
}
impl Logit for f32 {
    const NEG_INFINITY: Self = f32::NEG_INFINITY;
}
impl Logit for half::f16 {
    const NEG_INFINITY: Self = half::f16::NEG_INFINITY;
}
impl Logit for half::bf16 {
    const NEG_INFINITY: Self = half::bf16::NEG_INFINITY;
}

/// Applies a packed bitmask to CPU logits in place.
///
/// `logits` holds `batch` rows of `stride` values, of which the first `vocab` are real
/// logits. `mask` holds `rows` rows of `words_per_row(mask_vocab)` words. Without `indices`,
/// logits row `i` uses mask row `i` for every row of the batch (the mask must have `batch`
/// rows). With `indices`, only logits rows `indices[k]` are masked, each with mask row
/// `indices[k]` (XGrammar's convention: the mask has a row for every batch row).
pub fn apply_token_bitmask<T: Logit>(
    logits: &mut [T],
    stride: usize,
    vocab: usize,
    mask: &[u32],
    mask_vocab: usize,
    indices: Option<&[usize]>,
) -> Result<()> {
    if stride == 0 || vocab > stride {
        return Err(Error::Shape(format!("logits vocab {vocab} must be ≥ 1 and ≤ the row stride {stride}")));
    }
    if logits.len() % stride != 0 {
        return Err(Error::Shape(format!("logits length {} is not a multiple of the row stride {stride}", logits.len())));
    }
    let batch = logits.len() / stride;
    let wpr = words_per_row(mask_vocab);
    if wpr == 0 || mask.len() % wpr != 0 || mask.len() / wpr != batch {
        return Err(Error::Shape(format!("mask has {} words; expected {batch} rows of {wpr}", mask.len())));
    }
    let mut one = |r: usize| {
        let row = &mut logits[r * stride..r * stride + vocab];
        apply_row(row, &mask[r * wpr..(r + 1) * wpr], mask_vocab);
    };
    match indices {
        None => (0..batch).for_each(&mut one),
        Some(idx) => {
            if let Some(&bad) = idx.iter().find(|&&r| r >= batch) {
                return Err(Error::Shape(format!("index {bad} is out of range for a batch of {batch}")));
            }
            idx.iter().for_each(|&r| one(r));
        }
    }
    Ok(())
}

/// One row: 32 logits per word; all-ones words (the common case) are skipped.
fn apply_row<T: Logit>(row: &mut [T], mask: &[u32], mask_vocab: usize) {
    let covered = row.len().min(mask_vocab);
    for (w, chunk) in mask.iter().zip(row[..covered].chunks_mut(32)) {
        if *w == u32::MAX {
            continue;
        }
        for (i, x) in chunk.iter_mut().enumerate() {
            if w >> i & 1 == 0 {
                *x = T::NEG_INFINITY;
            }
        }
    }
    row[covered..].iter_mut().for_each(|x| *x = T::NEG_INFINITY);
}
