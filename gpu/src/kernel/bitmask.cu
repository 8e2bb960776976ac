// grammask-gpu: set logits to -inf wherever a packed token bitmask says "not allowed".
//
// Compiled at run time by NVRTC (see src/cuda.rs for why), so this file includes no
// header at all: it only uses compiler builtins (threadIdx, __shfl_sync, __all_sync,
// atomicOr). The kernels never look at logits as numbers. They store the bit pattern
// of -inf into the disallowed slots and leave every other slot untouched, so one
// 32-bit kernel serves f32 and one 16-bit kernel serves both f16 and bf16 (the host
// passes the right -inf pattern), and the result is bit-identical to the CPU path.
//
// Layout (XGrammar's):
//   logits  [batch, vocab] elements, row r starts at element r * row_stride
//   mask    [mask_rows, mask_words] 32-bit words, bit k of word w = token 32*w + k,
//           bit set = allowed
//   indices optional int32 list; entry i names a row r that is masked with mask row r
//           (the same row of both); rows not listed are untouched
// Tokens at or beyond 32 * mask_words are disallowed; mask bits at or beyond vocab are
// ignored.
//
// Work split: one warp owns a "chunk" of 32 mask words = 1024 logits of one row.
//   grid.x = rows to mask (batch, or the number of indices)
//   grid.y * warps-per-block = chunks per row
// Each lane loads one mask word (one coalesced 128-byte load per warp). If all 32
// words are all-ones (everything allowed) the warp returns at once: a row whose mask
// is all ones costs a read of its mask and nothing else. Otherwise the warp walks its
// 1024 logits as 16-byte vectors laid out so that each store instruction of the warp
// covers 512 contiguous bytes: lane l, iteration i handles the vector at element
// (32*i + l) * VEC, whose mask bits it fetches from the owning lane with __shfl_sync.
// A fully disallowed vector is one 16-byte store; a fully allowed one is skipped; a
// mixed one stores only its disallowed elements. Logits are never read.
//
// Bits for elements past `vocab` in the last word are forced to 1 (allowed), and
// words past the end of the row are all-ones, so no store ever leaves the row.

// Hook for the host-side emulation test (tests/emu): checks every vector store's
// alignment there; expands to nothing under NVRTC.
#ifndef GM_CHECK_ALIGN
#define GM_CHECK_ALIGN(p, bytes)
#endif

typedef unsigned int gm_u32;
typedef unsigned short gm_u16;
typedef long long gm_i64;

struct alignas(16) gm_v16 {
  gm_u32 a, b, c, d;
};
struct alignas(8) gm_v8 {
  gm_u32 a, b;
};

// Store BYTES bytes of the repeated pattern `pat` (a 32-bit word holding one or two
// copies of the element's -inf bits) at `p`, which is BYTES-aligned.
template <int BYTES>
struct GmFill;
template <>
struct GmFill<16> {
  static __device__ __forceinline__ void run(void* p, gm_u32 pat) {
    GM_CHECK_ALIGN(p, 16);
    gm_v16 v;
    v.a = pat;
    v.b = pat;
    v.c = pat;
    v.d = pat;
    *reinterpret_cast<gm_v16*>(p) = v;
  }
};
template <>
struct GmFill<8> {
  static __device__ __forceinline__ void run(void* p, gm_u32 pat) {
    GM_CHECK_ALIGN(p, 8);
    gm_v8 v;
    v.a = pat;
    v.b = pat;
    *reinterpret_cast<gm_v8*>(p) = v;
  }
};
template <>
struct GmFill<4> {
  static __device__ __forceinline__ void run(void* p, gm_u32 pat) {
    GM_CHECK_ALIGN(p, 4);
    *reinterpret_cast<gm_u32*>(p) = pat;
  }
};
template <>
struct GmFill<2> {
  static __device__ __forceinline__ void run(void* p, gm_u32 pat) {
    GM_CHECK_ALIGN(p, 2);
    *reinterpret_cast<gm_u16*>(p) = static_cast<gm_u16>(pat);
  }
};

