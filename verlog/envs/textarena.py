"""TextArena's single-player games as text episodes: ``textarena/<game>``, e.g. ``textarena/TowerOfHanoi-v0``.

TextArena (the ``textarena`` package, version 0.7.4; install extra ``textarena``) registers games under
ids such as ``TowerOfHanoi-v0``; each is an object with ``reset(num_players, seed)``, ``step(action)
-> (done, info)``, ``get_observation() -> (player, messages)`` and ``close() -> (rewards, game_info)``.
The tasks here are the single-player games of that version that run offline on Python 3.11
(:data:`TEXTARENA_TASKS`, one per id, ``textarena/<id>``); docs/environments.md lists those left out and
why (word games that download nltk corpora, games judged by a hosted LLM, one whose source does not compile,
four whose invalid-move ending reports a string as the reward, two variants that take up to minutes to
generate a puzzle).

* **Prompt and observations**: the system prompt is a line on the reply format followed by TextArena's
  opening prompt of the game; the first observation is what the game shows before the first move (the
  board, the first card ...), and later ones are the game's messages after each move, its echo of the
  move left out. When the game ends, the observation ends with the reason TextArena gives. Characters
  outside the text space's charset are escaped (:func:`~verlog.envs.adapters.to_text_charset`).
* **Reply**: a move is written in square brackets, as each game's prompt says (``[A C]``, ``[3 2]``,
  ``[up]``). The move read from a reply is the first bracketed group on the first line after its last
  ``ACTION:`` marker (the line itself, bracketed, when it holds none), or, with no marker, the last
  bracketed group of the reply that fits the game's move syntax (:func:`textarena_move`). A move that
  fits the syntax goes to TextArena, whose rules judge it. A reply with none is invalid: the
  default action ``[]`` is sent in its place, which every game refuses as a malformed move, and the
  format penalty applies.
* **Invalid moves**: TextArena's own rule: the first invalid move in a row is answered with a
  warning and the player moves again (the turn is not counted); the second in a row ends the game,
  with the reward the game gives for that.
* **Reward**: TextArena pays once, when the game ends (it is read from ``close()``); every step
  before the last has reward 0. A win pays 1; many games pay their own completion share on a loss,
  at the turn limit or after the second invalid move in a row; Set pays one per Set found. ``success``
  is a final reward of 1 or more; ``progression`` is 1 on success, else 0.
* **End**: TextArena has no truncation flag: a game that hits its turn limit ends like any other,
  with a reason string. Here it is ``terminated`` where the player is told the limit (Guess The
  Number, Mastermind, Lights Out, Bandit, Secretary, Set, whose prompts state the turns), and
  ``truncated`` where the limit is one the prompt never mentions (Tower of Hanoi, Sudoku, Minesweeper,
  Sokoban, Crosswords, Logic Puzzle, Fifteen Puzzle, Frozen Lake): by the rule of
  :mod:`verlog.envs.base`, such a limit is a cut from outside the game as the player knows it, and
  the critic values what was left. The end reward TextArena pays there is still given. A cut by
  ``env.max_steps`` is ``truncated`` too. :data:`UNTOLD_LIMIT_REASONS` says how each game's limit is
  recognised.

TextArena seeds Python's global ``random`` on every ``reset`` and draws from it while it plays, and
importing it draws too. Here each env gives TextArena a private copy of the global states
(:class:`~verlog.envs.adapters.PrivateGlobalRandom`), so an episode is a function of its reset seed and
the replies, and the rest of the process sees no draw. What TextArena prints (Rush Hour reports its
puzzle generation on standard output) is swallowed.

``valid_actions`` are hints for random play: at most ``hints`` moves of the current state drawn from a
generator seeded by the episode and the turn (:data:`GAME_RULES`; where the legal moves can be told from
what the player sees they are legal ones, elsewhere any move of the right shape). The games report no
exact state, so ``state_key`` is not available (GiGPO cannot group by it).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import itertools
import math
import random
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from verlog.catalog import ENV_TASKS, OPTIONAL_FAMILIES
from verlog.envs.adapters import PrivateGlobalRandom, WinOrLoseGameEnv, isolated_global_random, to_text_charset
from verlog.envs.options import instruction_builder
from verlog.envs.parsing import after_last_marker
from verlog.envs.registry import register

__all__ = ["GameRules", "GAME_RULES", "INSTRUCTION_STYLES", "TEXTARENA_TASKS", "TextArenaEnv", "UNTOLD_LIMIT_REASONS",
           "build_brief_instruction", "build_instruction", "load_textarena", "textarena_move"]

#: the single-player TextArena 0.7.4 games that are tasks here (``textarena/<id>``)
TEXTARENA_TASKS: tuple[str, ...] = ENV_TASKS["textarena"]

#: the install line a missing package is answered with
INSTALL_HINT = OPTIONAL_FAMILIES["textarena"][1]

_BRACKETED = re.compile(r"\[[^\[\]]*\]")
_END_TAG = "<|END|>"
_NOTE = ("Write each move in square brackets as the game asks, e.g. [A C]; a reply may end with "
         "'ACTION: <move>', which is read as the move.")
_BRIEF_NOTE = "Reply: ACTION: [<move>]."
_FIRST_OBSERVATION = "The game starts. Make your first move."
_NEXT_MOVE = "Make your next move."
_DIRECTIONS = ("[up]", "[down]", "[left]", "[right]")


def build_instruction(rules: str) -> str:
    """The system prompt (``instruction_style="full"``): the reply format, then TextArena's prompt."""
    return _NOTE + "\n\n" + rules


