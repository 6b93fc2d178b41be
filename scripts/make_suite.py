"""Generate a load-test suite for sweeps: N small KernelBench problems, one solution each.

    python scripts/make_suite.py OUT [--count 100] [--seed 0] [--sizes default|level1]
                                     [--samples 1] [--style harness|llm]

writes
  OUT/problems/<name>.py               a KernelBench file (Model, get_inputs, get_init_inputs,
                                       SHAPE, ATOL/RTOL, CASES: odd sizes, and a strided view)
  OUT/solutions/<name>/<kind>.py       one solution of one of the kinds below
                                       (<kind>_sample_<k>.py for each of --samples N > 1)
  OUT/expected.json                    {"problems": N, "seed": S, "solutions": {"<name>/<kind>":
                                       {"kind", "cpu", "cuda"}}}: each solution's status on a
                                       machine without a GPU, and on one with

Kinds, in the shares of KIND_SHARES (for N=100: 60, 15, 15, 10), interleaved so that every
prefix of the suite holds a mix; a problem's kind depends on its index and N only:
  cuda_ok   a CUDA kernel of its own (load_inline), correct: no_gpu without a GPU, ok with one
  cpu_ok    plain PyTorch with other operators than the reference's: ok on the CPU (with a
            warning); rejected on a GPU (no_own_kernel: it launches no kernel of its own)
  wrong     plain PyTorch, off by a quarter and more everywhere: incorrect
  crash     raises in forward (runtime_error), or ends its process with os._exit or os.abort
            (crashed), in turns
Each kind's solutions take the five families (elementwise, reduction, norm, matmul, softmax) in
turns, so every family gets its share of each kind (for N=100: 12, 3, 3 and 2 of 20); ops take
turns within a family; shapes, dtypes and dimensions are drawn from the seed. The same count,
seed and sizes give the same files. `--sizes level1` draws KernelBench level-1 sizes instead
(LEVEL1_SHAPES: every input 16-270 MB, where the default's are kilobytes to a few MB), for
measuring checking and timing on work like the real one; its extra cases are a quarter size.
`--style llm` writes each cuda_ok solution as LLMs write KernelBench solutions: all its C++ and
CUDA in cuda_sources under `<torch/extension.h>` and `<cuda_runtime.h>`, a declaration-only
cpp_sources, `verbose=True`, `extra_cflags=[""]`; `--samples N` writes N solutions a problem,
whose kernels are the same text in the even samples (a cache of compiled units can reuse them).

A sweep runs the whole suite (scripts/load_test.py does this, checks and times it):

    python run.py --problems OUT/problems --solutions OUT/solutions --results-dir OUT/results
    python scripts/check_sweep.py OUT/results/cpu OUT/expected.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import suite_kernels
import suite_sources

from harness import verdicts
from harness.tolerance import BY_DTYPE

KIND_SHARES = {"cuda_ok": 12, "cpu_ok": 3, "wrong": 3, "crash": 2}  # out of their sum
KIND_STATUS = {  # kind: (status on a machine without a GPU, status on one with a GPU)
    "cuda_ok": (verdicts.NO_GPU, verdicts.OK),
    "cpu_ok": (verdicts.OK, verdicts.REJECTED),
    "wrong": (verdicts.INCORRECT, verdicts.INCORRECT),
}  # a crash's status depends on its way (CRASH_STATUS), and is the same on either
CRASH_STATUS = {
    "raise": verdicts.RUNTIME_ERROR,
    "exit": verdicts.CRASHED,
    "abort": verdicts.CRASHED,
}
CRASH_CODE = {
    "raise": 'raise RuntimeError("suite: this solution fails on purpose")',
    "exit": "os._exit(3)",
    "abort": "os.abort()",
}
WRONG_SCALE, WRONG_SHIFT = 1.25, 0.25  # a wrong solution returns out * 1.25 + 0.25
DTYPES = {  # short name: (torch name, CUDA type, ATen scalar type)
    "f32": ("float32", "float", "at::kFloat"),
    "f16": ("float16", "__half", "at::kHalf"),
    "bf16": ("bfloat16", "__nv_bfloat16", "at::kBFloat16"),
}
DTYPE_DRAW = ("f32", "f32", "f32", "f16", "bf16")  # drawn from with equal odds
SOFTMAX_ATOL = {"f32": 1e-6, "f16": 1e-5, "bf16": 1e-5}  # probabilities are about 1e-3
SHAPES: dict[str, list[tuple[int, ...]]] = {  # default sizes; a matmul's are (M, K, N)
    "elementwise": [(4096, 256), (1000, 333), (128, 1023), (64, 64, 65), (8191,), (3, 999, 77)],
    "reduction": [(256, 4096), (4096, 256), (16, 256, 255), (1023, 129), (32, 33, 65)],
    "norm": [(4096, 256), (1000, 777), (64, 2048), (8, 128, 1024), (256, 4096), (333, 1000)],
    "matmul": [(256, 256, 256), (255, 129, 97), (128, 64, 200), (33, 250, 65), (64, 256, 31)],
    "softmax": [(256, 1024), (128, 4096), (1000, 333), (64, 129, 17), (4096, 100)],
}
# KernelBench level-1 sizes (--sizes level1): every input 16-270 MB, so checking and timing
# meet the memory traffic of real problems; odd sizes among them.
LEVEL1_SHAPES: dict[str, list[tuple[int, ...]]] = {
    "elementwise": [(16384, 4096), (8191, 8192), (64, 1024, 1023), (33554431,), (3, 4095, 4097)],
    "reduction": [(4096, 8192), (8192, 4096), (16, 2048, 1023), (16383, 2049), (64, 1025, 513)],
    "norm": [(16384, 4096), (4095, 8191), (32, 1024, 2048), (8192, 1023)],
    "matmul": [(4096, 4096, 4096), (8192, 2048, 4096), (4095, 4097, 2049), (2048, 8192, 2048)],
    "softmax": [(8192, 8192), (4096, 16384), (65536, 1000), (64, 1024, 1025)],
}
SIZES = {"default": SHAPES, "level1": LEVEL1_SHAPES}
STYLES = ("harness", "llm")  # how a cuda_ok solution is written (suite_sources)
FAMILIES = tuple(SHAPES)


@dataclass(frozen=True)
class Op:
    """One operator: how the reference writes it (`reference`, over x, y and self), how a plain
    PyTorch solution writes it with other operators (`steps`, then `result`), and what the
    family's CUDA template needs (`cuda`: its slots in order, suite_kernels.FAMILY_PARTS)."""

    name: str
    family: str
    reference: str
    result: str
    steps: tuple[str, ...] = ()
    cuda: tuple[str, ...] = ()
    inputs: int = 1
    params: tuple[str, ...] = ()  # a norm's learnable parameters, in order


