"""The anti-cheat parts one by one, in this process: rules, poison, feeds, spot checks, timer
identity, the profiler's judgement, the static scan and the unseen-work cross-check."""

from __future__ import annotations

import random
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import run
from harness import loading, matching, verdicts
from harness.matching import Tolerance, mismatch
from harness.measure import anticheat, checking, feeding, profiling
from harness.measure.profiling import Kernel, Profile
from harness.run import discovery
from harness.verdicts import Verdict
from tests.conftest import FIXTURES

CPU = torch.device("cpu")


def rule_of(fn: Any, *args: Any) -> str | None:
    with pytest.raises(Verdict) as caught:
        fn(*args)
    assert caught.value.status == verdicts.REJECTED
    return caught.value.reason


def test_writing_to_an_input_is_rejected_unless_the_reference_does_it_too() -> None:
    pristine = [torch.arange(6.0)]
    untouched = [pristine[0].clone()]
    written = [pristine[0].clone().mul_(2)]
    call = anticheat.Call(written, torch.zeros(6))
    assert rule_of(anticheat.check_call, call, pristine, untouched, "c") == "input_mutated"
    # The reference writes the same into its own copy: then so may the solution.
    anticheat.check_call(call, pristine, [pristine[0].clone().mul_(2)], "c")


def test_a_write_outside_the_view_is_a_mutation_too() -> None:
    storage = torch.arange(10.0)
    view = storage[2:5]
    changed = storage.clone()
    changed[8] = -1  # outside the visible elements, inside the storage
    assert not anticheat.same_bytes(view, changed[2:5])
    assert anticheat.same_bytes(torch.tensor([float("nan")]), torch.tensor([float("nan")]))


def test_an_output_sharing_memory_with_an_input_is_rejected() -> None:
    x = torch.ones(4, 4)
    call = anticheat.Call([x], x[1])
    assert rule_of(anticheat.check_aliasing, call, [x.clone()], "c") == "output_aliases_input"
    anticheat.check_aliasing(anticheat.Call([x], x.clone()), [x.clone()], "c")


def test_a_tensor_subclass_is_not_a_plain_tensor() -> None:
    class Sub(torch.Tensor):
        pass

    assert rule_of(anticheat.require_plain, (torch.ones(1).as_subclass(Sub),), "c") == (
        "not_a_tensor"
    )
    anticheat.require_plain([torch.ones(1), 3.0], "c")


