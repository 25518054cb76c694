"""Micro-batches of turn rows by token budget, length-sorted so that little padding is computed.

A micro-batch of rows is run as one right-padded [rows, longest row] tensor, so its cost is
``rows x longest`` token positions, of which ``sum(lengths)`` are real. Sorting the rows by length
and filling each micro-batch up to a token budget keeps that padding small and the memory per
forward pass bounded, whatever the spread of prompt lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["MicroBatches", "by_row_count", "by_token_budget"]


@dataclass
class MicroBatches:
    """Micro-batches of a minibatch.

    Attributes:
        batches: row indices of each micro-batch (long tensors, indices into the caller's rows).
        tokens: real tokens in all micro-batches.
        padded_tokens: token positions computed (rows x longest row, summed over micro-batches).
    """

    batches: list[torch.Tensor]
    tokens: int
    padded_tokens: int

    @property
    def padding_fraction(self) -> float:
        """Share of the computed positions that are padding (0 when nothing is computed)."""
        return 1.0 - self.tokens / self.padded_tokens if self.padded_tokens else 0.0


def _account(batches: list[torch.Tensor], lengths: torch.Tensor) -> MicroBatches:
    tokens = int(sum(int(lengths[b].sum()) for b in batches))
    padded = int(sum(int(lengths[b].max()) * b.numel() for b in batches if b.numel()))
    return MicroBatches(batches, tokens, padded)


def by_row_count(index: torch.Tensor, lengths: torch.Tensor, rows: int) -> MicroBatches:
    """``index`` split in order into micro-batches of at most ``rows`` rows.

    Args:
        index: long [K], row indices; lengths: long [M], tokens of every row (indexed by ``index``).
        rows: >= 1.

    Raises:
        ValueError: rows < 1.
    """
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    return _account(list(index.split(rows)) if index.numel() else [], lengths)


def by_token_budget(index: torch.Tensor, lengths: torch.Tensor, budget: int) -> MicroBatches:
    """Length-sorted micro-batches whose ``rows x longest row`` stays within ``budget`` tokens.

    Rows are taken longest first; a micro-batch grows while (rows + 1) x its first (longest) row
    fits the budget; a row longer than the budget gets a micro-batch of its own.

    Args:
        index: long [K], row indices; lengths: long [M], tokens of every row (indexed by ``index``).
        budget: tokens per micro-batch, >= 1.

    Returns:
        :class:`MicroBatches`; every index appears in exactly one micro-batch.

    Raises:
        ValueError: budget < 1.
    """
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    order = index[torch.argsort(lengths[index], descending=True, stable=True)]
    batches: list[list[int]] = []
    longest = 0
    for i in order.tolist():
        if batches and (len(batches[-1]) + 1) * longest <= budget:
            batches[-1].append(i)
            continue
        batches.append([i])
        longest = int(lengths[i])
    return _account([torch.tensor(b, dtype=torch.long) for b in batches], lengths)
