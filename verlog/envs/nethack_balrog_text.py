"""BALROG's NetHack text, byte for byte (the default text of the MiniHack and NLE envs).

BALROG shows its agents, for MiniHack and NetHack alike, the "hybrid" text that its NLE wrapper
builds from the NLE language wrapper's descriptions (``nle_language_obsv``, a C++ module) plus the
terminal. The rules below are stated in our own words; :mod:`verlog.envs.nethack_text` calls them.

**Observation** (BALROG's long-term context)::

    message:\\n<message>\\n\\nlanguage observation:\\n<description>\\n\\ncursor:\\n<cursor>\\n
    (x=<column>, y=<row>)\\n\\nmap:\\n<terminal rows 1-23, 80 characters each, one per line>\\n\\n

**Context** (its short-term context): ``inventory:\\n<a: item, one per line>\\n``.

*Names* (:func:`glyph_names`). Every glyph has a "screen" name (things listed wherever they are on
the map) and a "near" name (things listed only along the eight rays from the agent), at most one of
the two non-empty:

- monsters by NetHack's name (``jackal``), pets ``tame little dog``, ``detected ...``, ``ridden ...``,
  ``invisible creature``, corpses ``jackal corpse``, statues ``jackal statue``, warnings ``unknown
  creature causing you worry`` ...; explosions, zap beams and swallow borders by their shape;
- objects by class: weapons, coins, rocks, balls, chains by name; armour and tools by their
  (default, unshuffled) appearance when they have one, else by name; rings ``<appearance> ring``,
  amulets ``<appearance> amulet``, potions ``<appearance> potion``, wands ``<appearance> wand``,
  spellbooks ``<appearance> spellbook``, scrolls ``scroll labeled <label>``, food ``<name>``, gems
  ``<colour> <name>`` unless the name contains the colour (``red ruby``, ``worthless piece of red
  glass``), venom ``splash of <name>``;
- map features with the wrapper's own words (``stairs down``, ``alter``, ``doorway``, ``dark area``
  for unexplored stone ...): closed doors, iron bars, trees, stairs, ladders, altars, graves,
  thrones, sinks, fountains, pools, ice, lava and raised drawbridges are screen names; room and
  corridor floors have no name; every other feature (walls, doorways, open doors, traps, dark area)
  is a near name.

*Description* (:func:`describe_glyphs`): the screen-named squares of the whole map (row by row, the
agent's own square left out), then, ray by ray (east, southeast, south ... northeast), up to nine
squares out: a square whose glyph has a near name (and no screen name) is listed, and a wall, corner,
closed door, raised drawbridge or dark area ends the ray (other listed things do not). Each item gets
a distance word from its Chebyshev distance (1 adjacent, 2 very near, 3-5 near, 6-19 far, else very
far) and one of 16 directions: the diagonal part (``northeast``) after the straight remainder
(``east`` + ``northeast`` = ``eastnortheast``). Items are ordered by distance (very far first), then
direction (north, northnortheast, ... clockwise), keeping the scan order within one. Items with the
same name and distance merge, in order of first appearance: the directions seen once form one line
(``horizontal wall adjacent north, northeast, and northwest``), those seen more than once a second
line with the plural name (``vertical walls near east``); when the plural equals the singular (mass
nouns ``... boots``, ``iron bars``), that second line replaces the first one, which is then written
twice. A line is ``<name> <distance> <directions>``.

*Plurals*: mass nouns (ending boots, shoes, scales, lenses, bars) stay; a few exceptions
(``area of ice``, ``scrolls labeled ...``); ``y`` after a consonant -> ``ies``; ``z``, ``x``,
``sh``, ``ss``, ``s`` -> ``es``; ``f``/``ff`` -> ``ves``; else ``s``. The wrapper's ``ch`` test reads
outside the word and in practice never matches, so ``lich`` -> ``lichs``.

*Cursor* (:func:`cursor_text`): the terminal cursor ``(row, column)`` as a map square (row - 1); on
the agent ``Yourself a <screen name of the glyph there>``, elsewhere on the map ``<distance>
<direction> <name>``; off the map (the message line, the status lines, the map's first square) the
empty string. BALROG then adds a line ``(x=<column>, y=<row>)`` with the raw terminal coordinates.

*Message* (:func:`screen_message`): empty when the terminal's first row is blank. Otherwise the rows
are read from the first row's indent on, each with spaces (and ``\\x1a``) trimmed, a row whose only
character is its last one counting as empty, and joined with newlines up to and including the first
row that holds ``--More--``, ``(end)`` or a page mark ``(n of m)``; with no such row the message is
the first row alone.

*--More--* (BALROG's ``skip_more``): after each step (not after reset) while the accumulated message
contains ``--More--`` and the game is not over, every ``--More--`` in it becomes a newline, MORE is
pressed, and the new screen's message is appended (:func:`join_more`).
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np
from nle import nethack

__all__ = [
    "MAP_WIDTH",
    "MAP_HEIGHT",
    "glyph_names",
    "plural",
    "position_words",
    "describe_glyphs",
    "cursor_text",
    "screen_message",
    "message_of_bytes",
    "join_more",
    "inventory_text",
    "balrog_observation",
    "compose_observation",
    "TerminalMap",
    "balrog_context",
]

#: The map part of NLE's glyph array: 21 rows of 79 columns.
MAP_WIDTH, MAP_HEIGHT = 79, 21
_RAY_LENGTH = 9
_MORE = "--More--"

# The wrapper's words for NetHack 3.6's map symbols, in NetHack's order (index = cmap number; the
# swallow borders and explosions that end the list are appended below).
_CMAP_WORDS: tuple[str, ...] = (
    "dark area", "vertical wall", "horizontal wall", "northwest room corner", "northeast room corner",
    "southwest corner", "southeast corner", "cross wall", "t up wall", "t down wall", "t west wall",
    "t east wall", "doorway", "vertical open door", "horizontal open door", "vertical closed door",
    "horizontal closed door", "bars", "tree", "room floor", "dark room floor", "corridor floor",
    "lit corridor floor", "stairs up", "stairs down", "ladder up", "ladder down", "alter", "grave",
    "throne", "sink", "fountain", "pool", "ice", "lava", "vertical lowered drawbridge",
    "horizontal lowered drawbridge", "vertical raised drawbridge", "horizontal raised drawbridge",
    "air floor", "cloud floor", "water floor", "arrow trap", "dart trap", "falling rock trap",
    "squeaky board", "bear trap", "land mine", "rolling boulder trap", "sleeping gas trap",
    "rust trap", "fire trap", "pit", "spiked pit", "hole", "trap door", "teleportation trap",
    "level teleporter", "magic portal", "web", "statue trap", "magic trap", "anti magic trap",
    "polymorph trap", "vibrating square", "vertical beam", "horizontal beam", "left slant beam",
    "right slant beam", "dig beam", "flash beam", "boom left", "boom right", "shield 1", "shield 2",
    "shield 3", "shield 4", "poison cloud", "valid position",
)  # fmt: skip
_FLOORS = frozenset({"room floor", "dark room floor", "corridor floor", "lit corridor floor"})
_SCREEN_FEATURES = frozenset({
    "horizontal closed door", "vertical closed door", "bars", "tree", "stairs up", "stairs down",
    "ladder up", "ladder down", "alter", "grave", "throne", "sink", "fountain", "pool", "ice", "lava",
    "vertical raised drawbridge", "horizontal raised drawbridge",
})  # fmt: skip
_BLOCKING = frozenset({
    "dark area", "vertical wall", "horizontal wall", "northwest room corner", "northeast room corner",
    "southwest corner", "southeast corner", "cross wall", "t up wall", "t down wall", "t west wall",
    "t east wall", "horizontal closed door", "vertical closed door", "horizontal raised drawbridge",
    "vertical raised drawbridge",
})  # fmt: skip
_WARNINGS = tuple(
    f"unknown creature causing you {word}" for word in ("worry", "concern", "anxiety", "disquiet", "alarm", "dread")
)
_EXPLOSIONS = tuple(
    f"explosion {row} {col}" for row in ("top", "middle", "bottom") for col in ("left", "center", "right")
)
_ZAPS = ("horizontal zap beam", "vertical zap beam", "left slant zap beam", "right slant zap beam")
_SWALLOW = tuple(
    f"swallow {part}"
    for part in ("top left", "top center", "top right", "middle left", "middle right", "bottom left",
                 "bottom center", "bottom right")
)  # fmt: skip
_CMAP_WORDS += _SWALLOW + _EXPLOSIONS  # 96 = NetHack's MAXPCHARS
_DISTANCE_ORDER = {word: i for i, word in enumerate(("very far", "far", "near", "very near", "adjacent"))}
_DIRECTION_ORDER = {
    word: i
    for i, word in enumerate((
        "north", "northnortheast", "northeast", "eastnortheast", "east", "eastsoutheast", "southeast",
        "southsoutheast", "south", "southsouthwest", "southwest", "westsouthwest", "west", "westnorthwest",
        "northwest", "northnorthwest",
    ))
}  # fmt: skip
# Rays in the wrapper's order, as (dx, dy) on the screen (dy > 0 = down = south).
_RAYS = ((1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1))


def _object_name(index: int) -> str:
    cls = nethack.objclass(index)
    oc_class = ord(cls.oc_class)
    name = nethack.OBJ_NAME(cls) or ""
    descr = nethack.OBJ_DESCR(cls) or ""
    nh = nethack
    if oc_class in (nh.ILLOBJ_CLASS, nh.WEAPON_CLASS, nh.COIN_CLASS, nh.ROCK_CLASS, nh.BALL_CLASS, nh.CHAIN_CLASS):
        return name
    if oc_class in (nh.ARMOR_CLASS, nh.TOOL_CLASS):
        return descr or name
    if oc_class == nh.RING_CLASS:
        return descr + " ring"
    if oc_class == nh.AMULET_CLASS:
        return descr if "Amulet" in descr else descr + " amulet"
    if oc_class == nh.FOOD_CLASS:
        return name + descr
    if oc_class == nh.POTION_CLASS:
        return descr + " potion"
    if oc_class == nh.SCROLL_CLASS:
        return "scroll labeled " + descr
    if oc_class == nh.SPBOOK_CLASS:
        return descr + " spellbook"
    if oc_class == nh.WAND_CLASS:
        return descr + " wand"
    if oc_class == nh.GEM_CLASS:
        return name if descr in name else f"{descr} {name}"
    if oc_class == nh.VENOM_CLASS:
        return "splash of " + name
    return ""


def _names_of(glyph: int) -> tuple[str, str]:
    """(screen name, near name) of one glyph (module docstring)."""
    nh = nethack
    mname = lambda offset: nh.permonst(glyph - offset).mname  # noqa: E731
    if glyph >= nh.GLYPH_STATUE_OFF:
        return mname(nh.GLYPH_STATUE_OFF) + " statue", ""
    if glyph >= nh.GLYPH_WARNING_OFF:
        return _WARNINGS[glyph - nh.GLYPH_WARNING_OFF], ""
    if glyph >= nh.GLYPH_SWALLOW_OFF:
        return _SWALLOW[(glyph - nh.GLYPH_SWALLOW_OFF) % len(_SWALLOW)], ""
    if glyph >= nh.GLYPH_ZAP_OFF:
        return _ZAPS[(glyph - nh.GLYPH_ZAP_OFF) % len(_ZAPS)], ""
    if glyph >= nh.GLYPH_EXPLODE_OFF:
        return _EXPLOSIONS[(glyph - nh.GLYPH_EXPLODE_OFF) % len(_EXPLOSIONS)], ""
    if glyph >= nh.GLYPH_CMAP_OFF:
        word = _CMAP_WORDS[glyph - nh.GLYPH_CMAP_OFF]
        if word in _FLOORS:
            return "", ""
        return (word, "") if word in _SCREEN_FEATURES else ("", word)
    if glyph >= nh.GLYPH_OBJ_OFF:
        return _object_name(glyph - nh.GLYPH_OBJ_OFF), ""
    if glyph >= nh.GLYPH_RIDDEN_OFF:
        return "ridden " + mname(nh.GLYPH_RIDDEN_OFF), ""
    if glyph >= nh.GLYPH_BODY_OFF:
        return mname(nh.GLYPH_BODY_OFF) + " corpse", ""
    if glyph >= nh.GLYPH_DETECT_OFF:
        return "detected " + mname(nh.GLYPH_DETECT_OFF), ""
    if glyph >= nh.GLYPH_INVIS_OFF:
        return "invisible creature", ""
    if glyph >= nh.GLYPH_PET_OFF:
        return "tame " + mname(nh.GLYPH_PET_OFF), ""
    return mname(nh.GLYPH_MON_OFF), ""


@functools.lru_cache(maxsize=1)
def glyph_names() -> tuple[tuple[str, ...], tuple[str, ...], np.ndarray]:
    """``(screen, near, on_screen)``: the two names of every glyph (``""`` for none) and a read-only
    bool array (shape ``(MAX_GLYPH,)``) marking the glyphs with a screen name. Built once per process."""
    pairs = [_names_of(glyph) for glyph in range(nethack.MAX_GLYPH)]
    screen = tuple(p[0] for p in pairs)
    near = tuple(p[1] for p in pairs)
    on_screen = np.array([bool(name) for name in screen])
    on_screen.flags.writeable = False
    return screen, near, on_screen


_MASS_ENDINGS = ("boots", "shoes", "scales", "lenses", "bars")
_PREFIX_PLURALS = (
    ("boom ", "booms "), ("shield ", "shields "), ("swallow ", "swallows "), ("scroll ", "scrolls "),
    ("worthless piece ", "worthless pieces "), ("unknown creature ", "unknown creatures "),
)  # fmt: skip
_EXCEPTIONS = {
    "can of grease": "cans of grease",
    "Master of Thieves": "Masters of Thieves",
    "ice": "area of ice",
    "lava": "area of lava",
}


@functools.lru_cache(maxsize=4096)
def plural(noun: str) -> str:
    """The wrapper's plural of a (non-empty) name (module docstring, *Plurals*)."""
    if noun.endswith(_MASS_ENDINGS):
        return noun
    if noun in _EXCEPTIONS:
        return _EXCEPTIONS[noun]
    for prefix, replacement in _PREFIX_PLURALS:
        if noun.startswith(prefix):
            return replacement + noun[len(prefix):]
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u"):
        return noun[:-1] + "ies"
    if noun.endswith(("z", "x", "sh", "ss")):
        return noun + "es"
    if noun.endswith("f"):
        return (noun[:-2] if noun.endswith("ff") else noun[:-1]) + "ves"
    if noun.endswith("s"):
        return noun + "es"
    return noun + "s"


