"""Baba Is AI (our own engine, :mod:`~verlog.envs.babaisai.rules`) as a :class:`~verlog.envs.base.TextEnv`.

The observation is byte for byte the text BALROG's wrapper (``balrog/environments/babaisai/base.py``)
gives its agent for the same board, quirks included::

    Active rules:
    baba is you
    key is win

    Objects on the map:
    rule `key` 3 step to the left and 2 step up
    rule `is` 2 step to the left and 2 step up
    key 1 step to the right

* ``Active rules:`` then one line per sentence on the board with a property (``X is <noun>`` sentences
  are not listed), in reading order (``is`` blocks row by row, horizontal before vertical), a sentence
  written twice listed twice.
* The player is the first cell, in row-major order, whose top item is an object of the kind named by
  the *last* ``X is you`` sentence.
* ``Objects on the map:`` then the top item of every cell in row-major order (top row first, left to
  right), except ``baba`` objects (never listed) and the solid edge of the map: text blocks as
  ``rule `word```, objects by their kind, each with its offset from the player: columns first, then
  rows, joined by ``and``. Items under another item are not seen.
* BALROG's wording: a count to the right or down takes a plural (``2 steps down``), one to the left
  or up never does (``3 step to the left``); the player's own cell, when it is listed (an object
  that is YOU and not baba), is an empty line.

One conscious departure: when nothing is YOU any more (or no cell's top item is of the YOU kind)
BALROG's wrapper silently resets the level to a new one and writes the representation of a Python
object into the text; here the episode ends as lost (reward -1) and the last observation starts with
``Nothing is YOU any more: you lost.``, offsets then being taken from the last player position.

Actions (BALROG's five): ``idle``, ``up``, ``right``, ``down``, ``left``; the default for invalid
replies is ``idle``. Reward: ``1 - 0.9 * t / max_steps`` when the level is won at step ``t`` (BALROG:
``max_steps`` = 100), ``-1`` when it is lost (nothing is YOU), else 0. Progression is 1.0 if the
episode ended with a positive reward (won), else 0.0. :attr:`BabaIsAITextEnv.state_key` is the exact
board as bytes (for GiGPO's state grouping).

Levels: ``reset(seed=s)`` lays out BALROG's level for ``s`` (BALROG seeds numpy's global RNG with
the episode seed before ``reset``; we draw from ``numpy.random.RandomState(s)``, see
:mod:`~verlog.envs.babaisai.levels`); ``reset()`` without a seed continues that generator, which is
first seeded from the env's own RNG.
"""

from __future__ import annotations

import functools
from itertools import compress
from operator import getitem
from typing import Any

import numpy as np

from verlog.envs.babaisai.levels import BABAISAI_LEVELS, generate_level
from verlog.envs.babaisai.items import KIND_MASK, OBJECT_NAMES, PROPERTY_NAMES, YOU, item_code, item_name
from verlog.envs.babaisai.rules import ACTIONS, LOSE, WIN, BabaGame
from verlog.envs.base import TextEnv, require_episode
from verlog.envs.options import instruction_builder

__all__ = [
    "BABAISAI_MAX_STEPS",
    "BabaIsAITextEnv",
    "balrog_player",
    "build_brief_instruction",
    "build_instruction",
    "describe_game",
    "make_babaisai",
    "offset_text",
]

#: BALROG's step limit for every Baba Is AI level.
BABAISAI_MAX_STEPS = 100
DEFAULT_ACTION = "idle"
_ACTION_INDEX = {name: i for i, name in enumerate(ACTIONS)}
_ACTION_HELP = {
    "idle": "wait for one step (nothing moves)",
    "up": "take one step up",
    "right": "take one step to the right",
    "down": "take one step down",
    "left": "take one step to the left",
}
LOST_NOTICE = "Nothing is YOU any more: you lost."

_OFFSETS: dict[tuple[int, int], str] = {}
#: (code, dx, dy) -> the object's line, newline first (``"\nkey 1 step to the right"``).
_LINES: dict[tuple[int, int, int], str] = {}
#: (board width, cell count, player x, player y) -> the :class:`_CellLines` of each cell (:func:`_cell_lines`).
_CELL_LINES: dict[tuple[int, int, int, int], list[_CellLines]] = {}
_BABA = item_code("baba") & KIND_MASK
#: Observations an env keeps per episode (:meth:`BabaIsAITextEnv.describe`) before it starts afresh.
TEXT_CACHE_SIZE = 4096


