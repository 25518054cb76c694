"""The text-environment contract: string observations in, the model's raw reply string out.

:class:`TextEnv` implements ``reset``/``step`` once for every game. A game subclass supplies only the
game itself (``_reset_game``/``_step_game`` plus a few properties); the base class parses the reply,
substitutes the default action for an invalid reply (with a notice line and an optional format
penalty), enforces the step limit, and fills ``info`` with the same keys at every step so that
gymnasium's vector envs can merge infos into arrays.

How an episode ends (the rule the critic's bootstrap depends on): ``terminated`` says the game reached
an end state of its own (won, lost, or out of the turns its rules give and tell the player), so no
value follows and the critic bootstraps nothing; ``truncated`` says the episode was cut from outside
the game (this class's ``max_steps``, or a cut the game itself flags as one), so the critic values the
last observation in place of the future that was cut off. A game step that reports both is a
termination: once the game is over, a step limit running out at the same moment changes nothing (in
gymnasium's terms ``terminated`` is about the task's own states, and a learner bootstraps only when it
is false), so :meth:`TextEnv.step` then reports ``terminated=True, truncated=False``: the two are never
both true. An adapter of another library maps that library's flags by what they mean, not by their
names: a turn limit that the game states to the player is part of the game (terminated), one imposed
without the player being told is a cut (truncated).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, TypeVar

import gymnasium
import numpy as np
from gymnasium import spaces

from verlog.envs.parsing import extract_action, reply_memo

__all__ = [
    "TextEnv",
    "TEXT_CHARSET",
    "OBSERVATION_MODES",
    "observation_text",
    "observation_image",
    "OBS_MAX_CHARS",
    "REPLY_MAX_CHARS",
    "INFO_KEYS",
    "invalid_action_notice",
    "require_episode",
]


def _charset() -> str:
    """Printable ASCII, tab/newline/CR, Latin-1 + Latin Extended-A/B, general punctuation, currency."""
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x2000, 0x206F), (0x20A0, 0x20BF)]
    chars = "\t\n\r" + "".join(chr(c) for lo, hi in ranges for c in range(lo, hi + 1))
    return chars


#: Characters that the observation/action :class:`gymnasium.spaces.Text` spaces contain. It covers
#: English text, Western European letters and typographic punctuation (curly quotes, dashes, ellipsis)
#: while staying small (~700 characters): gymnasium's ``Text`` builds per-character tables and vector
#: envs deep-copy spaces, so a full-Unicode charset would cost ~0.5 s and ~20 MB per space. The spaces
#: are descriptive only: :meth:`TextEnv.step` accepts ANY ``str`` reply (emoji, CJK ...).
TEXT_CHARSET: str = _charset()
#: Upper bound on an observation's length (characters) in ``observation_space``.
OBS_MAX_CHARS: int = 8192
#: Upper bound on a reply's length (characters) in ``action_space`` (longer replies are still accepted).
REPLY_MAX_CHARS: int = 65536

#: Keys present in ``info`` after ``reset`` and after every ``step`` (a subclass may add its own keys,
#: but must return the same extra keys from ``_reset_game`` and every ``_step_game``).
INFO_KEYS: tuple[str, ...] = (
    "instruction",
    "valid_actions",
    "progression",
    "success",
    "episode_step",
    "action",
    "action_valid",
    "game_reward",
    "context",
)

_RESERVED_KEYS = frozenset(INFO_KEYS)
_UNSEEN = object()

#: ``observation_mode`` of a game that can show images (:meth:`TextEnv.enable_images`): ``text`` (a
#: ``str`` observation, the default), ``image`` (a dict whose text is the mission only, with the image of
#: what the agent sees) or ``both`` (a dict: the full text observation and the image).
OBSERVATION_MODES: tuple[str, ...] = ("text", "image", "both")


def observation_text(observation: Any) -> str:
    """The text of an observation: a ``str`` observation itself, a dict observation's ``"text"``."""
    return observation["text"] if isinstance(observation, dict) else observation


