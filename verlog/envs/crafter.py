"""Crafter (upstream ``crafter`` 1.8.3) as a :class:`~verlog.envs.base.TextEnv`, in BALROG's text conventions.

Observation (the long-term text, kept in the history) describes the part of the world that crafter's
own image shows around the player: 9 cells west-east by 7 cells north-south, centred on the player.
North is up (crafter's ``-y``), east is right (``+x``); offsets count grid steps::

    You see:
    - tree 1 step north
    - water 2 steps south and 3 steps west
    - cow 4 steps east

    You face grass at your front.

* ``You see:`` lists, for every kind of thing in view, only the NEAREST one (Manhattan distance; ties
  go to the more northern, then the more western cell), nearest first, then by name. Kinds are
  crafter's material names (``water``, ``stone``, ``tree``, ``lava``, ``coal``, ``iron``, ``diamond``,
  ``table``, ``furnace``) and creature/object names (``cow``, ``zombie``, ``skeleton``, ``arrow``,
  ``plant``). Walkable ground (``grass``, ``sand``, ``path``) is never listed (it is everywhere);
  cells outside the 64 x 64 map are not listed. With nothing to list the line is
  ``You see nothing nearby.``
* Offsets are written as ``location_style="offset"`` (the default, what BALROG's wrapper runs with:
  north/south part first, e.g. ``1 step south and 4 steps west``) or ``location_style="compass"``
  (SmartPlay's older form: Manhattan distance plus a compass direction, ``5 steps to your
  south-west``).
* ``You face <thing> at your front.`` names the creature/object on the cell the player faces, else
  its material (including ``grass``/``sand``/``path``), or ``nothing`` beyond the map's edge.
* The first line is ``You died.`` after the step that killed the player, and ``You are asleep: your
  actions have no effect until your energy is full or something hurts you.`` while asleep.

Context (current-only, :attr:`CrafterTextEnv.context`; BALROG's short-term text) is the vitals and the
inventory::

    Your status:
    - health: 9/9
    - food: 9/9
    - drink: 8/9
    - energy: 9/9

    Your inventory:
    - wood: 2
    - wood pickaxe: 1

(``You have nothing in your inventory.`` when it is empty).

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
   ones (:class:`_OrderedObjects`); with that, same seed + same actions = same episode. This is the
   only change to crafter's game logic, and it only fixes an order crafter leaves arbitrary.

**Speed.** crafter renders an RGB frame after every step (``Env._obs``) although the text needs
none. :class:`_TextOnlyCrafter` skips the drawing; because crafter's renderer draws noise from
``world.random`` at night (``daylight < 0.5``), it draws the same amount of numbers (an array the
shape of the frame's world view) so that the random stream, and therefore the whole episode, is
identical to ``crafter.Env(size=image_size)`` (with ordered object sets); ``image_size`` is crafter's
default ``(64, 64)`` unless given (BALROG configures ``(256, 256)``; the world's dynamics are the same
in distribution for any size). ``tests/test_crafter.py`` checks this equality step by step, and
``benchmarks/bench_env_crafter.py`` measures the speed-up.

Departures from BALROG's wrapper (balrog/environments/crafter/env.py): no Noop step at reset (BALROG
took one only to obtain crafter's info dict); "You face" names grass/sand/path instead of
"nothing" (``Place Plant`` needs grass, ``Place Table`` needs walkable ground); the nearest thing of a
kind is chosen by full Manhattan distance (BALROG compared only the first number of the offset
text); things beyond the map edge are skipped (BALROG's crop shifted there); the list is sorted by
distance (BALROG listed kinds in the order its column-by-column scan first met them).

Registered task: ``crafter/default``.
"""

from __future__ import annotations

import collections
import functools
from typing import Any, Iterable, Mapping, Sequence

import crafter
import numpy as np
from crafter import constants, engine

from verlog.envs.base import TextEnv, require_episode
from verlog.envs.registry import register
from verlog.envs.wording import steps

__all__ = [
    "ACHIEVEMENTS",
    "CRAFTER_ACTIONS",
    "CRAFTER_TASKS",
    "CrafterTextEnv",
    "LOCATION_STYLES",
    "build_brief_instruction",
    "build_instruction",
    "describe_location",
    "describe_status",
    "describe_surroundings",
    "make_crafter",
    "make_world_deterministic",
]

