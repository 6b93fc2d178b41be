"""nn.MultiLabelMarginLoss on 512x1024 scores with 1 to 10 positive labels per row.

Written from the GPUCodeForces seed task (shared/seeds/multilabel_margin_task.txt): same
operator, shapes and input distribution. Targets are int64, each row holds its positive class
indices followed by -1 padding; `reduction` is the init input.
"""

import numpy as np
import torch
import torch.nn as nn

BATCH_SIZE = 512
NUM_CLASSES = 1024
REDUCTION = "mean"
MIN_LABELS = 1  # positive labels per sample, inclusive range
MAX_LABELS = 10


class Model(nn.Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.loss_fn = nn.MultiLabelMarginLoss(reduction=reduction)

    def forward(self, input_tensor: torch.Tensor, target_tensor: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(input_tensor, target_tensor)


def make_inputs(
    batch_size: int, num_classes: int, min_labels: int = MIN_LABELS, max_labels: int = MAX_LABELS
) -> list[torch.Tensor]:
    """Random scores and a -1 padded target of distinct positive labels, as in the seed."""
    input_tensor = torch.randn(batch_size, num_classes, dtype=torch.float32)
    target = np.full((batch_size, num_classes), -1, dtype=np.int64)
    for row in range(batch_size):
        num_labels = np.random.randint(min_labels, min(max_labels, num_classes) + 1)
        target[row, :num_labels] = np.random.choice(num_classes, num_labels, replace=False)
    return [input_tensor.contiguous(), torch.from_numpy(target).contiguous()]


def get_inputs() -> list[torch.Tensor]:
    return make_inputs(BATCH_SIZE, NUM_CLASSES)


def get_init_inputs() -> list[str]:
    return [REDUCTION]


def count_bytes(inputs: list[torch.Tensor], output: torch.Tensor) -> int:
    """The least a kernel must move: every score, each row's labels up to and including its
    first -1 (the rest of the target is never needed), and the output."""
    scores, target = inputs
    rows = target.reshape(-1, target.shape[-1])
    padding = rows == -1
    first_pad = torch.where(padding.any(dim=1), padding.int().argmax(dim=1) + 1, rows.shape[1])
    labels_read = int(first_pad.sum())
    return (
        scores.numel() * scores.element_size()
        + labels_read * target.element_size()
        + output.numel() * output.element_size()
    )


# Edge cases. Each returns [input, target] with a few rows changed from make_inputs.


def _no_labels() -> list[torch.Tensor]:
    x, y = make_inputs(6, 40)
    y[[0, 3]] = -1  # the first entry is -1: the sample has no labels and a loss of 0
    return [x, y]


def _all_labels() -> list[torch.Tensor]:
    x, y = make_inputs(5, 48)
    for row in (0, 2):  # every class is a label, no -1: no negatives, a loss of 0
        y[row] = torch.randperm(48)
    return [x, y]


def _duplicate_labels() -> list[torch.Tensor]:
    x, y = make_inputs(4, 33)
    y[0, :5] = torch.tensor([3, 3, 7, 3, -1])  # label 3 three times: counted once per occurrence
    y[1, :4] = torch.tensor([32, 0, 32, -1])
    return [x, y]


def _labels_after_end() -> list[torch.Tensor]:
    x, y = make_inputs(5, 64)
    for row in range(5):  # entries after the first -1 are valid classes that must be ignored
        end = int((y[row] == -1).nonzero()[0])
        y[row, end + 1 :] = torch.randint(0, 64, (64 - end - 1,))
    return [x, y]


def _many_classes(classes: int, full_rows: tuple[int, ...], labels: tuple[int, int]):
    def inputs() -> list[torch.Tensor]:
        x, y = make_inputs(3, classes, *labels)
        for row in full_rows:  # every class a label: the longest possible label list
            y[row] = torch.randperm(classes)
        return [x, y]

    return inputs


def _unbatched() -> list[torch.Tensor]:
    x, y = make_inputs(1, 300)
    return [x[0], y[0]]  # (C,) and (C,): nn.MultiLabelMarginLoss accepts one unbatched sample


def _strided_view() -> list[torch.Tensor]:
    x, y = make_inputs(9, 70)
    return [x.t().contiguous().t(), y]  # same values, column-major strides


def _offset_view() -> list[torch.Tensor]:
    x, y = make_inputs(9, 64)
    storage = torch.randn(x.numel() + 1)
    storage[1:] = x.flatten()
    return [storage[1:].view(9, 64), y]  # starts one float into its storage: not 16-B aligned


def _label_out_of_range() -> list[torch.Tensor]:
    x, y = make_inputs(4, 40)
    y[1, :3] = torch.tensor([5, 40 + 3, -1])  # past the last class, before the first -1
    y[2, 0] = -7  # below -1
    return [x, y]


# Optional extras read by the harness (see README, "Problems").
ATOL = 1e-4
RTOL = 1e-4

CASES = [
    {"name": "sum", "init_inputs": ["sum"]},
    {"name": "none", "init_inputs": ["none"]},
    {"name": "7x37", "inputs": lambda: make_inputs(7, 37)},
    {"name": "no labels", "inputs": _no_labels, "init_inputs": ["none"]},
    {"name": "all labels", "inputs": _all_labels, "init_inputs": ["none"]},
    {"name": "duplicate labels", "inputs": _duplicate_labels, "init_inputs": ["none"]},
    {"name": "labels after -1", "inputs": _labels_after_end, "init_inputs": ["none"]},
    {"name": "N=1", "inputs": lambda: make_inputs(1, 1000)},
    {"name": "13x4099", "inputs": lambda: make_inputs(13, 4099), "init_inputs": ["sum"]},
    {"name": "C=10000 all labels", "inputs": _many_classes(10_000, (1,), (1, 10))},
    {"name": "C=40000 3000 labels", "inputs": _many_classes(40_000, (), (1500, 3000))},
    {"name": "unbatched", "inputs": _unbatched},
    {"name": "unbatched none", "inputs": _unbatched, "init_inputs": ["none"]},
    {"name": "strided view", "inputs": _strided_view, "init_inputs": ["none"]},
    {"name": "offset view", "inputs": _offset_view, "init_inputs": ["none"]},
    {"name": "label out of range", "inputs": _label_out_of_range, "invalid": True},
]

BENCHMARKS = [{"name": "4096x8192", "inputs": lambda: make_inputs(4096, 8192)}]
