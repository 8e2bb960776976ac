// Runs one launch of src/kernel/bitmask.cu on the host (see cuda_shim.hpp).
//
//   harness IN OUT
//
// IN (little-endian): 16 int64 header fields, then the logits (elem_size bytes
// each), the mask (u32 words) and the indices (i32).
//   kernel, elem_size, grid_x, grid_y, block_x, batch, vocab, row_stride,
//   mask_words, mask_rows, chunks_per_row, neg_bits, logits_len, offset,
//   n_mask, n_indices (-1 = no indices)
// The logits are placed `offset` elements after a 16-byte aligned address (so the
// plan's alignment is what the device would see), between guard elements.
// OUT: the logits after the launch, the error flag (u32), the number of logged
// logits accesses (u64), then each access as (byte offset from the first logit: i64,
// width in bytes: i32, kind: i32, 0 = load, 1 = store). Exit code 0 unless an
// emulation check (divergence, misalignment, a guard overwritten) failed.

#include "cuda_shim.hpp"

#include "../../src/kernel/bitmask.cu"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

namespace {

struct Args {
  void* logits;
  const gm_u32* mask;
  const int* indices;
  gm_i64 batch, vocab, row_stride, mask_words, mask_rows;
  int chunks_per_row;
  gm_u32* flag;
  gm_u32 neg_bits;
};

using K32 = void (*)(gm_u32*, const gm_u32*, const int*, gm_i64, gm_i64, gm_i64, gm_i64, gm_i64, int, gm_u32*,
                     gm_u32);
using K16 = void (*)(gm_u16*, const gm_u32*, const int*, gm_i64, gm_i64, gm_i64, gm_i64, gm_i64, int, gm_u32*,
                     gm_u32);

void call(int kernel, const Args& a) {
  static const K32 k32[] = {grammask_bitmask_b32_v4, grammask_bitmask_b32_v2, grammask_bitmask_b32_v1};
  static const K16 k16[] = {grammask_bitmask_b16_v8, grammask_bitmask_b16_v4, grammask_bitmask_b16_v2,
                            grammask_bitmask_b16_v1};
  if (kernel < 3) {
    k32[kernel](static_cast<gm_u32*>(a.logits), a.mask, a.indices, a.batch, a.vocab, a.row_stride, a.mask_words,
                a.mask_rows, a.chunks_per_row, a.flag, a.neg_bits);
  } else {
    k16[kernel - 3](static_cast<gm_u16*>(a.logits), a.mask, a.indices, a.batch, a.vocab, a.row_stride,
                    a.mask_words, a.mask_rows, a.chunks_per_row, a.flag, a.neg_bits);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: harness IN OUT\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gm_i64 h[16];
  if (data.size() < sizeof(h)) {
    std::fprintf(stderr, "short input\n");
    return 2;
  }
  std::memcpy(h, data.data(), sizeof(h));
  const int kernel = static_cast<int>(h[0]);
  const size_t elem = static_cast<size_t>(h[1]);
  const unsigned grid_x = static_cast<unsigned>(h[2]), grid_y = static_cast<unsigned>(h[3]);
  const unsigned block_x = static_cast<unsigned>(h[4]);
  const size_t len = static_cast<size_t>(h[12]), offset = static_cast<size_t>(h[13]);
  const size_t n_mask = static_cast<size_t>(h[14]);
  const bool has_indices = h[15] >= 0;
  const size_t n_indices = has_indices ? static_cast<size_t>(h[15]) : 0;
  const char* p = data.data() + sizeof(h);

  // Guard: 16 bytes before and after, plus the offset.
  const size_t guard = 16;
  const size_t total = guard + offset * elem + len * elem + guard;
  unsigned char* buf = static_cast<unsigned char*>(std::aligned_alloc(16, (total + 15) / 16 * 16));
  std::memset(buf, 0xA5, total);
  unsigned char* logits = buf + guard + offset * elem;
  std::memcpy(logits, p, len * elem);
  p += len * elem;
  std::vector<gm_u32> mask(n_mask + 1);
  std::memcpy(mask.data(), p, n_mask * 4);
  p += n_mask * 4;
  std::vector<int> indices(n_indices + 1);
  std::memcpy(indices.data(), p, n_indices * 4);
  gm_u32 flag = 0;
  gm_log_base = logits;

  Args a{logits,  mask.data(), has_indices ? indices.data() : nullptr,
         h[5],    h[6],        h[7],
         h[8],    h[9],        static_cast<int>(h[10]),
         &flag,   static_cast<gm_u32>(h[11])};

  for (unsigned by = 0; by < grid_y; ++by) {
    for (unsigned bx = 0; bx < grid_x; ++bx) {
      for (unsigned warp = 0; warp < block_x / 32; ++warp) {
        GmWarp w;
        std::vector<std::thread> lanes;
        for (int lane = 0; lane < 32; ++lane) {
          lanes.emplace_back([&, lane] {
            threadIdx = gm_dim3{warp * 32 + static_cast<unsigned>(lane), 0, 0};
            blockIdx = gm_dim3{bx, by, 0};
            blockDim = gm_dim3{block_x, 1, 1};
            gm_warp = &w;
            gm_lane = lane;
            call(kernel, a);
            w.bar.arrive_and_drop();
          });
        }
        for (auto& t : lanes) {
          t.join();
        }
        for (int lane = 1; lane < 32; ++lane) {
          if (w.calls[lane] != w.calls[0]) {
            std::fprintf(stderr, "divergent warp-synchronous calls: lane 0 made %d, lane %d made %d\n", w.calls[0],
                         lane, w.calls[lane]);
            gm_errors++;
            break;
          }
        }
      }
    }
  }

  for (size_t i = 0; i < guard + offset * elem; ++i) {
    if (buf[i] != 0xA5) {
      std::fprintf(stderr, "wrote before the logits (byte %zu)\n", i);
      gm_errors++;
      break;
    }
  }
  for (size_t i = total - guard; i < total; ++i) {
    if (buf[i] != 0xA5) {
      std::fprintf(stderr, "wrote after the logits\n");
      gm_errors++;
      break;
    }
  }
  std::ofstream out(argv[2], std::ios::binary);
  out.write(reinterpret_cast<const char*>(logits), static_cast<std::streamsize>(len * elem));
  out.write(reinterpret_cast<const char*>(&flag), 4);
  const std::uint64_t n_log = gm_log.size();
  out.write(reinterpret_cast<const char*>(&n_log), 8);
  for (const GmAccess& a : gm_log) {
    out.write(reinterpret_cast<const char*>(&a.offset), 8);
    out.write(reinterpret_cast<const char*>(&a.bytes), 4);
    out.write(reinterpret_cast<const char*>(&a.kind), 4);
  }
  std::free(buf);
  return gm_errors.load() == 0 ? 0 : 1;
}
