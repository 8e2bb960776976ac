// grammask-gpu: set logits to -inf wherever a packed token bitmask says "not allowed".
//
// Compiled at run time by NVRTC (see src/cuda.rs for why), so this file includes no
// header at all: it only uses compiler builtins (threadIdx, __shfl_sync, __all_sync,
// atomicOr). The kernels never look at logits as numbers: they move raw bits, putting
// the bit pattern of -inf into the disallowed slots and leaving every allowed slot
// with its exact bits (NaN payloads included), so one 32-bit kernel serves f32 and
// one 16-bit kernel serves both f16 and bf16 (the host passes the right -inf
// pattern), and the result is bit-identical to the CPU path.
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
// 1024 logits as vectors of VEC elements (16 bytes when alignment allows) laid out so
// that each warp-wide memory instruction covers 32 consecutive vectors (512
// contiguous bytes): lane l, step i handles the vector at element (32*i + l) * VEC,
// whose mask bits it fetches from the owning lane with __shfl_sync.
//
// Whole-vector work. Each vector is one of three kinds:
//   * all allowed: skipped, neither loaded nor stored;
//   * all disallowed: one full-width store of the -inf pattern, never loaded;
//   * mixed: one full-width load, a bitwise select (allowed elements keep their
//     exact bits, NaN payloads included; the others get the -inf pattern), one
//     full-width store.
// Why whole vectors: storing only the disallowed elements of a mixed vector (the
// previous kernel) leaves partially written 32-byte sectors, which DRAM has to
// complete with a read-modify-write, and takes up to VEC narrow stores per vector
// (worst at 2-byte elements); that is the likely cause of its ~50 % of copy
// bandwidth on random masks (issue 28, to be confirmed with ncu). A full-width read
// and write moves what a copy moves, in the fewest instructions. A sector is still
// written in part when its other 16-byte vector is all allowed and skipped; that
// costs DRAM the read that loading the skipped vector would have cost. All of a
// lane's loads are issued before its first store, so up to 32/VEC loads per lane
// are in flight.
//
// The one exception is the vector that straddles the end of the vocabulary (only
// when vocab % VEC != 0): its elements past `vocab` belong to the row's padding,
// the next row, or past the end of the buffer, so a mixed straddling vector stores
// its disallowed elements one at a time and is never read. It is at most one
// vector per row.
//
// Bits for elements past `vocab` in the last word are forced to 1 (allowed), and
// words past the end of the row are all-ones, so a straddling vector is never "all
// disallowed" and no store ever leaves the row.

// Hooks for the host-side emulation test (tests/emu): it records every logits load
// and store (address and width) there to check the rules above and the alignment of
// every vector access. They expand to nothing under NVRTC.
#ifndef GM_ON_LOAD
#define GM_ON_LOAD(p, bytes)
#endif
#ifndef GM_ON_STORE
#define GM_ON_STORE(p, bytes)
#endif

typedef unsigned int gm_u32;
typedef unsigned short gm_u16;
typedef long long gm_i64;

// A BYTES-wide vector of logits seen as raw machine words (the kernels never look at
// logits as numbers). Loads and stores of the whole struct compile to one
// ld/st.global.v4.u32 (16 bytes), .v2.u32 (8), .u32 (4) or .u16 (2).
template <int BYTES>
struct GmVec;
template <>
struct alignas(16) GmVec<16> {
  typedef gm_u32 Word;
  static const int kWords = 4;
  Word w[4];
};
template <>
struct alignas(8) GmVec<8> {
  typedef gm_u32 Word;
  static const int kWords = 2;
  Word w[2];
};
template <>
struct alignas(4) GmVec<4> {
  typedef gm_u32 Word;
  static const int kWords = 1;
  Word w[1];
};
template <>
struct alignas(2) GmVec<2> {
  typedef gm_u16 Word;
  static const int kWords = 1;
  Word w[1];
};

