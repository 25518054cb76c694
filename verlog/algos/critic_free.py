"""Critic-free advantages of a whole-episode TurnBatch, one config switch (``algo.algorithm``) apart.

Glue between :class:`~verlog.batch.TurnBatch` ([T, N] turns, padding marked by ``turn_mask``)
and the pure estimators of :mod:`verlog.algos.estimators`: the real turns are listed episode by
episode (:func:`~verlog.algos.estimators.turn_index`), the estimator runs on those flat,
unpadded turns, and its per-turn advantages are written onto the response tokens
(:func:`~verlog.algos.estimators.broadcast_turn_advantages`; zero on padding).

=======================  ====================================================================
``algo.algorithm``        turn advantage
=======================  ====================================================================
grpo, dapo, gspo          GRPO over the group's episode returns (``algo.norm``)
rloo                      RLOO leave-one-out baseline over the group's episode returns
reinforce_pp_baseline     group mean subtracted, then whitened over the batch's episodes
reinforce_pp              discounted per-turn returns whitened over the batch (per episode)
gigpo                     GiGPO: episode group advantage + omega x anchor-state step advantage
=======================  ====================================================================

DAPO's dynamic sampling (:func:`dynamic_sampling_keep`) and the loss variants are applied by the
trainer; this module computes advantages only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from verlog.algos import estimators as E
from verlog.batch import TurnBatch

__all__ = ["EPISODE_LEVEL", "critic_free_advantages", "dynamic_sampling_keep", "episode_group_returns"]

#: algorithms whose advantage is one number per episode, from the episode returns of its group
EPISODE_LEVEL = ("grpo", "dapo", "gspo", "rloo", "reinforce_pp_baseline")


def _flat(batch: TurnBatch) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(flat positions [M], rewards [M], episode ids [M], group ids [M]) of the batch's real turns."""
    if batch.group_ids is None:
        raise ValueError("a critic-free estimator needs a grouped whole-episode batch (group_ids is None)")
    idx = E.turn_index(batch.episode_ids, include=batch.turns)
    return (idx, batch.rewards.reshape(-1)[idx], batch.episode_ids.reshape(-1)[idx],
            batch.group_ids.reshape(-1)[idx])


def episode_group_returns(batch: TurnBatch) -> tuple[Tensor, Tensor, Tensor]:
    """Undiscounted returns of the batch's episodes with their groups.

    Returns:
        (returns float [E], group ids long [E], episode ids long [E]), episodes in id order.

    Raises:
        ValueError: no ``group_ids``, or a group id that changes within an episode.
    """
    _, rewards, episode_ids, group_ids = _flat(batch)
    returns, ids, inverse = E.episode_returns(rewards, episode_ids)
    groups = torch.full((ids.numel(),), -1, dtype=torch.long).scatter_(0, inverse, group_ids)
    if not torch.equal(groups[inverse], group_ids):
        raise ValueError("group_ids must be constant within each episode")
    return returns, groups, ids


def dynamic_sampling_keep(batch: TurnBatch) -> tuple[Tensor, int, int]:
    """DAPO's dynamic sampling on a whole-episode batch: which turns belong to groups with signal.

    A group whose episode returns are all equal gives every estimator a zero advantage
    (:func:`~verlog.algos.estimators.dynamic_sampling_filter`, DAPO eq. 11).

    Returns:
        (keep bool [T, N]: real turns of kept groups, groups kept, groups dropped).
    """
    returns, groups, ids = episode_group_returns(batch)
    keep_episode, dropped = E.dynamic_sampling_filter(returns, groups)
    kept_ids = ids[keep_episode]
    keep = torch.isin(batch.episode_ids, kept_ids) & batch.turns
    n_groups = int(torch.unique(groups).numel())
    return keep, n_groups - int(dropped.numel()), int(dropped.numel())


def critic_free_advantages(batch: TurnBatch, algo: Any) -> tuple[Tensor, dict[str, float]]:
    """Token advantages [T, N, R] of ``algo.algorithm`` on a whole-episode batch.

    Args:
        batch: a TurnBatch with ``group_ids`` (and ``state_ids`` for gigpo); padding turns are
            ignored. Rewards are used as they are (shaping such as an overlong penalty included).
        algo: an :class:`~verlog.config.AlgoConfig` (algorithm, norm, std_eps, gigpo_omega,
            gigpo_gamma, reinforce_pp_gamma).

    Returns:
        (advantages float32 [T, N, R], zero on padding and on padding turns; metrics:
        ``algo/groups``, ``algo/no_signal_groups``, ``algo/no_signal_turn_fraction`` and the
        estimator's own metrics prefixed ``algo/``).

    Raises:
        ValueError: an unknown or non-critic-free algorithm, no group ids, or gigpo without
            ``state_ids``; and the estimators' own errors.
    """
    name = algo.algorithm
    idx, rewards, episode_ids, group_ids = _flat(batch)
    rewards = rewards.to(torch.float64)
    if name in EPISODE_LEVEL:
        returns, ids, inverse = E.episode_returns(rewards, episode_ids)
        groups = torch.full((ids.numel(),), -1, dtype=torch.long).scatter_(0, inverse, group_ids)
        if name == "rloo":
            res = E.rloo_advantages(returns, groups)
        elif name == "reinforce_pp_baseline":
            res = E.reinforce_pp_baseline_advantages(returns, groups)
        else:
            res = E.grpo_advantages(returns, groups, norm=algo.norm, eps=algo.std_eps)
        turn_adv, no_signal = res.advantages[inverse], res.no_signal[inverse]
    elif name == "reinforce_pp":
        res = E.reinforce_pp_advantages(rewards, episode_ids, gamma=algo.reinforce_pp_gamma)
        turn_adv, no_signal = res.advantages, res.no_signal
    elif name == "gigpo":
        if batch.state_ids is None:
            raise ValueError("gigpo needs state_ids (collect with state keys on)")
        states = batch.state_ids.reshape(-1)[idx]
        res = E.gigpo_advantages(rewards, episode_ids, group_ids, states, omega=algo.gigpo_omega,
                                 gamma=algo.gigpo_gamma, norm=algo.norm, eps=algo.std_eps)
        turn_adv, no_signal = res.advantages, res.no_signal
    else:
        raise ValueError(f"{name!r} is not a critic-free algorithm")
    adv = E.broadcast_turn_advantages(turn_adv.to(torch.float32), idx, batch.response_mask)
    metrics = {"algo/groups": float(res.num_groups), "algo/no_signal_groups": float(res.num_no_signal_groups),
               "algo/no_signal_turn_fraction": float(no_signal.double().mean()) if no_signal.numel() else 0.0}
    metrics.update({f"algo/{k}": float(v) for k, v in res.metrics.items()})
    return adv, metrics
