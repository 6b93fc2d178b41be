"""The load-test suite (scripts/make_suite.py) and its checker (scripts/check_sweep.py), judged
in process on the CPU: no worker is spawned and nothing is compiled (the cuda_ok solutions are
only read)."""

from __future__ import annotations

import ast
import json
import math
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from harness import accuracy, verdicts
from harness.loading import Case, Problem, import_file, load_problem, make_inputs
from harness.matching import mismatch
from harness.measure import builds
from harness.measure.audit import WARN, audit_problem
from harness.measure.checking import build_models, check_once
from harness.run.discovery import missing_model_new
from harness.tolerance import DTYPE_DEFAULT, allowed
from harness.verdicts import Verdict

REPO = Path(__file__).resolve().parent.parent
make_suite = import_file(REPO / "scripts" / "make_suite.py")
check_sweep = import_file(REPO / "scripts" / "check_sweep.py")
SIZE, SEED = 20, 3
CPU = torch.device("cpu")
CASE_SEED, INPUT_SEED = 11, 12  # the weights' and the inputs' seeds of the in-process checks
STATUSES = {  # kind -> (on the CPU, on a GPU)
    "cuda_ok": (verdicts.NO_GPU, verdicts.OK),
    "cpu_ok": (verdicts.OK, verdicts.REJECTED),
    "wrong": (verdicts.INCORRECT, verdicts.INCORRECT),
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("suite")
    assert make_suite.main([str(out), "--count", str(SIZE), "--seed", str(SEED)]) == 0
    return out


def expected_of(suite: Path) -> dict[str, dict[str, str]]:
    return json.loads((suite / "expected.json").read_text())["solutions"]


def solutions_of(suite: Path, *kinds: str) -> list[tuple[str, Path]]:
    """(problem name, solution file) of each solution of the given kinds."""
    return [
        (key.split("/")[0], suite / "solutions" / f"{key}.py")
        for key, entry in expected_of(suite).items()
        if entry["kind"] in kinds
    ]


def problem_of(suite: Path, name: str) -> Problem:
    return load_problem(name, suite / "problems" / f"{name}.py")


def run_case(problem: Problem, solution: Path, case: Case) -> tuple[Any, Any, Any]:
    """The reference's output, the solution's, and the two models, on the case's inputs."""
    models = build_models(problem, import_file(solution).ModelNew, case, CASE_SEED, CPU)
    inputs = make_inputs(case, INPUT_SEED, CPU)
    with torch.no_grad():
        return models[0](*inputs), models[1](*inputs), (models, inputs)


# The generator ----------------------------------------------------------------------------


def test_level1_sizes_give_every_input_tens_to_hundreds_of_megabytes() -> None:
    specs = make_suite.plan(100, SEED, "level1")
    for spec in specs:
        matmul = spec.op.family == "matmul"
        shapes = [spec.shape[:2], spec.shape[1:]] if matmul else [spec.shape]
        itemsize = getattr(torch, make_suite.DTYPES[spec.dtype][0]).itemsize
        for shape in shapes:
            assert 16e6 <= math.prod(shape) * itemsize <= 270e6, (spec.name, shape)
    assert {spec.op.family for spec in specs} == set(make_suite.FAMILIES)
    small = make_suite.plan(100, SEED)
    assert [(s.kind, s.op) for s in specs] == [
        (s.kind, s.op) for s in small
    ]  # the same kinds and ops


def test_a_suite_of_100_holds_60_cuda_ok_15_cpu_ok_15_wrong_and_10_crashes() -> None:
    kinds = make_suite.kind_sequence(100)
    assert Counter(kinds) == {"cuda_ok": 60, "cpu_ok": 15, "wrong": 15, "crash": 10}
    crashes = Counter(way for way in make_suite.crash_ways(kinds) if way)
    assert crashes == {"raise": 5, "exit": 3, "abort": 2}


@pytest.mark.parametrize("count", [1, 7, 20, 33, 100, 257])
def test_every_prefix_of_a_suite_holds_each_kind_within_one_of_its_share(count: int) -> None:
    quotas = make_suite.kind_quotas(count)
    assert sum(quotas.values()) == count
    given: Counter[str] = Counter()
    for position, kind in enumerate(make_suite.kind_sequence(count), start=1):
        given[kind] += 1
        for name, quota in quotas.items():
            assert abs(given[name] - quota * position / count) < 1, (position, name)
    assert given == Counter({k: n for k, n in quotas.items() if n})


def test_the_files_are_the_ones_expected_json_lists(suite: Path) -> None:
    data = json.loads((suite / "expected.json").read_text())
    assert data["problems"] == SIZE
    problems = sorted(p.stem for p in (suite / "problems").glob("*.py"))
    assert len(problems) == SIZE and problems[0].startswith("001_")
    found = sorted(f"{p.parent.name}/{p.stem}" for p in (suite / "solutions").glob("*/*.py"))
    assert found == sorted(data["solutions"])  # one solution per problem, named by its kind
    assert sorted(key.split("/")[0] for key in found) == problems
    kinds = Counter(entry["kind"] for entry in data["solutions"].values())
    assert (
        kinds
        == make_suite.kind_quotas(SIZE)
        == {"cuda_ok": 12, "cpu_ok": 3, "wrong": 3, "crash": 2}
    )
    for key, entry in data["solutions"].items():
        assert key.endswith("/" + entry["kind"])
        crash = {(verdicts.RUNTIME_ERROR,) * 2, (verdicts.CRASHED,) * 2}
        wanted = {STATUSES[entry["kind"]]} if entry["kind"] in STATUSES else crash
        assert (entry["cpu"], entry["cuda"]) in wanted


def test_the_same_count_and_seed_give_the_same_files(suite: Path, tmp_path: Path) -> None:
    assert (
        make_suite.main([str(tmp_path / "again"), "--count", str(SIZE), "--seed", str(SEED)]) == 0
    )
    assert make_suite.main([str(tmp_path / "other"), "--count", str(SIZE), "--seed", "4"]) == 0

    def contents(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    assert contents(tmp_path / "again") == contents(suite)
    assert contents(tmp_path / "other") != contents(suite)


def test_every_problem_loads_with_its_cases_and_passes_the_audit(suite: Path) -> None:
    ops: Counter[str] = Counter()
    for path in sorted((suite / "problems").glob("*.py")):
        problem = load_problem(path.stem, path)
        assert [case.name for case in problem.cases] == ["default", "odd", "strided"]
        assert problem.atol is not None and problem.rtol is not None
        findings = audit_problem(problem, CPU)
        assert all(f.level == WARN for f in findings), [f.message for f in findings]
        ops[path.stem.split("_")[1]] += 1
    assert len(ops) >= 8  # ops of every family


# The solutions, in process -----------------------------------------------------------------


def test_cpu_ok_solutions_match_the_reference_on_every_case(suite: Path) -> None:
    for name, solution in solutions_of(suite, "cpu_ok"):
        problem = problem_of(suite, name)
        for case in problem.cases:
            expected, got, (models, inputs) = run_case(problem, solution, case)
            bounds = allowed(problem, case, DTYPE_DEFAULT)
            assert mismatch(expected, got, bounds) is None, (name, case.name)
            assert check_once(problem, case, models, inputs, CPU) is None  # the harness's check


def test_wrong_solutions_differ_from_the_reference_even_by_the_accuracy_rule(suite: Path) -> None:
    for name, solution in solutions_of(suite, "wrong"):
        problem = problem_of(suite, name)
        for case in problem.cases:
            expected, got, (models, inputs) = run_case(problem, solution, case)
            bounds = allowed(problem, case, DTYPE_DEFAULT)
            exact = accuracy.Exact(models[0], inputs, CPU)
            assert mismatch(expected, got, bounds, exact) is not None, (name, case.name)
            assert check_once(problem, case, models, inputs, CPU) is not None


def test_crashing_solutions_raise_or_end_their_process(suite: Path) -> None:
    calls = {"raise": "raise RuntimeError(", "exit": "os._exit(3)", "abort": "os.abort()"}
    for name, solution in solutions_of(suite, "crash"):
        text = solution.read_text()
        ways = [way for way, call in calls.items() if call in text]
        assert len(ways) == 1, name
        expected = expected_of(suite)[f"{name}/crash"]
        assert expected["cpu"] == make_suite.CRASH_STATUS[ways[0]]
        if ways[0] != "raise":
            assert "\nimport os\n" in text
            continue  # calling it would end this process
        problem = problem_of(suite, name)
        case = problem.cases[0]
        models = build_models(problem, import_file(solution).ModelNew, case, CASE_SEED, CPU)
        with pytest.raises(Verdict) as raised:  # what the worker reports
            check_once(problem, case, models, make_inputs(case, INPUT_SEED, CPU), CPU)
        assert raised.value.status == verdicts.RUNTIME_ERROR


def test_cuda_solutions_define_model_new_and_build_a_kernel_of_their_own(suite: Path) -> None:
    names = []
    for name, solution in solutions_of(suite, "cuda_ok"):
        text = solution.read_text()
        assert missing_model_new(solution) is None
        tree = ast.parse(text)
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        builds = [c for c in calls if getattr(c.func, "id", None) == "load_inline"]
        assert len(builds) == 1, name
        extension = {k.arg: k.value for k in builds[0].keywords}["name"]
        assert isinstance(extension, ast.Constant) and extension.value == f"suite_{name}"
        assert extension.value.isidentifier()  # it names the extension's Python module
        assert "__global__ void suite_" in text and ".contiguous()" in text
        names.append(extension.value)
    assert len(set(names)) == len(names) == 12


def test_cuda_sources_include_no_torch_header_and_share_the_launcher(suite: Path) -> None:
    """nvcc spent most of a build parsing torch's headers: cuda.cu includes only CUDA and
    standard headers (and load_inline is told to add none, else it puts torch/types.h atop it),
    main.cpp the torch ones, and both declare the same launcher, which cuda.cu defines."""
    for name, solution in solutions_of(suite, "cuda_ok"):
        flags, texts = _load_inline_of(solution)
        cpp, cuda = texts["CPP_SOURCE"], texts["CUDA_SOURCE"]
        headers = re.findall(r"#include <([^>]+)>", cuda)
        assert headers and not [h for h in headers if h.startswith(("torch", "ATen", "c10"))]
        assert "#include <torch/extension.h>" in cpp and "__global__" not in cpp, name
        assert flags["no_implicit_headers"] is True, name
        declared = re.findall(r"^(cudaError_t launch_\w+\([^)]*\));$", cpp, re.MULTILINE)
        assert len(declared) == 1 and f"{declared[0]};" in cuda and f"{declared[0]} {{" in cuda


def test_plain_solutions_name_no_kernel(suite: Path) -> None:
    """The profiler counts a kernel as a solution's own when its name appears in the solution's
    source (harness.measure.profiling): a library kernel named `kernel` would make a cpu_ok
    solution look as if it launched one of its own on a GPU."""
    for _, solution in solutions_of(suite, "cpu_ok", "wrong", "crash"):
        text = solution.read_text()
        assert "kernel" not in text.lower() and "load_inline" not in text


# The checker -------------------------------------------------------------------------------


def records(suite: Path, device: str = "cpu", run_id: str = "run-1") -> list[dict[str, Any]]:
    """One hand-written record per expected solution, each with its expected status."""
    return [
        {
            "problem": key.split("/")[0],
            "solution": key.split("/")[1],
            "solution_path": f"/suite/solutions/{key}.py",
            "status": entry[device],
            "run_id": run_id,
            "time": "2026-12-01T00:00:00+00:00",
            "solution_hash": "0" * 12,
            "machine": {"device": "cuda:0" if device == "cuda" else "cpu"},
        }
        for key, entry in expected_of(suite).items()
    ]


def check(suite: Path, folder: Path, lines: list[dict[str, Any]], *flags: str) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(line) + "\n" for line in lines)
    (folder / "runs.jsonl").write_text(text + "not json, a torn line\n")
    return check_sweep.main([str(folder), str(suite / "expected.json"), *flags])


def test_check_sweep_passes_a_sweep_that_went_as_expected(suite: Path, tmp_path: Path) -> None:
    assert check(suite, tmp_path / "cpu", records(suite)) == 0
    assert check(suite, tmp_path / "gpu", records(suite, "cuda")) == 0


def _duplicate(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [*lines, {**lines[3], "run_id": "run-2"}]


def _wrong_status(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**lines[0], "status": verdicts.TIMEOUT}, *lines[1:]]


def _unexpected(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [*lines, {**lines[0], "solution": "extra"}]


@pytest.mark.parametrize(
    ("change", "shown"),
    [
        (lambda lines: lines[1:], "missing (no record): 1"),
        (_duplicate, "recorded more than once: 1"),
        (_wrong_status, "wrong status: 1"),
        (_unexpected, "not in the suite: 1"),
    ],
    ids=["missing", "duplicate", "wrong status", "unexpected"],
)
def test_check_sweep_fails_a_sweep_that_did_not(
    suite: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    shown: str,
) -> None:
    assert check(suite, tmp_path, change(records(suite))) == 1
    assert shown in capsys.readouterr().out


def test_check_sweep_reads_removal_lines_and_picks_runs(suite: Path, tmp_path: Path) -> None:
    lines = records(suite)
    twice = [*lines, {**lines[0], "run_id": "run-2"}]
    assert check(suite, tmp_path / "a", twice) == 1
    assert check(suite, tmp_path / "b", twice, "--run-id", "run-1") == 0
    forget = {"kind": "forget", "problem": lines[0]["problem"], "time": "2026-12-01T01:00:00"}
    forget["solution_path"] = lines[0]["solution_path"]
    assert check(suite, tmp_path / "c", [*twice[:-1], forget, twice[-1]]) == 0


def test_check_sweep_judges_by_the_records_device_unless_told(suite: Path, tmp_path: Path) -> None:
    on_gpu = records(suite, "cuda")
    assert check(suite, tmp_path / "a", on_gpu, "--device", "cpu") == 1
    mixed = [*on_gpu[1:], records(suite)[0]]
    assert check(suite, tmp_path / "b", mixed) == 2  # both devices: --device must say which
    assert check_sweep.main([str(tmp_path / "none"), str(suite / "expected.json")]) == 2


def test_check_sweep_expects_cpu_ok_to_pass_a_check_only_gpu_sweep(
    suite: Path, tmp_path: Path
) -> None:
    """--check-only never profiles, so a plain PyTorch solution is `ok` on a GPU there."""
    expected = expected_of(suite)
    checked = [
        {**line, "settings": {"checking": {"check_only": True}}} for line in records(suite, "cuda")
    ]
    plain = {key for key, entry in expected.items() if entry["kind"] == "cpu_ok"}
    assert plain and check(suite, tmp_path / "a", checked) == 1  # 'rejected' is not what it gives
    passed = [
        {**line, "status": verdicts.OK}
        if f"{line['problem']}/{line['solution']}" in plain
        else line
        for line in checked
    ]
    assert check(suite, tmp_path / "b", passed) == 0


def _llm_suite(out: Path, samples: int) -> Path:
    arguments = [str(out), "--count", "10", "--seed", str(SEED), "--samples", str(samples)]
    assert make_suite.main([*arguments, "--style", "llm"]) == 0
    return out


def _load_inline_of(solution: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The load_inline call's keyword arguments (their values where constant) and the file's
    string constants by name."""
    tree = ast.parse(solution.read_text())
    build = next(
        c
        for c in ast.walk(tree)
        if isinstance(c, ast.Call) and getattr(c.func, "id", None) == "load_inline"
    )
    texts = {
        target.id: str(node.value.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    arguments = {k.arg or "": getattr(k.value, "value", k.value) for k in build.keywords}
    return arguments, texts


def test_the_llm_style_writes_cuda_solutions_as_llms_write_them(tmp_path: Path) -> None:
    suite = _llm_suite(tmp_path / "llm", samples=3)
    expected = json.loads((suite / "expected.json").read_text())["solutions"]
    cuda_ok = {key: value for key, value in expected.items() if value["kind"] == "cuda_ok"}
    assert len(expected) == 30 and len(cuda_ok) == 18
    kernels: dict[str, list[str]] = {}
    for key in cuda_ok:
        problem, stem = key.split("/")
        arguments, texts = _load_inline_of(suite / "solutions" / problem / f"{stem}.py")
        cuda = texts["cuda_source"]
        assert cuda.lstrip().startswith("#include <torch/extension.h>\n#include <cuda_runtime.h>")
        assert "__global__" in cuda and "torch::Tensor run(" in cuda
        assert texts["cpp_source"] == (
            "torch::Tensor run(std::vector<torch::Tensor> inputs, int64_t dim);"
        )
        assert arguments["verbose"] is True and "no_implicit_headers" not in arguments
        assert [e.value for e in arguments["extra_cflags"].elts] == [""]
        kernels.setdefault(problem, []).append(cuda)
    for problem, (first, second, third) in kernels.items():
        assert first == third and first != second, problem  # even samples: the same kernels


@pytest.mark.build
def test_an_llm_shaped_solution_compiles_against_the_light_header(tmp_path: Path, cli) -> None:
    """The whole way, with nvcc (no GPU needed): run.py builds an LLM-shaped solution, and its
    CUDA unit, which includes <torch/extension.h>, compiles against the lightest header: its
    operators' own (builds.OPS), made from the installed PyTorch."""
    suite = _llm_suite(tmp_path / "llm", samples=1)
    expected = json.loads((suite / "expected.json").read_text())["solutions"]
    key = next(k for k, v in expected.items() if v["kind"] == "cuda_ok")
    problem, stem = key.split("/")
    solution = suite / "solutions" / problem / f"{stem}.py"
    problem_file = str(suite / "problems" / f"{problem}.py")
    code = cli("--problem", problem_file, "--solution", str(solution), "--compile-cuda")
    assert code == 0
    record = cli.record(stem)
    assert record["status"] == verdicts.NO_GPU
    (build,) = record["builds"]
    assert build["cuda"] and build["cuda_header"] == builds.OPS
    assert "hint" not in build
