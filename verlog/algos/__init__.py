"""RL maths as pure tensor functions (no I/O): dual-discount GAE, PPO losses, batch stats."""

from verlog.algos.gae import dual_discount_gae, reference_dual_discount_gae
from verlog.algos.losses import (
    entropy_bonus,
    entropy_from_logits,
    kl_penalty,
    logprobs_from_logits,
    masked_mean,
    ppo_policy_loss,
    value_loss,
)
from verlog.algos.stats import explained_variance, masked_whiten

__all__ = [
    "dual_discount_gae",
    "reference_dual_discount_gae",
    "entropy_bonus",
    "entropy_from_logits",
    "kl_penalty",
    "logprobs_from_logits",
    "masked_mean",
    "ppo_policy_loss",
    "value_loss",
    "explained_variance",
    "masked_whiten",
]
