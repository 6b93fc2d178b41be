"""Float32 matrix product (SGEMM) in CUDA: register micro-tiles fed from double-buffered tiles.

The tiled kernel of the course notes (tiled_cuda.py) gives each thread one output: per
multiply-add it reads two floats from shared memory, so shared memory, not arithmetic, sets
its speed. Here each thread owns an 8 x 8 block of C. Per step along K it reads 8 floats of A
and 8 of B (four 16-byte shared loads) and does 64 fused multiply-adds from registers: the
outer product of the two fragments.

Per block (the default configuration): a 128 x 128 tile of C, 256 threads, K in steps of 8.
- The block's A tile (128 x 8) is stored transposed in shared memory, K-major, so a thread's
  8 rows of A at one k are two 16-byte loads, as its 8 columns of B are. Each row of the
  transposed tile is padded by 4 floats, which makes the transposing stores free of bank
  conflicts.
- Two shared-memory buffers: while the block computes on one K tile, each thread already has
  the next tile's global loads (one float4 of A and one of B) in flight in registers, and
  stores them into the other buffer afterwards. One barrier per K tile.
- A warp's 32 lanes are a 4 x 8 grid of threads, so a warp covers 32 x 64 of C: its 16-byte
  shared loads touch 4 distinct addresses of A and 8 of B (64 and 128 contiguous bytes), the
  fewest shared-memory wavefronts per step. A thread's 8 rows are two groups of 4 rows 16
  apart, its 8 columns two groups of 4 columns 32 apart, so the lanes' loads are contiguous.
- All arithmetic is float32 fmaf (FFMA), each output summed along K in order; no TF32.

Every shape is handled by the same kernel. Global loads are 16-byte vectors (the `kVector`
template) only when K and N are multiples of 4 and both matrices start 16-byte aligned;
otherwise each float is loaded alone. Either way, out-of-range rows, columns and K entries of
a tile are loaded as zeros (tails in M, N and K), and stores are guarded (16-byte stores when N
is a multiple of 4: the output is a fresh, aligned tensor). Non-contiguous inputs (transposed or
sliced views) are copied to contiguous ones first; a contiguous view that starts at an odd
offset is not copied and takes the scalar path. Offsets into A, B and C are 64-bit.

Tile configurations are template parameters; `CONFIG_NAMES` below lists the compiled ones,
`matmul(a, b, config)` takes one by index, and -1 picks one by size: 128 x 128 when that gives
at least one block per SM, else 128 x 64, else 64 x 64 (a 1024^3 product has 64 tiles of 128 x
128, too few for 132 SMs). tuning/matmul_tile_configs.py times them all against cuBLAS.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = (
    "torch::Tensor matmul(torch::Tensor a, torch::Tensor b, int64_t config);\n"
    "std::vector<std::string> config_names();"
)

# The kernel alone: no torch, no host code, so that it can also be read on its own.
KERNEL_SOURCE = r"""
// One tile configuration. A block computes a BM x BN tile of C = A @ B, stepping through K by
// BK; each thread computes TM x TN outputs. A warp's 32 lanes are a 4 x 8 grid of threads.
template <int BM, int BN, int BK, int TM, int TN>
struct TileShape {
  static constexpr int kLanesM = 4;                 // lanes of a warp along M
  static constexpr int kLanesN = 8;                 // lanes of a warp along N
  static constexpr int kWarpM = kLanesM * TM;       // rows of C per warp
  static constexpr int kWarpN = kLanesN * TN;       // columns of C per warp
  static constexpr int kWarpsN = BN / kWarpN;
  static constexpr int kThreads = 32 * (BM / kWarpM) * kWarpsN;
  static constexpr int kGroupM = kLanesM * 4;       // a thread's rows: groups of 4, this apart
  static constexpr int kGroupN = kLanesN * 4;       // a thread's columns: groups of 4, this apart
  static constexpr int kStrideA = BM + 4;           // padded row of the transposed A tile
  static constexpr int kLoadsA = BM * BK / 4 / kThreads;  // float4 loads of A per thread per tile
  static constexpr int kLoadsB = BK * BN / 4 / kThreads;  // float4 loads of B per thread per tile
  // Blocks per SM the registers must allow. 256-thread blocks: 2, so at most 128 registers
  // per thread (the 8 x 8 kernel fits them without spilling). Smaller blocks: no cap, as
  // their 2 float4 loads of each tile need about 150 registers and spill under 128.
  static constexpr int kMinBlocks = kThreads >= 256 ? 512 / kThreads : 1;

