"""The LLTM cell of PyTorch's C++/CUDA extension tutorial: an LSTM-like recurrent cell without a
forget gate, with an ELU for its candidate cell. Its backward is judged too (BACKWARD).

    X = [old_h, input]; gates = X @ W^T + b, split in three along the features
    input_gate = sigmoid(g0), output_gate = sigmoid(g1), candidate_cell = elu(g2, alpha=1)
    new_cell = old_cell + candidate_cell * input_gate
    new_h = tanh(new_cell) * output_gate

returns (new_h, new_cell). W is (3 * state, input + state) and b is (3 * state), both drawn
uniformly from +-1/sqrt(state).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BACKWARD = True


class Model(nn.Module):
    def __init__(self, input_features: int, state_size: int) -> None:
        super().__init__()
        self.input_features = input_features
        self.state_size = state_size
        self.weights = nn.Parameter(torch.empty(3 * state_size, input_features + state_size))
        self.bias = nn.Parameter(torch.empty(3 * state_size))
        bound = 1.0 / math.sqrt(state_size)
        for param in self.parameters():
            nn.init.uniform_(param, -bound, bound)

    def forward(
        self, input: torch.Tensor, old_h: torch.Tensor, old_cell: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        X = torch.cat([old_h, input], dim=1)
        gates = F.linear(X, self.weights, self.bias).chunk(3, dim=1)
        input_gate = torch.sigmoid(gates[0])
        output_gate = torch.sigmoid(gates[1])
        candidate_cell = F.elu(gates[2])
        new_cell = old_cell + candidate_cell * input_gate
        new_h = torch.tanh(new_cell) * output_gate
        return new_h, new_cell


def cell_inputs(batch: int, features: int, state: int) -> list[torch.Tensor]:
    return [torch.randn(batch, features), torch.randn(batch, state), torch.randn(batch, state)]


BATCH, INPUT_FEATURES, STATE_SIZE = 16, 32, 128  # the tutorial's sizes


def get_inputs() -> list[torch.Tensor]:
    return cell_inputs(BATCH, INPUT_FEATURES, STATE_SIZE)


def get_init_inputs() -> list[int]:
    return [INPUT_FEATURES, STATE_SIZE]


CASES = [
    {"name": "odd 3x5x7", "init_inputs": [5, 7], "inputs": lambda: cell_inputs(3, 5, 7)},
    {"name": "one row", "init_inputs": [32, 128], "inputs": lambda: cell_inputs(1, 32, 128)},
    {"name": "one feature", "init_inputs": [1, 33], "inputs": lambda: cell_inputs(17, 1, 33)},
]
BENCHMARKS = [
    {
        "name": "4096x512x1024",
        "init_inputs": [512, 1024],
        "inputs": lambda: cell_inputs(4096, 512, 1024),
    },
    {
        "name": "1024x256x256",
        "init_inputs": [256, 256],
        "inputs": lambda: cell_inputs(1024, 256, 256),
    },
]
