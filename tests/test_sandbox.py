"""The sandbox of solution workers (harness/sandbox.py): each attack of tests/fixtures/sandbox is
stopped by the kernel and named by its rule, honest solutions are unaffected, and the build
cache takes no module it did not record."""

from __future__ import annotations

import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from harness import sandbox as sandbox_policy
from harness.job import Job
from harness.run import pool as local
from harness.run import raypool, staging
from harness.run import staging as sandbox
from harness.settings import Limits, Places, Settings
from harness.verdicts import UserError
from tests.conftest import REPO, TOY, CliRun, toy_solution

FIXTURES = REPO / "tests" / "fixtures" / "sandbox"
ATTACKS = {  # fixture: the rule that must name it
    "socket_out": "sandbox_network",
    "read_secret": "sandbox_filesystem",
    "write_runs": "sandbox_filesystem",
    "plant_build": "sandbox_filesystem",
    "fork_bomb": "sandbox_processes",
    "memory_hog": "sandbox_memory",
    "ptrace_parent": "sandbox_ptrace",
}
LACKS = sandbox.missing()
needs_sandbox = pytest.mark.skipif(bool(LACKS), reason=f"no sandbox here: {LACKS}")


def test_everything_is_readable_but_the_hidden_paths(tmp_path: Path) -> None:
    for name in ("results/cpu", "logs", "code/pkg", "solutions/x"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "solutions" / "x" / "mine.py").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "results")
    hidden = (str(tmp_path / "results"), str(tmp_path / "solutions" / "x" / "mine.py"))
    roots = set(sandbox_policy.readable_roots(hidden))
    assert tmp_path / "logs" in roots and tmp_path / "code" in roots
    assert not any(str(root).startswith(str(tmp_path / "results")) for root in roots)
    assert tmp_path / "link" not in roots  # a link into a hidden folder
    assert tmp_path / "solutions" / "x" / "mine.py" not in roots
    assert tmp_path in sandbox_policy.listable_folders(hidden)
    assert not any(root == Path("/") or tmp_path.is_relative_to(root) for root in roots)


def test_a_policy_travels_whole_through_the_environment() -> None:
    made = sandbox_policy.Policy(("/a", "/b"), ("/a/c",), 1 << 30, 64, False)
    assert sandbox_policy.Policy.from_env(made.to_env()) == made
    assert made.is_hidden("/a/x") and not made.is_hidden("/a/c/x") and not made.is_hidden("/ab")


def test_a_cached_build_is_staged_only_while_its_modules_match_their_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(places=Places(tmp_path / "r", tmp_path / "builds", tmp_path / "l"))
    job = Job("toy", str(TOY / "reference.py"), toy_solution("good"), "", "hash", settings)
    built = tmp_path / "built" / "ext"
    built.mkdir(parents=True)
    (built / "ext.so").write_bytes(b"module")
    cache = staging.cache_folder(job)
    pool = local.LocalPool(["cpu"], 1)
    assert not pool.built(job)  # nothing in the cache: its build job builds it
    staging.publish(built.parent, cache)
    assert not pool.built(job)  # without the sandbox the cache keeps no digests
    monkeypatch.setattr(sandbox, "active", object())
    assert pool.built(job)  # whole: its judge loads it, no build job is needed
    assert json.loads((cache / staging.MANIFEST).read_text()) == staging._modules(cache)
    links = tmp_path / "links"
    scratch = tmp_path / "w1"
    scratch.mkdir()
    staged = staging.stage(job, scratch, links)
    assert (scratch / "build" / "ext" / "ext.so").read_bytes() == b"module"
    assert Path(staged.build_folder).resolve() == (scratch / "build").resolve()  # its link
    assert Path(staged.solution).read_text() == Path(job.solution).read_text()
    staging.finish(job, scratch, staging.Judged("ok"))
    (cache / "ext" / "ext.so").write_bytes(b"planted")  # written behind the harness's back
    scratch = tmp_path / "w2"
    scratch.mkdir()
    staging.stage(job, scratch, links)
    assert not (scratch / "build" / "ext").exists()  # not loaded: it builds afresh
    assert not pool.built(job)  # and it gets a build job
    monkeypatch.setattr(sandbox, "active", None)
    pool.close()


