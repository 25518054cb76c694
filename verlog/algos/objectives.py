"""The actor's and the critic's loss of one micro-batch, as the trainer back-propagates them.

Shapes: B turns (rows) of the micro-batch, R response-token slots; every per-token tensor is
[B, R] and ``mask`` (bool [B, R]) is True on the trained response tokens.

A minibatch is split into micro-batches for gradient accumulation; each micro-batch's loss is
divided by a count of the *whole minibatch* (``loss_normalizer`` for the policy loss: its valid
tokens for token-mean, its sequences for the seq-mean aggregations; ``token_count``: its valid
tokens), so the micro-batch losses and their gradients add up to the minibatch's loss
(:mod:`verlog.algos.losses`).

Actor (per micro-batch):
    loss = pg - entropy_coef * sum(entropy * mask) / token_count
           [+ kl_coef * sum(kl(logprobs, ref_logprobs) * mask) / token_count]
with pg the clipped policy surrogate: PPO's (Schulman et al. 2017, "Proximal Policy
Optimization Algorithms", eq. 7, with the entropy bonus of eq. 9; dual clip of Ye et al. 2020,
"Mastering Complex Control in MOBA Games with Deep Reinforcement Learning", eq. 5) or GSPO's
sequence-ratio surrogate (Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv
2507.18071). The KL term (:func:`~verlog.algos.losses.kl_penalty`) is the KL-as-loss option;
with the KL in the reward it is left out here.

Critic (per micro-batch):
    loss = value_coef * value_loss
with the clipped value loss of :func:`~verlog.algos.losses.value_loss` (the squared-error
term of PPO's eq. 9), token-mean over ``token_count``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from verlog.algos.losses import gspo_policy_loss, kl_penalty, ppo_policy_loss, value_loss

__all__ = ["ActorLoss", "CriticLoss", "actor_loss", "critic_loss"]


@dataclass(frozen=True)
class ActorLoss:
    """The actor's loss of one micro-batch and its parts.

    Attributes:
        loss: 0-dim tensor to back-propagate (policy loss - entropy bonus [+ KL loss]).
        pg_loss: 0-dim tensor, the policy surrogate alone (its micro-batch share).
        entropy_sum: 0-dim tensor, sum of the entropy over the valid tokens, in nats.
        kl_ref_sum: 0-dim tensor, sum of the per-token KL to the reference over the valid
            tokens, in nats; None when the KL loss is off.
        stats: the policy loss's metrics (floats; :func:`~verlog.algos.losses.ppo_policy_loss`
            or :func:`~verlog.algos.losses.gspo_policy_loss`).
    """

    loss: Tensor
    pg_loss: Tensor
    entropy_sum: Tensor
    kl_ref_sum: Tensor | None
    stats: dict[str, float]


@dataclass(frozen=True)
class CriticLoss:
    """The critic's loss of one micro-batch.

    Attributes:
        loss: 0-dim tensor to back-propagate, ``value_coef * value_loss``.
        value_loss: 0-dim tensor, the clipped value loss alone (its micro-batch share).
        stats: :func:`~verlog.algos.losses.value_loss`'s metrics (floats).
    """

    loss: Tensor
    value_loss: Tensor
    stats: dict[str, float]


def actor_loss(
    logprobs: Tensor,
    entropy: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    policy_loss: str,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None,
    aggregation: str,
    loss_normalizer: float,
    token_count: float,
    entropy_coef: float,
    ref_logprobs: Tensor | None = None,
    kl_coef: float = 0.0,
    kl_kind: str = "k1",
) -> ActorLoss:
    """The actor's loss of one micro-batch (module docstring): policy surrogate, entropy bonus, KL loss.

    Args:
        logprobs: float [B, R], log pi_theta of the response tokens (with grad).
        entropy: float [B, R], the policy's entropy at each response position, in nats (with grad).
        old_logprobs: float [B, R], log-probs of the policy that was scored before the update.
        advantages: float [B, R].
        mask: bool [B, R], True on trained tokens.
        policy_loss: "ppo" (:func:`~verlog.algos.losses.ppo_policy_loss`, with ``dual_clip``) or
            "gspo" (:func:`~verlog.algos.losses.gspo_policy_loss`; ``dual_clip`` is not used).
        clip_low, clip_high: the ratio's clip range [1 - clip_low, 1 + clip_high].
        dual_clip: c > 1 or None (PPO only).
        aggregation: the policy loss's aggregation (:data:`~verlog.algos.losses.AGGREGATIONS`).
        loss_normalizer: the minibatch count the policy loss is divided by (> 0).
        token_count: the minibatch's valid tokens, divisor of the entropy and KL sums (> 0).
        entropy_coef: weight of the entropy bonus.
        ref_logprobs: float [B, R], log-probs of the reference policy, to add the KL loss; None
            leaves it out (KL off, or applied in the reward).
        kl_coef: weight of the KL loss. kl_kind: "k1", "k2" or "k3" (:func:`~verlog.algos.losses.kl_penalty`).

    Returns:
        :class:`ActorLoss`.

    Raises:
        ValueError: an unknown ``policy_loss``; and what the policy loss and ``kl_penalty`` raise.
    """
    if policy_loss == "gspo":
        pg, stats = gspo_policy_loss(logprobs, old_logprobs, advantages, mask, clip_low=clip_low,
                                     clip_high=clip_high, loss_normalizer=loss_normalizer, aggregation=aggregation)
    elif policy_loss == "ppo":
        pg, stats = ppo_policy_loss(logprobs, old_logprobs, advantages, mask, clip_low=clip_low, clip_high=clip_high,
                                    dual_clip=dual_clip, loss_normalizer=loss_normalizer, aggregation=aggregation)
    else:
        raise ValueError(f"policy_loss must be 'ppo' or 'gspo', got {policy_loss!r}")
    ent_sum = (entropy * mask).sum()
    loss = pg - entropy_coef * ent_sum / token_count
    kl_ref = None
    if ref_logprobs is not None:
        kl_ref = (kl_penalty(logprobs, ref_logprobs, kl_kind) * mask).sum()
        loss = loss + kl_coef * kl_ref / token_count
    return ActorLoss(loss, pg, ent_sum, kl_ref, stats)


def critic_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    value_clip: float | None,
    value_coef: float,
    token_count: float,
) -> CriticLoss:
    """The critic's loss of one micro-batch: ``value_coef`` times the clipped value loss.

    Args:
        values: float [B, R], the critic's current values V_k (with grad).
        old_values: float [B, R], the values scored before the update.
        returns: float [B, R], the GAE returns (critic targets).
        mask: bool [B, R], True on trained tokens.
        value_clip: eps of the value clip around ``old_values``, or None for the plain squared error.
        value_coef: weight of the value loss.
        token_count: the minibatch's valid tokens (> 0): the value loss is summed over this
            micro-batch's valid tokens and divided by it.

    Returns:
        :class:`CriticLoss`.

    Raises:
        what :func:`~verlog.algos.losses.value_loss` raises.
    """
    vl, vstats = value_loss(values, old_values, returns, mask, clip_range=value_clip, loss_normalizer=token_count)
    return CriticLoss(value_coef * vl, vl, vstats)
