"""x.sum(dim) near copy bandwidth wherever the reduced dimension sits: coalesced, vector loads.

The tensor is made contiguous and read as (outer, rows, inner): the sizes before the reduced
dimension, the reduced one (`rows`), the sizes after it. Two kernels, chosen by `inner`:

Last dimension (inner == 1): each row is summed by a group of threads, a warp for rows of up
to 1024 floats and a 256-thread block for longer ones. The group reads the row's 16-byte
aligned middle as float4, four loads in flight per thread, and its first and last few floats
one by one, so any row start (odd lengths, views at odd offsets) still reads mostly float4.

Any other dimension (inner > 1): a thread owns a column x[o, :, c] (or 2 or 4 adjacent columns,
read as float2/float4 when inner and the start allow), so the threads of a warp read adjacent
addresses of one row. When a block's columns are fewer than its 256 threads, the block stacks
256 / columns threads per column, each summing every (256 / columns)-th row, and adds them in a
shared-memory tree. Four rows' loads are in flight per thread.

Both kernels split the reduced dimension across blocks when the outputs alone would not fill
the GPU (a 256 MiB tensor summed over its first dimension has only 256 blocks' worth of
columns): each block sums a piece of the rows into a partial buffer, and the same kernel, run
again without splitting, sums the pieces. Two passes, no atomics, so the result is the same on
every run; the partials are at most 2/64 of the input's bytes for columns, and for rows one
float per 4096 or more.

Accuracy: each thread adds the floats of one batch of loads (up to 16) as a small tree in
float, then the batch total into a double accumulator, so a long reduced dimension does not
pile up float32 rounding in one running sum; threads are combined in float trees. All indexing
is 64-bit.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor sum_dim(torch::Tensor x, int64_t dim);"

CUDA_SOURCE = r"""
// No <torch/extension.h>: the <torch/types.h> that load_inline puts first is enough here, at
// well under half the compile time (the C++ API and pybind11 are for main.cpp).
// c10 headers only: ATen/cuda/CUDAContext.h also pulls in the cuBLAS/cuSPARSE headers.
#include <c10/core/WrapDimMinimal.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <vector>

constexpr int kThreads = 256;           // per block, a multiple of 32
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;              // loads in flight per thread
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int64_t kWarpRowMax = 1024;   // last-dim rows up to this length: a warp per row
constexpr int64_t kMinPiece = 4096;     // a split row gives each block at least this many floats
constexpr int64_t kMinRowsPerSplit = 64;  // a split column gives each block at least this many rows
constexpr int64_t kMaxBlocks = 1 << 30; // larger grids loop

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

// The sum of v over the block, returned to every thread, in the same order for each. Ends with a
// barrier, so the scratch can be written again at once.
__device__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) {
    scratch[threadIdx.x >> 5] = v;
  }
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    total += scratch[w];
  }
  __syncthreads();
  return total;
}

__device__ __forceinline__ float quad_sum(float4 v) { return (v.x + v.y) + (v.z + v.w); }

// This thread's share of p[0, n), summed by `count` threads of which it is `rank` (count >= 4).
// The floats before the first 16-byte boundary (at most 3) and after the last whole float4 (at
// most 3) are read one each by the first threads; the rest as float4, kUnroll in flight.
__device__ float span_sum(const float* __restrict__ p, int64_t n, int rank, int count) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  const int64_t misaligned = static_cast<int64_t>(address / sizeof(float) % 4);
  const int64_t head = min(n, (4 - misaligned) % 4);
  const int64_t body = (n - head) / 4;  // whole float4s after the head
  const int64_t tail = head + 4 * body;
  double total = 0.0;
  if (rank < head) {
    total += static_cast<double>(__ldcs(p + rank));
  }
  if (tail + rank < n) {
    total += static_cast<double>(__ldcs(p + tail + rank));
  }
  const float4* quads = reinterpret_cast<const float4*>(p + head);
  for (int64_t i = rank; i < body; i += kUnroll * count) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = i + static_cast<int64_t>(u) * count;
      v[u] = k < body ? __ldcs(quads + k) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    const float batch = (quad_sum(v[0]) + quad_sum(v[1])) + (quad_sum(v[2]) + quad_sum(v[3]));
    total += static_cast<double>(batch);
  }
  return static_cast<float>(total);
}

