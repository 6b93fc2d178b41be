"""The LLTM solutions' hand-written backward against torch.autograd.gradcheck, in float64 on
small shapes (the harness checks them in float32 against the reference's own autograd)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.loading import import_file
from harness.toolchain import source_hash, use_build_cache
from tests.conftest import REPO

pytestmark = pytest.mark.build

CPP = REPO / "solutions" / "lltm" / "cpp.py"


def test_the_cpp_backward_passes_gradcheck_in_float64(request: pytest.FixtureRequest) -> None:
    builds = Path(request.config.cache.mkdir("builds"))
    use_build_cache(builds, "lltm", CPP, "9.0", source_hash(CPP))
    function = import_file(CPP).LLTMFunction
    generator = torch.Generator().manual_seed(0)

    def drawn(*shape: int) -> torch.Tensor:
        values = torch.randn(*shape, dtype=torch.float64, generator=generator)
        return values.requires_grad_(True)

    # input, weights, bias, old_h, old_cell: every gradient the backward gives, parameters too
    inputs = [drawn(3, 5), drawn(21, 12), drawn(21), drawn(3, 7), drawn(3, 7)]
    assert torch.autograd.gradcheck(function.apply, inputs)
