"""KernelBench level 1 problem 38: x / torch.mean(torch.abs(x), dim=1, keepdim=True) with its own CUDA kernels.

The tensor is read as (outer, D, inner) around dim 1. For the problem's 2-D input (inner == 1)
one block owns a row: each thread accumulates |x| over its float4s (scalar loads when the
row length is not a multiple of 4 or a tensor not 16-byte aligned, as for the problem's
65535 columns), a warp-shuffle then shared-memory reduction gives the row total, and a second
pass writes x / (sum(|x|) / D). For inner > 1 each thread owns one column x[o, :, i].
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor l1norm_forward(torch::Tensor x);"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>

// Streaming multiprocessors of the current device (cached per device). c10 headers only:
// ATen/cuda/CUDAContext.h would also pull in the cuSPARSE/cuBLAS headers, which a bare
// CUDA toolkit may lack.
static int sm_count() {
  int dev = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  static int cache[256] = {0};
  if (dev < 0 || dev >= 256) return 132;
  if (cache[dev] == 0) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&cache[dev], cudaDevAttrMultiProcessorCount, dev));
  }
  return cache[dev];
}

__device__ __forceinline__ float l1norm_term(float v) { return fabsf(v); }
// The mean of |x| over the D values of a row or column.
__device__ __forceinline__ float l1norm_denom(float total, int64_t D) { return total / (float)D; }

// Sum of v over the block, returned to every thread.
__device__ __forceinline__ float l1norm_block_sum(float v) {
  __shared__ float sh[32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? sh[lane] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}

__global__ void l1norm_rows_kernel(const float* __restrict__ x, float* __restrict__ y,
                                  int64_t D, bool vec) {
  const float* xr = x + (int64_t)blockIdx.x * D;
  float* yr = y + (int64_t)blockIdx.x * D;
  float acc = 0.0f;
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    for (int64_t i = threadIdx.x; i < D / 4; i += blockDim.x) {
      const float4 v = x4[i];
      acc += (l1norm_term(v.x) + l1norm_term(v.y)) + (l1norm_term(v.z) + l1norm_term(v.w));
    }
  } else {
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) acc += l1norm_term(xr[i]);
  }
  const float den = l1norm_denom(l1norm_block_sum(acc), D);
  if (vec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    float4* y4 = reinterpret_cast<float4*>(yr);
    for (int64_t i = threadIdx.x; i < D / 4; i += blockDim.x) {
      float4 v = x4[i];
      v.x = v.x / den;
      v.y = v.y / den;
      v.z = v.z / den;
      v.w = v.w / den;
      y4[i] = v;
    }
  } else {
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = xr[i] / den;
  }
}

__global__ void l1norm_cols_kernel(const float* __restrict__ x, float* __restrict__ y,
                                  int64_t outer, int64_t D, int64_t inner) {
  const int64_t total = outer * inner;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int64_t o = t / inner, i = t % inner;
    const float* xc = x + o * D * inner + i;
    float* yc = y + o * D * inner + i;
    float acc = 0.0f;
    for (int64_t d = 0; d < D; ++d) acc += l1norm_term(xc[d * inner]);
    const float den = l1norm_denom(acc, D);
    for (int64_t d = 0; d < D; ++d) yc[d * inner] = xc[d * inner] / den;
  }
}

torch::Tensor l1norm_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "l1norm: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "l1norm: expected float32");
  TORCH_CHECK(x.dim() >= 2, "l1norm: expected at least 2 dimensions (reduces dim 1)");
  c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor xc = x.contiguous();
  torch::Tensor y = torch::empty_like(xc);
  if (xc.numel() == 0) return y;
  const int64_t outer = xc.size(0), D = xc.size(1);
  const int64_t inner = xc.numel() / (outer * D);
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  if (inner == 1) {
    const bool vec = (D % 4 == 0) && (reinterpret_cast<uintptr_t>(xp) % 16 == 0) &&
                     (reinterpret_cast<uintptr_t>(yp) % 16 == 0);
    const int threads = D >= 8192 ? 1024 : (D >= 1024 ? 256 : 64);
    TORCH_CHECK(outer < (int64_t)INT32_MAX, "l1norm: too many rows");
    l1norm_rows_kernel<<<(unsigned)outer, threads, 0, stream>>>(xp, yp, D, vec);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  } else {
    const int threads = 256;
    const int64_t max_blocks = (int64_t)sm_count() * 16;
    const int64_t blocks = std::min<int64_t>((outer * inner + threads - 1) / threads, max_blocks);
    l1norm_cols_kernel<<<(unsigned)blocks, threads, 0, stream>>>(xp, yp, outer, D, inner);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y;
}
"""

_ext = load_inline(
    name="kb_l1_p38_l1norm_ext",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["l1norm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.l1norm_forward(x)
