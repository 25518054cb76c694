"""Text conventions shared by the NetHack-based games (MiniHack and NLE), and their shared game loop.

Two text styles (``text_style``): ``"balrog"``, the default, is byte for byte the "hybrid" text BALROG
gives its agents (rules in :mod:`verlog.envs.nethack_balrog_text`; BALROG used the
``nle_language_wrapper`` package, which is not a dependency here). ``"tidy"`` is Verlog's own
rendering, described below.

In the tidy style an observation has four parts, each under a header line:

* ``message:`` the game's message. Messages that ended in ``--More--`` were dismissed automatically
  (see below); their texts come first, one per line, then the final message. ``(none)`` when empty.
* ``language observation:`` what is around the agent, one item per line, nearest first:

  - every visible monster (``tame kitten``, ``giant rat``), object (``long sword``, ``potion``,
    ``red gem``) and dungeon feature (doors, doorways, staircases, fountains, altars, traps, water,
    lava ...) anywhere on the map, at most :data:`~verlog.envs.nethack_glyphs.MAX_PER_NAME` of each
    name;
  - walls, corridors, trees and iron bars only when they are adjacent.

  Each item is the thing's name and where it is relative to the agent, in map steps with the compass
  words of the move actions (north = up the map): ``tame kitten adjacent east``, ``staircase down 3
  steps northwest``, ``fountain 2 steps north and 5 steps east`` (north/south first). Floors, dark
  floors and unexplored rock are not listed. Names come from NetHack's own tables through nle's glyph
  helpers. Objects whose appearance is randomised per game (potions, scrolls, wands, rings, amulets,
  spellbooks) are named by their class only, because the glyph would otherwise reveal the true,
  unidentified type; gems by colour (``red gem``, ``gray stone``); other objects by their unidentified
  appearance when they have one (``bag``, ``hooded cloak``), else by name (the appearances of the four
  shuffled armour families - helmets, cloaks, gloves, boots - are NetHack's defaults and may differ from
  the ones shown in this game).
* ``cursor:`` ``Yourself a rogue (x=40, y=7)``: the monster shown at the agent's position (your role,
  or your polymorphed form) and its column and line in the map below, both counted from 0. Once the
  game is over (death, or MiniHack's goal reached) it reads ``The game is over.`` and the language
  observation is empty: the terminal then shows NetHack's end screens.
* ``map:`` the 80x24 terminal without its first (message) line: 21 map lines and the two status
  lines, trailing spaces removed (lines are kept, so line ``y`` is map row ``y``).

The current-only context (:func:`~verlog.envs.nethack_screen.render_inventory`) is the inventory,
``Inventory:`` then one ``<letter>: <item>`` line per item.

``--More--`` in the tidy style: after every action (and after reset), while the terminal shows ``--More--`` and the game is not over, the
MORE key is pressed (the presses are counted, they are not agent steps; their rewards are added to
the step's reward). A ``--More--`` on the message line contributes that line's text to the message;
one at the bottom of a text window (e.g. "Things that are here:") contributes the window's text.
MiniHack tasks keep NLE's own handling (``allow_all_modes=False``: NLE itself dismisses ``--More--``,
so the text env rarely sees one); tasks whose action set lacks MORE never press it.

The parts are written by :mod:`verlog.envs.nethack_glyphs` (language observation, cursor line) and
:mod:`verlog.envs.nethack_screen` (message, map, inventory, ``--More--``); the actions are named in
:mod:`verlog.envs.nethack_actions`. This module holds :class:`NetHackTextEnvBase`, the shared game
loop (seeding, ``--More--`` skipping, rendering with caches); :mod:`verlog.envs.minihack` and
:mod:`verlog.envs.nle` add tasks, actions, instructions and progression.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import hashlib

import gymnasium
import numpy as np
from nle import nethack
from nle.env.base import NLE

from verlog.envs.base import TextEnv, require_episode
from verlog.envs.nethack_actions import action_indices
from verlog.envs.nethack_balrog_text import (
    TerminalMap,
    balrog_context,
    compose_observation,
    cursor_text,
    describe_glyphs,
    inventory_text,
    join_more,
    message_of_bytes,
)
from verlog.envs.nethack_glyphs import cursor_line, describe_surroundings
from verlog.envs.nethack_screen import (
    MORE,
    decode_message,
    find_more,
    more_text,
    render_inventory,
    render_map,
    render_observation,
)
from verlog.envs.parsing import extract_action

__all__ = [
    "OBSERVATION_KEYS",
    "TEXT_STYLES",
    "SURROUNDINGS_HELP",
    "NATIVE_STEP_LIMIT",
    "MAX_MORE_PRESSES",
    "NetHackTextEnvBase",
    "make_nle_env",
]

#: The NLE observation keys the text envs ask for (and hash, in this order, into the state key).
OBSERVATION_KEYS: tuple[str, ...] = (
    "glyphs", "blstats", "message", "tty_chars", "tty_cursor", "inv_strs", "inv_letters",
)  # fmt: skip
#: ``"balrog"`` (default): BALROG's text (:mod:`verlog.envs.nethack_balrog_text`); ``"tidy"``: Verlog's
#: own four-part text (this module's docstring).
TEXT_STYLES: tuple[str, ...] = ("balrog", "tidy")
#: How the full instructions of MiniHack and NetHack describe the language observation and the cursor,
#: per text style (each ends where the instruction goes on with ", and the screen as text").
SURROUNDINGS_HELP: dict[str, str] = {
    "balrog": "a list of what is around you with a rough distance (adjacent, very near, near, far, very far) "
    'and a direction (e.g. "stairs down near northwest"; north is up the map), what the cursor is on '
    "(normally yourself) with its screen position",
    "tidy": "a list of what is around you with its direction and distance in steps "
    '(e.g. "staircase down 3 steps northwest"; north is up the map), your position',
}
#: Safety bound on automatic MORE presses after one action.
MAX_MORE_PRESSES = 64
#: Native step limit given to NLE so that only our limits end episodes.
NATIVE_STEP_LIMIT = 10**12


def make_nle_env(env_id: str, env_kwargs: Mapping[str, Any]) -> NLE:
    """Construct the gymnasium-registered NLE/MiniHack env ``env_id`` with ``observation_keys`` = ours.

    The env class is built directly from its registration (entry point and registered kwargs, updated
    with ``env_kwargs``) rather than through ``gymnasium.make``, because ``gymnasium.make`` takes
    ``max_episode_steps`` for its own TimeLimit wrapper instead of passing it to NLE, and adds wrappers
    we would strip anyway.

    Raises:
        ValueError: unknown id (gymnasium's error is chained).
        TypeError: keyword arguments the env does not accept, or an env that is not an NLE env.
    """
    try:
        spec = gymnasium.spec(env_id)
    except gymnasium.error.Error as err:
        raise ValueError(f"cannot make {env_id!r}: {err}") from err
    creator = gymnasium.envs.registration.load_env_creator(spec.entry_point)
    kwargs = {**spec.kwargs, **env_kwargs, "observation_keys": OBSERVATION_KEYS}
    try:
        env = creator(**kwargs)
    except TypeError as err:
        raise TypeError(f"bad keyword arguments {dict(env_kwargs)!r} for {env_id!r}: {err}") from err
    if not isinstance(env, NLE):
        raise TypeError(f"{env_id!r} is a {type(env).__name__}, not an NLE env")
    return env


class _RecentResults:
    """The results of one pure function for its last ``size`` distinct keys (least recently used out).

    Made for screens: a step mostly shows the screen of the step before (the last key is compared
    first, by value: a memcmp, no hashing) or one seen a few steps ago (a random walk goes back and
    forth; looked up by hash).
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._results: dict[Any, Any] = {}  # insertion order = recency
        self._last_key: Any = None
        self._last_value: Any = None

    def get(self, key: Any, compute: Callable[..., Any], *args: Any) -> Any:
        """``compute(*args)``, the result of which is determined by ``key``, from the cache if there."""
        if key == self._last_key:
            return self._last_value
        value = self._results.pop(key, _MISSING)
        if value is _MISSING:
            value = compute(*args)
            if len(self._results) >= self._size:
                del self._results[next(iter(self._results))]
        self._results[key] = value
        self._last_key, self._last_value = key, value
        return value


_MISSING = object()


def _balrog_inventory(letters: np.ndarray, strs: np.ndarray) -> str:
    return balrog_context(inventory_text(letters, strs))

#: Distinct screens (maps, language observations) remembered per env.
RECENT_SCREENS = 64


class NetHackTextEnvBase(TextEnv):
    """Shared game loop of the MiniHack and NLE text envs (subclasses add tasks and scoring).

    ``reset(seed)`` draws NetHack's core and display RNG seeds from the env's ``np_random`` (so an int
    seed reproduces the episode exactly and ``None`` continues the stream) and disables NetHack's
    re-seeding; ``fix_moon_phase=True`` (set by the subclasses) keeps moon phase / Friday 13th / night
    from the wall clock. After each action ``--More--`` is dismissed automatically (module docstring).

    Subclasses implement :meth:`_on_observation` (progression bookkeeping) and ``progression``, set
    ``default_action`` and the system prompt ``_instruction``, and may extend :meth:`_extra_info` and
    :meth:`_parse_reply` (the reply parser used for replies that are not exactly ``"ACTION: <action>"``).

    Args:
        env: the NLE/MiniHack env (from :func:`make_nle_env`, with ``max_episode_steps`` =
            :data:`NATIVE_STEP_LIMIT`).
        action_names: the action names offered, in order (each must be in ``env.actions``).
        max_steps, format_penalty: see :class:`~verlog.envs.base.TextEnv`.
        text_style: one of :data:`TEXT_STYLES`.

    Attributes:
        nle: the raw NLE/MiniHack env.
        more_presses: MORE presses made automatically during the last reset/step.
    """

    def __init__(
        self,
        env: NLE,
        action_names: Sequence[str],
        *,
        max_steps: int | None,
        format_penalty: float,
        text_style: str = "balrog",
    ) -> None:
        if text_style not in TEXT_STYLES:
            raise ValueError(f"text_style must be one of {TEXT_STYLES}, got {text_style!r}")
        super().__init__(max_steps=max_steps, format_penalty=format_penalty)
        self.text_style = text_style
        self._balrog = text_style == "balrog"
        if env._max_episode_steps < NATIVE_STEP_LIMIT:
            raise ValueError(
                f"the NLE env's own step limit ({env._max_episode_steps}) would end episodes before the text "
                f"env's; build it with max_episode_steps={NATIVE_STEP_LIMIT}"
            )
        self.nle = env
        self._action_index = action_indices(env.actions, action_names)
        self.fixed_actions: tuple[str, ...] = tuple(action_names)  # in the instruction's order
        # Replies written exactly "ACTION: <action>" skip the general parser (same result, ~1 us).
        self._exact_replies = {f"ACTION: {name}": name for name in self.fixed_actions}
        more = action_indices(env.actions, ["more"], strict=False)
        self._more_index: int | None = more.get("more")
        self.more_presses = 0
        self._obs: dict[str, np.ndarray] | None = None
        self._message = ""
        # caches, keyed on the raw bytes of the arrays they are computed from
        self._descriptions = _RecentResults(RECENT_SCREENS)
        self._maps = _RecentResults(RECENT_SCREENS)
        self._inventories = _RecentResults(1)
        # BALROG's text: (message, map text) by terminal; the map text of the current screen
        self._screens = _RecentResults(RECENT_SCREENS)
        self._terminal_map = TerminalMap()
        self._map_text = ""
        self._last_parts: tuple = ()  # what the last BALROG observation was made of, and the text
        self._last_text = ""

    # -------------------------------------------------------------- TextEnv properties
    def parse_action(self, reply: str) -> str | None:
        """The shared rule (:func:`~verlog.envs.parsing.extract_action`); ``"ACTION: <action>"`` exactly
        is looked up directly (same result, faster)."""
        action = self._exact_replies.get(reply)
        return action if action is not None else self._parse_reply(reply)

    def _parse_reply(self, reply: str) -> str | None:
        return extract_action(reply, self.fixed_actions)

    @property
    def context(self) -> str:
        """The inventory (BALROG's short-term context, or :func:`render_inventory` when tidy); ``""``
        before the first reset."""
        obs = self._obs
        if obs is None:
            return ""
        letters, strs = obs["inv_letters"], obs["inv_strs"]
        render = _balrog_inventory if self._balrog else render_inventory
        return self._inventories.get((letters.tobytes(), strs.tobytes()), render, letters, strs)

    @property
    def message(self) -> str:
        """The message part of the current observation."""
        return self._message

    @property
    def blstats(self) -> np.ndarray:
        """A copy of NLE's bottom-line statistics of the current state. RuntimeError before reset."""
        return require_episode(self._obs)["blstats"].copy()

    @property
    def state_key(self) -> bytes:
        """The observable game state: a 32-byte BLAKE2b digest of NLE's arrays :data:`OBSERVATION_KEYS`.

        Each array has a fixed shape and type, so their concatenation is unambiguous. They hold the map
        as glyphs (every monster, object and feature seen or remembered, by identity, not by character),
        the bottom-line statistics (position, hit points, depth, experience, hunger, turn counter ...),
        the terminal (message line, menus and prompts, status lines), the cursor, NLE's message and the
        inventory (letters and descriptions): about 10 KB, hence the digest.

        It is the state as the agent sees it, not NetHack's whole state: monsters out of sight, the
        unexplored level, the true identity of unidentified items and the random number generator live
        in the game process, and NLE does not expose them. Two games that look the same may differ
        there, and get one key. That is the grouping GiGPO needs: the policy sees only this, so it can
        only choose by it. Messages dismissed by the step's automatic ``--More--`` presses are left
        out (they tell how the state was reached; the message on screen now is in).

        Raises:
            RuntimeError: before the first reset.
        """
        obs = require_episode(self._obs)
        digest = hashlib.blake2b(digest_size=32)
        for name in OBSERVATION_KEYS:
            digest.update(obs[name].tobytes())
        return digest.digest()

    def describe(self) -> str:
        """The text observation of the current state (no notice line). RuntimeError before reset."""
        require_episode(self._obs)
        return self._render()

    # -------------------------------------------------------------- hooks
    def _on_observation(self, reset: bool, reward: float, done: bool, end_status: int) -> None:
        """Update progression bookkeeping from ``self._obs`` (called after reset and every step).

        ``end_status`` is NLE's ``info["end_status"]`` of the last game step (e.g. MiniHack's
        ``TASK_SUCCESSFUL``)."""

    def _extra_info(self) -> dict[str, Any]:
        """Extra info keys (same keys at reset and every step)."""
        return {"more_presses": self.more_presses, "turn": self._obs["blstats"].item(nethack.NLE_BL_TIME)}

    def _seed_game(self, core: int, disp: int) -> None:
        NLE.seed(self.nle, core, disp, reseed=False)

    # -------------------------------------------------------------- game
    def _skip_more(
        self, obs: dict, done: bool, truncated: bool, info: dict
    ) -> tuple[dict, float, bool, bool, dict, list[str]]:
        """Press MORE while ``--More--`` shows; returns the new step tuple and the dismissed texts."""
        parts: list[str] = []
        reward = 0.0
        presses = 0
        if self._more_index is None or MORE not in obs["tty_chars"].tobytes():  # the usual case
            self.more_presses = 0
            return obs, reward, done, truncated, info, parts
        while not (done or truncated) and presses < MAX_MORE_PRESSES:
            where = find_more(obs["tty_chars"])
            if where is None:
                break
            text = more_text(obs["tty_chars"], *where)
            if text:
                parts.append(text)
            obs, step_reward, done, truncated, info = self.nle.step(self._more_index)
            reward += float(step_reward)
            presses += 1
        self.more_presses = presses
        return obs, reward, done, truncated, info, parts

    def _set_obs(self, obs: dict, parts: list[str]) -> None:
        self._obs = obs
        final = decode_message(obs["message"])
        if final and (not parts or parts[-1] != final):
            parts.append(final)
        self._message = "\n".join(parts)

    def _render(self) -> str:
        obs = self._obs
        glyphs, blstats = obs["glyphs"], obs["blstats"]
        x, y = blstats.item(nethack.NLE_BL_X), blstats.item(nethack.NLE_BL_Y)
        if self._balrog:
            row, col = obs["tty_cursor"].tolist()
            glyph_bytes = glyphs.tobytes()
            parts = (self._message, self._map_text, glyph_bytes, x, y, row, col)
            if parts == self._last_parts:  # the screen of the step before (compared, not hashed)
                return self._last_text
            description = self._descriptions.get((glyph_bytes, x, y), describe_glyphs, glyphs, x, y)
            cursor = cursor_text(glyphs, x, y, row, col)
            text = compose_observation(self._message, description, cursor, (row, col), self._map_text)
            self._last_parts, self._last_text = parts, text
            return text
        # A finished game has zero blstats (x = 0, a column no running game puts the agent in), so
        # its key never equals a running game's.
        description, cursor = self._descriptions.get((glyphs.tobytes(), x, y), self._describe, glyphs, x, y)
        tty = obs["tty_chars"]
        ascii_map = self._maps.get(tty.tobytes(), render_map, tty)
        return render_observation(self._message, description, cursor, ascii_map)

    def _read_screen(self, tty: np.ndarray) -> tuple[str, str]:
        """BALROG's message and map text of one terminal (cached by its bytes)."""
        raw = tty.tobytes()
        return self._screens.get(raw, self._screen_texts, raw, tty)

    def _screen_texts(self, raw: bytes, tty: np.ndarray) -> tuple[str, str]:
        return message_of_bytes(raw, tty.shape[1]), self._terminal_map(tty)

    def _describe(self, glyphs: np.ndarray, x: int, y: int) -> tuple[list[str], str]:
        """The language observation's lines and the cursor line (only the latter once the game is over)."""
        rows, cols = glyphs.shape
        if self.nle.nethack.in_normal_game() and 0 <= x < cols and 0 <= y < rows:
            return describe_surroundings(glyphs, x, y), cursor_line(glyphs, x, y)
        return [], "The game is over."  # the map is gone and blstats are zero

    def _balrog_more(self, obs: dict, done: bool, truncated: bool, info: dict) -> tuple[dict, float, bool, bool, dict]:
        """BALROG's ``--More--`` skipping after a step (:func:`join_more`); sets the message."""
        message, self._map_text = self._read_screen(obs["tty_chars"])
        reward = 0.0
        presses = 0
        while "--More--" in message and not (done or truncated) and self._more_index is not None:
            if presses >= MAX_MORE_PRESSES:
                break
            obs, step_reward, done, truncated, info = self.nle.step(self._more_index)
            next_message, self._map_text = self._read_screen(obs["tty_chars"])
            message = join_more(message, next_message)
            reward += float(step_reward)
            presses += 1
        self.more_presses = presses
        self._obs = obs
        self._message = message
        return obs, reward, done, truncated, info

    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        core, disp = (int(v) for v in self.np_random.integers(0, 2**62, size=2))
        self._seed_game(core, disp)
        obs, info = self.nle.reset()
        if self._balrog:  # BALROG leaves a --More-- of the first screen to the agent
            done = truncated = False
            self.more_presses = 0
            self._obs = obs
            self._message, self._map_text = self._read_screen(obs["tty_chars"])
        else:
            obs, _, done, truncated, info, parts = self._skip_more(obs, False, False, info)
            self._set_obs(obs, parts)
        self._on_observation(True, 0.0, done, int(info["end_status"]))
        return self._render(), self._extra_info()

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, done, truncated, info = self.nle.step(self._action_index[action])
        if self._balrog:
            obs, more_reward, done, truncated, info = self._balrog_more(obs, done, truncated, info)
        else:
            obs, more_reward, done, truncated, info, parts = self._skip_more(obs, done, truncated, info)
            self._set_obs(obs, parts)
        reward = float(reward) + more_reward
        terminated = bool(done) and not truncated
        self._on_observation(False, reward, bool(done), int(info["end_status"]))
        return self._render(), reward, terminated, bool(truncated), self._extra_info()

    def close(self) -> None:
        """Close the NetHack process of this env."""
        self.nle.close()
        super().close()