#: BALROG action name -> crafter's action name (looked up in ``crafter.constants.actions`` by name).
CRAFTER_ACTIONS: dict[str, str] = {
    "Noop": "noop",
    "Move West": "move_left",
    "Move East": "move_right",
    "Move North": "move_up",
    "Move South": "move_down",
    "Do": "do",
    "Sleep": "sleep",
    "Place Stone": "place_stone",
    "Place Table": "place_table",
    "Place Furnace": "place_furnace",
    "Place Plant": "place_plant",
    "Make Wood Pickaxe": "make_wood_pickaxe",
    "Make Stone Pickaxe": "make_stone_pickaxe",
    "Make Iron Pickaxe": "make_iron_pickaxe",
    "Make Wood Sword": "make_wood_sword",
    "Make Stone Sword": "make_stone_sword",
    "Make Iron Sword": "make_iron_sword",
}
DEFAULT_ACTION = "Noop"


def _action_indices() -> dict[str, int]:
    """BALROG action name -> index in crafter's action space; fails loudly if crafter's list changed."""
    upstream = list(constants.actions)
    missing = sorted(set(CRAFTER_ACTIONS.values()) - set(upstream))
    if missing or len(upstream) != len(CRAFTER_ACTIONS):
        raise ImportError(
            f"crafter's action list {upstream} does not match the 17 BALROG actions (missing {missing}); "
            "verlog.envs.crafter was written for crafter 1.8.3"
        )
    return {name: upstream.index(crafter_name) for name, crafter_name in CRAFTER_ACTIONS.items()}


_ACTION_INDEX: dict[str, int] = _action_indices()

#: crafter's 22 achievements, in crafter's order.
ACHIEVEMENTS: tuple[str, ...] = tuple(constants.achievements)
if len(ACHIEVEMENTS) != 22:
    raise ImportError(f"crafter lists {len(ACHIEVEMENTS)} achievements, expected 22 (crafter 1.8.3)")

#: task -> BALROG step limit.
CRAFTER_TASKS: dict[str, int] = {"default": 2000}

#: The ways offsets can be written (see the module docstring).
LOCATION_STYLES: tuple[str, ...] = ("offset", "compass")

VITALS: tuple[str, ...] = ("health", "food", "drink", "energy")
#: Walkable ground, never listed under "You see" (it covers most of the view).
HIDDEN_KINDS: frozenset[str] = frozenset({"grass", "sand", "path"})

_ASLEEP = "You are asleep: your actions have no effect until your energy is full or something hurts you."
_DIED = "You died."


# ----------------------------------------------------------------------------- pure text functions
def describe_location(dx: int, dy: int, style: str = "offset") -> str:
    """Where a cell at offset ``(dx, dy)`` from the player is, in words.

    Args:
        dx: cells east of the player (negative: west).
        dy: cells south of the player (negative: north), crafter's ``y`` axis.
        style: ``"offset"`` (``"1 step south and 4 steps west"``) or ``"compass"``
            (``"5 steps to your south-west"``: Manhattan distance and direction).

    Raises:
        ValueError: ``(0, 0)`` (the player's own cell) or an unknown ``style``.
    """
    if style not in LOCATION_STYLES:
        raise ValueError(f"location style must be one of {LOCATION_STYLES}, got {style!r}")
    if dx == 0 and dy == 0:
        raise ValueError("offset (0, 0) is the player's own cell")
    vertical = "north" if dy < 0 else "south" if dy > 0 else ""
    horizontal = "west" if dx < 0 else "east" if dx > 0 else ""
    if style == "offset":
        parts = []
        if vertical:
            parts.append(f"{steps(abs(dy))} {vertical}")
        if horizontal:
            parts.append(f"{steps(abs(dx))} {horizontal}")
        return " and ".join(parts)
    direction = "-".join(part for part in (vertical, horizontal) if part)
    return f"{steps(abs(dx) + abs(dy))} to your {direction}"


