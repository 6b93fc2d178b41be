"""The LLTM cell as PyTorch's extension tutorial builds it, in C++ on the CPU: the forward from
ATen operations, and a hand-written backward, both wired through a torch.autograd.Function.

The forward keeps what the backward needs (the gates before and after their activations, X);
the backward applies the chain rule by hand: through tanh, the sigmoids and the ELU, then the
one matrix product's two gradients and the bias's sum.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
#include <torch/extension.h>
#include <vector>

namespace {

torch::Tensor d_sigmoid(const torch::Tensor& z) {
  auto s = torch::sigmoid(z);
  return (1 - s) * s;
}

torch::Tensor d_tanh(const torch::Tensor& z) {
  return 1 - z.tanh().pow(2);
}

torch::Tensor d_elu(const torch::Tensor& z, double alpha = 1.0) {
  return torch::where(z > 0, torch::ones_like(z), alpha * z.exp());
}

}  // namespace

std::vector<torch::Tensor> lltm_forward(
    torch::Tensor input, torch::Tensor weights, torch::Tensor bias,
    torch::Tensor old_h, torch::Tensor old_cell) {
  auto X = torch::cat({old_h, input}, /*dim=*/1);
  auto gate_weights = torch::addmm(bias, X, weights.transpose(0, 1));
  auto gates = gate_weights.chunk(3, /*dim=*/1);
  auto input_gate = torch::sigmoid(gates[0]);
  auto output_gate = torch::sigmoid(gates[1]);
  auto candidate_cell = torch::elu(gates[2], /*alpha=*/1.0);
  auto new_cell = old_cell + candidate_cell * input_gate;
  auto new_h = torch::tanh(new_cell) * output_gate;
  return {new_h, new_cell, input_gate, output_gate, candidate_cell, X, gate_weights};
}

std::vector<torch::Tensor> lltm_backward(
    torch::Tensor grad_h, torch::Tensor grad_cell, torch::Tensor new_cell,
    torch::Tensor input_gate, torch::Tensor output_gate, torch::Tensor candidate_cell,
    torch::Tensor X, torch::Tensor gate_weights, torch::Tensor weights) {
  auto d_output_gate = torch::tanh(new_cell) * grad_h;
  auto d_tanh_new_cell = output_gate * grad_h;
  auto d_new_cell = d_tanh(new_cell) * d_tanh_new_cell + grad_cell;

  auto d_old_cell = d_new_cell;
  auto d_candidate_cell = input_gate * d_new_cell;
  auto d_input_gate = candidate_cell * d_new_cell;

  auto gates = gate_weights.chunk(3, /*dim=*/1);
  d_input_gate *= d_sigmoid(gates[0]);
  d_output_gate *= d_sigmoid(gates[1]);
  d_candidate_cell *= d_elu(gates[2]);

  auto d_gates = torch::cat({d_input_gate, d_output_gate, d_candidate_cell}, /*dim=*/1);
  auto d_weights = d_gates.transpose(0, 1).mm(X);
  auto d_bias = d_gates.sum(/*dim=*/0);
  auto d_X = d_gates.mm(weights);
  const auto state_size = grad_h.size(1);
  auto d_old_h = d_X.slice(/*dim=*/1, 0, state_size);
  auto d_input = d_X.slice(/*dim=*/1, state_size);
  return {d_old_h, d_input, d_weights, d_bias, d_old_cell};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &lltm_forward, "LLTM forward");
  m.def("backward", &lltm_backward, "LLTM backward");
}
"""

extension = load_inline(name="lltm_cpp", cpp_sources=CPP)


class LLTMFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weights, bias, old_h, old_cell):  # type: ignore[override]
        new_h, new_cell, *kept = extension.forward(input, weights, bias, old_h, old_cell)
        ctx.save_for_backward(new_cell, *kept, weights)
        return new_h, new_cell

    @staticmethod
    def backward(ctx, grad_h, grad_cell):  # type: ignore[override]
        new_cell, *kept, weights = ctx.saved_tensors
        grad_h = torch.zeros_like(new_cell) if grad_h is None else grad_h.contiguous()
        grad_cell = torch.zeros_like(new_cell) if grad_cell is None else grad_cell.contiguous()
        d_old_h, d_input, d_weights, d_bias, d_old_cell = extension.backward(
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
