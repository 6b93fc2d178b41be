"""Real builds through torch's extension builder: one small C++ solution, and a compile error."""

from pathlib import Path

import pytest

import run
from tests.conftest import TOY, CliRun, toy_solution

pytestmark = pytest.mark.build


def test_cpp_solution_builds_checks_times_and_is_cached(cli: CliRun) -> None:
    args = [
        "--problem",
        str(TOY),
        "--solution",
        toy_solution("cpp_extension"),
        "--max-samples",
        "5",
    ]
    assert cli(*args) == run.EXIT_OK
    first = cli.record("cpp_extension")
    assert first["status"] == "ok", first["detail"]
    assert [b["name"] for b in first["builds"]] == ["toy_scale_add"]
    assert first["builds"][0]["cuda"] is False
    assert cli(*args) == run.EXIT_OK
    second = cli.record("cpp_extension")
    assert second["run_id"] != first["run_id"]
    # Unchanged source, same build folder: ninja finds the module up to date, compiles nothing.
    text = next((cli.root / "logs" / second["run_id"]).glob("*.log")).read_text()
    assert "ninja: no work to do." in text
    assert second["build_s"] < 10
    assert second["builds"][0]["cached"] is True  # said as much, and no build claimed


def test_compile_error_is_a_row_with_the_compilers_first_error(tmp_path: Path) -> None:
    cli = CliRun(tmp_path, tmp_path / "builds")  # a fresh build cache: the error is remembered
    args = ["--problem", str(TOY), "--solution", toy_solution("cpp_compile_error")]
    assert cli(*args) == run.EXIT_FAILED
    record = cli.record("cpp_compile_error")
    assert record["status"] == "compile_error"
    assert record["detail"].startswith("main.cpp:")
    # main.cpp's line holds the source string's line 3, which is the .py's line 8
    assert " (cpp_compile_error.py line 8): error:" in record["detail"]
    assert "'undefined_name' was not declared" in record["detail"].replace("‘", "'").replace(
        "’", "'"
    )
    # The same code again: its build folder (keyed by content and toolchain) remembers the
    # error, so nothing compiles, in the build pool or the judging slot (issue 61).
    assert cli(*args) == run.EXIT_FAILED
    again = cli.record("cpp_compile_error")
    assert again["run_id"] != record["run_id"] and again["status"] == "compile_error"
    assert again["detail"].startswith(record["detail"])
    assert "remembered from an earlier build of the same code: delete " in again["detail"]
    assert not again.get("builds")
    (kept,) = (tmp_path / "builds").rglob("compile_error.txt")
    kept.unlink()  # deleted, as the detail says: the next run compiles again
    assert cli(*args) == run.EXIT_FAILED
    assert cli.record("cpp_compile_error")["detail"] == record["detail"]
