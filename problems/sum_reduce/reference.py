"""`x.sum(dim)` of a float32 tensor: the reduction of the minitorch course notes.

Written from the minitorch notes (shared/seeds/minitorch_gpu_notes.txt): the notes reduce a
strided tensor with one block per output and a shared-memory tree (`_sum_practice`). Here the
operator is PyTorch's own sum over one dimension, `dim` being the init input; the default is an
8x100x300 tensor summed over its middle dimension. The cases put the reduced dimension first,
in the middle and last, make it 1, odd, 0 or longer than any block, and feed permuted and
misaligned views and values whose sums cancel; the benchmarks sum a 256 MiB tensor over each of
its three dimensions.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int = 1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(self.dim)


def make_inputs(*shape: int) -> list[torch.Tensor]:
    return [torch.randn(shape, dtype=torch.float32)]


def get_inputs() -> list[torch.Tensor]:
    return make_inputs(8, 100, 300)


def get_init_inputs() -> list[int]:
    return [1]


def _offset_view(offset: int, *shape: int):
    """A view starting `offset` floats into its storage, so not 16-byte aligned."""

    def inputs() -> list[torch.Tensor]:
        numel = 1
        for size in shape:
            numel *= size
        return [torch.randn(numel + offset)[offset:].view(shape)]

    return inputs


def _permuted() -> list[torch.Tensor]:
    return [torch.randn(30, 40, 50).permute(2, 0, 1)]  # a 50x30x40 view, no dimension contiguous


def _cancelling(*shape: int, dim: int):
    """Values of about 1e4 whose sums along `dim` are about 1e-2: float32 rounding of the terms
    and of the running sum is most of the answer's error (no exact symmetry to hide it)."""

    def inputs() -> list[torch.Tensor]:
        x = torch.randn(shape, dtype=torch.float64) * 1e4
        x = x - x.mean(dim, keepdim=True) + torch.randn(shape, dtype=torch.float64) * 1e-2
        return [x.float()]

    return inputs


def _magnitudes(*shape: int):
    """Values from 1e-10 to 1e30 in size, mixed: the large ones decide each sum."""

    def inputs() -> list[torch.Tensor]:
        exponents = torch.randint(-10, 31, shape).double()
        return [(torch.randn(shape, dtype=torch.float64) * 10.0**exponents).float()]

    return inputs


# Optional extras read by the harness (see README, "Problems").
ATOL = 1e-4
RTOL = 1e-4

CASES = [
    {"name": "dim 0", "init_inputs": [0]},
    {"name": "dim 2", "init_inputs": [2]},
    {"name": "dim -1", "init_inputs": [-1]},
    {"name": "dim -3", "init_inputs": [-3]},
    {"name": "3x5x7 dim 0", "inputs": lambda: make_inputs(3, 5, 7), "init_inputs": [0]},
    {"name": "3x5x7 dim 1", "inputs": lambda: make_inputs(3, 5, 7), "init_inputs": [1]},
    {"name": "3x5x7 dim 2", "inputs": lambda: make_inputs(3, 5, 7), "init_inputs": [2]},
    {"name": "13x37x129 dim 1", "inputs": lambda: make_inputs(13, 37, 129)},
    {"name": "13x37x129 dim 2", "inputs": lambda: make_inputs(13, 37, 129), "init_inputs": [2]},
    {"name": "10x300x6 dim 1", "inputs": lambda: make_inputs(10, 300, 6)},
    {"name": "7x1x33 dim 1", "inputs": lambda: make_inputs(7, 1, 33)},
    {"name": "7x33x1 dim 2", "inputs": lambda: make_inputs(7, 33, 1), "init_inputs": [2]},
    {"name": "1x7x33 dim 0", "inputs": lambda: make_inputs(1, 7, 33), "init_inputs": [0]},
    {"name": "1-D 4099", "inputs": lambda: make_inputs(4099), "init_inputs": [0]},
    {"name": "0-D", "inputs": lambda: make_inputs(), "init_inputs": [0]},
    {"name": "3x100003x2 dim 1", "inputs": lambda: make_inputs(3, 100_003, 2)},
    {
        "name": "1x1x1000003 dim 2",
        "inputs": lambda: make_inputs(1, 1, 1_000_003),
        "init_inputs": [2],
    },
    {"name": "2x1000003 dim 1", "inputs": lambda: make_inputs(2, 1_000_003)},
    {"name": "5x70001 dim 0", "inputs": lambda: make_inputs(5, 70_001), "init_inputs": [0]},
    {"name": "256x8x1024 dim 0", "inputs": lambda: make_inputs(256, 8, 1024), "init_inputs": [0]},
    {"name": "4x1024x64 dim 1", "inputs": lambda: make_inputs(4, 1024, 64)},
    {"name": "1100x1501 dim 1", "inputs": lambda: make_inputs(1100, 1501)},
    {"name": "permuted dim 1", "inputs": _permuted},
    {"name": "permuted dim 2", "inputs": _permuted, "init_inputs": [2]},
    {"name": "offset 1 dim 0", "inputs": _offset_view(1, 7, 33, 129), "init_inputs": [0]},
    {"name": "offset 1 dim 2", "inputs": _offset_view(1, 7, 33, 128), "init_inputs": [2]},
    {"name": "offset 2 dim 1", "inputs": _offset_view(2, 5, 999, 8)},
    {"name": "cancelling dim 1", "inputs": _cancelling(16, 4096, 8, dim=1)},
    {"name": "cancelling dim 2", "inputs": _cancelling(8, 4, 50_000, dim=2), "init_inputs": [2]},
    {"name": "magnitudes dim 0", "inputs": _magnitudes(2000, 3, 64), "init_inputs": [0]},
    {"name": "magnitudes dim 2", "inputs": _magnitudes(3, 64, 2000), "init_inputs": [2]},
    {"name": "empty reduced dim", "inputs": lambda: make_inputs(4, 0, 3)},
    {"name": "empty output", "inputs": lambda: make_inputs(0, 5, 3)},
]

# A 256 MiB float32 tensor (64M elements) summed over its first, middle and last dimension.
BENCHMARKS = [
    {"name": "256 MiB dim0", "inputs": lambda: make_inputs(256, 1024, 256), "init_inputs": [0]},
    {"name": "256 MiB dim1", "inputs": lambda: make_inputs(256, 1024, 256), "init_inputs": [1]},
    {"name": "256 MiB dim2", "inputs": lambda: make_inputs(256, 1024, 256), "init_inputs": [2]},
    {"name": "4096x16384 dim -1", "inputs": lambda: make_inputs(4096, 16384), "init_inputs": [-1]},
]
