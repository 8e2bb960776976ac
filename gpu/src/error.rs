//! The crate's one error type.

use crate::DType;

/// Everything that can go wrong when applying a bitmask. Bad shapes, strides,
/// indices and dtypes are reported before any memory is touched; CUDA problems
/// (no driver, no device, a failed compile or launch) are reported as values too,
/// never as panics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BitmaskError {
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

    /// A raw device pointer is not aligned for the element type it points to.
    #[error("{what} pointer {addr:#x} is not {align}-byte aligned")]
    Misaligned {
        /// Which buffer.
        what: &'static str,
        /// The address.
        addr: u64,
        /// The alignment it needs.
        align: usize,
    },

    /// A dtype name that is not f32, f16 or bf16.
    #[error("unsupported logits dtype {0:?}: supported are f32, f16 and bf16")]
    UnsupportedDType(String),

    /// Buffers live on different devices (for example host logits with a CUDA
    /// [`Device`](crate::Device)), or on different CUDA contexts.
    #[error("device mismatch: {0}")]
    DeviceMismatch(String),

    /// A size does not fit the index types the kernel uses.
    #[error("{what} = {value} is too large (limit {limit})")]
    TooLarge {
        /// Which size.
        what: &'static str,
        /// Its value.
        value: u128,
        /// The largest supported value.
        limit: u128,
    },

    /// CUDA cannot be used here: the driver or NVRTC library is missing, no device
    /// exists, or the crate was built without its `cuda` feature.
    #[error("CUDA unavailable: {0}")]
    CudaUnavailable(String),

    /// A CUDA driver call failed.
    #[error("CUDA error in {op}: {message}")]
    Cuda {
        /// What was being done.
        op: &'static str,
        /// The driver's error.
        message: String,
    },

    /// NVRTC failed to compile the kernel.
    #[error("NVRTC failed to compile the bitmask kernel: {0}")]
    Compile(String),
}

/// `Result` with [`BitmaskError`].
pub type Result<T, E = BitmaskError> = std::result::Result<T, E>;
