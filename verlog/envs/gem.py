"""GEM's text games as text episodes: ``gem/<game>``, e.g. ``gem/GuessTheNumber-v0-easy``.

GEM (the ``gem-llm`` package, version 0.1.0, imported as ``gem``) registers text games under ids
``game:<game>``; each is an env whose ``reset(seed)`` returns the game's rules as text and whose
``step(reply)`` reads the move from the reply's last ``\\boxed{...}``. The tasks here are the games of
that version that need nothing beyond GEM itself and can draw a random move (:data:`GEM_TASKS`: Guess
The Number, Mastermind, Minesweeper, Fifteen Puzzle, 2048 and Sokoban, in GEM's variants); Wordle,
Hangman, Word Search and Crosswords need word lists downloaded at run time, Sudoku and Tower of
Hanoi cannot draw a random move, and GEM's ``FifteenPuzzle-v0-random`` fails while being built (its
constructor squares the board size it leaves unset), so they are left out.

* **Prompt and observations**: the system prompt is a line on the reply format followed by GEM's
  opening text of the episode (the rules, the limit on turns, and for some games the first board); the
  first observation asks for the first move, and later ones are GEM's answers to the moves, followed by
  GEM's request for the next one. Characters outside the text space's charset are escaped
  (:func:`~verlog.envs.adapters.to_text_charset`).
* **Reply**: a reply holding ``\\boxed{...}`` goes to GEM as written; otherwise the first line after its
  last ``ACTION:`` marker is sent as ``\\boxed{<that line>}``. A reply with neither is invalid: the
  default action ``\\boxed{}`` is sent in its place, which GEM answers by its own rule for a reply
  without a move (it ends the game), and the format penalty applies.
* **Reward and end**: GEM's own rewards. GEM ends an episode on its turn limit with both ``terminated``
  and ``truncated`` set; by the rule of :mod:`verlog.envs.base` that is a termination, and here it is
  one on the merits too: every game states its limit in the rules it opens with and numbers the turns
  in its answers, and some pay a closing reward at the limit (Guess The Number scores how close the last
  guess was), so the last turn is an end state of the game and nothing is left to bootstrap. A cut
  from outside the game (``env.max_steps`` below GEM's limit) is ``truncated``. ``success`` is GEM's
  winning message (every game of this version starts it with "Congratulations!"); ``progression`` is 1
  on success, else 0, GEM having no measure of partial progress.

GEM draws from Python's global ``random`` and numpy's global generator (and seeds both on
``reset(seed)``). Here each env gives GEM private copies of those states
(:class:`~verlog.envs.adapters.PrivateGlobalRandom`), so an episode is a function of its reset seed and
the replies, and the rest of the process sees no draw; importing GEM, which configures the root logger
and draws from ``random``, is contained the same way.

``valid_actions`` are hints for random play: ``hints`` moves drawn with GEM's own random-move sampler
from a generator seeded by the episode and the step (the game's own random stream is not touched).
The games report no exact state, so ``state_key`` is not available (GiGPO cannot group by it).
"""

from __future__ import annotations

import functools
import importlib
import logging
import re
from typing import Any

from verlog.catalog import ENV_TASKS, OPTIONAL_FAMILIES
from verlog.envs.adapters import PrivateGlobalRandom, WinOrLoseGameEnv, isolated_global_random, to_text_charset
from verlog.envs.options import instruction_builder
from verlog.envs.parsing import after_last_marker
from verlog.envs.registry import register

__all__ = ["GEM_TASKS", "GemGameEnv", "INSTRUCTION_STYLES", "build_brief_instruction", "build_instruction", "gem_move",
           "load_gem"]

#: the GEM games of gem-llm 0.1.0 that are tasks here (``gem/<game>`` for GEM's ``game:<game>``)
GEM_TASKS: tuple[str, ...] = ENV_TASKS["gem"]

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_WON = "Congratulations!"
_NOTE = ("Give each move as the game asks, inside \\boxed{...}; a reply without it may end with "
         "'ACTION: <move>', which is read as \\boxed{<move>}.")
_BRIEF_NOTE = "Reply: ACTION: <move>."


def build_instruction(rules: str) -> str:
    """The system prompt (``instruction_style="full"``): the reply format, then GEM's opening text."""
    return _NOTE + "\n\n" + rules


def build_brief_instruction(rules: str) -> str:
    """The short system prompt (``instruction_style="brief"``, for tiny models): a one-line reply format,
    then GEM's opening text (the rules cannot be left out)."""
    return _BRIEF_NOTE + "\n\n" + rules


#: ``instruction_style`` -> the builder of the system prompt from GEM's opening text
INSTRUCTION_STYLES = {"full": build_instruction, "brief": build_brief_instruction}


