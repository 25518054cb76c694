"""Log-probabilities and entropies from logits, chunked: against log_softmax and hand-worked numbers."""

import math

import pytest
import torch

from verlog.algos.logprobs import entropy_from_logits, logprobs_from_logits

torch.set_num_threads(1)
F64 = torch.float64


# --------------------------------------------------------------------------------------
# logprobs / entropy
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("chunk_rows", [1, 5, 1024])
def test_logprobs_match_log_softmax_gather(chunk_rows):
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(3, 7, 11, generator=gen, dtype=F64)).requires_grad_(True)
    labels = torch.randint(0, 11, (3, 7), generator=gen)
    out = logprobs_from_logits(logits, labels, chunk_rows=chunk_rows)
    ref = torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    (g,) = torch.autograd.grad(out.sum(), logits)
    (g_ref,) = torch.autograd.grad(ref.sum(), logits)
    torch.testing.assert_close(g, g_ref, atol=1e-12, rtol=0)


def test_logprobs_hand_numbers_and_bf16_upcast():
    # logits [0, ln 3]: softmax = [1/4, 3/4]
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    out = logprobs_from_logits(logits, torch.tensor([[1]]))
    assert out.item() == pytest.approx(math.log(0.75), abs=1e-6)
    out_bf16 = logprobs_from_logits(logits.to(torch.bfloat16), torch.tensor([[0]]))
    assert out_bf16.dtype == torch.float32
    assert out_bf16.item() == pytest.approx(math.log(0.25), abs=1e-2)  # bf16 rounding of ln 3


def test_logprobs_bad_labels_raise():
    logits = torch.zeros(2, 3, 5)
    with pytest.raises(ValueError, match=r"labels must be token ids in \[0, 5\)"):
        logprobs_from_logits(logits, torch.full((2, 3), 5))
    with pytest.raises(ValueError, match="labels must have shape"):
        logprobs_from_logits(logits, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="labels must be an int64"):
        logprobs_from_logits(logits, torch.zeros(2, 3, dtype=torch.int32))


def test_entropy_matches_reference_and_limits():
    gen = torch.Generator().manual_seed(1)
    logits = 2 * torch.randn(4, 5, 9, generator=gen, dtype=F64)
    ref = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    torch.testing.assert_close(entropy_from_logits(logits, chunk_rows=3), ref, atol=1e-12, rtol=0)
    # uniform over V = 8 -> ln 8; (almost) deterministic -> 0
    assert entropy_from_logits(torch.zeros(1, 1, 8)).item() == pytest.approx(math.log(8), abs=1e-6)
    peaked = torch.tensor([[[100.0, 0.0, 0.0]]])
    assert entropy_from_logits(peaked).item() == pytest.approx(0.0, abs=1e-6)
