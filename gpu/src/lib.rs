//! Apply a packed token bitmask to logits in place: the one step of structured
//! generation that touches the model's output tensor.
//!
//! After a grammar matcher fills a bitmask (grammask's
//! `fill_next_token_bitmask`, or XGrammar's), every token the grammar does not
//! allow must get logit −∞ before sampling. This crate does that for a whole batch,
//! on the CPU or on a CUDA device, with one function and identical results.
//!
//! # Layout and semantics
//!
//! The layout and semantics are grammask's, documented once in
//! [`grammask::bitmask`]: XGrammar's `[batch, vocab]` logits (f32, f16, bf16, any
//! row stride) and `[rows, ceil(vocab / 32)]` bitmask of 32-bit words (`u32` or
//! `i32`, set bit = allowed); entry `r` of `indices` masks logits row `r` with
//! bitmask row `r` and rows not listed are untouched; tokens beyond the mask's bits
//! become −∞ and mask bits beyond the logits' vocabulary are ignored; allowed
//! logits are left bit-for-bit unchanged.
//!
//! Every shape, stride, index and dtype problem is a typed error
//! ([`BitmaskError::Apply`] holding grammask's [`ApplyError`]), reported before any
//! memory is written. No input makes the crate panic or touch memory outside the
//! described rows.
//!
//! # Devices
//!
//! [`apply_token_bitmask_inplace`] takes a [`Device`] and buffers wrapped in
//! [`Logits`], [`Bitmask`] and [`Indices`], so adapters call one function whether
//! the logits live in host memory or on a GPU:
//!
//! * [`Device::Cpu`] runs [`apply_token_bitmask_inplace_cpu`], which is grammask's
//!   one CPU implementation ([`grammask::bitmask::apply_token_bitmask`], re-exported
//!   here with the layout types under this crate's names): one mask word (32
//!   logits) at a time, branch-free and auto-vectorised, skipping all-ones words,
//!   and parallel over rows (rayon) once the batch is large. It is the default for
//!   the router.
//! * `Device::Cuda` (feature `cuda`, on by default) queues one kernel launch on the
//!   caller's stream, with no host synchronisation. The CUDA C source
//!   (`src/kernel/bitmask.cu`) is compiled at run time with NVRTC through
//!   [`cudarc`], which also loads the driver dynamically: the crate builds and its
//!   CPU path works on machines with no CUDA at all, and asking for a CUDA device
//!   there gives [`BitmaskError::CudaUnavailable`]. The `cuda` module explains the
//!   NVRTC choice and how to capture the call in a CUDA graph; `kernel/bitmask.cu`
//!   explains the kernel's design (whole 16-byte vectors: all-allowed ones skipped,
//!   all-disallowed ones stored without a read, mixed ones read, selected and
//!   stored whole; a warp-level fast path for all-ones words and rows).
//!
//! # Example
//!
//! ```
//! use grammask_gpu::{apply_token_bitmask_inplace, Bitmask, Device, Logits, LogitsLayout, MaskLayout};
//! use half::bf16;
//!
//! // A batch of 3 rows; the model's vocab (70) is padded to a row stride of 72,
//! // and the mask covers 64 tokens (2 words per row).
//! let layout = LogitsLayout::strided(3, 70, 72);
//! let mut logits = vec![bf16::from_f32(0.5); 3 * 72];
//! let mut mask = vec![u32::MAX; 3 * 2]; // everything allowed...
//! mask[2] = 0b1000; // ...except that row 1 allows only token 3 of its first word
//! mask[3] = 0;
//!
//! // Only rows 1 and 2 are constrained in this step.
//! apply_token_bitmask_inplace(
//!     &Device::cpu(),
//!     Logits::Host(&mut logits),
//!     layout,
//!     Bitmask::Host(&mask),
//!     MaskLayout::new(3, 2),
//!     Some(grammask_gpu::Indices::Host(&[1, 2])),
//! )?;
//!
//! let finite = |r: usize| (0..70).filter(|&j| logits[r * 72 + j].to_f32().is_finite()).count();
//! assert_eq!(finite(0), 70); // not listed: untouched, even beyond the mask
//! assert_eq!(finite(1), 1); // only token 3
//! assert_eq!(finite(2), 64); // tokens 64..70 lie beyond the mask: masked
//! assert_eq!(logits[2 * 72 + 71], bf16::from_f32(0.5)); // padding is never touched
//! # Ok::<(), grammask_gpu::BitmaskError>(())
//! ```
//!
//! On a GPU the same call takes `Device::cuda(0)?` (or
//! `Device::cuda_on_stream(stream)?`) and `Logits::Cuda(slice.as_view_mut())`.

#![deny(missing_docs)]

#[cfg(feature = "cuda")]
pub mod cuda;
mod error;
pub mod plan;

