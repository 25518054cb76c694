"""Micro-batches by row count and by token budget: hand-worked packing and padding accounting."""

import random

import pytest
import torch

from verlog.microbatch import by_row_count, by_token_budget


def test_token_budget_by_hand():
    lengths = torch.tensor([10, 3, 7, 2, 9])
    mbs = by_token_budget(torch.arange(5), lengths, 20)
    # longest first: [10, 9] costs 2 x 10 = 20; [7, 3] costs 14 (adding 2 would cost 21); [2]
    assert [b.tolist() for b in mbs.batches] == [[0, 4], [2, 1], [3]]
    assert (mbs.tokens, mbs.padded_tokens) == (31, 36)
    assert mbs.padding_fraction == pytest.approx(1 - 31 / 36)


def test_a_row_longer_than_the_budget_runs_alone():
    mbs = by_token_budget(torch.tensor([0, 1]), torch.tensor([50, 5]), 20)
    assert [b.tolist() for b in mbs.batches] == [[0], [1]]


def test_row_count_keeps_order_and_counts_padding():
    lengths = torch.tensor([4, 1, 3, 3])
    mbs = by_row_count(torch.tensor([3, 0, 1]), lengths, 2)
    assert [b.tolist() for b in mbs.batches] == [[3, 0], [1]]
    assert (mbs.tokens, mbs.padded_tokens) == (8, 9)
    assert by_row_count(torch.tensor([], dtype=torch.long), lengths, 2).batches == []


def test_budget_packing_is_a_sorted_partition_within_budget():
    rng = random.Random(0)
    for _ in range(200):
        M = rng.randint(1, 60)
        lengths = torch.tensor([rng.randint(1, 40) for _ in range(M)])
        index = torch.randperm(M, generator=torch.Generator().manual_seed(rng.randint(0, 99)))[: rng.randint(1, M)]
        budget = rng.randint(1, 200)
        mbs = by_token_budget(index, lengths, budget)
        got = torch.cat(mbs.batches).sort().values
        assert torch.equal(got, index.sort().values)
        for b in mbs.batches:
            assert b.numel() == 1 or int(lengths[b].max()) * b.numel() <= budget
        assert mbs.tokens == int(lengths[index].sum())
        # sorted rows: each micro-batch's rows are no longer than the previous one's shortest
        for a, b in zip(mbs.batches, mbs.batches[1:]):
            assert int(lengths[b].max()) <= int(lengths[a].min())


def test_bad_arguments():
    with pytest.raises(ValueError):
        by_token_budget(torch.arange(2), torch.tensor([1, 2]), 0)
    with pytest.raises(ValueError):
        by_row_count(torch.arange(2), torch.tensor([1, 2]), 0)
