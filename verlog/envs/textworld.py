"""TextWorld (upstream ``textworld``) as a :class:`~verlog.envs.base.TextEnv`, in BALROG's conventions.

Tasks (see :data:`TEXTWORLD_TASKS`): ``textworld/treasure_hunter``, ``textworld/the_cooking_game``,
``textworld/coin_collector``. Each task is a pool of ``num_games`` (default 25, BALROG's count) games
generated offline and cached on disk by :mod:`verlog.envs.textworld_games` (settings, seeds, cache
layout and generation times are documented there). ``reset(seed=s)`` plays game ``s % num_games``;
``reset()`` without a seed draws the game from the env's own RNG. A game is deterministic, so the
episode is a function of the game and the commands.

Observations are the game's own text. ``text_style`` (config ``env.text_style``) picks the wording:

* ``"balrog"`` (the default) is byte for byte the text BALROG's TextWorld wrapper gives its agent
  (checked against BALROG's own output in ``tests/test_textworld_balrog.py``), quirks included: every
  observation is the game's reply cut after the last occurrence of the game's objective and stripped
  of surrounding whitespace (:func:`balrog_observation`). This drops the TextWorld banner and the
  objective from the first observation, and it also empties the reply to ``goal`` (only the status
  line is left), so the full instruction states the objective instead. The Z-machine status line
  ``>`` + ~128 spaces + ``-= Room =-score/moves`` stays as the game pads it. TextWorld is asked for
  BALROG's infos (:data:`BALROG_INFOS`, the room description included). What TextWorld is asked for
  changes the game's blank lines (it makes the game print the description, or each action in
  brackets for the admissible commands, and cuts that out again), so the admissible commands come
  from a second interpreter of the same game, fed the same commands (:data:`TRACKING_INFOS`).
* ``"tidy"`` is Verlog's earlier, shorter wording: the objective is cut from the first observation
  only, so ``goal`` shows it; runs of spaces inside a line are collapsed to one
  (:func:`clean_feedback`, :func:`first_observation`); one interpreter (:data:`REQUEST_INFOS`).

Actions are free text (``actions_are_closed = False``): :func:`parse_command` takes the command from the
reply, and any command is sent to the game (which answers e.g. "That's not a verb I recognise."). The
admissible commands of the current state (TextWorld's ``admissible_commands``) are given as
``valid_actions`` for information only. A reply with no command, or one of the interpreter's meta
commands that would end, restart or rewind the game behind the episode's back (:data:`META_COMMANDS`),
is invalid: the default action ``look`` runs instead (BALROG's default is ``help``, which it never
reaches because it accepts every string; ``look`` re-describes the room, which helps more).

Reward: TextWorld reports the CUMULATIVE score after each command; the reward of a step is the score
difference (so the rewards of an episode sum to its final score). Progression = ``max(score /
max_score, 1 if won)`` at the current step (BALROG computes it at the end). ``terminated`` = won or
lost; ``truncated`` = BALROG's 80-step limit (BALROG reports it as terminated). The short-term context is empty (as in BALROG).

The state key (GiGPO's anchor states, :attr:`TextWorldTextEnv.state_key`) is the game's logical state as
TextWorld tracks it (its facts, with the score), the same in both text styles.
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any, Mapping

import textworld  # the real package: absolute import, not this module
from jericho.jericho import UnsupportedGameWarning

from verlog.envs.base import TextEnv, require_episode
from verlog.envs.options import task_entry
from verlog.envs.parsing import after_last_marker
from verlog.envs.registry import register
from verlog.envs.textworld_games import GameSpec, default_cache_dir, ensure_game, resolve_spec
from verlog.envs.textworld_prompts import INSTRUCTION_STYLES, build_brief_instruction, build_instruction

__all__ = [
    "BALROG_INFOS",
    "DEFAULT_ACTION",
    "MAX_COMMAND_BYTES",
    "META_COMMANDS",
    "REQUEST_INFOS",
    "TEXTWORLD_TASKS",
    "TEXT_STYLES",
    "TRACKING_INFOS",
    "TextWorldTextEnv",
    "balrog_observation",
    "clean_feedback",
    "first_observation",
    "make_textworld",
    "parse_command",
]

#: The tasks (BALROG's names) and their step limit (BALROG's real limit: 80 for all three).
TEXTWORLD_TASKS: dict[str, int] = {"treasure_hunter": 80, "the_cooking_game": 80, "coin_collector": 80}
DEFAULT_ACTION = "look"
#: The Z-machine input buffer (Jericho truncates longer input); longer commands are invalid.
MAX_COMMAND_BYTES = 198
#: First words of interpreter meta commands that are rejected as invalid: ``quit``/``restart`` ask a
#: yes/no question and then end or restart the story behind TextWorld's state tracker; ``save``,
#: ``restore``, ``undo`` and transcripts are not part of the game.
META_COMMANDS: frozenset[str] = frozenset(
    {"quit", "q", "restart", "restore", "save", "undo", "script", "transcript", "unscript", "noscript"}
)
#: What the ``tidy`` style asks TextWorld for (Verlog's earlier request; the benchmark asks the bare env
#: for the same). Admissible commands make TextWorld track the game's state: the game then prints its
#: actions in brackets and TextWorld cuts them out, which leaves extra blank lines in the text.
REQUEST_INFOS = textworld.EnvInfos(
    admissible_commands=True,
    objective=True,
    score=True,
    max_score=True,
    won=True,
    lost=True,
    extras=["walkthrough"],
)
#: What the ``balrog`` style's text interpreter asks for: BALROG's infos (its ``textworld_kwargs``:
#: objective, description, score, max_score, won) plus lost and the walkthrough, which leave the text
#: alone. The description does not: the game then prints it in tags every turn and TextWorld cuts them
#: out, which changes the blank lines too. A second interpreter of the same game, fed the same commands,
#: tracks the state for the admissible commands (:data:`TRACKING_INFOS`).
BALROG_INFOS = textworld.EnvInfos(
    objective=True,
    description=True,
    score=True,
    max_score=True,
    won=True,
    lost=True,
    extras=["walkthrough"],
)
#: What the ``balrog`` style's second interpreter asks for.
TRACKING_INFOS = textworld.EnvInfos(admissible_commands=True)
#: The observation wordings (see the module docstring) and what their text interpreter asks for.
TEXT_STYLES: dict[str, Any] = {"balrog": BALROG_INFOS, "tidy": REQUEST_INFOS}
#: Loaded games kept per env (each holds one or two Jericho interpreters and the game's logic, 2-4 MB each).
_MAX_LOADED_GAMES = 4

_END_TAG = re.compile(r"<\|end\|>", re.IGNORECASE)
_EDGE_CHARS = " \t\"'`*_.,;:!?()[]{}<>\u2018\u2019\u201c\u201d\u00ab\u00bb"
_SENTENCE_END = re.compile(r"[.;!?]")
_SPACES = re.compile(r"[ \t]{2,}")


def parse_command(reply: str) -> str | None:
    """The game command a reply asks for, or ``None`` if it holds none.

    Rule: take the text after the LAST action marker (``ACTION:``, any case; also ``**Action**:``,
    ``action=``, ``Action - `` and BALROG's ``<|ACTION|>``, as in :mod:`verlog.envs.parsing`), or the
    whole reply if there is no marker; its first line that is not empty after cleaning is the command.
    Cleaning: drop a ``<|END|>`` tag and what follows, strip surrounding quotes, backticks, brackets,
    markdown and punctuation, cut at the first ``.``/``;``/``!``/``?`` (Inform would run chained
    commands in one turn), collapse whitespace, lower-case.

    Returns ``None`` for an empty command, one longer than :data:`MAX_COMMAND_BYTES` bytes (UTF-8), or
    one whose first word is in :data:`META_COMMANDS`.

    Examples: ``"I will go.\\nACTION: Go North."`` -> ``"go north"``; ``"take key"`` -> ``"take key"``;
    ``"ACTION: \\"open the chest\\""`` -> ``"open the chest"``; ``"ACTION:"`` -> ``None``.

    Raises:
        TypeError: ``reply`` is not a str.
    """
    if not isinstance(reply, str):
        raise TypeError(f"reply must be a str, got {type(reply).__name__}")
    text = after_last_marker(reply)
    if text is None:
        text = reply
    for line in text.splitlines():
        line = _END_TAG.split(line, 1)[0].strip(_EDGE_CHARS)
        line = _SENTENCE_END.split(line, 1)[0].strip(_EDGE_CHARS)
        command = " ".join(line.split()).lower()
        if command:
            break
    else:
        return None
    if len(command.encode("utf-8")) > MAX_COMMAND_BYTES or command.split(" ", 1)[0] in META_COMMANDS:
        return None
    return command


def clean_feedback(text: str) -> str:
    """The game's reply with surrounding whitespace stripped and runs of spaces/tabs collapsed."""
    return _SPACES.sub(" ", text).strip()


def first_observation(feedback: str, objective: str) -> str:
    """The ``tidy`` style's first observation: BALROG's cut (:func:`balrog_observation`), then
    :func:`clean_feedback`.

    The banner and the objective sentence are dropped; if the objective does not occur, the whole
    feedback is kept.
    """
    return clean_feedback(balrog_observation(feedback, objective))


def balrog_observation(feedback: str, objective: str) -> str:
    """BALROG's observation: the text after the last occurrence of ``objective``, whitespace stripped.

    Applied to every reply, the first one included (BALROG's ``filter_objective``): the reply to
    ``goal``, which repeats the objective, keeps only what follows it. Spaces inside the text are kept.
    An empty ``objective`` keeps the whole reply (BALROG's ``str.split`` would raise on it; TextWorld's
    games always have one).
    """
    if objective:
        feedback = feedback.split(objective)[-1]
    return feedback.strip()


def _fact_text(fact: Any) -> str:
    """A TextWorld proposition as ``name(variable:type,...)``, e.g. ``at(P:P,r_6:r)``."""
    return f"{fact.name}({','.join(f'{v.name}:{v.type}' for v in fact.arguments)})"


def _copy_tracking(tracked: Any, state: Any) -> None:
    """Put the tracking interpreter's admissible commands and facts into the text interpreter's state."""
    state["admissible_commands"] = tracked["admissible_commands"]
    state["_facts"] = tracked["_facts"]


class _LoadedGame:
    """One game file in one interpreter asking for ``text_infos``, and, when those infos do not include
    the admissible commands, in a second one asking for :data:`TRACKING_INFOS` that gets the same
    commands; its admissible commands and facts (``_facts``, the state TextWorld tracks whenever it is
    asked for admissible commands) are put into the first one's states."""

    def __init__(self, path: str, text_infos: Any) -> None:
        with warnings.catch_warnings():
            # Our game files are not named tw-*: Jericho calls them "not fully supported" (it then
            # keeps the status line, as in BALROG); TextWorld reads score and state itself.
            warnings.simplefilter("ignore", UnsupportedGameWarning)
            self.text = textworld.start(path, request_infos=text_infos)
            self.tracker = None
            if not text_infos.admissible_commands:
                self.tracker = textworld.start(path, request_infos=TRACKING_INFOS)

    def reset(self) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnsupportedGameWarning)
            state = self.text.reset()
            if self.tracker is not None:
                _copy_tracking(self.tracker.reset(), state)
        return state

    def step(self, command: str) -> tuple[Any, Any]:
        state, score, _ = self.text.step(command)
        if self.tracker is not None:
            _copy_tracking(self.tracker.step(command)[0], state)
        return state, score

    def close(self) -> None:
        self.text.close()
        if self.tracker is not None:
            self.tracker.close()