// Row sums of x, `len` floats a row. Row r is cut into `pieces` pieces of `piece_len` floats
// (the last shorter); task t = r * pieces + j sums piece j of row r into out[t]. kGroup threads
// (a warp, or the block) per task.
template <int kGroup>
__global__ void __launch_bounds__(kThreads)
    row_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t len,
                   int64_t pieces, int64_t piece_len, int64_t tasks) {
  constexpr int kGroups = kThreads / kGroup;
  __shared__ float scratch[kWarps];
  const int rank = threadIdx.x % kGroup;
  // first is the same for the whole block: its threads loop the same number of times.
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kGroups; first < tasks;
       first += static_cast<int64_t>(gridDim.x) * kGroups) {
    const int64_t task = first + threadIdx.x / kGroup;  // the same for the whole group
    float s = 0.0f;
    if (task < tasks) {
      const int64_t row = task / pieces;
      const int64_t start = (task % pieces) * piece_len;
      s = span_sum(x + row * len + start, min(piece_len, len - start), rank, kGroup);
    }
    if constexpr (kGroup == 32) {
      s = warp_sum(s);
    } else {
      s = block_sum(s, scratch);
    }
    if (rank == 0 && task < tasks) {
      out[task] = s;
    }
  }
}

template <int V>
__device__ __forceinline__ void load_vec(const float* p, float (&v)[V]) {
  if constexpr (V == 4) {
    const float4 t = __ldcs(reinterpret_cast<const float4*>(p));
    v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
  } else if constexpr (V == 2) {
    const float2 t = __ldcs(reinterpret_cast<const float2*>(p));
    v[0] = t.x; v[1] = t.y;
  } else {
    v[0] = __ldcs(p);
  }
}

template <int V>
__device__ __forceinline__ void store_vec(float* p, const float (&v)[V]) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else if constexpr (V == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
  } else {
    p[0] = v[0];
  }
}

// Column sums of x seen as (outer, rows, cols) V-float vectors (inner = cols * V floats):
// out[(o * splits + j) * inner + c * V + k] = sum over rows r of split j of x[o, r, c * V + k],
// split j holding rows [j * split_rows, (j + 1) * split_rows). Task t = (o * col_blocks + b) *
// splits + j. The block's threads are (tx, ty): tx_count columns of block b, ty_count threads
// stacked on each (tx_count * ty_count <= kThreads; the rest idle); ty sums rows ty, ty +
// ty_count, ... of its split. ty_pow2: the least power of two >= ty_count.
template <int V>
__global__ void __launch_bounds__(kThreads)
    column_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t rows,
                      int64_t cols, int tx_count, int ty_count, int ty_pow2, int64_t col_blocks,
                      int64_t splits, int64_t split_rows, int64_t tasks) {
  __shared__ float partial[kThreads * V];
  const int tx = threadIdx.x % tx_count;
  const int ty = threadIdx.x / tx_count;  // >= ty_count: an idle thread
  const int64_t pitch = cols * V;         // floats from one row to the next
  for (int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {  // the same for the block
    const int64_t split = task % splits;
    const int64_t o = task / splits / col_blocks;
    const int64_t col = (task / splits % col_blocks) * tx_count + tx;
    const int64_t row_end = min(rows, (split + 1) * split_rows);

    double total[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      total[k] = 0.0;
    }
    if (ty < ty_count && col < cols) {
      const float* column = x + o * rows * pitch + col * V;
      int64_t r = split * split_rows + ty;
      for (; r + (kUnroll - 1) * static_cast<int64_t>(ty_count) < row_end;
           r += kUnroll * static_cast<int64_t>(ty_count)) {
        float v[kUnroll][V];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          load_vec<V>(column + (r + static_cast<int64_t>(u) * ty_count) * pitch, v[u]);
        }
#pragma unroll
        for (int k = 0; k < V; ++k) {
          total[k] += static_cast<double>((v[0][k] + v[1][k]) + (v[2][k] + v[3][k]));
        }
      }
      for (; r < row_end; r += ty_count) {
        float v[V];
        load_vec<V>(column + r * pitch, v);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          total[k] += static_cast<double>(v[k]);
        }
      }
    }
    float sum[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      sum[k] = static_cast<float>(total[k]);
    }

    if (ty_count > 1) {  // the same for the whole block
#pragma unroll
      for (int k = 0; k < V; ++k) {
        partial[threadIdx.x * V + k] = sum[k];
      }
      __syncthreads();
      // A tree over ty for any ty_count: at stride s, ty < s adds ty + s if that exists. Once s
      // reaches a power of two, positions [0, 2s) hold everything, so the halving is exact.
      for (int s = ty_pow2 / 2; s > 0; s >>= 1) {
        if (ty < s && ty + s < ty_count) {
#pragma unroll
          for (int k = 0; k < V; ++k) {
            partial[threadIdx.x * V + k] += partial[(threadIdx.x + s * tx_count) * V + k];
          }
        }
        __syncthreads();
      }
#pragma unroll
      for (int k = 0; k < V; ++k) {
        sum[k] = partial[tx * V + k];  // ty == 0's slot; only ty == 0 uses it
      }
      __syncthreads();  // read before the next task writes partial again
    }
    if (ty == 0 && col < cols) {
      store_vec<V>(out + (o * splits + split) * pitch + col * V, sum);
    }
  }
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks of kThreads that the device runs at once for `kernel`.
template <typename Kernel>
static int64_t resident_blocks(Kernel kernel, int device) {
  int sm_count = 0;
  int per_sm = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
  return static_cast<int64_t>(sm_count) * std::max(per_sm, 1);
}