def offset_text(dx: int, dy: int) -> str:
    """BALROG's offset of a cell from the player: ``dx`` columns right, ``dy`` rows down.

    BALROG decides between "step" and "steps" on the signed count, so left and up are always
    "step". Examples: ``offset_text(-3, -2) == "3 step to the left and 2 step up"``,
    ``offset_text(2, 1) == "2 steps to the right and 1 step down"``, ``offset_text(0, 0) == ""``.
    """
    text = _OFFSETS.get((dx, dy))
    if text is None:
        parts = []
        if dx:
            parts.append(f"{abs(dx)} {'steps' if dx > 1 else 'step'} to the {'right' if dx > 0 else 'left'}")
        if dy:
            parts.append(f"{abs(dy)} {'steps' if dy > 1 else 'step'} {'down' if dy > 0 else 'up'}")
        text = _OFFSETS[(dx, dy)] = " and ".join(parts)
    return text


def _object_line(code: int, dx: int, dy: int) -> str:
    """``"\n<name> <offset>"`` of item ``code`` at ``(dx, dy)`` from the player, or ``"\n"`` on the
    player's own cell (BALROG writes nothing there, not even the name). Cached."""
    line = _LINES.get((code, dx, dy))
    if line is None:
        line = _LINES[(code, dx, dy)] = f"\n{item_name(code)} {offset_text(dx, dy)}" if dx or dy else "\n"
    return line


class _CellLines(dict):
    """The lines of the stacks seen on one cell from one player position, ``(dx, dy)`` away, keyed
    by the stack (its tuple of item codes), each made the first time it is asked for: the line of
    the top item (:func:`_object_line`), empty for a ``baba`` object (BALROG never lists baba)."""

    __slots__ = ("dx", "dy")

    def __init__(self, dx: int, dy: int) -> None:
        super().__init__()
        self.dx, self.dy = dx, dy

    def __missing__(self, stack: tuple[int, ...]) -> str:
        code = stack[-1]
        line = self[stack] = "" if code & KIND_MASK == _BABA else _object_line(code, self.dx, self.dy)
        return line


