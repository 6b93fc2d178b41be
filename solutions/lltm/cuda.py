"""The LLTM cell as PyTorch's extension tutorial writes it for CUDA: the matrix products through
ATen (cuBLAS), the gate math in one fused element-wise kernel each way.

Forward: X = [old_h, input]; gates = bias + X @ W^T (one addmm); then one kernel computes, per
batch row and state column, the two sigmoids, the ELU, new_cell and new_h, and also writes the
activated gates (input_gate, output_gate, candidate_cell), which the backward reuses.

Backward: one kernel turns grad_h and grad_cell into the gates' gradient d_gates (through tanh,
the sigmoids and the ELU, from the saved values) and into d_old_cell; then ATen: d_weights =
d_gates^T X, d_X = d_gates W (split into d_old_h and d_input, views of one buffer), d_bias =
d_gates summed over the batch.

Both kernels read and write through `packed_accessor32` (strides of any layout), with a grid of
state columns by batch rows (the rows loop past the grid's 65535 limit, and the columns are
guarded). Tensors of more than 2^31 elements use the same kernels with 64-bit accessors. float
and double, like the tutorial (AT_DISPATCH_FLOATING_TYPES). An upstream gradient may be
non-contiguous (made contiguous) or None (zeros).

Bytes per element of the (batch, state) cell, float32: the forward kernel reads 3 gates and
old_cell and writes 5 values (36 bytes); the backward kernel reads grad_h, grad_cell, new_cell,
the 3 activations and gate 2 (for the ELU's derivative) and writes d_gates and d_old_cell
(11 values, 44 bytes); the bias sum reads d_gates once more (12 bytes).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
std::vector<torch::Tensor> lltm_forward(torch::Tensor input, torch::Tensor weights,
                                        torch::Tensor bias, torch::Tensor old_h,
                                        torch::Tensor old_cell);
std::vector<torch::Tensor> lltm_backward(torch::Tensor grad_h, torch::Tensor grad_cell,
                                         torch::Tensor new_cell, torch::Tensor input_gate,
                                         torch::Tensor output_gate, torch::Tensor candidate_cell,
                                         torch::Tensor X, torch::Tensor gates,
                                         torch::Tensor weights);
"""

