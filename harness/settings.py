"""The settings of one run: made once from run.py's flags, carried whole to every worker, and
recorded whole with every result.

Each option is declared once, below, as a field with its default and its help (`option`); run.py
builds its flags from these declarations, group by group. Adding an option touches its field and
the code that uses it, nothing in between.

The tolerance a run may set (--atol, --rtol; --kernelbench-tolerance) is decided in
harness.tolerance, with the defaults by dtype.

The build side (the CUDA toolkit, target architectures, build folders) is harness.toolchain's.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.tolerance import Tolerance

REPO = Path(__file__).resolve().parent.parent
FLUSHES = ("read", "write")
HARNESS, KERNELBENCH = "harness", "kernelbench"  # the profiles a run is judged under (--as)
PRECISION_NAMES = ("fp32", "fp16", "bf16")  # --precision's (harness.loading.PRECISIONS)
LOW = PRECISION_NAMES[1:]  # the precisions whose results keep a folder of their own
COMPARE_THRESHOLD = 0.02  # run.py --compare: a change smaller than this share is "unchanged"
SEED_LIMIT = 2**62  # --seed at most this: every seed drawn from it stays within torch's range
# Where builds are cached unless --build-dir says: a folder outside the clone lets a fresh clone
# (CI's, a second checkout) reuse every build whose sources and toolchain are unchanged.
BUILD_DIR_VARIABLE = "HARNESS_BUILD_DIR"


def option(default: Any, help: str, resolved: bool = False, **flag: Any) -> Any:
    """A field that is also a flag: `--name` (underscores as dashes) unless `flag` names it;
    further argparse keywords (choices, action, metavar) in `flag`. A `resolved` option's flag
    defaults to None, and run.py resolves the value (the device present, a fresh secret)."""
    if resolved:
        flag["default"] = None
    return field(default=default, metadata={"help": help, **flag})


def within(
    flag: str, value: float, low: float, high: float | None = None, above: bool = False
) -> None:
    """Refuse a flag's value out of its range, `low` to `high` (both allowed; `above`: `low`
    not allowed), with a ValueError that names the flag, its range and the value given."""
    if (value > low if above else value >= low) and (high is None or value <= high):
        return
    shown = [f"{n:g}" if isinstance(n, float) else str(n) for n in (low, high, value)]
    rule = f"above {shown[0]}" if above else f"at least {shown[0]}"
    rule += "" if high is None else f" and at most {shown[1]}"
    raise ValueError(f"{flag} must be {rule} (got {shown[2]})")


@dataclass(frozen=True)
class StopRule:
    """When to stop sampling: the one place the defaults live.

    1. Warm up: untimed rounds until `warmup_ms` of wall time has passed (at least one round).
    2. Sample in rounds. A round times each call once, back to back; the order turns by one each
       round (A B, B A, A B, ...), so neither call always runs first. Rounds come in batches,
       each batch as large as all the rounds so far (1x, 2x, 4x, ...) and at least `min_samples`.
    3. After each batch, stop when every call has at least `min_samples` samples and the
       relative standard error of each call's mean (std / sqrt(n) / mean) is at most
       `target_rse` ("target"); or when `budget_ms` of sampling time has passed ("budget"); or
       at `max_samples` rounds ("cap"). The budget never cuts below `min_samples`.
    """

    warmup_ms: float = option(50.0, "untimed rounds first, for this long")
    min_samples: int = option(
        10, "samples per call, at least (default: 10, or --max-samples where lower)", resolved=True
    )
    max_samples: int = option(2000, "samples per call, at most")
    target_rse: float = option(
        0.005, "stop once each call's relative standard error of the mean is below this"
    )
    budget_ms: float = option(
        2000.0, "sampling time per benchmark shape, at most (never below --min-samples)"
    )

    def __post_init__(self) -> None:
        within("--warmup-ms", self.warmup_ms, 0)
        within("--budget-ms", self.budget_ms, 0, above=True)
        within("--target-rse", self.target_rse, 0, above=True)
        within("--max-samples", self.max_samples, 1)
        within("--min-samples", self.min_samples, 1, self.max_samples)


@dataclass(frozen=True)
class Checking:
    """How a solution is judged: trials, seeds and tolerance; which cases, and whether timed."""

    trials: int = option(5, "correctness trials per case, each with a fresh seed and inputs")
    seed: int = option(42, "base seed of the trials")
    secret: int = option(
        0,
        "the run's secret, mixed into every input seed (default: a fresh random one per run, "
        "recorded with its results; pass a recorded one to draw the same inputs again, or 0 for "
        "the public seeds alone)",
        resolved=True,
    )
    tolerance: Tolerance = Tolerance()  # noqa: RUF009 - frozen: one shared default is safe
    case: str | None = option(
        None,
        "check only the correctness case of this name ('default' is get_inputs' own); the "
        "benchmarks are timed as usual",
        type=str,
        metavar="NAME",
    )
    check_only: bool = option(
        False,
        "run the correctness checks and skip timing (the record has no benchmark rows)",
        action="store_true",
    )
    profile: str = option(
        HARNESS,
        "judge as this harness does, or as KernelBench's evaluator does: its allclose criterion "
        "and its timer (events around one call after a 256 MB fill, the mean of 100), with "
        "every defence of this harness kept; results go to <machine>-kernelbench/",
        flag="--as",
        choices=(HARNESS, KERNELBENCH),
    )
    precision: str | None = option(
        None,
        "run both models at this precision, as KernelBench's does: float inputs, parameters and "
        "buffers cast, integer ones not (default: the problem's own); fp16, bf16 results go to "
        "<machine>-<precision>/",
        type=str,
        choices=PRECISION_NAMES,
    )
    kernelbench_tolerance: float | None = option(
        None,
        "with --as kernelbench: atol = rtol for its allclose (default: its precision table, "
        "1e-4 for float32, 1e-2 for float16 and bfloat16; KernelBench v0 and v0.1 used 1e-2)",
        type=float,
        metavar="TOL",
    )
    kernelbench_trials: int | None = option(
        None,
        "with --as kernelbench: timed calls per side, KernelBench's num_perf_trials (default "
        "100, as its scripts pass); more trials steady the mean where rare host stalls move it",
        type=int,
        metavar="N",
    )

    def __post_init__(self) -> None:
        for name in ("tolerance", "trials"):
            if getattr(self, f"kernelbench_{name}") is not None and self.profile != KERNELBENCH:
                raise ValueError(f"--kernelbench-{name} goes with --as kernelbench")
        if self.kernelbench_trials is not None:
            within("--kernelbench-trials", self.kernelbench_trials, 1)
        if self.kernelbench_tolerance is not None:
            within("--kernelbench-tolerance", self.kernelbench_tolerance, 0)
        for flag, given in (("--atol", self.tolerance.atol), ("--rtol", self.tolerance.rtol)):
            if given is not None:
                within(flag, given, 0)
        within("--trials", self.trials, 1)
        within("--seed", self.seed, 0, SEED_LIMIT)
        within("--secret", self.secret, 0)


TOLERANCE_FLAGS = {  # the help of Tolerance's two fields, as flags
    "atol": "absolute tolerance, overriding the case's and the problem's",
    "rtol": "relative tolerance, overriding the case's and the problem's",
}


@dataclass(frozen=True)
class Timing:
    """How calls are timed: the stopping rule, the timer's mode and the baselines."""

    rule: StopRule = StopRule()
    graph: bool = option(
        False,
        "time CUDA-graph replays over rotated input sets (no launch overhead; for microsecond "
        "kernels)",
        action="store_true",
    )
    flush: str = option(
        "read",
        "how L2 is emptied before each call: read a 2x L2 buffer (clean lines), or write it as "
        "triton's do_bench does (dirty lines the call must write back)",
        choices=FLUSHES,
    )
    compile: bool = option(
        False,
        "also time the reference under torch.compile (compile time excluded; cached per GPU and "
        "torch version in <machine>/baselines.jsonl)",
        action="store_true",
    )
    baseline_cache: bool = option(
        True,
        "with --compile: measure the baseline again instead of using the cached one",
        flag="--no-baseline-cache",
        action="store_false",
    )

    def mode(self, device_type: str) -> str:
        """The timer a solution on `device_type` is meant to get: "wall_clock" off the GPU,
        else "cuda_graph" or "cuda_events" (a row records the mode it really got)."""
        if device_type != "cuda":
            return "wall_clock"
        return "cuda_graph" if self.graph else "cuda_events"