def test_work_finished_by_a_thread_after_the_call_is_late_work() -> None:
    def late(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        threading.Thread(target=lambda: (time.sleep(0.02), out.fill_(1))).start()
        return out

    assert rule_of(anticheat.watched_call, late, [torch.ones(3)], CPU, "c") == "late_work"
    made = anticheat.watched_call(lambda x: x + 1, [torch.ones(3)], CPU, "c")
    assert torch.equal(made.output, torch.full((3,), 2.0))


def test_poisoned_elements_are_counted_in_the_report() -> None:
    out = torch.zeros(4)
    out.view(torch.int32)[1:3] = -1  # two elements whose bytes are all 0xFF
    assert "2 output element(s) hold the harness's poison" in anticheat.poison_note(out)
    assert anticheat.poison_note(torch.zeros(4)) == ""


def test_perturb_swaps_two_values_of_one_row_of_the_first_float_input() -> None:
    labels = torch.arange(12).reshape(3, 4)
    x = torch.randn(3, 4)
    before = x.clone()
    feeding.perturb([labels, x], random.Random(1))
    assert torch.equal(labels, torch.arange(12).reshape(3, 4))  # integers are left alone
    changed = (x != before).nonzero()
    assert len(changed) == 2 and changed[0, 0] == changed[1, 0]  # two places, one row
    assert torch.equal(x.sort(dim=1).values, before.sort(dim=1).values)
    expanded = torch.randn(1, 4).expand(3, 4)
    kept = expanded.clone()
    feeding.perturb([expanded], random.Random(1))  # overlapping memory: not touched
    assert torch.equal(expanded, kept)


class Doubler(torch.nn.Module):
    def __init__(self, wrong_on: int = 0) -> None:
        super().__init__()
        self.calls, self.wrong_on = 0, wrong_on

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * 2 + (1 if self.calls == self.wrong_on else 0)


def fed(model: Any, sets: list[list[Any]] | None = None) -> feeding.Feed:
    """A feed whose every call is checked against Doubler (seeded, for the tests)."""
    criterion = lambda pristine: lambda expected, actual: mismatch(expected, actual, Tolerance())  # noqa: E731
    check = feeding.output_check(Doubler(), CPU, criterion)
    checker = feeding.SpotChecker(check, CPU, "benchmark 'b'", random.Random(0))
    checker.force(10**6)
    sets = sets or [[torch.randn(8, 8)], [torch.randn(8, 8)]]
    return feeding.Feed(model, sets, checker, random.Random(3))


def test_a_spot_check_catches_one_wrong_timed_call() -> None:
    feed = fed(Doubler(wrong_on=5))
    with pytest.raises(Verdict) as caught:
        for _ in range(6):
            feed.prepare()
            feed()
    assert caught.value.status == verdicts.INCORRECT
    assert "benchmark 'b', timed call 5" in caught.value.detail


def test_right_timed_calls_pass_their_spot_checks_with_fresh_inputs() -> None:
    feed = fed(Doubler())
    seen = set()
    for _ in range(6):
        feed.prepare()
        seen.add(tuple(feed.current[0].flatten().tolist()))
        feed()
    feed.prepare()
    assert feed.checker is not None and feed.checker.checked == 6
    assert len(seen) == 6  # every call saw different inputs


def test_work_the_timer_did_not_see_is_rejected() -> None:
    def threaded(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        # 200 ms of unseen work a call, far above what a busy 2-core CI machine adds to the
        # timer's figure of a thread's start (with 20 ms it once passed there)
        threading.Thread(target=lambda: (time.sleep(0.2), out.copy_(x))).start()
        return out

    feed = feeding.Feed(threaded, [[torch.ones(4)]])
    feed.prepare()
    timed_us = feeding._timer_us(feed, CPU, 10)  # what the timer sees: the thread's start alone
    time.sleep(0.3)  # those threads end
    with pytest.raises(Verdict) as caught:
        feeding.check_seen(feed, timed_us=timed_us, host_us=None, device=CPU)
    assert caught.value.reason == "unseen_work"
    honest = feeding.Feed(lambda x: x * 2, [[torch.ones(4)]])
    honest.prepare()
    assert feeding.check_seen(honest, timed_us=1e4, host_us=None, device=CPU) < 2e4


def test_a_machine_busy_through_one_whole_try_gets_a_second_try() -> None:
    calls = []

    def busy_at_first(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        time.sleep(0.005 if len(calls) <= 12 else 0.0005)  # the first try's 12 batches of one
        return x * 2

    feed = feeding.Feed(busy_at_first, [[torch.ones(4)]])
    feed.prepare()
    assert feeding.check_seen(feed, timed_us=1000.0, host_us=None, device=CPU) < 2000.0
    assert len(calls) == 36  # 12 batches of one, then 12 of one beside one timed as the timer does


def test_a_machine_busy_through_both_tries_is_told_from_work_the_timer_did_not_see() -> None:
    # Every call 5 ms where the timing read 1 ms (a busy machine: CI, 2026-12-03): the second
    # try times the calls as the timer does, slow too, so this is no unseen work.
    slow = feeding.Feed(lambda x: (time.sleep(0.005), x * 2)[1], [[torch.ones(4)]])
    slow.prepare()
    assert feeding.check_seen(slow, timed_us=1000.0, host_us=None, device=CPU) > 3050.0


def test_a_warm_call_runs_other_inputs_than_the_timed_calls_and_is_never_judged() -> None:
    seen: list[torch.Tensor] = []

    def model(x: torch.Tensor) -> torch.Tensor:
        seen.append(x)
        return x * 2

    feed = fed(model, [[torch.randn(8, 8)] for _ in range(3)])
    for _ in range(20):
        feed.prepare()
        feed.warm()
        warm = seen[-1]
        feed()
        assert warm is not feed.current[0] and seen[-1] is feed.current[0]
    feed.settle()
    assert feed.checker is not None and feed.checker.checked == 20  # the timed calls alone
    single = fed(model, [[torch.randn(8, 8)]])
    single.prepare()
    calls = len(seen)
    single.warm()  # no other inputs: no warm call, rather than one on the timed call's inputs
    assert len(seen) == calls


class FixesItsFirstOutput(torch.nn.Module):
    """Returns a wrong buffer on the first call of a check, and on the second (after the
    reference) writes the right answer into that buffer: the first output, held by the harness,
    would then match."""

    def __init__(self) -> None:
        super().__init__()
        self.first: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first is None:
            self.first = torch.zeros_like(x)
            return self.first
        self.first.copy_(x * 2)
        return x * 2


def test_a_call_that_changes_a_tensor_the_harness_holds_is_rejected() -> None:
    problem = loading.problem_from_module("double", Path("double.py"), double_problem())
    models = (Doubler(), FixesItsFirstOutput())
    case = problem.cases[0]
    assert rule_of(checking.check_once, problem, case, models, [torch.randn(3, 4)], CPU) == (
        "harness_data_changed"
    )
    assert (
        checking.check_once(problem, case, (Doubler(), Doubler()), [torch.randn(3, 4)], CPU) is None
    )


def double_problem() -> Any:
    module = type(sys)("double")
    module.Model = Doubler
    module.get_inputs = lambda: [torch.randn(3, 4)]
    module.get_init_inputs = lambda: []
    return module


def test_a_timed_input_set_overwritten_between_checks_is_rejected() -> None:
    """A timed call that zeroes the other input sets (as a gc search could) is caught when a
    later call on one of them is checked: the set no longer holds the values drawn for it."""
    sets = [[torch.randn(8, 8)], [torch.randn(8, 8)]]

    def zeroes_the_others(x: torch.Tensor) -> torch.Tensor:
        for other in sets:
            if other[0] is not x:
                other[0].zero_()
        return x * 2

    feed = fed(zeroes_the_others, sets)
    with pytest.raises(Verdict) as caught:
        for _ in range(20):
            feed.prepare()
            feed()
    assert caught.value.reason == "harness_data_changed"
    assert "no longer hold the values the harness drew" in caught.value.detail


@pytest.mark.parametrize(
    ("holder", "name"),
    [
        (torch.cuda, "Event"),
        (torch.cuda, "synchronize"),
        (time, "perf_counter"),
        (torch, "allclose"),
    ],
)
def test_a_replaced_timer_or_comparison_is_named(
    monkeypatch: pytest.MonkeyPatch, holder: Any, name: str
) -> None:
    snapshot = anticheat.Snapshot()
    snapshot.verify("before")
    monkeypatch.setattr(holder, name, lambda *a, **k: None)
    with pytest.raises(Verdict) as caught:
        snapshot.verify("after")
    assert (
        caught.value.reason == "timer_replaced" and f".{name} was replaced" in caught.value.detail
    )


def test_a_replaced_harness_function_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = anticheat.Snapshot()
    monkeypatch.setattr(matching, "mismatch", lambda *a, **k: None)
    with pytest.raises(Verdict) as caught:
        snapshot.verify("after")
    assert caught.value.reason == "harness_replaced"
    assert "harness.matching.mismatch was replaced" in caught.value.detail


PYTORCH_KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::Mul>(int, float*)"
OWN_KERNEL = "void scale_add_kernel<256>(float const*, float*, long)"


def test_kernel_names_are_reduced_to_their_function_name() -> None:
    assert profiling.kernel_name(OWN_KERNEL) == "scale_add_kernel"
    assert profiling.kernel_name(PYTORCH_KERNEL) == "vectorized_elementwise_kernel"
    anonymous = "void at::native::(anonymous namespace)::loss_kernel<float>(float*)"
    assert profiling.kernel_name(anonymous) == "loss_kernel"


def test_a_profile_that_saw_no_device_activity_is_taken_again(monkeypatch) -> None:
    """On the H200 a profile begun while the last one's CUPTI teardown ran saw nothing, and an
    honest solution was rejected as launching no kernel: such a profile is taken again."""
    monkeypatch.setattr(profiling, "PROFILE_PAUSE_S", 0.0)
    seen = profiling.Profile(frozenset(), (Kernel(OWN_KERNEL),))
    blank = profiling.Profile(frozenset(), ())
    answers = [blank, seen, blank]
    calls: list[torch.device] = []

    def profiler(call: Any, device: torch.device) -> profiling.Profile:
        calls.append(device)
        return answers.pop(0)

    cuda = torch.device("cuda")
    assert profiling.seen_profile(lambda: None, cuda, profiler) == seen and len(calls) == 2
    # A call that launches nothing shows nothing every time; on a CPU, no kernel is the rule.
    answers[:] = [blank] * profiling.PROFILE_TRIES
    assert profiling.seen_profile(lambda: None, cuda, profiler) == blank and not answers
    answers[:] = [blank, seen]
    assert profiling.seen_profile(lambda: None, CPU, profiler) == blank and answers == [seen]


def test_a_gpu_solution_must_launch_a_kernel_named_in_its_own_source(tmp_path: Path) -> None:
    source = tmp_path / "mine.py"
    source.write_text('CUDA = "__global__ void scale_add_kernel(...) {}"\n')
    cuda = torch.device("cuda")
    ops = frozenset({"aten::mul", "aten::add"})
    reference = profiling.Profile(ops, (Kernel(PYTORCH_KERNEL),))
    torch_only = profiling.Profile(ops, (Kernel(PYTORCH_KERNEL),))
    assert rule_of(profiling.judge, reference, torch_only, cuda, source, True) == "no_own_kernel"
    # A PyTorch kernel's name in the source does not make it the solution's own.
    source.write_text("# vectorized_elementwise_kernel\n")
    assert rule_of(profiling.judge, reference, torch_only, cuda, source, True) == "no_own_kernel"
    source.write_text('CUDA = "__global__ void scale_add_kernel(...) {}"\n')
    mine = profiling.Profile(frozenset({"aten::empty_like"}), (Kernel(OWN_KERNEL),))
    assert profiling.judge(reference, mine, cuda, source, True) == []


def test_on_a_cpu_calling_the_references_operator_is_a_warning(tmp_path: Path) -> None:
    reference = profiling.Profile(frozenset({"aten::multilabel_margin_loss"}), ())
    same = profiling.Profile(frozenset({"aten::multilabel_margin_loss", "aten::empty"}), ())
    warnings = profiling.judge(reference, same, CPU, tmp_path / "s.py", built=False)
    assert warnings == [
        "calls the reference's own operator(s) aten::multilabel_margin_loss",
        "built no extension: its work is PyTorch's own",
    ]


def test_the_profiler_sees_the_top_level_operators_only() -> None:
    x = torch.randn(4, 5)
    target = torch.full((4, 5), -1, dtype=torch.long)
    target[:, 0] = 1
    seen = profiling.profile(lambda: torch.nn.functional.multilabel_margin_loss(x, target), CPU)
    assert "aten::multilabel_margin_loss" in seen.ops
    assert "aten::multilabel_margin_loss_forward" not in seen.ops  # called inside it


# Kernels as the profiler names them, for synthetic profiles (durations in us).
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)"  # noqa: E501
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)"  # noqa: E501
RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, float, std::array<char*, 2ul>)"  # noqa: E501
GEMM = "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x16_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"  # noqa: E501
SUM = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)"  # noqa: E501
TOUCH = "void touch_kernel(float const*, float*)"
SOURCE = """CUDA = '''
__global__ void touch_kernel(const float* x, float* y) {}
__global__ void scale_add_kernel(const float* x, float* y, float scale, long n) {}
__global__ void bias_relu_kernel(float* y, const float* bias, long n) {}
__global__ void partial_sum_kernel(const float* x, float* partial, long n) {}
'''
"""
TOY_REFERENCE = Profile(frozenset({"aten::mul", "aten::add"}), (Kernel(MUL, 1.8), Kernel(ADD, 1.7)))
LINEAR_RELU = Profile(  # relu(x @ w.T + b) as PyTorch runs it: a gemm, then the bias and relu
    frozenset({"aten::matmul", "aten::add", "aten::relu"}),
    (Kernel(GEMM, 900.0), Kernel(ADD, 40.0), Kernel(RELU, 40.0)),
)


