"""The language observation and the cursor line of the NetHack text (see :mod:`verlog.envs.nethack_text`).

Every glyph gets a name from NetHack's own tables (through nle's glyph helpers) and a kind: never
listed, listed when adjacent (walls, corridors, trees, iron bars) or listed anywhere (monsters,
objects, dungeon features). :func:`describe_surroundings` lists the listed squares of a map nearest
first, with their offsets from the agent in the compass words of the move actions.
"""

from __future__ import annotations

import functools

import numpy as np
from nle import nethack

from verlog.envs.wording import steps

__all__ = [
    "MAX_PER_NAME",
    "MAX_DESCRIPTION_LINES",
    "KIND_SKIP",
    "KIND_ADJACENT",
    "KIND_ANY",
    "glyph_table",
    "glyph_name",
    "describe_surroundings",
    "offset_text",
    "cursor_line",
]

KIND_SKIP, KIND_ADJACENT, KIND_ANY = 0, 1, 2
#: How many items of one name are listed beyond the adjacent squares (the nearest ones).
MAX_PER_NAME = 3
#: At most this many lines in the language observation.
MAX_DESCRIPTION_LINES = 40

# cmap indices (NetHack 3.6 defsyms order, checked against nle's symdef in the tests).
_CMAP_SKIP = {0, 19, 20, 39, 78}  # stone, floor of a room, dark part of a room, air, "valid position"
_CMAP_ADJACENT = set(range(1, 12)) | {17, 18, 21, 22}  # walls, iron bars, tree, corridors
_CMAP_ANY = set(range(12, 17)) | set(range(23, 39)) | {40, 41} | set(range(42, 65)) | {77}
_GENERIC_OBJECT = {
    nethack.POTION_CLASS: "potion",
    nethack.SCROLL_CLASS: "scroll",
    nethack.WAND_CLASS: "wand",
    nethack.RING_CLASS: "ring",
    nethack.AMULET_CLASS: "amulet",
    nethack.SPBOOK_CLASS: "spellbook",
}