@functools.lru_cache(maxsize=8192)
def position_words(dx: int, dy: int) -> tuple[str, str]:
    """``(distance, direction)`` of a square ``dx`` columns east and ``dy`` rows NORTH of the agent.

    Distance from ``max(|dx|, |dy|)``: 1 ``adjacent``, 2 ``very near``, 3-5 ``near``, 6-19 ``far``,
    else (0 included) ``very far``. Direction: the straight remainder then the diagonal part,
    e.g. ``(3, 1)`` -> ``eastnortheast``; ``""`` for ``(0, 0)``.
    """
    diagonal_steps = min(abs(dx), abs(dy))
    diagonal = ""
    if diagonal_steps > 0:
        diagonal = ("south" if dy < 0 else "north") + ("west" if dx < 0 else "east")
    rest_x = dx - diagonal_steps if dx > 0 else dx + diagonal_steps
    rest_y = dy - diagonal_steps if dy > 0 else dy + diagonal_steps
    straight = ("south" if rest_y < 0 else "north" if rest_y > 0 else "") + (
        "west" if rest_x < 0 else "east" if rest_x > 0 else ""
    )
    reach = max(abs(dx), abs(dy))
    if reach == 1:
        distance = "adjacent"
    elif reach == 2:
        distance = "very near"
    elif 2 < reach < 6:
        distance = "near"
    elif 5 < reach < 20:
        distance = "far"
    else:
        distance = "very far"
    return distance, straight + diagonal