def describe_surroundings(
    things: Iterable[tuple[str, int, int]], facing: str, *, location_style: str = "offset"
) -> str:
    """The "You see" list and the "You face" line.

    Args:
        things: ``(kind, dx, dy)`` for every visible cell's content except the player's own cell:
            the creature/object name if one is there, else the material name; offsets as in
            :func:`describe_location`. Kinds in :data:`HIDDEN_KINDS` are ignored.
        facing: what is on the cell the player faces (any name, ``"nothing"`` off the map).
        location_style: see :func:`describe_location`.

    Returns:
        ``"You see:\\n- <kind> <where>\\n...\\n\\nYou face <facing> at your front."``, one line per kind
        (its nearest cell; ties: northern, then western first), sorted by distance then kind.

    Raises:
        ValueError: unknown ``location_style`` or a thing at offset ``(0, 0)``.
    """
    if location_style not in LOCATION_STYLES:
        raise ValueError(f"location_style must be one of {LOCATION_STYLES}, got {location_style!r}")
    nearest: dict[str, tuple[int, int, int]] = {}
    for kind, dx, dy in things:
        if kind in HIDDEN_KINDS:
            continue
        if dx == 0 and dy == 0:
            raise ValueError(f"{kind!r} at offset (0, 0): the player's own cell is not described")
        key = (abs(dx) + abs(dy), dy, dx)
        if kind not in nearest or key < nearest[kind]:
            nearest[kind] = key
    if nearest:
        ordered = sorted(nearest.items(), key=lambda item: (item[1][0], item[0]))
        lines = [f"- {kind} {describe_location(dx, dy, location_style)}" for kind, (_, dy, dx) in ordered]
        seen = "You see:\n" + "\n".join(lines)
    else:
        seen = "You see nothing nearby."
    return f"{seen}\n\nYou face {facing} at your front."


def describe_status(inventory: Mapping[str, int]) -> str:
    """The vitals (each out of crafter's maximum, 9) and the non-empty inventory items.

    Args:
        inventory: crafter's player inventory (item name -> count), including the four vitals.

    Returns:
        ``"Your status:\\n- health: 9/9\\n...\\n\\nYour inventory:\\n- wood: 2"``; item names have
        spaces instead of underscores; ``"You have nothing in your inventory."`` when empty.

    Raises:
        KeyError: a vital is missing from ``inventory``.
    """
    status = "\n".join(f"- {name}: {inventory[name]}/{constants.items[name]['max']}" for name in VITALS)
    items = [
        f"- {name.replace('_', ' ')}: {count}" for name, count in inventory.items() if name not in VITALS and count > 0
    ]
    held = "Your inventory:\n" + "\n".join(items) if items else "You have nothing in your inventory."
    return f"Your status:\n{status}\n\n{held}"


# ----------------------------------------------------------------------------- instructions
def _words(name: str) -> str:
    return name.replace("_", " ")


def _uses(uses: Mapping[str, int]) -> str:
    return ", ".join(f"{count} {_words(item)}" for item, count in uses.items())


def _action_glosses() -> dict[str, str]:
    """Short help per action; requirements are read from crafter's own rules (``constants``)."""
    glosses = {
        "Noop": "do nothing",
        "Move West": "move one step west (you turn to face west even if the way is blocked)",
        "Move East": "move one step east (you turn to face east even if the way is blocked)",
        "Move North": "move one step north (you turn to face north even if the way is blocked)",
        "Move South": "move one step south (you turn to face south even if the way is blocked)",
        "Do": (
            "interact with what you face: collect a material (tree: wood; water: drink; grass: "
            "sometimes a sapling; stone and coal need a wood pickaxe, iron a stone pickaxe, diamond an "
            "iron pickaxe), hit a creature (cows give food when defeated), or eat a ripe plant"
        ),
        "Sleep": "go to sleep (only when your energy is below 9); you wake up when it is full again",
    }
    for name, info in constants.place.items():
        where = ", ".join(info["where"])
        glosses[f"Place {name.title()}"] = f"place a {name} on the cell you face ({where}); uses {_uses(info['uses'])}"
    for name, info in constants.make.items():
        nearby = " and a ".join(info["nearby"])
        article = "an" if name[0] in "aeiou" else "a"
        glosses[f"Make {_words(name).title()}"] = (
            f"craft {article} {_words(name)}; needs a {nearby} within one step of you (diagonals count) and "
            f"uses {_uses(info['uses'])}"
        )
    missing = set(CRAFTER_ACTIONS) ^ set(glosses)
    if missing:
        raise ImportError(f"no help text for crafter actions {sorted(missing)}")
    return {name: glosses[name] for name in CRAFTER_ACTIONS}


