"""The C++ and CUDA of the load-test suite's cuda_ok solutions (scripts/make_suite.py fills
them in, scripts/suite_sources.py wraps them in Python): one short template per family, simple
rather than fast, since the suite tests the harness, not kernels.

Each extension is built from two sources that load_inline compiles in parallel: cuda.cu (nvcc)
holds the kernels and a plain launcher, and includes no torch header, which nvcc took most of a
build to parse; main.cpp (g++) holds the torch side, `run(inputs, dim)`: `inputs` are the
forward's tensors followed by the model's parameters, `dim` a reduction's or softmax's dimension
(else 0). Each input must be a CUDA tensor of the problem's dtype and is made contiguous first;
values are read as float, sums run in double (reductions, softmax's denominator) or in float
over a block's threads (norms), and each output element is rounded once to the dtype. Every
kernel indexes in int64, checks its bounds, handles any size (tails, odd sizes) and launches on
the current stream; `run` checks the launch's error.
"""

from __future__ import annotations

from string import Template

# The CUDA side (cuda.cu, nvcc): CUDA and standard headers only, since parsing torch's headers
# was most of a build's time. Values change type through intrinsics (torch builds with
# __CUDA_NO_HALF_CONVERSIONS__ and __CUDA_NO_BFLOAT16_CONVERSIONS__), rounding to nearest even
# as torch's casts do.
CONVERSIONS = {  # CUDA type: (its value v as float, float v as it)
    "float": ("v", "v"),
    "__half": ("__half2float(v)", "__float2half_rn(v)"),
    "__nv_bfloat16": ("__bfloat162float(v)", "__float2bfloat16_rn(v)"),
}
CUDA_PRELUDE = """#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

using scalar_t = $ctype;  // the problem's dtype, $dtype
constexpr int kThreads = 256;  // a multiple of 32

__device__ __forceinline__ float to_float(scalar_t v) { return $to_float; }
__device__ __forceinline__ scalar_t from_float(float v) { return $from_float; }

// Blocks for a grid-stride loop over n > 0 items.
inline unsigned blocks_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
}

#define FOR_EACH(i, n) \\
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \\
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

$launcher;
"""

# The torch side (main.cpp, g++): checks, contiguous inputs, outputs, sizes, and the call into
# the family's launcher on the current stream.
CPP_PRELUDE = """#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <vector>

// An input as the kernels read it: a CUDA tensor of the problem's dtype, contiguous.
static torch::Tensor ready(const torch::Tensor& t) {
  TORCH_CHECK(t.is_cuda(), "suite: expected a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == $aten, "suite: expected $dtype, got ", t.scalar_type());
  return t.contiguous();
}

// A launcher's error (of the launch itself: the kernel runs later) as torch's.
static void check_launch(cudaError_t error) {
  TORCH_CHECK(error == cudaSuccess, "suite: kernel launch failed: ", cudaGetErrorString(error));
}

$launcher;
"""

# Each family's launcher (`$launcher`): declared in both sources (plain C++ linkage), defined in
# cuda.cu; it takes raw device pointers to scalar_t, any sizes (empty work launches nothing) and a
# stream, and returns the launch's error.
LAUNCHERS = {
    "map": "cudaError_t launch_map(const void* a, const void* b, void* out, int64_t n, "
    "cudaStream_t stream)",
    "lines": "cudaError_t launch_lines(const void* x, void* out, int64_t outer, int64_t size, "
    "int64_t inner, cudaStream_t stream)",
    "norm": "cudaError_t launch_norm(const void* x, const void* w, const void* b, void* out, "
    "int64_t rows, int64_t size, cudaStream_t stream)",
    "matmul": "cudaError_t launch_matmul(const void* a, const void* b, void* c, int64_t m, "
    "int64_t k, int64_t n, cudaStream_t stream)",
}

