"""1-D convolution, the minitorch course's Lesson 4 (shared/seeds/minitorch_gpu_notes.txt), with
PyTorch's semantics: stride 1, no padding, no bias.

    out[b, oc, w] = sum over ic < in_channels, k < kernel_width of
                    weight[oc, ic, k] * x[b, ic, w + k]

x is (batch, in_channels, width) float32 (or (in_channels, width), unbatched, as F.conv1d also
takes), weight is (out_channels, in_channels, kernel_width), and the output is
(batch, out_channels, width - kernel_width + 1). The notes' own tensor_conv1d pads past the right
edge with zeros and keeps the input's width; the issue asks for no padding, so only the outputs
whose window lies wholly inside the input exist. The weight is a parameter named `weight`: the
harness copies it into ModelNew by name, so a solution keeps that name and shape.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, IN_CHANNELS, OUT_CHANNELS, WIDTH, KERNEL_WIDTH = 4, 16, 32, 200, 5


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_width: int) -> None:
        super().__init__()
        scale = 1.0 / math.sqrt(in_channels * kernel_width)  # outputs of about unit size
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel_width) * scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, self.weight)


def make_inputs(batch: int, in_channels: int, width: int) -> list[torch.Tensor]:
    return [torch.randn(batch, in_channels, width, dtype=torch.float32)]


def get_inputs() -> list[torch.Tensor]:
    return make_inputs(BATCH, IN_CHANNELS, WIDTH)


def get_init_inputs() -> list[int]:
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_WIDTH]


def count_flops(inputs: list[torch.Tensor], output: torch.Tensor) -> int:
    """A multiply and an add per weight tap of each output: 2 * B * OC * OW * IC * K."""
    x = inputs[0]
    in_channels, width = x.shape[-2], x.shape[-1]
    kernel_width = width - output.shape[-1] + 1
    return 2 * output.numel() * in_channels * kernel_width


def count_bytes(inputs: list[torch.Tensor], output: torch.Tensor) -> int:
    """The input, the weight (a parameter, so not among the inputs) and the output, once each."""
    x = inputs[0]
    in_channels, width = x.shape[-2], x.shape[-1]
    out_channels, kernel_width = output.shape[-2], width - output.shape[-1] + 1
    weight = out_channels * in_channels * kernel_width
    return (x.numel() + weight + output.numel()) * x.element_size()


def _shape(batch: int, in_channels: int, out_channels: int, width: int, kernel_width: int):
    """A case's init inputs and inputs, for a case dict."""
    return {
        "init_inputs": [in_channels, out_channels, kernel_width],
        "inputs": lambda: make_inputs(batch, in_channels, width),
    }


def _transposed_view() -> list[torch.Tensor]:
    x = torch.randn(3, 301, IN_CHANNELS)
    return [x.transpose(1, 2)]  # (3, 16, 301) with the channels innermost: strides (4816, 1, 16)


def _offset_view() -> list[torch.Tensor]:
    shape = (2, IN_CHANNELS, 257)
    storage = torch.randn(math.prod(shape) + 1)
    return [storage[1:].view(shape)]  # starts one float into its storage: not 16-byte aligned


def _unbatched() -> list[torch.Tensor]:
    return [torch.randn(IN_CHANNELS, 123)]


# Optional extras read by the harness (see README, "Problems").
ATOL = 1e-4
RTOL = 1e-4

CASES = [
    {"name": "kernel width 1", **_shape(3, 16, 32, 130, 1)},
    {"name": "kernel width == width", **_shape(3, 4, 6, 45, 45)},  # output width 1
    {"name": "3 in, 5 out", **_shape(2, 3, 5, 101, 3)},
    {"name": "17 out, k 7", **_shape(2, 9, 17, 777, 7)},
    {"name": "67 in, 130 out", **_shape(2, 67, 130, 300, 3)},
    {"name": "kernel width 40", **_shape(2, 5, 70, 97, 40)},
    {"name": "45 out, k 33", **_shape(2, 3, 45, 70, 33)},
    {"name": "in_channels 1", **_shape(3, 1, 7, 129, 2)},
    {"name": "batch 1", **_shape(1, 16, 32, 333, 5)},
    {"name": "width 1000003", **_shape(1, 2, 3, 1_000_003, 4)},
    {"name": "transposed view", "inputs": _transposed_view},
    {"name": "offset view", "inputs": _offset_view},
    {"name": "unbatched", "inputs": _unbatched},
    {"name": "batch 0", **_shape(0, 16, 32, 200, 5)},
]

BENCHMARKS = [
    {"name": "32x64x4096 -> 128, k 7", **_shape(32, 64, 128, 4096, 7)},
    {"name": "64x8x65536 -> 8, k 3", **_shape(64, 8, 8, 65536, 3)},
    {"name": "16x256x1024 -> 256, k 3", **_shape(16, 256, 256, 1024, 3)},
]