  static_assert(TM % 4 == 0 && TN % 4 == 0, "micro-tiles are groups of 4 rows and columns");
  static_assert(BM % kWarpM == 0 && BN % kWarpN == 0, "warps must tile the block");
  static_assert(BK % 4 == 0, "A is loaded 4 K entries at a time");
  static_assert((BM * BK / 4) % kThreads == 0 && (BK * BN / 4) % kThreads == 0,
                "each thread loads whole float4s of both tiles");
  static_assert(kLoadsA > 0 && kLoadsB > 0, "every thread loads part of each tile");
  static_assert(2 * BK * (kStrideA + BN) * 4 <= 48 * 1024, "static shared memory is 48 KiB");
};

__device__ __forceinline__ float4 zero4() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }

// C (m x n) = A (m x k) @ B (k x n), all row-major and contiguous. Grid: x over column tiles,
// y over row tiles. kVector: k and n are multiples of 4 and a, b are 16-byte aligned.
template <int BM, int BN, int BK, int TM, int TN, bool kVector>
__global__ void __launch_bounds__(TileShape<BM, BN, BK, TM, TN>::kThreads,
                                  TileShape<BM, BN, BK, TM, TN>::kMinBlocks)
    sgemm_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
                 int m, int n, int k) {
  using T = TileShape<BM, BN, BK, TM, TN>;
  __shared__ __align__(16) float a_tile[2][BK][T::kStrideA];  // A transposed: [k][row]
  __shared__ __align__(16) float b_tile[2][BK][BN];           // B as it is:   [k][column]

  const int tid = threadIdx.x;
  const int row0 = blockIdx.y * BM;  // the block's first row and column of C
  const int col0 = blockIdx.x * BN;

  // Global loads of one K tile, held in registers until stored into shared memory.
  float4 a_next[T::kLoadsA];
  float4 b_next[T::kLoadsB];

  // A tile: float4 p of this thread covers row l / (BK/4), K entries 4 * (l % (BK/4)) + 0..3.
  auto load_a = [&](int k0) {
#pragma unroll
    for (int p = 0; p < T::kLoadsA; ++p) {
      const int l = tid + p * T::kThreads;
      const int row = row0 + l / (BK / 4);
      const int kk = k0 + (l % (BK / 4)) * 4;
      float4 v = zero4();
      if (row < m) {
        const float* src = a + static_cast<int64_t>(row) * k + kk;
        if constexpr (kVector) {
          if (kk < k) v = *reinterpret_cast<const float4*>(src);  // k % 4 == 0: all 4 in range
        } else {
          if (kk < k) v.x = src[0];
          if (kk + 1 < k) v.y = src[1];
          if (kk + 2 < k) v.z = src[2];
          if (kk + 3 < k) v.w = src[3];
        }
      }
      a_next[p] = v;
    }
  };
  auto store_a = [&](int buf) {
#pragma unroll
    for (int p = 0; p < T::kLoadsA; ++p) {
      const int l = tid + p * T::kThreads;
      const int row = l / (BK / 4);
      const int kk = (l % (BK / 4)) * 4;
      a_tile[buf][kk + 0][row] = a_next[p].x;
      a_tile[buf][kk + 1][row] = a_next[p].y;
      a_tile[buf][kk + 2][row] = a_next[p].z;
      a_tile[buf][kk + 3][row] = a_next[p].w;
    }
  };
  // B tile: float4 p of this thread covers K entry l / (BN/4), columns 4 * (l % (BN/4)) + 0..3.
  auto load_b = [&](int k0) {
#pragma unroll
    for (int p = 0; p < T::kLoadsB; ++p) {
      const int l = tid + p * T::kThreads;
      const int kk = k0 + l / (BN / 4);
      const int col = col0 + (l % (BN / 4)) * 4;
      float4 v = zero4();
      if (kk < k) {
        const float* src = b + static_cast<int64_t>(kk) * n + col;
        if constexpr (kVector) {
          if (col < n) v = *reinterpret_cast<const float4*>(src);  // n % 4 == 0: all 4 in range
        } else {
          if (col < n) v.x = src[0];
          if (col + 1 < n) v.y = src[1];
          if (col + 2 < n) v.z = src[2];
          if (col + 3 < n) v.w = src[3];
        }
      }
      b_next[p] = v;
    }
  };
  auto store_b = [&](int buf) {
#pragma unroll
    for (int p = 0; p < T::kLoadsB; ++p) {
      const int l = tid + p * T::kThreads;
      const int kk = l / (BN / 4);
      const int col = (l % (BN / 4)) * 4;
      *reinterpret_cast<float4*>(&b_tile[buf][kk][col]) = b_next[p];
    }
  };

  // This thread's outputs: rows m_first + g * kGroupM + (0..3) for g < TM / 4, columns
  // n_first + g * kGroupN + (0..3) for g < TN / 4, relative to the block's tile.
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int m_first = (warp / T::kWarpsN) * T::kWarpM + (lane / T::kLanesN) * 4;
  const int n_first = (warp % T::kWarpsN) * T::kWarpN + (lane % T::kLanesN) * 4;

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i) {
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
  }

  const int tiles = (k + BK - 1) / BK;
  load_a(0);
  load_b(0);
  store_a(0);
  store_b(0);
  __syncthreads();

  for (int t = 0; t < tiles; ++t) {
    const int cur = t & 1;
    const bool has_next = t + 1 < tiles;  // the same in every thread of the block
    if (has_next) {
      load_a((t + 1) * BK);  // in flight while this tile is computed
      load_b((t + 1) * BK);
    }
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a_frag[TM];
      float b_frag[TN];
#pragma unroll
      for (int g = 0; g < TM / 4; ++g) {
        const float4 v =
            *reinterpret_cast<const float4*>(&a_tile[cur][kk][m_first + g * T::kGroupM]);
        a_frag[4 * g + 0] = v.x;
        a_frag[4 * g + 1] = v.y;
        a_frag[4 * g + 2] = v.z;
        a_frag[4 * g + 3] = v.w;
      }
#pragma unroll
      for (int g = 0; g < TN / 4; ++g) {
        const float4 v =
            *reinterpret_cast<const float4*>(&b_tile[cur][kk][n_first + g * T::kGroupN]);
        b_frag[4 * g + 0] = v.x;
        b_frag[4 * g + 1] = v.y;
        b_frag[4 * g + 2] = v.z;
        b_frag[4 * g + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a_frag[i], b_frag[j], acc[i][j]);
      }
    }
    // The other buffer was last read in iteration t - 1, which every thread finished before
    // the barrier that ended it.
    if (has_next) {
      store_a(cur ^ 1);
      store_b(cur ^ 1);
    }
    __syncthreads();
  }

  // Guarded stores; 16-byte ones when n % 4 == 0 (c is a fresh allocation, 16-byte aligned).
  const bool vector_store = (n & 3) == 0;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int row = row0 + m_first + (i / 4) * T::kGroupM + i % 4;
    if (row >= m) continue;
    float* dst_row = c + static_cast<int64_t>(row) * n;