ELEMENTWISE = """
__device__ __forceinline__ float op(float x, float y) { return $expr; }

__global__ void suite_map(const scalar_t* a, const scalar_t* b, scalar_t* out, int64_t n) {
  FOR_EACH(i, n) { out[i] = from_float(op(to_float(a[i]), to_float(b[i]))); }
}

$launcher {
  if (n <= 0) return cudaSuccess;
  suite_map<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const scalar_t*>(a),
      static_cast<const scalar_t*>(b), static_cast<scalar_t*>(out), n);
  return cudaGetLastError();
}
"""

ELEMENTWISE_RUN = """
torch::Tensor run(std::vector<torch::Tensor> inputs, int64_t dim) {
  TORCH_CHECK(!inputs.empty() && inputs.front().sizes() == inputs.back().sizes(),
              "suite: the inputs' shapes differ");
  const torch::Tensor a = ready(inputs.front());
  const torch::Tensor b = ready(inputs.back());  // a again for a one-input operator
  c10::cuda::CUDAGuard guard(a.device());
  torch::Tensor out = torch::empty_like(a);
  check_launch(launch_map(a.data_ptr(), b.data_ptr(), out.data_ptr(), a.numel(),
                          at::cuda::getCurrentCUDAStream()));
  return out;
}
"""

REDUCTION = """
// One thread per line: out[line] = finish(combine over the line's elements), in double.
__global__ void suite_reduce(const scalar_t* x, scalar_t* out, int64_t outer, int64_t size,
                             int64_t inner) {
  FOR_EACH(o, outer * inner) {
    const scalar_t* line = x + (o / inner) * size * inner + o % inner;
    double acc = $init;
    for (int64_t k = 0; k < size; ++k) {
      const double v = to_float(line[k * inner]);
      acc = $combine;
    }
    out[o] = from_float(static_cast<float>($finish));
  }
}

$launcher {
  if (outer * inner <= 0) return cudaSuccess;
  suite_reduce<<<blocks_for(outer * inner), kThreads, 0, stream>>>(
      static_cast<const scalar_t*>(x), static_cast<scalar_t*>(out), outer, size, inner);
  return cudaGetLastError();
}
"""

SOFTMAX = """
constexpr bool kLog = $log;  // log_softmax, else softmax

// One thread per line: its maximum, the sum of exp(x - max) in double, then each element.
__global__ void suite_softmax(const scalar_t* x, scalar_t* out, int64_t outer, int64_t size,
                              int64_t inner) {
  FOR_EACH(o, outer * inner) {
    const int64_t base = (o / inner) * size * inner + o % inner;
    float top = -INFINITY;
    for (int64_t k = 0; k < size; ++k) top = fmaxf(top, to_float(x[base + k * inner]));
    double total = 0.0;
    for (int64_t k = 0; k < size; ++k) total += expf(to_float(x[base + k * inner]) - top);
    const float log_total = static_cast<float>(log(total));
    for (int64_t k = 0; k < size; ++k) {
      const float shifted = to_float(x[base + k * inner]) - top;
      const float y = kLog ? shifted - log_total : expf(shifted) / static_cast<float>(total);
      out[base + k * inner] = from_float(y);
    }
  }
}

$launcher {
  if (outer * inner <= 0 || size <= 0) return cudaSuccess;
  suite_softmax<<<blocks_for(outer * inner), kThreads, 0, stream>>>(
      static_cast<const scalar_t*>(x), static_cast<scalar_t*>(out), outer, size, inner);
  return cudaGetLastError();
}
"""

