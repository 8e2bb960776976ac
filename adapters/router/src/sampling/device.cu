// Token choice on the device (sampling/device.rs): one block per logits row.
//
// Row r is drawn with inv_temp[r] > 0 from softmax(x * inv_temp[r]) by the
// Gumbel-max trick (argmax of x * t + Gumbel noise keyed by keys[r] and the column),
// and greedily (argmax of x, the lowest column among equals, as the host sampler)
// when inv_temp[r] == 0. Non-finite logits (masked: -inf) are never chosen. Writes
// the column, or 0xFFFFFFFF when no logit is finite, and its log-probability under
// softmax(x * t) (t = 1 for greedy).

// NVRTC has no <math.h>: infinity and the finiteness test from the bits.
#define SAMPLE_NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ bool grammask_finite(float x) {
    return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
}

#define SAMPLE_THREADS 1024
#define SAMPLE_WARPS (SAMPLE_THREADS / 32)

__device__ __forceinline__ unsigned long long grammask_mix64(unsigned long long x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

__device__ __forceinline__ bool grammask_better(float k, int i, float best, int best_i) {
    return k > best || (k == best && i < best_i);
}

extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS)
grammask_sample_rows(const float* __restrict__ logits, long long row_stride, int vocab,
                     const float* __restrict__ inv_temp, const unsigned long long* __restrict__ keys,
                     unsigned int* __restrict__ ids, float* __restrict__ logprobs) {
    __shared__ float s_key[SAMPLE_WARPS];
    __shared__ int s_idx[SAMPLE_WARPS];
    __shared__ float s_max[SAMPLE_WARPS];
    __shared__ float s_sum[SAMPLE_WARPS];
    const int r = blockIdx.x;
    const float* row = logits + (long long)r * row_stride;
    float t = inv_temp[r];
    const bool draw = t > 0.0f;
    if (!draw) t = 1.0f;
    const unsigned long long key = keys[r];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    float best = SAMPLE_NEG_INF, m = SAMPLE_NEG_INF;
    int best_i = 0x7fffffff;
    for (int j = threadIdx.x; j < vocab; j += SAMPLE_THREADS) {
        const float x = row[j];
        if (!grammask_finite(x)) continue;
        float s = x * t;
        if (!grammask_finite(s)) s = copysignf(3.0e38f, s);
        m = fmaxf(m, s);
        float k = s;
        if (draw) {
            // u in (0, 1): 24 random bits, centred in their interval.
            const unsigned long long h = grammask_mix64(key ^ ((unsigned long long)j * 0xD1B54A32D192ED03ull));
            const float u = ((float)(h >> 40) + 0.5f) * (1.0f / 16777216.0f);
            k -= logf(-logf(u));
        }
        if (grammask_better(k, j, best, best_i)) { best = k; best_i = j; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ok = __shfl_down_sync(0xffffffffu, best, o);
        const int oi = __shfl_down_sync(0xffffffffu, best_i, o);
        const float om = __shfl_down_sync(0xffffffffu, m, o);
        if (grammask_better(ok, oi, best, best_i)) { best = ok; best_i = oi; }
        m = fmaxf(m, om);
    }
    if (lane == 0) { s_key[warp] = best; s_idx[warp] = best_i; s_max[warp] = m; }
    __syncthreads();
    if (warp == 0) {
        best = s_key[lane]; best_i = s_idx[lane]; m = s_max[lane];
        for (int o = 16; o > 0; o >>= 1) {
            const float ok = __shfl_down_sync(0xffffffffu, best, o);
            const int oi = __shfl_down_sync(0xffffffffu, best_i, o);
            const float om = __shfl_down_sync(0xffffffffu, m, o);
            if (grammask_better(ok, oi, best, best_i)) { best = ok; best_i = oi; }
            m = fmaxf(m, om);
        }
        if (lane == 0) { s_idx[0] = best_i; s_max[0] = m; }
    }
    __syncthreads();
    best_i = s_idx[0];
    m = s_max[0];
    if (best_i == 0x7fffffff) {
        if (threadIdx.x == 0) { ids[r] = 0xFFFFFFFFu; logprobs[r] = SAMPLE_NEG_INF; }
        return;
    }
    // The normalizer of softmax(x * t), for the chosen token's log-probability.
    float z = 0.0f;
    for (int j = threadIdx.x; j < vocab; j += SAMPLE_THREADS) {
        const float x = row[j];
        if (!grammask_finite(x)) continue;
        float s = x * t;
        if (!grammask_finite(s)) s = copysignf(3.0e38f, s);
        z += expf(s - m);
    }
    for (int o = 16; o > 0; o >>= 1) z += __shfl_down_sync(0xffffffffu, z, o);
    __syncthreads();
    if (lane == 0) s_sum[warp] = z;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < SAMPLE_WARPS; ++w) total += s_sum[w];
        float s = row[best_i] * t;
        if (!grammask_finite(s)) s = copysignf(3.0e38f, s);
        ids[r] = (unsigned int)best_i;
        logprobs[r] = (s - m) - logf(total);
    }
}