CUDA_SOURCE = r"""
// No <torch/extension.h>: the <torch/types.h> that load_inline puts first is enough here, at
// well under half the compile time (the C++ API and pybind11 are for main.cpp).
// c10 headers only: ATen/cuda/CUDAContext.h also pulls in the cuBLAS/cuSPARSE headers.
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

constexpr int kThreads = 256;       // threads of a block, along the state columns
constexpr int64_t kMaxRows = 65535; // the grid's y limit: rows beyond it loop

template <typename scalar_t, int N, typename index_t>
using Accessor = at::GenericPackedTensorAccessor<scalar_t, N, at::RestrictPtrTraits, index_t>;

// 32-bit indexing where every tensor is small enough, 64-bit otherwise.
template <typename scalar_t, int N, typename index_t>
Accessor<scalar_t, N, index_t> accessor(const torch::Tensor& tensor) {
  if constexpr (std::is_same_v<index_t, int32_t>) {
    return tensor.packed_accessor32<scalar_t, N, at::RestrictPtrTraits>();
  } else {
    return tensor.packed_accessor64<scalar_t, N, at::RestrictPtrTraits>();
  }
}

bool fits_int32(std::initializer_list<torch::Tensor> tensors) {
  return std::all_of(tensors.begin(), tensors.end(), [](const torch::Tensor& t) {
    return t.numel() <= std::numeric_limits<int32_t>::max();
  });
}

__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }
__device__ __forceinline__ float expm1_of(float x) { return expm1f(x); }
__device__ __forceinline__ double expm1_of(double x) { return expm1(x); }
__device__ __forceinline__ float tanh_of(float x) { return tanhf(x); }
__device__ __forceinline__ double tanh_of(double x) { return tanh(x); }

template <typename scalar_t>
__device__ __forceinline__ scalar_t sigmoid(scalar_t z) {
  return scalar_t(1) / (scalar_t(1) + exp_of(-z));
}

// ELU with alpha = 1 and its derivative (at 0 both branches give 1).
template <typename scalar_t>
__device__ __forceinline__ scalar_t elu(scalar_t z) {
  return z > scalar_t(0) ? z : expm1_of(z);
}

template <typename scalar_t>
__device__ __forceinline__ scalar_t d_elu(scalar_t z) {
  return z > scalar_t(0) ? scalar_t(1) : exp_of(z);
}

// gates is (batch, 3, state): the input, output and candidate gates before activation.
template <typename scalar_t, typename index_t>
__global__ void __launch_bounds__(kThreads) lltm_forward_kernel(
    const Accessor<scalar_t, 3, index_t> gates, const Accessor<scalar_t, 2, index_t> old_cell,
    Accessor<scalar_t, 2, index_t> new_h, Accessor<scalar_t, 2, index_t> new_cell,
    Accessor<scalar_t, 2, index_t> input_gate, Accessor<scalar_t, 2, index_t> output_gate,
    Accessor<scalar_t, 2, index_t> candidate_cell) {
  const int64_t batch = gates.size(0);
  const int64_t state = gates.size(2);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= state) {
    return;
  }
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    const scalar_t ig = sigmoid(gates[n][0][c]);
    const scalar_t og = sigmoid(gates[n][1][c]);
    const scalar_t cc = elu(gates[n][2][c]);
    const scalar_t cell = old_cell[n][c] + cc * ig;
    new_cell[n][c] = cell;
    new_h[n][c] = tanh_of(cell) * og;
    input_gate[n][c] = ig;
    output_gate[n][c] = og;
    candidate_cell[n][c] = cc;
  }
}

// d_gates is (batch, 3, state), like gates.
template <typename scalar_t, typename index_t>
__global__ void __launch_bounds__(kThreads) lltm_backward_kernel(
    Accessor<scalar_t, 2, index_t> d_old_cell, Accessor<scalar_t, 3, index_t> d_gates,
    const Accessor<scalar_t, 2, index_t> grad_h, const Accessor<scalar_t, 2, index_t> grad_cell,
    const Accessor<scalar_t, 2, index_t> new_cell, const Accessor<scalar_t, 2, index_t> input_gate,
    const Accessor<scalar_t, 2, index_t> output_gate,
    const Accessor<scalar_t, 2, index_t> candidate_cell,
    const Accessor<scalar_t, 3, index_t> gates) {
  const int64_t batch = gates.size(0);
  const int64_t state = gates.size(2);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= state) {
    return;
  }
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    const scalar_t gh = grad_h[n][c];
    const scalar_t ig = input_gate[n][c];
    const scalar_t og = output_gate[n][c];
    const scalar_t t = tanh_of(new_cell[n][c]);
    const scalar_t d_output_gate = t * gh;
    const scalar_t d_new_cell = (scalar_t(1) - t * t) * og * gh + grad_cell[n][c];
    d_old_cell[n][c] = d_new_cell;
    const scalar_t d_candidate_cell = ig * d_new_cell;
    const scalar_t d_input_gate = candidate_cell[n][c] * d_new_cell;
    // sigmoid' = s (1 - s), from the saved activations
    d_gates[n][0][c] = d_input_gate * ig * (scalar_t(1) - ig);
    d_gates[n][1][c] = d_output_gate * og * (scalar_t(1) - og);
    d_gates[n][2][c] = d_candidate_cell * d_elu(gates[n][2][c]);
  }
}

dim3 grid_for(int64_t batch, int64_t state) {
  const int64_t column_blocks = (state + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(column_blocks),
              static_cast<unsigned>(std::min(batch, kMaxRows)));
}

void check_operand(const torch::Tensor& t, const torch::Tensor& like, const char* name) {
  TORCH_CHECK(t.is_cuda(), "lltm: ", name, " must be a CUDA tensor");
  TORCH_CHECK(t.device() == like.device(), "lltm: ", name, " is on ", t.device(), ", not ",
              like.device());
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), "lltm: ", name, " is ", t.scalar_type(),
              ", not ", like.scalar_type());
}

std::vector<torch::Tensor> lltm_forward(torch::Tensor input, torch::Tensor weights,
                                        torch::Tensor bias, torch::Tensor old_h,
                                        torch::Tensor old_cell) {
  check_operand(input, input, "input");
  check_operand(weights, input, "weights");
  check_operand(bias, input, "bias");
  check_operand(old_h, input, "old_h");
  check_operand(old_cell, input, "old_cell");
  TORCH_CHECK(input.dim() == 2 && old_h.dim() == 2 && old_cell.dim() == 2,
              "lltm: input, old_h and old_cell must be 2-D");
  const int64_t batch = old_cell.size(0);
  const int64_t state = old_cell.size(1);
  TORCH_CHECK(old_h.sizes() == old_cell.sizes() && input.size(0) == batch,
              "lltm: input ", input.sizes(), ", old_h ", old_h.sizes(), " and old_cell ",
              old_cell.sizes(), " do not agree");
  TORCH_CHECK(weights.dim() == 2 && weights.size(0) == 3 * state &&
                  weights.size(1) == input.size(1) + state,
              "lltm: weights ", weights.sizes(), " do not fit input ", input.sizes(),
              " and state ", state);
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == 3 * state, "lltm: bias ", bias.sizes(),
              " does not fit state ", state);
  c10::cuda::CUDAGuard device_guard(input.device());

  const torch::Tensor X = at::cat({old_h, input}, /*dim=*/1);
  const torch::Tensor gate_weights = at::addmm(bias, X, weights.t());
  const torch::Tensor gates = gate_weights.contiguous().view({batch, 3, state});
  const torch::Tensor cell = old_cell.contiguous();

  const auto options = cell.options();
  torch::Tensor new_h = at::empty({batch, state}, options);
  torch::Tensor new_cell = at::empty({batch, state}, options);
  torch::Tensor input_gate = at::empty({batch, state}, options);
  torch::Tensor output_gate = at::empty({batch, state}, options);
  torch::Tensor candidate_cell = at::empty({batch, state}, options);

  if (batch > 0 && state > 0) {
    const dim3 grid = grid_for(batch, state);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const bool small = fits_int32({gates, cell});
    AT_DISPATCH_FLOATING_TYPES(gates.scalar_type(), "lltm_forward_cuda", [&] {
      if (small) {
        lltm_forward_kernel<scalar_t, int32_t><<<grid, kThreads, 0, stream>>>(
            accessor<scalar_t, 3, int32_t>(gates), accessor<scalar_t, 2, int32_t>(cell),
            accessor<scalar_t, 2, int32_t>(new_h), accessor<scalar_t, 2, int32_t>(new_cell),
            accessor<scalar_t, 2, int32_t>(input_gate),
            accessor<scalar_t, 2, int32_t>(output_gate),
            accessor<scalar_t, 2, int32_t>(candidate_cell));
      } else {
        lltm_forward_kernel<scalar_t, int64_t><<<grid, kThreads, 0, stream>>>(
            accessor<scalar_t, 3, int64_t>(gates), accessor<scalar_t, 2, int64_t>(cell),
            accessor<scalar_t, 2, int64_t>(new_h), accessor<scalar_t, 2, int64_t>(new_cell),
            accessor<scalar_t, 2, int64_t>(input_gate),
            accessor<scalar_t, 2, int64_t>(output_gate),
            accessor<scalar_t, 2, int64_t>(candidate_cell));
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }
  return {new_h, new_cell, input_gate, output_gate, candidate_cell, X, gate_weights};
}

std::vector<torch::Tensor> lltm_backward(torch::Tensor grad_h, torch::Tensor grad_cell,
                                         torch::Tensor new_cell, torch::Tensor input_gate,
                                         torch::Tensor output_gate, torch::Tensor candidate_cell,
                                         torch::Tensor X, torch::Tensor gate_weights,
                                         torch::Tensor weights) {
  check_operand(grad_h, new_cell, "grad_h");
  check_operand(grad_cell, new_cell, "grad_cell");
  TORCH_CHECK(grad_h.sizes() == new_cell.sizes() && grad_cell.sizes() == new_cell.sizes(),
              "lltm: the upstream gradients ", grad_h.sizes(), " and ", grad_cell.sizes(),
              " must have new_cell's shape ", new_cell.sizes());
  c10::cuda::CUDAGuard device_guard(new_cell.device());
  const int64_t batch = new_cell.size(0);
  const int64_t state = new_cell.size(1);
  const torch::Tensor gh = grad_h.contiguous();
  const torch::Tensor gc = grad_cell.contiguous();
  const torch::Tensor gates = gate_weights.contiguous().view({batch, 3, state});

  torch::Tensor d_old_cell = at::empty({batch, state}, new_cell.options());
  torch::Tensor d_gates = at::empty({batch, 3, state}, new_cell.options());

  if (batch > 0 && state > 0) {
    const dim3 grid = grid_for(batch, state);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const bool small = fits_int32({gates, d_gates});
    AT_DISPATCH_FLOATING_TYPES(gates.scalar_type(), "lltm_backward_cuda", [&] {
      if (small) {
        lltm_backward_kernel<scalar_t, int32_t><<<grid, kThreads, 0, stream>>>(
            accessor<scalar_t, 2, int32_t>(d_old_cell), accessor<scalar_t, 3, int32_t>(d_gates),
            accessor<scalar_t, 2, int32_t>(gh), accessor<scalar_t, 2, int32_t>(gc),
            accessor<scalar_t, 2, int32_t>(new_cell),
            accessor<scalar_t, 2, int32_t>(input_gate),
            accessor<scalar_t, 2, int32_t>(output_gate),
            accessor<scalar_t, 2, int32_t>(candidate_cell),
            accessor<scalar_t, 3, int32_t>(gates));
      } else {
        lltm_backward_kernel<scalar_t, int64_t><<<grid, kThreads, 0, stream>>>(
            accessor<scalar_t, 2, int64_t>(d_old_cell), accessor<scalar_t, 3, int64_t>(d_gates),
            accessor<scalar_t, 2, int64_t>(gh), accessor<scalar_t, 2, int64_t>(gc),
            accessor<scalar_t, 2, int64_t>(new_cell),
            accessor<scalar_t, 2, int64_t>(input_gate),
            accessor<scalar_t, 2, int64_t>(output_gate),
            accessor<scalar_t, 2, int64_t>(candidate_cell),
            accessor<scalar_t, 3, int64_t>(gates));
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }

  const torch::Tensor d_gate_weights = d_gates.view({batch, 3 * state});
  torch::Tensor d_weights = at::mm(d_gate_weights.t(), X);
  torch::Tensor d_bias = d_gate_weights.sum(/*dim=*/0);
  const torch::Tensor d_X = at::mm(d_gate_weights, weights);
  torch::Tensor d_old_h = d_X.slice(/*dim=*/1, 0, state);
  torch::Tensor d_input = d_X.slice(/*dim=*/1, state);
  return {d_old_h, d_input, d_weights, d_bias, d_old_cell};
}
"""

