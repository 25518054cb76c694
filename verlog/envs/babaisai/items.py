"""The items of Baba Is AI and their integer codes: objects, text blocks, colours and properties.

Item codes (``int`` < 256, so a board packs into bytes): ``kind | (colour << 5)`` where kind is
1-5 for the objects of :data:`OBJECT_NAMES`, ``NOUN_OFFSET + k`` for the noun blocks, :data:`IS` for
``is`` and ``PROPERTY_OFFSET + p`` for the properties of :data:`PROPERTY_NAMES`. Text blocks have no
colour. :func:`item_token` and :func:`parse_token` write and read the board syntax of
:func:`~verlog.envs.babaisai.rules.parse_board`.
"""

from __future__ import annotations

__all__ = [
    "COLOR_NAMES",
    "COLOR_SHIFT",
    "DEFAULT_COLORS",
    "IS",
    "KIND_MASK",
    "NOUN_OFFSET",
    "OBJECT_KIND",
    "OBJECT_NAMES",
    "PROPERTY_BITS",
    "PROPERTY_NAMES",
    "PROPERTY_OFFSET",
    "YOU",
    "WIN_PROP",
    "STOP",
    "PUSH",
    "DEFEAT",
    "check_code",
    "is_noun",
    "is_property",
    "is_text",
    "item_code",
    "item_kind",
    "item_name",
    "item_token",
    "noun_code",
    "parse_token",
    "property_code",
    "text_word",
]

#: Object kinds, in code order (kind = index + 1).
OBJECT_NAMES: tuple[str, ...] = ("baba", "key", "ball", "door", "wall")
#: Properties, in code order (bit = 1 << index).
PROPERTY_NAMES: tuple[str, ...] = ("you", "win", "stop", "push", "defeat")
#: Colours (index 0 = none, used by text blocks).
COLOR_NAMES: tuple[str, ...] = ("none", "red", "green", "blue", "white", "grey")
#: Default colour of each object kind (hand-made boards, transformations).
DEFAULT_COLORS: dict[str, str] = {"baba": "white", "key": "blue", "ball": "green", "door": "red", "wall": "grey"}

NOUN_OFFSET = 8
IS = 14
PROPERTY_OFFSET = 16
#: ``code & KIND_MASK`` is an item's kind, ``code >> COLOR_SHIFT`` its colour index.
KIND_MASK = 31
COLOR_SHIFT = 5

#: Property bits.
YOU, WIN_PROP, STOP, PUSH, DEFEAT = 1, 2, 4, 8, 16
#: Property name -> its bit.
PROPERTY_BITS = {name: 1 << i for i, name in enumerate(PROPERTY_NAMES)}

#: Object name -> its kind.
OBJECT_KIND = {name: i + 1 for i, name in enumerate(OBJECT_NAMES)}
_COLOR_INDEX = {name: i for i, name in enumerate(COLOR_NAMES)}


def item_code(name: str, color: str | None = None) -> int:
    """The code of the object ``name`` (``"key"``) in ``color`` (default: the kind's default colour).

    Raises:
        ValueError: unknown object name or colour.
    """
    if name not in OBJECT_KIND:
        raise ValueError(f"unknown object {name!r}; objects are {OBJECT_NAMES}")
    color = DEFAULT_COLORS[name] if color is None else color
    if color not in _COLOR_INDEX or color == "none":
        raise ValueError(f"unknown colour {color!r}; colours are {COLOR_NAMES[1:]}")
    return OBJECT_KIND[name] | (_COLOR_INDEX[color] << COLOR_SHIFT)


def noun_code(name: str) -> int:
    """The code of the noun text block ``name`` (``"key"``). Raises ValueError for an unknown name."""
    if name not in OBJECT_KIND:
        raise ValueError(f"unknown noun {name!r}; nouns are {OBJECT_NAMES}")
    return NOUN_OFFSET + OBJECT_KIND[name]


