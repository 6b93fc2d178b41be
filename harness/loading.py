"""Import reference and solution files, and read a problem's optional extras.

The KernelBench contract is three names: `Model`, `get_inputs()`, `get_init_inputs()`. A problem
may also declare, each optional with a safe default:

    ATOL, RTOL   floats: the tolerance for floating-point outputs (default: by output dtype)
    CASES        extra correctness cases, a list of dicts (keys below)
    BENCHMARKS   extra benchmark shapes, a list of dicts (keys below)
    count_bytes  count_bytes(inputs, output) -> int: the bytes the operator must move (default:
                 every input tensor read once and every output tensor written once)
    count_flops  count_flops(inputs, output) -> int: its floating-point operations (default:
                 none, so no TFLOP/s column)

Keys of a case or benchmark dict: `name` (required, str); `init_inputs` (a list, default
`get_init_inputs()`); `inputs` (a zero-argument callable returning the input list, default
`get_inputs`); `atol` and `rtol` (floats, default the problem's); `invalid` (bool, cases only:
the inputs are outside the operator's domain, so the reference is not run and the solution
passes by raising an exception or returning NaN, leaving the device usable). The defaults
themselves are always the first case and the first benchmark, named "default".

Make a case's inputs from a seed and hand exact copies to the reference and the solution.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import os
import random
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

from harness.settings import PRECISION_NAMES, Checking
from harness.stats import part
from harness.verdicts import UserError

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")
COUNTERS = ("count_bytes", "count_flops")
CASE_KEYS = frozenset({"name", "init_inputs", "inputs", "atol", "rtol", "invalid"})


@dataclass(frozen=True)
class Case:
    """One set of init inputs and an input generator: a correctness case or a benchmark."""

    name: str
    get_init_inputs: Callable[[], list[Any]]
    get_inputs: Callable[[], list[Any]]
    atol: float | None = None
    rtol: float | None = None
    invalid: bool = False  # inputs outside the operator's domain: the solution must refuse them


@dataclass(frozen=True)
class Problem:
    """A loaded reference: the model class, its cases and benchmarks, its tolerances."""

    name: str
    path: Path
    model: type
    cases: tuple[Case, ...]
    benchmarks: tuple[Case, ...]
    atol: float | None
    rtol: float | None
    count_bytes: Callable[[list[Any], Any], int] | None = None
    count_flops: Callable[[list[Any], Any], int] | None = None
    backward: bool = False  # BACKWARD = True: the gradients are judged too
    dtype: torch.dtype | None = None  # --precision's: both models' floats cast when built


def import_file(path: Path | str, namespace: Mapping[str, object] | None = None) -> ModuleType:
    """Import the Python file at `path` as a fresh module with a unique name; with a
    `namespace`, the module starts with those names (a solution, with its reference's:
    `reference_namespace`), and what the file defines replaces them in its module alone.

    The file's folder leads sys.path while the file is imported, so its imports may name its
    neighbours (a GPUCodeForces solution imports `example_torchcode`, say), and is taken off
    again after: a neighbour named like a package found later (`solutions/lltm/cuda.py`, and
    the `cuda.bindings` that torch looks for when a spawned worker imports it) shadows nothing
    afterwards, here or in the workers this process spawns. Exceptions propagate. Links in
    `path` are kept: a sandboxed job's solution lies under a stable link (harness.run.staging),
    and its `__file__`, which names the sources it builds with torch's `load`, keeps that name.
    """
    path = Path(os.path.abspath(path))
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    module_name = f"harness_loaded_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(namespace or {})
    folder = str(path.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
    return module


def reference_namespace(path: Path | str) -> dict[str, object]:
    """The globals of a fresh import of the reference at `path` (its dunders left out), which a
    solution starts with: KernelBench runs the reference's file and then the solution's in one
    namespace, so LLM-written solutions use the reference's globals (`batch_size`, `Model`,
    `torch`) without defining or importing them. A fresh import of its own, so that nothing the
    solution rebinds or defines reaches the reference the harness runs. {} where the file
    cannot be imported (the problem's own load then says why)."""
    try:
        module = import_file(path)
    except Exception:
        return {}
    names = vars(module)
    return {k: v for k, v in names.items() if not (k.startswith("__") and k.endswith("__"))}


def load_problem(name: str, path: Path, precision: str | None = None) -> Problem:
    """Import a reference file and check its contract; UserError says what is missing. With a
    `precision` (--precision), the problem run at it (`at_precision`)."""
    try:
        module = import_file(path)
    except UserError:
        raise
    except SyntaxError as err:
        raise UserError(f"{path}: syntax error on line {err.lineno}: {err.msg}") from err
    except Exception as err:
        raise UserError(f"{path}: importing it raised {type(err).__name__}: {err}") from err
    return at_precision(problem_from_module(name, path, module), precision)


def problem_from_module(name: str, path: Path, module: ModuleType) -> Problem:
    missing = [n for n in REQUIRED_NAMES if not hasattr(module, n)]
    if missing:
        raise UserError(
            f"{path} is not a KernelBench problem: it lacks {', '.join(missing)} "
            f"(a problem defines {', '.join(REQUIRED_NAMES)})"
        )
    atol = _optional_float(module, "ATOL", path)
    rtol = _optional_float(module, "RTOL", path)
    default = Case("default", module.get_init_inputs, module.get_inputs)
    cases = (default, *_read_cases(module, "CASES", path, default))
    benchmarks = (default, *_read_cases(module, "BENCHMARKS", path, default))
    counters = {key: _optional_callable(module, key, path) for key in COUNTERS}
    backward = getattr(module, "BACKWARD", False)
    if not isinstance(backward, bool):
        raise UserError(f"{path}: BACKWARD must be True or False, not {backward!r}")
    return Problem(
        name, path, module.Model, cases, benchmarks, atol, rtol, **counters, backward=backward
    )


PRECISIONS = dict(zip(PRECISION_NAMES, (torch.float32, torch.float16, torch.bfloat16), strict=True))


def at_precision(problem: Problem, precision: str | None) -> Problem:
    """`problem` run at `precision` (--precision, KernelBench's option of that name): the
    floating-point tensors among every case's and benchmark's inputs and init inputs cast to
    its dtype, a view keeping its strides and offset; integer, bool and complex tensors left
    alone (class labels stay labels: KernelBench issue #151); and `dtype` set, so that both
    models' floating-point parameters and buffers are cast when built
    (harness.measure.checking.build_model). None: the problem as written, its own dtypes."""
    if precision is None:
        return problem
    dtype = PRECISIONS[precision]

    def cast_case(case: Case) -> Case:
        return replace(
            case,
            get_inputs=_casting(case.get_inputs, dtype),
            get_init_inputs=_casting(case.get_init_inputs, dtype),
        )

    return replace(
        problem,
        cases=tuple(map(cast_case, problem.cases)),
        benchmarks=tuple(map(cast_case, problem.benchmarks)),
        dtype=dtype,
    )


def _casting(make: Callable[[], Any], dtype: torch.dtype) -> Callable[[], Any]:
    """`make`, its list's floating-point tensors cast to `dtype` (anything else as it made it)."""

    def made() -> Any:
        values = make()
        if not isinstance(values, (list, tuple)):
            return values  # make_inputs says what is wrong with it
        return [cast(value, dtype) for value in values]

    return made


def cast(value: Any, dtype: torch.dtype) -> Any:
    """A floating-point tensor as `dtype`, with the same strides and storage offset (the whole
    storage is cast, as `replicate` copies it); any other value as it is."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return value
    if value.dtype == dtype or value.layout != torch.strided or value.numel() == 0:
        return value.to(dtype)
    cast_storage = _whole_storage(value).to(dtype)
    return cast_storage.as_strided(value.shape, value.stride(), value.storage_offset())


def _optional_callable(module: ModuleType, attr: str, path: Path) -> Any:
    value = getattr(module, attr, None)
    if value is not None and not callable(value):
        raise UserError(f"{path}: {attr} must be a function (inputs, output) -> int")
    return value


def _optional_float(module: ModuleType, attr: str, path: Path) -> float | None:
    value = getattr(module, attr, None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise UserError(f"{path}: {attr} must be a non-negative number, not {value!r}")
    return float(value)


def _read_cases(module: ModuleType, attr: str, path: Path, default: Case) -> list[Case]:
    entries = getattr(module, attr, None)
    if entries is None:
        return []
    if not isinstance(entries, (list, tuple)):
        raise UserError(f"{path}: {attr} must be a list of dicts, not {type(entries).__name__}")
    names = {default.name}
    cases = []
    for index, entry in enumerate(entries):
        where = f"{path}: {attr}[{index}]"
        case = _read_case(entry, where, default)
        if case.invalid and attr == "BENCHMARKS":
            raise UserError(f"{where}: a benchmark cannot be 'invalid' (only a case can)")
        if case.name in names:
            raise UserError(f"{where}: the name {case.name!r} is used twice")
        names.add(case.name)
        cases.append(case)
    return cases


def _read_case(entry: object, where: str, default: Case) -> Case:
    if not isinstance(entry, dict):
        raise UserError(f"{where} must be a dict, not {type(entry).__name__}")
    unknown = sorted(set(entry) - CASE_KEYS)
    if unknown:
        raise UserError(
            f"{where} has unknown key(s) {', '.join(unknown)} "
            f"(allowed: {', '.join(sorted(CASE_KEYS))})"
        )
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise UserError(f"{where} needs a 'name' string")
    init_inputs = entry.get("init_inputs")
    if init_inputs is not None and not isinstance(init_inputs, (list, tuple)):
        raise UserError(f"{where}: 'init_inputs' must be a list")
    inputs = entry.get("inputs", default.get_inputs)
    if not callable(inputs):
        raise UserError(f"{where}: 'inputs' must be a zero-argument callable returning a list")
    get_init = default.get_init_inputs if init_inputs is None else _constant(list(init_inputs))
    tolerances = {}
    for key in ("atol", "rtol"):
        value = entry.get(key)
        if value is not None and (not isinstance(value, (int, float)) or value < 0):
            raise UserError(f"{where}: {key!r} must be a non-negative number")
        tolerances[key] = None if value is None else float(value)
    invalid = entry.get("invalid", False)
    if not isinstance(invalid, bool):
        raise UserError(f"{where}: 'invalid' must be True or False")
    return Case(name, get_init, inputs, invalid=invalid, **tolerances)


def _constant(values: list[Any]) -> Callable[[], list[Any]]:
    return lambda: list(values)


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
    moved = _whole_storage(value).detach().to(device, copy=True)
    return moved.as_strided(value.shape, value.stride(), value.storage_offset())


def _whole_storage(value: torch.Tensor) -> torch.Tensor:
    """A one-dimensional tensor over all of `value`'s storage, from its first element."""
    storage_elements = value.untyped_storage().nbytes() // value.element_size()
    base = torch.empty(0, dtype=value.dtype, device=value.device)
    return base.set_(value.untyped_storage(), 0, (storage_elements,), (1,))


def replicate_all(values: list[Any], device: torch.device) -> list[Any]:
    return [replicate(v, device) for v in values]