static int grid_for(int64_t blocks) {
  return static_cast<int>(std::clamp<int64_t>(blocks, 1, kMaxBlocks));
}

// out[r] = sum of x[r * len, (r + 1) * len), rows r in [0, rows).
static void row_sum(const float* x, float* out, int64_t rows, int64_t len, bool may_split,
                    const torch::TensorOptions& options, cudaStream_t stream) {
  if (len <= kWarpRowMax) {
    row_sum_kernel<32><<<grid_for(ceil_div(rows, kWarps)), kThreads, 0, stream>>>(
        x, out, len, 1, len, rows);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  int64_t pieces = 1;
  if (may_split) {
    const int64_t target = resident_blocks(row_sum_kernel<kThreads>, options.device().index());
    if (rows < target) {
      pieces = std::min(ceil_div(target, rows), ceil_div(len, kMinPiece));
    }
  }
  // Pieces of a multiple of 4 floats: each starts at the row's own 16-byte phase.
  const int64_t piece_len = pieces > 1 ? ceil_div(ceil_div(len, pieces), 4) * 4 : len;
  pieces = ceil_div(len, piece_len);  // every piece non-empty
  if (pieces == 1) {
    row_sum_kernel<kThreads><<<grid_for(rows), kThreads, 0, stream>>>(x, out, len, 1, len, rows);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  torch::Tensor partial = at::empty({rows * pieces}, options);
  row_sum_kernel<kThreads><<<grid_for(rows * pieces), kThreads, 0, stream>>>(
      x, partial.data_ptr<float>(), len, pieces, piece_len, rows * pieces);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  row_sum(partial.data_ptr<float>(), out, rows, pieces, false, options, stream);
}

template <int V>
static void column_sum_vec(const float* x, float* out, int64_t outer, int64_t rows, int64_t inner,
                           bool may_split, const torch::TensorOptions& options,
                           cudaStream_t stream);

// out[o, c] = sum over r of x[o, r, c] for x of shape (outer, rows, inner), inner > 1.
static void column_sum(const float* x, float* out, int64_t outer, int64_t rows, int64_t inner,
                       bool may_split, const torch::TensorOptions& options, cudaStream_t stream) {
  // Every row starts inner floats after the last, so the base pointer's alignment and inner's
  // divisibility decide the vector width for all of them (out, fresh, is always aligned).
  const auto address = reinterpret_cast<uintptr_t>(x);
  if (inner % 4 == 0 && address % 16 == 0) {
    column_sum_vec<4>(x, out, outer, rows, inner, may_split, options, stream);
  } else if (inner % 2 == 0 && address % 8 == 0) {
    column_sum_vec<2>(x, out, outer, rows, inner, may_split, options, stream);
  } else {
    column_sum_vec<1>(x, out, outer, rows, inner, may_split, options, stream);
  }
}

template <int V>
static void column_sum_vec(const float* x, float* out, int64_t outer, int64_t rows, int64_t inner,
                           bool may_split, const torch::TensorOptions& options,
                           cudaStream_t stream) {
  const int64_t cols = inner / V;
  const int tx_count = static_cast<int>(std::min<int64_t>(cols, kThreads));
  const int ty_count = kThreads / tx_count;
  int ty_pow2 = 1;
  while (ty_pow2 < ty_count) {
    ty_pow2 *= 2;
  }
  const int64_t col_blocks = ceil_div(cols, tx_count);
  const int64_t blocks = outer * col_blocks;

  int64_t splits = 1;
  if (may_split) {
    const int64_t target = resident_blocks(column_sum_kernel<V>, options.device().index());
    if (blocks < target) {
      splits = std::max<int64_t>(1, std::min(ceil_div(target, blocks), rows / kMinRowsPerSplit));
    }
  }
  const int64_t split_rows = splits > 1 ? ceil_div(rows, splits) : rows;
  if (splits > 1) {
    splits = ceil_div(rows, split_rows);  // every split non-empty (rows >= 128 here)
  }
  if (splits == 1) {
    column_sum_kernel<V><<<grid_for(blocks), kThreads, 0, stream>>>(
        x, out, rows, cols, tx_count, ty_count, ty_pow2, col_blocks, 1, rows, blocks);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  // Partials laid out (outer, splits, inner): a column sum again, over `splits` rows.
  torch::Tensor partial = at::empty({outer * splits * inner}, options);
  column_sum_kernel<V><<<grid_for(blocks * splits), kThreads, 0, stream>>>(
      x, partial.data_ptr<float>(), rows, cols, tx_count, ty_count, ty_pow2, col_blocks, splits,
      split_rows, blocks * splits);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  column_sum(partial.data_ptr<float>(), out, outer, splits, inner, false, options, stream);
}

torch::Tensor sum_dim(torch::Tensor x, int64_t dim) {
  TORCH_CHECK(x.is_cuda(), "sum_dim: x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "sum_dim: x must be float32, got ", x.scalar_type());
  c10::cuda::CUDAGuard device_guard(x.device());

  // (outer, rows, inner) and the output's shape: x's without the reduced dimension.
  const int64_t d = c10::maybe_wrap_dim(dim, x.dim());  // a 0-D tensor takes dim 0 or -1
  std::vector<int64_t> out_shape;
  int64_t outer = 1;
  int64_t rows = 1;
  int64_t inner = 1;
  for (int64_t k = 0; k < x.dim(); ++k) {
    const int64_t size = x.size(k);
    if (k < d) {
      outer *= size;
      out_shape.push_back(size);
    } else if (k == d) {
      rows = size;
    } else {
      inner *= size;
      out_shape.push_back(size);
    }
  }
  torch::Tensor out = at::empty(out_shape, x.options());
  if (out.numel() == 0) {
    return out;
  }
  const torch::Tensor a = x.contiguous();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (inner == 1) {
    row_sum(a.data_ptr<float>(), out.data_ptr<float>(), outer, rows, true, a.options(), stream);
  } else {
    column_sum(a.data_ptr<float>(), out.data_ptr<float>(), outer, rows, inner, true, a.options(),
               stream);
  }
  return out;
}
"""

_ext = load_inline(
    name="sum_reduce_fast_cuda",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["sum_dim"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.sum_dim(x, self.dim)
