"""The Crafter observation text exactly as BALROG writes it (``text_style="balrog"``, the default).

Source: BALROG (github balrog-ai/BALROG, commit af7d1f1), its Crafter language wrapper run with
BALROG's default settings (one nearest thing per kind, compass wording, no kind skipped, no
edge-only kinds). Every rule below was read from that code and checked byte for byte against its
output (``tests/data/balrog_crafter_golden.json``, ``docs/balrog.md``); the quirks are kept on
purpose, so that a model sees here what it sees under BALROG:

* The window is 9 cells west-east by 7 north-south, centred on the player (crafter's image).
  BALROG cuts it from crafter's semantic map with slice bounds that go negative near the map's west
  or north edge; a negative start reads from the far end of the map, past the stop, so the window
  is EMPTY when the player is within 4 cells of the west edge (``x < 4``) or 3 of the north edge
  (``y < 3``): the text is then ``You see nothing away from you.`` and ``You face nothing at your
  front.`` whatever is there. At the east and south edges the window is just cut short.
* Every cell but the player's is a thing, ground included (``grass``, ``sand``, ``path``): the
  creature/object on it, else its material.
* Per kind, the nearest cell (Manhattan distance: BALROG adds up the numbers of the location text,
  which is that distance in both wordings); of equally near cells the first met in the scan wins.
  The scan runs column by column from west to east, each column from north to south. Kinds are
  listed in the order the scan first meets them, not by distance.
* Locations are ``location_style="compass"`` (BALROG's default: ``5 steps to your south-west``) or
  ``"offset"`` (its ``precise_location`` setting: ``1 step south and 4 steps west``), see
  :func:`~verlog.envs.crafter_text.describe_location`.
* ``You face <kind> at your front.`` names the faced cell's kind (ground too) when that cell is in
  the window, else ``nothing``.
* While the player sleeps the text starts with :data:`SLEEPING`, else after death with
  :data:`DIED`, followed by three blank lines (BALROG joins its parts with blank lines and does not
  drop the empty ones).
"""

from __future__ import annotations

from typing import Any, Iterable

from crafter import engine

from verlog.envs.crafter_text import LOCATION_STYLES, describe_location

__all__ = ["DIED", "SLEEPING", "balrog_window", "describe_balrog_surroundings", "describe_balrog_view", "nearest_things"]

#: First line while the player sleeps (BALROG's wording, its missing "to" included).
SLEEPING = "You are sleeping, and will not be able take actions until energy is full."
#: First line after the step that killed the player (when not asleep).
DIED = "You died."


def balrog_window(pos: tuple[int, int], view: tuple[int, int], area: tuple[int, int]) -> tuple[range, range]:
    """The cells BALROG describes around the player: ``(columns, rows)``, ranges of map ``x`` and ``y``.

    Args:
        pos: the player's ``(x, y)`` cell.
        view: width and height of the window in cells (``(9, 7)``).
        area: the map's width and height in cells (``(64, 64)``).

    Returns:
        ``view`` centred on ``pos`` and cut at the map's east and south edges; both ranges empty when
        the window starts west or north of the map (see the module docstring).
    """
    x0, y0 = pos[0] - view[0] // 2, pos[1] - view[1] // 2
    if x0 < 0 or y0 < 0:
        return range(0), range(0)
    return range(x0, min(x0 + view[0], area[0])), range(y0, min(y0 + view[1], area[1]))


def describe_balrog_surroundings(
    things: Iterable[tuple[str, int, int]], facing: str, *, location_style: str = "compass"
) -> str:
    """The "You see" list and the "You face" line in BALROG's form.

    Args:
        things: ``(kind, dx, dy)`` of every cell of the window but the player's, in BALROG's scan
            order (see :func:`~verlog.envs.crafter_text.visible_things`).
        facing: the faced cell's kind, ``"nothing"`` outside the window.
        location_style: ``"compass"`` or ``"offset"``.

    Returns:
        ``"You see:\\n- <kind> <where>\\n...\\n\\nYou face <facing> at your front."``; ``"You see nothing
        away from you."`` when ``things`` is empty.

    Raises:
        ValueError: unknown ``location_style`` or a thing at offset ``(0, 0)``.
    """
    nearest: dict[str, tuple[int, int, int]] = {}  # kind -> (distance, dx, dy); insertion order = first met
    for kind, dx, dy in things:
        distance = abs(dx) + abs(dy)
        if distance == 0:
            raise ValueError(f"{kind!r} at offset (0, 0): the player's own cell is not described")
        if kind not in nearest or distance < nearest[kind][0]:
            nearest[kind] = (distance, dx, dy)
    return _surroundings_text(nearest, facing, location_style)