@dataclass(frozen=True)
class Limits:
    """How long each step of a solution may take before its worker is killed, and what else
    it may take (harness/sandbox.py)."""

    build_s: float = option(
        1800.0,
        "limit for importing (building) a solution, in seconds",
        flag="--build-timeout",
        metavar="SECONDS",
    )
    run_s: float = option(
        300.0,
        "limit for each of the check and time steps of a solution, in seconds",
        flag="--timeout",
        metavar="SECONDS",
    )
    sandbox: str = option(
        "auto",
        "run each solution's workers in a sandbox (no network, no reach into results, logs, "
        "builds or other solutions; limits on memory and processes): 'auto' where this machine "
        "allows it, 'required' refuses to run without it, 'off'",
        choices=("auto", "required", "off"),
    )
    memory_gb: float = option(
        16.0, "in the sandbox, the heap memory a solution's worker may take, in GiB"
    )
    max_processes: int = option(
        max(1024, 64 * (os.cpu_count() or 1)),
        "in the sandbox, the processes and threads a solution's worker may add to those its "
        "user has (default: 64 per core, at least 1024)",
    )

    def __post_init__(self) -> None:
        within("--build-timeout", self.build_s, 0, above=True)
        within("--timeout", self.run_s, 0, above=True)
        within("--memory-gb", self.memory_gb, 0, above=True)
        within("--max-processes", self.max_processes, 1)