_D = ("d = x.double()",)
_LAYER = (*_D, "c = d - d.sum(-1, keepdim=True) / self.size",
          "v = (c * c).sum(-1, keepdim=True) / self.size")  # fmt: skip
_SUM, _MAX = ("0.0", "acc + v", "acc"), ("-INFINITY", "(v > acc || v != v) ? v : acc", "acc")
OPS = (
    Op("relu", "elementwise", "torch.relu(x)", "x.clamp_min(0)",
       cuda=("x > 0.0f || x != x ? x : 0.0f",)),
    Op("gelu", "elementwise", "F.gelu(x)",
       "(0.5 * d * (1 + torch.erf(d * 0.7071067811865476))).to(x.dtype)", _D,
       ("0.5f * x * (1.0f + erff(x * 0.70710678f))",)),
    Op("sigmoid", "elementwise", "torch.sigmoid(x)",
       "(1 / (1 + torch.exp(-x.double()))).to(x.dtype)", cuda=("1.0f / (1.0f + expf(-x))",)),
    Op("tanh", "elementwise", "torch.tanh(x)",
       "(1 - 2 / (torch.exp(2 * x.double()) + 1)).to(x.dtype)", cuda=("tanhf(x)",)),
    Op("silu", "elementwise", "F.silu(x)", "(d / (1 + torch.exp(-d))).to(x.dtype)", _D,
       ("x / (1.0f + expf(-x))",)),
    Op("abs", "elementwise", "torch.abs(x)", "torch.where(x < 0, -x, x)", cuda=("fabsf(x)",)),
    Op("add", "elementwise", "x + y", "x - (-y)", cuda=("x + y",), inputs=2),
    Op("mul", "elementwise", "x * y", "torch.addcmul(torch.zeros_like(x), x, y)",
       cuda=("x * y",), inputs=2),
    Op("sum", "reduction", "torch.sum(x, dim=self.dim)",
       "x.double().nansum(dim=self.dim).to(x.dtype)", cuda=_SUM),
    Op("mean", "reduction", "torch.mean(x, dim=self.dim)",
       "(x.double().nansum(dim=self.dim) / x.shape[self.dim]).to(x.dtype)",
       cuda=("0.0", "acc + v", "acc / static_cast<double>(size)")),
    Op("max", "reduction", "torch.max(x, dim=self.dim)[0]", "x.amax(dim=self.dim)", cuda=_MAX),
    Op("amax", "reduction", "torch.amax(x, dim=self.dim)", "-(-x).amin(dim=self.dim)", cuda=_MAX),
    Op("layernorm", "norm", "F.layer_norm(x, (self.size,), eps=1e-5)",
       "(c / torch.sqrt(v + 1e-5)).to(x.dtype)", _LAYER, ("true", "1e-5f")),
    Op("layernorm_affine", "norm", "F.layer_norm(x, (self.size,), self.weight, self.bias, 1e-5)",
       "(c / torch.sqrt(v + 1e-5) * self.weight.double() + self.bias.double()).to(x.dtype)",
       _LAYER, ("true", "1e-5f"), params=("weight", "bias")),
    Op("rmsnorm", "norm",
       "(x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)"
       " * self.weight.float()).to(x.dtype)",
       "(d / torch.sqrt((d * d).sum(-1, keepdim=True) / self.size + 1e-6)"
       " * self.weight.double()).to(x.dtype)",
       _D, ("false", "1e-6f"), params=("weight",)),
    Op("matmul", "matmul", "torch.matmul(x, y)",
       "torch.einsum('mk,kn->mn', x.double(), y.double()).to(x.dtype)", inputs=2),
    Op("softmax", "softmax", "torch.softmax(x, dim=self.dim)",
       "(e / e.sum(dim=self.dim, keepdim=True)).to(x.dtype)",
       (*_D, "e = torch.exp(d - d.amax(dim=self.dim, keepdim=True))"), ("false",)),
    Op("logsoftmax", "softmax", "torch.log_softmax(x, dim=self.dim)",
       "(s - torch.exp(s).sum(dim=self.dim, keepdim=True).log()).to(x.dtype)",
       (*_D, "s = d - d.amax(dim=self.dim, keepdim=True)"), ("true",)),
)  # fmt: skip


