"""SmoothL1Loss in Triton: each program computes the loss of BLOCK elements in float32 and
stores them (reduction "none") or their sum (a partial); one more program adds the partials in
order and divides by the count for "mean" (an empty mean is 0 / 0, NaN, as PyTorch's). The two
inputs are read as flat arrays: a view that is not contiguous is copied first."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 4096  # elements per program
PARTIALS_BLOCK = 1024  # partials the final program reads at a time


@triton.jit
def smooth_l1_blocks(a_ptr, b_ptr, out_ptr, n, beta, REDUCE: tl.constexpr, BLOCK: tl.constexpr):
    block = tl.program_id(0).to(tl.int64)
    offsets = block * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    a = tl.load(a_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    diff = tl.abs(a - b)
    # beta = 0: no element is below it, so the loss is diff - 0 (the other side is not used)
    loss = tl.where(diff < beta, 0.5 * diff * diff / beta, diff - 0.5 * beta)
    if REDUCE:
        tl.store(out_ptr + block, tl.sum(tl.where(inside, loss, 0.0), 0))
    else:
        tl.store(out_ptr + offsets, loss.to(out_ptr.dtype.element_ty), mask=inside)


@triton.jit
def add_partials(partials_ptr, out_ptr, count, divisor, BLOCK: tl.constexpr):
    total = tl.zeros([BLOCK], tl.float32)
    for start in range(0, count, BLOCK):
        index = start + tl.arange(0, BLOCK)
        total += tl.load(partials_ptr + index, mask=index < count, other=0.0)
    tl.store(out_ptr, (tl.sum(total, 0) / divisor).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__()
        self.reduction = reduction
        self.beta = float(beta)

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        a, b = input.contiguous(), target.contiguous()
        n = a.numel()
        blocks = triton.cdiv(n, BLOCK)
        if self.reduction == "none":
            out = torch.empty(a.shape, dtype=a.dtype, device=a.device)
            if n:
                smooth_l1_blocks[(blocks,)](a, b, out, n, self.beta, False, BLOCK)
            return out
        partials = torch.empty(max(blocks, 1), dtype=torch.float32, device=a.device)
        if n:
            smooth_l1_blocks[(blocks,)](a, b, partials, n, self.beta, True, BLOCK)
        out = torch.empty((), dtype=a.dtype, device=a.device)
        divisor = float(n) if self.reduction == "mean" else 1.0
        add_partials[(1,)](partials, out, blocks, divisor, PARTIALS_BLOCK)
        return out