_ACTION_HELP: dict[str, str] = _action_glosses()


@functools.lru_cache(maxsize=4)
def build_instruction(view: tuple[int, int] = (9, 7)) -> str:
    """The system prompt of a Crafter episode (our own words, BALROG's content).

    Args:
        view: width (west-east) and height (north-south) of the described area, in cells.

    Returns:
        Text explaining the game and the observations, listing the 17 actions with short help and the
        22 achievements, giving survival tips, and asking for a final ``ACTION: <action>`` line.
    """
    width, height = view
    actions = "\n".join(f"- {name}: {help_}" for name, help_ in _ACTION_HELP.items())
    achievements = "\n".join(f"- {_words(name)}" for name in ACHIEVEMENTS)
    return (
        "You are playing Crafter, a 2D survival and crafting game on a grid world seen from above. Your "
        "goal is to unlock as many of the 22 achievements below as possible (each counts once): gather "
        "resources, craft tools and survive.\n\n"
        f"Each turn you are told what is around you in an area {width} cells wide (west to east) and "
        f"{height} cells high (north to south) centred on you: the nearest thing of each kind with its "
        'position relative to you, e.g. "tree 1 step north and 2 steps west", and what you face '
        "(the cell you would act on). Your health, food, drink and energy (each out of 9) and your "
        "inventory are shown with the current observation.\n\n"
        f"Actions:\n{actions}\n\n"
        f"Achievements:\n{achievements}\n\n"
        "Tips:\n"
        "- You act on the cell you face: move towards a thing until you face it, then use Do.\n"
        "- Food, drink and energy go down over time; when one of them is 0 you lose health, otherwise "
        "health slowly comes back. Eat cows, drink water, sleep when your energy is low.\n"
        "- Zombies (on grass, more at night) and skeletons (in cave tunnels, they shoot arrows) attack "
        "you; walking into lava kills you. Fight with Do, or block them with stone.\n"
        "- Place a table to craft wood tools; stone tools need stone; iron tools need a table and a "
        "furnace next to you.\n"
        "- If an action does not change anything, do not repeat it; try something else.\n\n"
        "Think briefly if you want, then end your reply with one line of the form\n"
        "ACTION: <action>\n"
        "where <action> is exactly one of: " + ", ".join(CRAFTER_ACTIONS) + "."
    )


@functools.lru_cache(maxsize=4)
def build_brief_instruction(view: tuple[int, int] = (9, 7)) -> str:
    """A short system prompt: the goal, the actions and the reply format, nothing else.

    For small models trained from scratch, where :func:`build_instruction` would dominate every
    prompt. ``view`` is accepted for symmetry with :func:`build_instruction` and unused.
    """
    return (
        "Play Crafter: collect resources, craft tools and survive to unlock achievements. "
        f"Actions: {', '.join(CRAFTER_ACTIONS)}. Reply with ACTION: <action>."
    )


INSTRUCTION_STYLES = {"full": build_instruction, "brief": build_brief_instruction}


# ----------------------------------------------------------------------------- crafter, text-only
class _OrderedObjects(dict):
    """An insertion-ordered stand-in for the ``set`` crafter keeps per world chunk (values unused).

    crafter only calls ``add``, ``remove``, ``len`` and iteration on these sets; iterating a real set of
    objects follows their memory addresses, which made crafter's despawn choice irreproducible.
    """

    def add(self, obj: Any) -> None:
        self[obj] = None

    def remove(self, obj: Any) -> None:
        del self[obj]


class _OrderedWorld(engine.World):
    """crafter's world with insertion-ordered per-chunk object sets; otherwise unchanged."""

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._chunks = collections.defaultdict(_OrderedObjects)


