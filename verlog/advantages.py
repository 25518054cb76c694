"""The advantage step of an iteration: token advantages (and the critic's targets) of a scored batch.

PPO with a critic: token rewards (:func:`~verlog.algos.rewards.token_rewards`: the turn's reward on
its last response token, plus the per-token KL penalty when ``ppo.kl_in_reward``), then the
dual-discount GAE of :func:`~verlog.algos.gae.padded_dual_discount_gae` (whole-episode batches end
their shorter episodes with padding turns), advantages whitened over every rank's valid tokens.
Critic-free algorithms: their estimator on the whole episodes (normalised within groups; no
returns, no whitening). Which path an algorithm takes is read from its entry in the algorithm
table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from verlog.algos.critic_free import critic_free_advantages
from verlog.algos.gae import padded_dual_discount_gae
from verlog.algos.losses import kl_penalty
from verlog.algos.registry import ALGORITHMS
from verlog.algos.rewards import token_rewards
from verlog.algos.stats import masked_whiten
from verlog.batch import ScoredBatch, TurnBatch
from verlog.config import TrainConfig
from verlog.scoring import Scores

__all__ = ["Advantages", "compute_advantages", "scored_batch"]


@dataclass(frozen=True)
class Advantages:
    """What the advantage step computed for a batch of T x N turns (R response-token slots).

    Attributes:
        advantages: [T, N, R] float32, the advantages of the policy loss (zero off the response mask).
        returns: [T, N, R] float32, the critic's targets (advantages + values before whitening),
            or None for algorithms without a critic.
        token_rewards: [T, N, R] float32, the rewards placed on response tokens, or None without a critic.
        metrics: the estimator's own metrics (``algo/*``).
    """

    advantages: torch.Tensor
    returns: Optional[torch.Tensor] = None
    token_rewards: Optional[torch.Tensor] = None
    metrics: dict[str, float] = field(default_factory=dict)


def compute_advantages(batch: TurnBatch, scores: Scores, cfg: TrainConfig, *, iteration: int = 1,
                       reduce_fn: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Advantages:
    """Token advantages of ``cfg.algo.algorithm`` for a scored batch.

    Args:
        batch: the collected batch.
        scores: its :class:`~verlog.scoring.Scores` (values and bootstrap values for PPO).
        cfg: the run's config (``gae``, ``ppo.kl_*``, ``algo``).
        iteration: the iteration the batch trains (1-based): picks the step discount of
            ``gae.gamma_step_schedule``.
        reduce_fn: sums a tensor over data-parallel ranks, so that whitening uses the global batch's
            statistics (None: this rank alone).

    Raises:
        ValueError: from the estimators (e.g. GiGPO without state ids).
    """
    if not ALGORITHMS[cfg.algo.algorithm].needs_critic:  # the critic-free family: its own estimator
        adv, metrics = critic_free_advantages(batch, cfg.algo)
        return Advantages(adv, metrics=metrics)
    mask = batch.response_mask
    kl = None
    if cfg.ppo.kl_coef > 0 and cfg.ppo.kl_in_reward:
        kl = kl_penalty(scores.old_logprobs, scores.ref_logprobs, cfg.ppo.kl_kind)
    rewards = token_rewards(batch.rewards, mask, kl, cfg.ppo.kl_coef, turn_mask=batch.turns)
    g = cfg.gae
    adv, ret = padded_dual_discount_gae(rewards, scores.values, mask, batch.terminated, batch.truncated,
                                        scores.bootstrap_values, batch.turns, g.gamma_step_at(iteration), g.lam_step,
                                        g.gamma_token, g.lam_token)
    if g.whiten_advantages:
        adv = masked_whiten(adv, mask, reduce_fn=reduce_fn)
    return Advantages(adv, ret, rewards)


def scored_batch(batch: TurnBatch, scores: Scores | None, adv: Advantages | None) -> ScoredBatch:
    """The batch with what was computed from it (nothing when it was not scored), for a dump."""
    computed: dict[str, torch.Tensor | None] = {}
    if scores is not None:
        computed.update(old_logprobs=scores.old_logprobs, ref_logprobs=scores.ref_logprobs, values=scores.values,
                        bootstrap_values=scores.bootstrap_values)
    if adv is not None:
        computed.update(advantages=adv.advantages, returns=adv.returns, token_rewards=adv.token_rewards)
    return ScoredBatch(batch, **computed)