class TextWorldTextEnv(TextEnv):
    """A pool of generated TextWorld games of one task as a text env (see the module docstring).

    Args:
        task: ``treasure_hunter``, ``the_cooking_game`` or ``coin_collector``.
        max_steps: step limit per episode (BALROG: 80; ``None``: no limit).
        format_penalty: added to the reward of a step whose reply held no valid command (<= 0).
        instruction_style: ``"full"`` (BALROG's content; the objective is stated in the ``balrog``
            text style, where ``goal`` cannot show it) or ``"brief"`` (objective and reply format).
        num_games: size of the game pool (BALROG: 25); ``reset(seed=s)`` plays game ``s % num_games``.
        cache_dir: where games are cached (default :func:`~verlog.envs.textworld_games.default_cache_dir`).
        settings: overrides of the task's generation settings (see
            :func:`~verlog.envs.textworld_games.resolve_spec`).
        generation_timeout: seconds allowed to generate one game.
        text_style: the observation wording, ``"balrog"`` (BALROG's text, byte for byte; the default) or
            ``"tidy"`` (see the module docstring).

    Construction is cheap (no game is made or loaded); the first reset that needs a game generates it
    if it is not in the cache yet (seconds; see :mod:`verlog.envs.textworld_games`).

    Raises:
        ValueError / TypeError: bad arguments (the message names the argument).
    """

    actions_are_closed = False

    def __init__(
        self,
        task: str,
        *,
        max_steps: int | None = 80,
        format_penalty: float = 0.0,
        instruction_style: str = "full",
        num_games: int = 25,
        cache_dir: str | os.PathLike | None = None,
        settings: Mapping[str, Any] | None = None,
        generation_timeout: float = 900.0,
        text_style: str = "balrog",
    ) -> None:
        super().__init__(max_steps=max_steps, format_penalty=format_penalty)
        if text_style not in TEXT_STYLES:
            raise ValueError(f"text_style must be one of {list(TEXT_STYLES)}, got {text_style!r}")
        if instruction_style not in INSTRUCTION_STYLES:
            raise ValueError(f"instruction_style must be one of {list(INSTRUCTION_STYLES)}, got {instruction_style!r}")
        if isinstance(num_games, bool) or not isinstance(num_games, int):
            raise TypeError(f"num_games must be an int, got {type(num_games).__name__}")
        if num_games < 1:
            raise ValueError(f"num_games must be >= 1, got {num_games}")
        if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
            raise TypeError(f"cache_dir must be a str or path, got {type(cache_dir).__name__}")
        if isinstance(generation_timeout, bool) or not isinstance(generation_timeout, (int, float)):
            raise TypeError(f"generation_timeout must be a number, got {type(generation_timeout).__name__}")
        if not generation_timeout > 0:
            raise ValueError(f"generation_timeout must be > 0, got {generation_timeout}")
        self.task = task
        self.game_spec: GameSpec = resolve_spec(task, settings)  # validates task and settings
        self.num_games = num_games
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.instruction_style = instruction_style
        self.text_style = text_style
        self.generation_timeout = float(generation_timeout)
        self._loaded: OrderedDict[int, _LoadedGame] = OrderedDict()  # game index -> its interpreters
        self._game: _LoadedGame | None = None
        self._game_index: int | None = None
        self._objective = ""
        self._max_score = 0
        self._score = 0
        self._won = False
        self._lost = False
        self._admissible: list[str] = []
        self._walkthrough: list[str] = []
        self._facts: list[Any] | None = None  # TextWorld's propositions of the current state

    #: ``"look"`` (re-describes the room).
    default_action = DEFAULT_ACTION

    # -------------------------------------------------------------- TextEnv properties
    @property
    def valid_actions(self) -> list[str]:
        """TextWorld's admissible commands of the current state (hints; any command is executed)."""
        return self._admissible

    @property
    def progression(self) -> float:
        """``max(score / max_score, 1 if won)`` of the current step, in [0, 1]."""
        if self._won:
            return 1.0
        if self._max_score <= 0:
            return 0.0
        return min(1.0, max(0.0, self._score / self._max_score))

    @property
    def success(self) -> bool:
        """Whether the game has been won."""
        return self._won

    @property
    def state_key(self) -> bytes:
        """The game's logical state, as TextWorld tracks it: the game (task, settings, index in the
        pool), every fact true now, sorted (``at(P:P,r_6:r)``: where the player and each thing are, what
        is carried, open, closed, locked, cut, cooked, eaten ...), and the score, won and lost; a few KB
        of text, as bytes.

        TextWorld builds its games from these facts and updates them from the game's own action events,
        so the facts are the world state; the game identity is in the key because fact names
        (``r_6``) mean different things in different games. Left out: the interpreter's memory
        (the turn counter, which rooms were described before, its random state), on which the
        generated games' rules do not depend, and the last reply's text: ``look`` or a command the game
        does not understand leaves the key as it was.

        Raises:
            RuntimeError: before the first reset.
        """
        facts = "\n".join(sorted(map(_fact_text, require_episode(self._facts))))
        spec = self.game_spec
        head = f"{spec.task}\n{spec.variant}\n{self._game_index}\n{self._score} {self._won:d} {self._lost:d}\n"
        return (head + facts).encode()

    @property
    def game_index(self) -> int:
        """Index of the game of the current episode in the pool. RuntimeError before reset."""
        return require_episode(self._game_index)

    @property
    def objective(self) -> str:
        """The game's objective text (what ``goal`` prints)."""
        return self._objective

    @property
    def walkthrough(self) -> list[str]:
        """The game's own winning command sequence (from its generator)."""
        return list(self._walkthrough)

    @property
    def score(self) -> int:
        """The game's cumulative score so far."""
        return self._score

    @property
    def max_score(self) -> int:
        """The game's maximum score."""
        return self._max_score

    def game_file(self, index: int) -> Path:
        """Path of the ``.z8`` file of game ``index`` of the pool, generating it if needed.

        Raises:
            ValueError: ``index`` outside ``[0, num_games)``.
        """
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.num_games:
            raise ValueError(f"game index must be an int in [0, {self.num_games}), got {index!r}")
        return ensure_game(self.game_spec, index, self.cache_dir, timeout=self.generation_timeout)

    # -------------------------------------------------------------- game
    def _load(self, index: int) -> _LoadedGame:
        game = self._loaded.pop(index, None)
        if game is None:
            game = _LoadedGame(str(self.game_file(index)), TEXT_STYLES[self.text_style])
            while len(self._loaded) >= _MAX_LOADED_GAMES:
                _, evicted = self._loaded.popitem(last=False)
                evicted.close()
        self._loaded[index] = game
        return game

    def _extra_info(self) -> dict[str, Any]:
        return {
            "game_index": self._game_index,
            "score": self._score,
            "max_score": self._max_score,
            "won": self._won,
            "lost": self._lost,
        }

    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        if seed is None:
            index = int(self.np_random.integers(self.num_games))
        else:
            index = seed % self.num_games
        game = self._load(index)
        state = game.reset()
        self._game, self._game_index = game, index
        self._objective = str(state["objective"] or "")
        self._max_score = int(state["max_score"] or 0)
        self._score = int(state["score"] or 0)
        self._won, self._lost = bool(state["won"]), bool(state["lost"])
        self._admissible = list(state["admissible_commands"] or [])
        self._facts = state["_facts"]
        self._walkthrough = list(state.get("extra.walkthrough") or [])
        if self.instruction_style == "full":
            # BALROG's text cuts the objective out of the reply to `goal`: the instruction states it
            stated = self._objective if self.text_style == "balrog" else None
            self._instruction = build_instruction(self.task, self.max_steps, objective=stated)
        else:
            self._instruction = build_brief_instruction(self._objective)
        return self._observation(state["feedback"], first=True), self._extra_info()

    def _observation(self, feedback: str, first: bool = False) -> str:
        if self.text_style == "balrog":
            return balrog_observation(feedback, self._objective)
        return first_observation(feedback, self._objective) if first else clean_feedback(feedback)

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        state, score = self._game.step(action)
        score = int(score or 0)
        reward = float(score - self._score)
        self._score = score
        self._won, self._lost = bool(state["won"]), bool(state["lost"])
        self._admissible = list(state["admissible_commands"] or [])
        self._facts = state["_facts"]
        terminated = self._won or self._lost
        return self._observation(state["feedback"]), reward, terminated, False, self._extra_info()

    def parse_action(self, reply: str) -> str | None:
        """The command of ``reply`` (see :func:`parse_command`); any non-``None`` command is executed."""
        return parse_command(reply)

    def close(self) -> None:
        """Close the loaded games' interpreters."""
        while self._loaded:
            _, game = self._loaded.popitem()
            game.close()
        self._game = None
        super().close()