def make_world_deterministic(game: crafter.Env) -> None:
    """Give a ``crafter.Env`` insertion-ordered chunk sets (takes effect from its next ``reset``).

    Used by :class:`_TextOnlyCrafter` and by tests/benchmarks to build the bare reference env.

    Raises:
        TypeError: ``game`` is not a ``crafter.Env`` or its world is not crafter's ``World``.
    """
    if not isinstance(game, crafter.Env) or type(game._world) not in (engine.World, _OrderedWorld):
        raise TypeError(f"expected a crafter.Env with crafter's World, got {type(game).__name__}")
    game._world.__class__ = _OrderedWorld


class _TextOnlyCrafter(crafter.Env):
    """``crafter.Env`` that renders no frame but keeps the random stream of one that does.

    ``step``/``reset`` are crafter's own; only ``_obs`` (which crafter calls to render the returned
    image) is replaced: it returns ``None`` and, at night, draws the numbers crafter's renderer would
    have drawn from ``world.random`` for its noise (``uniform(32, 127, world_view_pixels)``).
    ``render()`` still works for debugging, but like crafter's it draws that noise at night, so an
    extra call changes the rest of the episode.
    """

    def __init__(self, image_size: tuple[int, int]) -> None:
        # seed=0: crafter must not draw a seed from numpy's global RNG; each episode sets its own.
        super().__init__(area=(64, 64), view=(9, 9), size=image_size, reward=True, length=None, seed=0)
        make_world_deterministic(self)
        unit = self._size // self._view
        self._noise_shape = tuple(int(n) for n in self._local_view._grid * unit)

    def _obs(self) -> None:
        if self._world.daylight < 0.5:  # engine.LocalView._light draws noise only then
            self._world.random.uniform(32, 127, self._noise_shape)
        return None

    def reset_with_seed(self, episode_seed: int) -> None:
        """Start the episode that ``crafter.Env(seed=episode_seed).reset()`` would start first."""
        self._seed = episode_seed
        self._episode = 0
        self.reset()


def _check_image_size(image_size: Any) -> tuple[int, int]:
    if not isinstance(image_size, (tuple, list)) or len(image_size) != 2:
        raise TypeError(f"image_size must be a (width, height) pair of ints, got {image_size!r}")
    if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) for n in image_size):
        raise TypeError(f"image_size must be a (width, height) pair of ints, got {image_size!r}")
    if any(n < 9 for n in image_size):
        raise ValueError(f"image_size must be at least (9, 9) pixels (one per view cell), got {image_size!r}")
    return int(image_size[0]), int(image_size[1])