def judged(reference: Profile, solution: Profile, tmp_path: Path) -> list[str]:
    source = tmp_path / "solution.py"
    source.write_text(SOURCE)
    return profiling.judge(reference, solution, torch.device("cuda"), source, True)


def test_a_fig_leaf_kernel_beside_the_references_own_kernels_is_rejected(tmp_path: Path) -> None:
    """A tiny kernel of its own on a slice, then PyTorch's x * scale + 1: at the toy's size
    every kernel takes about the launch floor, so its own share is about a third."""
    fig_leaf = Profile(TOY_REFERENCE.ops, (Kernel(TOUCH, 1.2), Kernel(MUL, 1.8), Kernel(ADD, 1.7)))
    assert profiling.reruns_reference(TOY_REFERENCE, fig_leaf)
    shares = profiling.shares(TOY_REFERENCE, fig_leaf, SOURCE)
    assert shares.own == pytest.approx(1.2 / 4.7) and shares.reference == pytest.approx(3.5 / 4.7)
    with pytest.raises(Verdict) as caught:
        judged(TOY_REFERENCE, fig_leaf, tmp_path)
    assert caught.value.reason == "fig_leaf"
    assert caught.value.detail == (
        "launches every kernel the reference launches (2 launches, 74.5% of its device time) "
        "besides its own (touch_kernel, 25.5%): the answer is PyTorch's [rule: fig_leaf]"
    )
    # At a real size the leaf is a sliver: the same rule, with a wider margin.
    loss = Profile(frozenset({"aten::multilabel_margin_loss"}), (Kernel(SUM, 300.0),))
    leaf = Profile(loss.ops, (Kernel(TOUCH, 2.0), Kernel(SUM, 300.0)))
    assert rule_of(judged, loss, leaf, tmp_path) == "fig_leaf"