def _join_directions(directions: Sequence[str]) -> str:
    if len(directions) == 1:
        return directions[0]
    if len(directions) == 2:
        return f"{directions[0]} and {directions[1]}"
    return ", ".join(directions[:-1]) + ", and " + directions[-1]


def _merge(buckets: dict[int, list[str]]) -> list[str]:
    """The lines of the items, given as names by sort key (each list in scan order): sorted, then
    merged (module docstring, *Description*).

    Items of one name and distance arrive with their directions in order, so a direction seen more
    than once is seen in a run. When no direction repeats (the usual case) each (name, distance)
    is one line; otherwise :func:`_merge_with_plurals` writes them.
    """
    groups: dict[tuple[str, str], list[str]] = {}
    for key in sorted(buckets):
        distance, direction = _KEY_WORDS[key]
        for name in buckets[key]:
            directions = groups.get((name, distance))
            if directions is None:
                groups[(name, distance)] = [direction]
            else:
                directions.append(direction)
    for directions in groups.values():
        if len(directions) > 1 and len(set(directions)) < len(directions):
            return _merge_with_plurals(groups)
    return [
        f"{name} {distance} {directions[0] if len(directions) == 1 else _join_directions(directions)}"
        for (name, distance), directions in groups.items()
    ]


def _merge_with_plurals(groups: dict[tuple[str, str], list[str]]) -> list[str]:
    """The lines of (name, distance) groups whose directions (in order) may repeat: the directions
    seen once make one line, those seen more than once a line of the plural name (which takes the
    place of a line of the same name and distance written before)."""
    order: list[tuple[str, str]] = []
    merged: dict[tuple[str, str], list[str]] = {}
    for group, directions in groups.items():
        if len(directions) == 1 or len(set(directions)) == len(directions):
            order.append(group)
            merged[group] = directions
            continue
        once: list[str] = []
        more: list[str] = []
        previous = None
        for direction in directions:  # equal directions are next to each other
            if direction != previous:
                once.append(direction)
            elif not more or more[-1] != direction:
                more.append(once.pop())
            previous = direction
        if once:
            order.append(group)
            merged[group] = once
        key = (plural(group[0]), group[1])
        order.append(key)
        merged[key] = more  # may replace the singular's entry when the plural is the same word
    lines = []
    for name, distance in order:
        directions = merged[(name, distance)]
        if len(directions) == 1:
            lines.append(f"{name} {distance} {directions[0]}")
        else:
            lines.append(f"{name} {distance} {_join_directions(directions)}")
    return lines