@dataclass(frozen=True)
class Places:
    """Where results, builds and logs go."""

    results_dir: Path = option(
        REPO / "results", "where tables and the run log go (a folder per machine inside)"
    )
    build_dir: Path = option(
        Path(os.environ.get(BUILD_DIR_VARIABLE) or REPO / ".cache" / "builds"),
        f"cache of built extensions, a folder per solution content and toolchain (default: "
        f"${BUILD_DIR_VARIABLE} if set, else .cache/builds)",
    )
    log_dir: Path = option(REPO / "logs", "full log of every solution's worker, a folder per run")


@dataclass(frozen=True)
class Settings:
    """Everything that decides how a run goes. `device`, `arch` and `secret` are resolved
    before it is made (run.py), so a worker and a record see the values really used."""

    device: str = option(
        "cpu",
        "'cuda', 'cuda:N' or 'cpu' (default: cuda when a GPU is visible)",
        resolved=True,
    )
    arch: str = option(
        "9.0",
        "TORCH_CUDA_ARCH_LIST to build for (default: the GPU present; without one, "
        "$TORCH_CUDA_ARCH_LIST or 9.0)",
        resolved=True,
    )
    audit: bool = option(
        True,
        "skip the problems' audit: no problem refused for a failing reference, no rows flagged "
        "for a weak problem",
        flag="--no-audit",
        action="store_false",
    )
    strict_audit: bool = option(
        False,
        "refuse a problem that a trivial answer passes (zeros, a constant, a memorised or "
        "random output), as the audit finds, instead of judging it with its rows flagged",
        action="store_true",
    )
    compile_cuda: bool = option(
        False,
        "on the CPU, compile CUDA solutions anyway, to check that they build (they cannot run "
        "there; CI does this)",
        action="store_true",
    )
    ncu: bool = option(
        False,
        "after timing, run one call per benchmark again under Nsight Compute (ncu) and record "
        "the bytes its kernels move; a row that moves less than the problem's minimum is flagged",
        action="store_true",
    )
    checking: Checking = Checking()
    timing: Timing = Timing()
    limits: Limits = Limits()
    places: Places = Places()

    def __post_init__(self) -> None:
        if self.checking.profile == KERNELBENCH and self.timing.graph:
            raise ValueError("--as kernelbench times call by call, as KernelBench does: no --graph")

    @property
    def results_folder_suffix(self) -> str:
        """The results folder's suffix: '-kernelbench' under --as kernelbench, '-bf16' under
        --precision bf16 (fp32 gets none), so rows judged two ways never share a table."""
        checking = self.checking
        kept = [checking.profile] if checking.profile != HARNESS else []
        return "".join(f"-{n}" for n in kept + [p for p in (checking.precision,) if p in LOW])

    @staticmethod
    def upgraded(data: Mapping[str, object]) -> Mapping[str, object]:
        """The JSON form of settings (harness.codec) from the flat form records had before
        (device, trials, seed, secret, rule, graph, flush, arch): each nested class reads its
        own keys from the flat dict (the codec ignores the others); missing values take the
        defaults."""
        return data if "checking" in data else {**data, "checking": data, "timing": data}