#[cfg(feature = "cuda")]
use std::sync::Arc;

#[cfg(feature = "cuda")]
pub use cuda::{cuda_available, cuda_context, load_module, CudaBitmaskKernel, CudaIndices, KERNEL_SOURCE};
#[cfg(feature = "cuda")]
pub use cudarc;
pub use error::{BitmaskError, Result};
/// The CPU path: grammask's implementation, under this crate's names.
pub use grammask::bitmask::{
    apply_token_bitmask as apply_token_bitmask_inplace_cpu,
    apply_token_bitmask_bytes as apply_token_bitmask_inplace_cpu_bytes,
    apply_token_bitmask_with as apply_token_bitmask_inplace_cpu_with, Parallelism, PARALLEL_MIN_ELEMENTS,
    PARALLEL_TILE,
};
/// Shapes, element types and validation, shared with the CPU path.
pub use grammask::bitmask::{
    cast_logits_bytes, check_rows, ApplyError, DType, Logit as LogitElem, LogitsLayout, MaskLayout, MaskWord,
};
pub use half;

#[cfg(feature = "cuda")]
use cudarc::driver::{CudaStream, CudaView, CudaViewMut};

/// Whether CUDA can be used here. Always `false` without the `cuda` feature.
#[cfg(not(feature = "cuda"))]
pub fn cuda_available() -> bool {
    false
}

/// Where the bitmask is applied.
#[derive(Debug, Clone)]
pub enum Device {
    /// The host, with the given [`Parallelism`].
    Cpu(Parallelism),
    /// A CUDA device: the kernels of one context and the stream to launch on.
    #[cfg(feature = "cuda")]
    Cuda(CudaTarget),
}

/// A CUDA launch target: compiled kernels plus the caller's stream (which must
/// belong to the kernels' context).
#[cfg(feature = "cuda")]
#[derive(Debug, Clone)]
pub struct CudaTarget {
    /// The compiled kernels.
    pub kernel: Arc<CudaBitmaskKernel>,
    /// The stream every launch is queued on.
    pub stream: Arc<CudaStream>,
}

impl Default for Device {
    fn default() -> Self {
        Device::cpu()
    }
}

impl Device {
    /// The CPU with [`Parallelism::Auto`].
    pub fn cpu() -> Self {
        Device::Cpu(Parallelism::Auto)
    }

    /// CUDA device `ordinal`, launching on its default stream. Compiles the kernel
    /// on first use in the process. [`BitmaskError::CudaUnavailable`] when there is
    /// no driver, no such device, no NVRTC, or the crate was built without the
    /// `cuda` feature.
    pub fn cuda(ordinal: usize) -> Result<Self> {
        #[cfg(feature = "cuda")]
        {
            let ctx = cuda_context(ordinal)?;
            let kernel = CudaBitmaskKernel::shared(&ctx)?;
            Ok(Device::Cuda(CudaTarget { kernel, stream: ctx.default_stream() }))
        }
        #[cfg(not(feature = "cuda"))]
        {
            Err(BitmaskError::CudaUnavailable(format!(
                "device {ordinal} requested, but grammask-gpu was built without its `cuda` feature"
            )))
        }
    }

    /// The CUDA device of `stream`, launching on `stream`.
    #[cfg(feature = "cuda")]
    pub fn cuda_on_stream(stream: Arc<CudaStream>) -> Result<Self> {
        let kernel = CudaBitmaskKernel::shared(stream.context())?;
        Ok(Device::Cuda(CudaTarget { kernel, stream }))
    }

    /// Whether this is a CUDA device.
    pub fn is_cuda(&self) -> bool {
        !matches!(self, Device::Cpu(_))
    }
}

/// The logits to mask: host memory or a CUDA view.
#[derive(Debug)]
pub enum Logits<'a, T> {
    /// Host memory.
    Host(&'a mut [T]),
    /// Device memory.
    #[cfg(feature = "cuda")]
    Cuda(CudaViewMut<'a, T>),
}

/// The bitmask: host memory or a CUDA view.
#[derive(Debug)]
pub enum Bitmask<'a, W> {
    /// Host memory (copied asynchronously when the device is CUDA).
    Host(&'a [W]),
    /// Device memory.
    #[cfg(feature = "cuda")]
    Cuda(CudaView<'a, W>),
}

/// The rows to mask: host memory or a CUDA view.
#[derive(Debug)]
pub enum Indices<'a> {
    /// Host memory: validated, then (for CUDA) copied asynchronously.
    Host(&'a [i32]),
    /// Device memory: not validated on the host (that would need a sync); see
    /// [`CudaBitmaskKernel::take_index_error`].
    #[cfg(feature = "cuda")]
    Cuda(CudaView<'a, i32>),
}

impl<'a, T> From<&'a mut [T]> for Logits<'a, T> {
    fn from(v: &'a mut [T]) -> Self {
        Logits::Host(v)
    }
}

impl<'a, T> From<&'a mut Vec<T>> for Logits<'a, T> {
    fn from(v: &'a mut Vec<T>) -> Self {
        Logits::Host(v.as_mut_slice())
    }
}

impl<'a, W> From<&'a [W]> for Bitmask<'a, W> {
    fn from(v: &'a [W]) -> Self {
        Bitmask::Host(v)
    }
}

