"""Baba Is AI: our own implementation of the game BALROG uses (``nacloos/baba-is-ai``), as text envs.

Baba Is AI is not on PyPI, so the game is written here in pure Python (numpy only for the seeded
level RNG): :mod:`.items` the item codes, :mod:`.rules` the rule engine, :mod:`.levels` the generators
of BALROG's 40 levels, :mod:`.env` the :class:`~verlog.envs.base.TextEnv` in BALROG's text conventions
and :mod:`.solver` a breadth-first solver. Importing this package registers ``babaisai/<level>`` for every level of
:data:`BABAISAI_LEVELS` (BALROG's ``config.yaml`` task list without its ``env/`` prefix), e.g.
``babaisai/goto_win`` and ``babaisai/two_room-break_stop-make_win-distr_obj``.
"""

from __future__ import annotations

import functools

from verlog.envs.babaisai.env import (
    BABAISAI_MAX_STEPS,
    BabaIsAITextEnv,
    build_brief_instruction,
    build_instruction,
    describe_game,
    make_babaisai,
)
from verlog.envs.babaisai.levels import BABAISAI_LEVELS, LEVEL_SPECS, generate_level
from verlog.envs.babaisai.rules import ACTIONS, BabaGame, parse_board
from verlog.envs.babaisai.solver import solve
from verlog.envs.registry import register

__all__ = [
    "ACTIONS",
    "BABAISAI_LEVELS",
    "BABAISAI_MAX_STEPS",
    "LEVEL_SPECS",
    "BabaGame",
    "BabaIsAITextEnv",
    "build_brief_instruction",
    "build_instruction",
    "describe_game",
    "generate_level",
    "make_babaisai",
    "parse_board",
    "solve",
]

for _level in BABAISAI_LEVELS:
    register(f"babaisai/{_level}", functools.partial(make_babaisai, _level))
