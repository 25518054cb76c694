"""Every reward term the trainer adds, and where each one is applied.

A turn's reward passes through these stages, in this order:

1. **Environment reward**, including the **format penalty**: the environment itself adds
   ``env.format_penalty`` (<= 0) to the reward of a step whose reply held no valid action
   (:class:`~verlog.envs.base.TextEnv`); the trainer receives it already inside
   ``TurnBatch.rewards`` [T, N] and never adds it again. Where ``env.distance_shaping`` is on, the
   training environments (not the evaluation ones) also add the potential-based shaping term of
   `verlog.envs.shaping.potential_shaping` to every step's reward.
2. **Overlong penalty** (DAPO, on with ``algo.overlong_penalty``): added to each real turn's
   reward right after collection, by response length (:func:`overlong_penalty`,
   :func:`shaped_rewards`). Every estimator sees the shaped reward: GAE and the critic-free
   estimators alike.
3. **Token rewards** (PPO with a critic only): each turn's (shaped) reward is put on its last
   response token, minus an optional per-token KL penalty when the KL is applied in the reward
   (``ppo.kl_in_reward``) rather than as a loss term (:func:`token_rewards`). These [T, N, R]
   rewards feed the dual-discount GAE. The critic-free estimators read the turn rewards of
   stage 2 directly and add no KL to them: their KL, if any, is the actor's loss term, which
   is off under ``ppo.kl_in_reward``, so a critic-free run with ``ppo.kl_in_reward`` applies
   no KL penalty at all.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["overlong_penalty", "shaped_rewards", "token_rewards"]



def overlong_penalty(
    lengths: Tensor, max_length: int, cache_length: int, penalty_factor: float = 1.0
) -> Tensor:
    """DAPO's soft overlong punishment of a response by its length (a reward to add).

    Yu et al. 2025, "DAPO", arXiv 2503.14476, eq. 13, with L_max = ``max_length`` and
    L_cache = ``cache_length``:
        0                                 if |y| <= L_max - L_cache
        ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
        -1                                if |y| > L_max
    times ``penalty_factor`` (verl's ``overlong_penalty_factor``). Linear from 0 to -1
    over the last L_cache tokens, continuous at both ends. For a turn, |y| is its number
    of response tokens and L_max typically ``rollout.max_response_tokens``.

    Args:
        lengths: integer tensor of any shape, response lengths in tokens (>= 0).
        max_length: L_max >= 1. cache_length: L_cache in [1, L_max].
        penalty_factor: scale of the penalty (>= 0).

    Returns:
        float32 tensor of the shape of ``lengths``, values in [-penalty_factor, 0].

    Raises:
        TypeError: lengths not an integer tensor. ValueError: a negative length,
        max_length < 1, cache_length outside [1, max_length], penalty_factor < 0.
    """
    if not isinstance(lengths, Tensor) or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise TypeError("lengths must be an integer tensor")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ValueError(f"max_length must be an int >= 1, got {max_length!r}")
    if isinstance(cache_length, bool) or not isinstance(cache_length, int) or not 1 <= cache_length <= max_length:
        raise ValueError(f"cache_length must be an int in [1, max_length={max_length}], got {cache_length!r}")
    if not penalty_factor >= 0:
        raise ValueError(f"penalty_factor must be >= 0, got {penalty_factor}")
    if lengths.numel() and int(lengths.min()) < 0:
        raise ValueError(f"lengths must be >= 0, got {int(lengths.min())}")
    start = max_length - cache_length
    ramp = (start - lengths.to(torch.float64)) / cache_length
    out = torch.where(lengths <= start, 0.0, torch.where(lengths <= max_length, ramp, -1.0))
    return (out * penalty_factor).to(torch.float32)


def token_rewards(rewards: Tensor, response_mask: Tensor, kl: Tensor | None = None, kl_coef: float = 0.0,
                  turn_mask: Tensor | None = None) -> Tensor:
    """Place each turn's environment reward on its last response token, minus an optional KL penalty.

    r_k = rewards[t, n] * [k = L - 1] - kl_coef * kl[t, n, k] for valid tokens k < L, 0 elsewhere
    (the per-token KL-in-reward of Ziegler et al. 2019, "Fine-Tuning Language Models from Human
    Preferences", eq. 2, on a turn-level environment reward).

    Args:
        rewards: float [T, N], the environment reward of each turn (shaping included).
        response_mask: bool [T, N, R], left-aligned, at least one valid token per turn.
        kl: optional float [T, N, R] per-token KL estimate (e.g. log pi_old - log pi_ref).
        kl_coef: weight of the KL penalty.
        turn_mask: optional bool [T, N], False on padding turns (whole-episode batches): those have no
            response token and get no reward.
    Returns:
        float [T, N, R] token rewards, zero where the mask is false.
    Raises:
        ValueError: shape mismatch, a real turn without response tokens, or a padding turn with a
            non-zero reward.
    """
    if response_mask.shape[:2] != rewards.shape or (kl is not None and kl.shape != response_mask.shape):
        raise ValueError(f"token_rewards: rewards {tuple(rewards.shape)}, mask {tuple(response_mask.shape)}"
                         + (f", kl {tuple(kl.shape)}" if kl is not None else "") + " do not agree")
    lengths = response_mask.sum(-1)
    real = torch.ones_like(lengths, dtype=torch.bool) if turn_mask is None else turn_mask.to(torch.bool)
    if bool(((lengths == 0) & real).any()):
        raise ValueError("token_rewards: a turn has no response token")
    if bool((~real & (rewards != 0)).any()):
        raise ValueError("token_rewards: a padding turn has a reward")
    out = torch.zeros(response_mask.shape, dtype=rewards.dtype, device=rewards.device)
    out.scatter_(2, (lengths - 1).clamp(min=0).unsqueeze(-1), torch.where(lengths > 0, rewards, 0).unsqueeze(-1))
    if kl is not None and kl_coef != 0.0:
        out = out - kl_coef * torch.where(response_mask, kl.to(out.dtype), 0)
    return out


def shaped_rewards(rewards: Tensor, response_lengths: Tensor, turns: Tensor, *, max_response_tokens: int,
                   cache_tokens: int, factor: float) -> Tensor:
    """Turn rewards with DAPO's overlong penalty added on real turns (stage 2 of the module docstring).

    r'[t, n] = rewards[t, n] + overlong_penalty(response_lengths[t, n]) where ``turns[t, n]``,
    else rewards[t, n] (padding turns keep their reward, which is 0).

    Args:
        rewards: float [T, N], the environment reward of each turn (format penalty included).
        response_lengths: integer [T, N], response tokens of each turn.
        turns: bool [T, N], True on real turns (False on the padding turns of whole-episode batches).
        max_response_tokens: L_max of :func:`overlong_penalty` (``rollout.max_response_tokens``).
        cache_tokens: L_cache of :func:`overlong_penalty` (``algo.overlong_cache_tokens``).
        factor: the penalty's size at full length (``algo.overlong_penalty_factor``).

    Returns:
        float [T, N], the shaped rewards (a new tensor; ``rewards`` is not modified).

    Raises:
        TypeError/ValueError: as :func:`overlong_penalty`; RuntimeError: shapes that do not broadcast.
    """
    penalty = overlong_penalty(response_lengths, max_response_tokens, cache_tokens, factor)
    return rewards + torch.where(turns, penalty, 0.0)
