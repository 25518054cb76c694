"""Text conventions shared by the NetHack-based games (MiniHack and NLE), in BALROG's "hybrid" text mode.

An observation has four parts, each under a header line (our own rendering; BALROG used the
``nle_language_wrapper`` package, which is not a dependency here):

* ``message:`` the game's message. Messages that ended in ``--More--`` were dismissed automatically
  (see below); their texts come first, one per line, then the final message. ``(none)`` when empty.
* ``language observation:`` what is around the agent, one item per line, nearest first:

  - every visible monster (``tame kitten``, ``giant rat``), object (``long sword``, ``potion``,
    ``red gem``) and dungeon feature (doors, doorways, staircases, fountains, altars, traps, water,
    lava ...) anywhere on the map, at most :data:`MAX_PER_NAME` of each name;
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

The current-only context (:func:`render_inventory`) is the inventory, ``Inventory:`` then one
``<letter>: <item>`` line per item.

``--More--``: after every action, while the terminal shows ``--More--`` and the game is not over, the
MORE key is pressed (the presses are counted, they are not agent steps; their rewards are added to
the step's reward). A ``--More--`` on the message line contributes that line's text to the message;
one at the bottom of a text window (e.g. "Things that are here:") contributes the window's text.
MiniHack tasks keep NLE's own handling (``allow_all_modes=False``: NLE itself dismisses ``--More--``,
so the text env rarely sees one); tasks whose action set lacks MORE never press it.

The action tables map BALROG's action names onto NetHack keys (:data:`NAMED_ACTIONS`); an env's own
action list is searched for the key's value (:func:`action_indices`), so no action index is hard-coded.
:class:`NetHackTextEnvBase` is the shared game loop (seeding, ``--More--`` skipping, rendering with
caches); :mod:`verlog.envs.minihack` and :mod:`verlog.envs.nle` add tasks, actions, instructions and
progression.
"""

from __future__ import annotations

import functools
import string
from typing import Any, Callable, Mapping, Sequence

import gymnasium
import numpy as np
from nle import nethack
from nle.env.base import NLE

from verlog.envs.base import TextEnv, require_episode
from verlog.envs.parsing import extract_action
from verlog.envs.wording import steps

__all__ = [
    "MOVE_ACTIONS",
    "FAR_MOVE_ACTIONS",
    "NAMED_ACTIONS",
    "ACTION_GLOSSES",
    "LETTER_ACTIONS",
    "DIGIT_ACTIONS",
    "OBSERVATION_KEYS",
    "NATIVE_STEP_LIMIT",
    "MAX_PER_NAME",
    "MAX_DESCRIPTION_LINES",
    "KIND_SKIP",
    "KIND_ADJACENT",
    "KIND_ANY",
    "MAX_MORE_PRESSES",
    "NetHackTextEnvBase",
    "make_nle_env",
    "action_indices",
    "glyph_table",
    "glyph_name",
    "describe_surroundings",
    "offset_text",
    "cursor_line",
    "render_map",
    "decode_message",
    "render_inventory",
    "render_observation",
    "find_more",
    "more_text",
]

# ----------------------------------------------------------------------------------------- actions
_C = nethack.C  # Ctrl-key code
_M = nethack.M  # Meta-key code

#: The eight one-step moves (BALROG's names) -> NetHack key (vi-keys).
MOVE_ACTIONS: dict[str, int] = {
    "north": ord("k"),
    "east": ord("l"),
    "south": ord("j"),
    "west": ord("h"),
    "northeast": ord("u"),
    "southeast": ord("n"),
    "southwest": ord("b"),
    "northwest": ord("y"),
}
#: The eight "far" moves (run until something interesting) -> shifted vi-keys.
FAR_MOVE_ACTIONS: dict[str, int] = {f"far {name}": ord(chr(key).upper()) for name, key in MOVE_ACTIONS.items()}

_MOVE_GLOSSES = {name: f"move one step {name}" for name in MOVE_ACTIONS}
_MOVE_GLOSSES.update(
    {name: f"move {name[4:]} until something interesting is reached" for name in FAR_MOVE_ACTIONS}
)

