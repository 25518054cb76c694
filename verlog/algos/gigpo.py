"""GiGPO: a group-relative episode advantage plus an anchor-state step advantage, per turn.

Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training", arXiv
2505.10978. Inputs are flat and unpadded, M turns with each episode's turns in time order,
and the conventions (per-episode group statistics, groups with no learning signal, float64
arithmetic) are those of :mod:`verlog.algos.estimators`.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import torch
from torch import Tensor

from verlog.algos.groups import (
    AdvantageResult,
    NormMode,
    advantage_result,
    check_gamma,
    check_ids,
    check_norm,
    check_positive,
    check_turns,
    discounted_within,
    group_index,
    normalised_group_advantage,
)

__all__ = ["gigpo_advantages"]


def _anchor_ids(anchor_keys: Sequence[Hashable] | Tensor, group_ids: Tensor, M: int, device: torch.device) -> Tensor:
    """Integer id per turn for the pair (episode group, anchor key)."""
    if isinstance(anchor_keys, Tensor):
        if anchor_keys.dim() != 1 or anchor_keys.dtype.is_floating_point or anchor_keys.dtype == torch.bool:
            raise TypeError("anchor_keys as a tensor must be a 1-D integer tensor")
        keys: Sequence[Hashable] = anchor_keys.tolist()
    else:
        keys = anchor_keys
    if len(keys) != M:
        raise ValueError(f"anchor_keys has {len(keys)} entries but rewards has {M}")
    table: dict[tuple[int, Hashable], int] = {}
    try:
        ids = [table.setdefault((g, k), len(table)) for g, k in zip(group_ids.tolist(), keys)]
    except TypeError as err:
        raise TypeError(f"anchor_keys must be hashable ({err})") from None
    return torch.tensor(ids, dtype=torch.long, device=device)


def gigpo_advantages(
    rewards: Tensor,
    episode_ids: Tensor,
    group_ids: Tensor,
    anchor_keys: Sequence[Hashable] | Tensor,
    *,
    omega: float = 1.0,
    gamma: float = 0.95,
    norm: NormMode = "mean",
    eps: float = 1e-6,
) -> AdvantageResult:
    """GiGPO: episode-level group advantage plus omega times a step-level anchor advantage.

    Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training",
    arXiv 2505.10978:

    * episode level (eq. 3): A^E(tau_i) = (R(tau_i) - mean_g R(tau)) / F_norm, with
      R(tau_i) = sum_t r_t (undiscounted), mean and std over the episodes of group g
      (each episode once; verl-agent's code averages over step rows instead);
    * step returns (eq. 5): R_t^(i) = sum_{k >= t} gamma^(k-t) r_k^(i);
    * anchor groups (eq. 6): turns of group g whose state has the same ``anchor_keys``
      value (e.g. the raw observation text) form one step-level group;
    * step level (eq. 7): A^S_{i,t} = (R_t^(i) - mean_{anchor} R) / F_norm, mean and std
      over the turn rows of the anchor group (a singleton anchor group gives 0);
    * combined (eq. 8): A_{i,t} = A^E(tau_i) + omega A^S_{i,t}.

    F_norm = unbiased std + eps (norm="mean_std") or 1 (norm="mean"), the same at both
    levels (verl-agent's ``mean_std_norm`` / ``mean_norm``).

    Args:
        rewards: float [M], per-turn rewards; each episode's turns in time order.
        episode_ids: int [M].
        group_ids: int [M], the episode group of each turn (constant within an episode).
        anchor_keys: M hashable state keys (a sequence, or a 1-D integer tensor); equal
            keys in different groups are different anchor states.
        omega: weight of the step-level advantage (>= 0).
        gamma: discount of the step returns, in [0, 1].
        norm: "mean_std" or "mean".
        eps: > 0, added to the std.

    Returns:
        :class:`~verlog.algos.groups.AdvantageResult` with advantages [M]; ``num_groups`` and
        ``num_no_signal_groups`` count episode groups; ``no_signal`` flags turns with no
        signal at either level; metrics as :func:`~verlog.algos.estimators.grpo_advantages`
        plus ``anchor_groups``, ``anchor_group_size_mean``, ``anchor_no_signal_fraction``
        (anchor groups of size 1 or all-equal step returns).

    Raises:
        TypeError: as :func:`~verlog.algos.estimators.grpo_advantages`; anchor keys
            unhashable or a bad tensor.
        ValueError: as :func:`~verlog.algos.estimators.grpo_advantages`; group_ids not
            constant within an episode; anchor_keys of the wrong length; omega < 0; gamma
            outside [0, 1].
    """
    check_turns(rewards, episode_ids)
    check_ids("group_ids", group_ids, rewards, "rewards")
    check_norm(norm)
    eps = check_positive("eps", eps)
    gamma = check_gamma(gamma)
    if isinstance(omega, bool) or not isinstance(omega, (int, float)) or not omega >= 0:
        raise ValueError(f"omega must be a number >= 0, got {omega!r}")
    M = rewards.numel()
    r = rewards.to(torch.float64)
    ep_inv, ep_counts = group_index(episode_ids)
    E = ep_counts.numel()
    gid = group_ids.to(torch.long)
    gmax = torch.zeros(E, dtype=torch.long, device=r.device).scatter_reduce_(0, ep_inv, gid, "amax", include_self=False)
    gmin = torch.zeros(E, dtype=torch.long, device=r.device).scatter_reduce_(0, ep_inv, gid, "amin", include_self=False)
    if bool((gmax != gmin).any()):
        raise ValueError("group_ids must be constant within each episode")

    # Episode level: one return per episode, group statistics over episodes.
    ep_ret = r.new_zeros(E).index_add_(0, ep_inv, r)
    a_ep, ep_elem, ep_grp, ep_cnt = normalised_group_advantage(ep_ret, gmax, norm, eps)

    # Step level: discounted step returns, grouped by (episode group, anchor key).
    anchors = _anchor_ids(anchor_keys, gid, M, r.device)
    g = discounted_within(r, ep_inv, gamma)
    a_step, st_elem, st_grp, st_cnt = normalised_group_advantage(g, anchors, norm, eps)

    adv = a_ep[ep_inv] + float(omega) * a_step
    return advantage_result(
        adv, rewards.dtype, ep_elem[ep_inv] & st_elem, ep_grp, ep_cnt,
        anchor_groups=float(st_cnt.numel()),
        anchor_group_size_mean=float(st_cnt.double().mean()),
        anchor_no_signal_fraction=float(st_grp.double().mean()),
    )
