"""Token-level policy-gradient losses: PPO and GSPO surrogates, value loss, KL penalty, entropy.

Shapes: B sequences (turns), S token positions, V vocabulary size. Every per-token tensor
is [B, S] (any shape works as long as all per-token arguments share it) and ``mask`` is a
bool tensor of that shape, True on the response tokens that are trained.

Aggregation is "token-mean" by default (see :func:`aggregate_loss` for the sequence-mean
modes): the sum over valid tokens divided by the number of valid
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

from verlog.algos.logprobs import entropy_from_logits

__all__ = [
    "masked_mean",
    "ppo_policy_loss",
    "value_loss",
    "kl_penalty",
    "entropy_bonus",
    "AGGREGATIONS",
    "aggregate_loss",
    "gspo_policy_loss",
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


def _check_policy_inputs(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor,
                         clip_low: float, clip_high: float) -> None:
    """The checks every policy loss shares: one shape, a bool mask, clip_low in [0, 1), clip_high >= 0."""
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages, mask=mask)
    _check_mask(mask)
    if not 0.0 <= clip_low < 1.0:
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low}")
    if not clip_high >= 0.0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high}")


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


AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def _check_normalizer(loss_normalizer: float | None) -> float | None:
    if loss_normalizer is None:
        return None
    if isinstance(loss_normalizer, bool) or not isinstance(loss_normalizer, (int, float)):
        raise TypeError(f"loss_normalizer must be a positive float or None, got {type(loss_normalizer).__name__}")
    if not loss_normalizer > 0:
        raise ValueError(f"loss_normalizer must be > 0, got {loss_normalizer}")
    return float(loss_normalizer)


def aggregate_loss(
    per_token: Tensor, mask: Tensor, mode: str = "token-mean", loss_normalizer: float | None = None
) -> Tensor:
    """Reduce a per-token loss [B, S] to a scalar.

    A sequence is one row (all leading dims; tokens on the last dim); a row with no valid
    token is not a sequence (padding) and is left out of every count.

    * ``token-mean``: sum over valid tokens / number of valid tokens (DAPO, Yu et al.
      2025, arXiv 2503.14476, eq. 12: every token weighs the same, so long responses
      weigh more);
    * ``seq-mean-token-mean``: mean over sequences of each sequence's token-mean (GRPO,
      Shao et al. 2024, "DeepSeekMath", eq. 3; GSPO: every sequence weighs the same);
    * ``seq-mean-token-sum``: mean over sequences of each sequence's token sum.

    With ``loss_normalizer`` = n the denominator of the outer mean (valid tokens for
    token-mean, sequences for the seq-mean modes) is replaced by n, so micro-batch calls
    with n = the whole minibatch's count add up to the minibatch loss (module docstring).

    Args:
        per_token: float [B, S]; mask: bool [B, S]; mode: one of :data:`AGGREGATIONS`;
        loss_normalizer: None or a positive number.

    Returns:
        0-dim tensor (differentiable).

    Raises:
        TypeError: mask not bool, bad loss_normalizer type. ValueError: shapes differ, an
        unknown mode, a 0-dim input, loss_normalizer <= 0, or (without loss_normalizer)
        no valid token.
    """
    _check_same_shape(per_token=per_token, mask=mask)
    _check_mask(mask)
    if mode not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {mode!r}")
    if per_token.dim() == 0:
        raise ValueError("aggregate_loss needs at least one (token) dimension")
    norm = _check_normalizer(loss_normalizer)
    x = torch.where(mask, per_token, 0)
    if mode == "token-mean":
        if norm is None:
            return masked_mean(per_token, mask)
        return x.sum() / norm
    tokens = mask.sum(-1)
    per_seq = x.sum(-1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / tokens.clamp(min=1)
    if norm is None:
        n_seq = int((tokens > 0).sum())
        if n_seq == 0:
            raise ValueError("aggregate_loss: mask has no valid token")
        return per_seq.sum() / n_seq
    return per_seq.sum() / norm


def _aggregate(x: Tensor, mask: Tensor, loss_normalizer: float | None, mode: str = "token-mean") -> Tensor:
    """Token-mean (default), or another :func:`aggregate_loss` mode."""
    return aggregate_loss(x, mask, mode, loss_normalizer)


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
    aggregation: str = "token-mean",
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
        aggregation: "token-mean" (default), "seq-mean-token-mean" or
            "seq-mean-token-sum" (:func:`aggregate_loss`).

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
    _check_policy_inputs(logprobs, old_logprobs, advantages, mask, clip_low, clip_high)
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
    return _aggregate(loss, mask, loss_normalizer, aggregation), metrics


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip_range: float | None = 0.2,
    loss_normalizer: float | None = None,
    aggregation: str = "token-mean",
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
        loss_normalizer, aggregation: as in :func:`ppo_policy_loss`.

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
    return _aggregate(0.5 * per_token, mask, loss_normalizer, aggregation), metrics


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


def entropy_bonus(
    logits: Tensor, mask: Tensor, loss_normalizer: float | None = None, aggregation: str = "token-mean"
) -> Tensor:
    """Mean policy entropy over valid tokens (to be *subtracted* from the loss, times a coef).

    Args:
        logits: float [B, S, V]; mask: bool [B, S]; loss_normalizer, aggregation: as in
            :func:`ppo_policy_loss`.

    Returns:
        0-dim tensor, entropy in nats (differentiable).

    Raises:
        as :func:`~verlog.algos.logprobs.entropy_from_logits` and :func:`masked_mean`.
    """
    return _aggregate(entropy_from_logits(logits), mask, loss_normalizer, aggregation)


def gspo_policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    loss_normalizer: float | None = None,
    aggregation: str = "seq-mean-token-mean",
) -> tuple[Tensor, dict[str, float]]:
    """GSPO: PPO clipping on a length-normalised *sequence* importance ratio.

    Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv 2507.18071: per
    sequence (row) i with |y_i| valid tokens,
        s_i = (pi_theta(y_i) / pi_old(y_i))^(1/|y_i|) = exp(1/|y_i| sum_t log(pi_theta/pi_old))
    (eq. 7), in its GSPO-token form (eq. 13-14) s_{i,t} = sg[s_i] pi_theta(y_t) /
    sg[pi_theta(y_t)], which has the value s_i and the gradient s_i grad log pi_theta(y_t),
    so token-level advantages are allowed (with A_{i,t} = A_i it equals GSPO exactly).
    Per token: loss = max(-A s_{i,t}, -A clip(s_{i,t}, 1 - clip_low, 1 + clip_high)),
    aggregated by default with seq-mean-token-mean (the paper's 1/G sum_i 1/|y_i| sum_t).
    The clip range is on the sequence ratio, hence tiny (the paper's 3e-4 / 4e-4). The
    mean log-ratio is clamped to +-20 before exp. No dual clip.

    Args:
        logprobs: float [B, S] current log-probs (with grad); old_logprobs: float [B, S];
        advantages: float [B, S]; mask: bool [B, S], True on trained tokens (one row = one
        sequence); clip_low in [0, 1), clip_high >= 0; loss_normalizer, aggregation: as in
        :func:`ppo_policy_loss` (aggregation default seq-mean-token-mean).

    Returns:
        (loss, metrics): 0-dim loss; metrics ``clip_fraction`` (share of valid tokens whose
        clipped term is active; with one advantage sign per sequence, all or none of a
        sequence's tokens), ``seq_ratio_mean``, ``seq_ratio_min``, ``seq_ratio_max`` (s_i
        over sequences with a valid token), ``approx_kl`` (k3 of the per-token ratios, as
        in :func:`ppo_policy_loss`).

    Raises:
        TypeError/ValueError: as :func:`ppo_policy_loss`.
    """
    _check_policy_inputs(logprobs, old_logprobs, advantages, mask, clip_low, clip_high)
    if not bool(mask.any()):
        raise ValueError("gspo_policy_loss: mask has no valid token")
    if logprobs.dim() == 0:
        raise ValueError("gspo_policy_loss needs a token dimension")

    logprobs = torch.where(mask, logprobs, 0)
    log_ratio = torch.where(mask, logprobs - old_logprobs, 0)
    advantages = torch.where(mask, advantages, 0)
    tokens = mask.sum(-1, keepdim=True)
    seq_log_ratio = (log_ratio.sum(-1, keepdim=True) / tokens.clamp(min=1)).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    # value s_i, gradient s_i * d logprob_t
    ratio = torch.exp(seq_log_ratio.detach() + logprobs - logprobs.detach())
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)

    with torch.no_grad():
        seqs = tokens.squeeze(-1) > 0
        s = torch.exp(seq_log_ratio.detach()).squeeze(-1)[seqs]
        lr = log_ratio.detach().clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
        metrics = {
            "clip_fraction": _fraction(clipped > unclipped, mask),
            "seq_ratio_mean": float(s.mean()),
            "seq_ratio_min": float(s.min()),
            "seq_ratio_max": float(s.max()),
            "approx_kl": float(masked_mean((torch.exp(lr) - 1.0) - lr, mask)),
        }
    return _aggregate(loss, mask, loss_normalizer, aggregation), metrics