def test_a_level_2_solution_sharing_the_references_gemm_stays_ok_with_its_shares(
    tmp_path: Path,
) -> None:
    """cuBLAS's gemm, as the reference runs it, and its own kernel in place of the reference's
    bias and relu kernels: a small own share, but it replaced work rather than re-ran it all."""
    epilogue = Kernel("void bias_relu_kernel<float>(float*, float const*, long)", 45.0)
    fused = Profile(frozenset({"aten::matmul"}), (Kernel(GEMM, 900.0), epilogue))
    assert not profiling.reruns_reference(LINEAR_RELU, fused)
    shares = profiling.shares(LINEAR_RELU, fused, SOURCE)
    assert shares.own == pytest.approx(45 / 945) and shares.reference == pytest.approx(900 / 945)
    assert shares.pytorch == 0.0  # cuBLAS's kernel is the library's, not PyTorch's own
    assert judged(LINEAR_RELU, fused, tmp_path) == [
        "calls the reference's own operator(s) aten::matmul"
    ]


def test_an_honest_solution_does_all_its_device_time_in_its_own_kernels(tmp_path: Path) -> None:
    own = Kernel("void scale_add_kernel(float const*, float*, float, long)", 2.1)
    mine = Profile(frozenset(), (own,))
    shares = profiling.shares(TOY_REFERENCE, mine, SOURCE)
    assert (shares.own, shares.reference, shares.pytorch) == (1.0, 0.0, 0.0)
    assert judged(TOY_REFERENCE, mine, tmp_path) == []


