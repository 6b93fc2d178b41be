"""The command line: what it accepts, what it refuses in one line, and its exit codes."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import run
from harness.run import flags as run_flags
from tests.conftest import BUILDS, REPO, TOY, CliRun, toy_solution


def test_help_documents_every_flag_and_the_statuses(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        run.main(["-h"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for flag in (
        "--problem",
        "--all",
        "--list",
        "--solution",
        "--device",
        "--trials",
        "--warmup-ms",
        "--min-samples",
        "--max-samples",
        "--target-rse",
        "--budget-ms",
        "--graph",
        "--compile",
        "--render",
        "--compare",
        "--timeout",
        "--build-timeout",
        "--arch",
        "--results-dir",
    ):
        assert flag in text
    assert "compile_error" in text and "no_gpu" in text


def test_unknown_problem_is_one_line_with_exit_3(cli: CliRun, capsys) -> None:
    assert cli("--problem", "no_such_problem") == run.EXIT_INPUT
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown problem 'no_such_problem'")
    assert "multilabel_margin" in err and len(err.splitlines()) == 1


def test_solution_without_model_new_is_refused_before_any_build(cli: CliRun, capsys) -> None:
    assert cli("--problem", str(TOY), "--solution", toy_solution("no_model_new")) == run.EXIT_INPUT
    err = capsys.readouterr().err.strip()
    assert "defines no ModelNew at top level (it defines: ModelNw)" in err
    assert not (cli.root / "results").exists()  # nothing ran, nothing recorded


def test_a_text_file_as_solution_is_refused_as_not_python(
    cli: CliRun, capsys, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("a kernel idea\n")
    assert cli("--problem", str(TOY), "--solution", str(notes)) == run.EXIT_INPUT
    err = capsys.readouterr().err
    assert "notes.txt is not a Python file" in err and "defines no ModelNew" not in err


def test_solution_with_a_syntax_error_is_refused(cli: CliRun, capsys) -> None:
    assert cli("--problem", str(TOY), "--solution", toy_solution("bad_syntax")) == run.EXIT_INPUT
    assert "syntax error on line 3" in capsys.readouterr().err
    assert not (cli.root / "results").exists()  # no load_error row: refused before the run


def test_missing_solution_file(cli: CliRun, capsys) -> None:
    assert cli("--problem", str(TOY), "--solution", "nope.py") == run.EXIT_INPUT
    assert "--solution nope.py: no such file" in capsys.readouterr().err


def test_problem_without_solutions_says_where_to_put_one(cli: CliRun, capsys) -> None:
    assert cli("--problem", str(TOY)) == run.EXIT_INPUT
    assert "has no solutions: add a .py file defining ModelNew to" in capsys.readouterr().err


def test_solution_needs_a_problem(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        run.main(["--all", "--solution", toy_solution("good")])
    assert exit_.value.code == run.EXIT_USAGE
    assert "--solution needs --problem" in capsys.readouterr().err


OUT_OF_RANGE = [  # every numeric flag, with a value just outside its range
    ["--max-samples", "0"],
    ["--min-samples", "0"],
    ["--trials", "0"],
    ["--warmup-ms", "-1"],
    ["--target-rse", "0"],
    ["--budget-ms", "0"],
    ["--timeout", "-5"],
    ["--build-timeout", "0"],
    ["--memory-gb", "0"],
    ["--max-processes", "0"],
    ["--build-jobs", "0"],
    ["--threshold", "-0.1"],
    ["--atol", "-0.001"],
    ["--rtol", "-0.5"],
    ["--seed", "-1"],
    ["--secret", "-1"],
    ["--kernelbench-trials", "0", "--as", "kernelbench"],
    ["--kernelbench-tolerance", "-1", "--as", "kernelbench"],
    ["--port", "70000"],
]


@pytest.mark.parametrize("flags", OUT_OF_RANGE, ids=lambda flags: flags[0])
def test_a_numeric_flag_out_of_its_range_is_a_usage_error_naming_it(
    flags: list[str], capsys
) -> None:
    with pytest.raises(SystemExit) as exit_:
        run.main(["--problem", str(TOY), *flags])
    assert exit_.value.code == run.EXIT_USAGE
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.startswith(f"run.py: error: {flags[0]} must be "), said
    assert f"(got {flags[1]})" in said, said


def test_every_numeric_flag_has_its_range_checked() -> None:
    parser_flags = {
        action.option_strings[0]
        for action in run_flags.build_parser()._actions
        if action.type in (int, float) and action.option_strings
    }
    assert parser_flags == {flags[0] for flags in OUT_OF_RANGE}


ABSURD = [  # a value past the flag's sane bound (harness.run.flags.MOST), and the bound said
    (["--trials", "1000000000"], "--trials must be at most 1000 (got 1000000000)"),
    (["--timeout", "1e12"], "--timeout must be at most 86400 (got 1e+12)"),
    (["--build-timeout", "1e6"], "--build-timeout must be at most 86400 (got 1e+06)"),
    (["--build-jobs", "100000"], "--build-jobs must be at most 1024 (got 100000)"),
    (["--max-samples", "10000000"], "--max-samples must be at most 1000000 (got 10000000)"),
    (["--budget-ms", "1e9"], "--budget-ms must be at most 3.6e+06 (got 1e+09)"),
    (["--memory-gb", "100000"], "--memory-gb 100000 is more than this machine's"),
    (
        ["--min-samples", "100", "--max-samples", "10"],
        "--min-samples must be at least 1 and at most 10",
    ),
]


@pytest.mark.parametrize(
    ("flags", "said"), ABSURD, ids=lambda v: v[0] if isinstance(v, list) else ""
)
def test_an_absurd_value_or_a_contradiction_is_refused_in_one_line(
    flags: list[str], said: str, capsys
) -> None:
    with pytest.raises(SystemExit) as exit_:
        run.main(["--problem", str(TOY), *flags])
    assert exit_.value.code == run.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"run.py: error: {said}"), err[-1]


def test_a_max_samples_below_the_default_minimum_lowers_it_and_a_given_one_stays() -> None:
    from harness import settings

    lowered = settings.from_flags(run_flags.parse_args(["--all", "--max-samples", "5"]))
    assert (lowered.timing.rule.min_samples, lowered.timing.rule.max_samples) == (5, 5)
    given = settings.from_flags(run_flags.parse_args(["--all", "--min-samples", "3"]))
    assert given.timing.rule.min_samples == 3


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--forget", "raises"], "--forget needs --problem"),
        ([], "say what to do: one of --problem --all --problems --list --render --compare"),
    ],
)
def test_a_run_without_what_to_do_says_what_is_missing(argv: list[str], said: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        run.main(argv)
    assert exit_.value.code == run.EXIT_USAGE
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"run.py: error: {said}")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error seen without a GPU")
def test_asking_for_cuda_without_a_gpu(cli: CliRun, capsys) -> None:
    code = cli("--problem", str(TOY), "--solution", toy_solution("good"), "--device", "cuda")
    assert code == run.EXIT_INPUT
    assert "no CUDA device is visible here; use --device cpu" in capsys.readouterr().err


def test_list_shows_problems_cases_and_solutions(capsys) -> None:
    assert run.main(["--list"]) == run.EXIT_OK
    out = capsys.readouterr().out
    assert "multilabel_margin" in out and "smooth_l1" in out and "seed_cuda" in out


def test_a_correct_solution_exits_0_and_writes_the_tables(cli: CliRun, capsys) -> None:
    args = ["--problem", str(TOY), "--solution", toy_solution("good"), "--max-samples", "3"]
    assert cli(*args) == run.EXIT_OK
    out = capsys.readouterr().out
    folder = next((cli.root / "results").iterdir())
    assert {p.name for p in folder.iterdir()} >= {"toy.md", "toy.csv", "runs.jsonl"}
    # The end of the run: a compact table within 100 columns, and where the full one is.
    lines = out[out.index("toy:\n") : out.index("\n\n", out.index("toy:\n"))].splitlines()
    assert lines[1].split()[:3] == ["solution", "shape", "status"]
    rows = [line.split()[:3] for line in lines[3:5]]
    assert rows == [["good", "64x33", "ok"], ["good", "256x256", "ok"]]
    assert lines[-1] == f"full table: {folder / 'toy.md'}"  # after any footnotes
    assert max(len(line) for line in lines[:-1]) <= 100


def test_a_second_run_keeps_what_the_first_recorded(cli: CliRun) -> None:
    cli("--problem", str(TOY), "--solution", toy_solution("good"), "--max-samples", "3")
    cli("--problem", str(TOY), "--solution", toy_solution("raises"), "--max-samples", "3")
    table = next((cli.root / "results").glob("*/toy.md")).read_text()
    assert "| good" in table and "| raises" in table


def test_help_writes_down_the_stopping_rule(capsys) -> None:
    with pytest.raises(SystemExit):
        run.main(["-h"])
    text = capsys.readouterr().out
    assert "timing rule:" in text and "relative standard error" in text
    assert "--target-rse TARGET_RSE" in text and "(default: 0.005)" in text


def test_help_gives_each_flag_its_default_once(capsys) -> None:
    with pytest.raises(SystemExit):
        run.main(["-h"])
    text = capsys.readouterr().out
    entries = re.split(r"\n(?=  -)", text.split("\noptions:", 1)[1].split("\ntiming rule:")[0])
    assert len(entries) > 40  # one per flag
    for entry in entries:
        assert entry.count("(default:") <= 1, entry
    build_dir = next(e for e in entries if e.startswith("  --build-dir"))
    assert " ".join(build_dir.split()).endswith(
        "(default: $HARNESS_BUILD_DIR if set, else .cache/builds)"
    )


def test_a_timed_row_has_a_paired_speedup_and_a_stop_reason(cli: CliRun) -> None:
    cli("--problem", str(TOY), "--solution", toy_solution("good"), "--max-samples", "30")
    bench = cli.record("good")["benchmarks"][0]
    speedup = bench["speedup"]
    assert speedup["low"] <= speedup["value"] <= speedup["high"]
    assert bench["stop"] in ("target", "budget", "cap")
    assert bench["solution"]["count"] == bench["reference"]["count"] <= 30
    assert bench["bytes"] > 0 and bench["mode"] == "wall_clock"
    machine = cli.record("good")["machine"]  # the load as the run began; no GPU to count on
    assert machine["load_1m"] >= 0 and machine["cpu_count"] == os.cpu_count()
    assert "gpu_processes" not in machine


def test_render_and_compare_read_only_the_recorded_files(cli: CliRun, capsys) -> None:
    cli("--problem", str(TOY), "--solution", toy_solution("good"), "--max-samples", "5")
    results = cli.root / "results"
    folder = next(results.iterdir())
    (folder / "toy.md").unlink()
    assert run.main(["--render", "--results-dir", str(results)]) == run.EXIT_OK
    assert (folder / "toy.md").exists() and (folder / "summary.md").exists()
    capsys.readouterr()
    assert run.main(["--compare", str(folder), str(folder)]) == run.EXIT_OK
    assert "unchanged" in capsys.readouterr().out
    assert run.main(["--compare", str(folder), f"{folder}@nosuchrun"]) == run.EXIT_INPUT
    assert "nosuchrun" in capsys.readouterr().err


def test_help_needs_no_torch_fits_80_columns_and_starts_with_examples() -> None:
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['run.py', '-h']\n"
        "try:\n    runpy.run_path('run.py', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('imported:', sorted(m for m in ('torch', 'pandas', 'numpy') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    lines = done.stdout.splitlines()
    assert lines[-1] == "imported: []"
    assert max(len(line) for line in lines) <= run.HELP_WIDTH
    assert lines[0].startswith("usage: run.py (--problem NAME | --all")
    assert "examples:" in lines[:4] and "  python run.py --problem multilabel_margin" in lines[4]
    text = "\n".join(lines)
    # The timing rule names the flags that set it, not the fields behind them.
    assert "--warmup-ms of wall time" in text and "`warmup_ms`" not in text


def test_a_cuda_solution_on_the_cpu_is_not_compiled_unless_asked(cli: CliRun) -> None:
    args = ["--problem", str(TOY), "--solution", toy_solution("cuda_kernel"), "--device", "cpu"]
    assert cli(*args) == run.EXIT_OK  # no_gpu is no failure
    record = cli.record("cuda_kernel")
    assert record["status"] == "no_gpu"
    assert record["detail"].startswith("not compiled: ")
    assert "(--compile-cuda compiles it anyway)" in record["detail"]
    assert record["builds"] == [] and record["settings"]["compile_cuda"] is False
    # Run again, unchanged: the earlier record says what it is, and no worker starts for it.
    assert cli(*args) == run.EXIT_OK
    again = cli.record("cuda_kernel")
    assert again["run_id"] != record["run_id"]
    assert (again["status"], again["detail"]) == ("no_gpu", record["detail"])
    assert again["log"] is None and not (cli.root / "logs" / again["run_id"]).exists()


def test_a_results_dir_the_run_creates_is_named_with_the_first_folder_that_was_missing(
    tmp_path: Path, capsys
) -> None:
    results = tmp_path / "typo" / "deeper" / "results"
    args = ["--problem", str(TOY), "--solution", toy_solution("good"), "--check-only"]
    args += ["--trials", "1", "--device", "cpu", "--results-dir", str(results)]
    args += ["--log-dir", str(tmp_path / "logs")]
    assert run.main(args) == run.EXIT_OK
    out = capsys.readouterr().out
    said = f"note: created --results-dir {results} ({tmp_path / 'typo'}, and the folders in it,"
    assert said in out and f"note: created --log-dir {tmp_path / 'logs'} (it did not" in out
    assert run.main(args) == run.EXIT_OK  # there now: nothing to say
    assert "note: created" not in capsys.readouterr().out


def test_tables_made_by_an_older_harness_are_named_in_one_line(tmp_path: Path) -> None:
    from harness.run import machine

    def git(*words: str) -> str:
        done = subprocess.run(["git", "-C", str(tmp_path), *words], capture_output=True, text=True)
        return done.stdout.strip()

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "a.py").write_text("A = 1\n")
    git("add", "-A")
    git("commit", "-qm", "one")
    old = git("rev-parse", "HEAD")
    (tmp_path / "harness" / "a.py").write_text("A = 2\n")
    git("commit", "-qam", "two")
    new = git("rev-parse", "--short=12", "HEAD")
    (tmp_path / "README.md").write_text("docs only\n")
    git("add", "-A")
    git("commit", "-qm", "three")
    docs_only = git("rev-parse", "HEAD")
    last, older = machine.older_commits({old, f"{new}-dirty", docs_only, "unknown"}, tmp_path)
    assert last == git("log", "-1", "--format=%h", "--", "harness")
    assert older == sorted([old, "unknown"])  # made before the last change, or not known here
    assert machine.older_commits({docs_only}, tmp_path) is None


@pytest.mark.parametrize(
    ("flaw", "said"),
    [
        ("del get_inputs\n", "it lacks get_inputs"),
        ("raise RuntimeError('broken problem')\n", "broken problem"),
    ],
    ids=["no_get_inputs", "raises_at_import"],
)
def test_a_broken_problem_is_refused_before_its_solution_is_built(
    flaw: str, said: str, tmp_path: Path, capsys
) -> None:
    problem = tmp_path / "broken"
    shutil.copytree(TOY, problem)
    reference = problem / "reference.py"
    reference.write_text(reference.read_text() + flaw)
    builds = tmp_path / "builds"
    run_it = CliRun(tmp_path, builds)
    code = run_it("--problem", str(problem), "--solution", toy_solution("cpp_extension"))
    assert code == run.EXIT_INPUT
    out, err = capsys.readouterr()
    assert said in err and "built" not in out, (out, err)
    assert not builds.exists() or not any(builds.rglob("*.so"))  # nothing compiled


def compiled_toy(tmp_path: Path, name: str, appended: str, *more: str) -> tuple[CliRun, int]:
    """The toy problem as `name`, its reference with `appended` added, run with --compile and
    the good toy solution, quickly; the run and its exit status."""
    problem = tmp_path / name
    shutil.copytree(TOY, problem)
    reference = problem / "reference.py"
    reference.write_text(reference.read_text() + appended)
    run_it = CliRun(tmp_path, BUILDS)
    quick = ("--max-samples", "5", "--warmup-ms", "0", "--trials", "1", *more)
    code = run_it(
        "--problem", str(problem), "--solution", toy_solution("good"), "--compile", *quick
    )
    return run_it, code


def test_a_failed_compile_baseline_says_why_on_each_row_it_leaves_blank(
    tmp_path: Path, capsys
) -> None:
    # Inductor finds no C++ compiler: torch.compile fails, eager runs as ever
    broken = "import torch._inductor.config\ntorch._inductor.config.cpp.cxx = ('/no/such/c++',)\n"
    run_it, code = compiled_toy(tmp_path, "uncompilable", broken)
    assert code == run.EXIT_OK
    assert "torch.compile baseline: runtime_error:" in capsys.readouterr().err
    rows = run_it.record("good")["benchmarks"]
    assert rows and all(r.get("compile") is None for r in rows)
    assert all("no torch.compile baseline: runtime_error:" in r.get("note", "") for r in rows)
    # the CSV holds each row's flags whole (the markdown table cuts its notes short)
    table = next((tmp_path / "results").glob("*/uncompilable.csv")).read_text()
    assert "no torch.compile baseline: runtime_error:" in table


def test_a_compile_baseline_too_slow_for_one_shape_leaves_that_row_blank_with_why(
    tmp_path: Path, capsys
) -> None:
    # As Inductor's multilabel_margin_loss on a CPU: minutes a call at 4096x8192, a second at
    # 512x1024. Here the compiled reference (only) sleeps 4 s a call at 256x256 (a graph break
    # into a function torch.compile leaves alone): a warm-up and 5 samples need 24 s, past
    # --timeout 20 s, which leaves the solution's own timing room on a busy machine.
    slow = (
        "import time as _time\n\n\n"
        "@torch.compiler.disable\n"
        "def _pause(x):\n"
        "    _time.sleep(4.0 if x.numel() > 10_000 else 0.0)\n"
        "    return x\n\n\n"
        "class Model(Model):\n"
        "    def forward(self, x):\n"
        "        return super().forward(_pause(x) if torch.compiler.is_compiling() else x)\n"
    )
    run_it, code = compiled_toy(tmp_path, "slow_when_compiled", slow, "--timeout", "20")
    assert code == run.EXIT_OK
    err = capsys.readouterr().err
    assert "slow_when_compiled/256x256: no torch.compile baseline: a compiled call takes" in err
    rows = {r["name"]: r for r in run_it.record("good")["benchmarks"]}
    assert rows["256x256"].get("compile") is None
    assert "past --timeout 20 s (raise it to time them)" in rows["256x256"]["note"]
    assert rows["default"].get("compile") is not None
    assert "torch.compile" not in (rows["default"].get("note") or "")


def test_the_same_code_under_another_name_or_for_another_arch_is_not_built_again(
    tmp_path: Path,
) -> None:
    # The build cache is keyed by what a build is made of: a C++ solution copied under another
    # name, then run for another --arch (which a build without CUDA does not use), loads the
    # first build (each record's build says cached).
    run_it = CliRun(tmp_path, BUILDS)
    copy = tmp_path / "renamed_extension.py"
    shutil.copy(toy_solution("cpp_extension"), copy)
    quick = ("--check-only", "--trials", "1", "--sandbox", "auto")
    assert run_it("--problem", str(TOY), "--solution", toy_solution("cpp_extension"), *quick) == 0
    for arch in ("9.0", "8.0"):
        assert run_it("--problem", str(TOY), "--solution", str(copy), "--arch", arch, *quick) == 0
        (build,) = run_it.record("renamed_extension")["builds"]
        assert build["cached"], (arch, build)


def test_a_failure_that_takes_the_place_of_an_ok_row_says_so(tmp_path: Path, capsys) -> None:
    mine = tmp_path / "mine.py"
    run_it = CliRun(tmp_path, BUILDS)
    quick = ("--check-only", "--trials", "1")
    shutil.copy(toy_solution("good"), mine)
    assert run_it("--problem", str(TOY), "--solution", str(mine), *quick) == run.EXIT_OK
    assert "takes the place of" not in capsys.readouterr().err
    shutil.copy(toy_solution("raises"), mine)  # the same file, broken since
    assert run_it("--problem", str(TOY), "--solution", str(mine), *quick) == run.EXIT_FAILED
    said = capsys.readouterr().err
    assert "note: toy/mine: this runtime_error takes the place of its earlier ok row" in said
