"""Sokoban rooms generated from a seed (:mod:`.generator`) as a :class:`~verlog.envs.base.TextEnv`.

Observation text (one line of legend, the room, one line of progress)::

    Legend: # wall, _ floor, O target, X box, * box on a target, P you, S you on a target.
    # # # # # #
    # _ _ # # #
    # _ X _ P #
    # _ O _ _ #
    # # # # # #
    # # # # # #
    Boxes on targets: 0 of 1.

Row 1 is the top row; ``up`` moves towards it, ``left`` towards the first column. The symbols are
RAGEN's, except ``*`` for a box on a target (see :data:`~verlog.envs.sokoban.game.SYMBOLS`); cells are
separated by spaces so that a tokenizer keeps one cell per token.

Actions: ``up``, ``down``, ``left``, ``right``; the default for a reply with no valid action is
``up`` (the base class adds the format penalty and a notice line). Reward per step: gym-sokoban's
(:func:`~verlog.envs.sokoban.game.step_reward`: -0.1, +1 / -1 for a box onto / off a target, +10 when
all boxes are on targets). ``terminated`` when every box is on a target; ``truncated`` at the step
limit, which defaults to :data:`SOKOBAN_MAX_STEPS` = 100, the default of RAGEN's Sokoban env config
(``max_steps: 100`` for its 6x6 rooms; gym-sokoban's own default is 120 for 10x10 rooms); we keep
100 for the larger room too. Progression: the share of boxes on targets now (1.0 once solved).
:attr:`SokobanTextEnv.state_key` is the layout plus the exact player and box cells (for GiGPO).

Registered tasks (:data:`SOKOBAN_TASKS`): ``sokoban/6x6_1box`` and ``sokoban/6x6_2box`` (the peers'
training rooms) and ``sokoban/8x8_2box``; a room size counts the outer wall ring.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verlog.envs.base import TextEnv, require_episode
from verlog.envs.options import instruction_builder, task_entry
from verlog.envs.sokoban.game import MOVES, SYMBOLS, Layout, State, move, render_room, render_room_image, step_reward
from verlog.envs.sokoban.generator import GeneratedRoom, generate_room

__all__ = [
    "SOKOBAN_ACTIONS",
    "SOKOBAN_MAX_STEPS",
    "SOKOBAN_TASKS",
    "SokobanTextEnv",
    "build_brief_instruction",
    "build_instruction",
    "describe_room",
    "make_sokoban",
]

#: Step limit per episode (RAGEN's Sokoban default; see the module docstring).
SOKOBAN_MAX_STEPS = 100
#: ``("up", "down", "left", "right")``.
SOKOBAN_ACTIONS: tuple[str, ...] = tuple(MOVES)
DEFAULT_ACTION = "up"
#: task -> ``(height, width, boxes)``; sizes include the outer wall ring.
SOKOBAN_TASKS: dict[str, tuple[int, int, int]] = {
    "6x6_1box": (6, 6, 1),
    "6x6_2box": (6, 6, 2),
    "8x8_2box": (8, 8, 2),
}
_ACTION_HELP = {
    "up": "move one cell up (towards the top row)",
    "down": "move one cell down",
    "left": "move one cell left",
    "right": "move one cell right",
}
LEGEND = "Legend: " + ", ".join(f"{symbol} {meaning}" for symbol, meaning in SYMBOLS.items()) + "."


def describe_room(layout: Layout, state: State) -> str:
    """The observation text of a room (module docstring): legend line, the room, progress line."""
    on, total = state.on_targets(layout), len(layout.targets)
    return f"{LEGEND}\n{render_room(layout, state)}\nBoxes on targets: {on} of {total}."


def build_instruction(num_boxes: int) -> str:
    """The full system prompt (our own words): goal, rules, what the text shows, actions, tips, format."""
    boxes = "the box onto the target" if num_boxes == 1 else f"all {num_boxes} boxes onto the targets"
    actions = "\n".join(f"- {name}: {help_}" for name, help_ in _ACTION_HELP.items())
    legend = "\n".join(f"- {symbol}: {meaning}" for symbol, meaning in SYMBOLS.items())
    return (
        "You are playing Sokoban, a puzzle in a room seen from above on a grid of cells. "
        f"Your goal is to push {boxes}; the puzzle is solved when every box stands on a target.\n\n"
        "Rules: you move one cell per action. Walking into a box pushes it one cell further in the same "
        "direction, but only if that cell is floor or an empty target; otherwise nothing moves. You cannot "
        "pull boxes, push two boxes at once, or walk through walls or boxes.\n\n"
        "Each turn you see the whole room, one line per row from the top row down, one symbol per cell:\n"
        f"{legend}\n"
        "The last line says how many boxes are on targets.\n\n"
        f"Actions:\n{actions}\n\n"
        "Tips:\n"
        "- To push a box, stand next to it on the opposite side from where it should go.\n"
        "- A box pushed into a corner, or against a wall with no target along it, can never reach a "
        "target again: plan the pushes before you make them.\n"
        "- If a move changed nothing, it was blocked; try another.\n\n"
        "Each step costs 0.1 points; a box onto a target gives 1 point, a box off a target costs 1, and "
        "solving the puzzle gives 10.\n\n"
        "Think briefly if you want, then end your reply with one line of the form\n"
        "ACTION: <action>\n"
        "where <action> is exactly one of: " + ", ".join(SOKOBAN_ACTIONS) + "."
    )


def build_brief_instruction(num_boxes: int) -> str:
    """A short system prompt for tiny models: goal, actions and the reply format only."""
    return (f"Sokoban: push every box (X) onto a target (O). Actions: {', '.join(SOKOBAN_ACTIONS)}. "
            "Reply with ACTION: <action>.")


INSTRUCTION_STYLES = {"full": build_instruction, "brief": build_brief_instruction}


class SokobanTextEnv(TextEnv):
    """One Sokoban room size as a text env (see the module docstring for text and rewards).

    Args:
        height, width: room size in cells, outer wall ring included (>= 4 each).
        num_boxes: boxes (and targets) per room (>= 1).
        max_steps: step limit per episode.
        format_penalty: added to the reward of a step whose reply held no valid action (<= 0).
        instruction_style: ``"full"`` or ``"brief"``.
        observation_mode: ``"text"`` (the default), ``"image"`` (a dict: the progress line as text and
            the image of the room) or ``"both"`` (a dict: the text observation and the image); see
            :meth:`~verlog.envs.base.TextEnv.enable_images`.
        image_tile_px: pixels per cell of the image (:func:`~verlog.envs.sokoban.game.render_room_image`).

    Attributes:
        room: the :class:`~verlog.envs.sokoban.generator.GeneratedRoom` of the episode (its
            ``solution`` solves the start state).
        layout, state: the room's walls and targets, and the current player and box cells; tests may
            set both after ``reset`` to play a hand-made room (:func:`~verlog.envs.sokoban.game.parse_room`).

    Raises:
        ValueError: a bad size, box count, ``max_steps``, ``format_penalty`` or instruction style.
    """

    def __init__(self, height: int, width: int, num_boxes: int, *, max_steps: int = SOKOBAN_MAX_STEPS,
                 format_penalty: float = 0.0, instruction_style: str = "full", observation_mode: str = "text",
                 image_tile_px: int = 8) -> None:
        super().__init__(max_steps=max_steps, format_penalty=format_penalty)
        if height < 4 or width < 4 or num_boxes < 1:
            raise ValueError(f"Sokoban needs a room of at least 4x4 and one box, got {height}x{width}, {num_boxes}")
        if isinstance(image_tile_px, bool) or not isinstance(image_tile_px, int) or image_tile_px < 1:
            raise ValueError(f"image_tile_px must be an int >= 1, got {image_tile_px!r}")
        self.image_tile_px = image_tile_px
        self.enable_images(observation_mode, (height * image_tile_px, width * image_tile_px))
        self.height, self.width, self.num_boxes = height, width, num_boxes
        self._instruction = instruction_builder(INSTRUCTION_STYLES, instruction_style)(num_boxes)
        self.room: GeneratedRoom | None = None
        self.layout: Layout | None = None
        self.state: State | None = None

    fixed_actions = SOKOBAN_ACTIONS
    #: ``"up"`` (the game has no idle move; the format penalty marks the invalid reply).
    default_action = DEFAULT_ACTION

    # -------------------------------------------------------------- TextEnv properties
    @property
    def progression(self) -> float:
        """The share of boxes on targets now, in [0, 1]."""
        layout = require_episode(self.layout)
        return require_episode(self.state).on_targets(layout) / len(layout.targets)

    @property
    def state_key(self) -> bytes:
        """The layout (walls, targets) and the exact player and box cells. RuntimeError before reset."""
        return require_episode(self.layout).key() + require_episode(self.state).key()

    def describe(self) -> str:
        """The observation text of the current state (no notice line)."""
        return describe_room(require_episode(self.layout), require_episode(self.state))

    def render_image(self) -> np.ndarray:
        """The whole room (the player sees all of it), ``image_tile_px`` pixels per cell. RuntimeError
        before reset."""
        return render_room_image(require_episode(self.layout), require_episode(self.state), self.image_tile_px)

    def image_mode_text(self) -> str:
        """The text of ``image`` mode: the progress line (``Boxes on targets: k of n.``); the goal is in
        the instruction."""
        state = require_episode(self.state)
        return f"Boxes on targets: {state.on_targets(self.layout)} of {len(self.layout.targets)}."

    def _extra_info(self) -> dict[str, Any]:
        return {"boxes_on_target": self.state.on_targets(self.layout)}

    # -------------------------------------------------------------- game
    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        # TextEnv.reset seeded gymnasium's own self.np_random when seed is an int (never the global RNG).
        self.room = generate_room(self.np_random, self.height, self.width, self.num_boxes)
        self.layout, self.state = self.room.layout, self.room.start
        return self.describe(), self._extra_info()

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        on_before = self.state.on_targets(self.layout)
        self.state, _ = move(self.layout, self.state, action)
        on_after = self.state.on_targets(self.layout)
        solved = on_after == len(self.layout.targets)
        reward = step_reward(on_before, on_after, len(self.layout.targets))
        return self.describe(), reward, solved, False, self._extra_info()


def make_sokoban(task: str, *, max_steps: int | None = None, format_penalty: float = 0.0,
                 instruction_style: str = "full", observation_mode: str = "text",
                 image_tile_px: int = 8) -> SokobanTextEnv:
    """Build the Sokoban task ``task`` (a key of :data:`SOKOBAN_TASKS`, e.g. ``"6x6_1box"``).

    Args:
        max_steps: step limit; ``None`` uses :data:`SOKOBAN_MAX_STEPS`.
        format_penalty, instruction_style, observation_mode, image_tile_px: see :class:`SokobanTextEnv`.

    Raises:
        ValueError: unknown task (the message lists the known ones), or bad arguments.
    """
    height, width, boxes = task_entry(SOKOBAN_TASKS, task, "Sokoban")
    return SokobanTextEnv(height, width, boxes, max_steps=SOKOBAN_MAX_STEPS if max_steps is None else max_steps,
                          format_penalty=format_penalty, instruction_style=instruction_style,
                          observation_mode=observation_mode, image_tile_px=image_tile_px)
