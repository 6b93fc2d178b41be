"""KernelBench level 1 problem 47: torch.sum(x, dim, keepdim=True) with its own CUDA kernels.

The tensor is read as (outer, D, inner), D the summed dimension.
- inner > 1 (the problem: 128 x 4096 x 4095 summed over dim 1): a block of 32 x 8 threads owns 32
  adjacent columns of one outer index; its 8 rows of threads take every 8th row of D (a warp reads
  32 adjacent floats of one row), and the 8 partial sums of a column are added in shared memory.
- inner == 1 (the last dimension): one block per row, float4 loads when aligned, warp-shuffle
  then shared-memory reduction.
Sums are accumulated in float, as PyTorch does.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor sum_dim_forward(torch::Tensor x, int64_t dim);"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>
#include <vector>

constexpr int kTileX = 32;
constexpr int kTileY = 8;

__global__ void sum_cols_kernel(const float* __restrict__ x, float* __restrict__ y,
                                int64_t outer, int64_t D, int64_t inner) {
  __shared__ float sh[kTileY][kTileX + 1];
  const int64_t col = (int64_t)blockIdx.x * kTileX + threadIdx.x;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    float acc = 0.0f;
    if (col < inner) {
      const float* xc = x + o * D * inner + col;
      for (int64_t d = threadIdx.y; d < D; d += kTileY) acc += xc[d * inner];
    }
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < inner) {
      float total = 0.0f;
#pragma unroll
      for (int k = 0; k < kTileY; ++k) total += sh[k][threadIdx.x];
      y[o * inner + col] = total;
    }
    __syncthreads();
  }
}

__global__ void sum_rows_kernel(const float* __restrict__ x, float* __restrict__ y,
                                int64_t D, bool vec) {
  __shared__ float sh[32];
  const float* xr = x + (int64_t)blockIdx.x * D;
  float acc = 0.0f;
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    for (int64_t i = threadIdx.x; i < D / 4; i += blockDim.x) {
      const float4 v = x4[i];
      acc += (v.x + v.y) + (v.z + v.w);
    }
  } else {
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) acc += xr[i];
  }
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  if (lane == 0) sh[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < nwarps ? sh[lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) y[blockIdx.x] = acc;
  }
}

torch::Tensor sum_dim_forward(torch::Tensor x, int64_t dim) {
  TORCH_CHECK(x.is_cuda(), "sum_dim: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "sum_dim: expected float32");
  TORCH_CHECK(x.dim() >= 1, "sum_dim: expected at least one dimension");
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t nd = x.dim();
  if (dim < 0) dim += nd;
  TORCH_CHECK(dim >= 0 && dim < nd, "sum_dim: dim out of range");
  torch::Tensor xc = x.contiguous();
  std::vector<int64_t> out_sizes(xc.sizes().begin(), xc.sizes().end());
  out_sizes[dim] = 1;
  torch::Tensor y = torch::empty(out_sizes, xc.options());
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < dim; ++k) outer *= xc.size(k);
  for (int64_t k = dim + 1; k < nd; ++k) inner *= xc.size(k);
  const int64_t D = xc.size(dim);
  if (y.numel() == 0) return y;
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (inner == 1) {
    const bool vec = (D % 4 == 0) && (reinterpret_cast<uintptr_t>(xp) % 16 == 0);
    const int threads = D >= 4096 ? 512 : (D >= 512 ? 128 : 32);
    TORCH_CHECK(outer < (int64_t)INT32_MAX, "sum_dim: too many rows");
    sum_rows_kernel<<<(unsigned)outer, threads, 0, stream>>>(xp, yp, D, vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  } else {
    const dim3 block(kTileX, kTileY);
    const dim3 grid((unsigned)((inner + kTileX - 1) / kTileX), (unsigned)std::min<int64_t>(outer, 65535));
    sum_cols_kernel<<<grid, block, 0, stream>>>(xp, yp, outer, D, inner);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}
"""

_ext = load_inline(
    name="kb_l1_p47_sum_dim_ext",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["sum_dim_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.sum_dim_forward(x, int(self.dim))
