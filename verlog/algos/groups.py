"""What the critic-free estimators share: their result, input checks, group statistics, returns.

The estimators (:mod:`verlog.algos.estimators`, :mod:`verlog.algos.gigpo`) work on flat,
unpadded tensors: E episodes (``returns`` [E], ``group_ids`` [E]) or M turns (``rewards``
[M], ``episode_ids`` [M], each episode's turns in time order). The helpers here check those
inputs, index the groups, compute per-group mean/std and the "no learning signal" flags, and
turn per-turn rewards into episode or discounted per-turn returns. Arithmetic is float64; std
is the unbiased (Bessel) estimator. Conventions are in :mod:`verlog.algos.estimators`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from verlog.algos.gae import _reverse_linear_scan

__all__ = [
    "AdvantageResult",
    "NormMode",
    "episode_returns",
    "discounted_turn_returns",
    "discounted_within",
    "check_values",
    "check_ids",
    "check_turns",
    "check_episodes",
    "check_norm",
    "check_positive",
    "check_gamma",
    "group_index",
    "group_stats",
    "normalised_group_advantage",
    "advantage_result",
]

NormMode = Literal["mean_std", "mean"]
_NORMS = ("mean_std", "mean")


@dataclass(frozen=True)
class AdvantageResult:
    """What an estimator returns.

    Attributes:
        advantages: float [E] (episode-level estimators) or [M] (turn-level), dtype of the
            input returns/rewards.
        no_signal: bool, same shape: the element belongs to a group with no learning
            signal (size 1 or all values equal); its advantage is exactly 0. For GiGPO a
            turn is flagged when both its episode group and its anchor group have none.
        num_groups: groups seen (REINFORCE++: 1, the batch).
        num_no_signal_groups: of which had no learning signal.
        metrics: extra floats for logging (names per estimator, documented there).
    """

    advantages: Tensor
    no_signal: Tensor
    num_groups: int
    num_no_signal_groups: int
    metrics: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------------------
# validation and group helpers
# --------------------------------------------------------------------------------------
def check_values(name: str, x: object) -> Tensor:
    """``x`` itself if it is a finite, non-empty, 1-D float32/float64 tensor (TypeError/ValueError naming ``name``)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"{name} must be float32 or float64, got {x.dtype}")
    if x.dim() != 1:
        raise ValueError(f"{name} must be 1-D (flat, unpadded), got shape {tuple(x.shape)}")
    if x.numel() == 0:
        raise ValueError(f"{name} is empty (need at least one element)")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return x


def check_ids(name: str, ids: object, like: Tensor, like_name: str) -> Tensor:
    """``ids`` itself if it is an integer tensor of the shape and device of ``like`` (TypeError/ValueError)."""
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(ids).__name__}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor, got {ids.dtype}")
    if ids.shape != like.shape:
        raise ValueError(f"{name} has shape {tuple(ids.shape)} but {like_name} has shape {tuple(like.shape)}")
    if ids.device != like.device:
        raise ValueError(f"{name} is on {ids.device} but {like_name} is on {like.device}")
    return ids


def check_norm(norm: str) -> None:
    """ValueError unless ``norm`` is "mean_std" or "mean"."""
    if norm not in _NORMS:
        raise ValueError(f"norm must be one of {', '.join(_NORMS)}, got {norm!r}")


def check_positive(name: str, x: float) -> float:
    """``x`` as a float if it is a number > 0 (TypeError for a non-number, ValueError otherwise)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(x).__name__}")
    if not x > 0:
        raise ValueError(f"{name} must be > 0, got {x}")
    return float(x)


def check_gamma(gamma: float) -> float:
    """``gamma`` as a float if it is a number in [0, 1] (TypeError for a non-number, ValueError otherwise)."""
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)):
        raise TypeError(f"gamma must be a float in [0, 1], got {type(gamma).__name__}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    return float(gamma)


def check_turns(rewards: Tensor, episode_ids: Tensor) -> None:
    """Check per-turn inputs: ``rewards`` float [M] as :func:`check_values`, ``episode_ids`` as :func:`check_ids`."""
    check_values("rewards", rewards)
    check_ids("episode_ids", episode_ids, rewards, "rewards")


def check_episodes(returns: Tensor, group_ids: Tensor) -> None:
    """Check per-episode inputs: ``returns`` float [E] as :func:`check_values`, ``group_ids`` as :func:`check_ids`."""
    check_values("returns", returns)
    check_ids("group_ids", group_ids, returns, "returns")


def group_index(ids: Tensor) -> tuple[Tensor, Tensor]:
    """(inverse [n] long into groups 0..G-1 in sorted-id order, counts [G] long)."""
    _, inverse, counts = torch.unique(ids, sorted=True, return_inverse=True, return_counts=True)
    return inverse, counts


def group_stats(x: Tensor, inverse: Tensor, counts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per group: mean [G], unbiased std [G] (0 for size 1), no_signal [G] bool.

    no_signal = size 1 or max == min (exact equality of the float64 values).
    """
    G = counts.numel()
    n = counts.to(x.dtype)
    mean = x.new_zeros(G).index_add_(0, inverse, x) / n
    dev = x - mean[inverse]
    ss = x.new_zeros(G).index_add_(0, inverse, dev * dev)
    std = torch.where(counts > 1, ss / (n - 1).clamp(min=1), 0).sqrt()
    amax = x.new_zeros(G).scatter_reduce_(0, inverse, x, "amax", include_self=False)
    amin = x.new_zeros(G).scatter_reduce_(0, inverse, x, "amin", include_self=False)
    return mean, std, (counts == 1) | (amax == amin)