#pragma unroll
    for (int g = 0; g < TN / 4; ++g) {
      const int col = col0 + n_first + g * T::kGroupN;
      if (vector_store) {
        if (col < n) {
          *reinterpret_cast<float4*>(dst_row + col) = make_float4(
              acc[i][4 * g + 0], acc[i][4 * g + 1], acc[i][4 * g + 2], acc[i][4 * g + 3]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (col + j < n) dst_row[col + j] = acc[i][4 * g + j];
        }
      }
    }
  }
}
"""

CUDA_SOURCE = (
    r"""
// No <torch/extension.h>: the <torch/types.h> that load_inline puts first is enough here, at
// well under half the compile time (the C++ API and pybind11 are for main.cpp).
// c10 headers only: ATen/cuda/CUDAContext.h also pulls in the cuBLAS/cuSPARSE headers.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <string>
#include <vector>
"""
    + KERNEL_SOURCE
    + r"""
constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kMaxDim = int64_t{1} << 30;  // keeps row0 + BM, k0 + BK etc. within int

template <int BM, int BN, int BK, int TM, int TN>
static void launch(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
                   bool vector, cudaStream_t stream) {
  using T = TileShape<BM, BN, BK, TM, TN>;
  const int64_t row_tiles = (m + BM - 1) / BM;
  const int64_t col_tiles = (n + BN - 1) / BN;
  TORCH_CHECK(row_tiles <= kMaxGridY, "matmul: M = ", m, " is too large (at most ",
              kMaxGridY * BM, " rows)");
  const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(row_tiles));
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if (vector) {
    sgemm_kernel<BM, BN, BK, TM, TN, true><<<grid, T::kThreads, 0, stream>>>(a, b, c, mi, ni, ki);
  } else {
    sgemm_kernel<BM, BN, BK, TM, TN, false><<<grid, T::kThreads, 0, stream>>>(a, b, c, mi, ni, ki);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The compiled configurations, by index: BM x BN x BK, TM x TN per thread.
static const char* const kConfigNames[] = {
    "128x128x8, 8x8 per thread, 256 threads",
    "128x128x16, 8x8 per thread, 256 threads",
    "128x64x8, 8x8 per thread, 128 threads",
    "64x64x8, 8x8 per thread, 64 threads",
};
constexpr int kConfigs = sizeof(kConfigNames) / sizeof(kConfigNames[0]);

std::vector<std::string> config_names() {
  return std::vector<std::string>(kConfigNames, kConfigNames + kConfigs);
}

// The largest tile that still gives every SM a block: 128x128, else 128x64, else 64x64.
static int pick_config(int64_t m, int64_t n, int device) {
  int sms = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  auto tiles = [&](int64_t bm, int64_t bn) { return ((m + bm - 1) / bm) * ((n + bn - 1) / bn); };
  if (tiles(128, 128) >= sms) return 0;
  if (tiles(128, 64) >= sms) return 2;
  return 3;
}

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

torch::Tensor matmul(torch::Tensor a, torch::Tensor b, int64_t config) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda(), "matmul: a and b must be CUDA tensors");
  TORCH_CHECK(a.device() == b.device(), "matmul: a and b must be on the same device");
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat,
              "matmul: a and b must be float32, got ", a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "matmul: a and b must be 2-D, got ", a.dim(),
              "-D and ", b.dim(), "-D");
  TORCH_CHECK(a.size(1) == b.size(0), "matmul: shapes ", a.sizes(), " and ", b.sizes(),
              " cannot be multiplied");
  TORCH_CHECK(config >= -1 && config < kConfigs, "matmul: config ", config, " is not in [-1, ",
              kConfigs, ")");
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  TORCH_CHECK(m < kMaxDim && n < kMaxDim && k < kMaxDim, "matmul: every dimension must be below ",
              kMaxDim, ", got ", m, " x ", k, " @ ", k, " x ", n);

  c10::cuda::CUDAGuard device_guard(a.device());
  torch::Tensor out = at::empty({m, n}, a.options());
  if (m == 0 || n == 0) {
    return out;
  }
  // k == 0 needs no special case: no K tile is loaded and the kernel writes zeros.
  const torch::Tensor ac = a.contiguous();
  const torch::Tensor bc = b.contiguous();
  const float* a_ptr = ac.data_ptr<float>();
  const float* b_ptr = bc.data_ptr<float>();
  float* c_ptr = out.data_ptr<float>();
  const bool vector = k % 4 == 0 && n % 4 == 0 && aligned16(a_ptr) && aligned16(b_ptr);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();

  switch (config == -1 ? pick_config(m, n, a.get_device()) : static_cast<int>(config)) {
    case 0:
      launch<128, 128, 8, 8, 8>(a_ptr, b_ptr, c_ptr, m, n, k, vector, stream);
      break;
    case 1:
      launch<128, 128, 16, 8, 8>(a_ptr, b_ptr, c_ptr, m, n, k, vector, stream);
      break;
    case 2:
      launch<128, 64, 8, 8, 8>(a_ptr, b_ptr, c_ptr, m, n, k, vector, stream);
      break;
    default:
      launch<64, 64, 8, 8, 8>(a_ptr, b_ptr, c_ptr, m, n, k, vector, stream);
      break;
  }
  return out;
}
"""
)

_ext = load_inline(
    name="matmul_fast_cuda",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["matmul", "config_names"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)

CONFIG_NAMES: list[str] = _ext.config_names()
CONFIG = -1  # the tile configuration ModelNew uses: -1 picks one by the output's size


def matmul(a: torch.Tensor, b: torch.Tensor, config: int = CONFIG) -> torch.Tensor:
    """a @ b for float32 CUDA matrices, with tile configuration `config` (an index into
    CONFIG_NAMES, or -1 for the choice by size)."""
    return _ext.matmul(a, b, config)


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return matmul(a, b)
