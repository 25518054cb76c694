"""Token-level PPO losses: policy surrogate, value loss, KL penalty, entropy.

Shapes: B sequences (turns), S token positions, V vocabulary size. Every per-token tensor
is [B, S] (any shape works as long as all per-token arguments share it) and ``mask`` is a
bool tensor of that shape, True on the response tokens that are trained.

Aggregation is "token-mean": the sum over valid tokens divided by the number of valid
tokens. When a minibatch is split into micro-batches for gradient accumulation, pass
``loss_normalizer`` = the number of valid tokens in the whole minibatch to every
micro-batch call: each call then returns sum(loss over its tokens) / loss_normalizer, and
the micro-batch losses (and their gradients) add up exactly to the minibatch token-mean.

Entries outside ``mask`` may hold anything (NaN/inf included): they are zeroed before use,
so neither the loss nor any gradient sees them (their gradient is 0).

Metrics are returned as Python floats (detached; they force a device sync).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "logprobs_from_logits",
    "entropy_from_logits",
    "masked_mean",
    "ppo_policy_loss",
    "value_loss",
    "kl_penalty",
    "entropy_bonus",
]

# exp() of a log-ratio is evaluated on a log-ratio clamped to +-_MAX_LOG_RATIO, so that one
# far-off-policy token cannot overflow to inf (e^20 ~ 4.9e8 is already far outside any clip).
_MAX_LOG_RATIO = 20.0
# k3 KL estimates are clamped to at most this many nats per token (see kl_penalty).
_MAX_K3 = 10.0


def _check_same_shape(**tensors: Tensor) -> None:
    items = list(tensors.items())
    for name, x in items:
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    name0, x0 = items[0]
    for name, x in items[1:]:
        if x.shape != x0.shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)} but {name0} has shape {tuple(x0.shape)}")


def _check_mask(mask: Tensor) -> None:
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor, got {mask.dtype}")


def _row_chunks(logits: Tensor, chunk_rows: int):
    """Yield [rows, V] slices of the flattened logits."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    flat = logits.reshape(-1, logits.shape[-1])
    for start in range(0, flat.shape[0], chunk_rows):
        yield start, flat[start : start + chunk_rows]


def _compute_dtype(logits: Tensor) -> torch.dtype:
    if not logits.is_floating_point():
        raise TypeError(f"logits must be a floating-point tensor, got {logits.dtype}")
    return logits.dtype if logits.dtype in (torch.float32, torch.float64) else torch.float32


def logprobs_from_logits(logits: Tensor, labels: Tensor, chunk_rows: int = 1024) -> Tensor:
    """log pi(label | context) per position: logits[label] - logsumexp(logits).

    Memory: never builds a [B, S, V] log_softmax; rows are processed ``chunk_rows`` at a
    time, so the temporaries (and the float32 up-cast of bf16/fp16 logits) are at most
    [chunk_rows, V]. Differentiable with respect to ``logits``.

    Args:
        logits: float [B, S, V] (any leading shape [..., V]), unnormalised.
        labels: int64 [B, S] (the leading shape of ``logits``), token ids in [0, V).
        chunk_rows: positions processed per chunk (>= 1).

    Returns:
        float [B, S] log-probabilities in nats; float32 for bf16/fp16 logits, else the
        logits' dtype; on the logits' device.

    Raises:
        TypeError: logits not floating point or labels not int64.
        ValueError: labels' shape is not logits.shape[:-1], a label outside [0, V), or
            chunk_rows < 1.
    """
    dtype = _compute_dtype(logits)
    if labels.dtype != torch.long:
        raise TypeError(f"labels must be an int64 tensor, got {labels.dtype}")
    if labels.shape != logits.shape[:-1]:
        raise ValueError(f"labels must have shape {tuple(logits.shape[:-1])}, got {tuple(labels.shape)}")
    vocab = logits.shape[-1]
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= vocab):
        raise ValueError(f"labels must be token ids in [0, {vocab}), got range [{int(labels.min())}, {int(labels.max())}]")
    flat_labels = labels.reshape(-1, 1)
    out = []
    for start, chunk in _row_chunks(logits, chunk_rows):
        chunk = chunk.to(dtype)
        picked = chunk.gather(-1, flat_labels[start : start + chunk.shape[0]]).squeeze(-1)
        out.append(picked - torch.logsumexp(chunk, dim=-1))
    if not out:
        return logits.new_zeros(labels.shape, dtype=dtype)
    return torch.cat(out).reshape(labels.shape)


