"""Critic-free advantage estimators for turn-level data: GRPO, RLOO, REINFORCE++, GiGPO.

Data layout (all flat and unpadded: advantages are computed *before* any batch padding)
-------------------------------------------------------------------------------------
* Episode-level estimators (:func:`grpo_advantages`, :func:`rloo_advantages`,
  :func:`reinforce_pp_baseline_advantages`) take E episodes: ``returns`` float [E] (the
  episode return, e.g. from :func:`episode_returns`) and ``group_ids`` int [E] (episodes
  started from the same task/seed share a group id). They return one advantage per
  episode; ``advantages[inverse]`` (``inverse`` from :func:`episode_returns`) spreads it
  over the episode's turns.
* Turn-level estimators (:func:`reinforce_pp_advantages`, :func:`gigpo_advantages`) take
  M turns: ``rewards`` float [M] (the environment reward of each step, shaping included)
  and ``episode_ids`` int [M]. The turns of one episode must appear in time order; they
  need not be contiguous. They return one advantage per turn.
* :func:`turn_index` lists the turns of a TurnBatch ([T, N] layout) in that order, and
  :func:`broadcast_turn_advantages` writes per-turn advantages back onto the [T, N, R]
  response tokens, so any estimator can replace ``dual_discount_gae`` in the trainer.

Only complete episodes give correct returns: an episode cut by the batch boundary of the
fixed-turn collector has a partial return. Choosing which turns to pass (the ``include``
mask of :func:`turn_index`) is the caller's job.

Per-episode normalisation ("long episodes do not dominate")
-----------------------------------------------------------
verl-agent takes group statistics over *step rows*, so an episode of 40 turns weighs 40
times as much as one of 1 turn in the baseline (reference/verl_agent.md, sec. 2-3). Here:

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
and every result reports them (:class:`AdvantageResult` ``no_signal`` and counts). Note
that verl gives a singleton group mean 0 and std 1 (advantage = its raw return); here it
is 0.

Arithmetic is float64 internally; outputs have the input's float dtype. Std is the
unbiased (Bessel) estimator where the source uses a group std (as verl and verl-agent),
the population one for the batch whitening of REINFORCE++ (as ``masked_whiten``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Literal, Sequence

import torch
from torch import Tensor

from verlog.algos.gae import _reverse_linear_scan

__all__ = [
    "AdvantageResult",
    "episode_returns",
    "discounted_turn_returns",
    "grpo_advantages",
    "rloo_advantages",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "gigpo_advantages",
    "dynamic_sampling_filter",
    "turn_index",
    "broadcast_turn_advantages",
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
def _check_values(name: str, x: object) -> Tensor:
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


def _check_ids(name: str, ids: object, like: Tensor, like_name: str) -> Tensor:
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(ids).__name__}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor, got {ids.dtype}")
    if ids.shape != like.shape:
        raise ValueError(f"{name} has shape {tuple(ids.shape)} but {like_name} has shape {tuple(like.shape)}")
    if ids.device != like.device:
        raise ValueError(f"{name} is on {ids.device} but {like_name} is on {like.device}")
    return ids


def _check_norm(norm: str) -> None:
    if norm not in _NORMS:
        raise ValueError(f"norm must be one of {', '.join(_NORMS)}, got {norm!r}")


def _check_positive(name: str, x: float) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(x).__name__}")
    if not x > 0:
        raise ValueError(f"{name} must be > 0, got {x}")
    return float(x)


def _check_gamma(gamma: float) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)):
        raise TypeError(f"gamma must be a float in [0, 1], got {type(gamma).__name__}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    return float(gamma)


def _group_index(ids: Tensor) -> tuple[Tensor, Tensor]:
    """(inverse [n] long into groups 0..G-1 in sorted-id order, counts [G] long)."""
    _, inverse, counts = torch.unique(ids, sorted=True, return_inverse=True, return_counts=True)
    return inverse, counts


def _group_stats(x: Tensor, inverse: Tensor, counts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
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


def _normalised_group_advantage(
    x: Tensor, group_ids: Tensor, norm: str, eps: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(x - mean_g) / F_norm per element, 0 in no-signal groups.

    Returns (advantages [n] float64, no_signal per element [n], no_signal per group [G],
    counts [G]).
    """
    inverse, counts = _group_index(group_ids)
    mean, std, no_sig = _group_stats(x, inverse, counts)
    adv = x - mean[inverse]
    if norm == "mean_std":
        adv = adv / (std[inverse] + eps)
    elem_no_sig = no_sig[inverse]
    return torch.where(elem_no_sig, 0, adv), elem_no_sig, no_sig, counts