# name, key, gloss. Our own glosses. Covers nle's USEFUL_ACTIONS (except SHELL: the shell escape is
# disabled in NLE's build, the key only prints an error) and the extra names of BALROG's NetHack
# prompt (annotate, teleport, travel, minus, apos); BALROG's commented-out "overview" is left out.
_NAMED: tuple[tuple[str, int, str], ...] = (
    ("up", ord("<"), "go up a staircase or ladder (you must stand on it)"),
    ("down", ord(">"), "go down a staircase or ladder (you must stand on it)"),
    ("wait", ord("."), "rest one turn doing nothing (at a position prompt: confirm the cursor position)"),
    ("more", ord("\r"), "show the next part of a message ending in --More-- (normally pressed for you)"),
    ("adjust", _M("a"), "change the letter of an inventory item"),
    ("annotate", _M("A"), "write a note about the current level"),
    ("apply", ord("a"), "apply (use) a tool, e.g. a key, a lamp, a pick-axe, a horn or a whistle"),
    ("attributes", _C("x"), "show your character's role, race, alignment, god and attributes"),
    ("call", ord("C"), "give a name to a monster, an object or an object type"),
    ("cast", ord("Z"), "cast a spell you know"),
    ("chat", _M("c"), "talk to someone next to you (e.g. a shopkeeper or a priest)"),
    ("close", ord("c"), "close an adjacent door (then give its direction)"),
    ("dip", _M("d"), "dip an object into something (a potion, a fountain)"),
    ("drop", ord("d"), "drop one item"),
    ("droptype", ord("D"), "drop several items, chosen by type"),
    ("eat", ord("e"), "eat something (do it when you are Hungry)"),
    ("engrave", ord("E"), "write on the floor (the word Elbereth scares most monsters)"),
    ("enhance", _M("e"), "advance or check your weapon and spell skills"),
    ("esc", _C("["), "cancel the current prompt or menu"),
    ("fight", ord("F"), "attack in a direction even if you see no monster there (then give the direction)"),
    ("fire", ord("f"), "fire the ammunition in your quiver (then give a direction)"),
    ("force", _M("f"), "force the lock of a box or chest on the floor with your weapon"),
    ("inventory", ord("i"), "show your inventory (it is also given with every observation)"),
    ("inventtype", ord("I"), "show the inventory items of one type"),
    ("invoke", _M("i"), "invoke the special power of an artifact"),
    ("jump", _M("j"), "jump to a nearby location (if you are able to)"),
    ("kick", _C("d"), "kick something, e.g. a locked door or a box (then give its direction)"),
    ("look", ord(":"), "look at what is on your square"),
    ("loot", _M("l"), "open a box or chest on your square to take things out or put things in"),
    ("monster", _M("m"), "use the special ability of your monster form (when polymorphed)"),
    ("move", ord("m"), "prefix: move one step without picking anything up or fighting (then a direction)"),
    ("movefar", ord("M"), "prefix: run without picking anything up or fighting (then a direction)"),
    ("offer", _M("o"), "offer a sacrifice to your god (stand on an altar)"),
    ("open", ord("o"), "open an adjacent door (then give its direction)"),
    ("pay", ord("p"), "pay your shopping bill"),
    ("pickup", ord(","), "pick up things on your square"),
    ("pray", _M("p"), "pray to your god for help (only in real trouble, and rarely)"),
    ("puton", ord("P"), "put on an accessory (ring, amulet, blindfold)"),
    ("quaff", ord("q"), "drink something (a potion, or from a fountain)"),
    ("quiver", ord("Q"), "choose the ammunition to fire"),
    ("read", ord("r"), "read a scroll or a spellbook"),
    ("remove", ord("R"), "remove an accessory"),
    ("ride", _M("R"), "mount or dismount a saddled steed"),
    ("rub", _M("r"), "rub a lamp or a stone"),
    ("rush", ord("g"), "prefix: rush in a direction until something interesting is seen"),
    ("rush2", ord("G"), "prefix: rush in a direction, ignoring side corridors"),
    ("search", ord("s"), "search the adjacent squares for hidden doors, passages and traps"),
    ("seearmor", ord("["), "show the armor you wear"),
    ("seerings", ord("="), "show the rings you wear"),
    ("seetools", ord("("), "show the tools you use"),
    ("seetrap", ord("^"), "show the type of an adjacent trap"),
    ("seeweapon", ord(")"), "show the weapon you wield"),
    ("seespells", ord("+"), "list the spells you know"),
    ("seeamulet", ord('"'), "show the amulet you wear"),
    ("seegold", ord("$"), "count your gold"),
    ("sit", _M("s"), "sit down"),
    ("swap", ord("x"), "swap your wielded and secondary weapons"),
    ("takeoff", ord("T"), "take off one piece of armor"),
    ("takeoffall", ord("A"), "take off all your armor"),
    ("teleport", _C("t"), "teleport within the level (only if you have that ability)"),
    ("throw", ord("t"), "throw something, e.g. a dagger (then give a direction)"),
    ("tip", _M("T"), "empty a container onto the floor"),
    (
        "travel",
        ord("_"),
        "travel to a map location: next press < or > (the up/down actions) to put the cursor on a "
        "staircase, then . (wait) to go there",
    ),
    ("turn", _M("t"), "turn undead (knights and priests)"),
    ("twoweapon", ord("X"), "toggle two-weapon combat"),
    ("untrap", _M("u"), "try to disarm a trap"),
    ("versionshort", ord("v"), "show the game's version"),
    ("wear", ord("W"), "wear a piece of armor"),
    ("wield", ord("w"), "wield a weapon"),
    ("wipe", _M("w"), "wipe off your face"),
    ("zap", ord("z"), "zap a wand (then give a direction)"),
    ("minus", ord("-"), "the - key (at an item prompt: nothing, e.g. bare hands for wield)"),
    ("space", ord(" "), "the space key (pages through a menu)"),
    ("apos", ord("'"), "the ' key"),
)