def observation_image(observation: Any) -> np.ndarray | None:
    """The [H, W, 3] uint8 RGB image of a dict observation, ``None`` for a ``str`` observation."""
    return observation.get("image") if isinstance(observation, dict) else None


def invalid_action_notice(executed: str) -> str:
    """The one-line notice prepended to the observation after a reply with no valid action.

    Args:
        executed: the default action that was executed instead.

    Returns:
        A single line (no trailing newline).
    """
    return f'Your previous reply did not contain a valid action, so "{executed}" was executed instead.'


_T = TypeVar("_T")


def require_episode(value: _T | None) -> _T:
    """``value``, a part of the current episode's state that is ``None`` until the first reset.

    Raises:
        RuntimeError: ``value`` is ``None``: no episode has started yet.
    """
    if value is None:
        raise RuntimeError("no episode yet: call reset() first")
    return value


class TextEnv(gymnasium.Env, ABC):
    """Base class of every text game: ``reset() -> (str, info)``, ``step(reply: str) -> 5-tuple``.

    Subclasses implement:

    * ``_reset_game(seed: int | None) -> (obs: str, info: dict)``: start a new episode; ``seed`` is
      ``None`` to continue the game's own RNG (gymnasium convention), an ``int`` to reproduce exactly.
    * ``_step_game(action: str) -> (obs, reward, terminated, truncated, info)``: ``action`` is what
      :meth:`parse_action` returned (by default always one of ``valid_actions``) or ``default_action``.
    * optionally the property ``context: str`` (current-only text such as an inventory).
    * the actions: :attr:`fixed_actions` (a tuple, on the class or set in ``__init__``) for a game whose
      action set never changes, which ``valid_actions: list[str]`` then lists; a game whose actions
      change during play overrides ``valid_actions`` instead.
    * ``default_action: str`` (executed for invalid replies; a class attribute will do) and the property
      ``progression: float`` in [0, 1] (the episode's progress so far). ``success: bool`` defaults to
      ``progression >= 1``.
    * the system prompt: ``instruction`` returns ``self._instruction``, which the game sets in
      ``__init__`` (a prompt that is the same for every episode) or in ``_reset_game`` (one that
      depends on the episode); a game may override the property instead.

    ``step`` parses the reply with :meth:`parse_action`. If no valid action is
    found, ``default_action`` is executed, the next observation starts with
    :func:`invalid_action_notice` on its own line, and ``format_penalty`` is ADDED to the game reward.
    After ``max_steps`` steps the episode is truncated (``truncated=True``) unless the game terminated on
    that very step. A game step that reports both ``terminated`` and ``truncated`` is a termination
    (see the module docstring): ``terminated`` and ``truncated`` are never both true.

    ``info`` always holds the keys of :data:`INFO_KEYS`: ``instruction`` (str), ``valid_actions``
    (list[str]), ``progression`` (float), ``success`` (bool), ``episode_step`` (int, steps taken in this
    episode), ``action`` (str executed; ``""`` at reset), ``action_valid`` (bool; ``True`` at reset),
    ``game_reward`` (float, reward before the format penalty; ``0.0`` at reset), ``context`` (str,
    the current-only context of :attr:`context`, shown with the current observation only).

    Args:
        max_steps: step limit per episode (positive int), or ``None`` for no limit from the base class.
        format_penalty: finite float <= 0 added to the reward of a step whose reply held no valid action.

    Raises:
        ValueError / TypeError: for a bad ``max_steps`` or ``format_penalty``.
    """

    metadata = {"render_modes": []}

    # Whether the class keeps the base ``valid_actions`` (its actions are ``fixed_actions``), the base
    # ``success`` (``progression >= 1``), ``instruction`` (``self._instruction``), ``context`` (``""``)
    # and ``parse_action`` (the shared rule): the per-step parse and info then skip a property call
    # or a list copy each (set for every subclass by ``__init_subclass__``).
    _base_valid_actions = True
    _base_success = True
    _base_instruction = True
    _base_context = True
    _base_parse = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._base_valid_actions = cls.valid_actions is TextEnv.valid_actions
        cls._base_success = cls.success is TextEnv.success
        cls._base_instruction = cls.instruction is TextEnv.instruction
        cls._base_context = cls.context is TextEnv.context
        cls._base_parse = cls.parse_action is TextEnv.parse_action

    def __init__(self, *, max_steps: int | None = None, format_penalty: float = 0.0) -> None:
        if max_steps is not None:
            if isinstance(max_steps, bool) or not isinstance(max_steps, int):
                raise TypeError(f"max_steps must be an int or None, got {type(max_steps).__name__}")
            if max_steps < 1:
                raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if isinstance(format_penalty, bool) or not isinstance(format_penalty, (int, float)):
            raise TypeError(f"format_penalty must be a float, got {type(format_penalty).__name__}")
        if not math.isfinite(format_penalty) or format_penalty > 0:
            raise ValueError(
                "format_penalty must be a finite number <= 0 (it is added to the reward of a step whose "
                f"reply held no valid action), got {format_penalty}"
            )
        self.max_steps: int | None = max_steps
        self.format_penalty: float = float(format_penalty)
        self.observation_space = spaces.Text(OBS_MAX_CHARS, min_length=0, charset=TEXT_CHARSET)
        self.action_space = spaces.Text(REPLY_MAX_CHARS, min_length=0, charset=TEXT_CHARSET)
        self._episode_step = 0
        self._needs_reset = True
        self._game_info_keys: frozenset[str] = frozenset()  # the game's own info keys, as at reset
        self._replies: dict[str, str | None] = {}  # see reset
        self._instruction: str | None = None  # see :attr:`instruction`
        self.observation_mode = "text"

    # ------------------------------------------------------------------ image observations
    def enable_images(self, mode: str, image_shape: tuple[int, int]) -> None:
        """Switch the observations to ``mode`` (:data:`OBSERVATION_MODES`); a game that can render what
        the agent sees calls it from ``__init__`` and implements :meth:`render_image`.

        In ``image`` and ``both`` modes every observation is a dict ``{"text": str, "image": uint8
        array [H, W, 3]}`` and ``observation_space`` the matching ``spaces.Dict``; in ``image`` mode the
        text is :meth:`image_mode_text` (the mission), preceded by the invalid-reply notice line when
        there is one. ``text`` keeps the plain ``str`` observations.

        Args:
            mode: ``"text"``, ``"image"`` or ``"both"``.
            image_shape: (H, W) in pixels of :meth:`render_image`'s images.

        Raises:
            ValueError: an unknown mode or a non-positive image size.
        """
        if mode not in OBSERVATION_MODES:
            raise ValueError(f"observation_mode must be one of {list(OBSERVATION_MODES)}, got {mode!r}")
        if len(image_shape) != 2 or min(image_shape) < 1:
            raise ValueError(f"image_shape must be (height, width) > 0, got {image_shape!r}")
        self.observation_mode = mode
        if mode != "text":
            self.observation_space = spaces.Dict({
                "text": spaces.Text(OBS_MAX_CHARS, min_length=0, charset=TEXT_CHARSET),
                "image": spaces.Box(0, 255, (*image_shape, 3), dtype=np.uint8),
            })

    def render_image(self) -> np.ndarray:
        """The [H, W, 3] uint8 image of what the agent sees now (games that call :meth:`enable_images`).

        Raises:
            NotImplementedError: the game shows no images.
        """
        raise NotImplementedError(f"{type(self).__name__} has no image observations")

    def image_mode_text(self) -> str:
        """The text shown beside the image in ``image`` mode; default the episode's ``mission``."""
        return str(getattr(self, "mission", ""))

    def _shown_observation(self, text: str, notice: str | None = None) -> Any:
        """The observation of ``text`` (with the notice line ``notice``) in the env's mode."""
        if self.observation_mode == "text":
            return text if notice is None else notice + "\n" + text
        shown = self.image_mode_text() if self.observation_mode == "image" else text
        if notice is not None:
            shown = notice + "\n" + shown
        return {"text": shown, "image": self.render_image()}

    # ------------------------------------------------------------------ to implement in a game
    @abstractmethod
    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        """Start a new game episode; return the first observation and extra info."""

    @abstractmethod
    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Execute one valid action; return ``(obs, reward, terminated, truncated, extra_info)``."""

    @property
    @abstractmethod
    def default_action(self) -> str:
        """The action executed when a reply holds no valid action."""

    @property
    @abstractmethod
    def progression(self) -> float:
        """Progress of the current episode so far, in [0, 1]."""

    # ------------------------------------------------------------------ defaults a game may override
    #: The action strings of a game whose action set never changes (see :attr:`valid_actions`).
    fixed_actions: tuple[str, ...] = ()

    @property
    def valid_actions(self) -> list[str]:
        """The canonical action strings of the game: by default :attr:`fixed_actions`, as a new list."""
        return list(self.fixed_actions)

    @property
    def instruction(self) -> str:
        """The system prompt of the current episode (``self._instruction``, set by the game).

        Raises:
            RuntimeError: the game has not set it yet (a per-episode prompt before the first reset).
        """
        return require_episode(self._instruction)

    @property
    def success(self) -> bool:
        """Whether the current episode has been solved; default ``progression >= 1``."""
        return self.progression >= 1.0

    #: ``True`` when the game accepts only the strings of :attr:`valid_actions`; a free-text game
    #: (TextWorld) sets it to ``False`` and overrides :meth:`parse_action`.
    actions_are_closed: bool = True

    def parse_action(self, reply: str) -> str | None:
        """The action a reply asks for, or ``None`` when it holds no valid action.

        The default is :func:`~verlog.envs.parsing.extract_action` over :attr:`valid_actions` (the
        action after the last ``ACTION:``, tolerant of case and punctuation). Games with free-text
        actions override it; whatever it returns is passed to ``_step_game`` as is.
        """
        return extract_action(reply, self.fixed_actions if self._base_valid_actions else self.valid_actions)

    @property
    def context(self) -> str:
        """Current-only context (BALROG's "short-term context": inventory, vitals ...); default ``""``.

        It describes the present state only, so the memory shows it with the current observation and
        never keeps it in the history. It is NOT part of the observation string.
        """
        return ""

    @property
    def state_key(self) -> bytes:
        """The exact current game state as bytes (not its text), for GiGPO's anchor states.

        Two states with equal keys must be the same game state, so that grouping turns by key
        groups identical decision points (Feng et al. 2025, GiGPO, sec. 3.2). A game whose state is
        partly hidden from the env (NetHack's, inside its game process) keys the part the agent
        observes. Games that can report it override this; the default raises.

        Raises:
            NotImplementedError: the game does not report state keys.
        """
        raise NotImplementedError(f"{type(self).__name__} does not report a state key (needed by algo.algorithm=gigpo)")

    @property
    def episode_step(self) -> int:
        """Steps taken in the current episode."""
        return self._episode_step

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Start a new episode.

        Args:
            seed: ``int`` for an exactly reproducible episode; ``None`` continues the env's own RNG.
            options: unused; must be ``None`` or empty.

        Returns:
            ``(observation, info)``: a str observation, or a dict one in an image mode
            (:meth:`enable_images`); ``info`` holds :data:`INFO_KEYS` with neutral step values.

        Raises:
            ValueError: if ``options`` is non-empty.
            RuntimeError: if the game's observation is not a str or its info keys clash with ours.
        """
        if options:
            raise ValueError(f"{type(self).__name__}.reset takes no options, got {options!r}")
        super().reset(seed=seed)
        obs, game_info = self._reset_game(seed)
        if not isinstance(obs, str):
            raise RuntimeError(f"{type(self).__name__}._reset_game returned a {type(obs).__name__}, not a str")
        self._episode_step = 0
        self._needs_reset = False
        self._check_game_info(game_info)
        info = self._make_info(game_info, "", True, 0.0)
        self._game_info_keys = frozenset(game_info)
        # The replies the shared rule has parsed against a fixed action set (step reads them before it
        # calls parse_action: a repeated reply costs a dict lookup); none for a game's own rule.
        self._replies = reply_memo(self.fixed_actions) if self._base_parse and self._base_valid_actions else {}
        return self._shown_observation(obs), info

    def step(self, reply: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Parse ``reply``, execute the action (or the default one), return the 5-tuple.

        Args:
            reply: the model's raw reply text.

        Returns:
            ``(obs, reward, terminated, truncated, info)`` where ``reward = game_reward +
            (format_penalty if the reply held no valid action else 0)``.

        Raises:
            TypeError: if ``reply`` is not a str.
            RuntimeError: if called before ``reset`` or after the episode ended, or if the game breaks
                the contract (non-str observation, changing info keys).
        """
        if not isinstance(reply, str):
            raise TypeError(f"reply must be a str, got {type(reply).__name__}")
        if self._needs_reset:
            raise RuntimeError("step() called before reset() or after the episode ended; call reset() first")
        action = self._replies.get(reply, _UNSEEN) if type(reply) is str else _UNSEEN
        if action is _UNSEEN:
            action = self.parse_action(reply)
        action_valid = action is not None
        if action is None:
            action = self.default_action
            if self.actions_are_closed and action not in self.valid_actions:
                raise RuntimeError(f"{type(self).__name__}.default_action {action!r} is not a valid action")
        obs, game_reward, terminated, truncated, game_info = self._step_game(action)
        if not isinstance(obs, str):
            raise RuntimeError(f"{type(self).__name__}._step_game returned a {type(obs).__name__}, not a str")
        self._episode_step += 1
        terminated = bool(terminated)
        truncated = bool(truncated) or (self.max_steps is not None and self._episode_step >= self.max_steps)
        if terminated:
            truncated = False  # a real end of the game on the last allowed step is a termination
        game_reward = float(game_reward)
        reward = game_reward if action_valid else game_reward + self.format_penalty
        if not action_valid or self.observation_mode != "text":  # else the text is shown as it is
            obs = self._shown_observation(obs, None if action_valid else invalid_action_notice(action))
        self._needs_reset = terminated or truncated
        # The same game keys as at reset, where none was one of ours: then the info's keys are too.
        if game_info.keys() != self._game_info_keys:
            self._check_game_info(game_info)
            raise RuntimeError(
                f"{type(self).__name__} changed its info keys between reset and step: "
                f"missing {sorted(self._game_info_keys - set(game_info))}, "
                f"extra {sorted(set(game_info) - self._game_info_keys)}"
            )
        return obs, reward, terminated, truncated, self._make_info(game_info, action, action_valid, game_reward)

    def _check_game_info(self, game_info: dict[str, Any]) -> None:
        """Raise RuntimeError if the game's info sets one of the keys of :data:`INFO_KEYS`."""
        if not _RESERVED_KEYS.isdisjoint(game_info):
            clash = sorted(_RESERVED_KEYS.intersection(game_info))
            raise RuntimeError(f"{type(self).__name__} game info must not set reserved keys {clash}")

    def _make_info(self, game_info: dict[str, Any], action: str, action_valid: bool, game_reward: float) -> dict:
        """The info of a step that executed ``action`` (``""`` at reset): the game's keys, then
        :data:`INFO_KEYS`."""
        progression = float(self.progression)
        if not 0.0 <= progression <= 1.0:
            raise RuntimeError(f"{type(self).__name__}.progression must be in [0, 1], got {progression}")
        instruction = self._instruction if self._base_instruction else None
        return dict(  # the game's keys first, then ours in INFO_KEYS order (cheaper than {**game_info, ...})
            game_info,
            instruction=self.instruction if instruction is None else instruction,
            valid_actions=list(self.fixed_actions if self._base_valid_actions else self.valid_actions),
            progression=progression,
            success=progression >= 1.0 if self._base_success else bool(self.success),
            episode_step=self._episode_step,
            action=action,
            action_valid=action_valid,
            game_reward=game_reward,
            context="" if self._base_context else str(self.context),
        )
