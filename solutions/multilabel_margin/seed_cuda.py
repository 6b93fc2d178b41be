"""MultiLabelMarginLoss in CUDA: one block per sample with its labels cached in shared memory.

The seed's strategy. Block b handles sample b: it finds the label count (entries up to the
first -1), caches the labels' scores x[y_j] and an is-target flag per class in dynamic shared
memory, then its threads stride over the classes; for each non-target class i a thread adds
max(0, 1 - x[y_j] + x[i]) over every label j. A warp-shuffle block reduction gives the sample's
sum, and thread 0 writes sum / C to a per-sample output (N,). 'mean' and 'sum' are then one torch
call on those N values. Sums are kept in float, as PyTorch's CUDA kernel does.

Semantics follow nn.MultiLabelMarginLoss: labels after the first -1 are ignored, a duplicated
label counts once per occurrence, 1-D input (C,) gives 0-D results. A label outside [-1, C)
before the first -1 is invalid input (PyTorch raises): the kernel reads nothing at that index
and gives the sample a NaN loss, so 'mean' and 'sum' are NaN too. Entries after the first -1 are
never read, so an invalid one there goes unnoticed.

The cache takes 5 bytes per class. When C is too large for the default 48 KB of shared memory
per block, the same kernel uses a scratch buffer in global memory instead.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = (
    "torch::Tensor multilabel_margin_per_sample(torch::Tensor input, torch::Tensor target);"
)

CUDA_SOURCE = r"""
// No <torch/extension.h>: the <torch/types.h> that load_inline puts first is enough here, at
// well under half the compile time (the C++ API and pybind11 are for main.cpp).
// c10 headers only: ATen/cuda/CUDAContext.h also pulls in cuBLAS/cuSPARSE headers.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <math_constants.h>

#include <algorithm>
#include <cstdint>
#include <limits>

constexpr int kThreads = 256;  // a multiple of 32: block_sum relies on whole warps

// Sum of v over the block; the result is valid in thread 0.
__device__ __forceinline__ float block_sum(float v, float* warp_sums) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_sums[warp] = v;
  }
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? warp_sums[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) {
      v += __shfl_down_sync(0xffffffffu, v, offset);
    }
  }
  return v;
}

// One block per sample. scratch_x / scratch_flags are null when the label cache fits in dynamic
// shared memory (5 * C bytes); otherwise they hold one C-sized slice per sample.
__global__ void multilabel_margin_kernel(const float* __restrict__ input,
                                         const int64_t* __restrict__ target,
                                         float* __restrict__ out, int classes,
                                         float* scratch_x, uint8_t* scratch_flags) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int label_count;
  __shared__ float warp_sums[32];

  const int64_t row = blockIdx.x;
  const float* x = input + row * classes;
  const int64_t* y = target + row * classes;
  float* label_x;        // x[y_j] for each label j, in label order
  uint8_t* is_target;    // 1 for the classes that are labels of this sample
  if (scratch_x != nullptr) {
    label_x = scratch_x + row * classes;
    is_target = scratch_flags + row * classes;
  } else {
    label_x = reinterpret_cast<float*>(smem);
    is_target = smem + static_cast<size_t>(classes) * sizeof(float);
  }

  // Label count = index of the first entry outside [0, C). Scan one block-width chunk at a time
  // so that the usual short list costs one read per thread, and stop at the chunk holding it.
  __shared__ bool invalid;  // the list ends at a value other than -1: out of range
  if (threadIdx.x == 0) {
    label_count = classes;
  }
  __syncthreads();
  for (int base = 0; base < classes; base += blockDim.x) {
    const int k = base + threadIdx.x;
    bool stop = false;
    if (k < classes) {
      const int64_t label = y[k];
      stop = label < 0 || label >= classes;
    }
    if (stop) {
      atomicMin(&label_count, k);
    }
    if (__syncthreads_or(stop)) {  // also the barrier that publishes label_count
      break;
    }
  }
  const int count = label_count;
  if (threadIdx.x == 0) {
    invalid = count < classes && y[count] != -1;
  }

  for (int i = threadIdx.x; i < classes; i += blockDim.x) {
    is_target[i] = 0;
  }
  __syncthreads();
  for (int k = threadIdx.x; k < count; k += blockDim.x) {
    const int label = static_cast<int>(y[k]);  // in [0, C) by the scan above
    label_x[k] = x[label];
    is_target[label] = 1;  // duplicates store the same value: harmless
  }
  __syncthreads();

  float sum = 0.0f;
  for (int i = threadIdx.x; i < classes; i += blockDim.x) {
    if (is_target[i]) {
      continue;
    }
    const float xi = x[i];
    for (int j = 0; j < count; ++j) {  // a duplicated label is summed once per occurrence
      const float z = 1.0f - label_x[j] + xi;
      if (z > 0.0f) {
        sum += z;
      }
    }
  }
  sum = block_sum(sum, warp_sums);
  if (threadIdx.x == 0) {
    out[row] = invalid ? CUDART_NAN_F : sum / static_cast<float>(classes);
  }
}