def entropy_from_logits(logits: Tensor, chunk_rows: int = 1024) -> Tensor:
    """Entropy of softmax(logits) per position: H = logsumexp(z) - sum_v softmax(z)_v z_v.

    Chunked over positions like :func:`logprobs_from_logits`. Differentiable.

    Args:
        logits: float [B, S, V] (any leading shape [..., V]).
        chunk_rows: positions processed per chunk (>= 1).

    Returns:
        float [B, S] entropies in nats (float32 for bf16/fp16 input, else the input dtype).

    Raises:
        TypeError: logits not floating point. ValueError: chunk_rows < 1.
    """
    dtype = _compute_dtype(logits)
    out = []
    for _, chunk in _row_chunks(logits, chunk_rows):
        chunk = chunk.to(dtype)
        probs = torch.softmax(chunk, dim=-1)
        out.append(torch.logsumexp(chunk, dim=-1) - (probs * chunk).sum(dim=-1))
    if not out:
        return logits.new_zeros(logits.shape[:-1], dtype=dtype)
    return torch.cat(out).reshape(logits.shape[:-1])


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over entries where ``mask`` is True (masked entries may hold NaN/inf).

    Args:
        x: float tensor of any shape.
        mask: bool tensor of the same shape.
        dim: reduce over this dimension only; None reduces over everything (token-mean).

    Returns:
        0-dim tensor (dim=None) or ``x`` reduced over ``dim``.

    Raises:
        TypeError: mask not bool. ValueError: shapes differ, or a reduced slice has no
        valid entry (the mean would be undefined).
    """
    _check_same_shape(x=x, mask=mask)
    _check_mask(mask)
    total = torch.where(mask, x, 0).sum() if dim is None else torch.where(mask, x, 0).sum(dim=dim)
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    if bool((count == 0).any()):
        raise ValueError("masked_mean: mask has no valid entry" + ("" if dim is None else f" in some slice along dim {dim}"))
    return total / count


def _aggregate(x: Tensor, mask: Tensor, loss_normalizer: float | None) -> Tensor:
    """Token-mean, or sum over valid tokens / loss_normalizer."""
    _check_same_shape(x=x, mask=mask)
    _check_mask(mask)
    if loss_normalizer is None:
        return masked_mean(x, mask)
    if isinstance(loss_normalizer, bool) or not isinstance(loss_normalizer, (int, float)):
        raise TypeError(f"loss_normalizer must be a positive float or None, got {type(loss_normalizer).__name__}")
    if not loss_normalizer > 0:
        raise ValueError(f"loss_normalizer must be > 0, got {loss_normalizer}")
    return torch.where(mask, x, 0).sum() / float(loss_normalizer)


def _fraction(flags: Tensor, mask: Tensor) -> float:
    return float(masked_mean(flags.to(torch.float32), mask))


def ppo_policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 3.0,
    loss_normalizer: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped PPO surrogate loss with asymmetric clip range and dual clip, token-level.

    Per token, with ratio rho = exp(logprobs - old_logprobs) (log-ratio clamped to +-20):
        loss = max(-A rho, -A clip(rho, 1 - clip_low, 1 + clip_high))
    (Schulman et al. 2017, "Proximal Policy Optimization Algorithms", eq. 7, negated), and
    where A < 0 and ``dual_clip`` = c is set, loss = min(loss, -c A) (Ye et al. 2020,
    "Mastering Complex Control in MOBA Games with Deep Reinforcement Learning", eq. 5),
    which bounds the loss of a token whose ratio has grown far above 1.

    Args:
        logprobs: float [B, S], log pi_theta(token) of the current policy (with grad).
        old_logprobs: float [B, S], log-probs under the behaviour policy (no grad needed).
        advantages: float [B, S] (typically whitened).
        mask: bool [B, S], True on trained tokens.
        clip_low, clip_high: clip range [1 - clip_low, 1 + clip_high]; clip_low in [0, 1),
            clip_high >= 0.
        dual_clip: c > 1, or None to disable the dual clip.
        loss_normalizer: None for the token-mean over this call's valid tokens; a positive
            number n to return sum over valid tokens / n (micro-batching; module docstring).

    Returns:
        (loss, metrics): loss is a 0-dim tensor; metrics (floats, over valid tokens):
        ``clip_fraction`` (the clipped term is the active max), ``dual_clip_fraction``,
        ``approx_kl`` (k3 estimator of KL(pi_old || pi_theta): mean of (rho - 1) - log rho,
        unbiased for tokens sampled from pi_old; Schulman 2020, "Approximating KL
        Divergence"), ``ratio_mean``, ``ratio_min``, ``ratio_max``.

    Raises:
        TypeError: mask not bool, or a bad loss_normalizer type.
        ValueError: shapes differ, no valid token, clip parameters out of range, or
        loss_normalizer <= 0.
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages, mask=mask)
    _check_mask(mask)
    if not 0.0 <= clip_low < 1.0:
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low}")
    if not clip_high >= 0.0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high}")
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1 or None, got {dual_clip}")
    if not bool(mask.any()):
        raise ValueError("ppo_policy_loss: mask has no valid token")

    # Zero padding before any arithmetic so NaN/inf there cannot leak into loss or gradients.
    log_ratio = torch.where(mask, logprobs - old_logprobs, 0).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    advantages = torch.where(mask, advantages, 0)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    clip_active = clipped > unclipped
    if dual_clip is not None:
        bound = -dual_clip * advantages
        dual_active = (advantages < 0) & (loss > bound)
        loss = torch.where(dual_active, bound, loss)
    else:
        dual_active = torch.zeros_like(mask)

    with torch.no_grad():
        lr = log_ratio.detach()
        r = ratio.detach()
        metrics = {
            "clip_fraction": _fraction(clip_active, mask),
            "dual_clip_fraction": _fraction(dual_active, mask),
            "approx_kl": float(masked_mean((r - 1.0) - lr, mask)),
            "ratio_mean": float(masked_mean(r, mask)),
            "ratio_min": float(r[mask].min()),
            "ratio_max": float(r[mask].max()),
        }
    return _aggregate(loss, mask, loss_normalizer), metrics


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip_range: float | None = 0.2,
    loss_normalizer: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped value loss: 0.5 * max((v - R)^2, (clip(v, v_old - eps, v_old + eps) - R)^2).

    PPO value-function clipping as in OpenAI baselines' ppo2 (listed among PPO's code-level
    optimisations by Engstrom et al. 2020, "Implementation Matters in Deep Policy
    Gradients: A Case Study on PPO and TRPO"). Token-mean by default.

    Args:
        values: float [B, S], current critic values (with grad).
        old_values: float [B, S], the values at rollout time.
        returns: float [B, S], the critic targets (e.g. from dual_discount_gae).
        mask: bool [B, S].
        clip_range: eps >= 0, or None for the plain 0.5 (v - R)^2.
        loss_normalizer: as in :func:`ppo_policy_loss`.

    Returns:
        (loss, metrics): 0-dim loss; metrics ``value_clip_fraction`` (share of valid tokens
        where the clipped term is the larger one; 0 when clip_range is None), ``value_mean``,
        ``value_error`` (mean (v - R)^2, unclipped).

    Raises:
        TypeError/ValueError: as :func:`ppo_policy_loss`; clip_range < 0.
    """
    _check_same_shape(values=values, old_values=old_values, returns=returns, mask=mask)
    _check_mask(mask)
    if clip_range is not None and not clip_range >= 0.0:
        raise ValueError(f"clip_range must be >= 0 or None, got {clip_range}")
    if not bool(mask.any()):
        raise ValueError("value_loss: mask has no valid token")

    # Zero padding first so NaN/inf there cannot leak into loss or gradients.
    values = torch.where(mask, values, 0)
    old_values = torch.where(mask, old_values, 0)
    returns = torch.where(mask, returns, 0)
    err_unclipped = (values - returns) ** 2
    if clip_range is None:
        per_token = err_unclipped
        clip_active = torch.zeros_like(mask)
    else:
        v_clipped = torch.clamp(values, old_values - clip_range, old_values + clip_range)
        err_clipped = (v_clipped - returns) ** 2
        per_token = torch.maximum(err_unclipped, err_clipped)
        clip_active = err_clipped > err_unclipped
    with torch.no_grad():
        metrics = {
            "value_clip_fraction": _fraction(clip_active, mask),
            "value_mean": float(masked_mean(values.detach(), mask)),
            "value_error": float(masked_mean(err_unclipped.detach(), mask)),
        }
    return _aggregate(0.5 * per_token, mask, loss_normalizer), metrics