def build_brief_instruction(rules: str) -> str:
    """The short system prompt (``instruction_style="brief"``, for tiny models): a one-line reply format,
    then TextArena's prompt (the rules cannot be left out)."""
    return _BRIEF_NOTE + "\n\n" + rules


#: ``instruction_style`` -> the builder of the system prompt from TextArena's prompt
INSTRUCTION_STYLES = {"full": build_instruction, "brief": build_brief_instruction}


def load_textarena() -> Any:
    """The ``textarena`` package, imported with the caller's global random states kept (importing it
    draws from Python's global ``random``).

    Raises:
        ImportError: it, or a package it imports (nltk, chess), is not installed (the message gives the
            install line).
    """
    with isolated_global_random():
        try:
            return importlib.import_module("textarena")
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] not in ("textarena", "nltk", "chess"):
                raise
            raise ImportError(f"textarena/* needs the textarena package ({exc.name} is missing): "
                              f"{INSTALL_HINT}") from None


def textarena_move(reply: str, syntax: re.Pattern[str]) -> str | None:
    """The move of ``reply`` for a game whose moves fit ``syntax`` (matched whole), or ``None``.

    With an ``ACTION:`` marker (any marker :func:`~verlog.envs.parsing.after_last_marker` accepts), only
    the first non-empty line after the last one counts: its first bracketed group that fits, else the
    whole line put in brackets. Without a marker, the last bracketed group of the reply that fits.

    Examples (Tower of Hanoi's syntax): ``"ACTION: [A C]"`` -> ``"[A C]"``; ``"ACTION: a b"`` ->
    ``"[a b]"``; ``"[A B] or rather [A C]"`` -> ``"[A C]"``; ``"A C"`` -> ``None``.
    """
    after = after_last_marker(reply)
    if after is None:
        fitting = [g for g in _BRACKETED.findall(reply) if syntax.fullmatch(g)]
        return fitting[-1] if fitting else None
    line = next((s for s in (part.strip() for part in after.split(_END_TAG, 1)[0].splitlines()) if s), "")
    for group in _BRACKETED.findall(line):
        if syntax.fullmatch(group):
            return group
    bare = "[" + line.strip(" \t.`'\"*") + "]"
    return bare if syntax.fullmatch(bare) else None


# ------------------------------------------------------------------ each game's moves
_Hints = Callable[[Any, random.Random, int], list[str]]


def _some(moves: list[str], rng: random.Random, n: int) -> list[str]:
    """``moves`` when there are at most ``n``, else ``n`` of them drawn without replacement."""
    return moves if len(moves) <= n else rng.sample(moves, n)


def _fixed(*moves: str) -> _Hints:
    return lambda game, rng, n: _some(list(moves), rng, n)


def _bandit(game: Any, rng: random.Random, n: int) -> list[str]:
    return _some([f"[{b}]" for b in game.buttons], rng, n)


