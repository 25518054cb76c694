"""Paired timing of two ways of doing the same work, for benchmarks on a shared, loaded machine.

The two sides run interleaved, A B A B ..., after untimed warm-up calls of each, so that a change of
machine load between pairs hits both sides alike; the figure to trust is then the per-pair ratio
A / B (its median, with its spread), not the ratio of two separately taken medians.
"""

from __future__ import annotations

import gc
import statistics
from dataclasses import dataclass
from typing import Callable

from perfbench import timed

__all__ = ["PairedTimes", "paired_times", "spread"]


@dataclass(frozen=True)
class PairedTimes:
    """Seconds of the timed calls of two sides, pair by pair.

    Attributes:
        a, b: [pairs] seconds of side A's and side B's i-th timed call (wall clock).
    """

    a: list[float]
    b: list[float]

    def ratios(self) -> list[float]:
        """[pairs] A / B of each pair (> 1: A is slower)."""
        return [ta / tb for ta, tb in zip(self.a, self.b)]

    def __add__(self, other: "PairedTimes") -> "PairedTimes":
        """Pair-by-pair sums of two measurements with as many pairs (e.g. the phases of one turn)."""
        if len(self.a) != len(other.a):
            raise ValueError(f"PairedTimes: {len(self.a)} pairs + {len(other.a)} pairs")
        return PairedTimes([x + y for x, y in zip(self.a, other.a)], [x + y for x, y in zip(self.b, other.b)])


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, min, max) of a non-empty list."""
    return statistics.median(values), min(values), max(values)


def paired_times(a: Callable[[], object], b: Callable[[], object], *, pairs: int, warmup: int = 1) -> PairedTimes:
    """Time ``a`` and ``b`` interleaved: ``warmup`` untimed calls of each, then ``pairs`` times A then B.

    The garbage collector runs (untimed) before every timed call, so that no side pays for the
    other's garbage.

    Raises:
        ValueError: ``pairs`` < 1.
    """
    if pairs < 1:
        raise ValueError(f"paired_times: pairs must be >= 1, got {pairs}")
    for _ in range(warmup):
        a()
        b()
    ta, tb = [], []
    for _ in range(pairs):
        gc.collect()
        ta.append(timed(a))
        gc.collect()
        tb.append(timed(b))
    return PairedTimes(ta, tb)
