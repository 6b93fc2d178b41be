"""The LLTM solutions' hand-written backward against torch.autograd.gradcheck, in float64 on
small shapes (the harness checks them in float32 against the reference's own autograd).

The CUDA solutions are checked on a GPU only (marked `gpu`): each is built once per session,
through the build cache, and never on a machine without a GPU."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from harness.loading import import_file
from harness.toolchain import use_build_cache
from tests.conftest import BUILDS, REPO

pytestmark = pytest.mark.build

SOLUTIONS = REPO / "solutions" / "lltm"
CPP = SOLUTIONS / "cpp.py"
CUDA_SOLUTIONS = ["cuda", "fast_cuda"]
REFERENCE = REPO / "problems" / "lltm" / "reference.py"


def built(solution: Path, arch: str, builds: Path) -> ModuleType:
    use_build_cache(builds, "lltm", solution, arch)
    return import_file(solution)


def cell_arguments(
    batch: int, features: int, state: int, device: str = "cpu"
) -> list[torch.Tensor]:
    """input, weights, bias, old_h, old_cell in float64, each requiring its gradient."""
    generator = torch.Generator().manual_seed(0)

    def drawn(*shape: int) -> torch.Tensor:
        values = torch.randn(*shape, dtype=torch.float64, generator=generator)
        return values.to(device).requires_grad_(True)

    return [
        drawn(batch, features),
        drawn(3 * state, features + state),
        drawn(3 * state),
        drawn(batch, state),
        drawn(batch, state),
    ]


def test_the_cpp_backward_passes_gradcheck_in_float64() -> None:
    function = built(CPP, "9.0", BUILDS).LLTMFunction
    # input, weights, bias, old_h, old_cell: every gradient the backward gives, parameters too
    assert torch.autograd.gradcheck(function.apply, cell_arguments(3, 5, 7))


@pytest.fixture(scope="module", params=CUDA_SOLUTIONS)
def cuda_solution(request: pytest.FixtureRequest) -> ModuleType:
    major, minor = torch.cuda.get_device_capability()
    # run.py's default build cache, so a solution built by `run.py --problem lltm` (same
    # sources, same GPU) is not built again, nor the other way round.
    return built(SOLUTIONS / f"{request.param}.py", f"{major}.{minor}", BUILDS)


# 3x5x7: the scalar path everywhere; 2x3x8: the state a multiple of 4 (fast_cuda's vector path)
SMALL_SHAPES = [(3, 5, 7), (2, 3, 8)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SMALL_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_each_cuda_backward_passes_gradcheck_in_float64(
    cuda_solution: ModuleType, shape: tuple[int, int, int]
) -> None:
    arguments = cell_arguments(*shape, device="cuda")
    assert torch.autograd.gradcheck(cuda_solution.LLTMFunction.apply, arguments)


@pytest.mark.gpu
@pytest.mark.parametrize("output", [0, 1], ids=["new_h only", "new_cell only"])
@pytest.mark.parametrize("shape", SMALL_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_each_cuda_backward_passes_gradcheck_with_one_output_alone(
    cuda_solution: ModuleType, shape: tuple[int, int, int], output: int
) -> None:
    # The other output's upstream gradient is None (fast_cuda) or zeros (cuda).
    def one_output(*arguments: torch.Tensor) -> torch.Tensor:
        return cuda_solution.LLTMFunction.apply(*arguments)[output]

    assert torch.autograd.gradcheck(one_output, cell_arguments(*shape, device="cuda"))


def plain(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def transposed(tensor: torch.Tensor) -> torch.Tensor:
    """The same values, laid out column-major (a non-contiguous view)."""
    return tensor.t().contiguous().t()


def misaligned(tensor: torch.Tensor) -> torch.Tensor:
    """The same values in a contiguous view starting one element past a 16-byte boundary."""
    storage = torch.empty(tensor.numel() + 1, dtype=tensor.dtype, device=tensor.device)
    view = storage[1:].view(tensor.shape)
    view.copy_(tensor)
    return view


def labelled(name: str) -> Callable[[str], str]:
    """A message maker for assert_close that names the tensor."""

    def message(text: str) -> str:
        return f"{name}: {text}"

    return message


def outputs_and_gradients(
    model: torch.nn.Module, inputs: list[torch.Tensor], upstream: list[torch.Tensor]
) -> list[torch.Tensor]:
    """new_h, new_cell, then the gradients of input, old_h, old_cell, weights and bias."""
    leaves = [value.detach().requires_grad_(True) for value in inputs]
    outputs = model(*leaves)
    torch.autograd.backward(outputs, upstream)
    grads = [leaf.grad for leaf in leaves]
    params = [model.weights.grad, model.bias.grad]
    return [o.detach() for o in outputs] + grads + params


@pytest.fixture
def full_float32() -> Iterator[None]:
    """TF32 off for float32 matrix products, as the harness has it."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("shape", "layout"),
    [
        ((64, 48, 96), plain),
        ((64, 48, 96), transposed),
        ((64, 48, 96), misaligned),
        ((33, 17, 35), plain),
    ],
    ids=["64x48x96", "64x48x96 transposed", "64x48x96 misaligned", "33x17x35"],
)
def test_each_cuda_solution_matches_the_reference_in_float32(
    cuda_solution: ModuleType,
    shape: tuple[int, int, int],
    layout: Callable[[torch.Tensor], torch.Tensor],
    full_float32: None,
) -> None:
    batch, features, state = shape
    torch.manual_seed(1)
    reference = import_file(REFERENCE).Model(features, state).cuda()
    solution = cuda_solution.ModelNew(features, state).cuda()
    solution.load_state_dict(reference.state_dict())
    inputs = [torch.randn(batch, n, device="cuda") for n in (features, state, state)]
    upstream = [torch.randn(batch, state, device="cuda") for _ in range(2)]

    got = outputs_and_gradients(
        solution, [layout(x) for x in inputs], [layout(u) for u in upstream]
    )
    # The reference in float64 on the same values: the exact answer, up to float64 rounding.
    want = outputs_and_gradients(
        reference.double(), [x.double() for x in inputs], [u.double() for u in upstream]
    )
    names = ["new_h", "new_cell", "d_input", "d_old_h", "d_old_cell", "d_weights", "d_bias"]
    for name, have, expected in zip(names, got, want, strict=True):
        assert have.dtype == torch.float32, name
        scale = expected.abs().max().item()
        torch.testing.assert_close(
            have.double(),
            expected,
            rtol=1e-4,
            atol=1e-4 * scale,
            msg=labelled(name),
        )