# Flags -------------------------------------------------------------------------------------


def add_flags(group: Any, cls: type, nested: bool = True) -> None:
    """Add a flag to `group` (an argparse group) for each option of `cls`, and with `nested`
    for those of the settings it holds (a Tolerance gives --atol and --rtol)."""
    for f in fields(cls):
        if isinstance(f.default, Tolerance):
            if nested:
                for name, help in TOLERANCE_FLAGS.items():
                    group.add_argument(f"--{name}", type=float, dest=name, help=help)
        elif dataclasses.is_dataclass(f.default):
            if nested:
                add_flags(group, type(f.default))
        elif "help" in f.metadata:
            flag = dict(f.metadata)
            name = flag.pop("flag", "--" + f.name.replace("_", "-"))
            flag.setdefault("default", _shown(f.default))
            if "action" not in flag:
                flag.setdefault("type", type(f.default))
            group.add_argument(name, dest=f.name, **flag)


def changed_flags(values: Any, skip: Collection[str] = ()) -> list[str]:
    """The flags that give each option of `values` (settings, and the settings they hold) that
    differs from its default, except the options named in `skip`: add_flags run backwards."""
    given: list[str] = []
    for f in fields(values):
        value = getattr(values, f.name)
        if f.name in skip or value == f.default:
            continue
        if isinstance(value, Tolerance):
            pairs = [(f"--{n}", getattr(value, n)) for n in TOLERANCE_FLAGS]
            given += [part for flag, v in pairs if v is not None for part in (flag, str(v))]
        elif dataclasses.is_dataclass(value):
            given += changed_flags(value, skip)
        elif "help" in f.metadata:
            name = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
            switch = f.metadata.get("action") in ("store_true", "store_false")
            given += [name] if switch else [name, str(typed(value))]
    return given


def typed(value: Any) -> Any:
    """A value as a command typed in the working folder takes it: a path inside that folder
    relative to it, any other value whole."""
    cwd = Path.cwd().resolve()
    if isinstance(value, Path) and value.resolve().is_relative_to(cwd):
        return value.resolve().relative_to(cwd)
    return value


def _shown(default: Any) -> Any:
    """A default as the user would type it: a path relative to where they stand."""
    return Path(os.path.relpath(default)) if isinstance(default, Path) else default


def from_flags(args: argparse.Namespace, **resolved: Any) -> Settings:
    """The settings the parsed flags describe, with `resolved` values (device, arch, secret)
    in place of the flags' unresolved ones; paths made absolute. Raises ValueError for
    values that cannot go together."""
    values = {**vars(args), **resolved}
    for name, value in values.items():
        if isinstance(value, Path):
            values[name] = value.resolve()
    if values.get("min_samples") is None:  # not given: the default, within --max-samples
        values["min_samples"] = min(StopRule.min_samples, values["max_samples"])
    return _from_values(Settings, values)


def _from_values(cls: type, values: dict[str, Any]) -> Any:
    nested = {}
    for f in fields(cls):
        if isinstance(f.default, Tolerance):
            nested[f.name] = Tolerance(values.get("atol"), values.get("rtol"))
        elif dataclasses.is_dataclass(f.default):
            nested[f.name] = _from_values(type(f.default), values)
        elif f.name in values and values[f.name] is not None:
            nested[f.name] = values[f.name]
    return cls(**nested)


def draw_secret(given: int | None) -> int:
    """The run's secret: the one given, else a fresh random one (never 0, the public seeds)."""
    return given if given is not None else secrets.randbelow(2**48) + 1