#: Every named action (moves, far moves, commands; not the single letters/digits) -> NetHack key.
NAMED_ACTIONS: dict[str, int] = {**MOVE_ACTIONS, **FAR_MOVE_ACTIONS, **{name: key for name, key, _ in _NAMED}}
#: Named action -> short explanation (our words), shown in the instructions.
ACTION_GLOSSES: dict[str, str] = {**_MOVE_GLOSSES, **{name: gloss for name, _, gloss in _NAMED}}
#: The 52 single-letter actions (an item letter at a prompt; outside prompts, that key's command).
LETTER_ACTIONS: tuple[str, ...] = tuple(string.ascii_lowercase + string.ascii_uppercase)
#: The ten digit actions (counts, menu choices).
DIGIT_ACTIONS: tuple[str, ...] = tuple(string.digits)


def _action_key(name: str) -> int:
    if name in NAMED_ACTIONS:
        return NAMED_ACTIONS[name]
    if len(name) == 1 and (name in LETTER_ACTIONS or name in DIGIT_ACTIONS):
        return ord(name)
    raise ValueError(f"unknown NetHack action name {name!r}")


def action_indices(env_actions: Sequence[int], names: Sequence[str], *, strict: bool = True) -> dict[str, int]:
    """Map action names onto indices of an NLE env's own action list, by the keys' values.

    Args:
        env_actions: the env's ``actions`` (nle enums, i.e. ints: the key codes).
        names: action names: keys of :data:`NAMED_ACTIONS`, single letters or digits.
        strict: raise if a name's key is not in ``env_actions``; otherwise leave the name out.

    Returns:
        ``{name: index}`` in the order of ``names`` (the first index when a key appears twice).

    Raises:
        ValueError: an unknown name, or (``strict``) a name whose key the env does not have.
    """
    first: dict[int, int] = {}
    for index, key in enumerate(env_actions):
        first.setdefault(int(key), index)
    out: dict[str, int] = {}
    for name in names:
        key = _action_key(name)
        if key in first:
            out[name] = first[key]
        elif strict:
            raise ValueError(f"action {name!r} (key {key}) is not in this env's action set")
    return out


# ----------------------------------------------------------------------------------------- glyphs
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


# ----------------------------------------------------------------------------------------- terminal
_MORE = b"--More--"
_SWAP_SPACE_NUL = bytes.maketrans(b" \0", b"\0 ")


