"""TrainingRows.targets_on: the update's per-token targets go to the engines' device, the rows stay.

Scoring leaves old logprobs, values and advantages on the CPU while the losses meet them with model
outputs on the engine's device; on a CUDA GPU the first critic step failed with "Expected all tensors to
be on the same device" before the update moved them. The meta device stands in for a second device here.
"""

import torch

from verlog.scoring import Rows
from verlog.update import TrainingRows


def _rows(M: int = 3, S: int = 5, R: int = 2) -> Rows:
    return Rows(input_ids=torch.ones(M, S, dtype=torch.long), attention_mask=torch.ones(M, S, dtype=torch.long),
                prompt_lengths=torch.full((M,), S - R), response_ids=torch.ones(M, R, dtype=torch.long),
                response_mask=torch.ones(M, R, dtype=torch.bool))


def _data(with_critic: bool) -> TrainingRows:
    g = torch.Generator().manual_seed(0)
    t = lambda: torch.randn(3, 2, generator=g)  # noqa: E731
    return TrainingRows(_rows(), torch.ones(3, 2, dtype=torch.bool), t(), t(), ref_logprobs=t() if with_critic else None,
                        old_values=t() if with_critic else None, returns=t() if with_critic else None)


def test_targets_move_rows_stay():
    data = _data(with_critic=True)
    moved = data.targets_on("meta")
    for name in ("mask", "old_logprobs", "advantages", "ref_logprobs", "old_values", "returns"):
        before, after = getattr(data, name), getattr(moved, name)
        assert after.device.type == "meta", name
        assert (after.shape, after.dtype) == (before.shape, before.dtype), name
        assert before.device.type == "cpu", name  # the original is left as it was
    assert moved.rows is data.rows
    assert moved.rows.input_ids.device.type == "cpu"


def test_absent_targets_stay_absent_and_values_survive():
    data = _data(with_critic=False)
    same = data.targets_on("cpu")
    assert same.ref_logprobs is None and same.old_values is None and same.returns is None
    assert torch.equal(same.old_logprobs, data.old_logprobs) and torch.equal(same.advantages, data.advantages)
    assert torch.equal(same.mask, data.mask)
