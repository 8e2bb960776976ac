//! Sampling device-resident logits (feature `cuda`).
//!
//! One kernel launch chooses a token for every row that needs nothing but its row
//! (greedy, or temperature alone: the Gumbel-max trick, keyed from the request's
//! random stream); only the chosen ids and their log-probabilities cross to the host.
//! A row whose request uses top-k, top-p or penalties is copied to the host and
//! drawn there by its [`Sampler`], exactly as for a host model.

use super::{NothingAllowed, Pick, Sampler};
use grammask_gpu::cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, DriverError, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;

/// The kernel's source.
const SOURCE: &str = include_str!("device.cu");
/// Threads per row (the kernel's `SAMPLE_THREADS`).
const THREADS: u32 = 1024;

/// The device could not sample the step (a CUDA failure, or logits of the wrong
/// shape); the router fails the step's rows with it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("device sampling: {0}")]
pub struct DeviceSamplingError(pub String);

fn cuda_err(op: &'static str) -> impl FnOnce(DriverError) -> DeviceSamplingError {
    move |e| DeviceSamplingError(format!("CUDA {op}: {e}"))
}

/// Chooses tokens from device logits.
///
/// Sampling device-resident logits (feature `cuda`).
pub struct DeviceSampler {
    stream: Arc<CudaStream>,
    func: CudaFunction,
    inv_temp: CudaSlice<f32>,
    keys: CudaSlice<u64>,
    ids: CudaSlice<u32>,
    logprobs: CudaSlice<f32>,
    host_temp: Vec<f32>,
    host_keys: Vec<u64>,
    host_row: Vec<f32>,
}

impl std::fmt::Debug for DeviceSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSampler").field("rows", &self.ids.len()).finish()
    }
}

impl DeviceSampler {
    /// A sampler launching on `stream` (compiles its kernel: once per model).
    pub fn new(stream: Arc<CudaStream>) -> Result<Self, DeviceSamplingError> {
        let (module, _) = grammask_gpu::load_module(stream.context(), SOURCE, "grammask_router_sample.cu")
            .map_err(|e| DeviceSamplingError(e.to_string()))?;
        let func = module.load_function("grammask_sample_rows").map_err(cuda_err("cuModuleGetFunction"))?;
        let alloc_err = cuda_err("cuMemAlloc");
        let inv_temp = stream.alloc_zeros::<f32>(1).map_err(alloc_err)?;
        let keys = stream.alloc_zeros::<u64>(1).map_err(cuda_err("cuMemAlloc"))?;
        let ids = stream.alloc_zeros::<u32>(1).map_err(cuda_err("cuMemAlloc"))?;
        let logprobs = stream.alloc_zeros::<f32>(1).map_err(cuda_err("cuMemAlloc"))?;
        Ok(Self {
            stream,
            func,
            inv_temp,
            keys,
            ids,
            logprobs,
            host_temp: Vec::new(),
            host_keys: Vec::new(),
            host_row: Vec::new(),
        })
    }

    /// Draws a token for each row of `logits` (`[samplers.len(), vocab]`,
    /// contiguous, on this sampler's context): row `r` with `samplers[r]`. Returns
    /// each row's token and log-probability (when its request asks for them), or
    /// [`NothingAllowed`] for a row with no finite logit. Waits for the device.
    pub fn sample(
        &mut self,
        logits: &CudaView<'_, f32>,
        vocab: usize,
        samplers: &mut [&mut Sampler],
    ) -> Result<Vec<Pick>, DeviceSamplingError> {
        let n = samplers.len();
        if logits.len() < n * vocab {
            return Err(DeviceSamplingError(format!("{} logits for {n} rows of {vocab}", logits.len())));
        }
        if n == 0 || vocab == 0 {
            return Ok(samplers.iter().map(|_| Err(NothingAllowed)).collect());
        }
        let vocab_i =
            i32::try_from(vocab).map_err(|_| DeviceSamplingError(format!("vocabulary {vocab} too large")))?;
        let grid = u32::try_from(n).map_err(|_| DeviceSamplingError(format!("{n} rows")))?;
        self.host_temp.clear();
        self.host_keys.clear();
        let mut on_host = Vec::new();
        for (r, s) in samplers.iter_mut().enumerate() {
            match s.device_draw() {
                Some(d) => {
                    self.host_temp.push(d.inv_temperature);
                    self.host_keys.push(d.key);
                }
                None => {
                    // Drawn on the host below; the kernel's greedy pick is ignored.
                    self.host_temp.push(0.0);
                    self.host_keys.push(0);
                    on_host.push(r);
                }
            }
        }
        if self.ids.len() < n {
            let cap = n.next_power_of_two();
            self.inv_temp = self.stream.alloc_zeros(cap).map_err(cuda_err("cuMemAlloc"))?;
            self.keys = self.stream.alloc_zeros(cap).map_err(cuda_err("cuMemAlloc"))?;
            self.ids = self.stream.alloc_zeros(cap).map_err(cuda_err("cuMemAlloc"))?;
            self.logprobs = self.stream.alloc_zeros(cap).map_err(cuda_err("cuMemAlloc"))?;
        }
        self.stream
            .memcpy_htod(self.host_temp.as_slice(), &mut self.inv_temp.slice_mut(..n))
            .map_err(cuda_err("cuMemcpyHtoDAsync"))?;
        self.stream
            .memcpy_htod(self.host_keys.as_slice(), &mut self.keys.slice_mut(..n))
            .map_err(cuda_err("cuMemcpyHtoDAsync"))?;
        let stride = vocab as i64;
        let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: the signature is device.cu's; `logits` holds n × vocab values and the
        // four small buffers at least n each.
        unsafe {
            self.stream
                .launch_builder(&self.func)
                .arg(logits)
                .arg(&stride)
                .arg(&vocab_i)
                .arg(&self.inv_temp)
                .arg(&self.keys)
                .arg(&mut self.ids)
                .arg(&mut self.logprobs)
                .launch(cfg)
                .map_err(cuda_err("cuLaunchKernel"))?;
        }
        let mut ids = vec![0u32; n];
        let mut lps = vec![0f32; n];
        self.stream
            .memcpy_dtoh(&self.ids.slice(..n), ids.as_mut_slice())
            .map_err(cuda_err("cuMemcpyDtoH"))?;
        self.stream
            .memcpy_dtoh(&self.logprobs.slice(..n), lps.as_mut_slice())
            .map_err(cuda_err("cuMemcpyDtoH"))?;
        self.stream.synchronize().map_err(cuda_err("cuStreamSynchronize"))?;
        let mut out: Vec<Pick> = ids
            .iter()
            .zip(&lps)
            .zip(samplers.iter())
            .map(|((&id, &lp), s)| {
                if id == u32::MAX {
                    Err(NothingAllowed)
                } else {
                    Ok((id, s.params().logprobs.then_some(lp)))
                }
            })
            .collect();
        for r in on_host {
            self.host_row.resize(vocab, 0.0);
            self.stream
                .memcpy_dtoh(&logits.slice(r * vocab..(r + 1) * vocab), self.host_row.as_mut_slice())
                .map_err(cuda_err("cuMemcpyDtoH"))?;
            self.stream.synchronize().map_err(cuda_err("cuStreamSynchronize"))?;
            out[r] = samplers[r].sample(&mut self.host_row);
        }
        Ok(out)
    }
}
