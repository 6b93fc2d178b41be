"""KernelBench level 1 problem 36: RMS normalisation over dim 1 with its own CUDA kernel.

y = x / sqrt(mean(x ** 2, dim=1) + eps). The tensor is read as (outer, C, inner): for the
problem's (112, 64, 512, 512) input, outer = 112, C = 64, inner = 262144. Each thread owns four
adjacent positions (o, :, i..i+3) when inner is a multiple of 4 and the tensors 16-byte aligned
(one position otherwise), so a warp reads 512 contiguous bytes of each channel plane; it sums
the squares over C in float, then reads its column again to write x / rms.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor rmsnorm_forward(torch::Tensor x, double eps);"

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

// inner % 4 == 0, aligned: a thread per 4 adjacent positions.
__global__ void rmsnorm_vec4_kernel(const float* __restrict__ x, float* __restrict__ y,
                                    int64_t outer, int64_t C, int64_t inner, float eps) {
  const int64_t inner4 = inner / 4;
  const int64_t total = outer * inner4;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const float fc = (float)C;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int64_t o = t / inner4, i = (t % inner4) * 4;
    const float* xc = x + o * C * inner + i;
    float* yc = y + o * C * inner + i;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int64_t c = 0; c < C; ++c) {
      const float4 v = *reinterpret_cast<const float4*>(xc + c * inner);
      acc.x += v.x * v.x;
      acc.y += v.y * v.y;
      acc.z += v.z * v.z;
      acc.w += v.w * v.w;
    }
    const float rx = sqrtf(acc.x / fc + eps);
    const float ry = sqrtf(acc.y / fc + eps);
    const float rz = sqrtf(acc.z / fc + eps);
    const float rw = sqrtf(acc.w / fc + eps);
    for (int64_t c = 0; c < C; ++c) {
      float4 v = *reinterpret_cast<const float4*>(xc + c * inner);
      v.x = v.x / rx;
      v.y = v.y / ry;
      v.z = v.z / rz;
      v.w = v.w / rw;
      *reinterpret_cast<float4*>(yc + c * inner) = v;
    }
  }
}

// Any layout: a thread per position.
__global__ void rmsnorm_scalar_kernel(const float* __restrict__ x, float* __restrict__ y,
                                      int64_t outer, int64_t C, int64_t inner, float eps) {
  const int64_t total = outer * inner;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const float fc = (float)C;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int64_t o = t / inner, i = t % inner;
    const float* xc = x + o * C * inner + i;
    float* yc = y + o * C * inner + i;
    float acc = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      const float v = xc[c * inner];
      acc += v * v;
    }
    const float r = sqrtf(acc / fc + eps);
    for (int64_t c = 0; c < C; ++c) yc[c * inner] = xc[c * inner] / r;
  }
}

torch::Tensor rmsnorm_forward(torch::Tensor x, double eps) {
  TORCH_CHECK(x.is_cuda(), "rmsnorm: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "rmsnorm: expected float32");
  TORCH_CHECK(x.dim() >= 2, "rmsnorm: expected at least 2 dimensions (normalises over dim 1)");
  c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor xc = x.contiguous();
  torch::Tensor y = torch::empty_like(xc);
  if (xc.numel() == 0) return y;
  const int64_t outer = xc.size(0), C = xc.size(1);
  const int64_t inner = xc.numel() / (outer * C);
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int threads = 256;
  const int64_t max_blocks = (int64_t)sm_count() * 16;
  const bool vec = (inner % 4 == 0) && (reinterpret_cast<uintptr_t>(xp) % 16 == 0) &&
                   (reinterpret_cast<uintptr_t>(yp) % 16 == 0);
  if (vec) {
    const int64_t work = outer * (inner / 4);
    const int64_t blocks = std::min<int64_t>((work + threads - 1) / threads, max_blocks);
    rmsnorm_vec4_kernel<<<(unsigned)blocks, threads, 0, stream>>>(xp, yp, outer, C, inner, (float)eps);
  } else {
    const int64_t work = outer * inner;
    const int64_t blocks = std::min<int64_t>((work + threads - 1) / threads, max_blocks);
    rmsnorm_scalar_kernel<<<(unsigned)blocks, threads, 0, stream>>>(xp, yp, outer, C, inner, (float)eps);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

_ext = load_inline(
    name="kb_l1_p36_rmsnorm_ext",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["rmsnorm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.rmsnorm_forward(x, float(self.eps))
