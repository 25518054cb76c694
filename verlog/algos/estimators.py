"""Critic-free advantage estimators for turn-level data: GRPO, RLOO, REINFORCE++ and its baseline variant.

Data layout (all flat and unpadded: advantages are computed *before* any batch padding)
-------------------------------------------------------------------------------------
* Episode-level estimators (:func:`grpo_advantages`, :func:`rloo_advantages`,
  :func:`reinforce_pp_baseline_advantages`) take E episodes: ``returns`` float [E] (the
  episode return, e.g. from :func:`~verlog.algos.groups.episode_returns`) and ``group_ids``
  int [E] (episodes started from the same task/seed share a group id). They return one
  advantage per episode; ``advantages[inverse]`` (``inverse`` from ``episode_returns``)
  spreads it over the episode's turns.
* Turn-level estimators (:func:`reinforce_pp_advantages`,
  :func:`~verlog.algos.gigpo.gigpo_advantages`) take
  M turns: ``rewards`` float [M] (the environment reward of each step, shaping included)
  and ``episode_ids`` int [M]. The turns of one episode must appear in time order; they
  need not be contiguous. They return one advantage per turn.
* :func:`~verlog.algos.turns.turn_index` lists the turns of a TurnBatch ([T, N] layout) in
  that order, and :func:`~verlog.algos.turns.broadcast_turn_advantages` writes per-turn
  advantages back onto the [T, N, R] response tokens, so any estimator can replace
  ``dual_discount_gae`` in the trainer.

Only complete episodes give correct returns: an episode cut by the batch boundary of the
fixed-turn collector has a partial return. Choosing which turns to pass (the ``include``
mask of ``turn_index``) is the caller's job.

Per-episode normalisation ("long episodes do not dominate")
-----------------------------------------------------------
verl-agent takes group statistics over *step rows*, so an episode of 40 turns weighs 40
times as much as one of 1 turn in the baseline. Here:

* GRPO, RLOO, REINFORCE++-baseline, GiGPO's episode level: group mean and std are over
  the group's *episodes*, each counted once, whatever its number of turns (as in the
  GRPO and GiGPO papers' equations).
* REINFORCE++-baseline's global whitening is over episodes (each once), not over turns
  or tokens.
* REINFORCE++: the whitening statistics of the per-turn discounted returns weigh every
  turn of episode i by 1 / (E * T_i), so each episode has total weight 1/E.
* GiGPO's step level: an anchor group is a set of (state, action) samples, so its mean
  and std are over the *turn rows* that share the anchor state (paper eq. 7); an episode
  that visits the same state k times contributes k samples there.

Groups with no learning signal
------------------------------
A group of size 1, or a group whose values are all exactly equal, carries no learning
signal: its members get an advantage of exactly 0 (no 0/0, no division by a zero std),
and every result reports them (:class:`~verlog.algos.groups.AdvantageResult` ``no_signal``
and counts). Note that verl gives a singleton group mean 0 and std 1 (advantage = its raw
return); here it is 0.

Arithmetic is float64 internally; outputs have the input's float dtype. Std is the
unbiased (Bessel) estimator where the source uses a group std (as verl and verl-agent),
the population one for the batch whitening of REINFORCE++ (as ``masked_whiten``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from verlog.algos.groups import (
    AdvantageResult,
    NormMode,
    advantage_result,
    check_episodes,
    check_gamma,
    check_norm,
    check_positive,
    check_turns,
    discounted_within,
    group_index,
    group_stats,
    normalised_group_advantage,
)

__all__ = [
    "grpo_advantages",
    "rloo_advantages",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "dynamic_sampling_filter",
]


# --------------------------------------------------------------------------------------
# episode-level estimators
# --------------------------------------------------------------------------------------
def grpo_advantages(
    returns: Tensor, group_ids: Tensor, *, norm: NormMode = "mean_std", eps: float = 1e-6
) -> AdvantageResult:
    """GRPO group-relative advantage of each episode.

    A_i = (R_i - mean_g R) / (std_g R + eps)   (norm="mean_std"; Shao et al. 2024,
    "DeepSeekMath", sec. 4.1.2, outcome supervision: r~_i = (r_i - mean(r)) / std(r)),
    A_i = R_i - mean_g R                        (norm="mean"; Liu et al. 2025,
    "Understanding R1-Zero-Like Training: A Critical Perspective" (Dr. GRPO), eq. 6
    without the std division).
    mean and the unbiased std are over the E_g episodes of the group (each once).

    Args:
        returns: float [E], one return per episode.
        group_ids: int [E].
        norm: "mean_std" or "mean".
        eps: > 0, added to the std.

    Returns:
        :class:`~verlog.algos.groups.AdvantageResult` with advantages [E]; metrics ``group_size_mean``,
        ``no_signal_group_fraction``, ``singleton_groups``.

    Raises:
        TypeError: non-tensors, returns not float32/64, ids not integer, eps not a number.
        ValueError: not 1-D, empty, shape/device mismatch, NaN/inf, bad norm, eps <= 0.
    """
    check_episodes(returns, group_ids)
    check_norm(norm)
    eps = check_positive("eps", eps)
    adv, elem, grp, counts = normalised_group_advantage(returns.to(torch.float64), group_ids, norm, eps)
    return advantage_result(adv, returns.dtype, elem, grp, counts)


def rloo_advantages(returns: Tensor, group_ids: Tensor) -> AdvantageResult:
    """REINFORCE leave-one-out: each episode's baseline is the mean of the others' returns.

    A_i = R_i - 1/(n-1) sum_{j != i, j in g} R_j = n/(n-1) (R_i - mean_g R)
    (Kool et al. 2019, "Buy 4 REINFORCE Samples, Get a Baseline for Free!", eq. 9;
    Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for
    Learning from Human Feedback in LLMs", sec. 3.2). n counts episodes of the group (not
    turn rows). A group of size 1 has no "others": advantage 0, reported as no signal.

    Args:
        returns: float [E]; group_ids: int [E].

    Returns:
        :class:`~verlog.algos.groups.AdvantageResult` with advantages [E] (metrics as :func:`grpo_advantages`).

    Raises:
        as :func:`grpo_advantages`.
    """
    check_episodes(returns, group_ids)
    x = returns.to(torch.float64)
    inverse, counts = group_index(group_ids)
    _, _, no_sig = group_stats(x, inverse, counts)
    total = x.new_zeros(counts.numel()).index_add_(0, inverse, x)
    n = counts.to(torch.float64)[inverse]
    adv = x - (total[inverse] - x) / (n - 1).clamp(min=1)
    elem = no_sig[inverse]
    return advantage_result(torch.where(elem, 0, adv), returns.dtype, elem, no_sig, counts)


def _whiten(x: Tensor, w: Tensor, eps: float) -> Tensor:
    """(x - mu) / sqrt(var + eps) with weights w (sum 1): mu = sum w x, var = sum w (x-mu)^2."""
    mu = (w * x).sum()
    var = (w * (x - mu) ** 2).sum()
    return (x - mu) / torch.sqrt(var + eps)


def reinforce_pp_baseline_advantages(returns: Tensor, group_ids: Tensor, *, eps: float = 1e-8) -> AdvantageResult:
    """REINFORCE++-baseline: group-mean baseline, then whitening over the batch's episodes.

    a_i = R_i - mean_g R;  A_i = (a_i - mean_batch a) / sqrt(var_batch a + eps)
    (Hu et al. 2025, "REINFORCE++: Stabilizing Critic-Free Policy Optimization with
    Global Advantage Normalization", arXiv 2501.03262, the "REINFORCE++-baseline"
    variant: group mean subtraction, then global batch normalisation). mean_batch and
    the population var_batch are over the E episodes, each once (verl whitens over
    tokens). Because each group's centred values sum to 0, mean_batch a = 0 up to
    rounding; members of no-signal groups get exactly 0.

    Args:
        returns: float [E]; group_ids: int [E]; eps: > 0, added to the variance.

    Returns:
        :class:`~verlog.algos.groups.AdvantageResult` with advantages [E] (metrics as :func:`grpo_advantages`).

    Raises:
        as :func:`grpo_advantages`.
    """
    check_episodes(returns, group_ids)
    eps = check_positive("eps", eps)
    centred, elem, grp, counts = normalised_group_advantage(returns.to(torch.float64), group_ids, "mean", eps)
    w = torch.full_like(centred, 1.0 / centred.numel())
    adv = torch.where(elem, 0, _whiten(centred, w, eps))
    return advantage_result(adv, returns.dtype, elem, grp, counts)


# --------------------------------------------------------------------------------------
# turn-level estimators
# --------------------------------------------------------------------------------------
def reinforce_pp_advantages(
    rewards: Tensor, episode_ids: Tensor, *, gamma: float = 1.0, eps: float = 1e-8
) -> AdvantageResult:
    """REINFORCE++ at turn level: discounted returns, whitened over the batch per episode.

    G_t = sum_{k >= t} gamma^(k-t) r_k inside the episode, then A_t = (G_t - mu) /
    sqrt(sigma^2 + eps) (Hu et al. 2025, "REINFORCE++", arXiv 2501.03262, sec. 3:
    discounted return with the KL penalty in the reward, then global batch advantage
    normalisation). Put any KL penalty into ``rewards`` beforehand. Statistics are
    weighted: turn t of episode i (T_i turns) has weight 1/(E T_i), mu = sum w G,
    sigma^2 = sum w (G - mu)^2 (population), so every episode weighs the same.

    No groups: the batch is the one "group"; it has no signal when all G are equal
    (then every advantage is exactly 0).

    Args:
        rewards: float [M], per-turn rewards, each episode's turns in time order.
        episode_ids: int [M].
        gamma: discount across turns in [0, 1].
        eps: > 0, added to the variance.

    Returns:
        :class:`~verlog.algos.groups.AdvantageResult` with advantages [M], num_groups = 1; metrics
        ``episodes``, ``return_mean`` (mu), ``return_std`` (sigma).

    Raises:
        TypeError/ValueError: as :func:`~verlog.algos.groups.episode_returns`; gamma outside [0, 1]; eps <= 0.
    """
    check_turns(rewards, episode_ids)
    gamma = check_gamma(gamma)
    eps = check_positive("eps", eps)
    inverse, counts = group_index(episode_ids)
    g = discounted_within(rewards.to(torch.float64), inverse, gamma)
    E = counts.numel()
    w = 1.0 / (E * counts.to(torch.float64)[inverse])
    dead = bool(g.max() == g.min())
    adv = torch.zeros_like(g) if dead else _whiten(g, w, eps)
    mu = float((w * g).sum())
    sigma = float((w * (g - mu) ** 2).sum()) ** 0.5
    no_sig = torch.full(g.shape, dead, dtype=torch.bool, device=g.device)
    return AdvantageResult(adv.to(rewards.dtype), no_sig, 1, int(dead),
                           {"episodes": float(E), "return_mean": mu, "return_std": sigma})


# --------------------------------------------------------------------------------------
# DAPO dynamic sampling
# --------------------------------------------------------------------------------------
def dynamic_sampling_filter(returns: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor]:
    """Which episodes to keep under DAPO's dynamic sampling (drop all-equal groups).

    DAPO (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at
    Scale", arXiv 2503.14476, eq. 11, constraint 0 < |{o_i : is_equivalent(a, o_i)}| < G)
    keeps only groups whose outputs are neither all correct nor all wrong. Generalised to
    real-valued returns: a group is dropped when all its returns are exactly equal,
    including a group of size 1 (its advantage would be 0 under any group estimator).

    Args:
        returns: float [E], episode returns; group_ids: int [E].

    Returns:
        (keep bool [E], dropped_group_ids: the sorted distinct ids of dropped groups,
        int64 1-D, possibly empty).

    Raises:
        as :func:`grpo_advantages`.
    """
    check_episodes(returns, group_ids)
    ids, inverse, counts = torch.unique(group_ids, sorted=True, return_inverse=True, return_counts=True)
    _, _, no_sig = group_stats(returns.to(torch.float64), inverse, counts)
    return ~no_sig[inverse], ids[no_sig].to(torch.long)
