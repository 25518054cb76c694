"""Per-token log-probabilities and entropies of a language model's logits, chunked over positions.

Shapes: B sequences, S token positions, V vocabulary size; logits are [B, S, V] (any leading
shape [..., V] works). Both functions process ``chunk_rows`` positions at a time, so they never
build a [B, S, V] ``log_softmax`` nor a full float32 copy of bf16/fp16 logits: the temporaries
are at most [chunk_rows, V]. Both are differentiable with respect to the logits.

Arithmetic is float32 for bf16/fp16 logits and the logits' own dtype for float32/float64.
"""

from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor

__all__ = ["logprobs_from_logits", "entropy_from_logits"]


def _row_chunks(logits: Tensor, chunk_rows: int) -> Iterator[tuple[int, Tensor]]:
    """Yield [rows, V] slices of the flattened logits."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    flat = logits.reshape(-1, logits.shape[-1])
    for start in range(0, flat.shape[0], chunk_rows):
        yield start, flat[start : start + chunk_rows]


def _compute_dtype(logits: Tensor) -> torch.dtype:
    """The dtype of the arithmetic: float32 for bf16/fp16 logits, else the logits' own (TypeError if not float)."""
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