def test_launching_the_references_kernels_too_is_fine_when_its_own_do_most_of_the_work(
    tmp_path: Path,
) -> None:
    """Its own partial sums over the input, finished by the torch.sum the reference calls."""
    reference = Profile(frozenset({"aten::sum"}), (Kernel(SUM, 50.0),))
    partial = Kernel("void partial_sum_kernel(float const*, float*, long)", 40.0)
    two_pass = Profile(frozenset({"aten::sum"}), (partial, Kernel(SUM, 3.0)))
    assert profiling.reruns_reference(reference, two_pass)
    assert profiling.shares(reference, two_pass, SOURCE).own == pytest.approx(40 / 43)
    assert judged(reference, two_pass, tmp_path) == [
        "calls the reference's own operator(s) aten::sum"
    ]


def test_launches_are_counted_and_pytorch_doing_most_of_the_work_is_a_warning(
    tmp_path: Path,
) -> None:
    """Fewer launches of a kernel than the reference made is no re-run of it; but with
    PyTorch's own kernels doing most of its time, the row says so."""
    reference = Profile(frozenset({"aten::add"}), (Kernel(ADD, 2.0), Kernel(ADD, 2.0)))
    once = Profile(frozenset({"aten::add"}), (Kernel(TOUCH, 1.0), Kernel(ADD, 2.0)))
    assert not profiling.reruns_reference(reference, once)
    assert judged(reference, once, tmp_path) == [
        "calls the reference's own operator(s) aten::add",
        "PyTorch's own kernels do 66.7% of its device time, its own 33.3%",
    ]
    assert not profiling.reruns_reference(Profile(frozenset(), ()), once)  # nothing to re-run


def test_a_library_kernel_the_reference_launches_is_never_the_solutions_own(
    tmp_path: Path,
) -> None:
    """Naming cuBLAS's gemm in a comment does not make it the solution's kernel."""
    reference = Profile(frozenset({"aten::mm"}), (Kernel(GEMM, 900.0),))
    source = tmp_path / "solution.py"
    source.write_text(f"# {GEMM}\n")
    cuda = torch.device("cuda")
    assert rule_of(profiling.judge, reference, reference, cuda, source, True) == "no_own_kernel"
    runtime = Profile(frozenset(), (Kernel("Memcpy DtoD (Device -> Device)", 5.0),))
    source.write_text("# DtoD\n")  # nor is the runtime's copy
    assert rule_of(profiling.judge, reference, runtime, cuda, source, True) == "no_own_kernel"


