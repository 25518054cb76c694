"""Verlog's tidy Crafter text (``text_style="tidy"``), and what both text styles share.

The tidy conventions (offsets, which kinds are listed, the ``You face`` line) are those described in
:mod:`verlog.envs.crafter`. Shared with BALROG's text (:mod:`verlog.envs.crafter_balrog_text`): the
place wording (:func:`describe_location`), the window scan (:func:`visible_things`) and the vitals
and inventory (:func:`describe_status`).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from crafter import constants, engine

from verlog.envs.wording import steps

__all__ = [
    "HIDDEN_KINDS",
    "LOCATION_STYLES",
    "VITALS",
    "describe_location",
    "describe_status",
    "describe_surroundings",
    "describe_view",
    "visible_things",
]

#: The ways offsets can be written (see :func:`describe_location`).
LOCATION_STYLES: tuple[str, ...] = ("offset", "compass")

VITALS: tuple[str, ...] = ("health", "food", "drink", "energy")
#: Walkable ground, never listed under "You see" (it covers most of the view).
HIDDEN_KINDS: frozenset[str] = frozenset({"grass", "sand", "path"})

_ASLEEP = "You are asleep: your actions have no effect until your energy is full or something hurts you."
_DIED = "You died."


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


def describe_status(inventory: Mapping[str, int], *, item_names: str = "spaces") -> str:
    """The vitals (each out of crafter's maximum, 9) and the non-empty inventory items.

    Args:
        inventory: crafter's player inventory (item name -> count), including the four vitals.
        item_names: ``"spaces"`` (``wood pickaxe``) or ``"crafter"`` (crafter's own names,
            ``wood_pickaxe``: what BALROG writes).

    Returns:
        ``"Your status:\\n- health: 9/9\\n...\\n\\nYour inventory:\\n- wood: 2"``, items in crafter's
        order; ``"You have nothing in your inventory."`` when empty.

    Raises:
        KeyError: a vital is missing from ``inventory``.
        ValueError: an unknown ``item_names``.
    """
    if item_names not in ("spaces", "crafter"):
        raise ValueError(f"item_names must be 'spaces' or 'crafter', got {item_names!r}")
    status = "\n".join(f"- {name}: {inventory[name]}/{constants.items[name]['max']}" for name in VITALS)
    items = [
        f"- {name.replace('_', ' ') if item_names == 'spaces' else name}: {count}"
        for name, count in inventory.items()
        if name not in VITALS and count > 0
    ]
    held = "Your inventory:\n" + "\n".join(items) if items else "You have nothing in your inventory."
    return f"Your status:\n{status}\n\n{held}"


def visible_things(
    world: engine.World, player: Any, columns: range, rows: range
) -> tuple[list[tuple[str, int, int]], dict[tuple[int, int], str]]:
    """What is on each cell of a window of crafter's ``world``, in scan order.

    Args:
        world: the crafter world.
        player: crafter's player object in it.
        columns: the window's ``x`` cells (west to east), inside the map.
        rows: the window's ``y`` cells (north to south), inside the map.

    Returns:
        ``things``: ``(kind, dx, dy)`` for every cell but the player's own, column by column from
        west to east and each column from north to south; the kind is the creature/object's
        lower-case class name (``cow``, ``zombie``, ``skeleton``, ``arrow``, ``plant``) if one is on
        the cell, else the material's name (crafter's semantic view: objects drawn over materials);
        offsets as in :func:`describe_location`. ``kinds``: offset ``(dx, dy)`` -> kind, for every
        cell of the window.
    """
    px, py = int(player.pos[0]), int(player.pos[1])
    if not columns or not rows:
        return [], {}
    materials = world._mat_map[columns.start:columns.stop, rows.start:rows.stop].tolist()
    occupants = world._obj_map[columns.start:columns.stop, rows.start:rows.stop].tolist()
    names, objects = world._mat_names, world._objects
    things: list[tuple[str, int, int]] = []
    kinds: dict[tuple[int, int], str] = {}
    for x, mat_col, obj_col in zip(columns, materials, occupants):
        dx = x - px
        for y, mat, occupant in zip(rows, mat_col, obj_col):
            dy = y - py
            kind = type(objects[occupant]).__name__.lower() if occupant else str(names[mat])
            kinds[(dx, dy)] = kind
            if not (dx == 0 and dy == 0):
                things.append((kind, dx, dy))
    return things, kinds


def describe_view(
    world: engine.World, player: Any, view: tuple[int, int], location_style: str = "offset"
) -> str:
    """The observation text of the player's surroundings in crafter's ``world``.

    Args:
        world: the crafter world.
        player: crafter's player object in it.
        view: width (west-east) and height (north-south) of the described area, in cells (the world
            part of crafter's image, ``(9, 7)``).
        location_style: see :func:`describe_location`.

    Returns:
        :func:`describe_surroundings` of the visible cells (off-map cells left out) and the faced cell,
        after a ``You died.`` or ``You are asleep ...`` line when that applies.
    """
    px, py = int(player.pos[0]), int(player.pos[1])
    half_w, half_h = view[0] // 2, view[1] // 2
    columns = range(max(px - half_w, 0), min(px + half_w + 1, world.area[0]))
    rows = range(max(py - half_h, 0), min(py + half_h + 1, world.area[1]))
    things, _ = visible_things(world, player, columns, rows)
    material, obj = world[(px + player.facing[0], py + player.facing[1])]
    facing = type(obj).__name__.lower() if obj is not None else material if material is not None else "nothing"
    text = describe_surroundings(things, facing, location_style=location_style)
    if player.health <= 0:
        return f"{_DIED}\n\n{text}"
    if player.sleeping:
        return f"{_ASLEEP}\n\n{text}"
    return text
