//! Shapes, element types, and the validation every bitmask application performs
//! (the CPU path here and the CUDA path of `grammask-gpu`).

use std::fmt;
use std::str::FromStr;

use half::{bf16, f16};

/// Why a bitmask cannot be applied: a bad shape, stride, index or element type.
/// Every check runs before any memory is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// The row stride is smaller than the vocabulary, so rows would overlap.
    #[error("bad row stride: row_stride {row_stride} < vocab {vocab}")]
    BadStride {
        /// Logical columns per row.
        vocab: usize,
        /// Elements between the starts of consecutive rows.
        row_stride: usize,
    },

    /// The logits buffer does not have the length the layout implies.
    #[error(
        "logits shape mismatch: buffer holds {len} elements, but [batch {batch}, vocab {vocab}] \
         with row stride {row_stride} needs between {min} and {max}"
    )]
    LogitsLen {
        /// Elements in the buffer.
        len: usize,
        /// Rows in the layout.
        batch: usize,
        /// Columns in the layout.
        vocab: usize,
        /// Row stride in the layout.
        row_stride: usize,
        /// Smallest acceptable length: `(batch - 1) * row_stride + vocab`.
        min: usize,
        /// Largest acceptable length: `batch * row_stride`.
        max: usize,
    },

    /// The bitmask buffer does not hold exactly `rows * words` words.
    #[error("bitmask shape mismatch: buffer holds {len} words, layout [{rows}, {words}] needs {expected}")]
    MaskLen {
        /// Words in the buffer.
        len: usize,
        /// Rows in the mask layout.
        rows: usize,
        /// Words per row in the mask layout.
        words: usize,
        /// `rows * words`.
        expected: usize,
    },

    /// Without `indices`, the bitmask must have one row per logits row.
    #[error("bitmask has {mask_rows} rows but logits have {batch}; pass indices to mask a subset")]
    MaskRowsMismatch {
        /// Logits rows.
        batch: usize,
        /// Bitmask rows.
        mask_rows: usize,
    },

    /// An entry of `indices` is negative or names a row that the logits or the
    /// bitmask do not have.
    #[error("indices[{position}] = {index} is out of range (logits rows {batch}, bitmask rows {mask_rows})")]
    IndexOutOfRange {
        /// Position of the entry in `indices`.
        position: usize,
        /// The entry.
        index: i64,
        /// Logits rows.
        batch: usize,
        /// Bitmask rows.
        mask_rows: usize,
    },

    /// A buffer does not hold the element type the call expects, or its bytes
    /// cannot be viewed as that type (length or alignment).
    #[error("dtype mismatch: expected {expected}, got {found}")]
    DTypeMismatch {
        /// What the call expected.
        expected: DType,
        /// What it got.
        found: String,
    },

    /// A dtype name (or element size) that is not f32, f16 or bf16.
    #[error("unsupported logits dtype {0:?}: supported are f32, f16 and bf16")]
    UnsupportedDType(String),

    /// A size does not fit the index types used to address it.
    #[error("{what} = {value} is too large (limit {limit})")]
    TooLarge {
        /// Which size.
        what: &'static str,
        /// Its value.
        value: u128,
        /// The largest supported value.
        limit: u128,
    },
}

type Result<T, E = ApplyError> = std::result::Result<T, E>;

/// Element type of the logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// Bit pattern of −∞ in this type (in the low bits of the `u32`).
    pub const fn neg_inf_bits(self) -> u32 {
        match self {
            DType::F32 => 0xff80_0000,
            DType::F16 => 0xfc00,
            DType::BF16 => 0xff80,
        }
    }

    /// Canonical lower-case name (`"f32"`, `"f16"`, `"bf16"`).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = ApplyError;

    /// Accepts the names frameworks use: `f32`/`float32`/`float`, `f16`/`float16`/
    /// `half`, `bf16`/`bfloat16` (case-insensitive, an optional `torch.` prefix).
    fn from_str(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        let name = lower.strip_prefix("torch.").unwrap_or(&lower);
        match name {
            "f32" | "float32" | "float" | "fp32" => Ok(DType::F32),
            "f16" | "float16" | "half" | "fp16" => Ok(DType::F16),
            "bf16" | "bfloat16" => Ok(DType::BF16),
            _ => Err(ApplyError::UnsupportedDType(s.to_string())),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
    impl Sealed for u32 {}
    impl Sealed for i32 {}
}

/// A logits element type: `f32`, [`half::f16`] or [`half::bf16`]. Sealed.
pub trait Logit: sealed::Sealed + bytemuck::Pod + Send + Sync + fmt::Debug + 'static {
    /// The runtime tag of this type.
    const DTYPE: DType;
    /// −∞ in this type.
    const NEG_INFINITY: Self;
}

impl Logit for f32 {
    const DTYPE: DType = DType::F32;
    const NEG_INFINITY: Self = f32::NEG_INFINITY;
}

impl Logit for f16 {
    const DTYPE: DType = DType::F16;
    const NEG_INFINITY: Self = f16::NEG_INFINITY;
}

impl Logit for bf16 {
    const DTYPE: DType = DType::BF16;
    const NEG_INFINITY: Self = bf16::NEG_INFINITY;
}

/// A bitmask word: `u32` (grammask) or `i32` (XGrammar / PyTorch, which lack
/// `uint32`). Only the bits matter. Sealed.
pub trait MaskWord: sealed::Sealed + bytemuck::Pod + Send + Sync + fmt::Debug + 'static {
    /// The word's 32 bits.
    fn bits(self) -> u32;
}