def kl_penalty(
    logprobs: Tensor, ref_logprobs: Tensor, kind: Literal["k1", "k2", "k3"] = "k1"
) -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) for tokens sampled from pi.

    With log r = ref_logprobs - logprobs (Schulman 2020, "Approximating KL Divergence"):
      * ``k1`` = -log r = logprobs - ref_logprobs (unbiased, high variance, can be < 0);
      * ``k2`` = 0.5 (log r)^2 (biased, low variance, >= 0);
      * ``k3`` = (r - 1) - log r (unbiased, low variance, >= 0). For stability log r is
        clamped to [-20, 20] before exp and the result to at most 10 nats per token.

    Use it as a reward penalty (logprobs = behaviour log-probs, no grad) or as a loss term
    (logprobs = current policy log-probs, with grad); masking/aggregation is the caller's.

    Args:
        logprobs: float [B, S], log pi(token) of the policy that sampled the tokens.
        ref_logprobs: float [B, S], log pi_ref(token).
        kind: "k1", "k2" or "k3".

    Returns:
        float [B, S] per-token penalty in nats.

    Raises:
        ValueError: shapes differ or an unknown kind.
    """
    _check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    log_r = ref_logprobs - logprobs
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * log_r**2
    if kind == "k3":
        log_r = log_r.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        return (torch.exp(log_r) - 1.0 - log_r).clamp(max=_MAX_K3)
    raise ValueError(f"kind must be one of 'k1', 'k2', 'k3', got {kind!r}")


def entropy_bonus(logits: Tensor, mask: Tensor, loss_normalizer: float | None = None) -> Tensor:
    """Mean policy entropy over valid tokens (to be *subtracted* from the loss, times a coef).

    Args:
        logits: float [B, S, V]; mask: bool [B, S]; loss_normalizer: as in
            :func:`ppo_policy_loss`.

    Returns:
        0-dim tensor, entropy in nats (differentiable).

    Raises:
        as :func:`entropy_from_logits` and :func:`masked_mean`.
    """
    return _aggregate(entropy_from_logits(logits), mask, loss_normalizer)
