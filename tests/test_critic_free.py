"""Critic-free advantages on whole-episode TurnBatches: hand-worked numbers and a slow reference."""

import math
import random

import pytest
import torch

from verlog.algos import estimators as E
from verlog.algos.batch_estimators import episode_group_returns
from verlog.algos.critic_free import critic_free_advantages, dynamic_sampling_keep
from verlog.algos.gigpo import gigpo_advantages
from verlog.batch import TurnBatch
from verlog.config import AlgoConfig

PAD = 0


def episode_batch(episodes: list[list[float]], group_size: int, *, states: list[list[int]] | None = None,
                  response_len=lambda t, n: 2, round_index: int = 0) -> TurnBatch:
    """One episode per env with these per-turn rewards (env n = episodes[n]); padding after the end."""
    N, T = len(episodes), max(len(e) for e in episodes)
    real = [[t < len(episodes[n]) for n in range(N)] for t in range(T)]
    grid = lambda f, pad: [[f(t, n) if real[t][n] else pad for n in range(N)] for t in range(T)]  # noqa: E731
    responses = grid(lambda t, n: [5] * response_len(t, n), [])
    return TurnBatch.from_turns(
        grid(lambda t, n: [1, 2, 3], []), responses, grid(lambda t, n: [-0.5] * response_len(t, n), []),
        grid(lambda t, n: episodes[n][t], 0.0), grid(lambda t, n: t == len(episodes[n]) - 1, False),
        grid(lambda t, n: False, False), grid(lambda t, n: 100 * round_index + n, -1), grid(lambda t, n: True, True),
        grid(lambda t, n: False, False), {}, pad_id=PAD, max_response_tokens=4, turn_mask=real,
        group_ids=grid(lambda t, n: round_index * 100 + n // group_size, -1),
        state_ids=grid(lambda t, n: states[n][t], 0) if states is not None else None)


def test_grpo_by_hand():
    # group 0: returns 1 (2 turns) and 0 (3 turns): mean 0.5, Bessel std sqrt(0.5); group 1: 1 and 1, no signal
    batch = episode_batch([[0.0, 1.0], [0.0, 0.0, 0.0], [1.0], [1.0]], group_size=2)
    adv, metrics = critic_free_advantages(batch, AlgoConfig(algorithm="grpo", group_size=2, std_eps=1e-9))
    a = 0.5 / math.sqrt(0.5)
    mask = batch.response_mask
    assert adv.shape == mask.shape
    assert torch.allclose(adv[0, 0, :2], torch.tensor([a, a])) and torch.allclose(adv[1, 0, :2], torch.tensor([a, a]))
    assert torch.allclose(adv[:3, 1, :2], torch.full((3, 2), -a))
    assert float(adv[2, 0].abs().sum()) == 0.0  # padding turn
    assert float(adv[:, 2:].abs().sum()) == 0.0  # the no-signal group
    assert float(adv[~mask].abs().sum()) == 0.0
    assert metrics["algo/groups"] == 2 and metrics["algo/no_signal_groups"] == 1


def test_grpo_mean_norm_and_rloo_by_hand():
    batch = episode_batch([[3.0], [0.0, 1.0], [2.0]], group_size=3)
    adv, _ = critic_free_advantages(batch, AlgoConfig(algorithm="grpo", group_size=3, norm="mean"))
    # returns 3, 1, 2: mean 2
    assert adv[0, 0, 0].item() == pytest.approx(1.0) and adv[1, 1, 0].item() == pytest.approx(-1.0)
    assert adv[0, 2, 0].item() == pytest.approx(0.0)
    adv, _ = critic_free_advantages(batch, AlgoConfig(algorithm="rloo", group_size=3))
    # leave-one-out baselines: (1+2)/2, (3+2)/2, (3+1)/2
    assert adv[0, 0, 0].item() == pytest.approx(1.5)
    assert adv[0, 1, 0].item() == pytest.approx(-1.5) and adv[1, 1, 1].item() == pytest.approx(-1.5)
    assert adv[0, 2, 0].item() == pytest.approx(0.0)


def test_gigpo_by_hand():
    # one group of 2; both start in state 7, episode 0 then reaches state 8, episode 1 ends at once.
    # episode returns 1 and 0 -> mean-norm episode advantages +0.5 / -0.5.
    # step returns (gamma 0.5): ep0: [0.5 * 1, 1] = [0.5, 1.0]; ep1: [0.0].
    # anchor state 7: {0.5, 0.0}, mean 0.25 -> +0.25 / -0.25; state 8 alone -> 0.
    batch = episode_batch([[0.0, 1.0], [0.0]], group_size=2, states=[[7, 8], [7]])
    algo = AlgoConfig(algorithm="gigpo", group_size=2, norm="mean", gigpo_gamma=0.5, gigpo_omega=2.0)
    adv, metrics = critic_free_advantages(batch, algo)
    assert adv[0, 0, 0].item() == pytest.approx(0.5 + 2 * 0.25)
    assert adv[1, 0, 0].item() == pytest.approx(0.5)
    assert adv[0, 1, 0].item() == pytest.approx(-0.5 - 2 * 0.25)
    assert metrics["algo/anchor_groups"] == 2


def test_gigpo_needs_state_ids():
    batch = episode_batch([[0.0], [1.0]], group_size=2)
    with pytest.raises(ValueError, match="state_ids"):
        critic_free_advantages(batch, AlgoConfig(algorithm="gigpo", group_size=2))


def _reference(batch: TurnBatch, algo: AlgoConfig) -> torch.Tensor:
    """Slow reference: gather the real turns with Python loops, call the estimator, spread by hand."""
    T, N = batch.num_turns, batch.num_envs
    turns = [(t, n) for n in range(N) for t in range(T) if batch.turns[t, n]]
    rewards = torch.tensor([float(batch.rewards[t, n]) for t, n in turns], dtype=torch.float64)
    eps = torch.tensor([int(batch.episode_ids[t, n]) for t, n in turns])
    groups = torch.tensor([int(batch.group_ids[t, n]) for t, n in turns])
    name = algo.algorithm
    if name == "reinforce_pp":
        per_turn = E.reinforce_pp_advantages(rewards, eps, gamma=algo.reinforce_pp_gamma).advantages
    elif name == "gigpo":
        states = [int(batch.state_ids[t, n]) for t, n in turns]
        per_turn = gigpo_advantages(rewards, eps, groups, states, omega=algo.gigpo_omega, gamma=algo.gigpo_gamma,
                                    norm=algo.norm, eps=algo.std_eps).advantages
    else:
        ids = sorted(set(eps.tolist()))
        ret = torch.tensor([float(rewards[eps == e].sum()) for e in ids], dtype=torch.float64)
        grp = torch.tensor([int(groups[eps == e][0]) for e in ids])
        if name == "rloo":
            a = E.rloo_advantages(ret, grp).advantages
        elif name == "reinforce_pp_baseline":
            a = E.reinforce_pp_baseline_advantages(ret, grp).advantages
        else:
            a = E.grpo_advantages(ret, grp, norm=algo.norm, eps=algo.std_eps).advantages
        per_turn = torch.stack([a[ids.index(int(e))] for e in eps])
    out = torch.zeros(batch.response_mask.shape)
    for (t, n), value in zip(turns, per_turn.tolist()):
        out[t, n] = torch.where(batch.response_mask[t, n], torch.tensor(value, dtype=torch.float32), 0.0)
    return out


@pytest.mark.parametrize("name", ["grpo", "dapo", "gspo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gigpo"])
def test_matches_the_slow_reference_on_random_batches(name):
    rng = random.Random(name)
    for trial in range(60):
        G = rng.choice([2, 3, 4])
        N = G * rng.randint(1, 3)
        episodes = [[rng.choice([0.0, 0.0, 1.0, -0.5, 0.25]) for _ in range(rng.randint(1, 6))] for _ in range(N)]
        if rng.random() < 0.2:  # some groups all-equal
            episodes[:G] = [[1.0]] * G
        states = [[rng.randint(0, 3) for _ in e] for e in episodes]
        batch = episode_batch(episodes, G, states=states, response_len=lambda t, n: 1 + (t + n) % 4,
                              round_index=trial % 3)
        algo = AlgoConfig(algorithm=name, group_size=G, norm=rng.choice(["mean", "mean_std"]),
                          gigpo_gamma=rng.choice([0.5, 0.95, 1.0]), gigpo_omega=rng.choice([0.0, 1.0, 2.5]),
                          reinforce_pp_gamma=rng.choice([0.9, 1.0]))
        adv, _ = critic_free_advantages(batch, algo)
        torch.testing.assert_close(adv, _reference(batch, algo), atol=1e-5, rtol=1e-5)


def test_dynamic_sampling_keeps_groups_with_signal():
    batch = episode_batch([[1.0], [1.0], [0.0, 1.0], [0.0, 0.0], [0.0], [0.0]], group_size=2)
    keep, kept, dropped = dynamic_sampling_keep(batch)
    assert (kept, dropped) == (1, 2)
    assert keep.tolist() == [[False, False, True, True, False, False], [False, False, True, True, False, False]]
    returns, groups, _ = episode_group_returns(batch)
    assert returns.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0] and groups.tolist() == [0, 0, 1, 1, 2, 2]