// Per-sample losses, shape (N,), for input (N, C), (C,) or a 0-D scalar.
torch::Tensor multilabel_margin_per_sample(torch::Tensor input, torch::Tensor target) {
  TORCH_CHECK(input.is_cuda() && target.is_cuda(),
              "multilabel_margin: input and target must be CUDA tensors");
  TORCH_CHECK(input.device() == target.device(),
              "multilabel_margin: input and target must be on the same device");
  TORCH_CHECK(input.scalar_type() == at::kFloat,
              "multilabel_margin: input must be float32, got ", input.scalar_type());
  TORCH_CHECK(target.scalar_type() == at::kLong,
              "multilabel_margin: target must be int64, got ", target.scalar_type());
  TORCH_CHECK(input.dim() <= 2,
              "multilabel_margin: input must be (N, C) or (C,), got shape ", input.sizes());
  const int64_t rows = input.dim() == 2 ? input.size(0) : 1;
  const int64_t classes = input.dim() == 2 ? input.size(1) : input.numel();
  TORCH_CHECK(classes > 0, "multilabel_margin: need at least one class, got shape ",
              input.sizes());
  if (input.dim() == 2) {
    TORCH_CHECK(target.sizes() == input.sizes(), "multilabel_margin: target shape ",
                target.sizes(), " does not match input shape ", input.sizes());
  } else {
    TORCH_CHECK(target.dim() <= 1 && target.numel() == classes, "multilabel_margin: target shape ",
                target.sizes(), " does not match input shape ", input.sizes());
  }
  // int class indices in the kernel; the headroom keeps `base + blockDim.x` from overflowing.
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  TORCH_CHECK(classes <= kIntMax - kThreads && rows <= kIntMax,
              "multilabel_margin: shape too large: ", input.sizes());

  c10::cuda::CUDAGuard device_guard(input.device());
  const torch::Tensor x = input.contiguous();
  const torch::Tensor y = target.contiguous();
  torch::Tensor out = at::empty({rows}, x.options());
  if (rows == 0) {
    return out;
  }

  // Dynamic shared memory allowed without opting in: the kernel's own limit, capped by the
  // per-block limit (48 KB) minus the kernel's static shared memory.
  int smem_per_block = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&smem_per_block, cudaDevAttrMaxSharedMemoryPerBlock,
                                        x.get_device()));
  cudaFuncAttributes attr;
  C10_CUDA_CHECK(cudaFuncGetAttributes(&attr, multilabel_margin_kernel));
  const size_t smem_limit = std::min(static_cast<size_t>(attr.maxDynamicSharedSizeBytes),
                                     static_cast<size_t>(smem_per_block) - attr.sharedSizeBytes);
  const size_t cache_bytes = static_cast<size_t>(classes) * (sizeof(float) + sizeof(uint8_t));
  const bool use_smem = cache_bytes <= smem_limit;

  torch::Tensor scratch_x;
  torch::Tensor scratch_flags;
  if (!use_smem) {
    scratch_x = at::empty({rows, classes}, x.options());
    scratch_flags = at::empty({rows, classes}, x.options().dtype(at::kByte));
  }
  multilabel_margin_kernel<<<static_cast<unsigned int>(rows), kThreads,
                             use_smem ? cache_bytes : 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<int64_t>(), out.data_ptr<float>(),
      static_cast<int>(classes), use_smem ? nullptr : scratch_x.data_ptr<float>(),
      use_smem ? nullptr : scratch_flags.data_ptr<uint8_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

_ext = load_inline(
    name="multilabel_margin_seed_cuda",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["multilabel_margin_per_sample"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        if reduction not in ("none", "mean", "sum"):
            raise ValueError(f"{reduction} is not a valid value for reduction")
        self.reduction = reduction

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        losses = _ext.multilabel_margin_per_sample(input, target)  # (N,)
        if self.reduction == "mean":
            return losses.mean()
        if self.reduction == "sum":
            return losses.sum()
        # nn.MultiLabelMarginLoss gives a 0-D result for a single unbatched sample.
        return losses if input.dim() == 2 else losses.reshape(())