def _offset_key(dx: int, dy: int) -> int | None:
    """The sort key of a square ``dx`` east and ``dy`` north of the agent: distance order * 16 +
    direction order (:func:`position_words`); ``None`` for the agent's own square (no direction)."""
    distance, direction = position_words(dx, dy)
    if direction not in _DIRECTION_ORDER:
        return None
    return _DISTANCE_ORDER[distance] * 16 + _DIRECTION_ORDER[direction]


#: ``(distance, direction)`` of each key of :func:`_offset_key`.
_KEY_WORDS: dict[int, tuple[str, str]] = {
    _DISTANCE_ORDER[d] * 16 + _DIRECTION_ORDER[r]: (d, r) for d in _DISTANCE_ORDER for r in _DIRECTION_ORDER
}


@functools.lru_cache(maxsize=1)
def _key_table() -> tuple[tuple[int | None, ...], ...]:
    """``table[row - y + MAP_HEIGHT - 1][col - x + MAP_WIDTH - 1]``: :func:`_offset_key` of every square
    of the map seen from every square of the map (41 x 157 offsets)."""
    return tuple(
        tuple(_offset_key(dx, MAP_HEIGHT - 1 - r) for dx in range(1 - MAP_WIDTH, MAP_WIDTH))
        for r in range(2 * MAP_HEIGHT - 1)
    )


