"""Crafter (upstream ``crafter`` 1.8.3) as a :class:`~verlog.envs.base.TextEnv` that gives BALROG's text.

By default (``text_style="balrog"``) the observation (the long-term text, kept in the history) and
the context are byte for byte what BALROG's Crafter wrapper returns for the same game state, with
BALROG's default settings; :mod:`verlog.envs.crafter_balrog_text` states its rules, quirks included,
and ``tests/test_crafter_balrog.py`` checks them against a corpus of BALROG's own output. It
describes the part of the world that crafter's image shows around the player, 9 cells west-east by
7 cells north-south (north is up, crafter's ``-y``; east is right, ``+x``)::

    You see:
    - grass 1 step to your west
    - sand 3 steps to your north-west
    - tree 2 steps to your south-east

    You face grass at your front.

every kind in view (ground included) at its nearest cell, in the order a column-by-column scan
from the west first meets the kinds; ``location_style="offset"`` writes the places as
``1 step south and 4 steps west`` (BALROG's ``precise_location`` setting).

``text_style="tidy"`` keeps Verlog's own, shorter wording (:mod:`verlog.envs.crafter_text`), e.g.
for small models trained from scratch, where every token of the history counts::

    You see:
    - tree 1 step north
    - water 2 steps south and 3 steps west

    You face grass at your front.

Its rules:

* ``You see:`` lists, for every kind of thing in view, only the NEAREST one (Manhattan distance; ties
  go to the more northern, then the more western cell), nearest first, then by name. Kinds are
  crafter's material names (``water``, ``stone``, ``tree``, ``lava``, ``coal``, ``iron``, ``diamond``,
  ``table``, ``furnace``) and creature/object names (``cow``, ``zombie``, ``skeleton``, ``arrow``,
  ``plant``). Walkable ground (``grass``, ``sand``, ``path``) is never listed (it is everywhere);
  cells outside the 64 x 64 map are not listed. With nothing to list the line is
  ``You see nothing nearby.``
* Offsets are written as ``location_style="offset"`` (the tidy default: north/south part first,
  e.g. ``1 step south and 4 steps west``) or ``"compass"`` (Manhattan distance plus a compass
  direction, ``5 steps to your south-west``: BALROG's default wording).
* ``You face <thing> at your front.`` names the creature/object on the cell the player faces, else
  its material (including ``grass``/``sand``/``path``), or ``nothing`` beyond the map's edge.
* The first line is ``You died.`` after the step that killed the player, and ``You are asleep: your
  actions have no effect until your energy is full or something hurts you.`` while asleep.

How the tidy text departs from BALROG's: the ground is not listed; kinds are sorted by distance, and
of equally near cells the northern one is named (BALROG: the first met by its scan, the western
one); places are offsets by default; the sleeping line is Verlog's, is followed by one blank line
(BALROG: three) and gives way to the death line (BALROG's sleeping line wins); a window at the map's
west or north edge is cut at the edge (BALROG's comes out empty there); ``You see nothing nearby.``
for an empty list; item names in the context have spaces (``wood pickaxe``).

Context (current-only, :attr:`CrafterTextEnv.context`; BALROG's short-term text) is the vitals and the
inventory::

    Your status:
    - health: 9/9
    - food: 9/9
    - drink: 8/9
    - energy: 9/9

    Your inventory:
    - wood: 2
    - wood_pickaxe: 1

(``You have nothing in your inventory.`` when it is empty); items in crafter's order under crafter's
names, as BALROG writes them (``wood pickaxe`` in the tidy style).

Actions are BALROG's 17 names (:data:`CRAFTER_ACTIONS`), mapped onto crafter's own action list by name:
``Noop``, ``Move West``, ``Move East``, ``Move North``, ``Move South``, ``Do``, ``Sleep``,
``Place Stone``, ``Place Table``, ``Place Furnace``, ``Place Plant``, ``Make Wood Pickaxe``,
``Make Stone Pickaxe``, ``Make Iron Pickaxe``, ``Make Wood Sword``, ``Make Stone Sword``,
``Make Iron Sword``. The default (for invalid replies) is ``Noop``.

Reward is crafter's own: +1 on a step that unlocks at least one achievement for the first time in the
episode, plus (health change) / 10. Progression is (achievements unlocked) / 22; success means all 22.
The episode terminates when the player dies (health 0) and is truncated at ``max_steps`` (2000 by
default: BALROG's step cap); crafter's own ``length`` limit is disabled so that it never ends an
episode on its own. Extra ``info`` keys: ``achievements`` (sorted list of the unlocked achievement
names), ``new_achievements`` (those unlocked by this step) and ``episode_seed`` (the int that
reproduces this episode through ``reset(seed=episode_seed)``).

:attr:`CrafterTextEnv.state_key` (GiGPO's anchor states) is the exact state of the whole world, not
only of the view, as a 32-byte digest.

**Reset takes one Noop step**, as BALROG's wrapper does (it steps once to obtain crafter's info
dict): the first observation is the world after that step (creatures have moved once, crafter's
clock reads 1), which changes the first text for some seeds (3 of seeds 0-19). That step is not an episode step
(``episode_step`` is 0 after reset and ``max_steps`` counts the agent's steps only) and its reward
(always 0: health is full and no achievement can unlock) is dropped, as BALROG drops it. Both text
styles do this, so a seed gives the same game as under BALROG whatever the wording.

**Seeding.** Every episode has an ``episode_seed``: ``reset(seed=s)`` uses ``s``; ``reset()`` draws
one from the env's gymnasium RNG (``self.np_random``, seeded by the last seeded reset, else by the
OS). Crafter's world then gets the seed ``hash((episode_seed, 1)) % (2**31 - 1)``, exactly what
``crafter.Env(seed=episode_seed).reset()`` uses for its first episode, and ONE
``numpy.random.RandomState`` made from it (``world.random``) drives all of crafter's randomness:
terrain and creature placement at world generation, every cow/zombie/skeleton move and skeleton
shot, creature (de)spawning every 10 steps, the 10 % chance that ``Do`` on grass yields a sapling,
and the noise of crafter's night-time image (see speed, below). ``hash`` of a tuple of ints is the
same in every process (``PYTHONHASHSEED`` affects only str/bytes), so ``reset(seed=s)`` followed by
the same actions replays the same episode in any process. Two upstream facts make this necessary:

1. ``crafter.Env(seed=None)`` draws its seed from numpy's GLOBAL RNG at construction and later
   episodes use ``hash((seed, episode_number))``, so a seed logged by BALROG does not identify a
   world (and forked workers share one global RNG state). We never let crafter draw a seed.
2. Even with a fixed seed crafter 1.8.3 is not reproducible: its despawn step picks
   ``creatures[random.randint(0, n)]`` from a list built by iterating a ``set`` of creature objects,
   whose order follows their memory addresses. Two runs with the same seed and actions diverge as
   early as step 10 (measured). We replace the world's per-chunk object sets with insertion-ordered
   ones (:func:`~verlog.envs.crafter_game.make_world_deterministic`); with that, same seed + same
   actions = same episode. This is the only change to crafter's game logic, and it only fixes an
   order crafter leaves arbitrary.

**Speed.** crafter renders an RGB frame after every step (``Env._obs``) although the text needs
none. :class:`~verlog.envs.crafter_game.TextOnlyCrafter` skips the drawing; because crafter's
renderer draws noise from ``world.random`` at night (``daylight < 0.5``), it draws the same amount of
numbers (an array the shape of the frame's world view) so that the random stream, and therefore the
whole episode, is identical to crafter's. BALROG renders each state twice (in crafter's ``step``,
and again for the image of its observation dict), so after every crafter step (the reset's Noop
included) the env draws that noise once more. ``image_size`` is BALROG's ``(256, 256)`` unless given
(the world's dynamics are the same in distribution for any size; with another size the night-time
stream, and so the episode, differs from BALROG's). ``tests/test_crafter.py`` checks this equality
with a rendering ``crafter.Env`` step by step, ``tests/test_crafter_balrog.py`` the text against
BALROG's own output, and ``benchmarks/bench_env_crafter.py`` measures the speed-up.

Departures from BALROG, in both styles: the episode's world comes from ``episode_seed`` (BALROG's
crafter draws its seed from numpy's global RNG, see Seeding) and creatures are kept in insertion
order (see Seeding); BALROG's other settings (``unique_items``, ``skip_items``,
``edge_only_items``) are not offered, only its defaults.

Registered task: ``crafter/default``.
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

from verlog.envs.base import TextEnv, require_episode
from verlog.envs.crafter_game import (  # ACHIEVEMENTS and CRAFTER_ACTIONS are also this module's API
    ACHIEVEMENTS,
    ACTION_INDEX,
    CRAFTER_ACTIONS,
    DEFAULT_ACTION,
    TextOnlyCrafter,
    world_state_key,
)
from verlog.envs.crafter_balrog_text import describe_balrog_view
from verlog.envs.crafter_prompts import INSTRUCTION_STYLES
from verlog.envs.crafter_text import LOCATION_STYLES, describe_status, describe_view
from verlog.envs.options import instruction_builder, task_entry
from verlog.envs.registry import register

__all__ = [
    "ACHIEVEMENTS",
    "CRAFTER_ACTIONS",
    "CRAFTER_TASKS",
    "CrafterTextEnv",
    "TEXT_STYLES",
    "make_crafter",
]

#: task -> BALROG step limit.
CRAFTER_TASKS: dict[str, int] = {"default": 2000}
#: text style -> its location style when none is given: ``"balrog"`` (BALROG's text, byte for byte)
#: and ``"tidy"`` (Verlog's shorter wording); see the module docstring.
TEXT_STYLES: dict[str, str] = {"balrog": "compass", "tidy": "offset"}
#: The frame size of BALROG's crafter configuration, in pixels.
BALROG_IMAGE_SIZE: tuple[int, int] = (256, 256)


class CrafterTextEnv(TextEnv):
    """Crafter as a text env (see the module docstring for the text, reward and seeding conventions).

    Args:
        max_steps: step limit per episode (``None``: only death ends an episode).
        format_penalty: added to the reward of a step whose reply held no valid action (<= 0).
        instruction_style: ``"full"`` (BALROG's content) or ``"brief"`` (goal, actions, reply format).
        text_style: ``"balrog"`` (default: BALROG's text, byte for byte) or ``"tidy"`` (Verlog's
            shorter wording), see the module docstring.
        location_style: ``"compass"`` or ``"offset"`` (see
            :func:`~verlog.envs.crafter_text.describe_location`); ``None``: the text style's own
            (``compass`` for balrog, BALROG's default; ``offset`` for tidy).
        image_size: the frame size in pixels crafter would render, which sets how many random
            numbers its night noise draws (see the module docstring); BALROG's ``(256, 256)``.

    Attributes:
        crafter: the underlying ``crafter.Env`` subclass (for inspection and hand-made test states).

    Raises:
        ValueError / TypeError: bad arguments (the message names the argument).
    """

    def __init__(
        self,
        *,
        max_steps: int | None = CRAFTER_TASKS["default"],
        format_penalty: float = 0.0,
        instruction_style: str = "full",
        text_style: str = "balrog",
        location_style: str | None = None,
        image_size: tuple[int, int] = BALROG_IMAGE_SIZE,
    ) -> None:
        super().__init__(max_steps=max_steps, format_penalty=format_penalty)
        build_prompt = instruction_builder(INSTRUCTION_STYLES, instruction_style)
        if text_style not in TEXT_STYLES:
            raise ValueError(f"text_style must be one of {list(TEXT_STYLES)}, got {text_style!r}")
        if location_style is None:
            location_style = TEXT_STYLES[text_style]
        if location_style not in LOCATION_STYLES:
            raise ValueError(f"location_style must be one of {list(LOCATION_STYLES)}, got {location_style!r}")
        self.text_style = text_style
        self.location_style = location_style
        self.crafter = TextOnlyCrafter(image_size)
        grid = self.crafter._local_view._grid
        self._view = (int(grid[0]), int(grid[1]))  # (9, 7): the world part of crafter's image
        self._instruction = build_prompt(self._view, text_style, location_style)  # the same for every episode
        self._episode_seed: int | None = None

    #: BALROG's 17 action names (:data:`CRAFTER_ACTIONS`).
    fixed_actions = tuple(CRAFTER_ACTIONS)
    #: ``"Noop"`` (BALROG's default for Crafter).
    default_action = DEFAULT_ACTION

    # -------------------------------------------------------------- TextEnv properties
    @property
    def achievements(self) -> list[str]:
        """Sorted names of the achievements unlocked in this episode (``[]`` before the first reset)."""
        unlocked = self.crafter._unlocked
        return sorted(unlocked) if unlocked else []

    @property
    def progression(self) -> float:
        """Unlocked achievements / 22."""
        return len(self.achievements) / len(ACHIEVEMENTS)

    @property
    def episode_seed(self) -> int:
        """The seed of the current episode (``reset(seed=episode_seed)`` replays it). RuntimeError before reset."""
        return require_episode(self._episode_seed)

    @property
    def context(self) -> str:
        """Vitals and inventory (:func:`~verlog.envs.crafter_text.describe_status`). RuntimeError before reset."""
        item_names = "crafter" if self.text_style == "balrog" else "spaces"
        return describe_status(self._player().inventory, item_names=item_names)

    @property
    def state_key(self) -> bytes:
        """The exact state of the whole world, as a 32-byte digest
        (:func:`~verlog.envs.crafter_game.world_state_key`): the clock, the player (position, facing,
        sleep, inventory and vitals, hidden hunger/thirst/fatigue counters, unlocked achievements),
        every creature, arrow and plant with its health and timers, and the whole material map.

        The whole world rather than the player's 9 x 7 view: placed tables, mined blocks and creatures
        out of sight shape what follows, and a key must never merge two different states (separating
        two equal ones only loses grouping). Left out: crafter's random stream (the chance in a state,
        not the state) and the episode's step limit.

        Raises:
            RuntimeError: before the first reset.
        """
        self._player()
        return world_state_key(self.crafter)

    def _player(self):
        return require_episode(self.crafter._player)

    def describe(self) -> str:
        """The text observation of the current state (no invalid-action notice). RuntimeError before reset."""
        describe = describe_balrog_view if self.text_style == "balrog" else describe_view
        return describe(self.crafter._world, self._player(), self._view, self.location_style)

    # -------------------------------------------------------------- game
    def _extra_info(self, new: Sequence[str]) -> dict[str, Any]:
        return {"achievements": self.achievements, "new_achievements": list(new), "episode_seed": self.episode_seed}

    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        if seed is None:
            seed = int(self.np_random.integers(0, 2**31 - 1))
        self._episode_seed = int(seed)
        self.crafter.reset_with_seed(self._episode_seed)
        self._crafter_step(DEFAULT_ACTION)  # BALROG's Noop at reset (module docstring); its reward is dropped
        return self.describe(), self._extra_info([])

    def _crafter_step(self, action: str) -> tuple[float, bool]:
        """One crafter step as BALROG runs it: crafter's ``step``, then the noise of BALROG's second render."""
        _, reward, done, _ = self.crafter.step(ACTION_INDEX[action])
        self.crafter.draw_render_noise()
        return float(reward), bool(done)

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        before = set(self.crafter._unlocked)
        reward, done = self._crafter_step(action)
        dead = self.crafter._player.health <= 0
        if bool(done) != dead:  # crafter's length limit is off: only death may end the game
            raise RuntimeError(f"crafter reported done={done} but player health is {self.crafter._player.health}")
        new = sorted(self.crafter._unlocked - before)
        return self.describe(), reward, dead, False, self._extra_info(new)


def make_crafter(
    task: str = "default",
    *,
    max_steps: int | None = None,
    format_penalty: float = 0.0,
    instruction_style: str = "full",
    text_style: str = "balrog",
    location_style: str | None = None,
    image_size: tuple[int, int] = BALROG_IMAGE_SIZE,
) -> CrafterTextEnv:
    """Build the Crafter task ``task`` (a key of :data:`CRAFTER_TASKS`).

    Args:
        task: ``"default"`` (BALROG's only Crafter task: the standard 64 x 64 world).
        max_steps: step limit; ``None`` uses BALROG's 2000.
        format_penalty: see :class:`~verlog.envs.base.TextEnv`.
        instruction_style: ``"full"`` or ``"brief"``.
        text_style: ``"balrog"`` (default) or ``"tidy"``, see :class:`CrafterTextEnv`.
        location_style: ``"compass"``, ``"offset"`` or ``None`` (the text style's own), see
            :class:`CrafterTextEnv`.
        image_size: see :class:`CrafterTextEnv` (the default is BALROG's configuration).

    Raises:
        ValueError: unknown task (the message lists the known ones), or bad arguments.
        TypeError: arguments of the wrong type.
    """
    default_steps = task_entry(CRAFTER_TASKS, task, "Crafter")
    return CrafterTextEnv(
        max_steps=default_steps if max_steps is None else max_steps,
        format_penalty=format_penalty,
        instruction_style=instruction_style,
        text_style=text_style,
        location_style=location_style,
        image_size=image_size,
    )


for _task in CRAFTER_TASKS:
    register(f"crafter/{_task}", functools.partial(make_crafter, _task))
