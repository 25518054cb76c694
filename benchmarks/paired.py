"""Paired timing of two ways of doing the same work, for benchmarks on a shared, loaded machine.

The two sides run interleaved, A B A B ..., in one process on the same inputs, after untimed warm-up
calls of each, so that a change of machine load between pairs hits both sides alike; the figure to
trust is then the per-pair ratio (its median, with its spread), not the ratio of two separately
taken medians. Every benchmark that compares two sides times them here:

* :func:`paired_times` times two plain callables with the wall clock;
* :func:`interleave` runs two sides that measure themselves (each call returns its own cost, e.g. the
  seconds of an env's steps without its resets, or a training run's seconds per turn).

By convention A is Verlog's side and B the baseline it is compared with. :meth:`PairedTimes.ratios`
gives A / B of each pair's costs (> 1: A is slower), :meth:`PairedTimes.rate_ratios` the inverse,
A's rate / B's rate (> 1: A is faster).
"""

from __future__ import annotations

import gc
import statistics
from dataclasses import dataclass
from typing import Callable, NamedTuple

from perfbench import timed

__all__ = ["PairedTimes", "Spread", "interleave", "paired_times", "spread"]


@dataclass(frozen=True)
class PairedTimes:
    """Costs of the timed calls of two sides, pair by pair.

    Attributes:
        a, b: [pairs] cost (seconds, or seconds per unit of work) of side A's and side B's i-th call.
    """

    a: list[float]
    b: list[float]

    @property
    def pairs(self) -> int:
        """How many pairs."""
        return len(self.a)

    def ratios(self) -> list[float]:
        """[pairs] A / B of each pair's costs (> 1: A is slower)."""
        return [ta / tb for ta, tb in zip(self.a, self.b)]

    def rate_ratios(self) -> list[float]:
        """[pairs] A's rate / B's rate of each pair, i.e. B / A of the costs (> 1: A is faster)."""
        return [tb / ta for ta, tb in zip(self.a, self.b)]

    def __add__(self, other: "PairedTimes") -> "PairedTimes":
        """Pair-by-pair sums of two measurements with as many pairs (e.g. the phases of one turn)."""
        if len(self.a) != len(other.a):
            raise ValueError(f"PairedTimes: {len(self.a)} pairs + {len(other.a)} pairs")
        return PairedTimes([x + y for x, y in zip(self.a, other.a)], [x + y for x, y in zip(self.b, other.b)])


class Spread(NamedTuple):
    """Median, min and max of a list of figures."""

    median: float
    min: float
    max: float


def spread(values: list[float]) -> Spread:
    """(median, min, max) of a non-empty list."""
    return Spread(statistics.median(values), min(values), max(values))


def interleave(a: Callable[[], float], b: Callable[[], float], *, pairs: int, warmup: int = 1) -> PairedTimes:
    """Run two self-measuring sides alternately: ``warmup`` untimed calls of A then B, then ``pairs``
    times A then B, keeping what each call returns (its cost).

    The garbage collector runs (outside both sides) before every kept call, so that no side pays for
    the other's garbage.

    Raises:
        ValueError: ``pairs`` < 1 or ``warmup`` < 0.
    """
    if pairs < 1:
        raise ValueError(f"paired timing: pairs must be >= 1, got {pairs}")
    if warmup < 0:
        raise ValueError(f"paired timing: warmup must be >= 0, got {warmup}")
    for _ in range(warmup):
        a()
        b()
    ta, tb = [], []
    for _ in range(pairs):
        gc.collect()
        ta.append(a())
        gc.collect()
        tb.append(b())
    return PairedTimes(ta, tb)


def paired_times(a: Callable[[], object], b: Callable[[], object], *, pairs: int, warmup: int = 1) -> PairedTimes:
    """Time ``a`` and ``b`` interleaved (:func:`interleave`): seconds of each call (wall clock).

    Raises:
        ValueError: ``pairs`` < 1 or ``warmup`` < 0.
    """
    return interleave(lambda: timed(a), lambda: timed(b), pairs=pairs, warmup=warmup)