@functools.lru_cache(maxsize=1)
def _ray_codes() -> np.ndarray:
    """Per glyph (read-only uint8 array, shape ``(MAX_GLYPH,)``), what a ray does on it: 0 passes (no
    near name, or a screen name), 1 lists it and goes on, 2 lists it and stops (a blocking name)."""
    screen, near, _ = glyph_names()
    codes = np.array(
        [0 if not name or screen[glyph] else 2 if name in _BLOCKING else 1 for glyph, name in enumerate(near)],
        dtype=np.uint8,
    )
    codes.flags.writeable = False
    return codes


@functools.lru_cache(maxsize=4096)
def _ray_squares(x: int, y: int) -> tuple[np.ndarray, tuple[int, ...], tuple[int | None, ...]]:
    """The squares of the eight rays from ``(x, y)`` that lie on the map: their flat indices (one
    array, ray after ray, outward), and for each its ray's number and its key (:func:`_offset_key`)."""
    flat: list[int] = []
    rays: list[int] = []
    keys: list[int | None] = []
    for ray, (step_x, step_y) in enumerate(_RAYS):
        for reach in range(1, _RAY_LENGTH + 1):
            col, row = x + step_x * reach, y + step_y * reach
            if not (0 <= col < MAP_WIDTH and 0 <= row < MAP_HEIGHT):
                break
            flat.append(row * MAP_WIDTH + col)
            rays.append(ray)
            keys.append(_offset_key(col - x, y - row))
    return np.array(flat, dtype=np.intp), tuple(rays), tuple(keys)


