"""Make a case's inputs from a seed and hand exact copies to the reference and the solution."""

from __future__ import annotations

import copy
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from harness.loading import Case
from harness.parts import part
from harness.settings import Checking


def seed_everything(seed: int) -> None:
    """Seed every generator a KernelBench file may draw from: Python's, NumPy's and torch's."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def mixed_seed(public: int, secret: int) -> int:
    """The seed inputs are drawn from: the public seed mixed with the run's secret (a secret of
    0 leaves the public seed as it is), so no solution can know its inputs in advance."""
    if secret == 0:
        return public
    digest = hashlib.sha256(f"{public}:{secret}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


CASE_SEED_STRIDE = 1000  # case k: weights from seed + 1000 k, trial t's inputs from that + t
BENCHMARK_SEED_OFFSET = 500_000  # benchmark b: weights and inputs from seed + 500000 + b


@dataclass(frozen=True)
class Seeds:
    """The one plan every seed of a run comes from: a public number derived from the base seed,
    mixed with the run's secret (`mixed_seed`). With secret 0 the public numbers are used as
    they are, which lets a test or a reader replay a check by hand."""

    seed: int
    secret: int = 0

    @classmethod
    def of(cls, checking: Checking) -> Seeds:
        """The plan of a run's checking settings (its base seed and secret)."""
        return cls(checking.seed, checking.secret)

    def case(self, index: int) -> int:
        """Case `index`'s models (Model and ModelNew are built from it)."""
        return mixed_seed(self.seed + CASE_SEED_STRIDE * index, self.secret)

    def trial(self, index: int, trial: int) -> int:
        """The inputs of trial `trial` (from 1) of case `index`."""
        return mixed_seed(self.seed + CASE_SEED_STRIDE * index + trial, self.secret)

    def benchmark(self, index: int) -> int:
        """Benchmark `index`'s models and first input set (later sets take the seeds after)."""
        return mixed_seed(self.seed + BENCHMARK_SEED_OFFSET + index, self.secret)


def make_inputs(case: Case, seed: int, device: torch.device) -> list[Any]:
    """The case's inputs drawn under `seed` on `device` (`drawn`), without changing any dtype."""
    with part("inputs"):
        values = drawn(case.get_inputs, seed, device)
        if not isinstance(values, (list, tuple)):
            raise TypeError(f"get_inputs() must return a list, not {type(values).__name__}")
        return [replicate(v, device) for v in values]


def drawn(get_inputs: Callable[[], Any], seed: int, device: torch.device) -> Any:
    """`get_inputs()` after seeding, run with `device` as torch's default device, so that the
    tensors it makes are drawn there (from torch's generator of that device, seeded by the same
    seed) instead of on the CPU and copied: at KernelBench's current sizes (GBs per input) a
    CPU draw takes seconds. The values differ from a CPU draw of the same seed, and the CUDA
    generator's may differ between GPU models. A `get_inputs` that cannot run so (it calls
    `.numpy()`, or passes a CPU generator) is drawn on the CPU again, from the same seed."""
    seed_everything(seed)
    if device.type == "cpu":
        return get_inputs()
    try:
        with torch.device(device):
            return get_inputs()
    except Exception:
        seed_everything(seed)
        return get_inputs()


def make_init_inputs(case: Case, device: torch.device) -> list[Any]:
    """The case's init inputs; tensors among them move to `device` (GPUCodeForces does so)."""
    values = case.get_init_inputs()
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"get_init_inputs() must return a list, not {type(values).__name__}")
    return [replicate(v, device) if isinstance(v, torch.Tensor) else v for v in values]


def replicate(value: Any, device: torch.device) -> Any:
    """A copy of `value` on `device`; a tensor keeps its strides and storage offset.

    `tensor.to(device)` or `clone()` would hand out a fresh, aligned tensor and so hide what a
    case means to test: a view starting at an odd element, a transposed or overlapping view.
    Copying the whole underlying storage and re-applying the view keeps all of that.
    """
    if not isinstance(value, torch.Tensor):
        return copy.deepcopy(value)
    if value.layout != torch.strided or value.numel() == 0:
        return value.detach().clone().to(device)
    storage_elements = value.untyped_storage().nbytes() // value.element_size()
    base = torch.empty(0, dtype=value.dtype, device=value.device)
    base.set_(value.untyped_storage(), 0, (storage_elements,), (1,))
    moved = base.detach().to(device, copy=True)
    return moved.as_strided(value.shape, value.stride(), value.storage_offset())


def replicate_all(values: list[Any], device: torch.device) -> list[Any]:
    return [replicate(v, device) for v in values]