def test_without_kernel_durations_there_are_no_shares_and_no_fig_leaf_verdict(
    tmp_path: Path,
) -> None:
    untimed = Profile(TOY_REFERENCE.ops, (Kernel(TOUCH), Kernel(MUL), Kernel(ADD)))
    assert profiling.shares(TOY_REFERENCE, untimed, SOURCE) == profiling.Shares()
    assert judged(TOY_REFERENCE, untimed, tmp_path)[-1] == (
        "launches every kernel the reference launches, besides its own; "
        "no kernel durations to weigh them"
    )
    assert profiling.device_us(object()) is None  # a torch whose events lack time_range
    assert profiling.shares(TOY_REFERENCE, Profile(frozenset(), ()), SOURCE).own is None


def test_the_scan_names_what_it_found_in_the_cheats() -> None:
    found = {path.stem: discovery.scan(path) for path in sorted((FIXTURES / "cheats").glob("*.py"))}
    assert found["replaces_event"] == ["source: replaces torch.cuda.Event (line 18)"]
    assert "source: starts threads (line 3)" in found["background_thread"]
    assert any("data pointer" in w for w in found["replay_by_pointer"])
    assert any("CUDA stream of its own" in w for w in found["side_stream"])
    assert found["returns_nan"] == []
    cuda_in_a_string = Path(FIXTURES / "toy_solutions" / "cuda_kernel.py")
    assert discovery.scan(cuda_in_a_string) == []  # data_ptr() inside CUDA source is not Python


def test_the_scan_names_what_hides_names_from_it() -> None:
    """Names built at run time and pasted CUDA tokens are flagged as such: what they do is
    for the dynamic rules to catch (the fixtures' verdicts, in test_cheats and test_gpu)."""
    cheats = FIXTURES / "cheats"
    assert discovery.scan(cheats / "hides_names.py") == [
        f"source: {discovery.COMPUTED_NAME} (line 6)"
    ]
    assert discovery.scan(cheats / "token_pasting.py") == [f"source: {discovery.PASTED} (line 9)"]
    assert discovery.scan(cheats / "installs_at_run_time.py") == [
        "source: starts processes (an install at run time?) (line 5)",
        "source: reaches into the import path (sys.path) (line 20)",
    ]


def test_audit_flag_audits_without_running_solutions(capsys: pytest.CaptureFixture) -> None:
    weak = FIXTURES / "audit" / "returns_zeros.py"
    assert run.main(["--problem", str(weak), "--audit", "--device", "cpu"]) == run.EXIT_OK
    assert "weak zero_passes" in capsys.readouterr().out
    strict = ["--problem", str(weak), "--audit", "--device", "cpu", "--strict-audit"]
    assert run.main(strict) == run.EXIT_FAILED
    assert run.main(["--all", "--audit", "--device", "cpu"]) == run.EXIT_OK
    assert "multilabel_margin: ok" in capsys.readouterr().out


def test_a_run_refuses_a_problem_whose_reference_fails(cli: Any, capsys: Any) -> None:
    bad = FIXTURES / "audit" / "raising_inputs.py"
    good = FIXTURES / "toy_solutions" / "good.py"
    assert cli("--problem", str(bad), "--solution", str(good)) == run.EXIT_INPUT
    lines = capsys.readouterr().err.strip().splitlines()  # the audit's warnings, then the error
    errors = [line for line in lines if line.startswith("error:")]
    assert errors == lines[-1:]
    assert errors[0].startswith(
        "error: problem 'raising_inputs' fails its audit (error, its reference fails)"
    )
    # the command it names runs as printed: a KernelBench file is named by its path
    audit_it = shlex.split(errors[0].split("(all findings: ")[1].split(";")[0])
    assert (
        audit_it[:2] == ["python", "run.py"]
        and audit_it[-1] == "tests/fixtures/audit/raising_inputs.py"
    )
    assert run.main([*audit_it[2:], "--device", "cpu"]) == run.EXIT_FAILED
    assert "reject error" in capsys.readouterr().out
    assert cli.records() == []  # a single run refuses in one line; a sweep records it
