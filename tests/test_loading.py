"""Reading a reference: the KernelBench contract and the optional extras."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from harness.loading import import_file, load_problem
from harness.verdicts import UserError

KERNELBENCH_FILE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)

batch_size = 16
dim = 16384

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
"""


def write(tmp_path: Path, text: str, name: str = "problem.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_kernelbench_file_loads_unchanged_with_safe_defaults(tmp_path: Path) -> None:
    problem = load_problem("relu", write(tmp_path, KERNELBENCH_FILE))
    assert [c.name for c in problem.cases] == ["default"]
    assert [b.name for b in problem.benchmarks] == ["default"]
    assert problem.atol is None and problem.rtol is None
    (x,) = problem.cases[0].get_inputs()
    assert tuple(x.shape) == (16, 16384)
    assert problem.cases[0].get_init_inputs() == []


def test_extras_are_read(tmp_path: Path) -> None:
    extras = """
ATOL = 1e-3
RTOL = 0
CASES = [
    {"name": "small", "inputs": lambda: [torch.randn(3, 5)], "atol": 0.5},
    {"name": "other init", "init_inputs": [7]},
]
BENCHMARKS = [{"name": "big", "inputs": lambda: [torch.randn(1024, 1024)]}]
"""
    problem = load_problem("relu", write(tmp_path, KERNELBENCH_FILE + extras))
    assert (problem.atol, problem.rtol) == (1e-3, 0.0)
    assert [c.name for c in problem.cases] == ["default", "small", "other init"]
    small, other = problem.cases[1], problem.cases[2]
    assert tuple(small.get_inputs()[0].shape) == (3, 5) and small.atol == 0.5
    assert other.get_init_inputs() == [7]
    assert tuple(other.get_inputs()[0].shape) == (16, 16384)  # the default generator
    assert [b.name for b in problem.benchmarks] == ["default", "big"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("CASES = [{'name': 'a', 'input': None}]", "unknown key(s) input"),
        ("CASES = [{'name': 'a'}, {'name': 'a'}]", "the name 'a' is used twice"),
        ("CASES = [{'init_inputs': []}]", "needs a 'name' string"),
        ("CASES = [{'name': 'a', 'inputs': [1]}]", "'inputs' must be a zero-argument callable"),
        ("CASES = {'name': 'a'}", "CASES must be a list of dicts"),
        ("BENCHMARKS = ['big']", "BENCHMARKS[0] must be a dict"),
        ("ATOL = -1", "ATOL must be a non-negative number"),
        ("CASES = [{'name': 'a', 'rtol': 'x'}]", "'rtol' must be a non-negative number"),
        ("CASES = [{'name': 'a', 'invalid': 1}]", "'invalid' must be True or False"),
        ("BENCHMARKS = [{'name': 'a', 'invalid': True}]", "a benchmark cannot be 'invalid'"),
    ],
)
def test_malformed_extras_say_what_is_wrong(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        load_problem("relu", write(tmp_path, KERNELBENCH_FILE + "\n" + extra + "\n"))


def test_missing_contract_names_are_listed(tmp_path: Path) -> None:
    path = write(tmp_path, KERNELBENCH_FILE.replace("def get_inputs", "def make_inputs"))
    with pytest.raises(UserError, match="it lacks get_inputs"):
        load_problem("relu", path)


def test_syntax_error_in_a_reference_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"syntax error on line 1") as err:
        load_problem("bad", write(tmp_path, "def (:\n"))
    assert "\n" not in str(err.value)


def test_reference_that_raises_on_import(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="importing it raised RuntimeError: boom"):
        load_problem("bad", write(tmp_path, "raise RuntimeError('boom')\n"))


def test_a_file_may_import_its_neighbours(tmp_path: Path) -> None:
    write(tmp_path, "VALUE = 42\n", name="example_torchcode.py")
    module = import_file(write(tmp_path, "from example_torchcode import VALUE\n", "sol.py"))
    assert module.VALUE == 42


def test_a_files_folder_is_on_the_import_path_only_while_it_is_imported(tmp_path: Path) -> None:
    # solutions/lltm/cuda.py: a worker spawned after it was imported found it as torch's
    # `cuda.bindings` while its folder stayed on sys.path, and could not import torch
    write(tmp_path, "SHADOW = True\n", name="harness_test_neighbour.py")
    module = import_file(
        write(tmp_path, "import harness_test_neighbour as n\nV = n.SHADOW\n", "s.py")
    )
    assert module.V is True
    assert str(tmp_path) not in sys.path
    del sys.modules["harness_test_neighbour"]
    assert importlib.util.find_spec("harness_test_neighbour") is None
