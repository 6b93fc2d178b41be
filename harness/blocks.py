"""A tensor read a block at a time, so that what the harness computes from an output of any size
(comparisons, fingerprints, the accuracy rule) needs temporaries of one block, not of the whole.

A block is a view (no copy) of at most BLOCK_ELEMENTS elements, whatever the tensor's strides;
blocks come in row-major order, so the first elements found in them are the tensor's first.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

BLOCK_ELEMENTS = 1 << 24  # a block's elements: a float64 temporary of one is 128 MiB
Index = tuple[slice, ...]  # a block of a tensor: tensor[index], leading dimensions sliced


def blocks(shape: torch.Size | tuple[int, ...], limit: int | None = None) -> Iterator[Index]:
    """Indices that cover a tensor of `shape` once, in row-major order, each selecting at most
    `limit` elements (BLOCK_ELEMENTS unless given); a tensor with no element has no block, a
    scalar one block, `()`."""
    limit = limit or BLOCK_ELEMENTS
    if not shape:
        yield ()
        return
    if 0 in shape:
        return
    inner = math.prod(shape[1:])
    if inner <= limit or len(shape) == 1:
        step = max(1, limit // inner)
        for start in range(0, shape[0], step):
            yield (slice(start, min(start + step, shape[0])),)
        return
    for first in range(shape[0]):
        for rest in blocks(shape[1:], limit):
            yield (slice(first, first + 1), *rest)


def offsets(index: Index, dims: int, device: torch.device) -> torch.Tensor:
    """The position in the whole tensor (of `dims` dimensions) of a block's first element."""
    starts = [part.start for part in index] + [0] * (dims - len(index))
    return torch.tensor(starts, dtype=torch.int64, device=device)


def first_positions(mask: torch.Tensor, index: Index, count: int) -> list[list[int]]:
    """The positions in the whole tensor of the first `count` True elements of `mask`, the
    block at `index`."""
    if count <= 0 or mask.dim() == 0:
        return []
    found = mask.nonzero()[:count]
    return (found + offsets(index, mask.dim(), found.device)).tolist()
