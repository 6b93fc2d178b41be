"""MultiLabelMarginLoss on the CPU: a C++ loop over samples, parallel with at::parallel_for.

Same strategy as the CUDA seed, one sample per work item: find the sample's labels (entries up
to the first -1), mark the non-target classes in a mask, then for every label j and every
non-target class i add max(0, 1 - x[y_j] + x[i]). Terms are float and sums double, as in
PyTorch's CPU kernel; the hinge is a bit mask rather than a branch (the sign of each term is
random, so a branch mispredicts) and four partial sums run side by side. Each sample's loss
(sum / C) is written as float32; 'mean' and 'sum' are one torch call on those N values.

Semantics follow nn.MultiLabelMarginLoss: labels after the first -1 are ignored, a duplicated
label counts once per occurrence, 1-D input (C,) gives 0-D results. A label outside [-1, C) is
invalid input: like PyTorch, the whole target is checked first and such a label raises. The
check is in Python: on the lent H200 machine (torch 2.11, its own g++), an exception thrown from
inside this extension crashed the process instead of reaching Python.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

// Samples per parallel chunk: enough work (rows * classes) that a thread is worth starting.
constexpr int64_t kGrainWork = 32768;

// max(z, 0) if keep is all ones, else 0; a NaN z gives 0, as PyTorch's `if (z > 0) sum += z`
// skips it. Written as a bit mask because the sign of z is random: a branch would mispredict.
static inline float masked_hinge(float z, uint32_t keep) {
  uint32_t bits;
  std::memcpy(&bits, &z, sizeof(bits));
  bits &= keep & (0u - static_cast<uint32_t>(z > 0.0f));
  std::memcpy(&z, &bits, sizeof(bits));
  return z;
}

// Hinge sum of one sample. keep: scratch of `classes` words, all ones for non-target classes.
static double sample_hinge_sum(const float* x, const int64_t* y, int64_t classes,
                               uint32_t* keep) {
  // Labels run up to the first -1 (every entry is in [-1, C): checked by the caller).
  int64_t count = 0;
  while (count < classes && y[count] >= 0 && y[count] < classes) {
    ++count;
  }
  std::fill(keep, keep + classes, ~0u);
  for (int64_t k = 0; k < count; ++k) {
    keep[y[k]] = 0u;
  }
  // Terms in float, sums in double, like PyTorch. Four partial sums: four independent add
  // chains, which the compiler can overlap, instead of one that waits on every add.
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  for (int64_t k = 0; k < count; ++k) {  // a duplicated label is summed once per occurrence
    const float margin = 1.0f - x[y[k]];
    int64_t i = 0;
    for (; i + 4 <= classes; i += 4) {
      s0 += masked_hinge(margin + x[i], keep[i]);
      s1 += masked_hinge(margin + x[i + 1], keep[i + 1]);
      s2 += masked_hinge(margin + x[i + 2], keep[i + 2]);
      s3 += masked_hinge(margin + x[i + 3], keep[i + 3]);
    }
    for (; i < classes; ++i) {
      s0 += masked_hinge(margin + x[i], keep[i]);
    }
  }
  return (s0 + s1) + (s2 + s3);
}

// Per-sample losses, shape (N,), for input (N, C), (C,) or a 0-D scalar.
torch::Tensor multilabel_margin_per_sample(torch::Tensor input, torch::Tensor target) {
  TORCH_CHECK(input.device().is_cpu() && target.device().is_cpu(),
              "multilabel_margin: input and target must be CPU tensors");
  TORCH_CHECK(input.scalar_type() == at::kFloat,
              "multilabel_margin: input must be float32, got ", input.scalar_type());
  TORCH_CHECK(target.scalar_type() == at::kLong,
              "multilabel_margin: target must be int64, got ", target.scalar_type());
  TORCH_CHECK(input.dim() <= 2,
              "multilabel_margin: input must be (N, C) or (C,), got shape ", input.sizes());
  const int64_t rows = input.dim() == 2 ? input.size(0) : 1;
  const int64_t classes = input.dim() == 2 ? input.size(1) : input.numel();
  TORCH_CHECK(classes > 0, "multilabel_margin: need at least one class, got shape ",
              input.sizes());
  if (input.dim() == 2) {
    TORCH_CHECK(target.sizes() == input.sizes(), "multilabel_margin: target shape ",
                target.sizes(), " does not match input shape ", input.sizes());
  } else {
    TORCH_CHECK(target.dim() <= 1 && target.numel() == classes, "multilabel_margin: target shape ",
                target.sizes(), " does not match input shape ", input.sizes());
  }

  const torch::Tensor x = input.contiguous();
  const torch::Tensor y = target.contiguous();
  torch::Tensor out = at::empty({rows}, x.options());
  const float* x_data = x.data_ptr<float>();
  const int64_t* y_data = y.data_ptr<int64_t>();
  float* out_data = out.data_ptr<float>();

  const int64_t grain = std::max<int64_t>(1, kGrainWork / classes);
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<uint32_t> keep(classes);
    for (int64_t row = begin; row < end; ++row) {
      const double sum = sample_hinge_sum(x_data + row * classes, y_data + row * classes,
                                          classes, keep.data());
      out_data[row] = static_cast<float>(sum / static_cast<double>(classes));
    }
  });
  return out;
}
"""

_ext = load_inline(
    name="multilabel_margin_cpu_cpp",
    cpp_sources=CPP_SOURCE,
    functions=["multilabel_margin_per_sample"],
    # -fopenmp: at::parallel_for is inline and runs serially unless compiled with OpenMP.
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        if reduction not in ("none", "mean", "sum"):
            raise ValueError(f"{reduction} is not a valid value for reduction")
        self.reduction = reduction

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        classes = input.shape[-1] if input.dim() > 0 else 1
        if target.numel() > 0:  # PyTorch checks every entry, those after the first -1 too
            lowest, highest = torch.aminmax(target)
            if lowest < -1 or highest >= classes:
                bad = int(lowest) if lowest < -1 else int(highest)
                raise ValueError(f"target holds label {bad}, outside [-1, {classes})")
        losses = _ext.multilabel_margin_per_sample(input, target)  # (N,)
        if self.reduction == "mean":
            return losses.mean()
        if self.reduction == "sum":
            return losses.sum()
        # nn.MultiLabelMarginLoss gives a 0-D result for a single unbatched sample.
        return losses if input.dim() == 2 else losses.reshape(())