# A reduction's or softmax's run: the contiguous input seen along `dim` as `outer` x `inner`
# lines of `size` elements, the elements of a line `inner` apart; a reduction drops `dim`.
LINES_RUN = """
torch::Tensor run(std::vector<torch::Tensor> inputs, int64_t dim) {
  const torch::Tensor x = ready(inputs.at(0));
  c10::cuda::CUDAGuard guard(x.device());
  const int64_t axis = dim < 0 ? dim + x.dim() : dim;
  TORCH_CHECK(axis >= 0 && axis < x.dim(), "suite: dim ", dim, " out of range");
  int64_t outer = 1, inner = 1;  // the sizes before and after axis
  for (int64_t d = 0; d < axis; ++d) outer *= x.size(d);
  for (int64_t d = axis + 1; d < x.dim(); ++d) inner *= x.size(d);
  std::vector<int64_t> shape = x.sizes().vec();
  if ($drop_dim) shape.erase(shape.begin() + axis);
  torch::Tensor out = torch::empty(shape, x.options());
  check_launch(launch_lines(x.data_ptr(), out.data_ptr(), outer, x.size(axis), inner,
                            at::cuda::getCurrentCUDAStream()));
  return out;
}
"""

NORM = """
constexpr bool kCenter = $center;  // layer norm subtracts the mean, RMS norm does not
constexpr float kEps = $eps;

// The sum of v over the block, returned to every thread (blockDim.x a multiple of 32; every
// thread of the block must call it).
__device__ float block_sum(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  __syncthreads();  // the previous call's readers are done with scratch
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) total += scratch[w];
  return total;
}

// A block per row (striding over rows): y = (x - mean) / sqrt(mean of squares + eps) * w + b,
// the mean 0 without kCenter, w and b left out where null.
__global__ void suite_norm(const scalar_t* x, const scalar_t* w, const scalar_t* b,
                           scalar_t* out, int64_t rows, int64_t size) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // the same trips for every thread
    const scalar_t* row = x + r * size;
    float mean = 0.0f;
    if (kCenter) {
      float sum = 0.0f;
      for (int64_t k = threadIdx.x; k < size; k += blockDim.x) sum += to_float(row[k]);
      mean = block_sum(sum, scratch) / static_cast<float>(size);
    }
    float squares = 0.0f;
    for (int64_t k = threadIdx.x; k < size; k += blockDim.x) {
      const float c = to_float(row[k]) - mean;
      squares += c * c;
    }
    const float inv = rsqrtf(block_sum(squares, scratch) / static_cast<float>(size) + kEps);
    for (int64_t k = threadIdx.x; k < size; k += blockDim.x) {
      float y = (to_float(row[k]) - mean) * inv;
      if (w != nullptr) y *= to_float(w[k]);
      if (b != nullptr) y += to_float(b[k]);
      out[r * size + k] = from_float(y);
    }
  }
}

$launcher {
  if (rows <= 0 || size <= 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(rows < 65535 ? rows : 65535);
  suite_norm<<<blocks, kThreads, 0, stream>>>(static_cast<const scalar_t*>(x),
      static_cast<const scalar_t*>(w), static_cast<const scalar_t*>(b),
      static_cast<scalar_t*>(out), rows, size);
  return cudaGetLastError();
}
"""

NORM_RUN = """
torch::Tensor run(std::vector<torch::Tensor> inputs, int64_t dim) {
  const torch::Tensor x = ready(inputs.at(0));
  c10::cuda::CUDAGuard guard(x.device());
  TORCH_CHECK(x.dim() >= 1, "suite: a norm needs at least one dimension");
  const int64_t size = x.size(-1);
  const torch::Tensor w = inputs.size() > 1 ? ready(inputs[1]) : torch::Tensor();
  const torch::Tensor b = inputs.size() > 2 ? ready(inputs[2]) : torch::Tensor();
  for (const torch::Tensor& p : {w, b}) {
    TORCH_CHECK(!p.defined() || p.numel() == size, "suite: a parameter's size is not ", size);
  }
  torch::Tensor out = torch::empty_like(x);
  check_launch(launch_norm(x.data_ptr(), w.defined() ? w.data_ptr() : nullptr,
                           b.defined() ? b.data_ptr() : nullptr, out.data_ptr(),
                           size > 0 ? x.numel() / size : 0, size,
                           at::cuda::getCurrentCUDAStream()));
  return out;
}
"""