def _guess_the_number(game: Any, rng: random.Random, n: int) -> list[str]:
    left = [g for g in range(game.min_number, game.max_number + 1) if g not in game.guessed_numbers]
    return _some([f"[{g}]" for g in left], rng, n)


def _lights_out(game: Any, rng: random.Random, n: int) -> list[str]:
    return _some([f"[{r} {c}]" for r in range(game.size) for c in range(game.size)], rng, n)


def _mastermind(game: Any, rng: random.Random, n: int) -> list[str]:
    state = game.state.game_state
    digits = range(1, state["num_numbers"] + 1)
    draw = rng.choices if state["duplicate_numbers"] else rng.sample
    return [f"[{' '.join(map(str, draw(digits, k=state['code_length'])))}]" for _ in range(n)]


def _minesweeper(game: Any, rng: random.Random, n: int) -> list[str]:
    hidden = [f"[{r} {c}]" for r in range(game.rows) for c in range(game.cols) if not game.revealed[r][c]]
    return _some(hidden, rng, n)


def _peg_jump(game: Any, rng: random.Random, n: int) -> list[str]:
    board = game.state.game_state["board"]
    return _some([f"[{f} {t}]" for f, o, t in game.ALLOWED_MOVES if board[f] and board[o] and not board[t]], rng, n)


def _rush_hour(game: Any, rng: random.Random, n: int) -> list[str]:
    return _some([f"[{vid}{d}]" for vid in sorted(game.state.game_state["vehicles"]) for d in "+-"], rng, n)


def _set(game: Any, rng: random.Random, n: int) -> list[str]:
    cards = len(game.state.game_state["board"])
    return [f"[{a}, {b}, {c}]" for a, b, c in (sorted(rng.sample(range(1, cards + 1), 3)) for _ in range(n))]


def _sudoku(game: Any, rng: random.Random, n: int) -> list[str]:
    """Empty cells with a digit that repeats none of its row, column and box (the puzzle's solution is
    not consulted, so some are wrong)."""
    board = game.state.game_state["board"]
    moves = []
    for r, c in itertools.product(range(9), range(9)):
        if board[r][c] == 0:
            box = {board[i][j] for i in range(r - r % 3, r - r % 3 + 3) for j in range(c - c % 3, c - c % 3 + 3)}
            seen = set(board[r]) | {board[i][c] for i in range(9)} | box
            moves += [f"[{r + 1} {c + 1} {d}]" for d in range(1, 10) if d not in seen]
    return _some(moves, rng, n)


def _tower_of_hanoi(game: Any, rng: random.Random, n: int) -> list[str]:
    towers = game.state.game_state["towers"]
    moves = [f"[{s} {t}]" for s, t in itertools.permutations("ABC", 2)
             if towers[s] and (not towers[t] or towers[t][-1] > towers[s][-1])]
    return _some(moves, rng, n)


def _crosswords(game: Any, rng: random.Random, n: int) -> list[str]:
    """Empty cells with a random letter (a right letter cannot be told from the board)."""
    board = game.state.game_state["board"]
    empty = [(r, c) for r, row in enumerate(board) for c, cell in enumerate(row) if cell == "_"]
    return [f"[{r} {c} {rng.choice('abcdefghijklmnopqrstuvwxyz')}]" for r, c in rng.choices(empty, k=n)] if empty else []


def _logic_puzzle(game: Any, rng: random.Random, n: int) -> list[str]:
    cells = sorted({(row, col) for grid in game.game_board.values() for row in grid for col in grid[row]})
    return [f"[{row} {col} {rng.choice('XO')}]" for row, col in rng.choices(cells, k=n)]


@dataclass(frozen=True)
class GameRules:
    """What the adapter knows of one TextArena game class.

    Attributes:
        syntax: a move that fits this pattern whole is sent to TextArena (it is the shape the game reads).
        hints: ``(game, rng, n) -> moves``: at most ``n`` moves of the current state for random play.
        limit_reason: for a game whose turn limit the prompt does not state, a phrase of the reason
            TextArena gives when the limit ends the game (such an end is reported as truncated);
            ``None`` for a game whose limit is stated, or that has none.
    """

    syntax: re.Pattern[str]
    hints: _Hints
    limit_reason: str | None = None


