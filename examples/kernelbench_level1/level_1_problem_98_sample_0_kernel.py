"""KernelBench level 1 problem 98: F.kl_div(torch.log(predictions), targets, reduction='batchmean'), a scalar, with its own CUDA kernels.

Two passes, no atomics (the same answer on every run): a grid-stride kernel computes each
element's term in float (float4 loads when both inputs are 16-byte aligned, then the tail one by
one), accumulates it per thread in double, reduces the block by warp shuffles and writes one
partial per block; a single block then adds the partials in double and divides by the batch size (dim 0).
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor kldiv_forward(torch::Tensor a, torch::Tensor b);"

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

// The per-element term, in float like the reference's elementwise ops.
__device__ __forceinline__ float kldiv_term(float a, float b) {
  // xlogy(t, t) - t * log(p): a zero target contributes 0 * log(p)
  const float tlogt = b == 0.0f ? 0.0f : b * logf(b);
  return tlogt - b * logf(a);
}

// Sum of v over the block (double); the result is valid in thread 0.
__device__ __forceinline__ double kldiv_block_sum(double v) {
  __shared__ double sh[32];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = 0.0;
  if (warp == 0) {
    v = lane < nwarps ? sh[lane] : 0.0;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  }
  return v;
}

__global__ void kldiv_partial_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                     int64_t n, bool vec, double* __restrict__ partial) {
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  double acc = 0.0;
  int64_t begin = 0;
  if (vec) {
    const int64_t n4 = n / 4;
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    for (int64_t i = tid; i < n4; i += stride) {
      const float4 u = a4[i];
      const float4 w = b4[i];
      const float s = (kldiv_term(u.x, w.x) + kldiv_term(u.y, w.y)) +
                      (kldiv_term(u.z, w.z) + kldiv_term(u.w, w.w));
      acc += (double)s;
    }
    begin = n4 * 4;
  }
  for (int64_t i = begin + tid; i < n; i += stride) acc += (double)kldiv_term(a[i], b[i]);
  acc = kldiv_block_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void kldiv_final_kernel(const double* __restrict__ partial, int64_t parts,
                                   double denom, float* __restrict__ out) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < parts; i += blockDim.x) acc += partial[i];
  acc = kldiv_block_sum(acc);
  if (threadIdx.x == 0) out[0] = (float)(acc / denom);
}

torch::Tensor kldiv_forward(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda(), "kldiv: expected CUDA tensors");
  TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
              "kldiv: expected float32");
  TORCH_CHECK(a.sizes() == b.sizes(), "kldiv: expected inputs of the same shape");
  c10::cuda::CUDAGuard guard(a.device());
  torch::Tensor ac = a.contiguous();
  torch::Tensor bc = b.contiguous();
  const int64_t n = ac.numel();
  const double denom = ac.dim() > 0 ? (double)ac.size(0) : 1.0;
  const float* ap = ac.data_ptr<float>();
  const float* bp = bc.data_ptr<float>();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int threads = 256;
  const int64_t max_blocks = (int64_t)sm_count() * 4;
  const bool vec = (reinterpret_cast<uintptr_t>(ap) % 16 == 0) && (reinterpret_cast<uintptr_t>(bp) % 16 == 0);
  const int64_t work = vec ? (n / 4 + n % 4) : n;
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((work + threads - 1) / threads, max_blocks));
  torch::Tensor partial = torch::empty({blocks}, ac.options().dtype(torch::kFloat64));
  torch::Tensor out = torch::empty({}, ac.options());
  kldiv_partial_kernel<<<(unsigned)blocks, threads, 0, stream>>>(ap, bp, n, vec, partial.data_ptr<double>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  kldiv_final_kernel<<<1, 1024, 0, stream>>>(partial.data_ptr<double>(), blocks, denom, out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

_ext = load_inline(
    name="kb_l1_p98_kldiv_ext",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["kldiv_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return _ext.kldiv_forward(predictions, targets)
