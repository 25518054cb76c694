"""MiniHack (upstream ``minihack``) as :class:`~verlog.envs.base.TextEnv` games, in BALROG's conventions.

Observations and the context (inventory)
are, by default, BALROG's text byte for byte (:mod:`verlog.envs.nethack_balrog_text`: message, language
observation, cursor, terminal map; ``--More--`` dismissed automatically after each step, as BALROG's
``skip_more: True``); ``text_style="tidy"`` gives Verlog's own (:mod:`verlog.envs.nethack_text`).

Registered tasks (:data:`MINIHACK_TASKS`; BALROG's MiniHack suite minus Boxoban):
``minihack/MazeWalk-9x9``, ``minihack/MazeWalk-15x15``, ``minihack/Corridor-R3``,
``minihack/CorridorBattle-Dark``, ``minihack/Quest-Easy``, ``minihack/Quest-Medium`` (gymnasium ids
``MiniHack-<task>-v0``). ``Boxoban-Hard``/``Boxoban-Medium`` are left out: they need the
deepmind/boxoban-levels files, a download that BALROG's post-install step makes and this project
cannot. Their names are registered anyway, so that ``make_env("minihack/Boxoban-Hard")`` raises a
ValueError saying why instead of "unknown environment".

Actions are BALROG's names (:data:`MINIHACK_ACTION_NAMES`) that exist in the task's own action set,
looked up by key value: the 8 compass moves for MazeWalk and CorridorBattle; those plus ``open``,
``kick``, ``search`` for Corridor-R3; 32 actions for Quest (8 moves, 8 far moves, ``down``, ``wait``,
``more``, ``apply``, ``close``, ``eat``, ``force``, ``kick``, ``loot``, ``open``, ``pickup``,
``pray``, ``puton``, ``quaff``, ``search``, ``zap``). Default (invalid reply): ``north``.

Game settings are BALROG's ``minihack_kwargs``: random role (``character="@"``; tasks that pin a role
keep it), autopickup off, MiniHack's constant -0.01 penalty on steps where game time does not advance.
The reward is MiniHack's native one (1 on reaching the goal, the penalty above); the step limit is
100 for every task (BALROG's), enforced by :class:`~verlog.envs.base.TextEnv`; MiniHack's own limit is
set out of reach so it never ends an episode earlier. ``terminated`` = the goal was reached or the
agent died. Progression: 1.0 if the episode's last step reached the goal (MiniHack's end status
``TASK_SUCCESSFUL``), else 0.0. BALROG tests "final reward >= 1" instead, which is the same event
except when the goal step also took no game time (a fast character's free move): MiniHack then adds
its -0.01 frozen-time penalty, the reward is 0.99 and BALROG scores a reached goal as a failure
(measured: 1 of 9 random-walk successes in MazeWalk-9x9 with a monk). We count it as a success.

The state key (GiGPO's anchor states, :attr:`~verlog.envs.nethack_text.NetHackTextEnvBase.state_key`)
is the observable state: NLE's observation arrays, not the game's hidden internals.

Instructions (our words): ``"full"`` has the goal line of the task's family, the actions with
glosses, two tips and the reply format; ``"brief"`` the goal, the action names and the reply format.
Goal lines: Corridor/CorridorBattle "explore the level and reach the staircase down", Quest "fight
monsters and make your way through rooms and mazes to the staircase down" (BALROG's content), and
MazeWalk "find your way through the maze to the staircase down": BALROG's prompt matches only
corridor/quest/boxoban task names, so MazeWalk falls through to its generic "get as far as possible",
which hides the real goal; we state it.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Mapping

from verlog.envs.nethack_actions import ACTION_GLOSSES, action_indices
from verlog.envs.nethack_text import NATIVE_STEP_LIMIT, SURROUNDINGS_HELP, NetHackTextEnvBase, make_nle_env
from verlog.envs.options import instruction_builder, task_entry
from verlog.envs.registry import register

with warnings.catch_warnings():  # minihack imports pkg_resources, deprecated in recent setuptools
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.simplefilter("ignore", UserWarning)
    import minihack  # noqa: F401  (registers the MiniHack-* gymnasium ids)

__all__ = [
    "MINIHACK_TASKS",
    "MINIHACK_ACTION_NAMES",
    "UNSUPPORTED_TASKS",
    "MiniHackTextEnv",
    "build_instruction",
    "build_brief_instruction",
]

#: BALROG's MiniHack action names (its 33-name list), in its order; each task keeps those its own
#: action set has (MiniHack removes "up" from every task).
MINIHACK_ACTION_NAMES: tuple[str, ...] = (
    "north", "east", "south", "west", "northeast", "southeast", "southwest", "northwest",
    "far north", "far east", "far south", "far west",
    "far northeast", "far southeast", "far southwest", "far northwest",
    "up", "down", "wait", "more", "apply", "close", "open", "eat", "force", "kick", "loot",
    "pickup", "pray", "puton", "quaff", "search", "zap",
)  # fmt: skip
DEFAULT_ACTION = "north"
#: BALROG's step limit for every MiniHack task.
MINIHACK_MAX_STEPS = 100

_GOALS = {
    "maze": "Your goal is to find your way through the maze to the staircase down (>): you win as soon "
    "as you stand on it.",
    "corridor": "Your goal is to explore the level and reach the staircase down (>): you win as soon as "
    "you stand on it.",
    "quest": "Your goal is to explore the level, fight monsters and make your way through rooms and "
    "mazes to reach the staircase down (>): you win as soon as you stand on it.",
}
_BRIEF_GOALS = {
    "maze": "walk through the maze to the staircase down (>)",
    "corridor": "reach the staircase down (>)",
    "quest": "fight your way to the staircase down (>)",
}

#: task -> (gymnasium id, goal family).
MINIHACK_TASKS: dict[str, tuple[str, str]] = {
    "MazeWalk-9x9": ("MiniHack-MazeWalk-9x9-v0", "maze"),
    "MazeWalk-15x15": ("MiniHack-MazeWalk-15x15-v0", "maze"),
    "Corridor-R3": ("MiniHack-Corridor-R3-v0", "corridor"),
    "CorridorBattle-Dark": ("MiniHack-CorridorBattle-Dark-v0", "corridor"),
    "Quest-Easy": ("MiniHack-Quest-Easy-v0", "quest"),
    "Quest-Medium": ("MiniHack-Quest-Medium-v0", "quest"),
}
#: BALROG tasks we cannot build, with the reason.
UNSUPPORTED_TASKS: dict[str, str] = {
    name: (
        "Boxoban needs the deepmind/boxoban-levels level files, which BALROG downloads after install "
        "(balrog-post-install) and this project cannot fetch; it is not registered"
    )
    for name in ("Boxoban-Hard", "Boxoban-Medium")
}

#: BALROG's minihack_kwargs (character "@" = random role; tasks that pin a role override it).
BALROG_MINIHACK_KWARGS: dict[str, Any] = {
    "character": "@",
    "autopickup": False,
    "penalty_step": -0.01,
    "penalty_time": 0.0,
    "penalty_mode": "constant",
    "savedir": None,
    "save_ttyrec_every": 0,
}


def build_instruction(family: str, actions: list[str], text_style: str = "balrog") -> str:
    """The full system prompt of a MiniHack task (our words, BALROG's content).

    Args:
        family: ``"maze"``, ``"corridor"`` or ``"quest"`` (the goal line).
        actions: the task's action names.
        text_style: the observation text it explains (a key of :data:`SURROUNDINGS_HELP`).

    Raises:
        KeyError: unknown family.
    """
    listed = "\n".join(f"- {name}: {ACTION_GLOSSES[name]}" for name in actions)
    return (
        "You are an agent playing MiniHack, a small level of the dungeon game NetHack. "
        f"{_GOALS[family]}\n\n"
        f"Each turn you get the game message, {SURROUNDINGS_HELP[text_style]}, "
        "and the screen as text: @ is you, > a staircase down, . floor, # a corridor, "
        "| and - walls, + a door, letters are monsters.\n\n"
        f"Actions:\n{listed}\n\n"
        "Tips:\n"
        "- There is no point in repeating an action that changes nothing; try something else.\n"
        "- You attack a monster by moving into it.\n\n"
        "Think briefly if you want, then end your reply with one line of the form\n"
        "ACTION: <action>\n"
        "where <action> is exactly one of: " + ", ".join(actions) + "."
    )


def build_brief_instruction(family: str, actions: list[str]) -> str:
    """A short system prompt: the goal, the actions and the reply format."""
    return (
        f"MiniHack: {_BRIEF_GOALS[family]}. Actions: {', '.join(actions)}. Reply with ACTION: <action>."
    )


INSTRUCTION_STYLES = {"full": build_instruction, "brief": build_brief_instruction}


class MiniHackTextEnv(NetHackTextEnvBase):
    """One MiniHack task as a text env (see the module docstring).

    Args:
        task: a key of :data:`MINIHACK_TASKS`.
        max_steps: step limit (``None``: BALROG's 100).
        format_penalty: added to the reward of a step whose reply held no valid action (<= 0).
        instruction_style: ``"full"`` or ``"brief"``.
        env_kwargs: extra MiniHack constructor arguments, over BALROG's (e.g. ``{"character": "val"}``).
        text_style: ``"balrog"`` (BALROG's text, :mod:`verlog.envs.nethack_balrog_text`) or ``"tidy"``
            (Verlog's own, :mod:`verlog.envs.nethack_text`).

    Raises:
        ValueError: unknown or unsupported task, bad style, or a reserved key in ``env_kwargs``.
    """

    def __init__(
        self,
        task: str,
        *,
        max_steps: int | None = None,
        format_penalty: float = 0.0,
        instruction_style: str = "full",
        env_kwargs: Mapping[str, Any] | None = None,
        text_style: str = "balrog",
    ) -> None:
        if task in UNSUPPORTED_TASKS:
            raise ValueError(f"MiniHack task {task!r} is not available: {UNSUPPORTED_TASKS[task]}")
        env_id, family = task_entry(MINIHACK_TASKS, task, "MiniHack")
        build_prompt = instruction_builder(INSTRUCTION_STYLES, instruction_style)
        extra = dict(env_kwargs or {})
        reserved = {"observation_keys", "max_episode_steps", "actions"} & set(extra)
        if reserved:
            raise ValueError(f"env_kwargs must not set {sorted(reserved)} (the text env controls them)")
        kwargs = {**BALROG_MINIHACK_KWARGS, "max_episode_steps": NATIVE_STEP_LIMIT, "fix_moon_phase": True, **extra}
        env = make_nle_env(env_id, kwargs)
        names = list(action_indices(env.actions, MINIHACK_ACTION_NAMES, strict=False))
        super().__init__(
            env,
            names,
            max_steps=MINIHACK_MAX_STEPS if max_steps is None else max_steps,
            format_penalty=format_penalty,
            text_style=text_style,
        )
        self.task = task
        self.env_id = env_id
        self.env_kwargs = kwargs
        self.family = family
        # the same for every episode
        full = build_prompt is build_instruction
        self._instruction = build_prompt(family, names, text_style) if full else build_prompt(family, names)
        self._success = False
        self._goal_status = int(env.StepStatus.TASK_SUCCESSFUL)

    #: ``"north"`` (BALROG's MiniHack default).
    default_action = DEFAULT_ACTION

    @property
    def progression(self) -> float:
        """1.0 if the latest step reached the goal (MiniHack's end status ``TASK_SUCCESSFUL``, which
        ends the episode), else 0.0."""
        return 1.0 if self._success else 0.0

    def _on_observation(self, reset: bool, reward: float, done: bool, end_status: int) -> None:
        self._success = (not reset) and end_status == self._goal_status


for _task in MINIHACK_TASKS:
    register(f"minihack/{_task}", functools.partial(MiniHackTextEnv, _task))
# Registered so that asking for them explains why they are missing (MiniHackTextEnv raises ValueError).
for _task in UNSUPPORTED_TASKS:
    register(f"minihack/{_task}", functools.partial(MiniHackTextEnv, _task))
