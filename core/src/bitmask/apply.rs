//! The CPU kernel: applying a packed bitmask to host logits in place.
//!
//! Works on the bit patterns of the logits (`u32` for f32, `u16` for f16/bf16), like
//! `grammask-gpu`'s CUDA kernel, so the two give bit-identical results and NaNs in
//! allowed slots are preserved. One mask word covers 32 consecutive logits and is handled as a unit:
//!
//! * all ones (everything allowed): skipped, the logits are not even loaded;
//! * zero (everything disallowed): 32 stores of −∞;
//! * mixed: a branch-free select of 32 lanes against the constant bit pattern
//!   `[1 << 0, 1 << 1, …]`. After unrolling, LLVM turns this into a few vector
//!   `and` / `cmpeq` / blend instructions (SSE2 is enough; no variable shifts), so
//!   no per-token branch is left.
//!
//! Rows are independent; above [`PARALLEL_MIN_ELEMENTS`] logits the rows (and,
//! for long rows, tiles of [`PARALLEL_TILE`] logits within them) are spread over
//! the rayon thread pool.

use rayon::prelude::*;

use super::layout::{
    cast_logits_bytes, check_rows, ApplyError, DType, Logit, LogitsLayout, MaskLayout, MaskWord,
};

type Result<T, E = ApplyError> = std::result::Result<T, E>;

/// Below this many logits to mask, [`Parallelism::Auto`] stays on the calling
/// thread: handing work to the pool and back costs ~10–15 µs, while one core masks
/// a 128K-token f32 row in about 15–20 µs, so splitting only pays from ~256K
/// logits on.
pub const PARALLEL_MIN_ELEMENTS: usize = 1 << 18;

/// Logits per parallel work item within a row (a multiple of 32).
pub const PARALLEL_TILE: usize = 16 * 1024;

/// Whether the CPU path may use the rayon thread pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Parallelism {
    /// Parallel when at least [`PARALLEL_MIN_ELEMENTS`] logits are masked and the
    /// pool has more than one thread.
    #[default]
    Auto,
    /// Always on the calling thread.
    Sequential,
    /// Always through the rayon pool (the pool decides how many threads).
    Parallel,
}

/// Applies `bitmask` to host `logits` in place: every disallowed token's logit
/// becomes −∞ and every other value is left bit-for-bit unchanged.
///
/// * `logits`: `layout.batch` rows of `layout.vocab` values, `layout.row_stride`
///   apart.
/// * `bitmask`: `mask_layout.rows` rows of `mask_layout.words` words; bit `k` of
///   word `w` is token `32 * w + k`, set = allowed. Tokens at or beyond
///   `32 * words` are disallowed; bits at or beyond `vocab` are ignored.
/// * `indices`: if given, only the listed rows are masked, row `r` with bitmask
///   row `r` (XGrammar's convention; duplicates are harmless). If `None`, every
///   row is masked and the bitmask must have `layout.batch` rows.
///
/// Errors (nothing is written when one is returned): [`ApplyError::BadStride`],
/// [`ApplyError::LogitsLen`], [`ApplyError::MaskLen`],
/// [`ApplyError::MaskRowsMismatch`], [`ApplyError::IndexOutOfRange`],
/// [`ApplyError::TooLarge`].
///
/// ```
/// use grammask::bitmask::{apply_token_bitmask, LogitsLayout, MaskLayout};
///
/// // Two rows of 40 logits; the mask has 2 words per row.
/// let mut logits = vec![1.0f32; 80];
/// let mut mask = vec![0u32; 4];
/// mask[0] = 0b101; // row 0 allows tokens 0 and 2
/// mask[3] = 1 << 7; // row 1 allows token 32 + 7
/// apply_token_bitmask(
///     &mut logits,
///     LogitsLayout::contiguous(2, 40),
///     &mask,
///     MaskLayout::new(2, 2),
///     None,
/// )?;
/// let allowed: Vec<usize> = (0..80).filter(|&i| logits[i].is_finite()).collect();
/// assert_eq!(allowed, [0, 2, 40 + 39]);
///
/// // With indices only row 1 is touched.
/// let mut logits = vec![1.0f32; 80];
/// apply_token_bitmask(
///     &mut logits,
///     LogitsLayout::contiguous(2, 40),
///     &mask,
///     MaskLayout::new(2, 2),
///     Some(&[1]),
/// )?;
/// assert!(logits[..40].iter().all(|x| *x == 1.0));
/// # Ok::<(), grammask::bitmask::ApplyError>(())
/// ```
pub fn apply_token_bitmask<T: Logit, W: MaskWord>(
    logits: &mut [T],
    layout: LogitsLayout,
    bitmask: &[W],
    mask_layout: MaskLayout,
    indices: Option<&[i32]>,
) -> Result<()> {
    apply_token_bitmask_with(Parallelism::Auto, logits, layout, bitmask, mask_layout, indices)
}