impl<'a, W> From<&'a Vec<W>> for Bitmask<'a, W> {
    fn from(v: &'a Vec<W>) -> Self {
        Bitmask::Host(v.as_slice())
    }
}

impl<'a> From<&'a [i32]> for Indices<'a> {
    fn from(v: &'a [i32]) -> Self {
        Indices::Host(v)
    }
}

#[cfg(feature = "cuda")]
impl<'a, T> From<CudaViewMut<'a, T>> for Logits<'a, T> {
    fn from(v: CudaViewMut<'a, T>) -> Self {
        Logits::Cuda(v)
    }
}

#[cfg(feature = "cuda")]
impl<'a, W> From<CudaView<'a, W>> for Bitmask<'a, W> {
    fn from(v: CudaView<'a, W>) -> Self {
        Bitmask::Cuda(v)
    }
}

#[cfg(feature = "cuda")]
impl<'a> From<CudaView<'a, i32>> for Indices<'a> {
    fn from(v: CudaView<'a, i32>) -> Self {
        Indices::Cuda(v)
    }
}

/// Sets `logits[r, t] = −∞` for every row `r` to mask and every token `t` the
/// bitmask disallows, on `device`. See the [crate docs](crate) for the layout and
/// the meaning of `indices`, and [`apply_token_bitmask_inplace_cpu`] for an
/// example.
///
/// On CUDA the call is asynchronous (the kernel is queued on the device's stream)
/// and shapes, contexts and host indices are checked before anything is queued.
/// Buffers on the wrong device give [`BitmaskError::DeviceMismatch`]; a host
/// bitmask is accepted on CUDA and copied asynchronously.
pub fn apply_token_bitmask_inplace<T: LogitElem, W: MaskWord>(
    device: &Device,
    logits: Logits<'_, T>,
    layout: LogitsLayout,
    bitmask: Bitmask<'_, W>,
    mask_layout: MaskLayout,
    indices: Option<Indices<'_>>,
) -> Result<()> {
    match device {
        Device::Cpu(parallelism) => {
            // Irrefutable without the `cuda` feature.
            #[allow(irrefutable_let_patterns)]
            let Logits::Host(logits) = logits
            else {
                return Err(BitmaskError::DeviceMismatch("CUDA logits passed with Device::Cpu".into()));
            };
            // Irrefutable without the `cuda` feature.
            #[allow(irrefutable_let_patterns)]
            let Bitmask::Host(bitmask) = bitmask
            else {
                return Err(BitmaskError::DeviceMismatch("a CUDA bitmask passed with Device::Cpu".into()));
            };
            let indices = match indices {
                None => None,
                Some(Indices::Host(idx)) => Some(idx),
                #[cfg(feature = "cuda")]
                Some(Indices::Cuda(_)) => {
                    return Err(BitmaskError::DeviceMismatch("CUDA indices passed with Device::Cpu".into()))
                }
            };
            Ok(apply_token_bitmask_inplace_cpu_with(
                *parallelism,
                logits,
                layout,
                bitmask,
                mask_layout,
                indices,
            )?)
        }
        #[cfg(feature = "cuda")]
        Device::Cuda(target) => {
            let Logits::Cuda(mut logits) = logits else {
                return Err(BitmaskError::DeviceMismatch(
                    "host logits passed with a CUDA device; copy them to the device or use Device::Cpu"
                        .into(),
                ));
            };
            let cuda_indices = match &indices {
                None => None,
                Some(Indices::Host(idx)) => Some(CudaIndices::Host(idx)),
                Some(Indices::Cuda(view)) => Some(CudaIndices::Device(view)),
            };
            match bitmask {
                Bitmask::Cuda(mask) => {
                    target.kernel.apply(&target.stream, &mut logits, layout, &mask, mask_layout, cuda_indices)
                }
                Bitmask::Host(mask) => target.kernel.apply_host_mask(
                    &target.stream,
                    &mut logits,
                    layout,
                    mask,
                    mask_layout,
                    cuda_indices,
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_are_send_and_sync() {
        send_sync::<Device>();
        send_sync::<BitmaskError>();
        #[cfg(feature = "cuda")]
        send_sync::<CudaBitmaskKernel>();
    }
}
