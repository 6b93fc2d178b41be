"""x.sum(dim) written the way the minitorch notes teach a reduction.

The tensor is made contiguous and read as (outer, reduced, inner): the sizes before the reduced
dimension, the reduced one, the sizes after it. As the notes say, blocks divide the output
("blockspergrid ... 要按照输出数据分"): one 256-thread block per output element out[o, i].
Each thread walks the reduced dimension with a stride of the block size, summing its terms,
then the block adds the 256 partial sums in a shared-memory tree, pairs of partials 2s apart at
step s (the notes' `_sum_practice`, with its float64 cache: partials and tree are in double),
and thread 0 writes the result.

The notes' warnings are kept: no thread returns early, so every thread reaches every
`__syncthreads()` (a block that finishes one output loops to the next one the grid has not
covered, the same number of times for all its threads); and a barrier follows the tree before
the cache is filled again. Nothing here is tuned: for a reduced dimension that is not last, the
threads of a block read addresses `inner` floats apart, so each load touches its own sector.
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

constexpr int THREADS_PER_BLOCK = 256;  // a power of two: the tree halves it down to one
constexpr int64_t MAX_BLOCKS = 1 << 30;  // more outputs than this: each block loops

// out[o * inner + i] = sum over r of a[(o * reduce_size + r) * inner + i].
__global__ void __launch_bounds__(THREADS_PER_BLOCK)
    sum_kernel(const float* __restrict__ a, float* __restrict__ out, int64_t out_size,
               int64_t reduce_size, int64_t inner) {
  __shared__ double cache[THREADS_PER_BLOCK];
  const int pos = threadIdx.x;
  // The same trip count for every thread of the block: no thread leaves before a barrier.
  for (int64_t out_pos = blockIdx.x; out_pos < out_size; out_pos += gridDim.x) {
    const int64_t o = out_pos / inner;
    const int64_t i = out_pos % inner;
    const float* start = a + o * reduce_size * inner + i;

    double value = 0.0;
    for (int64_t r = pos; r < reduce_size; r += THREADS_PER_BLOCK) {
      value += static_cast<double>(start[r * inner]);
    }
    cache[pos] = value;
    __syncthreads();

    // The notes' tree: at step s, each position that is a multiple of 2s adds the one s after
    // it. pos + s stays inside the block because THREADS_PER_BLOCK is a power of two.
    for (int s = 1; s < THREADS_PER_BLOCK; s *= 2) {
      if (pos % (2 * s) == 0) {
        cache[pos] += cache[pos + s];
      }
      __syncthreads();
    }
    if (pos == 0) {
      out[out_pos] = static_cast<float>(cache[0]);
    }
    __syncthreads();  // cache[0] is read before the next output overwrites it
  }
}

torch::Tensor sum_dim(torch::Tensor x, int64_t dim) {
  TORCH_CHECK(x.is_cuda(), "sum_dim: x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "sum_dim: x must be float32, got ", x.scalar_type());
  c10::cuda::CUDAGuard device_guard(x.device());

  // (outer, reduce_size, inner) and the output's shape: x's without the reduced dimension.
  const int64_t d = c10::maybe_wrap_dim(dim, x.dim());  // a 0-D tensor takes dim 0 or -1
  std::vector<int64_t> out_shape;
  int64_t outer = 1;
  int64_t reduce_size = 1;
  int64_t inner = 1;
  for (int64_t k = 0; k < x.dim(); ++k) {
    const int64_t size = x.size(k);
    if (k < d) {
      outer *= size;
      out_shape.push_back(size);
    } else if (k == d) {
      reduce_size = size;
    } else {
      inner *= size;
      out_shape.push_back(size);
    }
  }
  torch::Tensor out = at::empty(out_shape, x.options());
  const int64_t out_size = outer * inner;
  if (out_size == 0) {
    return out;
  }
  const torch::Tensor a = x.contiguous();
  const int blocks = static_cast<int>(std::min(out_size, MAX_BLOCKS));
  sum_kernel<<<blocks, THREADS_PER_BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
      a.data_ptr<float>(), out.data_ptr<float>(), out_size, reduce_size, inner);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

_ext = load_inline(
    name="sum_reduce_notes_cuda",
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