_I = re.IGNORECASE
_WALK = re.compile(r"\[\s*(up|down|left|right|w|a|s|d)\s*\]", _I)
#: TextArena game class -> its rules here (the offered games, :data:`TEXTARENA_TASKS`, are of these classes)
GAME_RULES: dict[str, GameRules] = {
    "Game2048Env": GameRules(re.compile(r"\[\s*(up|down|left|right|w|a|s|d)\s*\]", _I),
                             _fixed("[Up]", "[Down]", "[Left]", "[Right]")),
    "BanditEnv": GameRules(re.compile(r"\[[a-z]+\]"), _bandit),
    "BlackjackEnv": GameRules(re.compile(r"\[(hit|stand)\]", _I), _fixed("[Hit]", "[Stand]")),
    "CrosswordsEnv": GameRules(re.compile(r"\[\d+ \d+ [a-z]\]", _I), _crosswords, "turn limit"),
    "FifteenPuzzleEnv": GameRules(re.compile(r"\[(up|down|left|right)\]"), _fixed(*_DIRECTIONS), "turn limit"),
    "FrozenLakeEnv": GameRules(_WALK, _fixed(*_DIRECTIONS), "turn limit"),
    "GuessTheNumberEnv": GameRules(re.compile(r"\[\d+\]"), _guess_the_number),
    "LightsOutEnv": GameRules(re.compile(r"\[\d+\s+\d+\]"), _lights_out),
    "LogicPuzzleEnv": GameRules(re.compile(r"\[[a-z]+\s+[a-z]+\s+[xo]\]", _I), _logic_puzzle, "turn limit"),
    "MastermindEnv": GameRules(re.compile(r"\[\d+(\s+\d+)*\]"), _mastermind),
    "MinesweeperEnv": GameRules(re.compile(r"\[\d+ \d+\]"), _minesweeper, "turn limit"),
    "PegJumpEnv": GameRules(re.compile(r"\[\d{1,2}\s*\d{1,2}\]"), _peg_jump),
    "RushHourEnv": GameRules(re.compile(r"\[[a-z][+-]\]", _I), _rush_hour),
    "SecretaryEnv": GameRules(re.compile(r"\[(accept|continue)\]"), _fixed("[accept]", "[continue]")),
    "SetEnv": GameRules(re.compile(r"\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]"), _set),
    "SokobanEnv": GameRules(re.compile(r"\[(up|down|left|right|w|a|s|d)\]", _I), _fixed(*_DIRECTIONS), "turn limit"),
    "SudokuEnv": GameRules(re.compile(r"\[\d+ \d+ \d+\]"), _sudoku, "turn limit"),
    "TowerOfHanoiEnv": GameRules(re.compile(r"\[[abc]\s*,?\s*[abc]\]", _I), _tower_of_hanoi, "turn limit"),
}

#: TextArena game class -> the phrase of the reason that marks its unstated turn limit (see :class:`GameRules`)
UNTOLD_LIMIT_REASONS: dict[str, str] = {name: rules.limit_reason for name, rules in GAME_RULES.items()
                                        if rules.limit_reason is not None}


