"""Masked whitening and explained variance."""

import math

import pytest
import torch

from verlog.algos.stats import explained_variance, masked_whiten

torch.set_num_threads(1)
F64 = torch.float64


def _data(seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = 3.0 + 2.0 * torch.randn(5, 7, generator=gen, dtype=F64)
    mask = torch.rand(5, 7, generator=gen) < 0.6
    mask[0, 0] = mask[0, 1] = True
    return x, mask


def test_whiten_gives_zero_mean_unit_std_over_valid_entries():
    x, mask = _data()
    out = masked_whiten(x, mask, eps=1e-12)
    valid = out[mask]
    assert valid.mean().item() == pytest.approx(0.0, abs=1e-12)
    assert valid.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-9)
    assert (out[~mask] == 0).all()
    assert out.dtype == x.dtype and out.shape == x.shape


def test_whiten_hand_numbers_and_no_shift():
    # valid [1, 3]: mean 2, population var 1
    x = torch.tensor([1.0, 3.0, 100.0], dtype=F64)
    mask = torch.tensor([True, True, False])
    torch.testing.assert_close(masked_whiten(x, mask, eps=1e-12), torch.tensor([-1.0, 1.0, 0.0], dtype=F64))
    # shift_mean=False only rescales: x / 1
    torch.testing.assert_close(
        masked_whiten(x, mask, shift_mean=False, eps=1e-12), torch.tensor([1.0, 3.0, 0.0], dtype=F64)
    )


def test_whiten_ignores_masked_entries_even_nan():
    x, mask = _data(1)
    garbage = torch.where(mask, x, torch.full_like(x, math.nan))
    torch.testing.assert_close(masked_whiten(x, mask), masked_whiten(garbage, mask), atol=0, rtol=0)


def test_whiten_with_reduce_fn_equals_whitening_the_global_batch():
    # Simulate two data-parallel ranks: each rank's reduce_fn adds the other rank's sums.
    x, mask = _data(2)
    xa, ma, xb, mb = x[:2], mask[:2], x[2:], mask[2:]
    captured = {}
    masked_whiten(xa, ma, reduce_fn=lambda t: captured.setdefault("a", t.clone()))
    masked_whiten(xb, mb, reduce_fn=lambda t: captured.setdefault("b", t.clone()))
    out_a = masked_whiten(xa, ma, reduce_fn=lambda t: t + captured["b"])
    out_b = masked_whiten(xb, mb, reduce_fn=lambda t: t + captured["a"])
    torch.testing.assert_close(torch.cat([out_a, out_b]), masked_whiten(x, mask), atol=1e-12, rtol=0)
    # a rank with no valid entry still whitens fine with global stats
    out_empty = masked_whiten(xa, torch.zeros_like(ma), reduce_fn=lambda t: t + captured["b"])
    assert (out_empty == 0).all()


def test_whiten_bad_input_raises():
    x, mask = _data()
    with pytest.raises(ValueError, match="no valid entry"):
        masked_whiten(x, torch.zeros_like(mask))
    with pytest.raises(TypeError, match="mask must be a bool"):
        masked_whiten(x, mask.double())
    with pytest.raises(ValueError, match="mask has shape"):
        masked_whiten(x, mask[:2])
    with pytest.raises(TypeError, match="reduce_fn must return"):
        masked_whiten(x, mask, reduce_fn=lambda t: None)
    with pytest.raises(ValueError, match="NaN or inf"):
        masked_whiten(torch.tensor([1.0, math.inf]), torch.tensor([True, True]))
    with pytest.raises(ValueError, match="eps must be > 0"):
        masked_whiten(x, mask, eps=0.0)


def test_explained_variance_cases():
    r = torch.tensor([1.0, 2.0, 3.0, 4.0, 50.0], dtype=F64)
    mask = torch.tensor([True, True, True, True, False])
    # perfect critic
    assert explained_variance(r.clone(), r, mask) == pytest.approx(1.0)
    # predicting the mean return (2.5) explains nothing
    assert explained_variance(torch.full_like(r, 2.5), r, mask) == pytest.approx(0.0)
    # hand: R - V = [0, 0, 0, -1]: var = 0.25 - 0.0625 = 0.1875; Var R = 1.25 -> 1 - 0.15 = 0.85
    v = torch.tensor([1.0, 2.0, 3.0, 5.0, -7.0], dtype=F64)
    assert explained_variance(v, r, mask) == pytest.approx(0.85)
    # worse than the mean -> negative
    assert explained_variance(-r, r, mask) < 0
    # constant returns: undefined -> nan
    assert math.isnan(explained_variance(v, torch.ones_like(r), mask))


def test_explained_variance_bad_input_raises():
    r = torch.ones(3)
    with pytest.raises(ValueError, match="no valid entry"):
        explained_variance(r, r, torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="has shape"):
        explained_variance(r, torch.ones(4), torch.ones(3, dtype=torch.bool))
