"""The 40 Baba Is AI levels of BALROG, generated from a seed exactly as BALROG generates them.

Level names and their order are BALROG's task list (``balrog-ai/BALROG: balrog/config/config.yaml``,
``tasks.babaisai_tasks``, there prefixed with ``env/``). Each level family follows the generator of the
same name in ``nacloos/baba-is-ai: baba/envs.py``; the code here is our own. Upstream draws every random
choice from numpy's global legacy RNG, which BALROG's evaluator seeds with the episode's seed
(``np.random.seed(seed)``) just before ``reset``. We make the same draws, in the same order and with
the same calls, from a ``numpy.random.RandomState`` passed in (never the global one), so
``RandomState(seed)`` lays out BALROG's level for ``seed``, cell for cell: ``sample`` is upstream's
rejection sampling (a random cell of the region, drawn again while it is occupied) and fixed cell
lists are indexed without looking at what stands there.

Families (coordinates ``(x, y)``, ``y`` down, the solid edge ring included in the size):

* ``goto_win*`` / ``make_win*`` (one room, 8x8): ``baba is you`` on the bottom row at (1, 6),
  ``<obj1> is win`` on the top row at (1, 1); ``make_win`` moves the noun ``<obj1>`` to a random cell
  of the centre (x, y in 2..5), so the rule must be re-formed. Baba, obj1 (and obj2 with ``distr_obj``)
  stand anywhere below the top row. ``distr_rule`` adds the noun of obj2 (``irrelevant_rule``: of a
  third kind, obj3) on the bottom row's right part, the top row's right part or the right column,
  where it can never form a rule with ``is win``.
* ``two_room-*`` (13x9): a column of ``wall`` objects at x = 6 splits the map; ``wall is stop`` at
  (1, 2), ``baba is you`` at (1, 7), ``<obj1> is win`` at (9, 1); baba starts in the left room.
  ``goto_win``/``make_win`` break ``wall is stop`` (its ``is`` or ``stop`` moved into the left room) and
  put the objects in the left room; ``break_stop-*`` keep the walls solid and put the objects in the
  right room; ``maybe_break_stop`` puts them anywhere. ``make_win`` moves ``<obj1>`` into the right
  room. ``distr_win_rule`` adds an active ``<obj3> is win`` at (9, 4) for a kind that is absent.
  ``distr_rule`` adds obj2's noun on the right room's far column/bottom row (unpushable into a rule)
  or, without obj2 on the map, anywhere pushable in the right room.
* ``two_room-make_you`` / ``two_room-make_you-make_win``: ``wall is stop`` locked in the top-left
  corner, ``baba is you`` at (1, 6), obj1 and obj2 in the right room, obj2's noun in the left room:
  form ``<obj2> is you`` and walk obj2 onto obj1 (after re-forming ``<obj1> is win`` for make_win).
* ``two_room-make_wall_win``: the noun of ``<obj1> is win`` is moved to an unusable cell; break
  ``wall is stop`` (at (2, 2)), push its ``wall`` to (9, 1) to form ``wall is win``, touch a wall.

Upstream's quirks are kept: the ``distr_win_rule`` blocks are written last, on top of whatever already
stands at (9..11, 4) (a block there hides the item below it until it is pushed away), and a cell of a
fixed list may be one already used. Cells are stacks (the last item is on top).

Objects get a kind from ``ball``, ``key``, ``door`` (three distinct kinds for obj1/obj2/obj3) and a
colour from ``red``, ``blue``, ``green`` (independently, as upstream). Colours are part of the state
but no rule refers to them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verlog.envs.babaisai.items import IS, item_code, noun_code, property_code
from verlog.envs.babaisai.rules import BabaGame

__all__ = ["BABAISAI_LEVELS", "LEVEL_SPECS", "LevelSpec", "generate_level"]

#: BALROG's 40 Baba Is AI tasks, in its config order, without the ``env/`` prefix.
BABAISAI_LEVELS: tuple[str, ...] = (
    "make_win-distr_obj_rule",
    "goto_win-distr_obj_rule",
    "goto_win",
    "goto_win-distr_obj",
    "goto_win-distr_rule",
    "goto_win-distr_obj-irrelevant_rule",
    "make_win-distr_obj",
    "make_win-distr_rule",
    "make_win",
    "make_win-distr_obj-irrelevant_rule",
    "two_room-goto_win",
    "two_room-goto_win-distr_obj_rule",
    "two_room-goto_win-distr_rule",
    "two_room-goto_win-distr_obj",
    "two_room-goto_win-distr_obj-irrelevant_rule",
    "two_room-goto_win-distr_win_rule",
    "two_room-break_stop-goto_win-distr_obj_rule",
    "two_room-break_stop-goto_win-distr_obj",
    "two_room-break_stop-goto_win-distr_rule",
    "two_room-break_stop-goto_win-distr_obj-irrelevant_rule",
    "two_room-break_stop-goto_win",
    "two_room-maybe_break_stop-goto_win-distr_obj_rule",
    "two_room-maybe_break_stop-goto_win",
    "two_room-maybe_break_stop-goto_win-distr_obj",
    "two_room-maybe_break_stop-goto_win-distr_rule",
    "two_room-maybe_break_stop-goto_win-distr_obj-irrelevant_rule",
    "two_room-make_win-distr_obj_rule",
    "two_room-make_win-distr_rule",
    "two_room-make_win",
    "two_room-make_win-distr_obj-irrelevant_rule",
    "two_room-make_win-distr_obj",
    "two_room-make_win-distr_win_rule",
    "two_room-break_stop-make_win-distr_obj_rule",
    "two_room-break_stop-make_win-distr_rule",
    "two_room-break_stop-make_win",
    "two_room-break_stop-make_win-distr_obj-irrelevant_rule",
    "two_room-break_stop-make_win-distr_obj",
    "two_room-make_you",
    "two_room-make_you-make_win",
    "two_room-make_wall_win",
)

#: Kinds and colours drawn for obj1/obj2/obj3, in upstream's order.
_KINDS = ("ball", "key", "door")
_COLORS = ("red", "blue", "green")


@dataclass(frozen=True)
class LevelSpec:
    """How one level is generated (the switches of upstream's generators).

    Attributes:
        layout: ``"one_room"``, ``"two_room"``, ``"make_you"`` or ``"make_wall_win"``.
        break_win_rule: displace the noun of ``<obj1> is win`` (a make_win level).
        break_stop_rule: displace ``is`` or ``stop`` of ``wall is stop`` (two_room only).
        distractor_obj: put obj2 on the map.
        distractor_rule_block: put a distractor noun block on the map.
        irrelevant_rule_distractor: that block names obj3 (absent) instead of obj2.
        distractor_win_rule: add an active ``<obj3> is win`` rule (two_room only).
        obj_region: where obj1/obj2 stand in two_room levels: ``"left"``, ``"right"`` or ``"anywhere"``.
    """

    layout: str
    break_win_rule: bool = False
    break_stop_rule: bool = False
    distractor_obj: bool = True
    distractor_rule_block: bool = True
    irrelevant_rule_distractor: bool = False
    distractor_win_rule: bool = False
    obj_region: str = "anywhere"


_VARIANTS: dict[str, dict[str, bool]] = {
    "": dict(distractor_obj=False, distractor_rule_block=False),
    "-distr_obj": dict(distractor_obj=True, distractor_rule_block=False),
    "-distr_rule": dict(distractor_obj=False, distractor_rule_block=True),
    "-distr_obj_rule": dict(distractor_obj=True, distractor_rule_block=True),
    "-distr_obj-irrelevant_rule": dict(
        distractor_obj=True, distractor_rule_block=True, irrelevant_rule_distractor=True
    ),
    "-distr_win_rule": dict(distractor_obj=True, distractor_rule_block=True, distractor_win_rule=True),
}


def _build_specs() -> dict[str, LevelSpec]:
    specs: dict[str, LevelSpec] = {}
    families = {
        "goto_win": dict(layout="one_room"),
        "make_win": dict(layout="one_room", break_win_rule=True),
        "two_room-goto_win": dict(layout="two_room", break_stop_rule=True, obj_region="left"),
        "two_room-make_win": dict(layout="two_room", break_stop_rule=True, break_win_rule=True, obj_region="left"),
        "two_room-break_stop-goto_win": dict(layout="two_room", obj_region="right"),
        "two_room-maybe_break_stop-goto_win": dict(layout="two_room", obj_region="anywhere"),
        "two_room-break_stop-make_win": dict(layout="two_room", break_win_rule=True, obj_region="right"),
    }
    for family, base in families.items():
        for suffix, flags in _VARIANTS.items():
            specs[family + suffix] = LevelSpec(**base, **flags)
    specs["two_room-make_you"] = LevelSpec(layout="make_you")
    specs["two_room-make_you-make_win"] = LevelSpec(layout="make_you", break_win_rule=True)
    specs["two_room-make_wall_win"] = LevelSpec(layout="make_wall_win", irrelevant_rule_distractor=True)
    return {name: specs[name] for name in BABAISAI_LEVELS}


#: Level name -> its :class:`LevelSpec` (exactly the 40 names of :data:`BABAISAI_LEVELS`).
LEVEL_SPECS: dict[str, LevelSpec] = _build_specs()

Cell = tuple[int, int]
# Region = (x0, y0, w, h): cells x0 <= x < x0 + w, y0 <= y < y0 + h (clipped to the board).
Region = tuple[int, int, int, int]

# One room: the cells where the distractor noun may go (upstream's list, duplicates included).
_ONE_ROOM_DISTRACTOR_CELLS: tuple[Cell, ...] = (
    (4, 6), (5, 6), (6, 6), (4, 1), (5, 1), (6, 1), (6, 1), (6, 2), (6, 3), (6, 4), (6, 5), (6, 6),
)
# Two rooms (13x9): the right room's far column and bottom row, where a noun can never join a rule.
_RIGHT_UNPUSHABLE: tuple[Cell, ...] = tuple((11, 2 + i) for i in range(5)) + tuple((11 - i, 7) for i in range(4))


class _Builder:
    """A board under construction plus the level's RNG."""

    def __init__(self, width: int, height: int, rng: np.random.RandomState) -> None:
        self.game = BabaGame(width, height)
        self.rng = rng

    def is_free(self, cell: Cell) -> bool:
        x, y = cell
        idx = y * self.game.width + x
        return not self.game.solid[idx] and not self.game.cells[idx]

    def sample(self, region: Region) -> Cell:
        """A random free cell of ``region``: upstream's rejection sampling, draw for draw (x then y,
        each ``randint(low, high)`` over the region clipped to the board, again while occupied)."""
        x0, y0, w, h = region
        x1, y1 = min(x0 + w, self.game.width), min(y0 + h, self.game.height)
        if not any(self.is_free((x, y)) for y in range(y0, y1) for x in range(x0, x1)):
            raise RuntimeError(f"no free cell left in region {region}")
        while True:
            cell = (int(self.rng.randint(x0, x1)), int(self.rng.randint(y0, y1)))
            if self.is_free(cell):
                return cell

    def choose(self, cells: tuple[Cell, ...]) -> Cell:
        """A uniformly random entry of ``cells`` (occupied or not, as upstream)."""
        return cells[int(self.rng.choice(len(cells)))]

    def put(self, cell: Cell, code: int) -> Cell:
        self.game.add(cell[0], cell[1], code)
        return cell

    def place(self, code: int, region: Region) -> Cell:
        return self.put(self.sample(region), code)

    def put_rule(self, noun: str, prop: str, x: int, y: int) -> list[Cell]:
        """Write ``noun is prop`` horizontally from ``(x, y)``; return the three cells."""
        cells = [(x, y), (x + 1, y), (x + 2, y)]
        for cell, code in zip(cells, (noun_code(noun), IS, property_code(prop))):
            self.put(cell, code)
        return cells

    def move_block(self, src: Cell, dst: Cell) -> None:
        """Move the (single) text block of ``src`` to the free cell ``dst``."""
        (code,) = self.game.items_at(*src)
        self.game.remove(src[0], src[1], code)
        self.put(dst, code)

    def divider(self, x: int) -> None:
        """A full column of ``wall`` objects at ``x`` (between the edge rows)."""
        for y in range(1, self.game.height - 1):
            self.put((x, y), item_code("wall"))


def _sample_objects(rng: np.random.RandomState) -> list[tuple[str, str]]:
    """obj1, obj2, obj3: three distinct kinds, each with an independent random colour."""
    kinds = rng.choice(len(_KINDS), size=3, replace=False)
    colors = rng.choice(len(_COLORS), size=3, replace=True)
    return [(_KINDS[int(k)], _COLORS[int(c)]) for k, c in zip(kinds, colors)]


def _one_room(spec: LevelSpec, b: _Builder) -> str:
    obj1, obj2, obj3 = _sample_objects(b.rng)
    b.put_rule("baba", "you", 1, 6)
    win_cells = b.put_rule(obj1[0], "win", 1, 1)
    if spec.break_win_rule:
        b.move_block(win_cells[0], b.sample((2, 2, 4, 4)))
    if spec.distractor_rule_block:
        cell = b.choose(_ONE_ROOM_DISTRACTOR_CELLS)
        b.put(cell, noun_code(obj3[0] if spec.irrelevant_rule_distractor else obj2[0]))
    below_top_row = (1, 2, b.game.width, b.game.height)
    b.place(item_code("baba"), below_top_row)
    b.place(item_code(*obj1), below_top_row)
    if spec.distractor_obj:
        b.place(item_code(*obj2), below_top_row)
    goal = obj1[0]
    return f"make[{goal} is win], goto[{goal}]" if spec.break_win_rule else f"goto[{goal}]"


def _two_room(spec: LevelSpec, b: _Builder) -> str:
    width, height = b.game.width, b.game.height
    mid = width // 2
    area = (mid - 2, height - 6)
    left_pushable: Region = (2, 3, *area)
    right_pushable: Region = (mid + 1, 3, *area)
    regions: dict[str, Region] = {
        "left": (1, 1, mid - 2, height - 2),
        "right": (mid + 1, 2, mid - 2, height - 2),
        "anywhere": (1, 2, width - 2, height - 2),
    }
    b.divider(mid)
    obj1, obj2, obj3 = _sample_objects(b.rng)
    b.put_rule("baba", "you", 1, height - 2)
    stop_cells = b.put_rule("wall", "stop", 1, 2)
    win_cells = b.put_rule(obj1[0], "win", width - 4, 1)
    if spec.distractor_rule_block:
        if spec.irrelevant_rule_distractor:
            b.place(noun_code(obj3[0]), right_pushable)
        elif spec.distractor_obj:
            b.put(b.choose(_RIGHT_UNPUSHABLE), noun_code(obj2[0]))
        else:
            b.place(noun_code(obj2[0]), right_pushable)
    if spec.break_stop_rule:
        dst = b.sample(left_pushable)
        b.move_block(stop_cells[1 + int(b.rng.choice(2))], dst)  # the `is` or the `stop`
    if spec.break_win_rule:
        b.move_block(win_cells[0], b.sample(right_pushable))
    b.place(item_code("baba"), left_pushable)
    obj1_cell = b.place(item_code(*obj1), regions[spec.obj_region])
    if spec.distractor_obj:
        b.place(item_code(*obj2), regions[spec.obj_region])
    if spec.distractor_win_rule:  # last, on top of whatever stands there (upstream's order)
        b.put_rule(obj3[0], "win", width - 4, 4)
    goal = obj1[0]
    if spec.break_win_rule:
        plan = f"make[{goal} is win], goto[{goal}]"
    else:
        plan = f"goto[{goal}]"
    if not spec.break_stop_rule and (spec.break_win_rule or obj1_cell[0] > mid):
        plan = "break[wall is stop], " + plan
    return plan


def _split_in_two_rooms(b: _Builder) -> tuple[Region, Region, Region]:
    """Wall off the board's middle column; return the regions the make_you levels place things in:
    cells of the left room where a pushed block stays pushable (away from the walls), the same in
    the right room, and anywhere in the right room."""
    width, height = b.game.width, b.game.height
    mid = width // 2
    area = (mid - 3, height - 6)
    b.divider(mid)
    return (2, 3, *area), (mid + 2, 3, *area), (mid + 1, 2, mid - 2, height - 2)


def _make_you(spec: LevelSpec, b: _Builder) -> str:
    width, height = b.game.width, b.game.height
    left_pushable, right_pushable, right_anywhere = _split_in_two_rooms(b)
    obj1, obj2, _ = _sample_objects(b.rng)
    b.put_rule("baba", "you", 1, height - 3)
    b.put_rule("wall", "stop", 1, 1)  # in the corner: it can never be broken
    win_cells = b.put_rule(obj1[0], "win", width - 4, 1)
    b.place(noun_code(obj2[0]), left_pushable)
    if spec.break_win_rule:
        b.move_block(win_cells[0], b.sample(right_pushable))
    b.place(item_code("baba"), left_pushable)
    b.place(item_code(*obj1), right_anywhere)
    b.place(item_code(*obj2), right_anywhere)
    make_win = f"make[{obj1[0]} is win], " if spec.break_win_rule else ""
    return f"make[{obj2[0]} is you], {make_win}goto[{obj1[0]}]"


def _make_wall_win(spec: LevelSpec, b: _Builder) -> str:
    width, height = b.game.width, b.game.height
    left_pushable, right_pushable, right_anywhere = _split_in_two_rooms(b)
    obj1, obj2, obj3 = _sample_objects(b.rng)
    b.put_rule("baba", "you", 1, height - 2)
    b.put_rule("wall", "stop", 2, 2)
    win_cells = b.put_rule(obj1[0], "win", width - 4, 1)
    b.place(noun_code(obj3[0]), right_pushable)
    b.move_block(win_cells[0], b.choose(_RIGHT_UNPUSHABLE))
    b.place(item_code("baba"), left_pushable)
    b.place(item_code(*obj1), right_anywhere)
    b.place(item_code(*obj2), right_anywhere)
    return "break[wall is stop], make[wall is win], goto[wall]"


_LAYOUTS = {
    "one_room": (8, 8, _one_room),
    "two_room": (13, 9, _two_room),
    "make_you": (13, 9, _make_you),
    "make_wall_win": (13, 9, _make_wall_win),
}


def generate_level(name: str, rng: np.random.RandomState) -> tuple[BabaGame, str]:
    """Generate level ``name`` with random draws from ``rng``.

    Args:
        name: one of :data:`BABAISAI_LEVELS` (e.g. ``"two_room-make_win-distr_obj"``).
        rng: the legacy numpy ``RandomState`` all random choices come from (advanced in place);
            ``RandomState(seed)`` gives BALROG's level for ``seed``.

    Returns:
        ``(game, target_plan)``: the board with its rules read, and upstream's plan string for the
        level (e.g. ``"break[wall is stop], goto[key]"``; BALROG logs it as ``target_plan``).

    Raises:
        ValueError: an unknown level name.
        TypeError: ``rng`` is not a ``numpy.random.RandomState``.
    """
    if name not in LEVEL_SPECS:
        raise ValueError(f"unknown Baba Is AI level {name!r}; levels are {list(BABAISAI_LEVELS)}")
    if not isinstance(rng, np.random.RandomState):
        raise TypeError(f"rng must be a numpy.random.RandomState, got {type(rng).__name__}")
    spec = LEVEL_SPECS[name]
    width, height, build = _LAYOUTS[spec.layout]
    builder = _Builder(width, height, rng)
    plan = build(spec, builder)
    builder.game.refresh()
    return builder.game, plan