/// [`apply_token_bitmask`] with an explicit [`Parallelism`].
pub fn apply_token_bitmask_with<T: Logit, W: MaskWord>(
    parallelism: Parallelism,
    logits: &mut [T],
    layout: LogitsLayout,
    bitmask: &[W],
    mask_layout: MaskLayout,
    indices: Option<&[i32]>,
) -> Result<()> {
    layout.check_len(logits.len())?;
    mask_layout.check_len(bitmask.len())?;
    check_rows(&layout, &mask_layout, indices)?;
    if layout.batch == 0 || layout.vocab == 0 {
        return Ok(());
    }
    let selected = indices.map(|idx| {
        let mut sel = vec![false; layout.batch];
        for &i in idx {
            // In range: checked by `check_rows`.
            if let Some(s) = sel.get_mut(i as usize) {
                *s = true;
            }
        }
        sel
    });
    let rows_masked = indices.map_or(layout.batch, <[i32]>::len);
    let parallel = match parallelism {
        Parallelism::Sequential => false,
        Parallelism::Parallel => true,
        Parallelism::Auto => {
            rows_masked.saturating_mul(layout.vocab) >= PARALLEL_MIN_ELEMENTS
                && rayon::current_num_threads() > 1
        }
    };
    let mask: &[u32] = bytemuck::try_cast_slice(bitmask).map_err(|e| ApplyError::DTypeMismatch {
        expected: T::DTYPE,
        found: format!("bitmask words not castable to u32 ({e:?})"),
    })?;
    let job = Job { layout, mask, words: mask_layout.words, selected: selected.as_deref(), parallel };
    let neg = T::DTYPE.neg_inf_bits();
    match T::DTYPE.size() {
        4 => job.run::<u32>(cast_bits(logits)?, neg),
        _ => job.run::<u16>(cast_bits(logits)?, neg as u16),
    }
    Ok(())
}

/// [`apply_token_bitmask_with`] on untyped bytes: `logits` holds
/// elements of `dtype` (native endianness). A length that is not a whole number of
/// elements or a misaligned buffer gives [`ApplyError::DTypeMismatch`].
pub fn apply_token_bitmask_bytes<W: MaskWord>(
    parallelism: Parallelism,
    logits: &mut [u8],
    dtype: DType,
    layout: LogitsLayout,
    bitmask: &[W],
    mask_layout: MaskLayout,
    indices: Option<&[i32]>,
) -> Result<()> {
    match dtype {
        DType::F32 => apply_token_bitmask_with(
            parallelism,
            cast_logits_bytes::<f32>(logits)?,
            layout,
            bitmask,
            mask_layout,
            indices,
        ),
        DType::F16 => apply_token_bitmask_with(
            parallelism,
            cast_logits_bytes::<half::f16>(logits)?,
            layout,
            bitmask,
            mask_layout,
            indices,
        ),
        DType::BF16 => apply_token_bitmask_with(
            parallelism,
            cast_logits_bytes::<half::bf16>(logits)?,
            layout,
            bitmask,
            mask_layout,
            indices,
        ),
    }
}

fn cast_bits<T: Logit, B: bytemuck::Pod>(logits: &mut [T]) -> Result<&mut [B]> {
    bytemuck::try_cast_slice_mut(logits).map_err(|e| ApplyError::DTypeMismatch {
        expected: T::DTYPE,
        found: format!("logits not castable to their bit type ({e:?})"),
    })
}

/// The bit type of one logit.
trait Lane: bytemuck::Pod + Send + Sync + PartialEq {
    /// Applies a mixed (neither 0 nor all-ones) word to 32 logits.
    fn apply_word(chunk: &mut [Self; 32], w: u32, neg: Self);
}

