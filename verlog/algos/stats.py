"""Masked batch statistics: advantage whitening and explained variance.

Variances here are *biased* (population) variances, E[x^2] - E[x]^2 over the valid
entries: they combine exactly across data-parallel ranks from the three sums
[sum x, sum x^2, count], and whitening then gives unit population std. The sums are
accumulated in float64 to limit cancellation in E[x^2] - E[x]^2.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor

__all__ = ["masked_whiten", "explained_variance"]


def _check(x: Tensor, mask: Tensor, xname: str = "x") -> None:
    if not isinstance(x, Tensor) or not isinstance(mask, Tensor):
        raise TypeError(f"{xname} and mask must be torch.Tensors")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor, got {mask.dtype}")
    if x.shape != mask.shape:
        raise ValueError(f"mask has shape {tuple(mask.shape)} but {xname} has shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{xname} must be a floating-point tensor, got {x.dtype}")


def _moments(x: Tensor, mask: Tensor) -> Tensor:
    """float64 [3]: [sum x, sum x^2, count] over valid entries."""
    xv = torch.where(mask, x.detach(), 0).to(torch.float64)
    return torch.stack([xv.sum(), (xv * xv).sum(), mask.sum().to(torch.float64)])


@torch.no_grad()
def masked_whiten(
    x: Tensor,
    mask: Tensor,
    shift_mean: bool = True,
    eps: float = 1e-8,
    reduce_fn: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """Normalise ``x`` to zero mean and unit (population) std over its valid entries.

    out = (x - mean) / sqrt(var + eps) if ``shift_mean`` else x / sqrt(var + eps), where
    mean and the biased variance are taken over entries with ``mask`` True (of the global
    batch when ``reduce_fn`` is given). With shift_mean=False only the scale changes, so
    every entry keeps its sign. Masked entries of the output are 0.

    Args:
        x: float tensor of any shape (e.g. advantages [T, N, R]); masked entries may hold
            anything (also NaN/inf).
        mask: bool tensor of the same shape.
        shift_mean: subtract the mean (True) or only rescale (False).
        eps: added to the variance before the square root (> 0).
        reduce_fn: optional callable that takes the float64 tensor [sum x, sum x^2, count]
            of this rank and returns the same 3 numbers summed over all data-parallel
            ranks (e.g. ``lambda t: (torch.distributed.all_reduce(t), t)[1]``).

    Returns:
        Tensor of the shape, dtype and device of ``x`` (no grad).

    Raises:
        TypeError: mask not bool, x not floating point, or reduce_fn not returning a
            tensor of shape [3].
        ValueError: shapes differ, eps <= 0, no valid entry (after the reduction), or a
            non-finite valid entry.
    """
    _check(x, mask)
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    stats = _moments(x, mask)
    if reduce_fn is not None:
        reduced = reduce_fn(stats)
        if not isinstance(reduced, Tensor) or reduced.shape != (3,):
            raise TypeError("reduce_fn must return the reduced tensor [sum, sum_sq, count] of shape [3]")
        stats = reduced.to(torch.float64)
    total, total_sq, count = stats.tolist()
    if count <= 0:
        raise ValueError("masked_whiten: mask has no valid entry")
    if not (math.isfinite(total) and math.isfinite(total_sq)):
        raise ValueError("masked_whiten: x has NaN or inf at valid entries")
    mean = total / count
    var = max(total_sq / count - mean * mean, 0.0)  # clamp tiny negative rounding error
    scale = (var + eps) ** -0.5
    out = (x - mean) * scale if shift_mean else x * scale
    return torch.where(mask, out, 0).to(x.dtype)


@torch.no_grad()
def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """Explained variance of the critic: 1 - Var[R - V] / Var[R] over valid entries.

    1 is a perfect critic, 0 is no better than predicting the mean return, < 0 is worse.
    Uses biased variances (the ratio is the same with unbiased ones).

    Args:
        values: float [...], critic values V. returns: float [...], targets R.
        mask: bool of the same shape.

    Returns:
        Python float; ``nan`` when Var[R] = 0 over valid entries (the ratio is undefined,
        e.g. a single valid entry or constant returns).

    Raises:
        TypeError/ValueError: bad dtypes or shapes, or no valid entry.
    """
    _check(values, mask, "values")
    _check(returns, mask, "returns")
    count = int(mask.sum())
    if count == 0:
        raise ValueError("explained_variance: mask has no valid entry")
    r = returns[mask].to(torch.float64)
    diff = r - values[mask].to(torch.float64)
    var_r = float(r.var(unbiased=False))
    if var_r == 0.0:
        return float("nan")
    return 1.0 - float(diff.var(unbiased=False)) / var_r