class CrafterTextEnv(TextEnv):
    """Crafter as a text env (see the module docstring for the text, reward and seeding conventions).

    Args:
        max_steps: step limit per episode (``None``: only death ends an episode).
        format_penalty: added to the reward of a step whose reply held no valid action (<= 0).
        instruction_style: ``"full"`` (BALROG's content) or ``"brief"`` (goal, actions, reply format).
        location_style: ``"offset"`` (default) or ``"compass"``, see :func:`describe_location`.
        image_size: the frame size crafter would render, which sets how many random numbers its night
            noise draws (see the module docstring); ``(64, 64)`` is crafter's default.

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
        location_style: str = "offset",
        image_size: tuple[int, int] = (64, 64),
    ) -> None:
        super().__init__(max_steps=max_steps, format_penalty=format_penalty)
        if instruction_style not in INSTRUCTION_STYLES:
            raise ValueError(
                f"instruction_style must be one of {sorted(INSTRUCTION_STYLES)}, got {instruction_style!r}"
            )
        if location_style not in LOCATION_STYLES:
            raise ValueError(f"location_style must be one of {list(LOCATION_STYLES)}, got {location_style!r}")
        self.location_style = location_style
        self.crafter = _TextOnlyCrafter(_check_image_size(image_size))
        grid = self.crafter._local_view._grid
        self._view = (int(grid[0]), int(grid[1]))  # (9, 7): the world part of crafter's image
        self._instruction = INSTRUCTION_STYLES[instruction_style](self._view)  # the same for every episode
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
        """Vitals and inventory (see :func:`describe_status`). RuntimeError before the first reset."""
        return describe_status(self._player().inventory)

    def _player(self):
        return require_episode(self.crafter._player)

    def describe(self) -> str:
        """The text observation of the current state (no invalid-action notice). RuntimeError before reset."""
        player = self._player()
        world = self.crafter._world
        px, py = int(player.pos[0]), int(player.pos[1])
        half_w, half_h = self._view[0] // 2, self._view[1] // 2
        x0, x1 = max(px - half_w, 0), min(px + half_w + 1, world.area[0])
        y0, y1 = max(py - half_h, 0), min(py + half_h + 1, world.area[1])
        materials = world._mat_map[x0:x1, y0:y1].tolist()
        occupants = world._obj_map[x0:x1, y0:y1].tolist()
        names, objects = world._mat_names, world._objects
        things = []
        for i, (mat_col, obj_col) in enumerate(zip(materials, occupants)):
            dx = x0 + i - px
            for j, (mat, occupant) in enumerate(zip(mat_col, obj_col)):
                dy = y0 + j - py
                if occupant:
                    if dx == 0 and dy == 0:
                        continue  # the player
                    things.append((type(objects[occupant]).__name__.lower(), dx, dy))
                else:
                    things.append((names[mat], dx, dy))
        material, obj = world[(px + player.facing[0], py + player.facing[1])]
        facing = type(obj).__name__.lower() if obj is not None else material if material is not None else "nothing"
        text = describe_surroundings(things, facing, location_style=self.location_style)
        if player.health <= 0:
            return f"{_DIED}\n\n{text}"
        if player.sleeping:
            return f"{_ASLEEP}\n\n{text}"
        return text

    # -------------------------------------------------------------- game
    def _extra_info(self, new: Sequence[str]) -> dict[str, Any]:
        return {"achievements": self.achievements, "new_achievements": list(new), "episode_seed": self.episode_seed}

    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        if seed is None:
            seed = int(self.np_random.integers(0, 2**31 - 1))
        self._episode_seed = int(seed)
        self.crafter.reset_with_seed(self._episode_seed)
        return self.describe(), self._extra_info([])

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        before = set(self.crafter._unlocked)
        _, reward, done, _ = self.crafter.step(_ACTION_INDEX[action])
        dead = self.crafter._player.health <= 0
        if bool(done) != dead:  # crafter's length limit is off: only death may end the game
            raise RuntimeError(f"crafter reported done={done} but player health is {self.crafter._player.health}")
        new = sorted(self.crafter._unlocked - before)
        return self.describe(), float(reward), dead, False, self._extra_info(new)


def make_crafter(
    task: str = "default",
    *,
    max_steps: int | None = None,
    format_penalty: float = 0.0,
    instruction_style: str = "full",
    location_style: str = "offset",
    image_size: tuple[int, int] = (64, 64),
) -> CrafterTextEnv:
    """Build the Crafter task ``task`` (a key of :data:`CRAFTER_TASKS`).

    Args:
        task: ``"default"`` (BALROG's only Crafter task: the standard 64 x 64 world).
        max_steps: step limit; ``None`` uses BALROG's 2000.
        format_penalty: see :class:`~verlog.envs.base.TextEnv`.
        instruction_style: ``"full"`` or ``"brief"``.
        location_style: ``"offset"`` or ``"compass"`` (see :func:`describe_location`).
        image_size: see :class:`CrafterTextEnv` (``(256, 256)`` replays BALROG's configuration exactly).

    Raises:
        ValueError: unknown task (the message lists the known ones), or bad arguments.
        TypeError: arguments of the wrong type.
    """
    if task not in CRAFTER_TASKS:
        raise ValueError(f"unknown Crafter task {task!r}; known tasks: {sorted(CRAFTER_TASKS)}")
    return CrafterTextEnv(
        max_steps=CRAFTER_TASKS[task] if max_steps is None else max_steps,
        format_penalty=format_penalty,
        instruction_style=instruction_style,
        location_style=location_style,
        image_size=image_size,
    )


for _task in CRAFTER_TASKS:
    register(f"crafter/{_task}", functools.partial(make_crafter, _task))