def describe_glyphs(glyphs: np.ndarray, x: int, y: int) -> str:
    """BALROG's language observation of a map (module docstring, *Description*).

    The items are collected into buckets by their sort key (distance, then direction), in scan
    order, which is the stable sort of the rule; the square-to-key table and each position's ray
    squares are computed once per process.

    Args:
        glyphs: NLE's ``glyphs``, shape ``(21, 79)`` int16.
        x, y: the agent's column and row (NLE's ``blstats`` 0 and 1).

    Raises:
        ValueError: if ``glyphs`` is not ``(21, 79)``.
    """
    if glyphs.shape != (MAP_HEIGHT, MAP_WIDTH):
        raise ValueError(f"glyphs must have shape {(MAP_HEIGHT, MAP_WIDTH)}, got {glyphs.shape}")
    screen, near, on_screen = glyph_names()
    flat = glyphs.ravel()
    buckets: dict[int, list[str]] = {}
    where = on_screen.take(flat).nonzero()[0]
    in_map = 0 <= x < MAP_WIDTH and 0 <= y < MAP_HEIGHT
    table = _key_table()
    for index, glyph in zip(where.tolist(), flat[where].tolist()):
        row, col = divmod(index, MAP_WIDTH)
        if in_map:
            key = table[row - y + MAP_HEIGHT - 1][col - x + MAP_WIDTH - 1]
        else:
            key = _offset_key(col - x, y - row)
        if key is not None:
            if key in buckets:
                buckets[key].append(screen[glyph])
            else:
                buckets[key] = [screen[glyph]]
    squares, rays, keys = _ray_squares(x, y)
    if len(squares):
        seen = flat.take(squares)
        codes = _ray_codes().take(seen)
        hits = codes.nonzero()[0].tolist()
        if hits:
            seen_list, code_list = seen.tolist(), codes.tolist()
            stopped = -1  # the ray that met a blocking square (rays come one after the other)
            for i in hits:
                if rays[i] == stopped:
                    continue
                name = near[seen_list[i]]
                key = keys[i]
                if key in buckets:
                    buckets[key].append(name)
                else:
                    buckets[key] = [name]
                if code_list[i] == 2:
                    stopped = rays[i]
    return "\n".join(_merge(buckets))


