"""Reward terms: token reward placement, DAPO's overlong penalty and the shaped turn rewards."""

import pytest
import torch

from verlog.algos.rewards import overlong_penalty, shaped_rewards, token_rewards


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


# --------------------------------------------------------------------------------------
# DAPO overlong penalty: L_max = 10, L_cache = 4 -> ramp from length 6 (0) to 10 (-1)
# --------------------------------------------------------------------------------------
def test_overlong_penalty_hand_worked():
    lengths = torch.tensor([0, 6, 7, 8, 10, 11])
    torch.testing.assert_close(overlong_penalty(lengths, 10, 4), torch.tensor([0, 0, -0.25, -0.5, -1.0, -1.0]))
    torch.testing.assert_close(overlong_penalty(lengths, 10, 4, penalty_factor=0.5),
                               torch.tensor([0, 0, -0.125, -0.25, -0.5, -0.5]))
    assert overlong_penalty(lengths, 10, 4).dtype == torch.float32


def test_overlong_penalty_matches_reference_on_600_random_cases():
    gen = torch.Generator().manual_seed(24)
    for _ in range(600):
        L = int(torch.randint(1, 40, (1,), generator=gen))
        C = int(torch.randint(1, L + 1, (1,), generator=gen))
        f = float(torch.rand(1, generator=gen)) * 2
        lengths = torch.randint(0, L + 5, (7,), generator=gen)
        expected = []
        for y in lengths.tolist():
            if y <= L - C:
                expected.append(0.0)
            elif y <= L:
                expected.append(f * ((L - C) - y) / C)
            else:
                expected.append(-f)
        torch.testing.assert_close(overlong_penalty(lengths, L, C, f), torch.tensor(expected), atol=1e-6, rtol=0)


def test_overlong_penalty_bad_input_raises():
    with pytest.raises(ValueError, match="cache_length must be"):
        overlong_penalty(torch.tensor([1]), 10, 11)
    with pytest.raises(ValueError, match="cache_length must be"):
        overlong_penalty(torch.tensor([1]), 10, 0)
    with pytest.raises(ValueError, match="lengths must be >= 0"):
        overlong_penalty(torch.tensor([-1]), 10, 4)
    with pytest.raises(TypeError, match="integer tensor"):
        overlong_penalty(torch.tensor([1.0]), 10, 4)


# --------------------------------------------------------------------------------------
# shaped turn rewards: the overlong penalty added on real turns only
# --------------------------------------------------------------------------------------
def test_shaped_rewards_hand_worked():
    # L_max = 10, L_cache = 4: penalty 0 up to length 6, -(y - 6) / 4 up to 10, -1 beyond
    rewards = torch.tensor([[1.0, 0.0, -0.1], [0.5, 0.0, 0.0]])
    before = rewards.clone()
    lengths = torch.tensor([[5, 8, 10], [11, 7, 12]])
    turns = torch.tensor([[True, True, True], [True, True, False]])  # [1, 2] is a padding turn
    out = shaped_rewards(rewards, lengths, turns, max_response_tokens=10, cache_tokens=4, factor=1.0)
    torch.testing.assert_close(out, torch.tensor([[1.0, -0.5, -1.1], [-0.5, -0.25, 0.0]]))
    out = shaped_rewards(rewards, lengths, turns, max_response_tokens=10, cache_tokens=4, factor=2.0)
    torch.testing.assert_close(out, torch.tensor([[1.0, -1.0, -2.1], [-1.5, -0.5, 0.0]]))
    assert torch.equal(rewards, before)  # a new tensor: the input is not modified


def test_shaped_rewards_is_the_inline_sum_bit_for_bit():
    gen = torch.Generator().manual_seed(5)
    rewards = torch.randn(6, 4, generator=gen)
    lengths = torch.randint(0, 20, (6, 4), generator=gen)
    turns = torch.rand(6, 4, generator=gen) > 0.2
    out = shaped_rewards(rewards, lengths, turns, max_response_tokens=16, cache_tokens=5, factor=0.7)
    assert torch.equal(out, rewards + torch.where(turns, overlong_penalty(lengths, 16, 5, 0.7), 0.0))
    assert out.dtype == rewards.dtype


def test_shaped_rewards_bad_settings_raise():
    with pytest.raises(ValueError, match="cache_length must be"):
        shaped_rewards(torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.long), torch.ones(1, 1, dtype=torch.bool),
                       max_response_tokens=4, cache_tokens=5, factor=1.0)
