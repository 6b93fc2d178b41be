"""MultiLabelMarginLoss, a warp per sample as in warp_cuda, with two FP32 instructions per pair.

warp_cuda spends three instructions on each (class, label) pair, add, max and add, in
    sum over non-target i, label j of max(0, 1 - x[y_j] + x[i]),
and at the benchmark's 5.5 labels a row that is compute, not the stream. Here, with
c_j = x[y_j] - 1, the labels are taken four at a time (a chunk) and each class adds
    d(x[i]) = (max(x[i], c_1) + ... + max(x[i], c_4)) - (c_1 + ... + c_4),
which is sum_j max(0, x[i] - c_j): one `fmaxf` and one add per pair, and a subtraction per
chunk (per float4 group of classes, 4 * (c_1 + ... + c_4), which doubling keeps exact). Both
sums are taken in the same order, so a class below every c_j of the chunk, or a NaN (fmaxf
returns the other operand), adds exactly 0, as in warp_cuda; a leftover chunk of 1-3 labels is
handled the same way. Target classes are not masked: the row is summed over all classes, and
each distinct target class's own d (its score is at hand: it was read for its margin) is
subtracted once, so the loop needs no bitmap either. Duplicate labels are told apart with
`__match_any_sync`, the lowest lane of each group subtracting, so the result is deterministic.

This fast path is taken for rows with at most 32 labels whose label scores are all finite and
at most kScoreLimit (1024) in magnitude: the rounding of the chunk sums grows with the label
scores, and an infinite or NaN one would make inf - inf. Every other row (more labels, extreme
label scores) goes through warp_cuda's exact code: target classes masked to -inf by a bitmap,
three instructions per pair.

The stream: each lane owns float4 groups lane, lane + 32, ... of the row, kUnroll of them per
step. With kPrefetch the next step's groups are in flight while the current ones are summed, so
the memory system does not wait on the arithmetic (launch bounds keep the registers to what the
occupancy needs for 4096 rows to fit on the H200 in one wave), and the first two steps are
loaded before the label scan, so that its latency overlaps the stream. The launch parameters
are macros at the top of the CUDA source (tuning/multilabel_launch_configs.py sweeps them).

For 'mean' and 'sum' the per-sample losses are reduced in the same launch, as in warp_cuda:
each block adds its samples' losses in order and stores that partial; the last block to finish
(an atomic counter, per device and stream, reset by that block) adds the partials in double, in
block order, so the result is deterministic. For 'none' the per-sample losses are the output.

Semantics follow nn.MultiLabelMarginLoss: labels after the first -1 are ignored, a duplicated
label counts once per occurrence, 1-D input (C,) gives 0-D results, a NaN term is skipped, a
+inf score gives +inf. A label outside [-1, C) before the first -1 is invalid input (PyTorch
raises): it is never used as an index, and the sample's loss is NaN (so 'mean' and 'sum' are
NaN). Entries after the first -1 are never read, so an invalid one there goes unnoticed.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = (
    "torch::Tensor multilabel_margin(torch::Tensor input, torch::Tensor target, int64_t reduction);"
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
#include <map>
#include <mutex>
#include <utility>

// Launch configuration (tuning/multilabel_launch_configs.py builds others with -DNAME=value).
#ifndef MLM_WARPS  // warps (samples) per block
#define MLM_WARPS 8
#endif
#ifndef MLM_UNROLL  // float4 groups per lane per step
#define MLM_UNROLL 4
#endif
#ifndef MLM_PREFETCH  // 1: load the next step's groups before summing the current ones
#define MLM_PREFETCH 1
#endif
#ifndef MLM_MIN_BLOCKS  // resident blocks per SM the register budget must allow
#define MLM_MIN_BLOCKS 4
#endif
#ifndef MLM_LOAD  // stream loads: 0 ld.global.nc, 1 ld.global.nc.L1::no_allocate, 2 ld.global.cs
#define MLM_LOAD 0
#endif

constexpr int kLabelCap = 256;     // label margins cached in shared memory per warp, 4 | this
constexpr int kBitmapWords = 256;  // target bitmap in shared memory per warp: 8192 classes
constexpr float kScoreLimit = 1024.0f;  // fast path: every label score within +-this
constexpr unsigned kFullMask = 0xffffffffu;

enum Reduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_down_sync(kFullMask, v, offset);
  }
  return v;
}

// ---- Loading the row --------------------------------------------------------------------

__device__ __forceinline__ float4 stream_load(const float* x, int g) {
  const float4* p = reinterpret_cast<const float4*>(x) + g;
#if MLM_LOAD == 1
  float4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p));
  return v;
#elif MLM_LOAD == 2
  return __ldcs(p);
#else
  return __ldg(p);
#endif
}

// Group g = classes [4g, 4g + 4) of the row; classes past the end, and groups past the last
// (g >= groups), are -inf: they add 0 on both paths.
__device__ __forceinline__ float4 load_group(const float* x, int classes, bool vec, int g) {
  const int i = 4 * g;
  if (vec && i + 3 < classes) {
    return stream_load(x, g);
  }
  const float pad = -CUDART_INF_F;
  return make_float4(i < classes ? __ldg(x + i) : pad, i + 1 < classes ? __ldg(x + i + 1) : pad,
                     i + 2 < classes ? __ldg(x + i + 2) : pad,
                     i + 3 < classes ? __ldg(x + i + 3) : pad);
}

// ---- The fast path: chunks of labels, d(v) = sum_j max(v, c_j) - sum_j c_j ----------------

template <int R>
struct Chunk {
  float c[R];  // margins c_j = x[y_j] - 1
  float s;     // c_1 + ... + c_R, added in the order d adds the maxima

  __device__ __forceinline__ explicit Chunk(const float* m) {
    if constexpr (R == 4) {
      const float4 q = *reinterpret_cast<const float4*>(m);  // m is 16-byte aligned here
      c[0] = q.x;
      c[1] = q.y;
      c[2] = q.z;
      c[3] = q.w;
    } else {
#pragma unroll
      for (int k = 0; k < R; ++k) {
        c[k] = m[k];
      }
    }
    s = c[0];
#pragma unroll
    for (int k = 1; k < R; ++k) {
      s += c[k];
    }
  }

  // max(v, c_1) + ... + max(v, c_R): equal to s, bit for bit, when v <= every c_j or is NaN.
  __device__ __forceinline__ float maxima(float v) const {
    float t = fmaxf(v, c[0]);
#pragma unroll
    for (int k = 1; k < R; ++k) {
      t += fmaxf(v, c[k]);
    }
    return t;
  }

  // d summed over one float4 group. (s + s) + (s + s) == 4 s exactly (doublings), so a group
  // whose four classes all add 0 adds exactly 0.
  __device__ __forceinline__ float group(float4 v, float four_s) const {
    return ((maxima(v.x) + maxima(v.y)) + (maxima(v.z) + maxima(v.w))) - four_s;
  }

  // d for one class: what the group sum added for it (up to rounding).
  __device__ __forceinline__ float one(float v) const { return maxima(v) - s; }
};

template <int R, int kUnroll>
__device__ __forceinline__ void add_chunk(float (&acc)[kUnroll], const float4 (&v)[kUnroll],
                                          const float* margins) {
  const Chunk<R> chunk(margins);
  const float four_s = 4.0f * chunk.s;  // exact
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    acc[u] += chunk.group(v[u], four_s);
  }
}

// Adds every chunk's d over the kUnroll groups in v to acc: whole chunks of four labels, then
// one chunk of the 1-3 left.
template <int kUnroll>
__device__ __forceinline__ void add_labels(float (&acc)[kUnroll], const float4 (&v)[kUnroll],
                                           const float* margins, int count) {
  int j = 0;
  for (; j + 4 <= count; j += 4) {
    add_chunk<4>(acc, v, margins + j);
  }
  switch (count - j) {  // the same for the whole warp
    case 1:
      add_chunk<1>(acc, v, margins + j);
      break;
    case 2:
      add_chunk<2>(acc, v, margins + j);
      break;
    case 3:
      add_chunk<3>(acc, v, margins + j);
      break;
    default:
      break;
  }
}

// The sum over all labels' chunks of d(v), for one class of score v.
__device__ float class_terms(float v, const float* margins, int count) {
  float total = 0.0f;
  int j = 0;
  for (; j + 4 <= count; j += 4) {
    total += Chunk<4>(margins + j).one(v);
  }
  switch (count - j) {
    case 1:
      total += Chunk<1>(margins + j).one(v);
      break;
    case 2:
      total += Chunk<2>(margins + j).one(v);
      break;
    case 3:
      total += Chunk<3>(margins + j).one(v);
      break;
    default:
      break;
  }
  return total;
}

// This lane's sum of d over its groups lane, lane + 32, ... (every class of the row, targets
// included), kUnroll of them a step. v holds the first step's groups, already loaded; with
// kPrefetch, ahead holds the second step's, and step s + 2 is loaded once step s is summed.
template <int kUnroll, bool kPrefetch>
__device__ float fast_lane_sum(const float* x, int classes, bool vec, const float* margins,
                               int count, int lane, float4 (&v)[kUnroll],
                               float4 (&ahead)[kUnroll]) {
  const int groups = (classes + 3) / 4;
  constexpr int kStep = 32 * kUnroll;
  float acc[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    acc[u] = 0.0f;
  }
  for (int g0 = lane; g0 < groups; g0 += kStep) {
    if (!kPrefetch && g0 != lane) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        v[u] = load_group(x, classes, vec, g0 + 32 * u);
      }
    }
    add_labels(acc, v, margins, count);
    if constexpr (kPrefetch) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        v[u] = ahead[u];
        ahead[u] = load_group(x, classes, vec, g0 + 2 * kStep + 32 * u);  // -inf past the end
      }
    }
  }
  float sum = 0.0f;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    sum += acc[u];
  }
  return sum;
}

// ---- The exact path (warp_cuda's): targets masked to -inf, three instructions a pair -------

// Margins 1 - x[y_j] cached in shared memory (16-byte aligned).
struct SharedMargins {
  const float* m;
  __device__ float4 quad(int j) const { return *reinterpret_cast<const float4*>(m + j); }
  __device__ float one(int j) const { return m[j]; }
};

// Margins computed on the fly: all lanes read the same address, an L1-cached broadcast.
struct GlobalMargins {
  const float* x;
  const int64_t* y;
  __device__ float one(int j) const { return 1.0f - x[y[j]]; }
  __device__ float4 quad(int j) const {
    return make_float4(one(j), one(j + 1), one(j + 2), one(j + 3));
  }
};

// Target classes become -inf: every term max(0, m_j + x) of theirs is then 0.
__device__ __forceinline__ float4 mask_targets(float4 v, const uint32_t* bitmap, int g) {
  const uint32_t bits = bitmap[g >> 3] >> ((g & 7) * 4);
  const float ninf = -CUDART_INF_F;
  return make_float4((bits & 1u) ? ninf : v.x, (bits & 2u) ? ninf : v.y,
                     (bits & 4u) ? ninf : v.z, (bits & 8u) ? ninf : v.w);
}

template <int kUnroll>
__device__ __forceinline__ void add_hinges(float4 (&acc)[kUnroll], const float4 (&v)[kUnroll],
                                           float m) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    acc[u].x += fmaxf(m + v[u].x, 0.0f);  // fmaxf(NaN, 0) is 0: a NaN term is skipped
    acc[u].y += fmaxf(m + v[u].y, 0.0f);
    acc[u].z += fmaxf(m + v[u].z, 0.0f);
    acc[u].w += fmaxf(m + v[u].w, 0.0f);
  }
}

template <int kUnroll, typename Margins>
__device__ float exact_lane_sum(const float* x, int classes, bool vec, const uint32_t* bitmap,
                                Margins margins, int count, int lane, float4 (&v)[kUnroll]) {
  const int groups = (classes + 3) / 4;
  constexpr int kStep = 32 * kUnroll;
  float4 acc[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    acc[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  for (int g0 = lane; g0 < groups; g0 += kStep) {
    if (g0 != lane) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        v[u] = load_group(x, classes, vec, g0 + 32 * u);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int h = g0 + 32 * u;
      v[u] = h < groups ? mask_targets(v[u], bitmap, h)
                        : make_float4(-CUDART_INF_F, -CUDART_INF_F, -CUDART_INF_F, -CUDART_INF_F);
    }
    int j = 0;
    for (; j + 4 <= count; j += 4) {
      const float4 m = margins.quad(j);
      add_hinges(acc, v, m.x);
      add_hinges(acc, v, m.y);
      add_hinges(acc, v, m.z);
      add_hinges(acc, v, m.w);
    }
    for (; j < count; ++j) {
      add_hinges(acc, v, margins.one(j));
    }
  }
  float sum = 0.0f;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    sum += (acc[u].x + acc[u].y) + (acc[u].z + acc[u].w);
  }
  return sum;
}

template <int kUnroll>
__device__ float exact_sample_sum(const float* x, const int64_t* y, int classes, bool vec,
                                  int count, uint32_t* bitmap, float* margin_cache, int lane,
                                  float4 (&v)[kUnroll]) {
  const int words = (classes + 31) / 32;
  for (int w = lane; w < words; w += 32) {
    bitmap[w] = 0u;
  }
  __syncwarp();
  const bool cached = count <= kLabelCap;
  for (int k = lane; k < count; k += 32) {
    const int label = static_cast<int>(y[k]);  // in [0, C) by the scan
    atomicOr(&bitmap[label >> 5], 1u << (label & 31));
    if (cached) {
      margin_cache[k] = 1.0f - x[label];
    }
  }
  __syncwarp();
  return cached ? exact_lane_sum<kUnroll>(x, classes, vec, bitmap, SharedMargins{margin_cache},
                                          count, lane, v)
                : exact_lane_sum<kUnroll>(x, classes, vec, bitmap, GlobalMargins{x, y}, count,
                                          lane, v);
}

// ---- One sample per warp ------------------------------------------------------------------

// The loss of one sample (valid in lane 0 of the calling warp; the same path in every lane).
template <int kUnroll, bool kPrefetch>
__device__ float sample_loss(const float* x, const int64_t* y, int classes, bool vec,
                             uint32_t* bitmap, float* margin_cache, int lane) {
  // Start streaming the row first: these loads need no label. (The exact path reloads what
  // ahead holds.)
  float4 v[kUnroll];
  float4 ahead[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    v[u] = load_group(x, classes, vec, lane + 32 * u);
    if constexpr (kPrefetch) {
      ahead[u] = load_group(x, classes, vec, lane + 32 * (kUnroll + u));
    }
  }
  // Label count: the index of the first entry outside [0, C). The first 32 entries stay in
  // the lanes' registers (label k in lane k).
  int count = classes;
  bool invalid = false;
  int first_label = 0;
  for (int base = 0; base < classes; base += 32) {
    const int k = base + lane;
    const int64_t label = k < classes ? y[k] : 0;
    if (base == 0) {
      first_label = static_cast<int>(label >= 0 && label < classes ? label : 0);
    }
    const unsigned stops = __ballot_sync(kFullMask, label < 0 || label >= classes);
    if (stops != 0) {
      const int first = __ffs(stops) - 1;
      count = base + first;
      invalid = __shfl_sync(kFullMask, label, first) != -1;
      break;
    }
  }
  if (invalid) {  // the same in every lane
    return CUDART_NAN_F;
  }
  if (count == 0) {
    return 0.0f;
  }
  if (count <= 32) {
    const bool holds_label = lane < count;
    const float score = holds_label ? x[first_label] : 0.0f;
    // False for NaN and +-inf too.
    const bool ordinary = !holds_label || fabsf(score) <= kScoreLimit;
    if (__all_sync(kFullMask, ordinary)) {
      if (holds_label) {
        margin_cache[lane] = score - 1.0f;
      }
      // Lanes holding the same class: the lowest of them speaks for it.
      const unsigned same = __match_any_sync(kFullMask, holds_label ? first_label : -1 - lane);
      __syncwarp();
      // Each distinct target class was summed with the others: take its own terms back out.
      const float correction =
          holds_label && __ffs(same) - 1 == lane ? class_terms(score, margin_cache, count) : 0.0f;
      const float sum = fast_lane_sum<kUnroll, kPrefetch>(x, classes, vec, margin_cache, count,
                                                          lane, v, ahead);
      return warp_sum(sum - correction) / static_cast<float>(classes);
    }
  }
  const float sum =
      exact_sample_sum<kUnroll>(x, y, classes, vec, count, bitmap, margin_cache, lane, v);
  return warp_sum(sum) / static_cast<float>(classes);
}

// Warp w of block b handles sample b * kWarps + w; row_loss (rows,) receives each sample's
// loss. When counter is not null, block b also stores the sum of its samples' losses in
// partials[b], and the last block writes scale * (sum of partials) to *result, then resets
// *counter.
template <int kWarps, int kUnroll, bool kPrefetch, int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    multilabel_margin_kernel(const float* __restrict__ input, const int64_t* __restrict__ target,
                             int64_t rows, int classes, bool vec, uint32_t* global_bitmap,
                             float* __restrict__ row_loss, float* __restrict__ partials,
                             unsigned int* counter, float* __restrict__ result, double scale) {
  __shared__ __align__(16) float margin_cache[kWarps][kLabelCap];
  __shared__ uint32_t shared_bitmap[kWarps][kBitmapWords];
  __shared__ float warp_loss[kWarps];
  __shared__ double warp_total[kWarps];
  __shared__ bool is_last;

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  float loss = 0.0f;
  if (row < rows) {  // the same for the whole warp
    const int words = (classes + 31) / 32;
    uint32_t* bitmap =
        words <= kBitmapWords ? shared_bitmap[warp] : global_bitmap + row * words;
    loss = sample_loss<kUnroll, kPrefetch>(input + row * classes, target + row * classes,
                                           classes, vec, bitmap, margin_cache[warp], lane);
    if (lane == 0) {
      row_loss[row] = loss;
    }
  }
  if (counter == nullptr) {
    return;
  }

  if (lane == 0) {
    warp_loss[warp] = loss;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float block_loss = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      block_loss += warp_loss[w];
    }
    partials[blockIdx.x] = block_loss;
    __threadfence();  // the partial is visible before the counter says so
    is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!is_last) {
    return;
  }
  __threadfence();
  double total = 0.0;
  for (int b = threadIdx.x; b < static_cast<int>(gridDim.x); b += kWarps * 32) {
    total += static_cast<double>(__ldcg(partials + b));  // from L2: other blocks wrote them
  }
  total = warp_sum(total);
  if (lane == 0) {
    warp_total[warp] = total;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    total = 0.0;
    for (int w = 0; w < kWarps; ++w) {
      total += warp_total[w];
    }
    *result = static_cast<float>(total * scale);
    *counter = 0u;  // ready for the next launch on this stream
  }
}

// A zeroed counter per (device, stream): launches on one stream run in order, so the last block
// of each launch can reset it for the next.
static unsigned int* stream_counter(const torch::Device& device, cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, torch::Tensor> counters;
  const std::lock_guard<std::mutex> lock(mutex);
  auto& counter = counters[{device.index(), stream}];
  if (!counter.defined()) {
    counter = at::zeros({1}, torch::TensorOptions().device(device).dtype(at::kInt));
  }
  return reinterpret_cast<unsigned int*>(counter.data_ptr<int>());
}

template <int kWarps, int kUnroll, bool kPrefetch, int kMinBlocks>
torch::Tensor launch(torch::Tensor input, torch::Tensor target, int64_t reduction) {
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
  TORCH_CHECK(reduction == kNone || reduction == kMean || reduction == kSum,
              "multilabel_margin: unknown reduction code ", reduction);
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
  // int class indices in the kernel, with headroom for the group and scan arithmetic.
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  TORCH_CHECK(classes <= kIntMax / 2 && rows <= kIntMax / 2,
              "multilabel_margin: shape too large: ", input.sizes());

  c10::cuda::CUDAGuard device_guard(input.device());
  const torch::Tensor x = input.contiguous();
  const torch::Tensor y = target.contiguous();
  torch::Tensor row_loss = at::empty({rows}, x.options());
  const bool reduce = reduction != kNone;
  if (rows == 0) {
    if (!reduce) {
      return row_loss;
    }
    return at::full({}, reduction == kSum ? 0.0 : std::numeric_limits<double>::quiet_NaN(),
                    x.options());
  }

  const int64_t words = (classes + 31) / 32;
  torch::Tensor global_bitmap;
  if (words > kBitmapWords) {
    global_bitmap = at::empty({rows, words}, x.options().dtype(at::kInt));
  }
  const int blocks = static_cast<int>((rows + kWarps - 1) / kWarps);
  // One partial per block, then the result in the last slot.
  torch::Tensor partials = reduce ? at::empty({blocks + 1}, x.options()) : torch::Tensor();
  const bool vec = classes % 4 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  multilabel_margin_kernel<kWarps, kUnroll, kPrefetch, kMinBlocks>
      <<<blocks, kWarps * 32, 0, stream>>>(
          x.data_ptr<float>(), y.data_ptr<int64_t>(), rows, static_cast<int>(classes), vec,
          global_bitmap.defined() ? reinterpret_cast<uint32_t*>(global_bitmap.data_ptr<int>())
                                  : nullptr,
          row_loss.data_ptr<float>(), reduce ? partials.data_ptr<float>() : nullptr,
          reduce ? stream_counter(x.device(), stream) : nullptr,
          reduce ? partials.data_ptr<float>() + blocks : nullptr,
          reduction == kMean ? 1.0 / static_cast<double>(rows) : 1.0);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return reduce ? partials[blocks] : row_loss;
}

torch::Tensor multilabel_margin(torch::Tensor input, torch::Tensor target, int64_t reduction) {
  return launch<MLM_WARPS, MLM_UNROLL, MLM_PREFETCH != 0, MLM_MIN_BLOCKS>(input, target,
                                                                         reduction);
}
"""

_ext = load_inline(
    name="multilabel_margin_max_cuda",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["multilabel_margin"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)

_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


class ModelNew(nn.Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{reduction} is not a valid value for reduction")
        self.code = _REDUCTIONS[reduction]

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        out = _ext.multilabel_margin(input, target, self.code)
        # nn.MultiLabelMarginLoss gives a 0-D result for a single unbatched sample.
        return out.reshape(()) if self.code == 0 and input.dim() < 2 else out