def test_needs_group_ids():
    batch = episode_batch([[1.0], [0.0]], group_size=2)
    batch.group_ids = None
    with pytest.raises(ValueError, match="group"):
        critic_free_advantages(batch, AlgoConfig(algorithm="grpo", group_size=2))
    with pytest.raises(ValueError, match="critic-free"):
        critic_free_advantages(episode_batch([[1.0], [0.0]], 2), AlgoConfig(algorithm="ppo"))


def test_concat_envs_pads_turns_and_prompts():
    a = episode_batch([[1.0, 0.0, 0.0], [1.0]], group_size=2)
    b = episode_batch([[0.0], [1.0]], group_size=2, round_index=1)
    b.prompt_ids = torch.nn.functional.pad(b.prompt_ids, (0, 2), value=PAD)  # a wider prompt
    joined = TurnBatch.concat_envs([a, b])
    assert joined.rewards.shape == (3, 4) and joined.prompt_ids.shape == (3, 4, 5)
    assert joined.turns.sum(0).tolist() == [3, 1, 1, 1]
    assert joined.group_ids[0].tolist() == [0, 0, 100, 100]
    grpo = AlgoConfig(algorithm="grpo", group_size=2)
    adv, _ = critic_free_advantages(joined, grpo)
    alone, _ = critic_free_advantages(b, grpo)
    torch.testing.assert_close(adv[:1, 2:], alone)  # b's groups are unchanged by the join
    assert float(adv[1:, 2:].abs().sum()) == 0.0  # and its padding turns stay zero
    with pytest.raises(ValueError):
        TurnBatch.concat_envs([])