def property_code(name: str) -> int:
    """The code of the property text block ``name`` (``"win"``). Raises ValueError for an unknown one."""
    if name not in PROPERTY_BITS:
        raise ValueError(f"unknown property {name!r}; properties are {PROPERTY_NAMES}")
    return PROPERTY_OFFSET + PROPERTY_NAMES.index(name)


def item_kind(code: int) -> int:
    """The kind part of an item code (colour stripped)."""
    return code & KIND_MASK


def text_word(kind: int) -> str:
    """The word of a text-block kind (``"key"``, ``"is"``, ``"win"``)."""
    if kind == IS:
        return "is"
    if NOUN_OFFSET < kind <= NOUN_OFFSET + len(OBJECT_NAMES):
        return OBJECT_NAMES[kind - NOUN_OFFSET - 1]
    if PROPERTY_OFFSET <= kind < PROPERTY_OFFSET + len(PROPERTY_NAMES):
        return PROPERTY_NAMES[kind - PROPERTY_OFFSET]
    raise ValueError(f"kind {kind} is not a text block")


def item_name(code: int) -> str:
    """How an item is named in observations: ``"key"`` for an object, ``"rule `key`"`` for a block.

    Colours are not named (BALROG's text does not name them either; no rule refers to a colour).

    Raises:
        ValueError: an invalid code.
    """
    kind = code & KIND_MASK
    if 1 <= kind <= len(OBJECT_NAMES):
        return OBJECT_NAMES[kind - 1]
    return f"rule `{text_word(kind)}`"


def check_code(code: int) -> int:
    """``code`` if it is a valid item code (an object with a colour, or a colourless text block)."""
    if isinstance(code, bool) or not isinstance(code, int):
        raise TypeError(f"an item code must be an int, got {type(code).__name__}")
    kind, color = code & KIND_MASK, code >> COLOR_SHIFT
    is_object = 1 <= kind <= len(OBJECT_NAMES)
    if code < 0 or (is_object and not 1 <= color < len(COLOR_NAMES)) or (not is_object and color):
        raise ValueError(f"invalid item code {code}")
    item_name(code)  # raises ValueError for kinds that are neither objects nor text blocks
    return code


def is_noun(kind: int) -> bool:
    """Whether ``kind`` is a noun text block."""
    return NOUN_OFFSET < kind <= NOUN_OFFSET + len(OBJECT_NAMES)


def is_property(kind: int) -> bool:
    """Whether ``kind`` is a property text block."""
    return PROPERTY_OFFSET <= kind < PROPERTY_OFFSET + len(PROPERTY_NAMES)


def is_text(kind: int) -> bool:
    """Whether ``kind`` is a text block (noun, ``is`` or property)."""
    return kind > NOUN_OFFSET


def item_token(code: int) -> str:
    """The token of item ``code`` in the board syntax of :func:`~verlog.envs.babaisai.rules.parse_board`
    (``key``, ``key/red`` for a non-default colour, ``KEY``/``IS``/``WIN`` for text blocks)."""
    kind = code & KIND_MASK
    if 1 <= kind <= len(OBJECT_NAMES):
        name = OBJECT_NAMES[kind - 1]
        color = COLOR_NAMES[code >> COLOR_SHIFT]
        return name if color == DEFAULT_COLORS[name] else f"{name}/{color}"
    return text_word(kind).upper()


def parse_token(token: str) -> int:
    """The item code of one board-syntax token (the inverse of :func:`item_token`).

    Raises:
        ValueError: an unknown text block, object or colour.
    """
    if token.isupper():
        word = token.lower()
        if word == "is":
            return IS
        if word in OBJECT_KIND:
            return noun_code(word)
        if word in PROPERTY_BITS:
            return property_code(word)
        words = ", ".join(n.upper() for n in OBJECT_NAMES + PROPERTY_NAMES)
        raise ValueError(f"unknown text block {token!r}; blocks are IS, {words}")
    name, _, color = token.partition("/")
    return item_code(name, color or None)
