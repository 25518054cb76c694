"""Critic-free advantages of a whole-episode TurnBatch, and DAPO's dynamic sampling on it.

:func:`critic_free_advantages` runs the estimator that the algorithm table
(:data:`verlog.algos.registry.ALGORITHMS`) names for ``algo.algorithm``; the estimators
themselves are in :mod:`verlog.algos.batch_estimators`. :func:`dynamic_sampling_keep` finds
the groups with a learning signal. The loss variants are applied by the trainer; this module
computes advantages and the dynamic-sampling mask only.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from verlog.algos import estimators as E
from verlog.algos.batch_estimators import episode_group_returns
from verlog.algos.registry import ALGORITHMS
from verlog.batch import TurnBatch

__all__ = ["critic_free_advantages", "dynamic_sampling_keep"]


def dynamic_sampling_keep(batch: TurnBatch) -> tuple[Tensor, int, int]:
    """DAPO's dynamic sampling on a whole-episode batch: which turns belong to groups with signal.

    A group whose episode returns are all equal gives every estimator a zero advantage
    (:func:`~verlog.algos.estimators.dynamic_sampling_filter`, DAPO eq. 11).

    Returns:
        (keep bool [T, N]: real turns of kept groups, groups kept, groups dropped).

    Raises:
        ValueError: as :func:`~verlog.algos.batch_estimators.episode_group_returns`.
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
        algo: an :class:`~verlog.config.AlgoConfig` (algorithm, and what its estimator reads:
            norm, std_eps, gigpo_omega, gigpo_gamma, reinforce_pp_gamma).

    Returns:
        (advantages float32 [T, N, R], zero on padding and on padding turns; metrics:
        ``algo/groups``, ``algo/no_signal_groups``, ``algo/no_signal_turn_fraction`` and the
        estimator's own metrics prefixed ``algo/``).

    Raises:
        ValueError: an unknown or non-critic-free algorithm, no group ids, or gigpo without
            ``state_ids``; and the estimators' own errors.
    """
    spec = ALGORITHMS.get(algo.algorithm)
    if spec is None or spec.estimator is None:
        raise ValueError(f"{algo.algorithm!r} is not a critic-free algorithm")
    return spec.estimator(batch, algo)