@dataclass(frozen=True)
class Spec:
    """One problem of the suite and its one solution."""

    index: int  # from 0
    name: str
    op: Op
    dtype: str  # a key of DTYPES
    shape: tuple[int, ...]
    dim: int | None  # the init input of a reduction or softmax (may be negative)
    kind: str  # a key of KIND_SHARES
    crash: str | None = None  # a crash's way: a key of CRASH_CODE

    @property
    def expected(self) -> dict[str, str]:
        """The kind and the statuses the harness must give it, on the CPU and on a GPU."""
        if self.kind == "crash":
            cpu = cuda = CRASH_STATUS[self.crash or ""]
        else:
            cpu, cuda = KIND_STATUS[self.kind]
        return {"kind": self.kind, "cpu": cpu, "cuda": cuda}


def kind_quotas(count: int) -> dict[str, int]:
    """How many solutions of each kind a suite of `count` holds: KIND_SHARES scaled, rounded by
    largest remainder (ties to the kind listed first)."""
    total = sum(KIND_SHARES.values())
    quotas = {kind: count * share // total for kind, share in KIND_SHARES.items()}
    by_remainder = sorted(KIND_SHARES, key=lambda k: -(count * KIND_SHARES[k] % total))
    for kind in by_remainder[: count - sum(quotas.values())]:
        quotas[kind] += 1
    return quotas


def kind_sequence(count: int) -> list[str]:
    """The kind of each problem in order: each next one is the kind furthest behind its share
    of the suite so far, so any prefix holds the kinds in about their final proportions."""
    quotas, given = kind_quotas(count), dict.fromkeys(KIND_SHARES, 0)
    kinds = []
    for position in range(1, count + 1):
        kind = max(KIND_SHARES, key=lambda k: quotas[k] * position - given[k] * count)
        given[kind] += 1
        kinds.append(kind)
    return kinds


def crash_ways(kinds: list[str]) -> list[str | None]:
    """Each crash's way, in turns raise, exit, raise, abort; None for the other kinds."""
    turns = ("raise", "exit", "raise", "abort")
    ways: list[str | None] = []
    for kind in kinds:
        crashes = sum(way is not None for way in ways)
        ways.append(turns[crashes % len(turns)] if kind == "crash" else None)
    return ways


def family_sequence(kinds: list[str], rng: random.Random) -> list[str]:
    """The family of each problem: each kind's solutions take the families in turn (in an order
    drawn from `rng`), so every family gets its share of every kind and of the suite."""
    order = rng.sample(FAMILIES, len(FAMILIES))
    seen = {kind: start for start, kind in enumerate(KIND_SHARES)}  # kinds start apart
    families = []
    for kind in kinds:
        families.append(order[seen[kind] % len(order)])
        seen[kind] += 1
    return families


def plan(count: int, seed: int, sizes: str = "default") -> list[Spec]:
    """The suite's problems, in order: the same for the same count, seed and sizes. Each
    family's ops take turns; shapes (from SIZES[sizes]), dtypes and dimensions are drawn."""
    rng = random.Random(seed)
    kinds = kind_sequence(count)
    families = family_sequence(kinds, rng)
    turns = dict.fromkeys(FAMILIES, seed)
    width = max(3, len(str(count)))
    specs = []
    for index, (kind, crash) in enumerate(zip(kinds, crash_ways(kinds), strict=True)):
        family = families[index]
        ops = [op for op in OPS if op.family == family]
        op = ops[turns[family] % len(ops)]
        turns[family] += 1
        shape, dtype = rng.choice(SIZES[sizes][family]), rng.choice(DTYPE_DRAW)
        dim = None
        if family in ("reduction", "softmax"):  # any dimension, as counted from either end
            dim = rng.randrange(len(shape)) - rng.choice((0, len(shape)))
        label = "x".join(map(str, shape)) + ("" if dim is None else f"_dim{dim % len(shape)}")
        name = f"{index + 1:0{width}d}_{op.name}_{dtype}_{label}"
        specs.append(Spec(index, name, op, dtype, shape, dim, kind, crash))
    return specs


def odd_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The extra cases' sizes: about a quarter of each, and odd (a tail for every tile)."""
    return tuple((size // 4) | 1 for size in shape)


def tolerance(spec: Spec) -> tuple[float, float]:
    """(ATOL, RTOL): the output dtype's default (harness.matching), a tighter ATOL for softmax."""
    atol, rtol = BY_DTYPE[DTYPES[spec.dtype][0]]
    return (SOFTMAX_ATOL[spec.dtype] if spec.op.family == "softmax" else atol), rtol


def init_code(spec: Spec, random_params: bool) -> str:
    """The class's __init__: Model's and every ModelNew's take the same arguments; a problem's
    parameters are drawn at random (so a solution must use them), a solution's are filled."""
    family = spec.op.family
    argument = {"reduction": "dim", "softmax": "dim", "norm": "size"}.get(family)
    lines = [f"    def __init__(self{f', {argument}: int' if argument else ''}) -> None:"]
    lines.append("        super().__init__()")
    if argument:
        lines.append(f"        self.{argument} = {argument}")
    values = {
        "weight": "(torch.randn(size) * 0.5 + 1).to(DTYPE)" if random_params else "torch.ones",
        "bias": "(torch.randn(size) * 0.5).to(DTYPE)" if random_params else "torch.zeros",
    }
    for param in spec.op.params:
        value = values[param] if random_params else f"{values[param]}(size, dtype=DTYPE)"
        lines.append(f"        self.{param} = nn.Parameter({value})")
    return "\n".join(lines)


def forward_args(spec: Spec) -> str:
    return "x: torch.Tensor, y: torch.Tensor" if spec.op.inputs == 2 else "x: torch.Tensor"


def make_expression(spec: Spec) -> str:
    """The body of the problem's make_inputs(shape, strided)."""
    if spec.op.family == "matmul":
        return "[make_tensor(shape[:2], strided), make_tensor(shape[1:], strided)]"
    return "[" + ", ".join(["make_tensor(shape, strided)"] * spec.op.inputs) + "]"


def init_inputs(spec: Spec, shape: tuple[int, ...]) -> list[int]:
    if spec.dim is not None:
        return [spec.dim]
    return [shape[-1]] if spec.op.family == "norm" else []


def problem_source(spec: Spec, seed: int) -> str:
    """The text of the problem's KernelBench file."""
    atol, rtol = tolerance(spec)
    odd = odd_shape(spec.shape)
    return suite_sources.PROBLEM.substitute(
        name=spec.name,
        op=spec.op.name,
        dtype=DTYPES[spec.dtype][0],
        shape="x".join(map(str, spec.shape)),
        over="" if spec.dim is None else f" over dim {spec.dim}",
        seed=seed,
        shape_tuple=repr(spec.shape),
        shape_note="  # (M, K, N): x is M x K, y is K x N" if spec.op.family == "matmul" else "",
        odd_tuple=repr(odd),
        init=init_code(spec, random_params=True),
        args=forward_args(spec),
        reference=spec.op.reference,
        make=make_expression(spec),
        init_inputs=init_inputs(spec, spec.shape),
        odd_init=init_inputs(spec, odd),
        atol=atol,
        rtol=rtol,
    )


WHAT = {
    "cuda_ok": "a CUDA kernel of its own, computed in float (sums in double), rounded once",
    "cpu_ok": "plain PyTorch with other operators than the reference's, no extension",
    "wrong": "plain PyTorch, off by a quarter and more",
    "crash": "fails in forward on purpose",
}


def plain_body(spec: Spec) -> list[str]:
    """forward's statements for the kinds without an extension."""
    if spec.kind == "crash":
        return [CRASH_CODE[spec.crash or ""]]
    lines = list(spec.op.steps)
    if spec.kind == "cpu_ok":
        return [*lines, f"return {spec.op.result}"]
    return [
        *lines,
        f"out = {spec.op.result}",
        f"return (out * {WRONG_SCALE} + {WRONG_SHIFT}).to(out.dtype)",
    ]


def solution_source(spec: Spec, sample: int = 0, style: str = "harness") -> str:
    """The text of the problem's solution number `sample`, written in `style` (STYLES). The
    samples of a problem compute alike; a cuda_ok one's kernels are the same text as sample 0's
    in the even samples, and launch blocks of 128 threads rather than 256 in the odd ones."""
    if spec.kind == "cuda_ok":
        items = ["x", "y"][: spec.op.inputs] + (["*self.parameters()"] if spec.op.params else [])
        dim = "self.dim" if spec.dim is not None else "0"
        body = [f"return _ext.run([{', '.join(items)}], {dim})"]
        torch_name, ctype, aten = DTYPES[spec.dtype]
        cpp, cuda = suite_kernels.sources(spec.op.family, torch_name, ctype, aten, spec.op.cuda)
        if sample % 2:
            cuda = cuda.replace("kThreads = 256;", "kThreads = 128;")
        name = spec.name if sample == 0 else f"{spec.name}_s{sample}"
        extension = "from torch.utils.cpp_extension import load_inline\n"
        extension += suite_sources.extension_module(name, cpp, cuda, style)
    else:
        body, extension = plain_body(spec), ""
    imports = "\nimport os\n" if spec.crash in ("exit", "abort") else ""
    return suite_sources.SOLUTION.substitute(
        name=spec.name,
        kind=spec.kind,
        what=WHAT[spec.kind] if spec.kind != "crash" else f"{WHAT['crash']} ({spec.crash})",
        imports=imports,
        extension=extension,
        dtype=DTYPES[spec.dtype][0],
        init=init_code(spec, random_params=False),
        args=forward_args(spec),
        body="\n".join(f"        {line}" for line in body),
    )


def solution_name(spec: Spec, sample: int, samples: int) -> str:
    """The solution's file stem: its kind, and its sample's number where there are several."""
    return spec.kind if samples == 1 else f"{spec.kind}_sample_{sample}"


def write_suite(
    out: Path, specs: list[Spec], seed: int, samples: int = 1, style: str = "harness"
) -> None:
    """Write the problems, `samples` solutions of each and expected.json under `out`."""
    solutions = {}
    for spec in specs:
        problem = out / "problems" / f"{spec.name}.py"
        problem.parent.mkdir(parents=True, exist_ok=True)
        problem.write_text(problem_source(spec, seed), encoding="utf-8")
        for sample in range(samples):
            stem = solution_name(spec, sample, samples)
            solution = out / "solutions" / spec.name / f"{stem}.py"
            solution.parent.mkdir(parents=True, exist_ok=True)
            solution.write_text(solution_source(spec, sample, style), encoding="utf-8")
            solutions[f"{spec.name}/{stem}"] = spec.expected
    expected = {"problems": len(specs), "seed": seed, "solutions": solutions}
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path, help="the folder to write the suite into")
    parser.add_argument("--count", type=int, default=100, help="problems (default: 100)")
    parser.add_argument("--seed", type=int, default=0, help="draws ops, shapes and dtypes")
    parser.add_argument(
        "--sizes",
        choices=tuple(SIZES),
        default="default",
        help="default: small inputs (kilobytes to a few MB); level1: KernelBench level-1 "
        "sizes, 16-270 MB an input",
    )
    parser.add_argument(
        "--samples", type=int, default=1, help="solutions of each problem (default: 1)"
    )
    parser.add_argument(
        "--style",
        choices=STYLES,
        default="harness",
        help="harness: CUDA solutions written as the shipped ones are (no torch header in "
        "cuda_sources); llm: as LLMs write them for KernelBench (default: harness)",
    )
    args = parser.parse_args(argv)
    if args.count < 1 or args.samples < 1:
        parser.error("--count and --samples must be at least 1")
    taken = [args.out / name for name in ("problems", "solutions") if (args.out / name).exists()]
    if taken:
        parser.error(f"{taken[0]} exists: write the suite into a new folder")
    specs = plan(args.count, args.seed, args.sizes)
    write_suite(args.out, specs, args.seed, args.samples, args.style)
    quotas = ", ".join(f"{n} {kind}" for kind, n in kind_quotas(args.count).items())
    each = "one solution" if args.samples == 1 else f"{args.samples} solutions"
    print(f"{args.out}: {args.count} problems, {each} each, {args.style} style ({quotas})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
