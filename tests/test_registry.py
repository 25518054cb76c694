"""The algorithm table: one entry per config choice, consistent fields, estimators that match the pure ones."""

import dataclasses
import random
import sys
from pathlib import Path

import pytest
import torch

from verlog.algos import estimators as E
from verlog.algos.gigpo import gigpo_advantages
from verlog.algos.losses import AGGREGATIONS
from verlog.algos.registry import (
    ALGORITHMS,
    AlgorithmSpec,
    algorithm_names,
    algorithm_spec,
    group_algorithm_names,
)
from verlog.algos.turns import broadcast_turn_advantages, turn_index
from verlog.config import AlgoConfig, ConfigError, build_config
from verlog.preflight import check_buildable

sys.path.insert(0, str(Path(__file__).parent))
from test_critic_free import episode_batch  # noqa: E402

CRITIC_FREE = [name for name, spec in ALGORITHMS.items() if not spec.needs_critic]


def test_the_config_accepts_exactly_the_table_names_in_table_order():
    assert algorithm_names() == tuple(ALGORITHMS) and all(ALGORITHMS[name].name == name for name in ALGORITHMS)
    for name in ALGORITHMS:
        check_buildable(build_config({}, {"algo.algorithm": name, "algo.group_size": 4}))
    with pytest.raises(ConfigError, match="algo.algorithm: expected one of " + ", ".join(ALGORITHMS)):
        check_buildable(build_config({}, {"algo.algorithm": "a2c"}))


def test_a_group_size_is_required_exactly_for_grouped_rollouts():
    assert group_algorithm_names() == tuple(n for n, s in ALGORITHMS.items() if s.grouped_rollouts)
    for name, spec in ALGORITHMS.items():
        cfg = build_config({}, {"algo.algorithm": name, "algo.group_size": 1})
        if spec.grouped_rollouts:
            with pytest.raises(ConfigError, match="^algo.group_size"):
                check_buildable(cfg)
        else:
            check_buildable(cfg)


def test_the_properties_the_trainer_relied_on():
    # only ppo trains a critic and runs GAE; only gigpo needs state keys; only gspo has its own
    # loss, always sequence-averaged; only dapo forces dynamic sampling
    assert [n for n, s in ALGORITHMS.items() if s.needs_critic] == ["ppo"]
    assert ALGORITHMS["ppo"].estimator is None and all(ALGORITHMS[n].estimator for n in CRITIC_FREE)
    assert [n for n, s in ALGORITHMS.items() if s.needs_state_keys] == ["gigpo"]
    assert {n: s.policy_loss for n, s in ALGORITHMS.items() if s.policy_loss != "ppo"} == {"gspo": "gspo"}
    assert {n: s.aggregation for n, s in ALGORITHMS.items() if s.aggregation} == {"gspo": "seq-mean-token-mean"}
    assert [n for n, s in ALGORITHMS.items() if s.dynamic_sampling] == ["dapo"]
    assert [n for n, s in ALGORITHMS.items() if s.episode_level] == ["grpo", "rloo", "reinforce_pp_baseline",
                                                                      "dapo", "gspo"]


@pytest.mark.parametrize("configured", AGGREGATIONS)
def test_loss_aggregation_and_dynamic_sampling_resolve_against_the_config(configured):
    assert ALGORITHMS["gspo"].loss_aggregation(configured) == "seq-mean-token-mean"
    assert ALGORITHMS["dapo"].loss_aggregation(configured) == configured
    assert ALGORITHMS["ppo"].loss_aggregation(configured) == configured
    assert ALGORITHMS["dapo"].uses_dynamic_sampling(False) and ALGORITHMS["dapo"].uses_dynamic_sampling(True)
    assert not ALGORITHMS["grpo"].uses_dynamic_sampling(False) and ALGORITHMS["grpo"].uses_dynamic_sampling(True)


def test_algorithm_spec_lookup_and_unknown_name():
    assert algorithm_spec("gigpo") is ALGORITHMS["gigpo"]
    with pytest.raises(ValueError, match="unknown algorithm 'a2c'; expected one of ppo, grpo"):
        algorithm_spec("a2c")