def _cell_lines(width: int, size: int, px: int, py: int) -> list[_CellLines]:
    """The :class:`_CellLines` of every cell (row-major) of a board ``width`` cells wide with
    ``size`` cells, seen from the player at ``(px, py)``; shared by every board of that size."""
    lines = _CELL_LINES.get((width, size, px, py))
    if lines is None:
        lines = [_CellLines(idx % width - px, idx // width - py) for idx in range(size)]
        _CELL_LINES[(width, size, px, py)] = lines
    return lines


@functools.lru_cache(maxsize=1024)
def _you_kind(sentences: tuple[tuple[str, str], ...]) -> int | None:
    """The object kind named by the last ``X is you`` sentence, or ``None`` (no such sentence)."""
    you = None
    for noun, predicate in sentences:
        if predicate == "you":
            you = noun
    return None if you is None or you not in OBJECT_NAMES else item_code(you) & KIND_MASK


@functools.lru_cache(maxsize=1024)
def _rules_header(sentences: tuple[tuple[str, str], ...]) -> str:
    """The observation up to ``Objects on the map:`` for these sentences (they change rarely: cached)."""
    rules = "\n".join(f"{a} is {b}" for a, b in sentences if b in PROPERTY_NAMES)
    return f"Active rules:\n{rules}\n\nObjects on the map:"


def balrog_player(game: BabaGame) -> tuple[int, int] | None:
    """The cell BALROG measures offsets from: the first cell (row-major) whose top item is an object
    of the kind named by the last ``X is you`` sentence; ``None`` if there is no such cell.

    That sentence makes its kind YOU, so the cell is among the engine's YOU cells (row-major, kept
    between moves), a list of one or two cells where the full scan visits them all (the scan stays
    as a safeguard for a kind the rules do not make YOU).
    """
    kind = _you_kind(game.sentences)
    if kind is None:
        return None
    cells, width = game.cells, game.width
    scan = game._you_cells() if game._props[kind] & YOU else enumerate(cells)
    for idx, _ in scan:
        cell = cells[idx]
        if cell and cell[-1] & KIND_MASK == kind:
            return idx % width, idx // width
    return None


def describe_game(game: BabaGame, anchor: tuple[int, int] | None = None) -> str:
    """The observation text of ``game`` (see the module docstring).

    Args:
        game: the board.
        anchor: the cell offsets are measured from when BALROG's wrapper finds no player (e.g. the
            last player cell); ``None`` then means Verlog's first YOU item, else the top-left
            interior cell ``(1, 1)``.

    Returns:
        ``"Active rules:\\n<rules>\\n\\nObjects on the map:\\n<objects>"``, preceded by the lost notice
        line when nothing is YOU.
    """
    player = balrog_player(game)
    lost = False
    if player is None:
        you = game.player()
        lost = you is None
        player = anchor if anchor is not None and lost else (you[:2] if you is not None else (1, 1))
    cells = game.cells
    lines = _cell_lines(game.width, len(cells), *player)
    # The line of every non-empty cell's stack, in row-major order, looked up at C speed (compress
    # and filter skip the empty tuples); baba's lines are empty, so the join leaves them out.
    objects = "".join(map(getitem, compress(lines, cells), filter(None, cells)))
    # With no object listed the header ends with a newline; else the first line brings its own.
    text = _rules_header(game.sentences) + (objects or "\n")
    return text if not lost else f"{LOST_NOTICE}\n{text}"


def build_instruction() -> str:
    """The full system prompt (our own words; BALROG's content: rules, actions, tips, reply format)."""
    actions = "\n".join(f"- {name}: {help_}" for name, help_ in _ACTION_HELP.items())
    return (
        "You are playing Baba Is You, a puzzle game on a grid where the rules of the level are text "
        "blocks lying on the map, and you can change them by pushing the blocks.\n\n"
        'A rule is three blocks in a line, read left to right or top to bottom: "[Subject] IS [Property]", '
        'e.g. "baba is you" or "door is win". Subjects are objects: baba, key, ball, door, wall. Properties:\n'
        "- you: you control every object of that kind (all of them move with your actions);\n"
        "- win: when an object that is YOU steps onto an object that is WIN, you win;\n"
        "- stop: nothing can move onto that object;\n"
        "- push: walking into that object pushes it;\n"
        "- defeat: when an object that is YOU steps onto it, you lose.\n"
        "Objects without properties can be walked over. Text blocks can always be pushed, also in a row; "
        "a push fails at the edge of the map or against a STOP object. The rules are re-read after every "
        "move: pushing a block out of line breaks its rule, lining blocks up creates a new rule at once. "
        "If nothing is YOU any more, you lose.\n\n"
        "Each turn you are told the active rules and where every object and text block is, relative to "
        'you; text blocks are written rule `word`, e.g. "rule `win` 3 step to the left and 2 step up", '
        'and objects by their name, e.g. "door 2 steps to the right". Distances to the left or up are '
        'always written "step". Baba is not listed, and something you stand on (or that a block covers) '
        "is hidden until it is uncovered. The map is enclosed by an edge that is not listed.\n\n"
        f"Actions:\n{actions}\n\n"
        "Tips:\n"
        "- Read the active rules first: which object is YOU and which is WIN.\n"
        "- If an object is WIN, walk onto it.\n"
        "- If nothing is WIN, make a rule: push the blocks so that a noun, IS and WIN stand in one line "
        '(e.g. "door is win"), then walk onto that object.\n'
        "- To push a block, stand next to it on the opposite side and step towards it.\n"
        '- A rule like "wall is stop" keeps you out of places; push one of its blocks out of line to walk '
        "through walls.\n"
        '- You can become another object: "key is you" gives you control of every key.\n'
        '- Do not break "baba is you" unless another rule makes something YOU, or you lose.\n\n'
        "Think briefly if you want, then end your reply with one line of the form\n"
        "ACTION: <action>\n"
        "where <action> is exactly one of: " + ", ".join(ACTIONS) + "."
    )


def build_brief_instruction() -> str:
    """A short system prompt for tiny models: goal, actions and the reply format only."""
    return (
        "Baba Is You: move what IS YOU onto what IS WIN; push text blocks to make or break rules. "
        f"Actions: {', '.join(ACTIONS)}. Reply with ACTION: <action>."
    )


INSTRUCTION_STYLES = {"full": build_instruction, "brief": build_brief_instruction}


class BabaIsAITextEnv(TextEnv):
    """One Baba Is AI level as a text env (see the module docstring for the text conventions).

    Args:
        level: a level name of :data:`~verlog.envs.babaisai.levels.BABAISAI_LEVELS`.
        max_steps: step limit per episode (also the ``T`` of the win reward ``1 - 0.9 t / T``).
        format_penalty: added to the reward of a step whose reply held no valid action (<= 0).
        instruction_style: ``"full"`` (BALROG's content) or ``"brief"`` (goal, actions, reply format).

    Attributes:
        game: the current :class:`~verlog.envs.babaisai.rules.BabaGame` (tests may replace it with a
            hand-made board after ``reset``).
        level: the level name.
        target_plan: upstream's plan string of the current episode (``""`` before the first reset).

    Raises:
        ValueError: unknown level or instruction style, bad ``max_steps``/``format_penalty``.
    """

    def __init__(
        self,
        level: str,
        *,
        max_steps: int = BABAISAI_MAX_STEPS,
        format_penalty: float = 0.0,
        instruction_style: str = "full",
    ) -> None:
        if max_steps is None:
            raise ValueError("max_steps must be a positive int (the win reward is 1 - 0.9 * t / max_steps)")
        super().__init__(max_steps=max_steps, format_penalty=format_penalty)
        if level not in BABAISAI_LEVELS:
            raise ValueError(f"unknown Baba Is AI level {level!r}; levels are {list(BABAISAI_LEVELS)}")
        build_prompt = instruction_builder(INSTRUCTION_STYLES, instruction_style)
        self.level = level
        self._instruction = build_prompt()  # the same for every level and episode
        self.game: BabaGame | None = None
        self.target_plan = ""
        self._outcome = ""
        # The last player seen, (x, y, code): offsets are taken from its cell once nothing is YOU.
        self._anchor: tuple[int, int, int] | None = None
        self._level_rng: np.random.RandomState | None = None
        # This episode's texts by board (see describe), and the game they were read from.
        self._texts: dict[tuple, str] = {}
        self._texts_game: BabaGame | None = None
        self._last_board: tuple | None = None
        self._last_text = ""

    #: ``("idle", "up", "right", "down", "left")`` (BALROG's order).
    fixed_actions = ACTIONS
    #: ``"idle"`` (BALROG's default for Baba Is AI).
    default_action = DEFAULT_ACTION

    # -------------------------------------------------------------- TextEnv properties
    @property
    def progression(self) -> float:
        """1.0 once the episode is won, else 0.0."""
        return 1.0 if self._outcome == "win" else 0.0

    @property
    def state_key(self) -> bytes:
        """The exact game state (the board as bytes; rules follow from it). RuntimeError before reset."""
        return require_episode(self.game).state_key

    def describe(self) -> str:
        """The text observation of the current state (no notice line).

        While something is YOU the text is a function of the board alone (its cells and the
        sentences read from them), so the episode's texts are kept by board: a random walk comes
        back to a board it has seen on most steps (idle moves, moves into walls, back and forth).
        A third of its steps leave the board as it was, which a comparison with the last board
        tells for less than a lookup (the hash of every cell).
        """
        return self._text(require_episode(self.game))

    def _text(self, game: BabaGame) -> str:
        """:meth:`describe` of ``game``, the current game."""
        player = game.player()
        if player is None:
            anchor = self._anchor
            return describe_game(game, None if anchor is None else anchor[:2])
        self._anchor = player
        if game is not self._texts_game:
            self._texts, self._texts_game, self._last_board = {}, game, None
        board = (tuple(game.cells), game.sentences)
        if board != self._last_board:
            text = self._texts.get(board)
            if text is None:
                if len(self._texts) >= TEXT_CACHE_SIZE:
                    self._texts.clear()
                text = self._texts[board] = describe_game(game)
            self._last_board, self._last_text = board, text
        return self._last_text

    def _extra_info(self) -> dict[str, Any]:
        return {"target_plan": self.target_plan, "outcome": self._outcome}

    # -------------------------------------------------------------- game
    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        # BALROG seeds numpy's legacy global RNG with the episode seed; we seed our own RandomState
        # the same way. Unseeded resets continue it (first seeded from gymnasium's self.np_random).
        if seed is not None:
            self._level_rng = np.random.RandomState(seed)
        elif self._level_rng is None:
            self._level_rng = np.random.RandomState(int(self.np_random.integers(2**32)))
        self.game, self.target_plan = generate_level(self.level, self._level_rng)
        self._outcome = ""
        self._anchor = None
        return self.describe(), self._extra_info()

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        game = self.game
        player = game.player()
        if player is not None:  # where offsets are taken from if this step destroys the last YOU
            self._anchor = player
        result = game.step(_ACTION_INDEX[action])
        reward = 0.0
        if result == WIN:
            self._outcome = "win"
            reward = 1 - 0.9 * ((self.episode_step + 1) / self.max_steps)  # BALROG's float rounding
        elif result == LOSE:
            self._outcome = "lose"
            reward = -1.0
        return self._text(game), reward, result != 0, False, self._extra_info()


def make_babaisai(
    level: str,
    *,
    max_steps: int | None = None,
    format_penalty: float = 0.0,
    instruction_style: str = "full",
) -> BabaIsAITextEnv:
    """Build the Baba Is AI level ``level`` (a name of :data:`BABAISAI_LEVELS`).

    Args:
        level: e.g. ``"goto_win"`` or ``"two_room-break_stop-make_win-distr_obj"``.
        max_steps: step limit; ``None`` uses BALROG's 100.
        format_penalty: see :class:`~verlog.envs.base.TextEnv`.
        instruction_style: ``"full"`` or ``"brief"``.

    Raises:
        ValueError: unknown level, or bad arguments.
    """
    return BabaIsAITextEnv(
        level,
        max_steps=BABAISAI_MAX_STEPS if max_steps is None else max_steps,
        format_penalty=format_penalty,
        instruction_style=instruction_style,
    )
