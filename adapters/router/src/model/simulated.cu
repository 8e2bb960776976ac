// The simulated model's device side (model/simulated_cuda.rs): a forward is a spin
// for the forward's time, then each row's logits, which are the host model's
// exactly (model/simulated.rs): a copy of one base row with the row's spikes
// written over it, a later spike winning at a shared column.

// Busy-waits `ns` nanoseconds of the GPU's global timer: the forward's time, spent
// on the device so that the host is free and later work on the stream waits for it.
extern "C" __global__ void grammask_sim_spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

#define SIM_SPIKES 16

// out[r, j] for r = blockIdx.y: base row plans[r][0], then spike i at column
// plans[r][1 + i] = 8 + i / 4. plans holds 1 + SIM_SPIKES words per row.
extern "C" __global__ void grammask_sim_rows(float* __restrict__ out, const float* __restrict__ base,
                                             const unsigned int* __restrict__ plans, int vocab) {
    __shared__ unsigned int plan[1 + SIM_SPIKES];
    const int r = blockIdx.y;
    if (threadIdx.x < 1 + SIM_SPIKES) plan[threadIdx.x] = plans[(size_t)r * (1 + SIM_SPIKES) + threadIdx.x];
    __syncthreads();
    const float* src = base + (size_t)plan[0] * vocab;
    float* dst = out + (size_t)r * vocab;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < vocab; j += gridDim.x * blockDim.x) {
        float x = src[j];
        for (int i = 0; i < SIM_SPIKES; ++i) {
            if (plan[1 + i] == (unsigned int)j) x = 8.0f + (float)i * 0.25f;
        }
        dst[j] = x;
    }
}