def _result(adv: Tensor, dtype: torch.dtype, elem_no_sig: Tensor, group_no_sig: Tensor, counts: Tensor,
            **metrics: float) -> AdvantageResult:
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
    _check_values("rewards", rewards)
    _check_ids("episode_ids", episode_ids, rewards, "rewards")
    ids, inverse = torch.unique(episode_ids, sorted=True, return_inverse=True)
    totals = torch.zeros(ids.numel(), dtype=torch.float64, device=rewards.device)
    totals.index_add_(0, inverse, rewards.to(torch.float64))
    return totals.to(rewards.dtype), ids, inverse


def _discounted(r64: Tensor, inverse: Tensor, gamma: float) -> Tensor:
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
    _check_values("rewards", rewards)
    _check_ids("episode_ids", episode_ids, rewards, "rewards")
    gamma = _check_gamma(gamma)
    inverse, _ = _group_index(episode_ids)
    return _discounted(rewards.to(torch.float64), inverse, gamma).to(rewards.dtype)


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
        :class:`AdvantageResult` with advantages [E]; metrics ``group_size_mean``,
        ``no_signal_group_fraction``, ``singleton_groups``.

    Raises:
        TypeError: non-tensors, returns not float32/64, ids not integer, eps not a number.
        ValueError: not 1-D, empty, shape/device mismatch, NaN/inf, bad norm, eps <= 0.
    """
    _check_values("returns", returns)
    _check_ids("group_ids", group_ids, returns, "returns")
    _check_norm(norm)
    eps = _check_positive("eps", eps)
    adv, elem, grp, counts = _normalised_group_advantage(returns.to(torch.float64), group_ids, norm, eps)
    return _result(adv, returns.dtype, elem, grp, counts)


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
        :class:`AdvantageResult` with advantages [E] (metrics as :func:`grpo_advantages`).

    Raises:
        as :func:`grpo_advantages`.
    """
    _check_values("returns", returns)
    _check_ids("group_ids", group_ids, returns, "returns")
    x = returns.to(torch.float64)
    inverse, counts = _group_index(group_ids)
    _, _, no_sig = _group_stats(x, inverse, counts)
    total = x.new_zeros(counts.numel()).index_add_(0, inverse, x)
    n = counts.to(torch.float64)[inverse]
    adv = x - (total[inverse] - x) / (n - 1).clamp(min=1)
    elem = no_sig[inverse]
    return _result(torch.where(elem, 0, adv), returns.dtype, elem, no_sig, counts)


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
        :class:`AdvantageResult` with advantages [E] (metrics as :func:`grpo_advantages`).

    Raises:
        as :func:`grpo_advantages`.
    """
    _check_values("returns", returns)
    _check_ids("group_ids", group_ids, returns, "returns")
    eps = _check_positive("eps", eps)
    centred, elem, grp, counts = _normalised_group_advantage(returns.to(torch.float64), group_ids, "mean", eps)
    w = torch.full_like(centred, 1.0 / centred.numel())
    adv = torch.where(elem, 0, _whiten(centred, w, eps))
    return _result(adv, returns.dtype, elem, grp, counts)


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
        :class:`AdvantageResult` with advantages [M], num_groups = 1; metrics
        ``episodes``, ``return_mean`` (mu), ``return_std`` (sigma).

    Raises:
        TypeError/ValueError: as :func:`episode_returns`; gamma outside [0, 1]; eps <= 0.
    """
    _check_values("rewards", rewards)
    _check_ids("episode_ids", episode_ids, rewards, "rewards")
    gamma = _check_gamma(gamma)
    eps = _check_positive("eps", eps)
    inverse, counts = _group_index(episode_ids)
    g = _discounted(rewards.to(torch.float64), inverse, gamma)
    E = counts.numel()
    w = 1.0 / (E * counts.to(torch.float64)[inverse])
    dead = bool(g.max() == g.min())
    adv = torch.zeros_like(g) if dead else _whiten(g, w, eps)
    mu = float((w * g).sum())
    sigma = float((w * (g - mu) ** 2).sum()) ** 0.5
    no_sig = torch.full(g.shape, dead, dtype=torch.bool, device=g.device)
    return AdvantageResult(adv.to(rewards.dtype), no_sig, 1, int(dead),
                           {"episodes": float(E), "return_mean": mu, "return_std": sigma})


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
        :class:`AdvantageResult` with advantages [M]; ``num_groups`` and
        ``num_no_signal_groups`` count episode groups; ``no_signal`` flags turns with no
        signal at either level; metrics as :func:`grpo_advantages` plus
        ``anchor_groups``, ``anchor_group_size_mean``, ``anchor_no_signal_fraction``
        (anchor groups of size 1 or all-equal step returns).

    Raises:
        TypeError: as :func:`grpo_advantages`; anchor keys unhashable or a bad tensor.
        ValueError: as :func:`grpo_advantages`; group_ids not constant within an
            episode; anchor_keys of the wrong length; omega < 0; gamma outside [0, 1].
    """
    _check_values("rewards", rewards)
    _check_ids("episode_ids", episode_ids, rewards, "rewards")
    _check_ids("group_ids", group_ids, rewards, "rewards")
    _check_norm(norm)
    eps = _check_positive("eps", eps)
    gamma = _check_gamma(gamma)
    if isinstance(omega, bool) or not isinstance(omega, (int, float)) or not omega >= 0:
        raise ValueError(f"omega must be a number >= 0, got {omega!r}")
    M = rewards.numel()
    r = rewards.to(torch.float64)
    ep_inv, ep_counts = _group_index(episode_ids)
    E = ep_counts.numel()
    gid = group_ids.to(torch.long)
    gmax = torch.zeros(E, dtype=torch.long, device=r.device).scatter_reduce_(0, ep_inv, gid, "amax", include_self=False)
    gmin = torch.zeros(E, dtype=torch.long, device=r.device).scatter_reduce_(0, ep_inv, gid, "amin", include_self=False)
    if bool((gmax != gmin).any()):
        raise ValueError("group_ids must be constant within each episode")

    # Episode level: one return per episode, group statistics over episodes.
    ep_ret = r.new_zeros(E).index_add_(0, ep_inv, r)
    a_ep, ep_elem, ep_grp, ep_cnt = _normalised_group_advantage(ep_ret, gmax, norm, eps)

    # Step level: discounted step returns, grouped by (episode group, anchor key).
    anchors = _anchor_ids(anchor_keys, gid, M, r.device)
    g = _discounted(r, ep_inv, gamma)
    a_step, st_elem, st_grp, st_cnt = _normalised_group_advantage(g, anchors, norm, eps)

    adv = a_ep[ep_inv] + float(omega) * a_step
    return _result(
        adv, rewards.dtype, ep_elem[ep_inv] & st_elem, ep_grp, ep_cnt,
        anchor_groups=float(st_cnt.numel()),
        anchor_group_size_mean=float(st_cnt.double().mean()),
        anchor_no_signal_fraction=float(st_grp.double().mean()),
    )


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
    _check_values("returns", returns)
    _check_ids("group_ids", group_ids, returns, "returns")
    ids, inverse, counts = torch.unique(group_ids, sorted=True, return_inverse=True, return_counts=True)
    _, _, no_sig = _group_stats(returns.to(torch.float64), inverse, counts)
    return ~no_sig[inverse], ids[no_sig].to(torch.long)


# --------------------------------------------------------------------------------------
# TurnBatch layout
# --------------------------------------------------------------------------------------
def turn_index(episode_ids: Tensor, include: Tensor | None = None) -> Tensor:
    """Flat positions (t * N + n) of a TurnBatch's turns, episode by episode in time order.

    Turns are listed env by env (n = 0..N-1), each env's turns in time order t = 0..T-1,
    so every episode's turns are contiguous and time-ordered (an episode lives in one env
    column). Gather per-turn inputs with ``batch.rewards.reshape(-1)[idx]`` and
    ``batch.episode_ids.reshape(-1)[idx]``.

    Args:
        episode_ids: int [T, N] (``TurnBatch.episode_ids``; only its shape and device are used).
        include: optional bool [T, N], the turns to list (e.g. only complete episodes).

    Returns:
        long [M], M = number of included turns.

    Raises:
        TypeError: not tensors, include not bool. ValueError: not 2-D or shapes differ.
    """
    if not isinstance(episode_ids, Tensor):
        raise TypeError(f"episode_ids must be a torch.Tensor, got {type(episode_ids).__name__}")
    if episode_ids.dim() != 2:
        raise ValueError(f"episode_ids must have shape [T, N], got {tuple(episode_ids.shape)}")
    T, N = episode_ids.shape
    idx = torch.arange(T * N, device=episode_ids.device).view(T, N).T.reshape(-1)
    if include is None:
        return idx
    if not isinstance(include, Tensor) or include.dtype != torch.bool:
        raise TypeError("include must be a bool tensor")
    if include.shape != episode_ids.shape:
        raise ValueError(f"include has shape {tuple(include.shape)} but episode_ids has shape {(T, N)}")
    return idx[include.T.reshape(-1)]


def broadcast_turn_advantages(turn_advantages: Tensor, index: Tensor, response_mask: Tensor) -> Tensor:
    """Write per-turn advantages onto every response token of their turn ([T, N, R]).

    out[t, n, k] = turn_advantages[j] where index[j] = t * N + n and response_mask[t, n, k];
    0 on padding tokens and on turns not listed in ``index`` (exclude those from the loss).

    Args:
        turn_advantages: float [M] (from any estimator, spread to turns).
        index: long [M], distinct flat positions t * N + n (e.g. from :func:`turn_index`).
        response_mask: bool [T, N, R] (``TurnBatch.response_mask``).

    Returns:
        float [T, N, R], dtype of turn_advantages, on the mask's device.

    Raises:
        TypeError: wrong dtypes. ValueError: shapes differ, index out of range or repeated.
    """
    if not isinstance(turn_advantages, Tensor) or not turn_advantages.is_floating_point():
        raise TypeError("turn_advantages must be a floating-point tensor")
    if not isinstance(index, Tensor) or index.dtype != torch.long:
        raise TypeError("index must be an int64 tensor")
    if not isinstance(response_mask, Tensor) or response_mask.dtype != torch.bool:
        raise TypeError("response_mask must be a bool tensor")
    if response_mask.dim() != 3:
        raise ValueError(f"response_mask must have shape [T, N, R], got {tuple(response_mask.shape)}")
    if turn_advantages.dim() != 1 or index.shape != turn_advantages.shape:
        raise ValueError(f"turn_advantages {tuple(turn_advantages.shape)} and index {tuple(index.shape)} "
                         "must be 1-D of the same length")
    T, N, R = response_mask.shape
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= T * N):
        raise ValueError(f"index must be in [0, {T * N}), got range [{int(index.min())}, {int(index.max())}]")
    if torch.unique(index).numel() != index.numel():
        raise ValueError("index lists a turn more than once")
    per_turn = torch.zeros(T * N, dtype=turn_advantages.dtype, device=response_mask.device)
    per_turn[index.to(response_mask.device)] = turn_advantages.to(response_mask.device)
    return torch.where(response_mask, per_turn.view(T, N, 1), 0)