def load_gem() -> Any:
    """The ``gem`` package, imported with the caller's global random states and root logger kept.

    Raises:
        ImportError: gem-llm, or reasoning-gym which it imports, is not installed (the message gives the
            install line).
    """
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    with isolated_global_random():
        try:
            return importlib.import_module("gem")
        except ModuleNotFoundError as exc:
            if exc.name not in OPTIONAL_FAMILIES["gem"][0]:
                raise
            raise ImportError(f"gem/* needs the gem-llm and reasoning-gym packages ({exc.name} is missing): "
                              f"{OPTIONAL_FAMILIES['gem'][1]}") from None
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)


def gem_move(reply: str) -> str | None:
    """What is sent to GEM for ``reply``: the reply itself when it holds ``\\boxed{``, else
    ``\\boxed{<first non-empty line after the last ACTION: marker>}``, else ``None`` (no move).

    Examples: ``"I guess \\\\boxed{5}"`` -> itself; ``"ACTION: up"`` -> ``"\\\\boxed{up}"``; ``"up"`` -> ``None``.
    """
    if "\\boxed{" in reply:
        return reply
    after = after_last_marker(reply)
    if after is None:
        return None
    for line in after.splitlines():
        move = line.split("<|END|>", 1)[0].strip()
        if move:
            return f"\\boxed{{{move}}}"
    return None


class GemGameEnv(WinOrLoseGameEnv):
    """One GEM text game as a :class:`~verlog.envs.base.TextEnv` (see the module docstring).

    Args:
        game: the GEM game id without its ``game:`` prefix, e.g. ``"GuessTheNumber-v0-easy"``.
        max_steps: a step limit from outside the game (``None``: GEM's own turn limit alone); below
            GEM's limit it truncates the episode.
        format_penalty: added to the reward of a reply with no move (see :class:`~verlog.envs.base.TextEnv`).
        hints: how many random moves ``valid_actions`` holds.
        instruction_style: the system prompt, ``"full"`` or ``"brief"`` (:data:`INSTRUCTION_STYLES`).

    Raises:
        ImportError: gem-llm is not installed.
        TypeError / ValueError: a bad argument (the message names it) or a game GEM does not know.
    """

    actions_are_closed = False
    #: sent for a reply with no move: GEM ends the game by its rule for a missing move
    default_action = "\\boxed{}"

    def __init__(self, game: str, *, max_steps: int | None = None, format_penalty: float = 0.0,
                 hints: int = 8, instruction_style: str = "full") -> None:
        super().__init__(max_steps=max_steps, format_penalty=format_penalty, hints=hints)
        self._build_instruction = instruction_builder(INSTRUCTION_STYLES, instruction_style)
        self.game = game
        gem = load_gem()
        self._random = PrivateGlobalRandom(0)
        with self._random.active():
            try:
                self._game = gem.make(f"game:{game}")  # GEM's games reset once while being built
            except ValueError as exc:
                raise ValueError(f"GEM has no game {game!r}: {exc}") from None
        self._seed = 0
        self._turn = 0  # moves made in this episode (the hints' generator is seeded with it)
        self._won = False
        self._moves: list[str] = []

    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        self._seed = (seed if seed is not None else int(self.np_random.integers(2**32))) % 2**32
        with self._random.active():
            rules, info = self._game.reset(seed=self._seed)
        self._won, self._turn = False, 0
        self._instruction = self._build_instruction(to_text_charset(str(rules)))
        self._moves = self._draw_moves()
        return self._with_request("The game starts. Make your first move.", info, done=False), {}

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        with self._random.active():
            obs, reward, terminated, truncated, info = self._game.step(action)
        self._won = bool(terminated) and str(obs).startswith(_WON)
        self._turn += 1
        done = bool(terminated or truncated)
        if not done:
            self._moves = self._draw_moves()
        return self._with_request(str(obs), info, done=done), float(reward), bool(terminated), bool(truncated), {}

    @staticmethod
    def _with_request(obs: str, info: Any, *, done: bool) -> str:
        """GEM's text, followed (while the game goes on) by its request for the next move."""
        suffix = info.get("suffix") if isinstance(info, dict) else None
        text = f"{obs}\n{suffix}" if suffix and not done else obs
        return to_text_charset(text)

    def _draw_moves(self) -> list[str]:
        """``hints`` moves from GEM's random-move sampler, on a generator seeded by the episode and the
        step (the game's own stream is left as it is), each without its ``\\boxed{}``."""
        sampler = PrivateGlobalRandom(self._seed * 1_000_003 + self._turn)
        with sampler.active():
            drawn = [str(self._game.sample_random_action()) for _ in range(self.hints)]
        return [m.group(1) if (m := _BOXED.fullmatch(move)) else move for move in drawn]

    def parse_action(self, reply: str) -> str | None:
        """The move sent to GEM (:func:`gem_move`), or ``None`` when the reply holds none."""
        return gem_move(reply)

    @property
    def gem_env(self) -> Any:
        """The wrapped GEM env (to inspect; stepping it directly bypasses the private random states)."""
        return self._game


def _register_all() -> None:
    for name in GEM_TASKS:
        register(f"gem/{name}", functools.partial(GemGameEnv, name), replace=True)


_register_all()
