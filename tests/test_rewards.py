"""Token reward placement."""

import pytest
import torch

from verlog.algos.rewards import token_rewards


def test_reward_on_last_valid_token_only():
    rewards = torch.tensor([[1.0, -0.1], [0.5, 2.0]])
    lengths = torch.tensor([[3, 1], [2, 4]])
    mask = torch.arange(4).expand(2, 2, 4) < lengths.unsqueeze(-1)
    out = token_rewards(rewards, mask)
    expected = torch.zeros(2, 2, 4)
    expected[0, 0, 2], expected[0, 1, 0], expected[1, 0, 1], expected[1, 1, 3] = 1.0, -0.1, 0.5, 2.0
    assert torch.equal(out, expected)


def test_kl_penalty_on_every_valid_token():
    rewards = torch.tensor([[1.0]])
    mask = torch.tensor([[[True, True, False]]])
    kl = torch.tensor([[[0.2, 0.4, 9.0]]])
    out = token_rewards(rewards, mask, kl, kl_coef=0.5)
    assert torch.allclose(out, torch.tensor([[[-0.1, 1.0 - 0.2, 0.0]]]))


def test_bad_input():
    with pytest.raises(ValueError, match="no response token"):
        token_rewards(torch.zeros(1, 1), torch.zeros(1, 1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="do not agree"):
        token_rewards(torch.zeros(2, 1), torch.ones(1, 1, 3, dtype=torch.bool))


def test_padding_turns_of_whole_episode_batches_get_nothing():
    # env 0: two real turns; env 1: one real (terminated) turn, then a padding turn with no tokens
    mask = torch.zeros(2, 2, 3, dtype=torch.bool)
    mask[0, 0, :2] = mask[1, 0, :3] = mask[0, 1, :1] = True
    rewards = torch.tensor([[0.0, 2.0], [1.0, 0.0]])
    turns = torch.tensor([[True, True], [True, False]])
    out = token_rewards(rewards, mask, turn_mask=turns)
    expected = torch.zeros(2, 2, 3)
    expected[0, 1, 0], expected[1, 0, 2] = 2.0, 1.0
    assert torch.equal(out, expected)
    with pytest.raises(ValueError, match="no response token"):
        token_rewards(rewards, mask)  # without the turn mask the padding turn is an error
    with pytest.raises(ValueError, match="padding turn has a reward"):
        token_rewards(torch.tensor([[0.0, 2.0], [1.0, 5.0]]), mask, turn_mask=turns)
