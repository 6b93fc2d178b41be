"""The seed's SmoothL1Loss module on two 32x64x56x56 float32 tensors.

Written from the GPUCodeForces seed task (shared/seeds/smooth_l1_task.txt): the same module,
shapes and input distribution. `reduction` and `beta` are the init inputs.
"""

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
    return [torch.randn(*shape, dtype=torch.float32), torch.randn(*shape, dtype=torch.float32)]


def get_inputs() -> list[torch.Tensor]:
    return make_inputs(N, C, H, W)


def get_init_inputs() -> list:
    return ["mean", 1.0]


# Optional extras read by the harness (see README, "Problems").
ATOL = 1e-4
RTOL = 1e-4

CASES = [
    {"name": "sum", "init_inputs": ["sum", 1.0]},
    {"name": "none", "init_inputs": ["none", 1.0]},
    {"name": "beta=0.5", "init_inputs": ["mean", 0.5]},
    {"name": "3x5x7x11", "inputs": lambda: make_inputs(3, 5, 7, 11)},
]