const BITS32: [u32; 32] = {
    let mut b = [0u32; 32];
    let mut k = 0;
    while k < 32 {
        b[k] = 1 << k;
        k += 1;
    }
    b
};

const BITS16: [u16; 16] = {
    let mut b = [0u16; 16];
    let mut k = 0;
    while k < 16 {
        b[k] = 1 << k;
        k += 1;
    }
    b
};

impl Lane for u32 {
    #[inline(always)]
    fn apply_word(chunk: &mut [u32; 32], w: u32, neg: u32) {
        for (x, bit) in chunk.iter_mut().zip(BITS32) {
            *x = if w & bit != 0 { *x } else { neg };
        }
    }
}

impl Lane for u16 {
    #[inline(always)]
    fn apply_word(chunk: &mut [u16; 32], w: u32, neg: u16) {
        // Two 16-lane halves so the comparison runs in 16-bit lanes too.
        let (lo, hi) = chunk.split_at_mut(16);
        let (wl, wh) = (w as u16, (w >> 16) as u16);
        for (x, bit) in lo.iter_mut().zip(BITS16) {
            *x = if wl & bit != 0 { *x } else { neg };
        }
        for (x, bit) in hi.iter_mut().zip(BITS16) {
            *x = if wh & bit != 0 { *x } else { neg };
        }
    }
}

/// Masks `seg`, which starts at a word boundary; `words` are the mask words from
/// that boundary on (possibly fewer than `seg` needs: missing words are zero).
#[inline]
fn apply_segment<B: Lane>(seg: &mut [B], words: &[u32], neg: B) {
    let full = seg.len() / 32;
    let (body, tail) = seg.split_at_mut(full * 32);
    let n = words.len().min(full);
    let (covered, beyond) = body.split_at_mut(n * 32);
    for (chunk, &w) in covered.chunks_exact_mut(32).zip(words) {
        if w == u32::MAX {
            continue;
        }
        if let Ok(arr) = <&mut [B; 32]>::try_from(chunk) {
            if w == 0 {
                *arr = [neg; 32];
            } else {
                B::apply_word(arr, w, neg);
            }
        }
    }
    // Tokens past the end of the mask are disallowed.
    beyond.fill(neg);
    if !tail.is_empty() {
        let w = words.get(full).copied().unwrap_or(0);
        for (k, x) in tail.iter_mut().enumerate() {
            if (w >> k) & 1 == 0 {
                *x = neg;
            }
        }
    }
}

/// One validated call.
struct Job<'a> {
    layout: LogitsLayout,
    mask: &'a [u32],
    words: usize,
    selected: Option<&'a [bool]>,
    parallel: bool,
}

impl Job<'_> {
    /// The row's mask words, or `None` if the row is not to be masked.
    #[inline]
    fn mask_row(&self, r: usize) -> Option<&[u32]> {
        if let Some(sel) = self.selected {
            if !sel.get(r).copied().unwrap_or(false) {
                return None;
            }
        }
        let start = r.checked_mul(self.words)?;
        self.mask.get(start..start.checked_add(self.words)?)
    }

    fn run<B: Lane>(&self, data: &mut [B], neg: B) {
        let LogitsLayout { vocab, row_stride, .. } = self.layout;
        if self.parallel {
            data.par_chunks_mut(row_stride).enumerate().for_each(|(r, row)| {
                let (Some(mask_row), Some(row)) = (self.mask_row(r), row.get_mut(..vocab)) else {
                    return;
                };
                if vocab > PARALLEL_TILE {
                    row.par_chunks_mut(PARALLEL_TILE).enumerate().for_each(|(t, seg)| {
                        let words = mask_row.get(t * (PARALLEL_TILE / 32)..).unwrap_or(&[]);
                        apply_segment(seg, words, neg);
                    });
                } else {
                    apply_segment(row, mask_row, neg);
                }
            });
        } else {
            for (r, row) in data.chunks_mut(row_stride).enumerate() {
                if let (Some(mask_row), Some(row)) = (self.mask_row(r), row.get_mut(..vocab)) {
                    apply_segment(row, mask_row, neg);
                }
            }
        }
    }
}
