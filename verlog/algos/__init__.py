"""RL maths as pure tensor functions (no I/O): dual-discount GAE, critic-free estimators,
PPO/GSPO losses and the micro-batch objectives, log-probs and entropies, reward terms, batch stats.

The algorithm table (:mod:`verlog.algos.registry`) and the TurnBatch glue
(:mod:`verlog.algos.batch_estimators`, :mod:`verlog.algos.critic_free`) are imported from their
modules.
"""

from verlog.algos.estimators import (
    dynamic_sampling_filter,
    grpo_advantages,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
)
from verlog.algos.gae import dual_discount_gae, reference_dual_discount_gae
from verlog.algos.gigpo import gigpo_advantages
from verlog.algos.groups import AdvantageResult, discounted_turn_returns, episode_returns
from verlog.algos.logprobs import entropy_from_logits, logprobs_from_logits
from verlog.algos.losses import (
    AGGREGATIONS,
    aggregate_loss,
    entropy_bonus,
    gspo_policy_loss,
    kl_penalty,
    masked_mean,
    ppo_policy_loss,
    value_loss,
)
from verlog.algos.objectives import ActorLoss, CriticLoss, actor_loss, critic_loss
from verlog.algos.rewards import overlong_penalty, shaped_rewards, token_rewards
from verlog.algos.stats import explained_variance, masked_whiten
from verlog.algos.turns import broadcast_turn_advantages, turn_index

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
    "AdvantageResult",
    "broadcast_turn_advantages",
    "discounted_turn_returns",
    "dynamic_sampling_filter",
    "episode_returns",
    "gigpo_advantages",
    "grpo_advantages",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "rloo_advantages",
    "turn_index",
    "AGGREGATIONS",
    "aggregate_loss",
    "gspo_policy_loss",
    "overlong_penalty",
    "shaped_rewards",
    "token_rewards",
    "ActorLoss",
    "CriticLoss",
    "actor_loss",
    "critic_loss",
]
