"""The zero-argument calls the timer samples, one per side: each model fed fresh inputs from
its own copies of a few input sets (harness.measure.feeding), or, in CUDA-graph mode, a graph
replaying K calls on K input sets, K chosen so that the sets together exceed twice the L2 and
each call still starts with its inputs out of cache. With a backward `step`
(harness.measure.passes), each set is led by its upstream gradients and each call is that pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from harness import status
from harness.inputs import make_inputs, replicate_all
from harness.loading import Case
from harness.measure import feeding, passes, roofline
from harness.measure.checking import describe_error, guard
from harness.settings import Settings

MAX_GRAPH_SETS = 256
FEED_BYTES = 1 << 30  # input sets per side for the timed calls: at most this many bytes ...
FEED_SETS = (2, 4)  # ... and between this many sets


def make_calls(
    models: dict[str, Any],
    drawn: tuple[Case, int],
    inputs: list[Any],
    device: torch.device,
    settings: Settings,
    checker: feeding.SpotChecker | None = None,
    step: passes.Pass | None = None,
) -> tuple[dict[str, Callable[[], object]], int, str | None]:
    """The zero-argument calls to time, how many model calls each makes, and a note."""
    if settings.timing.mode(device.type) == "cuda_graph":
        try:
            sets = input_sets(drawn, inputs, device, _graph_count(inputs, device), step)
            replays = {name: _graphed(model, sets, device, step) for name, model in models.items()}
            return replays, len(sets), None
        except Exception as err:  # not capturable: time it call by call, and say so
            torch.cuda.synchronize(device)
            note = f"CUDA graph capture failed ({describe_error(err)}); timed call by call"
            return _fed(models, drawn, inputs, device, checker, step), 1, note
    return _fed(models, drawn, inputs, device, checker, step), 1, None


def _fed(
    models: dict[str, Any],
    drawn: tuple[Case, int],
    inputs: list[Any],
    device: torch.device,
    checker: feeding.SpotChecker | None,
    step: passes.Pass | None,
) -> dict[str, Callable[[], object]]:
    """Each model fed from its own copies of the same input sets (harness.feeding); the
    solution's calls spot-checked by `checker`."""
    each = max(roofline.tensor_bytes(inputs), 1)
    count = min(FEED_SETS[1], max(FEED_SETS[0], FEED_BYTES // each))
    sets = input_sets(drawn, inputs, device, count, step)
    fed: dict[str, Callable[[], object]] = {}
    for name, model in models.items():
        own = [replicate_all(s, device) for s in sets]
        call = step.wrap(model, own) if step else model
        fed[name] = feeding.Feed(call, own, checker if name == "solution" else None)
    return fed


def _graph_count(inputs: list[Any], device: torch.device) -> int:
    """Enough input sets that together they exceed twice the L2 (at least 2, at most 256)."""
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    each = max(roofline.tensor_bytes(inputs), 1)
    return min(MAX_GRAPH_SETS, max(2, math.ceil(2 * l2 / each)))


def input_sets(
    drawn: tuple[Case, int],
    inputs: list[Any],
    device: torch.device,
    count: int,
    step: passes.Pass | None = None,
) -> list[list[Any]]:
    """`inputs` and `count - 1` more sets, drawn from the seeds after the benchmark's; with a
    `step`, each led by its upstream gradients."""
    bench, seed = drawn
    sets = [inputs] + [
        guard(status.PROBLEM_ERROR, "get_inputs", make_inputs, bench, seed + k, device)
        for k in range(1, count)
    ]
    return [step.extend(s, seed + k) for k, s in enumerate(sets)] if step else sets


def _graphed(
    model: Any, sets: list[list[Any]], device: torch.device, step: passes.Pass | None = None
) -> Callable[[], object]:
    """A replay of one CUDA graph calling `model` (or its `step`) once on each input set."""
    own = [replicate_all(inputs, device) for inputs in sets]
    model = step.wrap(model, own) if step else model
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side), torch.no_grad():
        for inputs in own[:2]:  # warm up off the capture, as torch's graph docs ask
            model(*inputs)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        for inputs in own:
            model(*inputs)
    return graph.replay
