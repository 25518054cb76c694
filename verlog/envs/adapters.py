"""What every adapter of an environment library from outside Verlog needs: keep the library's use of the
process-wide random generators to itself, write its text inside the text observation space, and report
the hint moves and the win of a game that ends won or not (:class:`WinOrLoseGameEnv`).

Libraries of LLM tasks often draw from Python's ``random`` module and numpy's legacy global generator
(``random.randint``, ``np.random.seed``) rather than from a generator of their own. Left alone, that
makes an episode depend on whatever ran before it in the process, and it shifts the random streams of
everything else in the process (the trainer seeds those once at start). :class:`PrivateGlobalRandom`
gives the library a global state of its own: swapped in around each call into the library, swapped
out again afterwards.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

from verlog.envs.base import TEXT_CHARSET, TextEnv

__all__ = ["PrivateGlobalRandom", "WinOrLoseGameEnv", "isolated_global_random", "to_text_charset"]

_CHARSET = frozenset(TEXT_CHARSET)


class PrivateGlobalRandom:
    """A private copy of the states of Python's global ``random`` and of numpy's legacy global generator.

    ``with private.active(): call_the_library()`` runs the call with this object's states as the global
    ones and then puts the caller's states back, keeping the states the call left behind for the next
    ``active()`` block. So the library sees one continuous stream of its own, which :meth:`seed` makes
    reproducible, and the rest of the process sees no draw at all.

    Args:
        seed: the seed of both states (any int; see :meth:`seed`).
    """

    def __init__(self, seed: int = 0) -> None:
        self._python: Any = None
        self._numpy: Any = None
        self.seed(seed)

    def seed(self, seed: int) -> None:
        """Reset both private states from ``seed`` (numpy takes ``seed`` modulo 2**32)."""
        with isolated_global_random():
            random.seed(seed)
            np.random.seed(seed % 2**32)
            self._python, self._numpy = random.getstate(), np.random.get_state()

    @contextmanager
    def active(self) -> Iterator[None]:
        """Run the block with the private states as the global ones; the caller's come back afterwards,
        also when the block raises."""
        outer_python, outer_numpy = random.getstate(), np.random.get_state()
        random.setstate(self._python)
        np.random.set_state(self._numpy)
        try:
            yield
        finally:
            self._python, self._numpy = random.getstate(), np.random.get_state()
            random.setstate(outer_python)
            np.random.set_state(outer_numpy)


@contextmanager
def isolated_global_random(seed: int | None = None) -> Iterator[None]:
    """Run the block and then put back the global ``random`` and numpy states it found.

    Args:
        seed: when given, the block starts from global states seeded with it (numpy: modulo 2**32), so
            whatever the block draws from them is a function of ``seed`` alone.
    """
    outer_python, outer_numpy = random.getstate(), np.random.get_state()
    try:
        if seed is not None:
            random.seed(seed)
            np.random.seed(seed % 2**32)
        yield
    finally:
        random.setstate(outer_python)
        np.random.set_state(outer_numpy)


def to_text_charset(text: str) -> str:
    """``text`` with every character outside :data:`~verlog.envs.base.TEXT_CHARSET` written as a Python
    escape (``\\u2192`` for a right arrow, ``\\U0001f600`` beyond the basic plane), so nothing is lost
    and the result lies in the observation space's charset. Text inside the charset is returned as is.
    """
    if all(ch in _CHARSET for ch in text):
        return text
    return "".join(ch if ch in _CHARSET else (f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
                   for ch in text)


class WinOrLoseGameEnv(TextEnv):
    """A :class:`TextEnv` over an outside game that ends won or not, with hint moves for random play.

    The subclass keeps ``self._moves`` (moves of the current state, drawn or listed by the library; any
    move the game accepts may still be sent) and ``self._won`` (its own rule for a win) up to date in
    ``reset`` and ``step``; this class reports them through the :class:`TextEnv` properties.
    """

    _moves: list[str]
    _won: bool

    def __init__(self, *, max_steps: int | None = None, format_penalty: float = 0.0, hints: int = 8) -> None:
        """Check and keep ``hints``, how many hint moves to draw per state.

        Raises:
            TypeError: ``hints`` is not an int.
            ValueError: ``hints < 1``.
        """
        super().__init__(max_steps=max_steps, format_penalty=format_penalty)
        if isinstance(hints, bool) or not isinstance(hints, int):
            raise TypeError(f"hints must be an int, got {type(hints).__name__}")
        if hints < 1:
            raise ValueError(f"hints must be >= 1, got {hints}")
        self.hints = hints

    @property
    def valid_actions(self) -> list[str]:
        """Hint moves of the current state (what random play draws from)."""
        return list(self._moves)

    @property
    def progression(self) -> float:
        """1 once the game is won, else 0."""
        return 1.0 if self._won else 0.0

    @property
    def success(self) -> bool:
        """Whether the game was won (the subclass's rule)."""
        return self._won
