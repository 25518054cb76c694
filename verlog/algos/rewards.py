"""Token rewards of a turn batch: where the environment reward and the KL penalty go."""

from __future__ import annotations

import torch
from torch import Tensor


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