def normalised_group_advantage(
    x: Tensor, group_ids: Tensor, norm: str, eps: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(x - mean_g) / F_norm per element, 0 in no-signal groups.

    Returns (advantages [n] float64, no_signal per element [n], no_signal per group [G],
    counts [G]).
    """
    inverse, counts = group_index(group_ids)
    mean, std, no_sig = group_stats(x, inverse, counts)
    adv = x - mean[inverse]
    if norm == "mean_std":
        adv = adv / (std[inverse] + eps)
    elem_no_sig = no_sig[inverse]
    return torch.where(elem_no_sig, 0, adv), elem_no_sig, no_sig, counts


def advantage_result(adv: Tensor, dtype: torch.dtype, elem_no_sig: Tensor, group_no_sig: Tensor, counts: Tensor,
                     **metrics: float) -> AdvantageResult:
    """An :class:`AdvantageResult` of ``adv`` cast to ``dtype``, with the group metrics every estimator reports.

    Metrics: ``group_size_mean``, ``no_signal_group_fraction``, ``singleton_groups``, then ``metrics``.
    """
    G, dead = int(counts.numel()), int(group_no_sig.sum())
    base = {
        "group_size_mean": float(counts.double().mean()),
        "no_signal_group_fraction": dead / G,
        "singleton_groups": float(int((counts == 1).sum())),
    }
    base.update(metrics)
    return AdvantageResult(adv.to(dtype), elem_no_sig, G, dead, base)


# --------------------------------------------------------------------------------------
# returns
# --------------------------------------------------------------------------------------
def episode_returns(rewards: Tensor, episode_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Undiscounted episode returns R(tau) = sum_t r_t from per-turn rewards.

    Args:
        rewards: float [M], per-turn environment rewards (any order).
        episode_ids: int [M], the episode of each turn.

    Returns:
        (returns [E] in the dtype of rewards, ids [E] the sorted distinct episode ids,
        inverse long [M] with ``ids[inverse] == episode_ids``; so an episode-level
        advantage ``a`` [E] reaches the turns as ``a[inverse]``).

    Raises:
        TypeError/ValueError: non-tensor, non-float rewards, non-integer ids, shape or
        device mismatch, empty input, NaN/inf.
    """
    check_turns(rewards, episode_ids)
    ids, inverse = torch.unique(episode_ids, sorted=True, return_inverse=True)
    totals = torch.zeros(ids.numel(), dtype=torch.float64, device=rewards.device)
    totals.index_add_(0, inverse, rewards.to(torch.float64))
    return totals.to(rewards.dtype), ids, inverse


def discounted_within(r64: Tensor, inverse: Tensor, gamma: float) -> Tensor:
    """G_t = r_t + gamma G_{t+1} inside each episode (float64 [M], input order)."""
    order = torch.sort(inverse, stable=True).indices  # episode-contiguous, time order kept
    e = inverse[order]
    x = r64[order].clone()
    m = torch.zeros_like(x)
    m[:-1] = (e[1:] == e[:-1]).to(x.dtype) * gamma  # (a where() of Python scalars would be float32)
    y = _reverse_linear_scan(x, m)
    out = torch.empty_like(y)
    out[order] = y
    return out


def discounted_turn_returns(rewards: Tensor, episode_ids: Tensor, gamma: float) -> Tensor:
    """Per-turn discounted returns G_t = sum_{k >= t} gamma^(k-t) r_k within each episode.

    GiGPO's step return (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM
    Agent Training", arXiv 2505.10978, eq. 5) and REINFORCE++'s return (Hu 2025,
    "REINFORCE++", arXiv 2501.03262, sec. 3, applied at turn level). Vectorised: a
    segmented scan, no Python loop over turns.

    Args:
        rewards: float [M]; the turns of each episode in time order (not nec. contiguous).
        episode_ids: int [M].
        gamma: discount across turns, in [0, 1].

    Returns:
        float [M], dtype of rewards.

    Raises:
        TypeError/ValueError: as :func:`episode_returns`; gamma outside [0, 1].
    """
    check_turns(rewards, episode_ids)
    gamma = check_gamma(gamma)
    inverse, _ = group_index(episode_ids)
    return discounted_within(rewards.to(torch.float64), inverse, gamma).to(rewards.dtype)
