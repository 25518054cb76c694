"""Between a TurnBatch's [T, N] turn grid and the flat, unpadded turn lists of the estimators.

:func:`turn_index` lists a batch's turns episode by episode in time order (the order the
critic-free estimators need), and :func:`broadcast_turn_advantages` writes one advantage per
listed turn back onto that turn's response tokens ([T, N, R]).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["turn_index", "broadcast_turn_advantages"]


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
