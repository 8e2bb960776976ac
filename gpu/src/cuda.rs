//! The CUDA path (feature `cuda`).
//!
//! # Why NVRTC at run time
//!
//! The kernel source (`kernel/bitmask.cu`, embedded with `include_str!`) is compiled
//! by NVRTC the first time a [`CudaBitmaskKernel`] is created for a context, rather
//! than built ahead with `nvcc` and embedded as PTX:
//!
//! * building the crate needs no CUDA toolkit: CI and CPU-only machines compile it
//!   unchanged, and cudarc loads `libcuda`/`libnvrtc` only when a kernel is made;
//! * the PTX targets the device actually present (the newest virtual architecture
//!   NVRTC supports that does not exceed the device's compute capability), instead
//!   of a lowest common denominator chosen at build time;
//! * the PTX is always one the installed NVRTC and driver agree on, which avoids
//!   `CUDA_ERROR_UNSUPPORTED_PTX_VERSION` when the build machine's toolkit is newer
//!   than the target's driver.
//!
//! The cost is one compile (tens of milliseconds, once per context; the driver also
//! caches the JIT result on disk), paid in [`CudaBitmaskKernel::new`], never in the
//! per-step path. [`CudaBitmaskKernel::shared`] keeps one kernel per context for
//! the whole process.
//!
//! # Launch
//!
//! One launch per call, on the caller's stream, with no host synchronisation and,
//! when every buffer is already on the device, no allocation or copy. Host-resident
//! `indices` (or a host bitmask) are copied with a stream-ordered allocation and an
//! asynchronous copy; the driver stages pageable memory, so the call still does not
//! wait for the device.
//!
//! Device-resident `indices` cannot be validated on the host without a sync: the
//! kernel skips any out-of-range entry (touching no memory) and raises a flag that
//! [`CudaBitmaskKernel::take_index_error`] reads.
//!
//! # CUDA graphs
//!
//! With the bitmask (and `indices`, if any) already on the device, a call is one
//! `cuLaunchKernel` and nothing else: no host synchronisation, no allocation, no
//! copy, no NVRTC work (the kernel is compiled once, in
//! [`CudaBitmaskKernel::new`]). Such a call can be captured into a CUDA graph and
//! replayed; the graph holds the buffers' addresses, so a replay applies whatever
//! mask the same device buffer holds then. To capture:
//!
//! * create the kernel (`Device::cuda*`, [`CudaBitmaskKernel::shared`]) before
//!   capturing, and capture on a stream of your own (the legacy default stream
//!   cannot be captured);
//! * pass device-resident buffers ([`CudaBitmaskKernel::apply`] with
//!   [`CudaIndices::Device`], or [`CudaBitmaskKernel::apply_raw`]): a host bitmask or
//!   host `indices` means an allocation and a copy from pageable memory;
//! * cudarc's cross-stream event tracking (on by default once a context has a
//!   stream of its own) makes every use of a cudarc buffer wait on an event recorded
//!   earlier, which stream capture rejects for events recorded outside it: call
//!   `CudaContext::disable_event_tracking` before allocating the buffers (as
//!   cudarc's own graph tests do), or pass raw pointers through `apply_raw`. If a
//!   launch fails while the stream is capturing, the error says so;
//! * do not call [`CudaBitmaskKernel::take_index_error`] during capture (it
//!   synchronises).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{CUdevice_attribute, CUdeviceptr};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, CudaView, DevicePtr, DevicePtrMut,
    DeviceSlice, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions};

use crate::error::{BitmaskError, Result};
use crate::plan::{plan_launch, KERNEL_NAMES};
use crate::{check_rows, ApplyError, DType, LogitElem, LogitsLayout, MaskLayout, MaskWord};

/// The CUDA source of the kernels, compiled at run time with NVRTC.
pub const KERNEL_SOURCE: &str = include_str!("kernel/bitmask.cu");

/// `indices` for the CUDA path.
#[derive(Debug)]
pub enum CudaIndices<'a> {
    /// On the host: validated (typed errors) and copied asynchronously.
    Host(&'a [i32]),
    /// On the device: used in place; out-of-range entries are skipped by the kernel
    /// and reported by [`CudaBitmaskKernel::take_index_error`].
    Device(&'a CudaView<'a, i32>),
}

fn driver_err(op: &'static str) -> impl FnOnce(cudarc::driver::DriverError) -> BitmaskError {
    move |e| BitmaskError::Cuda { op, message: e.to_string() }
}

