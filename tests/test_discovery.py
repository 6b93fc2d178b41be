"""Finding problems and solutions: the project layout, KernelBench files, GPUCodeForces folders."""

from pathlib import Path

import pytest

from harness.run.discovery import (
    find_solutions,
    list_problems,
    missing_model_new,
    resolve_problem,
)
from harness.verdicts import UserError
from tests.conftest import REPO

PROBLEMS, SOLUTIONS = REPO / "problems", REPO / "solutions"


def test_shipped_problems_are_found_with_their_solutions() -> None:
    assert {"multilabel_margin", "smooth_l1"} <= set(list_problems(PROBLEMS))
    source = resolve_problem("multilabel_margin", PROBLEMS, SOLUTIONS)
    assert source.reference == PROBLEMS / "multilabel_margin" / "reference.py"
    assert {p.stem for p in source.solutions} >= {"seed_cuda", "cpu_cpp"}


def test_helpers_and_other_files_are_not_solutions(tmp_path: Path) -> None:
    for name in ("b.py", "a.py", "_helper.py", "kernel.cu", "notes.md"):
        (tmp_path / name).write_text("")
    assert [p.name for p in find_solutions(tmp_path)] == ["a.py", "b.py"]


def test_unknown_problem_names_what_exists_and_the_closest() -> None:
    with pytest.raises(UserError) as err:
        resolve_problem("multilabel_margn", PROBLEMS, SOLUTIONS)
    message = str(err.value)
    assert "unknown problem 'multilabel_margn'" in message
    assert "did you mean 'multilabel_margin'" in message
    assert "smooth_l1" in message and "\n" not in message


def test_kernelbench_file_by_path_takes_solutions_from_its_stem(tmp_path: Path) -> None:
    problem = tmp_path / "19_ReLU.py"
    problem.write_text("")
    solutions = tmp_path / "solutions" / "19_ReLU"
    solutions.mkdir(parents=True)
    (solutions / "mine.py").write_text("")
    source = resolve_problem(str(problem), tmp_path / "problems", tmp_path / "solutions")
    assert (source.name, source.reference) == ("19_ReLU", problem)
    assert [p.name for p in source.solutions] == ["mine.py"]


def test_gpucodeforces_folder_bundles_its_solution(tmp_path: Path) -> None:
    folder = tmp_path / "ICVXKH"
    folder.mkdir()
    (folder / "example_torchcode.py").write_text("")
    (folder / "example_cudacode.py").write_text("")
    source = resolve_problem(str(folder), tmp_path / "problems", tmp_path / "solutions")
    assert source.name == "ICVXKH"
    assert source.reference == folder / "example_torchcode.py"
    assert source.solutions == (folder / "example_cudacode.py",)


def test_folder_without_a_reference_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"neither reference\.py nor example_torchcode\.py"):
        resolve_problem(str(tmp_path), tmp_path, tmp_path)


def test_missing_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        resolve_problem(str(tmp_path / "nope.py"), tmp_path, tmp_path)


@pytest.mark.parametrize(
    "source",
    [
        "class ModelNew:\n    pass\n",
        "from elsewhere import ModelNew\n",
        "from elsewhere import Fast as ModelNew\n",
        "ModelNew = object\n",
    ],
)
def test_model_new_found_however_defined(tmp_path: Path, source: str) -> None:
    path = tmp_path / "s.py"
    path.write_text(source)
    assert missing_model_new(path) is None


def test_missing_model_new_names_the_classes_there(tmp_path: Path) -> None:
    path = tmp_path / "s.py"
    path.write_text("class Model:\n    pass\nclass ModelNw:\n    pass\n")
    assert (
        missing_model_new(path)
        == "s.py defines no ModelNew at top level (it defines: Model, ModelNw)"
    )


def test_syntax_error_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "s.py"
    path.write_text("x = 1\nclass ModelNew(\n")
    reason = missing_model_new(path)
    assert reason is not None and reason.startswith("s.py: syntax error on line 2")


@pytest.mark.parametrize("name", ["notes.txt", "kernel.cu", "solution"])
def test_a_file_that_is_not_python_is_named_as_such(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("class ModelNew:\n    pass\n")  # even a Python text: it cannot be imported
    assert missing_model_new(path) == (
        f"{name} is not a Python file: a solution is a .py file defining ModelNew"
    )