// The vector `v` with every element whose bit in `allowed` is 0 replaced by the -inf
// pattern `pat` (a 32-bit word holding one f32 or two copies of a 16-bit -inf).
// Bit j of `allowed` is element j of the vector, element 0 at the lowest address
// (the device is little-endian, so it is the low half of a word of two 16-bit
// elements). With allowed == 0 the result is all -inf whatever `v` holds.
template <typename E, int BYTES>
__device__ __forceinline__ GmVec<BYTES> gm_select(const GmVec<BYTES>& v, gm_u32 allowed, gm_u32 pat) {
  typedef typename GmVec<BYTES>::Word W;
  const int kPerWord = static_cast<int>(sizeof(W) / sizeof(E));
  const gm_u32 elem_ones = (sizeof(E) == 4) ? 0xffffffffu : 0xffffu;
  GmVec<BYTES> out;
#pragma unroll
  for (int k = 0; k < GmVec<BYTES>::kWords; ++k) {
    gm_u32 keep = 0;
#pragma unroll
    for (int j = 0; j < kPerWord; ++j) {
      const gm_u32 on = 0u - ((allowed >> (k * kPerWord + j)) & 1u);  // all ones if allowed
      keep |= (on & elem_ones) << (j * 8 * static_cast<int>(sizeof(E)));
    }
    out.w[k] = static_cast<W>((static_cast<gm_u32>(v.w[k]) & keep) | (pat & ~keep));
  }
  return out;
}

template <int BYTES>
__device__ __forceinline__ GmVec<BYTES> gm_splat(gm_u32 pat) {
  GmVec<BYTES> out;
#pragma unroll
  for (int k = 0; k < GmVec<BYTES>::kWords; ++k) {
    out.w[k] = static_cast<typename GmVec<BYTES>::Word>(pat);
  }
  return out;
}

// E: the element's bit type (gm_u32 for f32, gm_u16 for f16/bf16).
// VEC: elements per vector (VEC * sizeof(E) <= 16); the host picks the largest VEC
// that the logits pointer and row stride are aligned for, so every vector access
// is aligned.
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

  const int kBytes = VEC * static_cast<int>(sizeof(E));
  const int kSteps = 32 / VEC;  // vectors per lane in the chunk
  const gm_u32 kGroup = (1u << VEC) - 1u;
  typedef GmVec<kBytes> V;

  const gm_i64 chunk_col = static_cast<gm_i64>(chunk) * 1024;
  E* const base = logits + row * row_stride + chunk_col;
  const gm_u32 pat = (sizeof(E) == 4) ? neg_bits : (neg_bits & 0xffffu) * 0x10001u;

  // Step 1: every lane gathers the mask bits of its vectors (warp-uniform shuffles).
  gm_u32 allowed[kSteps];
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const int e = (i * 32 + lane) * VEC;  // element offset in the chunk
    const gm_u32 w = __shfl_sync(0xffffffffu, bits, e >> 5);
    allowed[i] = (w >> (e & 31)) & kGroup;
  }

  // Step 2: load every mixed vector that lies wholly inside the vocabulary, all
  // before the first store so the loads overlap. Other vectors start from the -inf
  // splat, which is what an all-disallowed vector stores.
  V v[kSteps];
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const int e = (i * 32 + lane) * VEC;
    const bool mixed = allowed[i] != kGroup && allowed[i] != 0u;
    const bool whole = chunk_col + e + VEC <= vocab;
    if (mixed && whole) {
      const V* const p = reinterpret_cast<const V*>(base + e);
      GM_ON_LOAD(p, kBytes);
      v[i] = *p;
    } else {
      v[i] = gm_splat<kBytes>(pat);
    }
  }

  // Step 3: one full-width store per vector that has a disallowed element. A mixed
  // vector straddling the end of the vocabulary is left for step 4.
  gm_u32 tail_allowed = kGroup;
  int tail_e = 0;
#pragma unroll
  for (int i = 0; i < kSteps; ++i) {
    const gm_u32 a = allowed[i];
    if (a == kGroup) {
      continue;  // all allowed: not touched
    }
    const int e = (i * 32 + lane) * VEC;
    if (a != 0u && chunk_col + e + VEC > vocab) {
      tail_allowed = a;
      tail_e = e;
      continue;
    }
    V* const q = reinterpret_cast<V*>(base + e);
    GM_ON_STORE(q, kBytes);
    *q = gm_select<E, kBytes>(v[i], a, pat);
  }

  // Step 4: the straddling mixed vector, if this lane has it (at most one per row):
  // element stores of its disallowed elements, so that nothing past `vocab` is read
  // or written. Kept out of the unrolled loop above so its code exists once.
  if (tail_allowed != kGroup) {
    E* const p = base + tail_e;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      if (((tail_allowed >> j) & 1u) == 0u) {
        GM_ON_STORE(p + j, static_cast<int>(sizeof(E)));
        p[j] = static_cast<E>(neg_bits);
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
