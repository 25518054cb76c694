"""GAE on whole-episode batches with padding turns (tool conversations of different lengths)."""

import pytest
import torch

from verlog.algos.gae import dual_discount_gae, padded_dual_discount_gae

GAMMAS = (0.99, 0.95, 0.9, 0.8)


def whole_episode_batch(T: int, N: int, R: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    episode_lengths = torch.randint(1, T + 1, (N,), generator=gen)
    turns = torch.arange(T).unsqueeze(1) < episode_lengths  # [T, N]
    lengths = torch.randint(1, R + 1, (T, N), generator=gen) * turns
    mask = torch.arange(R) < lengths.unsqueeze(-1)
    rewards = torch.randn(T, N, R, generator=gen, dtype=torch.float64) * mask
    values = torch.randn(T, N, R, generator=gen, dtype=torch.float64) * mask
    terminated = torch.arange(T).unsqueeze(1) == (episode_lengths - 1)
    return rewards, values, mask, terminated, turns, episode_lengths


@pytest.mark.parametrize("seed", range(20))
def test_each_episode_gets_what_it_gets_alone(seed):
    T, N, R = 5, 6, 4
    rewards, values, mask, terminated, turns, episode_lengths = whole_episode_batch(T, N, R, seed)
    zeros = torch.zeros(T, N, dtype=torch.bool)
    adv, ret = padded_dual_discount_gae(rewards, values, mask, terminated, zeros, torch.zeros(T, N, dtype=torch.float64),
                                        turns, *GAMMAS)
    for n in range(N):
        L = int(episode_lengths[n])
        alone = (x[:L, n:n + 1] for x in (rewards, values, mask, terminated, zeros))
        r, v, m, d, tr = alone
        a_alone, ret_alone = dual_discount_gae(r, v, m, d, tr, torch.zeros(L, 1, dtype=torch.float64), *GAMMAS)
        assert torch.allclose(adv[:L, n:n + 1], a_alone, atol=1e-12)
        assert torch.allclose(ret[:L, n:n + 1], ret_alone, atol=1e-12)
        assert adv[L:, n].eq(0).all() and ret[L:, n].eq(0).all()


def test_padding_that_a_real_turn_would_read_is_refused():
    T, N, R = 3, 2, 2
    rewards, values, mask, terminated, turns, _ = whole_episode_batch(T, N, R, 0)
    mask = torch.ones(T, N, R, dtype=torch.bool)
    turns = torch.ones(T, N, dtype=torch.bool)
    turns[2, 0] = False
    mask[2, 0] = False
    terminated = torch.zeros(T, N, dtype=torch.bool)  # turn 1 of env 0 is not terminated
    values, rewards = values * mask, rewards * mask
    args = (torch.zeros(T, N, dtype=torch.bool), torch.zeros(T, N, dtype=torch.float64))
    with pytest.raises(ValueError, match="must follow a terminated"):
        padded_dual_discount_gae(rewards, values, mask, terminated, *args, turns, *GAMMAS)
    terminated[1, 0] = True
    padded_dual_discount_gae(rewards, values, mask, terminated, *args, turns, *GAMMAS)
    mask[2, 0, 0] = True
    with pytest.raises(ValueError, match="has response tokens"):
        padded_dual_discount_gae(rewards, values, mask, terminated, *args, turns, *GAMMAS)
