//! The simulated model on a GPU (feature `cuda`): the same logits as
//! [`SimulatedModel`](super::SimulatedModel), bit for bit, but made and kept in
//! device memory, with the forward's time spent by a kernel spinning on the device.
//!
//! It measures what a GPU deployment pays for structure: the masks are applied by
//! grammask-gpu's kernel to device logits, tokens are drawn on the device
//! ([`DeviceSampler`](crate::sampling::DeviceSampler)), and only the chosen ids cross
//! back to the host. The host thread is free while the spin runs, as with a real
//! GPU forward; the forward returns when the logits are written (the router's step
//! then knows the logits are ready, as with the host model).

use super::simulated::{base_value, SimulatedCache, BASE_ROWS, SPIKES};
use super::{DeviceLogits, Forward, ForwardRow, ForwardTime, Model, ModelError, StepLogits};
use crate::step::SeqId;
use grammask_gpu::cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use grammask_gpu::{cuda_context, load_module, Device};
use std::sync::Arc;

/// The kernels' source.
const SOURCE: &str = include_str!("simulated.cu");

fn cuda_err(op: &str) -> impl FnOnce(grammask_gpu::cudarc::driver::DriverError) -> ModelError + '_ {
    move |e| ModelError(format!("CUDA {op}: {e}"))
}

/// The simulated model on a GPU (feature `cuda`): the same logits as
/// [`SimulatedModel`](super::SimulatedModel), bit for bit, but made and kept in
/// device memory, with the forward's time spent by a kernel spinning on the device.
pub struct CudaSimulatedModel {
    cache: SimulatedCache,
    time: ForwardTime,
    stream: Arc<CudaStream>,
    device: Device,
    spin: CudaFunction,
    rows_fn: CudaFunction,
    base: CudaSlice<f32>,
    plans_host: Vec<u32>,
    plans: CudaSlice<u32>,
    logits: CudaSlice<f32>,
    ordinal: usize,
}

impl std::fmt::Debug for CudaSimulatedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaSimulatedModel")
            .field("vocab", &self.cache.vocab)
            .field("device", &self.ordinal)
            .finish()
    }
}

impl CudaSimulatedModel {
    /// `vocab` columns on CUDA device `ordinal`, logits seeded by `seed` (the same as
    /// `SimulatedModel::new(vocab, seed, _)`), each forward spinning on the device for
    /// `time` (sleep or spin: the host waits for the device either way).
    pub fn new(vocab: usize, seed: u64, time: ForwardTime, ordinal: usize) -> Result<Self, ModelError> {
        let ctx = cuda_context(ordinal).map_err(|e| ModelError(e.to_string()))?;
        // A stream of the model's own (non-blocking): the legacy default stream would
        // serialize with the mask upload stream.
        let stream = ctx.new_stream().map_err(cuda_err("cuStreamCreate"))?;
        let (module, _arch) = load_module(&ctx, SOURCE, "grammask_router_simulated.cu")
            .map_err(|e| ModelError(e.to_string()))?;
        let spin = module.load_function("grammask_sim_spin").map_err(cuda_err("cuModuleGetFunction"))?;
        let rows_fn = module.load_function("grammask_sim_rows").map_err(cuda_err("cuModuleGetFunction"))?;
        let host_base: Vec<f32> =
            (0..BASE_ROWS).flat_map(|k| (0..vocab).map(move |j| base_value(seed, k, j))).collect();
        let base = stream.clone_htod(&host_base).map_err(cuda_err("cuMemcpyHtoD"))?;
        let plans = stream.alloc_zeros::<u32>(1 + SPIKES).map_err(cuda_err("cuMemAlloc"))?;
        let logits = stream.alloc_zeros::<f32>(vocab.max(1)).map_err(cuda_err("cuMemAlloc"))?;
        let device = Device::cuda_on_stream(stream.clone()).map_err(|e| ModelError(e.to_string()))?;
        stream.synchronize().map_err(cuda_err("cuStreamSynchronize"))?;
        Ok(Self {
            cache: SimulatedCache::new(vocab, seed),
            time,
            stream,
            device,
            spin,
            rows_fn,
            base,
            plans_host: Vec::new(),
            plans,
            logits,
            ordinal,
        })
    }

    /// The stream the model runs on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl Model for CudaSimulatedModel {
    fn vocab_size(&self) -> usize {
        self.cache.vocab
    }

    fn forward(&mut self, rows: &[ForwardRow<'_>]) -> Result<Forward<'_>, ModelError> {
        let v = self.cache.vocab;
        let n = rows.len();
        if n > 65_535 {
            return Err(ModelError(format!("{n} rows in one forward: at most 65,535 on this model")));
        }
        self.plans_host.clear();
        for row in rows {
            let plan = self.cache.plan(row);
            self.plans_host.push(plan.base);
            self.plans_host.extend_from_slice(&plan.spikes);
        }
        if self.plans.len() < self.plans_host.len() {
            self.plans = self.stream.alloc_zeros(self.plans_host.len()).map_err(cuda_err("cuMemAlloc"))?;
        }
        if self.logits.len() < n * v {
            // Grown by powers of two of rows, so that a batch growing row by row
            // allocates rarely.
            let cap = n.next_power_of_two() * v;
            self.logits = self.stream.alloc_zeros(cap).map_err(cuda_err("cuMemAlloc"))?;
        }
        let ns = u64::try_from(self.time.total().as_nanos()).unwrap_or(u64::MAX);
        let vocab = i32::try_from(v).map_err(|_| ModelError(format!("vocabulary {v} too large")))?;
        self.stream
            .memcpy_htod(self.plans_host.as_slice(), &mut self.plans.slice_mut(..self.plans_host.len()))
            .map_err(cuda_err("cuMemcpyHtoDAsync"))?;
        // SAFETY: the kernels' signatures are the ones in simulated.cu; the buffers hold
        // `n` plans, `n × v` logits and BASE_ROWS × v base values, and every plan's base
        // row is < BASE_ROWS and its spikes < v (SimulatedCache::plan).
        unsafe {
            let one = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
            self.stream.launch_builder(&self.spin).arg(&ns).launch(one).map_err(cuda_err("launch"))?;
            if n > 0 && v > 0 {
                let blocks_x = v.div_ceil(256).min(128) as u32;
                let cfg = LaunchConfig {
                    grid_dim: (blocks_x, n as u32, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                self.stream
                    .launch_builder(&self.rows_fn)
                    .arg(&mut self.logits)
                    .arg(&self.base)
                    .arg(&self.plans)
                    .arg(&vocab)
                    .launch(cfg)
                    .map_err(cuda_err("launch"))?;
            }
        }
        // The forward is over when its logits are written: the step measures how long
        // it then waits for the masks, as with a host model.
        self.stream.synchronize().map_err(cuda_err("cuStreamSynchronize"))?;
        Ok(StepLogits::Cuda(DeviceLogits {
            logits: self.logits.slice_mut(..n * v),
            stream: self.stream.clone(),
        })
        .into())
    }

    fn release(&mut self, id: SeqId) {
        self.cache.release(id);
    }

    fn name(&self) -> String {
        format!(
            "simulated on CUDA device {} (vocab {}, seed {}, forward {:?})",
            self.ordinal,
            self.cache.vocab,
            self.cache.seed,
            self.time.total()
        )
    }

    fn device(&self) -> Option<Device> {
        Some(self.device.clone())
    }
}
