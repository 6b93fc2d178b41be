"""KernelBench level 1 problem 99: nn.TripletMarginLoss(margin)(anchor, positive, negative) (p=2, eps=1e-6, mean), with its own CUDA kernels.

Per row (the last dimension): d(x, y) = ||x - y + eps||_2 as F.pairwise_distance computes it, loss = max(margin + d(a, p) - d(a, n), 0).
One block per row accumulates the row's sums in float (float4 loads when every input is 16-byte
aligned and the row length a multiple of 4), reduced by warp shuffles then across warps, and
writes the row's loss; a single block then averages the row losses in double (no atomics, so the
answer is the same on every run).
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor triplet_forward(torch::Tensor a, torch::Tensor p, torch::Tensor n, double margin, double eps);"

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <algorithm>
#include <cstdint>
#include <vector>

constexpr int kAcc = 2;

// Sums kAcc values over the block at once; results valid in every thread.
__device__ __forceinline__ void triplet_block_sum(float (&v)[kAcc]) {
  __shared__ float sh[kAcc][32];
#pragma unroll
  for (int k = 0; k < kAcc; ++k)
    for (int off = 16; off > 0; off >>= 1) v[k] += __shfl_xor_sync(0xffffffffu, v[k], off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < kAcc; ++k) sh[k][warp] = v[k];
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int k = 0; k < kAcc; ++k) {
      float w = lane < nwarps ? sh[k][lane] : 0.0f;
      for (int off = 16; off > 0; off >>= 1) w += __shfl_xor_sync(0xffffffffu, w, off);
      if (lane == 0) sh[k][0] = w;
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kAcc; ++k) v[k] = sh[k][0];
}

__device__ __forceinline__ void triplet_accumulate(float (&acc)[kAcc], float x, float y, float z, float eps) {
  const float dp = (x - y) + eps;
  const float dn = (x - z) + eps;
  acc[0] += dp * dp;
  acc[1] += dn * dn;
}

__global__ void triplet_rows_kernel(const float* __restrict__ a, const float* __restrict__ p, const float* __restrict__ n, int64_t D, bool vec,
                                  float* __restrict__ row_loss, float margin, float eps) {
  const int64_t off = (int64_t)blockIdx.x * D;
  float acc[kAcc];
#pragma unroll
  for (int k = 0; k < kAcc; ++k) acc[k] = 0.0f;
  if (vec) {
    const float4* a4 = reinterpret_cast<const float4*>(a + off);
    const float4* p4 = reinterpret_cast<const float4*>(p + off);
    const float4* n4 = reinterpret_cast<const float4*>(n + off);
    for (int64_t i = threadIdx.x; i < D / 4; i += blockDim.x) {
      const float4 u = a4[i];
      const float4 v = p4[i];
      const float4 w = n4[i];
      triplet_accumulate(acc, u.x, v.x, w.x, eps);
      triplet_accumulate(acc, u.y, v.y, w.y, eps);
      triplet_accumulate(acc, u.z, v.z, w.z, eps);
      triplet_accumulate(acc, u.w, v.w, w.w, eps);
    }
  } else {
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
      triplet_accumulate(acc, a[off + i], p[off + i], n[off + i], eps);
    }
  }
  triplet_block_sum(acc);
  if (threadIdx.x == 0) {
    const float v = margin + sqrtf(acc[0]) - sqrtf(acc[1]);
    row_loss[blockIdx.x] = v < 0.0f ? 0.0f : v;
  }
}

// Mean of the row losses, in double; one block.
__global__ void triplet_mean_kernel(const float* __restrict__ row_loss, int64_t rows,
                                  float* __restrict__ out) {
  __shared__ double sh[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) acc += (double)row_loss[i];
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = (blockDim.x + 31) >> 5;
  if (lane == 0) sh[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < nwarps ? sh[lane] : 0.0;
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) out[0] = (float)(acc / (double)rows);
  }
}

torch::Tensor triplet_forward(torch::Tensor a, torch::Tensor p, torch::Tensor n, double margin, double eps) {
  std::vector<torch::Tensor> ins = {a, p, n};
  for (const auto& t : ins) {
    TORCH_CHECK(t.is_cuda(), "triplet: expected CUDA tensors");
    TORCH_CHECK(t.scalar_type() == torch::kFloat32, "triplet: expected float32");
    TORCH_CHECK(t.sizes() == ins[0].sizes(), "triplet: expected inputs of the same shape");
  }
  TORCH_CHECK(ins[0].dim() >= 1, "triplet: expected at least one dimension");

  c10::cuda::CUDAGuard guard(ins[0].device());
  bool vec = true;
  for (auto& t : ins) {
    t = t.contiguous();
    vec = vec && (reinterpret_cast<uintptr_t>(t.data_ptr<float>()) % 16 == 0);
  }
  const int64_t D = ins[0].size(ins[0].dim() - 1);
  const int64_t rows = D == 0 ? 0 : ins[0].numel() / D;
  vec = vec && (D % 4 == 0);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  torch::Tensor out = torch::empty({}, ins[0].options());
  torch::Tensor row_loss = torch::empty({std::max<int64_t>(rows, 1)}, ins[0].options());
  if (rows > 0) {
    TORCH_CHECK(rows < (int64_t)INT32_MAX, "triplet: too many rows");
    const int threads = D >= 2048 ? 256 : (D >= 256 ? 128 : 32);
    triplet_rows_kernel<<<(unsigned)rows, threads, 0, stream>>>(ins[0].data_ptr<float>(), ins[1].data_ptr<float>(), ins[2].data_ptr<float>(), D, vec,
        row_loss.data_ptr<float>(), (float)margin, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  triplet_mean_kernel<<<1, 1024, 0, stream>>>(row_loss.data_ptr<float>(), rows, out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

_ext = load_inline(
    name="kb_l1_p99_triplet_ext",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["triplet_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, margin=1.0):
        super().__init__()
        self.margin = margin
        # PyTorch's TripletMarginLoss defaults, which the reference uses: p=2, eps=1e-6,
        # swap=False, reduction='mean'.
        self.eps = 1e-6

    def forward(self, anchor, positive, negative):
        return _ext.triplet_forward(anchor, positive, negative, float(self.margin), self.eps)
