#pragma once
// TiC-SAT's RWMA tiling (smmComputeRWMA in accelerator/smm_gem.cc), written once: its
// constants and the order of its loops, as the core model's walk uses them (core_walk_gemm.cpp
// gemm_share: the accesses of every tile, its outer loops sampled on request). The reference
// kernels (reference/kernels.h gemm_rwma, run under valgrind) write the same loops out again,
// since their instructions are what valgrind measures; test "reference RWMA kernel walks the
// tiles of rwma_tiling.h ..." checks that they visit these tiles in this order. Header-only
// and free of the rest of hwmodel.
//
// The loop order, outermost first:
//   sequence groups gi (up to 512 rows of sequence blocks, the group's blocks split over the
//   cores), K chunks kc (256 K-rows), N chunks nc (256 N-columns), then inside one chunk
//   (rwma_chunk_tiles) the core's blocks, L2 tile rows tr2 and columns tc2, and L1 groups of
//   64 K-rows (tr1) x 32 N-columns (tc1; 32 x 64 / K when K < 64), tile by tile.
#include <algorithm>
#include <cstdint>

namespace bertlab::hw {

struct RwmaTiling {
  int64_t m = 0, kt = 0, nt = 0;  // rows; K and N in S-wide tiles
  int64_t rb = 0;                 // rows per sequence block
  int64_t kt1 = 0, nt1 = 0;       // an L1 group: kt1 x nt1 tiles
  int64_t kt2 = 0, nt2 = 0;       // an L2 chunk: kt2 x nt2 L1 groups
  int64_t blocks = 0, per_l2 = 0, groups = 0;  // sequence blocks, blocks per group, groups
  int64_t kchunks = 0, nchunks = 0;            // chunks along K and N (the last may be partial)

  // The blocks of group gi.
  int64_t blocks_in(int64_t gi) const { return std::min(per_l2, blocks - gi * per_l2); }
};

// M x K times K x N on an S x S array, sequence blocks of block_rows rows. K and N multiples of S.
inline RwmaTiling rwma_tiling(int64_t M, int64_t K, int64_t N, int64_t S, int64_t block_rows) {
  RwmaTiling t;
  t.m = M, t.kt = K / S, t.nt = N / S;
  t.rb = std::min(block_rows, M);
  // L1 group: 64 K-rows x 32 N-columns; when K is shorter, more columns (32 x 64 / K).
  t.kt1 = std::max<int64_t>(1, std::min<int64_t>(64, K) / S);
  const int64_t ratio = 64 / std::min<int64_t>(64, K);
  t.nt1 = std::max<int64_t>(1, std::min<int64_t>(32 * ratio, N) / S);
  // L2 chunk: 256 K-rows x 256 N-columns of L1 groups.
  t.kt2 = std::max<int64_t>(1, std::min<int64_t>(256, K) / S / t.kt1);
  t.nt2 = std::max<int64_t>(1, std::min<int64_t>(256, N) / S / t.nt1);
  // Sequence groups: up to 512 rows of blocks.
  t.blocks = (M + t.rb - 1) / t.rb;
  t.per_l2 = std::max<int64_t>(1, std::min<int64_t>(512 / t.rb, t.blocks));
  t.groups = (t.blocks + t.per_l2 - 1) / t.per_l2;
  t.kchunks = (t.kt + t.kt2 * t.kt1 - 1) / (t.kt2 * t.kt1);
  t.nchunks = (t.nt + t.nt2 * t.nt1 - 1) / (t.nt2 * t.nt1);
  return t;
}

// The tiles of chunk (kc, nc) of group gi over the core's blocks [b0, b1), in TiC-SAT's order:
// tile(kt, nt, row0, rows) with kt, nt the tile's K and N index, row0 its first sequence row.
// Tiles past K or N (a partial last chunk) are left out.
template <class Tile>
inline void rwma_chunk_tiles(const RwmaTiling& t, int64_t gi, int64_t kc, int64_t nc, int64_t b0,
                                                    int64_t b1, Tile&& tile) {
  const int64_t kt2 = t.kt2, nt2 = t.nt2, kt1 = t.kt1, nt1 = t.nt1, KT = t.kt, NT = t.nt, rb = t.rb, M = t.m;
  const int64_t first_row = gi * t.per_l2;
  for (int64_t blk = b0; blk < b1; ++blk)
    for (int64_t tr2 = 0; tr2 < kt2; ++tr2)
      for (int64_t tc2 = 0; tc2 < nt2; ++tc2)
        for (int64_t tr1 = 0; tr1 < kt1; ++tr1)
          for (int64_t tc1 = 0; tc1 < nt1; ++tc1) {
            const int64_t kt = (kc * kt2 + tr2) * kt1 + tr1, nt = (nc * nt2 + tc2) * nt1 + tc1;
            if (kt >= KT || nt >= NT) continue;  // a partial chunk at the edge
            const int64_t row0 = (first_row + blk) * rb;
            tile(kt, nt, row0, std::min(rb, M - row0));
          }
}

}  // namespace bertlab::hw
