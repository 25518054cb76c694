"""Checks of the options the game modules share: the task name and the instruction style."""

from __future__ import annotations

from typing import Mapping, TypeVar

__all__ = ["instruction_builder", "task_entry"]

_V = TypeVar("_V")


def task_entry(tasks: Mapping[str, _V], task: str, game: str) -> _V:
    """``tasks[task]``: the entry of ``task`` in a game's task table.

    Args:
        tasks: the game's task table (task name -> what the game needs to build it).
        task: the task asked for.
        game: the game's name for the error message, e.g. ``"BabyAI"``.

    Raises:
        ValueError: ``task`` is not in ``tasks`` (the message lists the known tasks).
    """
    if task not in tasks:
        raise ValueError(f"unknown {game} task {task!r}; known tasks: {sorted(tasks)}")
    return tasks[task]


def instruction_builder(styles: Mapping[str, _V], style: str) -> _V:
    """``styles[style]``: what builds the system prompt of the ``instruction_style`` ``style``.

    Args:
        styles: the game's styles (``"full"``, ``"brief"``) -> their prompt builders.
        style: the style asked for.

    Raises:
        ValueError: ``style`` is not in ``styles`` (the message lists the known styles).
    """
    if style not in styles:
        raise ValueError(f"instruction_style must be one of {sorted(styles)}, got {style!r}")
    return styles[style]
