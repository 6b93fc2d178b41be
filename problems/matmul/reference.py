"""A float32 matrix product, C = A @ B, for 2-D A (M x K) and B (K x N).

Written from the matrix-multiply exercise of the minitorch course notes
(shared/seeds/minitorch_gpu_notes.txt): a block of threads loads square tiles of A and B into
shared memory, synchronises, adds the tile's products, and steps along K. The reference is
PyTorch's own product (cuBLAS on the GPU). The harness turns TF32 off, so on the GPU it is true
float32 SGEMM, and a solution must be float32 arithmetic too, not TF32 or half precision.

Cases are sizes that are no multiple of any tile or vector width (1, 17, 127, 129, 255, 257),
K of 0 and 1, transposed (column-major) views, views that start an odd number of floats into
their storage (so not 16-byte aligned), a row-strided slice, and a long K. Benchmarks: the
target shape 4096^3, a non-square 8192 x 2048 @ 2048 x 1024 and a mid-sized 1024^3.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def make_inputs(m: int, k: int, n: int) -> list[torch.Tensor]:
    """A (m x k) and B (k x n), standard normal float32, both contiguous."""
    return [torch.randn(m, k), torch.randn(k, n)]


def get_inputs() -> list[torch.Tensor]:
    return make_inputs(256, 384, 320)


def get_init_inputs() -> list:
    return []


def transposed(m: int, k: int, n: int, a_t: bool, b_t: bool):
    """Inputs where A and/or B are transposed views (column-major, not contiguous)."""

    def inputs() -> list[torch.Tensor]:
        a = torch.randn(k, m).t() if a_t else torch.randn(m, k)
        b = torch.randn(n, k).t() if b_t else torch.randn(k, n)
        return [a, b]

    return inputs


def offset(m: int, k: int, n: int, a_offset: int, b_offset: int):
    """Contiguous views that start `a_offset` and `b_offset` floats into their storage, so an
    odd offset is not 16-byte aligned."""

    def inputs() -> list[torch.Tensor]:
        a = torch.randn(m * k + a_offset)[a_offset:].view(m, k)
        b = torch.randn(k * n + b_offset)[b_offset:].view(k, n)
        return [a, b]

    return inputs


def row_strided(m: int, k: int, n: int) -> list[torch.Tensor]:
    """A is a slice of a wider matrix: rows k + 3 floats apart, not contiguous."""
    return [torch.randn(m, k + 3)[:, :k], torch.randn(k, n)]


def sizes(m: int, k: int, n: int):
    return lambda: make_inputs(m, k, n)


# Names are M x K x N: A is M x K, B is K x N.
CASES = [
    {"name": "1x1x1", "inputs": sizes(1, 1, 1)},
    {"name": "1x1000x1", "inputs": sizes(1, 1000, 1)},
    {"name": "33x1x45 (K=1)", "inputs": sizes(33, 1, 45)},
    {"name": "17x33x65", "inputs": sizes(17, 33, 65)},
    {"name": "127x129x131", "inputs": sizes(127, 129, 131)},
    {"name": "255x257x1", "inputs": sizes(255, 257, 1)},
    {"name": "1x129x257", "inputs": sizes(1, 129, 257)},
    {"name": "3x2x300", "inputs": sizes(3, 2, 300)},
    # K and N multiples of 4 but of no tile: the vectorised path's tails in M, N and K.
    {"name": "200x260x196", "inputs": sizes(200, 260, 196)},
    {"name": "129x132x260", "inputs": sizes(129, 132, 260)},
    # Whole tiles: 128 and 64 divide everything.
    {"name": "256x128x384", "inputs": sizes(256, 128, 384)},
    {"name": "64x4096x64 (long K)", "inputs": sizes(64, 4096, 64)},
    {"name": "300x70x20 (non-square)", "inputs": sizes(300, 70, 20)},
    {"name": "20x70x300 (non-square)", "inputs": sizes(20, 70, 300)},
    {"name": "B transposed 130x96x70", "inputs": transposed(130, 96, 70, False, True)},
    {"name": "A transposed 130x96x70", "inputs": transposed(130, 96, 70, True, False)},
    {"name": "both transposed 67x45x129", "inputs": transposed(67, 45, 129, True, True)},
    {"name": "offset 1 and 3, 100x128x132", "inputs": offset(100, 128, 132, 1, 3)},
    {"name": "offset 2 and 0, 37x64x64", "inputs": offset(37, 64, 64, 2, 0)},
    {"name": "offset 0 and 1, 129x36x133", "inputs": offset(129, 36, 133, 0, 1)},
    {"name": "row-strided A 90x61x77", "inputs": lambda: row_strided(90, 61, 77)},
    {"name": "5x0x7 (K=0)", "inputs": sizes(5, 0, 7)},
    {"name": "0x8x5 (M=0)", "inputs": sizes(0, 8, 5)},
]

BENCHMARKS = [
    {"name": "4096^3", "inputs": sizes(4096, 4096, 4096)},
    {"name": "8192x2048x1024", "inputs": sizes(8192, 2048, 1024)},
    {"name": "1024^3", "inputs": sizes(1024, 1024, 1024)},
]


def count_flops(inputs: list[torch.Tensor], output: torch.Tensor) -> int:
    """A multiply and an add per term: 2 * M * N * K."""
    a, b = inputs
    m, k = a.shape
    n = b.shape[1]
    return 2 * m * n * k