def test_spec_is_frozen_and_rejects_inconsistent_fields():
    grpo = ALGORITHMS["grpo"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        grpo.name = "other"  # type: ignore[misc]
    with pytest.raises(ValueError, match="critic"):
        dataclasses.replace(grpo, needs_critic=True)
    with pytest.raises(ValueError, match="policy_loss"):
        dataclasses.replace(grpo, policy_loss="a2c")
    with pytest.raises(ValueError, match="aggregation"):
        dataclasses.replace(grpo, aggregation="mean")
    with pytest.raises(ValueError, match="grouped rollouts"):
        dataclasses.replace(ALGORITHMS["reinforce_pp"], dynamic_sampling=True)
    with pytest.raises(ValueError, match="fixed-turn"):
        dataclasses.replace(ALGORITHMS["ppo"], grouped_rollouts=True)
    assert isinstance(grpo, AlgorithmSpec)


def _direct(batch, algo):
    """The pure estimator of ``algo.algorithm`` called directly on the flat turns, spread onto the tokens."""
    idx = turn_index(batch.episode_ids, include=batch.turns)
    rewards = batch.rewards.reshape(-1)[idx].to(torch.float64)
    episodes, groups = batch.episode_ids.reshape(-1)[idx], batch.group_ids.reshape(-1)[idx]
    name = algo.algorithm
    if name == "reinforce_pp":
        per_turn = E.reinforce_pp_advantages(rewards, episodes, gamma=algo.reinforce_pp_gamma).advantages
    elif name == "gigpo":
        states = batch.state_ids.reshape(-1)[idx]
        per_turn = gigpo_advantages(rewards, episodes, groups, states, omega=algo.gigpo_omega,
                                    gamma=algo.gigpo_gamma, norm=algo.norm, eps=algo.std_eps).advantages
    else:
        ids, inverse = torch.unique(episodes, sorted=True, return_inverse=True)
        returns = torch.zeros(ids.numel(), dtype=torch.float64).index_add_(0, inverse, rewards)
        group_of = torch.zeros(ids.numel(), dtype=torch.long).scatter_(0, inverse, groups)
        if name == "rloo":
            res = E.rloo_advantages(returns, group_of)
        elif name == "reinforce_pp_baseline":
            res = E.reinforce_pp_baseline_advantages(returns, group_of)
        else:
            res = E.grpo_advantages(returns, group_of, norm=algo.norm, eps=algo.std_eps)
        per_turn = res.advantages[inverse]
    return broadcast_turn_advantages(per_turn.to(torch.float32), idx, batch.response_mask)


@pytest.mark.parametrize("name", CRITIC_FREE)
def test_each_estimator_equals_its_pure_estimator(name):
    rng = random.Random(name)
    spec = ALGORITHMS[name]
    for trial in range(20):
        G = rng.choice([2, 3])
        N = G * rng.randint(1, 3)
        episodes = [[rng.choice([0.0, 1.0, -0.5, 0.25]) for _ in range(rng.randint(1, 5))] for _ in range(N)]
        states = [[rng.randint(0, 2) for _ in e] for e in episodes]
        batch = episode_batch(episodes, G, states=states, response_len=lambda t, n: 1 + (t + n) % 3,
                              round_index=trial % 2)
        algo = AlgoConfig(algorithm=name, group_size=G, norm=rng.choice(["mean", "mean_std"]),
                          gigpo_gamma=rng.choice([0.5, 1.0]), gigpo_omega=rng.choice([0.0, 1.5]),
                          reinforce_pp_gamma=rng.choice([0.9, 1.0]))
        adv, metrics = spec.estimator(batch, algo)
        assert torch.equal(adv, _direct(batch, algo))
        assert metrics["algo/groups"] >= 1
        if spec.episode_level:  # every token of an episode carries the same advantage
            for n in range(N):
                values = adv[:, n][batch.response_mask[:, n]]
                assert torch.equal(values, values[:1].expand_as(values))
