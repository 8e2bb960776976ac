// Just enough of CUDA's device environment to run src/kernel/bitmask.cu on the
// host, one std::thread per lane, so the kernel's logic (indexing, tails, vector
// widths, warp shuffles, fast paths) is tested on machines without a GPU.
//
// Warp-synchronous builtins meet at a per-warp barrier. A lane that returns early
// drops out of the barrier; the harness then compares how many warp-synchronous
// calls each lane made, so a divergent __shfl_sync/__all_sync is reported instead
// of deadlocking. Logits loads and stores are checked for alignment and logged
// through the kernel's GM_ON_LOAD / GM_ON_STORE hooks.
#pragma once

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)

struct gm_dim3 {
  unsigned x = 0, y = 0, z = 0;
};

inline thread_local gm_dim3 threadIdx;
inline thread_local gm_dim3 blockIdx;
inline thread_local gm_dim3 blockDim;

struct GmWarp {
  std::barrier<> bar{32};
  unsigned slots[32] = {};
  int calls[32] = {};
};

inline thread_local GmWarp* gm_warp = nullptr;
inline thread_local int gm_lane = 0;
inline std::atomic<int> gm_errors{0};

inline void gm_require_full(unsigned mask) {
  if (mask != 0xffffffffu) {
    std::fprintf(stderr, "partial warp mask %#x\n", mask);
    gm_errors++;
  }
}

inline unsigned __shfl_sync(unsigned mask, unsigned v, int src) {
  gm_require_full(mask);
  gm_warp->calls[gm_lane]++;
  gm_warp->slots[gm_lane] = v;
  gm_warp->bar.arrive_and_wait();
  unsigned r = gm_warp->slots[src & 31];
  gm_warp->bar.arrive_and_wait();
  return r;
}

inline int __all_sync(unsigned mask, int pred) {
  gm_require_full(mask);
  gm_warp->calls[gm_lane]++;
  gm_warp->slots[gm_lane] = pred != 0 ? 1u : 0u;
  gm_warp->bar.arrive_and_wait();
  int all = 1;
  for (int l = 0; l < 32; ++l) {
    all &= static_cast<int>(gm_warp->slots[l]);
  }
  gm_warp->bar.arrive_and_wait();
  return all;
}

inline unsigned atomicOr(unsigned* p, unsigned v) {
  std::atomic_ref<unsigned> a(*p);
  return a.fetch_or(v);
}

// Every load and store of logits the kernel makes goes through these hooks (they
// expand to nothing under NVRTC). Each access is checked for alignment to its own
// width and recorded (kind, byte offset from the logits' first element, width), so
// the test can check the kernel's memory-access rules: all-allowed vectors are not
// touched, all-disallowed vectors are stored once without a load, mixed vectors are
// loaded once and stored once at full width.
struct GmAccess {
  long long offset;
  int bytes;
  int kind;  // 0 = load, 1 = store
};

inline const unsigned char* gm_log_base = nullptr;
inline std::mutex gm_log_mutex;
inline std::vector<GmAccess> gm_log;

inline void gm_record(const void* p, int bytes, int kind) {
  if (reinterpret_cast<std::uintptr_t>(p) % static_cast<std::uintptr_t>(bytes) != 0) {
    std::fprintf(stderr, "misaligned %d-byte %s at %p\n", bytes, kind == 0 ? "load" : "store", p);
    gm_errors++;
  }
  const long long offset = static_cast<const unsigned char*>(p) - gm_log_base;
  std::lock_guard<std::mutex> lock(gm_log_mutex);
  gm_log.push_back(GmAccess{offset, bytes, kind});
}

#define GM_ON_LOAD(p, bytes) gm_record((p), (bytes), 0)
#define GM_ON_STORE(p, bytes) gm_record((p), (bytes), 1)