def test_a_build_compiled_again_to_the_same_module_is_published_again(tmp_path: Path) -> None:
    settings = Settings(places=Places(tmp_path / "r", tmp_path / "builds", tmp_path / "l"))
    job = Job("toy", str(TOY / "reference.py"), toy_solution("good"), "", "hash", settings)
    built = tmp_path / "built" / "ext"
    built.mkdir(parents=True)
    (built / "ext.so").write_bytes(b"module")
    (built / ".ninja_log").write_text("# ninja log v5\n1\t2\t3\text.so\told-commands\n")
    cache = staging.cache_folder(job)
    staging.publish(built.parent, cache)
    scratch = tmp_path / "w1"
    scratch.mkdir()
    staging.stage(job, scratch, tmp_path / "links")
    ran = "# ninja log v5\n4\t5\t6\text.so\tnew-commands\n"  # compiled again: other commands
    (scratch / "build" / "ext" / ".ninja_log").write_text(ran)
    staging.finish(job, scratch, staging.Judged("ok"))
    assert (cache / "ext" / ".ninja_log").read_text() == ran  # the next job finds it up to date
    assert staging.intact(cache)


@needs_sandbox
def test_the_pools_threads_take_their_first_scratch_folders_at_once(tmp_path: Path) -> None:
    # Found on the H200: with --build-jobs 16 two threads made the launcher at once, and one
    # job failed to start ("cannot prepare the worker's scratch folder").
    for attempt in range(20):
        box = sandbox.Sandbox(sandbox_policy.Policy((), (), 1 << 30, 64), tmp_path / str(attempt))
        start = threading.Barrier(16)

        def take(box: sandbox.Sandbox = box, start: threading.Barrier = start) -> Path:
            start.wait()
            return box.scratch()

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            folders = list(pool.map(lambda _: take(), range(16)))
        assert len(set(folders)) == 16 and os.access(box.launcher, os.X_OK)


def test_the_launcher_closes_each_door_before_the_interpreter_starts(tmp_path: Path) -> None:
    hidden, scratch = tmp_path / "hidden", tmp_path / "scratch"
    hidden.mkdir()
    scratch.mkdir()
    (hidden / "secret").write_text("s")
    made = sandbox_policy.Policy((str(hidden),), (), 1 << 30, 64)
    probe = (
        "import ctypes, os, socket\n"
        "def tried(f):\n"
        "    try: f(); return 'allowed'\n"
        "    except OSError: return 'refused'\n"
        f"print(tried(lambda: open({str(hidden / 'secret')!r}).read()))\n"
        f"print(tried(lambda: open({str(tmp_path / 'new')!r}, 'w')))\n"
        f"print(tried(lambda: open({str(scratch / 'new')!r}, 'w')))\n"
        "print(tried(lambda: socket.create_connection(('192.0.2.1', 80), timeout=1)))\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('refused' if libc.ptrace(16, os.getppid(), 0, 0) else 'allowed')\n"
    )
    done = launched(probe, made, scratch)
    assert done.stdout.split() == ["refused", "refused", "allowed", "refused", "refused"], done


