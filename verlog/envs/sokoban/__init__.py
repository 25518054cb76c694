"""Sokoban: rooms generated from a seed by reverse play, as text envs (our own code, numpy only).

:mod:`.game` the rules (moves, pushes, gym-sokoban's rewards, the room text), :mod:`.generator` the
reverse-play room generator, :mod:`.solver` a breadth-first solver, :mod:`.env` the
:class:`~verlog.envs.base.TextEnv`. Importing this package registers ``sokoban/<task>`` for every
task of :data:`SOKOBAN_TASKS`: ``sokoban/6x6_1box``, ``sokoban/6x6_2box``, ``sokoban/8x8_2box``.
"""

from __future__ import annotations

import functools

from verlog.envs.registry import register
from verlog.envs.sokoban.env import (
    SOKOBAN_ACTIONS,
    SOKOBAN_MAX_STEPS,
    SOKOBAN_TASKS,
    SokobanTextEnv,
    build_brief_instruction,
    build_instruction,
    describe_room,
    make_sokoban,
)
from verlog.envs.sokoban.game import Layout, State, move, parse_room, render_room, step_reward
from verlog.envs.sokoban.generator import GeneratedRoom, generate_room, reverse_play
from verlog.envs.sokoban.solver import solve

__all__ = [
    "SOKOBAN_ACTIONS",
    "SOKOBAN_MAX_STEPS",
    "SOKOBAN_TASKS",
    "GeneratedRoom",
    "Layout",
    "SokobanTextEnv",
    "State",
    "build_brief_instruction",
    "build_instruction",
    "describe_room",
    "generate_room",
    "make_sokoban",
    "move",
    "parse_room",
    "render_room",
    "reverse_play",
    "solve",
    "step_reward",
]

for _task in SOKOBAN_TASKS:
    register(f"sokoban/{_task}", functools.partial(make_sokoban, _task))