impl MaskWord for u32 {
    #[inline(always)]
    fn bits(self) -> u32 {
        self
    }
}

impl MaskWord for i32 {
    #[inline(always)]
    fn bits(self) -> u32 {
        self as u32
    }
}

/// Shape of a logits buffer: `batch` rows of `vocab` logical columns, row `r`
/// starting at element `r * row_stride` (`row_stride >= vocab`; the gap is model
/// padding and is never touched).
///
/// A buffer for this layout holds between `(batch - 1) * row_stride + vocab` and
/// `batch * row_stride` elements (the last row need not be padded), or none when
/// `batch == 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LogitsLayout {
    /// Number of rows.
    pub batch: usize,
    /// Logical columns per row: the model's vocabulary size.
    pub vocab: usize,
    /// Elements from the start of one row to the start of the next.
    pub row_stride: usize,
}

impl LogitsLayout {
    /// A dense `[batch, vocab]` layout (`row_stride == vocab`).
    pub const fn contiguous(batch: usize, vocab: usize) -> Self {
        LogitsLayout { batch, vocab, row_stride: vocab }
    }

    /// A `[batch, vocab]` view with rows `row_stride` elements apart.
    pub const fn strided(batch: usize, vocab: usize, row_stride: usize) -> Self {
        LogitsLayout { batch, vocab, row_stride }
    }

    /// Checks the stride and returns the `(min, max)` buffer lengths (in elements)
    /// this layout accepts.
    pub fn len_bounds(&self) -> Result<(usize, usize)> {
        if self.row_stride < self.vocab {
            return Err(ApplyError::BadStride { vocab: self.vocab, row_stride: self.row_stride });
        }
        if self.batch == 0 {
            return Ok((0, 0));
        }
        let too_large = || ApplyError::TooLarge {
            what: "logits elements",
            value: self.batch as u128 * self.row_stride as u128,
            limit: isize::MAX as u128,
        };
        let max = self
            .batch
            .checked_mul(self.row_stride)
            .filter(|&m| m <= isize::MAX as usize)
            .ok_or_else(too_large)?;
        let min = max - (self.row_stride - self.vocab);
        Ok((min, max))
    }

    /// Checks that a buffer of `len` elements fits this layout.
    pub fn check_len(&self, len: usize) -> Result<()> {
        let (min, max) = self.len_bounds()?;
        if len < min || len > max {
            return Err(ApplyError::LogitsLen {
                len,
                batch: self.batch,
                vocab: self.vocab,
                row_stride: self.row_stride,
                min,
                max,
            });
        }
        Ok(())
    }
}

/// Shape of a bitmask buffer: `rows` rows of `words` 32-bit words, dense.
/// Bit `k` of word `w` of a row is token `32 * w + k`; a set bit means allowed.
/// `words` is normally [`words_per_row`](super::words_per_row)`(vocab)` for the
/// tokenizer's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MaskLayout {
    /// Number of rows.
    pub rows: usize,
    /// Words per row.
    pub words: usize,
}

impl MaskLayout {
    /// `rows` rows of `words` words.
    pub const fn new(rows: usize, words: usize) -> Self {
        MaskLayout { rows, words }
    }

    /// `rows` rows covering `vocab` tokens: `ceil(vocab / 32)` words each.
    pub const fn for_vocab(rows: usize, vocab: usize) -> Self {
        MaskLayout { rows, words: vocab.div_ceil(32) }
    }

    /// Checks that a buffer of `len` words is exactly this layout.
    pub fn check_len(&self, len: usize) -> Result<()> {
        let expected = self.rows.checked_mul(self.words).ok_or(ApplyError::TooLarge {
            what: "bitmask words",
            value: self.rows as u128 * self.words as u128,
            limit: usize::MAX as u128,
        })?;
        if len != expected {
            return Err(ApplyError::MaskLen { len, rows: self.rows, words: self.words, expected });
        }
        Ok(())
    }
}

/// Checks the pairing of logits rows, bitmask rows and `indices` (XGrammar's rule):
/// without indices every logits row is masked with the bitmask row of the same
/// number, so the row counts must be equal; with indices each entry `r` must name a
/// row of both (`0 <= r < batch` and `r < mask.rows`).
pub fn check_rows(layout: &LogitsLayout, mask: &MaskLayout, indices: Option<&[i32]>) -> Result<()> {
    match indices {
        None => {
            if mask.rows != layout.batch {
                return Err(ApplyError::MaskRowsMismatch { batch: layout.batch, mask_rows: mask.rows });
            }
        }
        Some(indices) => {
            for (position, &index) in indices.iter().enumerate() {
                let ok = usize::try_from(index).map(|r| r < layout.batch && r < mask.rows).unwrap_or(false);
                if !ok {
                    return Err(ApplyError::IndexOutOfRange {
                        position,
                        index: i64::from(index),
                        batch: layout.batch,
                        mask_rows: mask.rows,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Views raw bytes as logits of type `T`, checking length and alignment.
pub fn cast_logits_bytes<T: Logit>(bytes: &mut [u8]) -> Result<&mut [T]> {
    let (len, ptr) = (bytes.len(), bytes.as_ptr());
    bytemuck::try_cast_slice_mut::<u8, T>(bytes).map_err(|e| ApplyError::DTypeMismatch {
        expected: T::DTYPE,
        found: format!("{len} bytes at {ptr:p} ({e:?})"),
    })
}