extension = load_inline(
    name="lltm_cuda",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["lltm_forward", "lltm_backward"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class LLTMFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weights, bias, old_h, old_cell):  # type: ignore[override]
        new_h, new_cell, *kept = extension.lltm_forward(input, weights, bias, old_h, old_cell)
        ctx.save_for_backward(new_cell, *kept, weights)
        return new_h, new_cell

    @staticmethod
    def backward(ctx, grad_h, grad_cell):  # type: ignore[override]
        new_cell, *kept, weights = ctx.saved_tensors
        grad_h = torch.zeros_like(new_cell) if grad_h is None else grad_h.contiguous()
        grad_cell = torch.zeros_like(new_cell) if grad_cell is None else grad_cell.contiguous()
        d_old_h, d_input, d_weights, d_bias, d_old_cell = extension.lltm_backward(
            grad_h, grad_cell, new_cell, *kept, weights
        )
        return d_input, d_weights, d_bias, d_old_h, d_old_cell


class ModelNew(nn.Module):
    def __init__(self, input_features: int, state_size: int) -> None:
        super().__init__()
        self.weights = nn.Parameter(torch.empty(3 * state_size, input_features + state_size))
        self.bias = nn.Parameter(torch.empty(3 * state_size))

    def forward(self, input, old_h, old_cell):
        return LLTMFunction.apply(input, self.weights, self.bias, old_h, old_cell)