/// A failed launch, explained when `stream` is being captured: the usual cause
/// then is a wait on a cudarc event recorded outside the capture (see the module
/// docs, "CUDA graphs"). Only runs on the error path, so launches pay nothing for it.
fn launch_err(stream: &CudaStream, e: cudarc::driver::DriverError) -> BitmaskError {
    use cudarc::driver::sys::CUstreamCaptureStatus;
    // SAFETY: the stream is alive (borrowed); querying capture status is allowed
    // during capture. The raw call, unlike CudaStream::capture_status, does not
    // consume the context's pending error.
    let status = unsafe { cudarc::driver::result::stream::is_capturing(stream.cu_stream()) };
    let message = match status {
        Ok(CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE) | Err(_) => e.to_string(),
        Ok(status) => format!(
            "{e} while the stream is being captured ({status:?}); a capturable call needs the bitmask and \
             indices on the device and no cudarc event waits (disable the context's event tracking before \
             allocating the buffers, or use apply_raw)"
        ),
    };
    BitmaskError::Cuda { op: "cuLaunchKernel", message }
}

fn compile_err(name: &str, e: CompileError) -> BitmaskError {
    match e {
        CompileError::CompileError { nvrtc, options, log } => BitmaskError::Compile(format!(
            "{name}: {nvrtc:?} with options {options:?}: {}",
            log.to_string_lossy()
        )),
        other => BitmaskError::Compile(format!("{name}: {other:?}")),
    }
}

/// Runs `f`, turning a panic inside cudarc (a library or symbol that fails to
/// load) into [`BitmaskError::CudaUnavailable`].
fn guarded<R>(what: &str, f: impl FnOnce() -> Result<R>) -> Result<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(BitmaskError::CudaUnavailable(format!("{what}: {msg}")))
        }
    }
}

fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver library.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the NVRTC library.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Whether a CUDA driver with at least one device can be used (never panics).
pub fn cuda_available() -> bool {
    driver_present()
        && guarded("device count", || CudaContext::device_count().map_err(driver_err("cuInit")))
            .is_ok_and(|n| n > 0)
}

/// Opens (retains) the primary context of device `ordinal`, or explains why not.
pub fn cuda_context(ordinal: usize) -> Result<Arc<CudaContext>> {
    if !driver_present() {
        return Err(BitmaskError::CudaUnavailable(
            "the CUDA driver library (libcuda.so.1 / nvcuda.dll) could not be loaded".into(),
        ));
    }
    guarded("opening the CUDA context", || {
        let count =
            CudaContext::device_count().map_err(|e| BitmaskError::CudaUnavailable(format!("cuInit: {e}")))?;
        if count <= 0 || ordinal >= count as usize {
            return Err(BitmaskError::CudaUnavailable(format!(
                "device {ordinal} requested, {count} CUDA device(s) present"
            )));
        }
        CudaContext::new(ordinal).map_err(driver_err("cuDevicePrimaryCtxRetain"))
    })
}

/// The compiled bitmask kernels of one CUDA context.
#[derive(Debug)]
pub struct CudaBitmaskKernel {
    ctx: Arc<CudaContext>,
    funcs: Vec<CudaFunction>,
    sm_count: u32,
    arch: String,
    error_flag: Mutex<CudaSlice<u32>>,
    error_flag_ptr: CUdeviceptr,
}

static SHARED: Mutex<Vec<Arc<CudaBitmaskKernel>>> = Mutex::new(Vec::new());

/// Chooses the NVRTC target: the newest virtual architecture NVRTC supports that
/// is not newer than the device.
fn nvrtc_arch(major: i32, minor: i32) -> String {
    let device = major * 10 + minor;
    let mut supported: Vec<i32> = Vec::new();
    // SAFETY: plain NVRTC queries writing into a buffer of the size NVRTC reports.
    unsafe {
        let mut n = 0i32;
        if cudarc::nvrtc::sys::nvrtcGetNumSupportedArchs(&mut n).result().is_ok() && n > 0 {
            let mut archs = vec![0i32; n as usize];
            if cudarc::nvrtc::sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()).result().is_ok() {
                supported = archs;
            }
        }
    }
    let best = supported.iter().copied().filter(|&a| a <= device).max();
    let arch = best.or_else(|| supported.iter().copied().min()).unwrap_or(device);
    format!("compute_{arch}")
}

