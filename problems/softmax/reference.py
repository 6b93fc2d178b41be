"""Softmax or log-softmax over the last dimension of a float32 tensor: the minitorch notes' stable
softmax.

Written from the minitorch notes (shared/seeds/minitorch_gpu_notes.txt): exp overflows (past
about 88 in float32), so the row's maximum is subtracted before exp, and logsoftmax is
x - max - log(sum(exp(x - max))). `log` is the init input: torch.log_softmax when true,
torch.softmax when false. The default is 64 rows of 1000. The cases vary the row length (1 to
65537, odd and even, below and above every block and register capacity), feed values up to
+-1000 (naive exp overflows), a huge value in each row, rows of equal values, a 3-D input and
permuted and misaligned views; the benchmarks are 4096x8192 (both modes), long rows (256x131072)
and short rows (65536x128).
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, log: bool = False) -> None:
        super().__init__()
        self.log = log

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.log:
            return torch.log_softmax(x, dim=-1)
        return torch.softmax(x, dim=-1)


def make_inputs(*shape: int, scale: float = 1.0) -> list[torch.Tensor]:
    return [torch.randn(shape, dtype=torch.float32) * scale]


def get_inputs() -> list[torch.Tensor]:
    return make_inputs(64, 1000)


def get_init_inputs() -> list[bool]:
    return [False]


def _one_huge(rows: int, length: int):
    """Each row holds one value of 1000 at a random place: exp of it overflows, every other
    probability underflows to about zero."""

    def inputs() -> list[torch.Tensor]:
        x = torch.randn(rows, length)
        x[torch.arange(rows), torch.randint(0, length, (rows,))] = 1000.0
        return [x]

    return inputs


def _equal_rows() -> list[torch.Tensor]:
    x = torch.randn(16, 777)
    x[::2] = 3.5  # every other row constant: each probability exactly 1/777
    x[1::4] = -1000.0  # and some rows constant at -1000
    return [x]


def _offset_view(offset: int, rows: int, length: int):
    """A view starting `offset` floats into its storage, so not 16-byte aligned."""

    def inputs() -> list[torch.Tensor]:
        return [torch.randn(rows * length + offset)[offset:].view(rows, length)]

    return inputs


def _transposed() -> list[torch.Tensor]:
    return [torch.randn(1000, 48).t()]  # 48 rows of 1000, each row strided by 48 floats


def _with_log(cases: list[dict]) -> list[dict]:
    """Each case once for softmax and once for log_softmax."""
    both = []
    for case in cases:
        both.append(case)
        both.append({**case, "name": f"{case['name']} log", "init_inputs": [True]})
    return both


# Optional extras read by the harness (see README, "Problems"). Probabilities are mostly about
# 1e-3 (and far smaller in the large-value cases), so the absolute tolerance is tighter than
# float32's default 1e-4.
ATOL = 1e-6
RTOL = 1e-4

CASES = [
    {"name": "default log", "init_inputs": [True]},
    *_with_log(
        [
            {"name": "64x1", "inputs": lambda: make_inputs(64, 1)},
            {"name": "9x7", "inputs": lambda: make_inputs(9, 7)},
            {"name": "11x33", "inputs": lambda: make_inputs(11, 33)},
            {"name": "37x128", "inputs": lambda: make_inputs(37, 128)},
            {"name": "17x200", "inputs": lambda: make_inputs(17, 200)},
            {"name": "10x512", "inputs": lambda: make_inputs(10, 512)},
            {"name": "13x1023", "inputs": lambda: make_inputs(13, 1023)},
            {"name": "13x1025", "inputs": lambda: make_inputs(13, 1025)},
            {"name": "9x2048", "inputs": lambda: make_inputs(9, 2048)},
            {"name": "6x4096", "inputs": lambda: make_inputs(6, 4096)},
            {"name": "5x10007", "inputs": lambda: make_inputs(5, 10007)},
            {"name": "5x16384", "inputs": lambda: make_inputs(5, 16384)},
            {"name": "3x40000", "inputs": lambda: make_inputs(3, 40000)},
            {"name": "2x65537", "inputs": lambda: make_inputs(2, 65537)},
            {"name": "1-D 300000", "inputs": lambda: make_inputs(300_000)},
            {"name": "4x5x333", "inputs": lambda: make_inputs(4, 5, 333)},
            {"name": "x1000 64x1000", "inputs": lambda: make_inputs(64, 1000, scale=1000.0)},
            {"name": "x1000 7x20001", "inputs": lambda: make_inputs(7, 20001, scale=1000.0)},
            {"name": "one huge 32x500", "inputs": _one_huge(32, 500)},
            {"name": "one huge 4x4096", "inputs": _one_huge(4, 4096)},
            {"name": "equal rows", "inputs": _equal_rows},
            {"name": "transposed", "inputs": _transposed},
            {"name": "offset 1 9x1000", "inputs": _offset_view(1, 9, 1000)},
            {"name": "offset 3 3x8192", "inputs": _offset_view(3, 3, 8192)},
            {"name": "offset 1 2x65536", "inputs": _offset_view(1, 2, 65536)},
        ]
    ),
    {"name": "0-D", "inputs": lambda: make_inputs()},
    {"name": "empty", "inputs": lambda: make_inputs(0, 100)},
]

BENCHMARKS = [
    {"name": "4096x8192", "inputs": lambda: make_inputs(4096, 8192)},
    {"name": "4096x8192 log", "inputs": lambda: make_inputs(4096, 8192), "init_inputs": [True]},
    {"name": "256x131072", "inputs": lambda: make_inputs(256, 131072)},
    {"name": "65536x128", "inputs": lambda: make_inputs(65536, 128)},
]