def _surroundings_text(nearest: dict[str, tuple[int, int, int]], facing: str, location_style: str) -> str:
    """The "You see" list of ``nearest`` (kind -> (distance, dx, dy), in order) and the "You face" line."""
    if location_style not in LOCATION_STYLES:
        raise ValueError(f"location_style must be one of {LOCATION_STYLES}, got {location_style!r}")
    if nearest:
        lines = [f"- {kind} {describe_location(dx, dy, location_style)}" for kind, (_, dx, dy) in nearest.items()]
        seen = "You see:\n" + "\n".join(lines)
    else:
        seen = "You see nothing away from you."
    return f"{seen}\n\nYou face {facing} at your front."


def nearest_things(
    world: engine.World, player: Any, columns: range, rows: range
) -> tuple[dict[str, tuple[int, int, int]], str]:
    """The nearest cell of each kind in a window and the faced cell's kind, in one pass over the window.

    The same result as :func:`describe_balrog_surroundings` reads from
    :func:`~verlog.envs.crafter_text.visible_things` (which the tests hold it to), without building the
    per-cell list and map first (about a third less time per step's text).

    Args:
        world: the crafter world.
        player: crafter's player object in it.
        columns, rows: the window (:func:`balrog_window`), inside the map.

    Returns:
        ``nearest``: kind -> ``(distance, dx, dy)`` of its nearest cell by Manhattan distance (the first
        met in the scan order of ``visible_things`` among equals), kinds in the order first met, the
        player's own cell left out; ``facing``: the kind on the faced cell, ``"nothing"`` outside the
        window.
    """
    if not columns or not rows:
        return {}, "nothing"
    px, py = int(player.pos[0]), int(player.pos[1])
    fx, fy = px + int(player.facing[0]), py + int(player.facing[1])
    materials = world._mat_map[columns.start:columns.stop, rows.start:rows.stop].tolist()
    occupants = world._obj_map[columns.start:columns.stop, rows.start:rows.stop].tolist()
    names = {index: str(name) for index, name in world._mat_names.items()}
    objects = world._objects
    facing = "nothing"
    nearest: dict[str, tuple[int, int, int]] = {}
    for x, mat_col, obj_col in zip(columns, materials, occupants):
        dx = x - px
        adx = dx if dx >= 0 else -dx
        for y, mat, occupant in zip(rows, mat_col, obj_col):
            kind = type(objects[occupant]).__name__.lower() if occupant else names[mat]
            if x == fx and y == fy:
                facing = kind
            dy = y - py
            distance = adx + (dy if dy >= 0 else -dy)
            if distance == 0:
                continue
            best = nearest.get(kind)
            if best is None or distance < best[0]:
                nearest[kind] = (distance, dx, dy)
    return nearest, facing


def describe_balrog_view(
    world: engine.World, player: Any, view: tuple[int, int], location_style: str = "compass"
) -> str:
    """BALROG's observation text of the player's surroundings in crafter's ``world``.

    Args:
        world: the crafter world.
        player: crafter's player object in it.
        view: the window's width and height in cells (``(9, 7)``).
        location_style: ``"compass"`` (BALROG's default) or ``"offset"``.

    Returns:
        :func:`describe_balrog_surroundings` of :func:`balrog_window` (read by :func:`nearest_things`), after :data:`SLEEPING` or
        :data:`DIED` and three blank lines when that applies.
    """
    pos = (int(player.pos[0]), int(player.pos[1]))
    columns, rows = balrog_window(pos, view, (int(world.area[0]), int(world.area[1])))
    text = _surroundings_text(*nearest_things(world, player, columns, rows), location_style)
    if player.sleeping:
        return f"{SLEEPING}\n\n\n\n{text}"
    if player.health <= 0:
        return f"{DIED}\n\n\n\n{text}"
    return text