def cursor_text(glyphs: np.ndarray, x: int, y: int, cursor_row: int, cursor_col: int) -> str:
    """The wrapper's cursor line (module docstring, *Cursor*), without BALROG's ``(x=, y=)`` line.

    Args:
        glyphs: NLE's ``glyphs``, shape ``(21, 79)``.
        x, y: the agent's column and row; cursor_row, cursor_col: NLE's ``tty_cursor``.
    """
    map_row = cursor_row - 1
    dx, dy = cursor_col - x, y - map_row
    index = cursor_col + map_row * MAP_WIDTH
    if not (-MAP_WIDTH <= dx < MAP_WIDTH and -MAP_HEIGHT <= dy < MAP_HEIGHT and 0 < index < glyphs.size):
        return ""
    name = glyph_names()[0][glyphs.item(index)]  # the flat index, as the wrapper reads it
    if dx == 0 and dy == 0:
        return "Yourself a " + name
    distance, direction = position_words(dx, dy)
    return f"{distance} {direction} {name}"


def _trim(row: str) -> str:
    rest = row.lstrip(" \x1a")
    if len(rest) == 1:  # the wrapper drops a lone last character
        return ""
    return rest.rstrip(" \x1a")


#: The page marks, each with one of its bytes that is rare on a screen (searched for with memchr, much
#: faster than a search for the whole mark on a screen full of spaces) and that byte's place in it.
_PAGE_MARKS = ((_MORE.encode(), b"M", 2), (b"(end)", b")", 4), (b" of ", b"f", 2))


def _marked_rows(raw: bytes, width: int, indent: int) -> list[int]:
    """The rows (ascending) whose part from column ``indent`` on holds ``--More--``, ``(end)`` or
    `` of ``: the only rows whose trimmed text can end a page."""
    rows = set()
    for mark, byte, place in _PAGE_MARKS:
        at = raw.find(byte)
        while at >= 0:
            start = at - place
            if start >= 0 and raw.startswith(mark, start):
                row, col = divmod(start, width)
                if col >= indent and col + len(mark) <= width:
                    rows.add(row)
            at = raw.find(byte, at + 1)
    return sorted(rows)


def _is_page_end(row: str) -> bool:
    if _MORE in row or "(end)" in row:
        return True
    at = row.find(" of ")
    return at >= 2 and row[at - 2] == "(" and row[at + 5 : at + 6] == ")"


def screen_message(tty_chars: np.ndarray) -> str:
    """The wrapper's message of a terminal (module docstring, *Message*).

    Args:
        tty_chars: NLE's ``tty_chars``, shape ``(24, 80)`` uint8.
    """
    return message_of_bytes(tty_chars.tobytes(), tty_chars.shape[1])


