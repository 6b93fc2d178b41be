"""The seed's SmoothL1Loss module on two 32x64x56x56 float32 tensors.

Written from the GPUCodeForces seed task (shared/seeds/smooth_l1_task.txt): the same module,
shapes and input distribution. `reduction` and `beta` are the init inputs.
"""

import math

import torch
import torch.nn as nn

N, C, H, W = 32, 64, 56, 56


class SmoothL1Loss(nn.Module):
    def __init__(self, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__()
        self.reduction = reduction
        self.beta = beta

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        diff = torch.abs(input - target)
        if self.beta == 0:
            loss = diff
        else:
            loss = torch.where(
                diff < self.beta, 0.5 * diff * diff / self.beta, diff - 0.5 * self.beta
            )
        if self.reduction == "mean":
            return loss.mean()
        if self.reduction == "sum":
            return loss.sum()
        return loss


class Model(nn.Module):
    def __init__(self, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__()
        self.op = SmoothL1Loss(reduction, beta)

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.op(input, target)


def make_inputs(*shape: int) -> list[torch.Tensor]:
    return [torch.randn(shape, dtype=torch.float32), torch.randn(shape, dtype=torch.float32)]


def get_inputs() -> list[torch.Tensor]:
    return make_inputs(N, C, H, W)


def get_init_inputs() -> list:
    return ["mean", 1.0]


def _offset_views(offsets: tuple[int, int], *shape: int):
    """Views starting `offsets` floats into their storage, so not 16-byte aligned."""

    def inputs() -> list[torch.Tensor]:
        numel = math.prod(shape)
        return [torch.randn(numel + k)[k:].view(shape) for k in offsets]

    return inputs


def _non_contiguous() -> list[torch.Tensor]:
    a, b = make_inputs(4, 56, 56, 64)
    return [a.permute(0, 3, 1, 2), b.transpose(1, 3)]  # 4x64x56x56 views, different strides


# Optional extras read by the harness (see README, "Problems").
ATOL = 1e-4
RTOL = 1e-4

CASES = [
    {"name": "sum", "init_inputs": ["sum", 1.0]},
    {"name": "none", "init_inputs": ["none", 1.0]},
    {"name": "beta=0.5", "init_inputs": ["mean", 0.5]},
    {"name": "beta=0", "init_inputs": ["mean", 0.0]},
    {"name": "beta=0 none", "init_inputs": ["none", 0.0], "inputs": lambda: make_inputs(999)},
    {"name": "beta=2 sum", "init_inputs": ["sum", 2.0]},
    {"name": "3x5x7x11", "inputs": lambda: make_inputs(3, 5, 7, 11)},
    {"name": "1-D 1000003", "inputs": lambda: make_inputs(1_000_003)},
    {
        "name": "2-D 37x129 none",
        "inputs": lambda: make_inputs(37, 129),
        "init_inputs": ["none", 1.0],
    },
    {"name": "5-D", "inputs": lambda: make_inputs(2, 3, 5, 7, 9), "init_inputs": ["sum", 1.0]},
    {"name": "0-D", "inputs": lambda: make_inputs(), "init_inputs": ["none", 1.0]},
    {"name": "offset 1 and 3", "inputs": _offset_views((1, 3), 7, 1001)},
    {"name": "offset 1 and 1", "inputs": _offset_views((1, 1), 5, 4097)},
    {
        "name": "offset 2 none",
        "inputs": _offset_views((2, 2), 3, 3001),
        "init_inputs": ["none", 1.0],
    },
    {"name": "non-contiguous", "inputs": _non_contiguous},
    {"name": "non-contiguous none", "inputs": _non_contiguous, "init_inputs": ["none", 1.0]},
    {"name": "empty mean", "inputs": lambda: make_inputs(0, 64)},
    {"name": "empty sum", "inputs": lambda: make_inputs(0, 64), "init_inputs": ["sum", 1.0]},
    {"name": "empty none", "inputs": lambda: make_inputs(0, 64), "init_inputs": ["none", 1.0]},
]

BENCHMARKS = [{"name": "128x64x56x56", "inputs": lambda: make_inputs(128, 64, 56, 56)}]