/// Compiles CUDA C `source` with NVRTC for the device of `ctx` (the newest virtual
/// architecture NVRTC supports that the device runs, as for the bitmask kernels: see
/// the module docs) and loads it into `ctx`; returns the module and the target
/// (e.g. `compute_90`). Callers with kernels of their own beside the bitmask's (a
/// router's device sampler, a simulated model) compile them the same way. Takes
/// tens of milliseconds: compile once, then launch.
///
/// [`BitmaskError::CudaUnavailable`] without NVRTC; [`BitmaskError::Compile`] with
/// NVRTC's log when the source does not compile.
pub fn load_module(ctx: &Arc<CudaContext>, source: &str, name: &str) -> Result<(Arc<CudaModule>, String)> {
    if !nvrtc_present() {
        return Err(BitmaskError::CudaUnavailable(
            "the NVRTC library (libnvrtc.so) could not be loaded; put the CUDA toolkit's lib64 \
             directory on LD_LIBRARY_PATH"
                .into(),
        ));
    }
    guarded("compiling a CUDA module", || {
        let (major, minor) = ctx.compute_capability().map_err(driver_err("cuDeviceGetAttribute"))?;
        let arch = nvrtc_arch(major, minor);
        let opts = CompileOptions {
            options: vec![format!("--gpu-architecture={arch}")],
            name: Some(name.into()),
            ..Default::default()
        };
        let ptx = compile_ptx_with_opts(source, opts).map_err(|e| compile_err(name, e))?;
        let module = ctx.load_module(ptx).map_err(driver_err("cuModuleLoadData"))?;
        Ok((module, arch))
    })
}