def launched(
    probe: str, policy: sandbox_policy.Policy, scratch: Path
) -> subprocess.CompletedProcess[str]:
    """`probe` (Python source) run by the sandbox's launcher under `policy`, in the environment
    of the tests less any Inductor thread count; its output captured."""
    env = {
        **os.environ,
        sandbox_policy.POLICY_VARIABLE: policy.to_env(),
        sandbox_policy.SCRATCH_VARIABLE: str(scratch),
    }
    env.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
    return subprocess.run(
        [sys.executable, str(sandbox.LAUNCH), "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_torch_compile_inside_compiles_in_the_worker_whose_children_cannot_start_cuda(
    tmp_path: Path,
) -> None:
    # CUDA's start writes under the process's /proc/<pid>: the worker may, a child may not (so
    # CUDA does not start in one), and Inductor therefore keeps its compiles in the worker.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    child = "open('/proc/self/comm', 'w').write('child')"
    probe = (
        "import subprocess, sys\n"
        "open('/proc/self/comm', 'w').write('worker')\n"
        f"done = subprocess.run([sys.executable, '-c', {child!r}], capture_output=True)\n"
        "print('child', 'refused' if done.returncode else 'allowed')\n"
        "from torch._inductor import config\n"
        "print('compile_threads', config.compile_threads)\n"
    )
    done = launched(probe, sandbox_policy.Policy((), (), 4 << 30, 256), scratch)
    assert done.stdout.split() == ["child", "refused", "compile_threads", "1"], done


def test_required_refuses_a_machine_without_it(monkeypatch) -> None:
    monkeypatch.setattr(sandbox, "missing", lambda: ["Landlock ABI 4 or later (none)"])
    settings = Settings(limits=Limits(sandbox="required"))
    with pytest.raises(UserError, match="--sandbox required: this machine lacks Landlock"):
        sandbox.begin(settings, [])
    assert sandbox.begin(replace(settings, limits=Limits(sandbox="off")), []) is None


@needs_sandbox
@pytest.mark.parametrize(
    ("device", "sandbox_mode", "memory_gb"),
    [  # `auto`, as run.py's default; on the GPU it must find that CUDA starts inside it, and a
        # CUDA context fit (`required` refusing where something lacks: tests above)
        ("cpu", "auto", "2"),
        pytest.param("cuda", "auto", "8", marks=pytest.mark.gpu),
    ],
)
def test_every_attack_is_stopped_and_named_and_honest_solutions_pass(
    cli: CliRun, monkeypatch, device: str, sandbox_mode: str, memory_gb: str
) -> None:
    results = cli.root / "results"
    (results / "cpu").mkdir(parents=True)
    (results / "secret.txt").write_text("the planted secret")
    monkeypatch.setenv("SANDBOX_SECRET", str(results / "secret.txt"))
    monkeypatch.setenv("SANDBOX_RUNS", str(results / "cpu" / "runs.jsonl"))
    monkeypatch.setenv("SANDBOX_BUILDS", str(cli.build_dir))
    solutions = [str(FIXTURES / f"{name}.py") for name in ATTACKS] + [toy_solution("good")]
    flags = ["--memory-gb", memory_gb, "--max-processes", "64", "--timeout", "30"]
    flags += ["--budget-ms", "5", "--check-only", "--sandbox", sandbox_mode, "--device", device]
    pairs = [("--solution", path) for path in solutions]
    cli("--problem", str(TOY), *[word for pair in pairs for word in pair], *flags)
    for name, rule in ATTACKS.items():
        record = cli.record(name)
        assert f"[rule: {rule}]" in record["detail"], record
        if rule != "sandbox_memory":  # a failure of its own, with its rule named
            assert (record["status"], record["reason"]) == ("rejected", rule), record
    good = cli.record("good")
    assert good["status"] == "ok" and "stage" in good["phase_s"]  # the sandbox's copying, timed
    log = "".join(path.read_text() for path in results.glob("*/runs.jsonl"))
    assert "forged" not in log and "the planted secret" not in log
    assert not list(cli.build_dir.glob("toy/build-planted*"))


@needs_sandbox
def test_auto_stays_off_where_cuda_does_not_start_inside_it(tmp_path: Path, capsys) -> None:
    # Here no CUDA starts at all, so the check inside the sandbox fails as a GPU machine's
    # would if the sandbox kept CUDA from starting: `auto` runs without it, `required` refuses.
    places = Places(tmp_path / "r", tmp_path / "builds", tmp_path / "l")
    settings = Settings(device="cuda:0", places=places)
    said = sandbox.begin(settings, [])
    assert sandbox.active is None and said is not None
    assert said.startswith("sandbox: off, CUDA does not start inside it here")
    with pytest.raises(UserError, match="CUDA does not start inside it"):
        sandbox.begin(replace(settings, limits=Limits(sandbox="required")), [])
    assert sandbox.active is None


def test_a_ray_process_takes_the_runs_sandbox_once_and_says_why_not(
    monkeypatch, tmp_path: Path
) -> None:
    # A Ray judge or build task (harness.run.raypool) gets the run's rules from the driver.
    asked: list[int] = []

    def lacks() -> list[str]:
        asked.append(1)
        return ["Landlock ABI 4 or later (none)"]

    monkeypatch.setattr(sandbox, "missing", lacks)
    monkeypatch.setattr(sandbox, "_taken", {})
    rules = sandbox_policy.Policy((), (), 1 << 30, 64)
    why = sandbox.take("auto", rules, tmp_path, "cpu")
    assert why == "this machine lacks Landlock ABI 4 or later (none)" and sandbox.active is None
    assert sandbox.take("auto", rules, tmp_path, "cpu") == why and len(asked) == 1
    refused = sandbox.take("required", rules, tmp_path, "cpu")
    assert refused is not None and refused.startswith("--sandbox required: this machine lacks")
    assert sandbox.take("off", rules, tmp_path, "cpu") is None and sandbox.active is None
    # Under 'required' a build task on such a host builds nothing, and says where and why.
    settings = Settings(places=Places(tmp_path / "r", tmp_path / "builds", tmp_path / "l"))
    job = Job("toy", str(TOY / "reference.py"), toy_solution("good"), "", "hash", settings)
    shipped, packed = raypool.build_remotely(job, [], ("required", rules))
    judged = shipped.ended.judged
    assert judged.harness_error and packed is None
    assert judged.detail.endswith(f"on {socket.gethostname()}: {refused}")


@needs_sandbox
def test_a_ray_process_judges_in_the_sandbox_it_took(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(sandbox, "_taken", {})
    rules = sandbox_policy.Policy((str(tmp_path / "results"),), (), 1 << 30, 64)
    try:
        assert sandbox.take("required", rules, tmp_path / "builds", "cpu") is None
        box = sandbox.active
        assert box is not None and box.policy == rules
        assert box.root == tmp_path / "builds" / ".sandbox"
        assert sandbox.take("required", rules, tmp_path / "builds", "cpu") is None
        assert sandbox.active is box  # once per process and rules
    finally:
        sandbox.end()


def test_every_job_of_a_solution_sees_its_files_and_build_under_the_same_names(
    tmp_path: Path,
) -> None:
    # A build's commands name its folder and, with torch's `load`, the sources beside the
    # solution: were either a scratch folder's own name, every job would build again.
    settings = Settings(places=Places(tmp_path / "r", tmp_path / "builds", tmp_path / "l"))
    job = Job("toy", str(TOY / "reference.py"), toy_solution("good"), "", "hash", settings)
    seen = []
    for attempt in range(2):
        scratch = tmp_path / f"w{attempt}"
        scratch.mkdir()
        staged = staging.stage(job, scratch, tmp_path / "links")
        solution = Path(staged.solution)
        assert solution.resolve() == (scratch / "solution" / "good.py").resolve()
        assert Path(staged.build_folder).resolve() == (scratch / "build").resolve()
        seen.append((staged.solution, staged.build_folder))
        staging.finish(job, scratch, staging.Judged("ok"))
    assert seen[0] == seen[1] and str(tmp_path / "links") in seen[0][0]


def test_a_removal_by_name_within_a_folder_fd_is_judged_by_that_folder(tmp_path: Path) -> None:
    # shutil.rmtree (TemporaryDirectory's cleanup) removes by name relative to a folder's fd: the
    # hook must judge the folder it names, not the worker's current one.
    scratch, outside = tmp_path / "scratch", tmp_path / "outside"
    for folder in (scratch / "pkg", outside):
        folder.mkdir(parents=True)
    hook = sandbox_policy._Hook(sandbox_policy.Policy(hidden=()), scratch)
    inside_fd, outside_fd = (os.open(f, os.O_RDONLY) for f in (scratch / "pkg", outside))
    try:
        assert hook.rule("os.remove", ("__init__.py", inside_fd)) is None
        assert hook.rule("os.rmdir", ("sub", inside_fd)) is None
        assert hook.rule("os.remove", ("__init__.py", outside_fd)) == (
            "filesystem",
            "os.remove __init__.py",
        )
        assert hook.rule("os.remove", (str(outside / "x"), -1)) is not None  # no fd: as named
    finally:
        os.close(inside_fd)
        os.close(outside_fd)


def test_asking_for_a_folder_that_is_there_changes_nothing_and_is_no_violation(
    tmp_path: Path, monkeypatch
) -> None:
    # Inductor's CPU compile calls os.makedirs(".", exist_ok=True): EEXIST, nothing written; a
    # folder that is not there yet, outside the scratch folder, is still a violation.
    scratch, outside = tmp_path / "scratch", tmp_path / "outside"
    for folder in (scratch, outside):
        folder.mkdir()
    monkeypatch.chdir(outside)
    hook = sandbox_policy._Hook(sandbox_policy.Policy(hidden=()), scratch)
    assert hook.rule("os.mkdir", (".", 0o777, -1)) is None
    assert hook.rule("os.mkdir", (str(outside), 0o777, -1)) is None
    assert hook.rule("os.mkdir", ("new", 0o777, -1)) == ("filesystem", "os.mkdir new")
    assert hook.rule("os.mkdir", (str(scratch / "new"), 0o777, -1)) is None
