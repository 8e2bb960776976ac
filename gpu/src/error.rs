//! The crate's one error type.

use grammask::bitmask::ApplyError;

/// Everything that can go wrong when applying a bitmask. Bad shapes, strides,
/// indices and dtypes ([`BitmaskError::Apply`], the same [`ApplyError`] the CPU
/// path returns) are reported before any memory is touched; CUDA problems (no
/// driver, no device, a failed compile or launch) are reported as values too,
/// never as panics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BitmaskError {
    /// A bad shape, stride, index or dtype: the checks shared with the CPU path
    /// ([`grammask::bitmask`]), which reports them with the same type.
    #[error(transparent)]
    Apply(#[from] ApplyError),

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

    /// Buffers live on different devices (for example host logits with a CUDA
    /// [`Device`](crate::Device)), or on different CUDA contexts.
    #[error("device mismatch: {0}")]
    DeviceMismatch(String),

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

    /// NVRTC failed to compile a kernel source (the file name, then NVRTC's log).
    #[error("NVRTC failed to compile {0}")]
    Compile(String),
}

/// `Result` with [`BitmaskError`].
pub type Result<T, E = BitmaskError> = std::result::Result<T, E>;
