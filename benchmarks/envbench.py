"""Shared timing loop of the env benchmarks (bare env vs text env on the same actions)."""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence


def play(reset: Callable[[int], Any], step: Callable[[int], bool], actions: Sequence[int],
         seed: int) -> tuple[float, list[int]]:
    """Play ``actions`` (indices) from ``reset(seed)``; ``step`` returns whether the episode ended,
    after which the next episode is ``reset(seed + k)``.

    Returns:
        Seconds for the whole loop (resets included), and the action indices where episodes ended.
    """
    ends: list[int] = []
    start = time.perf_counter()
    reset(seed)
    for i, a in enumerate(actions):
        if step(a):
            ends.append(i)
            reset(seed + len(ends))
    return time.perf_counter() - start, ends


def play_text_env(env: Any, replies: Sequence[str], actions: Sequence[int], seed: int) -> tuple[float, list[int]]:
    """:func:`play` on a text env stepped with ``replies[a]`` (parsing, text and info included)."""
    return play(lambda s: env.reset(seed=s), lambda a: any(env.step(replies[a])[2:4]), actions, seed)