def message_of_bytes(raw: bytes, width: int) -> str:
    """:func:`screen_message` of a terminal given as its raw bytes (``tty_chars.tobytes()``) and width.

    Only rows that hold a page mark (``--More--``, ``(end)``, `` of ``) can end a page (a row's
    trimmed text is a substring of it), so they are found by byte searches and checked in order; the
    rows above the first that ends a page are trimmed only then. Most screens hold no mark: then the
    message is the first row alone.
    """
    first = raw[:width].decode("latin-1")
    first_trimmed = _trim(first)
    if not first_trimmed:
        return ""
    indent = len(first) - len(first.lstrip(" "))
    marked = _marked_rows(raw, width, indent)
    if not marked:
        return first_trimmed
    screen = raw.decode("latin-1")
    for row in marked:
        start = row * width
        if _is_page_end(_trim(screen[start + indent : start + width])):
            rows = [screen[at + indent : at + width].lstrip(" \x1a") for at in range(0, start + 1, width)]
            return "\n".join(["" if len(rest) == 1 else rest.rstrip(" \x1a") for rest in rows])  # _trim
    return first_trimmed


def join_more(message: str, next_message: str) -> str:
    """The message after one automatic MORE press: each ``--More--`` becomes a newline, the next
    screen's message is appended."""
    return message.replace(_MORE, "\n") + next_message


def inventory_text(inv_letters: np.ndarray, inv_strs: np.ndarray) -> str:
    """``<letter>: <item>`` per inventory item, one per line (``""`` when empty).

    Args:
        inv_letters: NLE's ``inv_letters``, shape ``(55,)`` uint8, 0 after the last item.
        inv_strs: NLE's ``inv_strs``, shape ``(55, 80)`` uint8, NUL-terminated strings.
    """
    lines = []
    for letter, text in zip(inv_letters.tolist(), inv_strs):
        if letter == 0:
            break
        item = text.tobytes().split(b"\0", 1)[0].decode("latin-1")
        lines.append(f"{chr(letter)}: {item}")
    return "\n".join(lines)


def balrog_observation(message: str, description: str, cursor: str, tty_cursor: Sequence[int], tty_chars: np.ndarray) -> str:
    """BALROG's long-term context: the four parts under their headers (module docstring)."""
    return compose_observation(message, description, cursor, tty_cursor, TerminalMap(*tty_chars.shape)(tty_chars))


def compose_observation(message: str, description: str, cursor: str, tty_cursor: Sequence[int], screen: str) -> str:
    """:func:`balrog_observation` with the map part given as text (:class:`TerminalMap`)."""
    return (
        f"message:\n{message}\n\n"
        f"language observation:\n{description}\n\n"
        f"cursor:\n{cursor}\n(x={int(tty_cursor[1])}, y={int(tty_cursor[0])})\n\n"
        f"map:\n{screen}\n\n"
    )


class TerminalMap:
    """The map part of the observation: the terminal's rows after the first, one per line.

    Keeps one buffer of the rows with a newline after each, so that a screen is one array copy and
    one decode. One instance per env (the buffer is reused; not for concurrent use).

    Args:
        rows, width: the terminal's shape (NLE's 24 x 80).
    """

    def __init__(self, rows: int = 24, width: int = 80) -> None:
        self._lined = np.empty((rows - 1, width + 1), dtype=np.uint8)
        self._lined[:, width] = ord("\n")
        self._text = self._lined.reshape(-1)[:-1]  # a view without the last newline
        self._width = width

    def __call__(self, tty_chars: np.ndarray) -> str:
        """The map text of ``tty_chars`` (NLE's ``tty_chars``, shape ``(rows, width)`` uint8).

        Raises:
            ValueError: if ``tty_chars`` does not have this map's shape.
        """
        shape = (self._lined.shape[0] + 1, self._width)
        if tty_chars.shape != shape:
            raise ValueError(f"tty_chars must have shape {shape}, got {tty_chars.shape}")
        self._lined[:, : self._width] = tty_chars[1:]
        return self._text.tobytes().decode("latin-1")


def balrog_context(inventory: str) -> str:
    """BALROG's short-term context: ``inventory:`` and the inventory."""
    return f"inventory:\n{inventory}\n"
