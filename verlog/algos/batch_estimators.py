"""Each critic-free algorithm's advantage estimator on a whole-episode TurnBatch.

Glue between :class:`~verlog.batch.TurnBatch` ([T, N] turns, padding marked by ``turn_mask``)
and the pure estimators of :mod:`verlog.algos.estimators` and :mod:`verlog.algos.gigpo`: the
real turns are listed episode by episode (:func:`flat_turns`), the estimator runs on those
flat, unpadded turns, and its per-turn advantages are written onto the response tokens
(:func:`~verlog.algos.turns.broadcast_turn_advantages`; zero on padding).

Every estimator here has the signature ``(batch, algo) -> (advantages, metrics)``, with ``algo``
an :class:`~verlog.config.AlgoConfig`, so it can stand in the algorithm table
(:data:`verlog.algos.registry.ALGORITHMS`):

================================  ======================================================================
estimator                         turn advantage
================================  ======================================================================
grpo_estimator                    GRPO over the group's episode returns (``algo.norm``)
rloo_estimator                    RLOO leave-one-out baseline over the group's episode returns
reinforce_pp_baseline_estimator   group mean subtracted, then whitened over the batch's episodes
reinforce_pp_estimator            discounted per-turn returns whitened over the batch (per episode)
gigpo_estimator                   GiGPO: episode group advantage + omega x anchor-state step advantage
================================  ======================================================================

Rewards are used as they are (shaping such as an overlong penalty included), in float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from verlog.algos import estimators as E
from verlog.algos.gigpo import gigpo_advantages
from verlog.algos.groups import AdvantageResult, episode_returns
from verlog.algos.turns import broadcast_turn_advantages, turn_index
from verlog.batch import TurnBatch

__all__ = [
    "Estimator",
    "FlatTurns",
    "flat_turns",
    "episode_group_returns",
    "grpo_estimator",
    "rloo_estimator",
    "reinforce_pp_baseline_estimator",
    "reinforce_pp_estimator",
    "gigpo_estimator",
]

#: ``(batch, algo) -> (advantages float32 [T, N, R], metrics)``: one algorithm's advantages of a batch
Estimator = Callable[[TurnBatch, Any], tuple[Tensor, dict[str, float]]]


@dataclass(frozen=True)
class FlatTurns:
    """A whole-episode batch's real turns, listed episode by episode in time order.

    Attributes:
        index: long [M], the flat positions t * N + n of the turns (:func:`~verlog.algos.turns.turn_index`).
        rewards: float [M], their rewards (the batch's dtype).
        episode_ids: long [M], their episodes.
        group_ids: long [M], their episode groups.
    """

    index: Tensor
    rewards: Tensor
    episode_ids: Tensor
    group_ids: Tensor


def flat_turns(batch: TurnBatch) -> FlatTurns:
    """The batch's real turns, flat (see :class:`FlatTurns`).

    Raises:
        ValueError: the batch has no ``group_ids`` (a critic-free estimator needs grouped episodes).
    """
    if batch.group_ids is None:
        raise ValueError("a critic-free estimator needs a grouped whole-episode batch (group_ids is None)")
    idx = turn_index(batch.episode_ids, include=batch.turns)
    return FlatTurns(idx, batch.rewards.reshape(-1)[idx], batch.episode_ids.reshape(-1)[idx],
                     batch.group_ids.reshape(-1)[idx])


def _episode_groups(rewards: Tensor, turns: FlatTurns) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(returns [E], group id of each episode long [E], episode ids [E], inverse long [M]) of ``rewards`` [M].

    An episode's group is the one of its last listed turn (callers check constancy where needed).
    """
    returns, ids, inverse = episode_returns(rewards, turns.episode_ids)
    groups = torch.full((ids.numel(),), -1, dtype=torch.long).scatter_(0, inverse, turns.group_ids)
    return returns, groups, ids, inverse


def episode_group_returns(batch: TurnBatch) -> tuple[Tensor, Tensor, Tensor]:
    """Undiscounted returns of the batch's episodes with their groups.

    Returns:
        (returns float [E], group ids long [E], episode ids long [E]), episodes in id order.

    Raises:
        ValueError: no ``group_ids``, or a group id that changes within an episode.
    """
    turns = flat_turns(batch)
    returns, groups, ids, inverse = _episode_groups(turns.rewards, turns)
    if not torch.equal(groups[inverse], turns.group_ids):
        raise ValueError("group_ids must be constant within each episode")
    return returns, groups, ids


def _on_tokens(batch: TurnBatch, turns: FlatTurns, turn_adv: Tensor, no_signal: Tensor,
               res: AdvantageResult) -> tuple[Tensor, dict[str, float]]:
    """Per-turn advantages [M] written onto the response tokens, with the metrics every estimator logs.

    Metrics: ``algo/groups``, ``algo/no_signal_groups``, ``algo/no_signal_turn_fraction`` and the
    estimator's own metrics prefixed ``algo/``.
    """
    adv = broadcast_turn_advantages(turn_adv.to(torch.float32), turns.index, batch.response_mask)
    metrics = {"algo/groups": float(res.num_groups), "algo/no_signal_groups": float(res.num_no_signal_groups),
               "algo/no_signal_turn_fraction": float(no_signal.double().mean()) if no_signal.numel() else 0.0}
    metrics.update({f"algo/{k}": float(v) for k, v in res.metrics.items()})
    return adv, metrics


def _episode_level(batch: TurnBatch, estimate: Callable[[Tensor, Tensor], AdvantageResult]
                   ) -> tuple[Tensor, dict[str, float]]:
    """An episode-level estimator ``estimate(returns float64 [E], group ids [E])`` spread over each episode's turns."""
    turns = flat_turns(batch)
    returns, groups, _, inverse = _episode_groups(turns.rewards.to(torch.float64), turns)
    res = estimate(returns, groups)
    return _on_tokens(batch, turns, res.advantages[inverse], res.no_signal[inverse], res)


def grpo_estimator(batch: TurnBatch, algo: Any) -> tuple[Tensor, dict[str, float]]:
    """GRPO (:func:`~verlog.algos.estimators.grpo_advantages`) of the episode returns, on every turn's tokens.

    Args:
        batch: a grouped whole-episode TurnBatch. algo: ``norm`` and ``std_eps`` are read.

    Returns:
        (advantages float32 [T, N, R], zero on padding and on padding turns; metrics
        ``algo/groups``, ``algo/no_signal_groups``, ``algo/no_signal_turn_fraction`` and the
        estimator's own metrics prefixed ``algo/``).

    Raises:
        ValueError: no ``group_ids``; and the estimator's own errors.
    """
    return _episode_level(batch, lambda returns, groups: E.grpo_advantages(returns, groups, norm=algo.norm,
                                                                           eps=algo.std_eps))


def rloo_estimator(batch: TurnBatch, algo: Any) -> tuple[Tensor, dict[str, float]]:
    """RLOO (:func:`~verlog.algos.estimators.rloo_advantages`) of the episode returns; as :func:`grpo_estimator`.

    ``algo`` is not read (the estimator has no settings).
    """
    return _episode_level(batch, E.rloo_advantages)


def reinforce_pp_baseline_estimator(batch: TurnBatch, algo: Any) -> tuple[Tensor, dict[str, float]]:
    """REINFORCE++-baseline (:func:`~verlog.algos.estimators.reinforce_pp_baseline_advantages`) of the episode
    returns; as :func:`grpo_estimator`. ``algo`` is not read (the estimator's eps keeps its default).
    """
    return _episode_level(batch, E.reinforce_pp_baseline_advantages)


def reinforce_pp_estimator(batch: TurnBatch, algo: Any) -> tuple[Tensor, dict[str, float]]:
    """REINFORCE++ (:func:`~verlog.algos.estimators.reinforce_pp_advantages`): whitened discounted turn returns.

    ``algo.reinforce_pp_gamma`` discounts across turns. Returns and raises as :func:`grpo_estimator`
    (``group_ids`` are required though the batch is one group).
    """
    turns = flat_turns(batch)
    res = E.reinforce_pp_advantages(turns.rewards.to(torch.float64), turns.episode_ids, gamma=algo.reinforce_pp_gamma)
    return _on_tokens(batch, turns, res.advantages, res.no_signal, res)


def gigpo_estimator(batch: TurnBatch, algo: Any) -> tuple[Tensor, dict[str, float]]:
    """GiGPO (:func:`~verlog.algos.gigpo.gigpo_advantages`), anchor states from ``batch.state_ids``.

    ``algo.gigpo_omega``, ``gigpo_gamma``, ``norm`` and ``std_eps`` are read. Returns as
    :func:`grpo_estimator`.

    Raises:
        ValueError: no ``group_ids``, no ``state_ids`` (collect with state keys on); and the
            estimator's own errors.
    """
    turns = flat_turns(batch)
    if batch.state_ids is None:
        raise ValueError("gigpo needs state_ids (collect with state keys on)")
    states = batch.state_ids.reshape(-1)[turns.index]
    res = gigpo_advantages(turns.rewards.to(torch.float64), turns.episode_ids, turns.group_ids, states,
                           omega=algo.gigpo_omega, gamma=algo.gigpo_gamma, norm=algo.norm, eps=algo.std_eps)
    return _on_tokens(batch, turns, res.advantages, res.no_signal, res)