def render_map(tty_chars: np.ndarray) -> str:
    """The terminal without its first (message) line, one line per row, trailing spaces removed.

    Args:
        tty_chars: NLE's ``tty_chars``, shape ``(24, 80)`` uint8.

    Raises:
        ValueError: if ``tty_chars`` is not a 2-D uint8 array with at least 2 rows.
    """
    if tty_chars.ndim != 2 or tty_chars.dtype != np.uint8 or tty_chars.shape[0] < 2 or tty_chars.shape[1] < 1:
        raise ValueError(f"tty_chars must be a (rows, columns) uint8 array, got {tty_chars.dtype} {tty_chars.shape}")
    # Trailing spaces are cut in C, not per line in Python: spaces and NULs swap places, numpy's
    # fixed-width bytes type drops each row's trailing NULs (the spaces) when making bytes objects, and
    # the swap is undone on the joined text (so NULs of the screen are kept, as by rstrip(b" ")).
    swapped = tty_chars[1:].tobytes().translate(_SWAP_SPACE_NUL)
    rows = np.frombuffer(swapped, dtype=f"S{tty_chars.shape[1]}").tolist()
    return b"\n".join(rows).translate(_SWAP_SPACE_NUL).decode("latin-1")


def decode_message(message: np.ndarray) -> str:
    """NLE's ``message`` (NUL-terminated bytes) as text."""
    return message.tobytes().split(b"\0", 1)[0].decode("latin-1").strip()


def find_more(tty_chars: np.ndarray) -> tuple[int, int] | None:
    """``(row, column)`` of ``--More--`` on the terminal, or ``None``."""
    pos = tty_chars.tobytes().find(_MORE)
    if pos < 0:
        return None
    return divmod(pos, tty_chars.shape[1])


def more_text(tty_chars: np.ndarray, row: int, col: int) -> str:
    """The text a ``--More--`` at ``(row, col)`` dismisses.

    On the message line (``row == 0``) it is the line's text before ``--More--``; lower down it ends a
    text window whose left edge is the ``--More--`` column: the window's rows above it, from that column.
    """
    if row == 0:
        return tty_chars[0, :col].tobytes().decode("latin-1").strip()
    lines = [line.tobytes().decode("latin-1").rstrip() for line in tty_chars[:row, col:]]
    return "\n".join(lines).strip("\n")


def render_inventory(inv_letters: np.ndarray, inv_strs: np.ndarray) -> str:
    """``Inventory:`` then ``<letter>: <item>`` per item (``(empty)`` when there is none).

    Args:
        inv_letters: NLE's ``inv_letters``, shape ``(55,)`` uint8, 0 after the last item.
        inv_strs: NLE's ``inv_strs``, shape ``(55, 80)`` uint8, NUL-terminated strings.
    """
    lines = ["Inventory:"]
    for letter, text in zip(inv_letters.tolist(), inv_strs):
        if letter == 0:
            break
        item = text.tobytes().split(b"\0", 1)[0].decode("latin-1")
        lines.append(f"{chr(letter)}: {item}")
    if len(lines) == 1:
        lines.append("(empty)")
    return "\n".join(lines)


def render_observation(message: str, description: Sequence[str], cursor: str, ascii_map: str) -> str:
    """Join the four parts under their headers (see the module docstring)."""
    return (
        f"message:\n{message or '(none)'}\n\n"
        f"language observation:\n{chr(10).join(description) or '(nothing noteworthy)'}\n\n"
        f"cursor:\n{cursor}\n\n"
        f"map:\n{ascii_map}"
    )


# ----------------------------------------------------------------------------------------- game loop
#: The NLE observation keys the text envs ask for.
OBSERVATION_KEYS: tuple[str, ...] = ("glyphs", "blstats", "message", "tty_chars", "inv_strs", "inv_letters")
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
#: Distinct screens (maps, language observations) remembered per env.
RECENT_SCREENS = 64