def _article(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


def _object_name(obj_index: int) -> str:
    cls = nethack.objclass(obj_index)
    oc_class = ord(cls.oc_class)
    if oc_class in _GENERIC_OBJECT:
        return _GENERIC_OBJECT[oc_class]
    descr = nethack.OBJ_DESCR(cls)
    if oc_class == nethack.GEM_CLASS and descr:
        return "gray stone" if descr == "gray" else f"{descr} gem"
    return descr or nethack.OBJ_NAME(cls) or "strange object"


def _glyph_name_kind(glyph: int) -> tuple[str, int]:
    nh = nethack
    if nh.glyph_is_pet(glyph):
        return "tame " + nh.permonst(nh.glyph_to_mon(glyph)).mname, KIND_ANY
    if nh.glyph_is_ridden_monster(glyph):
        return nh.permonst(nh.glyph_to_mon(glyph)).mname + " (ridden)", KIND_ANY
    if nh.glyph_is_detected_monster(glyph):
        return nh.permonst(nh.glyph_to_mon(glyph)).mname + " (detected)", KIND_ANY
    if nh.glyph_is_normal_monster(glyph):
        return nh.permonst(nh.glyph_to_mon(glyph)).mname, KIND_ANY
    if nh.glyph_is_invisible(glyph):
        return "remembered, unseen monster", KIND_ANY
    if nh.glyph_is_body(glyph):
        return nh.permonst(glyph - nh.GLYPH_BODY_OFF).mname + " corpse", KIND_ANY
    if nh.glyph_is_statue(glyph):
        return "statue of " + _article(nh.permonst(glyph - nh.GLYPH_STATUE_OFF).mname), KIND_ANY
    if nh.glyph_is_normal_object(glyph):
        return _object_name(nh.glyph_to_obj(glyph)), KIND_ANY
    if nh.glyph_is_cmap(glyph):
        index = nh.glyph_to_cmap(glyph)
        name = nh.symdef.from_idx(index).explanation
        if index in _CMAP_ADJACENT:
            return name, KIND_ADJACENT
        if index in _CMAP_ANY and name:
            return name, KIND_ANY
        return name, KIND_SKIP
    if nh.glyph_is_warning(glyph):
        return f"unseen monster (warning level {nh.glyph_to_warning(glyph)})", KIND_ANY
    return "", KIND_SKIP  # explosions, zap beams, swallow borders: transient effects


@functools.lru_cache(maxsize=1)
def glyph_table() -> tuple[tuple[str, ...], np.ndarray]:
    """Name and kind of every NetHack glyph, built once per process (~50 ms; read-only).

    Returns:
        ``(names, kinds)``: ``names[g]`` is glyph ``g``'s name (``""`` for transient effects) and
        ``kinds[g]`` (uint8, shape ``(MAX_GLYPH,)``) is 0 = never listed, 1 = listed when adjacent,
        2 = listed anywhere (see the module docstring).
    """
    names: list[str] = []
    kinds = np.zeros(nethack.MAX_GLYPH, dtype=np.uint8)
    for glyph in range(nethack.MAX_GLYPH):
        name, kind = _glyph_name_kind(glyph)
        names.append(name)
        kinds[glyph] = kind
    kinds.flags.writeable = False
    return tuple(names), kinds


def glyph_name(glyph: int) -> str:
    """The name of one glyph (``""`` for transient effects). Raises IndexError for a bad glyph."""
    names, _ = glyph_table()
    if not 0 <= int(glyph) < len(names):
        raise IndexError(f"glyph {glyph} outside [0, {len(names)})")
    return names[int(glyph)]


@functools.lru_cache(maxsize=8192)
def offset_text(dy: int, dx: int) -> str:
    """Where a square at ``(dy, dx)`` map steps from the agent is (``dy > 0`` = south, ``dx > 0`` = east).

    Returns:
        ``"adjacent east"`` for the 8 neighbours, ``"3 steps northwest"`` on a straight or diagonal
        line, else ``"2 steps north and 5 steps east"``; ``"here"`` for ``(0, 0)``.
    """
    vertical = "north" if dy < 0 else "south" if dy > 0 else ""
    horizontal = "west" if dx < 0 else "east" if dx > 0 else ""
    ady, adx = abs(dy), abs(dx)
    if ady == 0 and adx == 0:
        return "here"
    if max(ady, adx) == 1:
        return "adjacent " + vertical + horizontal
    if ady == 0 or adx == 0 or ady == adx:
        return f"{steps(max(ady, adx))} {vertical}{horizontal}"
    return f"{steps(ady)} {vertical} and {steps(adx)} {horizontal}"


#: Bits of a glyph id in the sort keys of :func:`_offset_keys` (NetHack 3.6 has 5,976 glyphs).
_GLYPH_BITS = 13


@functools.lru_cache(maxsize=1)
def _lookup_tables() -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    """``(names, listed anywhere, listed when adjacent)``: the two masks (bool, per glyph) of
    :func:`glyph_table`'s kinds, for vectorised lookups over the whole map."""
    names, kinds = glyph_table()
    if len(names) > 1 << _GLYPH_BITS:
        raise RuntimeError(f"{len(names)} glyphs do not fit the {_GLYPH_BITS} bits of the sort keys")
    return names, kinds == KIND_ANY, kinds != KIND_SKIP


@functools.lru_cache(maxsize=8)
def _offset_keys(rows: int, cols: int) -> tuple[np.ndarray, int]:
    """Sort keys of every offset ``(dy, dx)`` between two squares of a ``rows x cols`` map.

    Returns:
        ``(table, offset_bits)``: ``table`` has shape ``(2 * rows - 1, 2 * cols - 1)``, the agent at the
        centre ``(rows - 1, cols - 1)``; entry ``[R, C]`` is ``distance << (offset_bits + 13) |
        (R * (2 * cols - 1) + C) << 13`` (distance in king moves), with the low 13 bits left for a glyph
        id. The agent's view of the map is the ``rows x cols`` window of the table around its square, and
        sorting keys puts squares nearest first, then top to bottom, left to right. Read-only.
    """
    height, width = 2 * rows - 1, 2 * cols - 1
    offset_bits = (height * width - 1).bit_length()
    dy = np.arange(height, dtype=np.int64)[:, None] - (rows - 1)
    dx = np.arange(width, dtype=np.int64)[None, :] - (cols - 1)
    dist = np.maximum(np.abs(dy), np.abs(dx))
    position = (dy + rows - 1) * width + (dx + cols - 1)
    table = (dist << (offset_bits + _GLYPH_BITS)) | (position << _GLYPH_BITS)
    table.flags.writeable = False
    return table, offset_bits


def _listed_mask(glyphs: np.ndarray, x: int, y: int) -> np.ndarray:
    """Which squares the language observation lists (bool, the map's shape; the agent's own left out)."""
    _, anywhere, adjacent = _lookup_tables()
    mask = anywhere.take(glyphs, mode="clip")  # the glyphs are valid ids; "clip" skips a bounds pass
    r0, c0 = max(y - 1, 0), max(x - 1, 0)
    mask[r0 : y + 2, c0 : x + 2] = adjacent.take(glyphs[r0 : y + 2, c0 : x + 2], mode="clip")
    mask[y, x] = False
    return mask


def describe_surroundings(glyphs: np.ndarray, x: int, y: int, *, max_per_name: int = MAX_PER_NAME) -> list[str]:
    """The language-observation lines for the map ``glyphs`` seen by an agent at column ``x``, row ``y``.

    Args:
        glyphs: NLE's ``glyphs`` observation, shape ``(21, 79)`` (rows, columns), int, valid glyph ids.
        x, y: the agent's column and row (``blstats[0]``, ``blstats[1]``).
        max_per_name: how many non-adjacent items of one name are listed (the nearest).

    Returns:
        ``"<name> <offset_text>"`` lines, nearest first (then top to bottom, left to right), at most
        :data:`MAX_DESCRIPTION_LINES`; the agent's own square is left out.

    Raises:
        ValueError: if ``glyphs`` is not 2-D or ``(x, y)`` is outside it.
    """
    if glyphs.ndim != 2:
        raise ValueError(f"glyphs must be 2-D (rows, columns), got shape {glyphs.shape}")
    rows, cols = glyphs.shape
    if not (0 <= x < cols and 0 <= y < rows):
        raise ValueError(f"agent position (x={x}, y={y}) outside the {cols}x{rows} map")
    names = _lookup_tables()[0]
    mask = _listed_mask(glyphs, x, y)
    table, offset_bits = _offset_keys(rows, cols)
    view = table[rows - 1 - y : 2 * rows - 1 - y, cols - 1 - x : 2 * cols - 1 - x]  # centred on the agent
    keys = (view[mask] | glyphs[mask]).tolist()
    keys.sort()
    width = 2 * cols - 1
    lines: list[str] = []
    counts: dict[str, int] = {}
    for key in keys:
        name = names[key & ((1 << _GLYPH_BITS) - 1)]
        if key >> (offset_bits + _GLYPH_BITS) > 1:  # beyond the neighbours: the nearest few of each name
            seen = counts.get(name, 0)
            if seen >= max_per_name:
                continue
            counts[name] = seen + 1
        dy, dx = divmod((key >> _GLYPH_BITS) & ((1 << offset_bits) - 1), width)
        lines.append(f"{name} {offset_text(dy - (rows - 1), dx - (cols - 1))}")
        if len(lines) >= MAX_DESCRIPTION_LINES:
            break
    return lines


@functools.lru_cache(maxsize=1)
def _cursor_names() -> tuple[str, ...]:
    """Per glyph: ``"Yourself a <monster>"`` for monster glyphs, else ``"Yourself"`` (built once)."""
    names, _ = glyph_table()
    return tuple(
        f"Yourself {_article(name)}" if name and nethack.glyph_is_monster(glyph) else "Yourself"
        for glyph, name in enumerate(names)
    )


def cursor_line(glyphs: np.ndarray, x: int, y: int) -> str:
    """``"Yourself a rogue (x=40, y=7)"``: the monster shown at the agent's square and its position.

    Just ``"Yourself (x=.., y=..)"`` when the square shows no monster glyph (e.g. while engulfed)."""
    return f"{_cursor_names()[int(glyphs[y, x])]} (x={x}, y={y})"