def make_textworld(
    task: str,
    *,
    max_steps: int | None = None,
    format_penalty: float = 0.0,
    instruction_style: str = "full",
    num_games: int = 25,
    cache_dir: str | os.PathLike | None = None,
    settings: Mapping[str, Any] | None = None,
    generation_timeout: float = 900.0,
    text_style: str = "balrog",
) -> TextWorldTextEnv:
    """Build the TextWorld task ``task`` (a key of :data:`TEXTWORLD_TASKS`).

    Args:
        task: ``treasure_hunter``, ``the_cooking_game`` or ``coin_collector``.
        max_steps: step limit; ``None`` uses BALROG's (80).
        format_penalty: see :class:`~verlog.envs.base.TextEnv`.
        instruction_style: ``"full"`` or ``"brief"``.
        num_games: pool size (default 25, as BALROG).
        cache_dir: game cache root (default ``$VERLOG_CACHE/textworld`` or ``<repo>/.cache/verlog/textworld``).
        settings: generation setting overrides (see :mod:`verlog.envs.textworld_games`).
        generation_timeout: seconds allowed to generate one game.
        text_style: ``"balrog"`` (default) or ``"tidy"`` (see the module docstring).

    Raises:
        ValueError: unknown task (the message lists the known ones), or bad arguments.
    """
    default_steps = task_entry(TEXTWORLD_TASKS, task, "TextWorld")
    return TextWorldTextEnv(
        task,
        max_steps=default_steps if max_steps is None else max_steps,
        format_penalty=format_penalty,
        instruction_style=instruction_style,
        num_games=num_games,
        cache_dir=cache_dir,
        settings=settings,
        generation_timeout=generation_timeout,
        text_style=text_style,
    )


for _task in TEXTWORLD_TASKS:
    register(f"textworld/{_task}", functools.partial(make_textworld, _task))
