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


# Optional extras read by the harness (see README, "Problems").
ATOL = 1e-4
RTOL = 1e-4

CASES = [
    {"name": "sum", "init_inputs": ["sum"]},
    {"name": "none", "init_inputs": ["none"]},
    {"name": "7x37", "inputs": lambda: make_inputs(7, 37)},
]