class TextArenaEnv(WinOrLoseGameEnv):
    """One single-player TextArena game as a :class:`~verlog.envs.base.TextEnv` (see the module docstring).

    Args:
        game: the TextArena id, e.g. ``"TowerOfHanoi-v0"`` (one of :data:`TEXTARENA_TASKS`).
        max_steps: a step limit from outside the game (``None``: the game's own end alone); it truncates
            the episode. Steps count every reply, the invalid ones too, which TextArena's turns do not.
        format_penalty: added to the reward of a reply with no move (see :class:`~verlog.envs.base.TextEnv`).
        hints: at most how many moves ``valid_actions`` holds.
        instruction_style: the system prompt, ``"full"`` or ``"brief"`` (:data:`INSTRUCTION_STYLES`).

    Raises:
        ImportError: textarena is not installed.
        TypeError / ValueError: a bad argument (the message names it), or a game that is not one of
            :data:`TEXTARENA_TASKS`.
    """

    actions_are_closed = False
    #: sent for a reply with no move: every game refuses it as a malformed move
    default_action = "[]"

    def __init__(self, game: str, *, max_steps: int | None = None, format_penalty: float = 0.0,
                 hints: int = 8, instruction_style: str = "full") -> None:
        super().__init__(max_steps=max_steps, format_penalty=format_penalty, hints=hints)
        self._build_instruction = instruction_builder(INSTRUCTION_STYLES, instruction_style)
        if game not in TEXTARENA_TASKS:
            raise ValueError(f"game: {game!r} is not one of the TextArena games offered here ({len(TEXTARENA_TASKS)}, "
                             "e.g. 'TowerOfHanoi-v0')")
        self.game = game
        ta = load_textarena()
        self._random = PrivateGlobalRandom(0)
        with self._quiet():
            self._game = ta.make(f"{game}-raw")
        self.rules = GAME_RULES[type(self._game).__name__]
        self._seed = 0
        self._turn = 0  # moves sent in this episode (the hints' generator is seeded with it)
        self._won = False
        self._end: tuple[float, str] | None = None  # (reward, reason) once the game is over
        self._moves: list[str] = []

    @contextlib.contextmanager
    def _quiet(self) -> Iterator[None]:
        """A call into TextArena: with the private global random states, its printing swallowed."""
        with self._random.active(), contextlib.redirect_stdout(io.StringIO()):
            yield

    def _messages(self) -> list[tuple[str, str]]:
        """(kind, text) of the messages TextArena has for the player since the last call, the echo of
        the player's own move left out."""
        with self._quiet():
            _, messages = self._game.get_observation()
        return [(kind.name, str(text)) for _, text, kind in messages if kind.name != "PLAYER_ACTION"]

    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        self._seed = (seed if seed is not None else int(self.np_random.integers(2**32))) % 2**32
        with self._quiet():
            self._game.reset(num_players=1, seed=self._seed)
        messages = self._messages()
        rules = "\n".join(text.strip() for kind, text in messages if kind == "PROMPT")
        first = "\n".join(text.strip() for kind, text in messages if kind != "PROMPT")
        self._won, self._turn, self._end = False, 0, None
        self._instruction = self._build_instruction(to_text_charset(rules))
        self._moves = self._draw_moves()
        return to_text_charset(first or _FIRST_OBSERVATION), {}

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        with self._quiet():
            done, _ = self._game.step(action)
        self._turn += 1
        text = "\n".join(text.strip() for _, text in self._messages())
        if not done:
            self._moves = self._draw_moves()
            return to_text_charset(text or _NEXT_MOVE), 0.0, False, False, {}
        reward, reason = self._close()
        self._end = (reward, reason)
        self._won = reward >= 1.0
        cut = self.rules.limit_reason is not None and self.rules.limit_reason in reason.lower()
        obs = (text + "\n" if text else "") + f"The game is over: {reason}"
        return to_text_charset(obs), reward, not cut, cut, {}

    def _close(self) -> tuple[float, str]:
        """TextArena's end of the game: the player's reward and the reason.

        Raises:
            RuntimeError: the game reported no reward, or one that is not a finite number.
        """
        with self._quiet():
            rewards, game_info = self._game.close()
        reward = (rewards or {}).get(0)
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            raise RuntimeError(f"textarena/{self.game} ended with reward {reward!r}, not a finite number")
        return float(reward), str(game_info.get(0, {}).get("reason", ""))

    def _draw_moves(self) -> list[str]:
        """At most ``hints`` moves of the current state, from a generator seeded by the episode and the
        turn (the game's own random stream is not touched)."""
        rng = random.Random(f"{self._seed}/{self._turn}")
        return self.rules.hints(self._game, rng, self.hints) or [self.default_action]

    def parse_action(self, reply: str) -> str | None:
        """The move sent to TextArena (:func:`textarena_move` with the game's syntax), or ``None``."""
        return textarena_move(reply, self.rules.syntax)

    @property
    def textarena_env(self) -> Any:
        """The wrapped TextArena game (to inspect; stepping it directly bypasses the private random state)."""
        return self._game

    @property
    def end(self) -> tuple[float, str] | None:
        """``(reward, reason)`` TextArena gave at the end of the episode, ``None`` while it goes on."""
        return self._end


def _register_all() -> None:
    for name in TEXTARENA_TASKS:
        register(f"textarena/{name}", functools.partial(TextArenaEnv, name), replace=True)


_register_all()