// E: the element's bit type (gm_u32 for f32, gm_u16 for f16/bf16).
// VEC: elements per vector store (VEC * sizeof(E) <= 16); the host picks the largest
// VEC that the logits pointer and row stride are aligned for.
template <typename E, int VEC>
__device__ __forceinline__ void gm_apply_bitmask(
    E* __restrict__ logits,
    const gm_u32* __restrict__ mask,
    const int* __restrict__ indices,
    gm_i64 batch,
    gm_i64 vocab,
    gm_i64 row_stride,
    gm_i64 mask_words,
    gm_i64 mask_rows,
    int chunks_per_row,
    gm_u32* error_flag,
    gm_u32 neg_bits
) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int chunk = static_cast<int>(blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5));
  // Both exits below are uniform across the warp, as __shfl_sync/__all_sync require.
  if (chunk >= chunks_per_row) {
    return;
  }
  gm_i64 row = static_cast<gm_i64>(blockIdx.x);
  if (indices != nullptr) {
    row = static_cast<gm_i64>(indices[blockIdx.x]);
    // Device-resident indices cannot be checked on the host without a sync: a bad
    // entry touches no memory and raises a flag the host can read later.
    if (row < 0 || row >= batch || row >= mask_rows) {
      if (chunk == 0 && lane == 0) {
        atomicOr(error_flag, 1u);
      }
      return;
    }
  }

  const gm_i64 logit_words = (vocab + 31) >> 5;
  const gm_i64 word = static_cast<gm_i64>(chunk) * 32 + lane;
  gm_u32 bits = 0xffffffffu;
  if (word < logit_words) {
    bits = (word < mask_words) ? mask[row * mask_words + word] : 0u;
    const int tail = static_cast<int>(vocab & 31);
    if (tail != 0 && word == logit_words - 1) {
      bits |= 0xffffffffu << tail;
    }
  }
  // Fast path: everything in this chunk is allowed (or past the end of the row).
  if (__all_sync(0xffffffffu, bits == 0xffffffffu)) {
    return;
  }

  E* const base = logits + row * row_stride + static_cast<gm_i64>(chunk) * 1024;
  const gm_u32 pat = (sizeof(E) == 4) ? neg_bits : (neg_bits & 0xffffu) * 0x10001u;
  const E neg = static_cast<E>(neg_bits);
  constexpr gm_u32 kGroup = (1u << VEC) - 1u;

#pragma unroll
  for (int i = 0; i < 32 / VEC; ++i) {
    const int e = (i * 32 + lane) * VEC;  // element offset in the chunk
    const gm_u32 w = __shfl_sync(0xffffffffu, bits, e >> 5);
    const gm_u32 g = (w >> (e & 31)) & kGroup;
    if (g == kGroup) {
      continue;  // all allowed
    }
    E* const p = base + e;
    if (g == 0u) {
      GmFill<VEC * static_cast<int>(sizeof(E))>::run(p, pat);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        if (((g >> j) & 1u) == 0u) {
          p[j] = neg;
        }
      }
    }
  }
}

#define GRAMMASK_BITMASK_KERNEL(NAME, E, VEC)                                                  \
  extern "C" __global__ void __launch_bounds__(256) NAME(                                    \
      E* logits,                                                                             \
      const gm_u32* mask,                                                                    \
      const int* indices,                                                                    \
      gm_i64 batch,                                                                          \
      gm_i64 vocab,                                                                          \
      gm_i64 row_stride,                                                                     \
      gm_i64 mask_words,                                                                     \
      gm_i64 mask_rows,                                                                      \
      int chunks_per_row,                                                                    \
      gm_u32* error_flag,                                                                    \
      gm_u32 neg_bits                                                                        \
  ) {                                                                                        \
    gm_apply_bitmask<E, VEC>(                                                                \
        logits, mask, indices, batch, vocab, row_stride, mask_words, mask_rows,              \
        chunks_per_row, error_flag, neg_bits                                                 \
    );                                                                                       \
  }

// Kernel names are listed in the same order in src/plan.rs (KERNEL_NAMES).
GRAMMASK_BITMASK_KERNEL(grammask_bitmask_b32_v4, gm_u32, 4)
GRAMMASK_BITMASK_KERNEL(grammask_bitmask_b32_v2, gm_u32, 2)
GRAMMASK_BITMASK_KERNEL(grammask_bitmask_b32_v1, gm_u32, 1)
GRAMMASK_BITMASK_KERNEL(grammask_bitmask_b16_v8, gm_u16, 8)
GRAMMASK_BITMASK_KERNEL(grammask_bitmask_b16_v4, gm_u16, 4)
GRAMMASK_BITMASK_KERNEL(grammask_bitmask_b16_v2, gm_u16, 2)
GRAMMASK_BITMASK_KERNEL(grammask_bitmask_b16_v1, gm_u16, 1)
