"""KernelBench level 1 problem 29: F.softplus(x) (beta=1, threshold=20), as one elementwise CUDA kernel.

Grid-stride loop over the flattened tensor; float4 loads and stores when both the input and the
output start on a 16-byte boundary, with the last (n % 4) elements done one by one.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor softplus_forward(torch::Tensor x, double p);"

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

__device__ __forceinline__ float softplus_op(float v, float p) {
  return v > 20.0f ? v : log1pf(expf(v));
}

__global__ void softplus_vec4_kernel(const float4* __restrict__ x, float4* __restrict__ y,
                                  int64_t n4, float p) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
    float4 v = x[i];
    v.x = softplus_op(v.x, p);
    v.y = softplus_op(v.y, p);
    v.z = softplus_op(v.z, p);
    v.w = softplus_op(v.w, p);
    y[i] = v;
  }
}

__global__ void softplus_scalar_kernel(const float* __restrict__ x, float* __restrict__ y,
                                    int64_t begin, int64_t n, float p) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = begin + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    y[i] = softplus_op(x[i], p);
  }
}

torch::Tensor softplus_forward(torch::Tensor x, double p) {
  TORCH_CHECK(x.is_cuda(), "softplus: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "softplus: expected float32");
  c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor xc = x.contiguous();
  torch::Tensor y = torch::empty_like(xc);
  const int64_t n = xc.numel();
  if (n == 0) return y;
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int threads = 256;
  const int64_t max_blocks = (int64_t)sm_count() * 16;
  const bool aligned = (reinterpret_cast<uintptr_t>(xp) % 16 == 0) && (reinterpret_cast<uintptr_t>(yp) % 16 == 0);
  int64_t done = 0;
  if (aligned && n >= 4) {
    const int64_t n4 = n / 4;
    const int64_t blocks = std::min<int64_t>((n4 + threads - 1) / threads, max_blocks);
    softplus_vec4_kernel<<<(unsigned)blocks, threads, 0, stream>>>(
        reinterpret_cast<const float4*>(xp), reinterpret_cast<float4*>(yp), n4, (float)p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    done = n4 * 4;
  }
  if (done < n) {
    const int64_t rest = n - done;
    const int64_t blocks = std::min<int64_t>((rest + threads - 1) / threads, max_blocks);
    softplus_scalar_kernel<<<(unsigned)blocks, threads, 0, stream>>>(xp, yp, done, n, (float)p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return y.view(x.sizes());
}
"""

_ext = load_inline(
    name="kb_l1_p29_softplus_ext",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["softplus_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.softplus_forward(x, 0.0)