class NetHackTextEnvBase(TextEnv):
    """Shared game loop of the MiniHack and NLE text envs (subclasses add tasks and scoring).

    ``reset(seed)`` draws NetHack's core and display RNG seeds from the env's ``np_random`` (so an int
    seed reproduces the episode exactly and ``None`` continues the stream) and disables NetHack's
    re-seeding; ``fix_moon_phase=True`` (set by the subclasses) keeps moon phase / Friday 13th / night
    from the wall clock. After each action ``--More--`` is dismissed automatically (module docstring).

    Subclasses implement :meth:`_on_observation` (progression bookkeeping), ``instruction``,
    ``progression``, and may extend :meth:`_extra_info` and :meth:`_parse_reply` (the reply parser
    used for replies that are not exactly ``"ACTION: <action>"``).

    Args:
        env: the NLE/MiniHack env (from :func:`make_nle_env`, with ``max_episode_steps`` =
            :data:`NATIVE_STEP_LIMIT`).
        action_names: the action names offered, in order (each must be in ``env.actions``).
        max_steps, format_penalty: see :class:`~verlog.envs.base.TextEnv`.

    Attributes:
        nle: the raw NLE/MiniHack env.
        more_presses: MORE presses made automatically during the last reset/step.
    """

    def __init__(self, env: NLE, action_names: Sequence[str], *, max_steps: int | None, format_penalty: float) -> None:
        super().__init__(max_steps=max_steps, format_penalty=format_penalty)
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
        """The inventory (:func:`render_inventory`); ``""`` before the first reset."""
        obs = self._obs
        if obs is None:
            return ""
        letters, strs = obs["inv_letters"], obs["inv_strs"]
        return self._inventories.get((letters.tobytes(), strs.tobytes()), render_inventory, letters, strs)

    @property
    def message(self) -> str:
        """The message part of the current observation."""
        return self._message

    @property
    def blstats(self) -> np.ndarray:
        """A copy of NLE's bottom-line statistics of the current state. RuntimeError before reset."""
        return require_episode(self._obs)["blstats"].copy()

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
        blstats = self._obs["blstats"]
        return {"more_presses": self.more_presses, "turn": int(blstats[nethack.NLE_BL_TIME])}

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
        if self._more_index is None or _MORE not in obs["tty_chars"].tobytes():  # the usual case
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
        glyphs, blstats, tty = obs["glyphs"], obs["blstats"], obs["tty_chars"]
        x, y = int(blstats[nethack.NLE_BL_X]), int(blstats[nethack.NLE_BL_Y])
        # A finished game has zero blstats (x = 0, a column no running game puts the agent in), so
        # its key never equals a running game's.
        description, cursor = self._descriptions.get((glyphs.tobytes(), x, y), self._describe, glyphs, x, y)
        ascii_map = self._maps.get(tty.tobytes(), render_map, tty)
        return render_observation(self._message, description, cursor, ascii_map)

    def _describe(self, glyphs: np.ndarray, x: int, y: int) -> tuple[list[str], str]:
        """The language observation's lines and the cursor line (only the latter once the game is over)."""
        rows, cols = glyphs.shape
        if self.nle.nethack.in_normal_game() and 0 <= x < cols and 0 <= y < rows:
            return describe_surroundings(glyphs, x, y), cursor_line(glyphs, x, y)
        return [], "The game is over."  # the map is gone and blstats are zero

    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        core, disp = (int(v) for v in self.np_random.integers(0, 2**62, size=2))
        self._seed_game(core, disp)
        obs, info = self.nle.reset()
        obs, _, done, truncated, info, parts = self._skip_more(obs, False, False, info)
        self._set_obs(obs, parts)
        self._on_observation(True, 0.0, done, int(info["end_status"]))
        return self._render(), self._extra_info()

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, done, truncated, info = self.nle.step(self._action_index[action])
        obs, more_reward, done, truncated, info, parts = self._skip_more(obs, done, truncated, info)
        reward = float(reward) + more_reward
        self._set_obs(obs, parts)
        terminated = bool(done) and not truncated
        self._on_observation(False, reward, bool(done), int(info["end_status"]))
        return self._render(), reward, terminated, bool(truncated), self._extra_info()

    def close(self) -> None:
        """Close the NetHack process of this env."""
        self.nle.close()
        super().close()
