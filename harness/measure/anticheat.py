"""The rules a solution's call must keep for its result to mean anything, checked on every call
the harness inspects (each correctness check, and spot checks among the timed calls).

A broken rule ends the job with status "rejected" and the rule's name as the reason:

  not_a_tensor          an output is a torch.Tensor subclass (a lazy tensor that computes later,
                        say), not a plain torch.Tensor
  stream_switched       the call left a different current CUDA stream, which the timer's events
                        would then be recorded on
  late_work             the output changed after the call returned: work on another stream or
                        thread that the timer's events could not see
  output_aliases_input  an output shares memory with an input
  input_mutated         the call wrote to its inputs (the reference does not)
  nondeterministic      two calls on the same inputs disagree beyond the tolerance (a race, or
                        outputs replayed from an earlier call)
  harness_data_changed  a tensor the harness held during the call changed: its pristine copy of
                        the inputs, the expected output, an earlier output, a timed call's input
                        set (found through gc or the callers' frames, and overwritten)

Freed memory is poisoned (every byte 0xFF: NaN for floats, -1 for integers) before each call, so
a solution that returns memory it never wrote gets NaN, not a result some earlier computation
left behind; `poison_note` names it in the mismatch report.

Notice a solution that replaces what the harness measures or judges with.

Before the solution is imported, the worker records the identity of every clock, CUDA timing
and synchronisation function, every comparison function of torch, and every function and class
of the harness's own modules. After the import, after the checks and after the timing, each must
still be the same object: a solution that swaps `torch.cuda.Event`, `torch.cuda.synchronize`,
`time.perf_counter`, `torch.allclose` or `harness.matching.mismatch` is rejected with reason
"timer_replaced" (or "harness_replaced"), naming what it replaced.

Attributes a module gains later are not checked (torch adds lazily imported submodules); only
replacements of what was there are.
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from harness import verdicts
from harness.accuracy import blocks
from harness.matching import mismatch
from harness.tolerance import EXACT
from harness.verdicts import Verdict

POISON_BYTE = 0xFF
JOIN_S = 2.0  # how long to wait for threads a call left running
INT_OF_WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
FINGERPRINT_CHUNK = 1 << 24  # elements squared at a time, so the temporaries stay small


def reject(reason: str, detail: str) -> Verdict:
    """The `rejected` verdict of rule `reason` (one of harness.verdicts.REJECTIONS)."""
    if reason not in verdicts.REJECTIONS:
        raise ValueError(f"{reason!r} is not a rule of harness.verdicts.REJECTIONS")
    return Verdict(verdicts.REJECTED, f"{detail} [rule: {reason}]", reason)


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor in a (nested) tuple or list, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in tensors_in(item)]
    return []


def poison(device: torch.device, sizes: Iterable[int]) -> None:
    """Fill freed memory of these byte sizes with POISON_BYTE: allocate, fill and free a block
    of each size, so the allocator hands those blocks out next (torch's caching allocator on
    CUDA picks the same best-fitting block for the same size)."""
    held = []
    for size in sorted(set(sizes)):
        try:
            held.append(
                torch.full((max(int(size), 1),), POISON_BYTE, dtype=torch.uint8, device=device)
            )
        except torch.OutOfMemoryError:  # poison what fits: the rest of the device is in use
            print(
                f"anticheat: no room to poison a block of {size} bytes; the larger ones unpoisoned"
            )
            break
    del held


def output_sizes(value: Any) -> list[int]:
    """The byte sizes of the tensors in `value` (what the next output will likely ask for)."""
    return [t.numel() * t.element_size() for t in tensors_in(value)]


def poison_note(actual: Any) -> str:
    """'; N elements hold the poison ...' when an output holds poisoned bytes, else ''."""
    count = 0
    for tensor in tensors_in(actual):
        width = INT_OF_WIDTH.get(tensor.element_size())
        if width is None or tensor.device.type == "meta" or tensor.is_complex():
            continue
        words = tensor.detach().view(width)
        count += sum(int((words[i] == _all_ones(width)).sum()) for i in blocks(words.shape))
    if not count:
        return ""
    return (
        f"; {count} output element(s) hold the harness's poison bytes (0x{POISON_BYTE:X}): "
        "memory the solution never wrote"
    )


def _all_ones(dtype: torch.dtype) -> int:
    return 255 if dtype == torch.uint8 else -1


def require_plain(output: Any, label: str) -> None:
    """Every output tensor is exactly a torch.Tensor, not a subclass that could compute later."""
    for tensor in tensors_in(output):
        if type(tensor) is not torch.Tensor:
            raise reject(
                "not_a_tensor",
                f"{label}: returned a {type(tensor).__name__}, a subclass of torch.Tensor; "
                "return a plain torch.Tensor holding the result",
            )


@dataclass
class Call:
    """One call of a solution: the inputs it was given (as they are after the call) and its
    output."""

    inputs: list[Any]
    output: Any


def watched_call(model: Any, inputs: list[Any], device: torch.device, label: str) -> Call:
    """Call `model(*inputs)` and make sure all its work was done by the time it returned.

    The output is copied as soon as the current stream (the one the timer's events see) has
    finished; then every other stream and every thread the call started is waited for, and the
    output must still equal the copy.
    """
    threads = set(threading.enumerate())
    stream = torch.cuda.current_stream(device) if device.type == "cuda" else None
    output = model(*inputs)
    if stream is not None:
        if torch.cuda.current_stream(device) != stream:
            torch.cuda.set_stream(stream)
            raise reject(
                "stream_switched",
                f"{label}: the call changed the current CUDA stream; launch on "
                "torch.cuda.current_stream() or wait for your streams before returning",
            )
        stream.synchronize()
    require_plain(output, label)
    snapshot = [_snapshot(t) for t in tensors_in(output)]
    wait_for_all(device, threads)
    for index, (before, after) in enumerate(zip(snapshot, tensors_in(output), strict=True)):
        if after.device.type == "meta":
            continue  # no data to change (and the comparison will say it is on the wrong device)
        if _changed(before, after):
            raise reject(
                "late_work",
                f"{label}: output {index} changed after the call returned (work on another "
                "stream or thread, unseen by the timer); finish all work on the current "
                "stream before returning",
            )
    return Call(inputs, output)


SNAPSHOT_BYTES = 1 << 30  # an output up to this size is copied to see late work; above, summed


def _snapshot(output: torch.Tensor) -> torch.Tensor | tuple[int, ...]:
    """What `_changed` compares the output with after every stream and thread is waited for:
    a copy, or for an output above SNAPSHOT_BYTES the fingerprint of its elements (bounded
    memory; it changes when the elements do, see `fingerprint`)."""
    if output.numel() * output.element_size() <= SNAPSHOT_BYTES or output.is_complex():
        return output.detach().clone()
    return element_fingerprint(output)


def _changed(before: torch.Tensor | tuple[int, ...], after: torch.Tensor) -> bool:
    if isinstance(before, torch.Tensor):
        return mismatch(before, after, EXACT) is not None
    return element_fingerprint(after) != before


def element_fingerprint(tensor: torch.Tensor) -> tuple[int, ...]:
    """`fingerprint` of a tensor's own elements (not the rest of its storage), a block at a
    time; for a tensor of a width INT_OF_WIDTH has."""
    words = tensor.detach().view(INT_OF_WIDTH[tensor.element_size()])
    total = torch.zeros(2, dtype=torch.int64, device=tensor.device)
    for index in blocks(words.shape):
        chunk = words[index].to(torch.int64)
        total += torch.stack([chunk.sum(), (chunk * chunk).sum()])
    return tuple(total.tolist())


def wait_for_all(device: torch.device, threads_before: set[threading.Thread]) -> None:
    """Wait for every thread started since `threads_before` and for the whole device."""
    for thread in set(threading.enumerate()) - threads_before:
        if thread is not threading.current_thread():
            thread.join(JOIN_S)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_call(call: Call, pristine: list[Any], reference_inputs: list[Any], label: str) -> None:
    """The call did not alias or overwrite its inputs (unless the reference does the same)."""
    check_aliasing(call, reference_inputs, label)
    for index, (original, given, by_reference) in enumerate(
        zip(pristine, call.inputs, reference_inputs, strict=True)
    ):
        if not isinstance(original, torch.Tensor):
            continue
        if same_bytes(original, by_reference):  # the reference leaves its inputs alone
            if not same_bytes(original, given):
                raise reject(
                    "input_mutated",
                    f"{label}: the call wrote to input {index}; a solution must leave its "
                    "inputs unchanged",
                )
        elif report := mismatch(by_reference, given):
            raise Verdict(
                verdicts.INCORRECT,
                f"{label}: input {index} after the call differs from the reference's: {report}",
            )


def check_aliasing(call: Call, reference_inputs: list[Any], label: str) -> None:
    if any(_overlaps(out, tensors_in(reference_inputs)) for out in tensors_in(call.output)):
        return  # the reference returns a view of its input: so may the solution
    for index, out in enumerate(tensors_in(call.output)):
        if _overlaps(out, tensors_in(call.inputs)):
            raise reject(
                "output_aliases_input",
                f"{label}: output {index} shares memory with an input; return a new tensor",
            )


def _overlaps(tensor: torch.Tensor, others: list[torch.Tensor]) -> bool:
    if tensor.device.type == "meta" or tensor.numel() == 0:
        return False
    start, size = _span(tensor)
    for other in others:
        if other.device != tensor.device or other.device.type == "meta" or other.numel() == 0:
            continue
        other_start, other_size = _span(other)
        if start < other_start + other_size and other_start < start + size:
            return True
    return False


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors' whole storages hold the same bytes (NaN-safe, padding included)."""
    if a.device.type == "meta" or b.device.type == "meta":
        return True
    first, second = _bytes(a), _bytes(b).to(a.device)
    if first.shape != second.shape:
        return False
    return all(torch.equal(first[i], second[i]) for i in blocks(first.shape))


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    storage = tensor.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(storage)


def fingerprint(values: Any) -> tuple[int, ...]:
    """Two integers per tensor among `values`, computed where it lives, that change when its
    storage's elements change as a multiset: the sum of their bit patterns and of their squares
    (each wrapping). Swapping two elements (feeding.perturb) keeps them; overwriting,
    zeroing or filling in does not. Reordering is not seen, and needs not be: a permuted copy of
    the inputs still asks for the work, and a permuted copy of the answer still needs it done.

    Held as Python integers, which no search of the process for tensors finds or changes. A tamper
    check against code that reaches the harness's tensors (gc, frames), not a cryptographic hash.
    """
    sums: list[int] = []
    for tensor in tensors_in(values):
        if tensor.device.type == "meta":
            continue
        words = _words(tensor)
        total = torch.zeros(2, dtype=torch.int64, device=tensor.device)
        for start in range(0, words.numel(), FINGERPRINT_CHUNK):
            chunk = words[start : start + FINGERPRINT_CHUNK]
            squares = (chunk * chunk).sum(dtype=torch.int64)
            total += torch.stack([chunk.sum(dtype=torch.int64), squares])
        sums.extend(total.tolist())
    return tuple(sums)


def _words(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's whole storage as integers as wide as its elements (bytes where none fits)."""
    raw = _bytes(tensor)
    width = tensor.element_size()
    dtype = INT_OF_WIDTH.get(width, torch.int64 if width % 8 == 0 else torch.uint8)
    if raw.numel() % dtype.itemsize:
        dtype = torch.uint8
    return raw.view(dtype)


def require_unchanged(values: Any, before: tuple[int, ...], what: str, label: str) -> None:
    """Reject the call when `values`, held by the harness, no longer have the fingerprint they
    had before it (see `fingerprint`)."""
    if fingerprint(values) != before:
        raise reject(
            "harness_data_changed",
            f"{label}: {what} changed during the call; a solution must not touch the "
            "harness's tensors (found through gc or its callers' frames, say)",
        )


# (object holding the attribute, its name for messages, the attributes to watch)
TIMERS: tuple[tuple[Any, str, tuple[str, ...]], ...] = (
    (time, "time", ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time")),
    (
        torch.cuda,
        "torch.cuda",
        (
            "Event",
            "synchronize",
            "current_stream",
            "set_stream",
            "Stream",
            "_sleep",
            "graph",
            "CUDAGraph",
        ),
    ),
    (torch.cuda.Event, "torch.cuda.Event", ("record", "elapsed_time", "synchronize", "query")),
    (torch.cuda.CUDAGraph, "torch.cuda.CUDAGraph", ("replay", "capture_begin", "capture_end")),
    (torch.cuda.Stream, "torch.cuda.Stream", ("synchronize", "wait_stream", "record_event")),
    (
        torch,
        "torch",
        ("isclose", "allclose", "equal", "isnan", "isfinite", "no_grad"),
    ),
    (
        torch.Tensor,
        "torch.Tensor",
        ("clone", "copy_", "to", "cpu", "detach", "view", "any", "all", "sum", "item", "__eq__"),
    ),
)
HARNESS_PREFIX = "harness"


class Snapshot:
    """The identities of the watched attributes at one moment."""

    def __init__(self) -> None:
        self.timers = {
            f"{label}.{name}": (holder, name, _current(holder, name))
            for holder, label, names in TIMERS
            for name in names
            if hasattr(holder, name)
        }
        self.harness = {
            f"{module_name}.{name}": (module, name, value)
            for module_name, module in _harness_modules()
            for name, value in vars(module).items()
            if callable(value) and not name.startswith("__")
        }
        self.torch = {
            f"{label}.{name}": (holder, name, _static(holder, name))
            for holder, label in _torch_namespaces()
            for name in _names(holder)
        }

    def verify(self, when: str) -> None:
        """Raise a rejection naming the first watched attribute that was replaced."""
        for shown, (holder, name, original) in self.timers.items():
            if _current(holder, name) is not original:
                raise reject(
                    "timer_replaced",
                    f"{shown} was replaced ({when}); a solution must not touch the "
                    "clocks, timers or comparisons the harness uses",
                )
        for shown, (module, name, original) in self.harness.items():
            if vars(module).get(name) is not original:
                raise reject(
                    "harness_replaced",
                    f"{shown} was replaced ({when}): the harness is not the solution's to change",
                )
        for shown, (holder, name, original) in self.torch.items():
            if _static(holder, name) is not original:
                raise reject(
                    "torch_replaced",
                    f"{shown} was replaced ({when}): a solution must not change PyTorch's own "
                    "functions, which the reference calls (its referee's process has them whole)",
                )


def _current(holder: Any, name: str) -> Any:
    # A class's own __dict__ entry, so a bound method's fresh wrapper object does not count.
    return vars(holder).get(name) if isinstance(holder, type) else getattr(holder, name, None)


def _names(holder: Any) -> list[str]:
    """The callable names of a torch module, or every name of a class, its bases' too (so a
    method set on the class over an inherited one counts as replaced)."""
    if isinstance(holder, type):
        return dir(holder)
    return [name for name, value in vars(holder).items() if callable(value)]


def _static(holder: Any, name: str) -> Any:
    """What `holder.name` is, found without running a descriptor or a module's __getattr__."""
    return inspect.getattr_static(holder, name, None)


def _torch_namespaces() -> list[tuple[Any, str]]:
    """The namespaces of torch whose functions a reference calls: replacing one of them
    changes the reference as the solution's process would run it."""
    import torch.nn.functional as functional

    return [
        (torch, "torch"),
        (functional, "torch.nn.functional"),
        (torch.Tensor, "torch.Tensor"),
        (torch.linalg, "torch.linalg"),
        (torch.special, "torch.special"),
        (torch.fft, "torch.fft"),
    ]


def _harness_modules() -> list[tuple[str, Any]]:
    return [
        (name, module)
        for name, module in sorted(sys.modules.items())
        if module is not None and (name == HARNESS_PREFIX or name.startswith(HARNESS_PREFIX + "."))
    ]
