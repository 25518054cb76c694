"""NetHack (NLE's ``NetHackChallenge-v0``) as a :class:`~verlog.envs.base.TextEnv`, in BALROG's conventions.

Registered as ``nle/NetHackChallenge`` (alias ``nle/default``). Observations and the context (inventory)
are, by default, BALROG's text byte for byte (:mod:`verlog.envs.nethack_balrog_text`: message, language
observation, cursor, terminal map; ``--More--`` dismissed automatically after each step, as BALROG's
``skip_more: True``); ``text_style="tidy"`` gives Verlog's own (:mod:`verlog.envs.nethack_text`).

Actions (:data:`NLE_ACTION_NAMES`, 152 strings):

* 90 named actions: the 16 moves (``north`` ... ``far northwest``) and one name per command of nle's
  ``USEFUL_ACTIONS`` (``up``, ``down``, ``wait``, ``more``, ``apply`` ... ``zap``, ``esc``,
  ``seespells``, ``space``; ``shell`` is left out: NLE's build disables the shell escape, so its key
  only prints an error), plus the names of BALROG's NetHack prompt that are not in that list but are
  keys of NetHackChallenge's action set: ``annotate``, ``teleport``, ``travel``, ``minus``, ``apos``
  (BALROG's wrapper could not execute them; here they run). BALROG's commented-out ``overview`` is not
  offered.
* the letters ``a``-``z``, ``A``-``Z`` (case matters: item letters at prompts; outside prompts the
  letter is that key's command, e.g. ``k`` = north) and the digits ``0``-``9``.
* BALROG's two-digit strings ``00``-``99`` are NOT offered: its wrapper crashed on all of them, and
  a count is typed as separate digit actions (``2``, ``0``, ``s`` searches 20 times).

Replies are parsed like every game's (last ``ACTION:``, case- and punctuation-tolerant) except that a
single letter keeps the case the reply wrote it in (``ACTION: A`` is ``A``, ``ACTION: a`` is ``a``).
The default action (invalid reply) is ``esc``.

Game settings are BALROG's ``nle_kwargs``: a random role/race/alignment (``character="@"``), menus
and prompts left to the agent. The reward is the in-game score delta (NLE's). ``terminated`` = the
game ended (the character died or ascended; NLE disables saving and quitting is not an action);
``truncated`` = the step limit
(BALROG's 100,000) or :data:`STUCK_LIMIT` (150) consecutive steps in which the in-game turn counter did
not advance (``info["stuck_steps"]`` counts them; the automatic MORE presses are not steps). NLE's own
limits are set out of reach.

Progression (BALROG's): the maximum, over the dungeon levels (``Dlvl``, the status line's depth) and
experience levels reached in the episode, of the ascension probabilities in
``verlog/envs/data/nethack_progression.json`` (BALROG's table of human data: Dlvl 1 = Xp 1 = 0,
Dlvl 2 = 0.0154 ... Dlvl 50 = 0.807, Xp 30 = 0.780); levels missing from the table count 0.
``info`` also reports ``max_depth``, ``max_xp_level`` and the in-game ``score``.

Seeding: NetHackChallenge forbids setting NetHack's seeds; like BALROG's ``balrog-nle`` fork we lift
that lock (on our env object only) so that ``reset(seed=...)`` reproduces an episode exactly.

The state key (GiGPO's anchor states, :attr:`~verlog.envs.nethack_text.NetHackTextEnvBase.state_key`)
is the observable state: NLE's observation arrays, not the game's hidden internals.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, Mapping

from nle import nethack

from verlog.envs.nethack_actions import (
    ACTION_GLOSSES,
    DIGIT_ACTIONS,
    FAR_MOVE_ACTIONS,
    LETTER_ACTIONS,
    MOVE_ACTIONS,
    NAMED_ACTIONS,
)
from verlog.envs.nethack_text import NATIVE_STEP_LIMIT, SURROUNDINGS_HELP, NetHackTextEnvBase, make_nle_env
from verlog.envs.options import instruction_builder
from verlog.envs.parsing import after_last_marker, extract_action
from verlog.envs.registry import register

__all__ = [
    "NLE_ACTION_NAMES",
    "NLE_NAMED_ACTIONS",
    "NLE_MAX_STEPS",
    "STUCK_LIMIT",
    "NLETextEnv",
    "load_progression_table",
    "progression_of",
    "build_instruction",
    "build_brief_instruction",
]

#: The named actions, in the instruction's order.
NLE_NAMED_ACTIONS: tuple[str, ...] = tuple(NAMED_ACTIONS)
#: Every action string: named actions, then the letters, then the digits.
NLE_ACTION_NAMES: tuple[str, ...] = NLE_NAMED_ACTIONS + LETTER_ACTIONS + DIGIT_ACTIONS
DEFAULT_ACTION = "esc"
#: BALROG's step limit for NetHack.
NLE_MAX_STEPS = 100_000
#: BALROG's no_progress_timeout: consecutive steps without the turn counter advancing.
STUCK_LIMIT = 150
#: BALROG's nle_kwargs (character "@" = random role, race, alignment and gender).
BALROG_NLE_KWARGS: dict[str, Any] = {"character": "@", "savedir": None, "save_ttyrec_every": 0}

_PROGRESSION_FILE = Path(__file__).resolve().parent / "data" / "nethack_progression.json"


@functools.lru_cache(maxsize=1)
def load_progression_table() -> tuple[dict[int, float], dict[int, float]]:
    """``(dlvl, xp)``: level -> progression value, from ``data/nethack_progression.json``.

    Raises:
        FileNotFoundError: if the data file is missing (e.g. not installed as package data).
        ValueError: if a value is outside [0, 1].
    """
    raw = json.loads(_PROGRESSION_FILE.read_text(encoding="utf-8"))
    tables = tuple({int(level): float(value) for level, value in raw[key].items()} for key in ("dlvl", "xp"))
    for table in tables:
        bad = {k: v for k, v in table.items() if not 0.0 <= v <= 1.0}
        if bad:
            raise ValueError(f"progression values must be in [0, 1], got {bad}")
    return tables  # type: ignore[return-value]


def progression_of(depth: int, xp_level: int) -> float:
    """BALROG's progression value of one game state: ``max(table[Dlvl depth], table[Xp xp_level])``.

    Levels missing from the table (0, or beyond Dlvl 50 / Xp 30) count 0, as in BALROG. An episode's
    progression is the maximum of this over its states (:class:`NLETextEnv` keeps it).

    Examples: ``progression_of(2, 1) == 0.01539...``, ``progression_of(1, 10) == 0.1790...``.
    """
    dlvl, xp = load_progression_table()
    return max(dlvl.get(int(depth), 0.0), xp.get(int(xp_level), 0.0))


def _action_lines() -> str:
    moves = ", ".join(MOVE_ACTIONS)
    lines = [
        f"- {moves}: move one step in that direction (moving into a monster attacks it)",
        "- far <direction> (e.g. far east): move in that direction until something interesting is reached",
    ]
    skip = set(MOVE_ACTIONS) | set(FAR_MOVE_ACTIONS)
    lines += [f"- {name}: {ACTION_GLOSSES[name]}" for name in NLE_NAMED_ACTIONS if name not in skip]
    lines.append(
        "- a ... z, A ... Z: type that letter, e.g. to choose an inventory item at a prompt "
        "(outside a prompt a letter is the command of that key, e.g. k moves north)"
    )
    lines.append("- 0 ... 9: type that digit (a number before a command repeats it, e.g. 2, 0, search)")
    return "\n".join(lines)


def build_instruction(text_style: str = "balrog") -> str:
    """The full system prompt for NetHack (our words, BALROG's content: actions with glosses, tips);
    ``text_style`` is the observation text it explains (a key of :data:`SURROUNDINGS_HELP`)."""
    return (
        "You are an agent playing NetHack, a dungeon exploration game. Your goal is to get as far as "
        "possible in the game: go down to deeper dungeon levels and gain experience levels, and stay "
        "alive.\n\n"
        f"Each turn you get the game message, {SURROUNDINGS_HELP[text_style]}, and the "
        "screen as text: @ is you, letters are monsters, > and < are staircases, . floor, # corridors, "
        "| and - walls, + doors or spellbooks; the two last lines are your status (Dlvl is the dungeon "
        "level, HP your hit points, Xp your experience level). Your inventory is shown with the current "
        "observation.\n\n"
        f"Actions:\n{_action_lines()}\n\n"
        "Tips:\n"
        '- When the message asks for an item, e.g. "What do you want to eat? [fg or ?*]", answer with '
        "the letter of the item (here f or g).\n"
        '- When the message asks "In what direction?", answer with a direction (north, southwest ...).\n'
        "- Messages ending in --More-- are dismissed for you; use esc to leave a menu or cancel a prompt.\n"
        "- Explore the level to find the staircase down (>), stand on it and use down.\n"
        "- Attack monsters by moving into them. Eat when you are Hungry. Pray only in real trouble.\n"
        '- Read the message carefully. If you keep walking into a wall ("It\'s a wall", "It\'s solid '
        'stone"), choose another direction.\n\n'
        "Think briefly if you want, then end your reply with one line of the form\n"
        "ACTION: <action>\n"
        "where <action> is exactly one of the actions above (a single letter keeps its case)."
    )


def build_brief_instruction() -> str:
    """A short system prompt: the goal, the actions and the reply format."""
    return (
        "NetHack: go as deep as you can and gain levels; stay alive. Actions: "
        + ", ".join(NLE_NAMED_ACTIONS)
        + ", or one letter a-z/A-Z or digit 0-9. Reply with ACTION: <action>."
    )


INSTRUCTION_STYLES = {"full": build_instruction, "brief": build_brief_instruction}

_FIRST_ALNUM = re.compile(r"[^\W_]")


def _written_letter(reply: str) -> str | None:
    """The first letter/digit after the last action marker (or of the reply), as written."""
    text = after_last_marker(reply)
    if text is None:
        text = reply
    found = _FIRST_ALNUM.search(text)
    return found.group() if found else None


class NLETextEnv(NetHackTextEnvBase):
    """NetHackChallenge as a text env (see the module docstring).

    Args:
        max_steps: step limit (``None``: BALROG's 100,000).
        format_penalty: added to the reward of a step whose reply held no valid action (<= 0).
        instruction_style: ``"full"`` or ``"brief"``.
        stuck_limit: truncate after this many consecutive steps without the turn counter advancing
            (``None`` disables it); BALROG's 150 by default.
        env_kwargs: extra NetHackChallenge constructor arguments over BALROG's (e.g.
            ``{"character": "val-hum-neu-fem"}``).
        text_style: ``"balrog"`` (BALROG's text, :mod:`verlog.envs.nethack_balrog_text`) or ``"tidy"``
            (Verlog's own, :mod:`verlog.envs.nethack_text`).

    Raises:
        ValueError / TypeError: bad arguments.
    """

    def __init__(
        self,
        *,
        max_steps: int | None = None,
        format_penalty: float = 0.0,
        instruction_style: str = "full",
        stuck_limit: int | None = STUCK_LIMIT,
        env_kwargs: Mapping[str, Any] | None = None,
        text_style: str = "balrog",
    ) -> None:
        build_prompt = instruction_builder(INSTRUCTION_STYLES, instruction_style)
        if stuck_limit is not None:
            if isinstance(stuck_limit, bool) or not isinstance(stuck_limit, int):
                raise TypeError(f"stuck_limit must be an int or None, got {type(stuck_limit).__name__}")
            if stuck_limit < 1:
                raise ValueError(f"stuck_limit must be >= 1, got {stuck_limit}")
        extra = dict(env_kwargs or {})
        reserved = {"observation_keys", "max_episode_steps", "no_progress_timeout", "actions"} & set(extra)
        if reserved:
            raise ValueError(f"env_kwargs must not set {sorted(reserved)} (the text env controls them)")
        kwargs = {
            **BALROG_NLE_KWARGS,
            "max_episode_steps": NATIVE_STEP_LIMIT,
            "no_progress_timeout": NATIVE_STEP_LIMIT,
            "fix_moon_phase": True,
            **extra,
        }
        env = make_nle_env("NetHackChallenge-v0", kwargs)
        # NetHackChallenge replaces the seed setters of its Nethack object by functions that raise;
        # removing those instance attributes restores the class methods (this object only).
        for name in ("set_initial_seeds", "set_current_seeds", "get_current_seeds"):
            vars(env.nethack).pop(name, None)
        super().__init__(
            env,
            NLE_ACTION_NAMES,
            max_steps=NLE_MAX_STEPS if max_steps is None else max_steps,
            format_penalty=format_penalty,
            text_style=text_style,
        )
        self.env_id = "NetHackChallenge-v0"
        self.env_kwargs = kwargs
        self.stuck_limit = stuck_limit
        # the same for every episode
        self._instruction = build_prompt(text_style) if build_prompt is build_instruction else build_prompt()
        # For parsing: letters once (lower case), the case is recovered from the reply.
        self._parse_set = NLE_NAMED_ACTIONS + LETTER_ACTIONS[:26] + DIGIT_ACTIONS
        self._stuck_steps = 0
        self._turn = -1
        self._max_depth = 0
        self._max_xp = 0
        self._last_levels = (0, 0)
        self._progression = 0.0
        self._blstats: list[int] = []  # the current blstats as Python ints

    #: ``"esc"`` (BALROG's NetHack default).
    default_action = DEFAULT_ACTION

    # -------------------------------------------------------------- TextEnv properties
    @property
    def progression(self) -> float:
        """The maximum of :func:`progression_of` over the episode's states so far (NetHack has no
        success short of ascending, so ``success`` is the default ``progression >= 1``)."""
        return self._progression

    @property
    def stuck_steps(self) -> int:
        """Consecutive steps (so far) in which the in-game turn counter did not advance."""
        return self._stuck_steps

    def _parse_reply(self, reply: str) -> str | None:
        """The shared rule (:func:`~verlog.envs.parsing.extract_action`), keeping a letter's case."""
        action = extract_action(reply, self._parse_set)
        if action is not None and len(action) == 1 and action.isalpha():
            written = _written_letter(reply)
            if written is not None and written.lower() == action:
                return written
        return action

    # -------------------------------------------------------------- game
    def _on_observation(self, reset: bool, reward: float, done: bool, end_status: int) -> None:
        blstats = self._blstats = self._obs["blstats"].tolist()  # Python ints: cheaper than numpy scalars
        turn = blstats[nethack.NLE_BL_TIME]
        if reset:
            self._stuck_steps = 0
            self._max_depth = self._max_xp = 0
            self._last_levels = (0, 0)
            self._progression = 0.0
        elif turn == self._turn:
            self._stuck_steps += 1
        else:
            self._stuck_steps = 0
        self._turn = turn
        depth, xp = blstats[nethack.NLE_BL_DEPTH], blstats[nethack.NLE_BL_XP]
        if depth > self._max_depth or xp > self._max_xp:  # the table grows with the level
            self._max_depth = max(self._max_depth, depth)
            self._max_xp = max(self._max_xp, xp)
        if (depth, xp) != self._last_levels:
            self._last_levels = (depth, xp)
            self._progression = max(self._progression, progression_of(depth, xp))

    def _extra_info(self) -> dict[str, Any]:
        info = super()._extra_info()
        info["stuck_steps"] = self._stuck_steps
        info["max_depth"] = self._max_depth
        info["max_xp_level"] = self._max_xp
        info["score"] = self._blstats[nethack.NLE_BL_SCORE]
        return info

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super()._step_game(action)
        if not terminated and self.stuck_limit is not None and self._stuck_steps >= self.stuck_limit:
            truncated = True
        return obs, reward, terminated, truncated, info


register("nle/NetHackChallenge", NLETextEnv)
register("nle/default", NLETextEnv)