impl CudaBitmaskKernel {
    /// Compiles the kernels with NVRTC and loads them into `ctx`. Takes tens of
    /// milliseconds; prefer [`CudaBitmaskKernel::shared`].
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        guarded("compiling the bitmask kernel", || {
            let (module, arch) = load_module(ctx, KERNEL_SOURCE, "grammask_bitmask.cu")?;
            let funcs = KERNEL_NAMES
                .iter()
                .map(|name| module.load_function(name).map_err(driver_err("cuModuleGetFunction")))
                .collect::<Result<Vec<_>>>()?;
            let sm = ctx
                .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .map_err(driver_err("cuDeviceGetAttribute"))?;
            let stream = ctx.default_stream();
            let flag = stream.alloc_zeros::<u32>(1).map_err(driver_err("cuMemAlloc"))?;
            let flag_ptr = {
                let (ptr, _sync) = flag.device_ptr(&stream);
                ptr
            };
            // The flag is used through its raw pointer from any stream: make sure
            // the zeroing is done first.
            stream.synchronize().map_err(driver_err("cuStreamSynchronize"))?;
            Ok(CudaBitmaskKernel {
                ctx: ctx.clone(),
                funcs,
                sm_count: u32::try_from(sm).unwrap_or(1).max(1),
                arch,
                error_flag: Mutex::new(flag),
                error_flag_ptr: flag_ptr,
            })
        })
    }

    /// The process-wide kernel for `ctx`, compiled on first use.
    pub fn shared(ctx: &Arc<CudaContext>) -> Result<Arc<Self>> {
        let mut cache = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = cache.iter().find(|k| *k.ctx == **ctx) {
            return Ok(k.clone());
        }
        let k = Arc::new(Self::new(ctx)?);
        cache.push(k.clone());
        Ok(k)
    }

    /// The context the kernels are loaded in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The NVRTC target the kernels were compiled for (e.g. `compute_90`).
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// Multiprocessors on the device (used to size the grid).
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    fn check_ctx(&self, what: &str, ctx: &Arc<CudaContext>) -> Result<()> {
        if **ctx != *self.ctx {
            return Err(BitmaskError::DeviceMismatch(format!(
                "{what} belongs to CUDA context of device {}, the kernel to device {}",
                ctx.ordinal(),
                self.ctx.ordinal()
            )));
        }
        Ok(())
    }

    /// Applies `bitmask` to device `logits` in place on `stream`, with the same
    /// semantics as [`apply_token_bitmask_inplace_cpu`](crate::apply_token_bitmask_inplace_cpu).
    /// Asynchronous: returns once the kernel is queued.
    ///
    /// `logits` and `bitmask` may be any cudarc device buffer or view of this
    /// kernel's context. Shapes and host `indices` are checked first (typed errors,
    /// nothing queued).
    pub fn apply<T, W, L, M>(
        &self,
        stream: &Arc<CudaStream>,
        logits: &mut L,
        layout: LogitsLayout,
        bitmask: &M,
        mask_layout: MaskLayout,
        indices: Option<CudaIndices<'_>>,
    ) -> Result<()>
    where
        T: LogitElem,
        W: MaskWord,
        L: DevicePtrMut<T>,
        M: DevicePtr<W>,
    {
        self.check_ctx("the stream", stream.context())?;
        self.check_ctx("the logits", logits.stream().context())?;
        self.check_ctx("the bitmask", bitmask.stream().context())?;
        layout.check_len(logits.len())?;
        mask_layout.check_len(bitmask.len())?;
        let host_indices = match &indices {
            None => {
                check_rows(&layout, &mask_layout, None)?;
                None
            }
            Some(CudaIndices::Host(idx)) => {
                check_rows(&layout, &mask_layout, Some(idx))?;
                Some(*idx)
            }
            Some(CudaIndices::Device(view)) => {
                self.check_ctx("the indices", view.stream().context())?;
                None
            }
        };
        let rows = match &indices {
            None => layout.batch,
            Some(CudaIndices::Host(idx)) => idx.len(),
            Some(CudaIndices::Device(view)) => view.len(),
        };
        if rows == 0 || layout.vocab == 0 || layout.batch == 0 {
            return Ok(());
        }
        // Host indices travel to the device with a stream-ordered allocation.
        let staged = match host_indices {
            Some(idx) => Some(stream.clone_htod(idx).map_err(driver_err("cuMemcpyHtoDAsync"))?),
            None => None,
        };
        let (logits_ptr, _logits_sync) = logits.device_ptr_mut(stream);
        let (mask_ptr, _mask_sync) = bitmask.device_ptr(stream);
        let idx_ptr = match (&staged, &indices) {
            (Some(s), _) => Some(s.device_ptr(stream)),
            (None, Some(CudaIndices::Device(view))) => Some(view.device_ptr(stream)),
            _ => None,
        };
        // SAFETY: the pointers come from live buffers of the checked lengths and of
        // this kernel's context, and their sync guards live until after the launch.
        unsafe {
            self.launch(
                stream,
                logits_ptr,
                T::DTYPE,
                layout,
                mask_ptr,
                mask_layout,
                idx_ptr.as_ref().map(|(p, _)| (*p, rows)),
            )
        }
    }

    /// Copies a host bitmask to the device (asynchronously, stream-ordered) and
    /// applies it. Convenient when masks are filled on the CPU each step; a
    /// persistent device (or pinned) buffer avoids the allocation.
    pub fn apply_host_mask<T, W, L>(
        &self,
        stream: &Arc<CudaStream>,
        logits: &mut L,
        layout: LogitsLayout,
        bitmask: &[W],
        mask_layout: MaskLayout,
        indices: Option<CudaIndices<'_>>,
    ) -> Result<()>
    where
        T: LogitElem,
        W: MaskWord,
        L: DevicePtrMut<T>,
    {
        mask_layout.check_len(bitmask.len())?;
        let words: &[u32] = bytemuck::cast_slice(bitmask);
        if words.is_empty() {
            // Zero-length device buffers are awkward; an all-masked row still has
            // to be applied, so allocate one unused word.
            let dummy = stream.clone_htod(&[0u32]).map_err(driver_err("cuMemcpyHtoDAsync"))?;
            let view = dummy.slice(0..0);
            return self.apply::<T, u32, L, _>(stream, logits, layout, &view, mask_layout, indices);
        }
        let dev = stream.clone_htod(words).map_err(driver_err("cuMemcpyHtoDAsync"))?;
        self.apply::<T, u32, L, _>(stream, logits, layout, &dev, mask_layout, indices)
    }

    /// Applies a bitmask given as raw device pointers (for callers whose buffers
    /// come from another CUDA library, e.g. another cudarc version, candle or
    /// PyTorch). `indices`, if given, is a device pointer to that many `i32`s.
    ///
    /// # Safety
    ///
    /// `stream` must belong to this kernel's context; `logits` must point to a
    /// device buffer of `dtype` elements valid for `layout` (at least
    /// `(batch - 1) * row_stride + vocab` elements); `bitmask` to
    /// `mask_layout.rows * mask_layout.words` 32-bit words; and the buffers must
    /// stay alive, and not be used concurrently by other streams, until the queued
    /// kernel has run.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn apply_raw(
        &self,
        stream: &Arc<CudaStream>,
        logits: CUdeviceptr,
        dtype: DType,
        layout: LogitsLayout,
        bitmask: CUdeviceptr,
        mask_layout: MaskLayout,
        indices: Option<(CUdeviceptr, usize)>,
    ) -> Result<()> {
        self.check_ctx("the stream", stream.context())?;
        layout.len_bounds()?;
        if mask_layout.rows.checked_mul(mask_layout.words).is_none() {
            return Err(ApplyError::TooLarge {
                what: "bitmask words",
                value: mask_layout.rows as u128 * mask_layout.words as u128,
                limit: usize::MAX as u128,
            }
            .into());
        }
        if indices.is_none() {
            check_rows(&layout, &mask_layout, None)?;
        }
        for (what, addr) in [("bitmask", Some(bitmask)), ("indices", indices.map(|(p, _)| p))] {
            if let Some(addr) = addr.filter(|a| a % 4 != 0) {
                return Err(BitmaskError::Misaligned { what, addr, align: 4 });
            }
        }
        let rows = indices.map_or(layout.batch, |(_, n)| n);
        if rows == 0 || layout.vocab == 0 || layout.batch == 0 {
            return Ok(());
        }
        self.launch(stream, logits, dtype, layout, bitmask, mask_layout, indices)
    }

    /// Queues the kernel. Everything but the pointers has been validated.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch(
        &self,
        stream: &Arc<CudaStream>,
        logits: CUdeviceptr,
        dtype: DType,
        layout: LogitsLayout,
        bitmask: CUdeviceptr,
        mask_layout: MaskLayout,
        indices: Option<(CUdeviceptr, usize)>,
    ) -> Result<()> {
        let rows = indices.map_or(layout.batch, |(_, n)| n);
        let Some(plan) = plan_launch(dtype.size(), logits, &layout, rows, self.sm_count)? else {
            return Ok(());
        };
        let func = self
            .funcs
            .get(plan.kernel)
            .ok_or_else(|| BitmaskError::Compile(format!("kernel {} missing", plan.kernel)))?;
        let to_i64 = |what: &'static str, v: usize| {
            i64::try_from(v).map_err(|_| {
                BitmaskError::from(ApplyError::TooLarge { what, value: v as u128, limit: i64::MAX as u128 })
            })
        };
        let batch = to_i64("batch", layout.batch)?;
        let vocab = to_i64("vocab", layout.vocab)?;
        let row_stride = to_i64("row_stride", layout.row_stride)?;
        let mask_words = to_i64("mask words", mask_layout.words)?;
        let mask_rows = to_i64("mask rows", mask_layout.rows)?;
        let idx_ptr: CUdeviceptr = indices.map_or(0, |(p, _)| p);
        let neg_bits = dtype.neg_inf_bits();
        let flag_ptr = self.error_flag_ptr;
        let cfg = LaunchConfig { grid_dim: plan.grid, block_dim: plan.block, shared_mem_bytes: 0 };
        let mut args = stream.launch_builder(func);
        args.arg(&logits)
            .arg(&bitmask)
            .arg(&idx_ptr)
            .arg(&batch)
            .arg(&vocab)
            .arg(&row_stride)
            .arg(&mask_words)
            .arg(&mask_rows)
            .arg(&plan.chunks_per_row)
            .arg(&flag_ptr)
            .arg(&neg_bits);
        args.launch(cfg).map_err(|e| launch_err(stream, e))?;
        Ok(())
    }

    /// Whether any launch since the last call met an out-of-range device-resident
    /// index (those rows were left untouched). Synchronises `stream`, then clears
    /// the flag.
    pub fn take_index_error(&self, stream: &Arc<CudaStream>) -> Result<bool> {
        self.check_ctx("the stream", stream.context())?;
        let mut flag = self.error_flag.lock().unwrap_or_else(|e| e.into_inner());
        stream.synchronize().map_err(driver_err("cuStreamSynchronize"))?;
        let value = stream.clone_dtoh(&*flag).map_err(driver_err("cuMemcpyDtoH"))?;
        stream.memset_zeros(&mut *flag).map_err(driver_err("cuMemsetD8Async"))?;
        stream.synchronize().map_err(driver_err("cuStreamSynchronize"))?;
        Ok(value.first().copied().unwrap_or(0) != 0)
    }
}