MATMUL = """
constexpr int kTile = 16;

// C = A B, a kTile x kTile tile of C per block; tiles of A and B staged in shared memory as
// float, zero past the edges.
__global__ void suite_matmul(const scalar_t* a, const scalar_t* b, scalar_t* c, int64_t m,
                             int64_t k, int64_t n) {
  __shared__ float tile_a[kTile][kTile];
  __shared__ float tile_b[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = static_cast<int64_t>(blockIdx.y) * kTile + ty;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + tx;
  float acc = 0.0f;
  for (int64_t t = 0; t < k; t += kTile) {
    tile_a[ty][tx] = row < m && t + tx < k ? to_float(a[row * k + t + tx]) : 0.0f;
    tile_b[ty][tx] = t + ty < k && col < n ? to_float(b[(t + ty) * n + col]) : 0.0f;
    __syncthreads();
    for (int i = 0; i < kTile; ++i) acc += tile_a[ty][i] * tile_b[i][tx];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = from_float(acc);
}

$launcher {
  if (m <= 0 || n <= 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((n + kTile - 1) / kTile),
                  static_cast<unsigned>((m + kTile - 1) / kTile));
  suite_matmul<<<grid, dim3(kTile, kTile), 0, stream>>>(static_cast<const scalar_t*>(a),
      static_cast<const scalar_t*>(b), static_cast<scalar_t*>(c), m, k, n);
  return cudaGetLastError();
}
"""

MATMUL_RUN = """
torch::Tensor run(std::vector<torch::Tensor> inputs, int64_t dim) {
  const torch::Tensor a = ready(inputs.at(0));
  const torch::Tensor b = ready(inputs.at(1));
  c10::cuda::CUDAGuard guard(a.device());
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
              "suite: cannot multiply ", a.sizes(), " by ", b.sizes());
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  torch::Tensor out = torch::empty({m, n}, a.options());
  check_launch(launch_matmul(a.data_ptr(), b.data_ptr(), out.data_ptr(), m, k, n,
                             at::cuda::getCurrentCUDAStream()));
  return out;
}
"""

FAMILY_PARTS = {  # each family's launcher (a key of LAUNCHERS), CUDA, run, and template slots
    "elementwise": ("map", ELEMENTWISE, ELEMENTWISE_RUN, ("expr",)),
    "reduction": ("lines", REDUCTION, LINES_RUN, ("init", "combine", "finish")),
    "softmax": ("lines", SOFTMAX, LINES_RUN, ("log",)),
    "norm": ("norm", NORM, NORM_RUN, ("center", "eps")),
    "matmul": ("matmul", MATMUL, MATMUL_RUN, ()),
}


def sources(
    family: str, dtype: str, ctype: str, aten: str, fills: tuple[str, ...]
) -> tuple[str, str]:
    """The C++ (main.cpp) and CUDA (cuda.cu) sources of a `family` solution for `dtype` (a torch
    name such as "float16", its CUDA type, a key of CONVERSIONS, and its ATen scalar type), the
    family's template slots filled with `fills` in order."""
    launcher, kernels, run, slots = FAMILY_PARTS[family]
    if len(slots) != len(fills):
        raise ValueError(f"{family} needs {len(slots)} fills ({', '.join(slots)}), not {fills}")
    to_float, from_float = CONVERSIONS[ctype]
    values = {"dtype": dtype, "ctype": ctype, "aten": aten, "launcher": LAUNCHERS[launcher]}
    values |= {"to_float": to_float, "from_float": from_float}
    values |= {"drop_dim": "true" if family == "reduction" else "false"}
    values |= dict(zip(slots, fills, strict=True))

    def fill(*parts: str) -> str:
        return "".join(Template(part).substitute(values) for part in parts)

    return fill(CPP_PRELUDE, run), fill(CUDA_PRELUDE, kernels)
