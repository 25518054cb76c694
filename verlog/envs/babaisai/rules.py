"""The Baba Is AI rule engine: a grid of stacked items whose behaviour is set by rules written on it.

Semantics (those of ``nacloos/baba-is-ai``, the game BALROG uses, written independently here and
cleaned up where upstream only looks at the top item of a cell):

* The board is ``width`` x ``height`` cells, ``(x, y)`` with ``x`` to the right and ``y`` down.
  The outer ring is the solid, indestructible edge of the map: nothing enters it and it is no object
  (upstream's border ``Wall``). Every other cell holds any number of items (a stack, kept sorted).
* Items are objects (``baba``, ``key``, ``ball``, ``door``, ``wall``; each with a colour) or text
  blocks: nouns (the same five names), the operator ``is`` and the properties ``you``, ``win``,
  ``stop``, ``push``, ``defeat``.
* Rules are read from the board: an ``is`` block with a noun on its left and a property (or a noun)
  on its right is a horizontal rule, with a noun above and a property/noun below a vertical one
  (``"key is win"``). ``X is <noun Y>`` turns every X object into a Y (unless ``X is X`` holds).
  Text blocks are always PUSH; objects have exactly the properties the rules give their kind.
* An action ``up``/``right``/``down``/``left`` moves every YOU item one cell, front-most first. A move
  pushes the PUSH items of the cells ahead (a whole chain moves or nothing does); it fails if the chain
  runs into the edge or into a cell holding a STOP item that is not PUSH. Items that are neither STOP
  nor PUSH are walked over (they share the cell). ``idle`` moves nothing.
* After the moves the rules are re-read (only when a text block moved), transformations are applied,
  then: a YOU item sharing a cell with a DEFEAT item is destroyed; if a YOU item shares a cell with a
  WIN item (itself included) the game is won; otherwise, if no YOU item is left, the game is lost.

Departures from upstream (all in cases where upstream is inconsistent): upstream checks WIN/DEFEAT
against the rules *before* the move and only against the top item of the destination cell, lets a
pushed-but-blocked PUSH *object* be walked over, never ends the game when nothing is YOU (BALROG's
wrapper then silently resets the level), and implements ``X is Y`` by stacking a new Y on every X.

Items are ints (:mod:`verlog.envs.babaisai.items`).
"""

from __future__ import annotations

import numbers
from typing import Sequence

from verlog.envs.babaisai.items import (
    DEFEAT,
    IS,
    KIND_MASK,
    NOUN_OFFSET,
    OBJECT_NAMES,
    PROPERTY_BITS,
    PROPERTY_OFFSET,
    PUSH,
    STOP,
    WIN_PROP,
    YOU,
    check_code,
    is_noun,
    is_property,
    is_text,
    item_code,
    item_name,
    item_token,
    parse_token,
    text_word,
)

__all__ = [
    "ACTIONS",
    "DIRECTIONS",
    "LOSE",
    "ONGOING",
    "WIN",
    "BabaGame",
    "parse_board",
]

#: The actions, in BALROG's order (its index is the engine action).
ACTIONS: tuple[str, ...] = ("idle", "up", "right", "down", "left")
#: (dx, dy) of each engine action.
DIRECTIONS: tuple[tuple[int, int], ...] = ((0, 0), (0, -1), (1, 0), (0, 1), (-1, 0))

# Outcomes of BabaGame.step.
ONGOING, WIN, LOSE = 0, 1, -1


# Base properties per kind: every text block is PUSH, objects have none until a rule says so.
_BASE_PROPS: tuple[int, ...] = tuple(PUSH if is_text(k) else 0 for k in range(KIND_MASK + 1))


class BabaGame:
    """One Baba Is AI board and its rules; :meth:`step` plays one action.

    Args:
        width, height: board size in cells, the solid edge ring included (both >= 3).
        cells: optional flat list (``y * width + x``) of item-code tuples; edge cells must be empty.

    Attributes:
        width, height: board size.
        cells: ``list[tuple[int, ...]]``, the sorted items of each cell (read-only for callers: use
            :meth:`add`/:meth:`remove` and then :meth:`refresh` to edit a board by hand).
        rules: ``tuple[tuple[str, str], ...]`` of the active rules, e.g. ``(("baba", "you"),)``, in
            reading order (``is`` blocks row by row, horizontal before vertical), without duplicates.

    Raises:
        ValueError: bad sizes, a wrong number of cells, invalid item codes or items on the edge.
        TypeError: sizes or codes that are not ints.
    """

    __slots__ = ("width", "height", "cells", "solid", "rules", "_props", "_transforms", "_key", "_yous")

    def __init__(self, width: int, height: int, cells: Sequence[Sequence[int]] | None = None) -> None:
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (width, height)):
            raise TypeError(f"width and height must be ints, got {width!r} and {height!r}")
        if width < 3 or height < 3:
            raise ValueError(f"a board needs width and height >= 3 (edge included), got {width}x{height}")
        self.width = width
        self.height = height
        self.solid: tuple[bool, ...] = tuple(
            x in (0, width - 1) or y in (0, height - 1) for y in range(height) for x in range(width)
        )
        if cells is None:
            self.cells: list[tuple[int, ...]] = [()] * (width * height)
        else:
            if len(cells) != width * height:
                raise ValueError(f"expected {width * height} cells, got {len(cells)}")
            self.cells = [tuple(sorted(check_code(c) for c in cell)) for cell in cells]
            for idx, cell in enumerate(self.cells):
                if cell and self.solid[idx]:
                    raise ValueError(f"cell {(idx % width, idx // width)} is on the edge of the map and must be empty")
        self.rules: tuple[tuple[str, str], ...] = ()
        self._props: list[int] = list(_BASE_PROPS)
        self._transforms: dict[int, int] = {}
        self._key: bytes | None = None
        # (cell index, code) of every YOU item in row-major order; None = to be recomputed.
        self._yous: list[tuple[int, int]] | None = None
        self.refresh()

    # ------------------------------------------------------------------ editing
    def _index(self, x: int, y: int) -> int:
        if not (0 <= x < self.width and 0 <= y < self.height):
            raise ValueError(f"cell {(x, y)} is outside the {self.width}x{self.height} board")
        return y * self.width + x

    def add(self, x: int, y: int, code: int) -> None:
        """Put item ``code`` on cell ``(x, y)`` (call :meth:`refresh` after adding text blocks).

        Raises:
            ValueError: the cell is outside the board or on its solid edge, or the code is invalid.
            TypeError: ``code`` is not an int.
        """
        idx = self._index(x, y)
        if self.solid[idx]:
            raise ValueError(f"cell {(x, y)} is on the solid edge of the map")
        check_code(code)
        self.cells[idx] = tuple(sorted(self.cells[idx] + (code,)))
        self._key = self._yous = None

    def remove(self, x: int, y: int, code: int) -> None:
        """Take item ``code`` off cell ``(x, y)``. Raises ValueError if it is not there."""
        idx = self._index(x, y)
        cell = list(self.cells[idx])
        if code not in cell:
            raise ValueError(f"no item {code} ({item_name(code)}) on cell {(x, y)}")
        cell.remove(code)
        self.cells[idx] = tuple(cell)
        self._key = self._yous = None

    def items_at(self, x: int, y: int) -> tuple[int, ...]:
        """The sorted item codes on cell ``(x, y)``."""
        return self.cells[self._index(x, y)]

    def copy(self) -> "BabaGame":
        """An independent copy (cells are immutable tuples, so the list copy is enough)."""
        new = BabaGame.__new__(BabaGame)
        new.width, new.height, new.solid = self.width, self.height, self.solid
        new.cells = list(self.cells)
        new.rules, new._props, new._transforms = self.rules, list(self._props), dict(self._transforms)
        new._key, new._yous = self._key, self._yous
        return new

    # ------------------------------------------------------------------ rules
    def refresh(self) -> None:
        """Re-read the rules from the board and apply transformations (after editing by hand)."""
        self._read_rules()
        if self._transforms:
            self._apply_transforms()
        self._key = self._yous = None

    def _read_rules(self) -> None:
        width, cells = self.width, self.cells
        found: list[tuple[int, int]] = []  # (noun kind, predicate kind)
        for idx, cell in enumerate(cells):
            if not cell:
                continue
            for code in cell:
                if code & KIND_MASK != IS:
                    continue
                for before, after in ((idx - 1, idx + 1), (idx - width, idx + width)):
                    if before < 0 or after >= len(cells):
                        continue
                    for left in cells[before]:
                        lk = left & KIND_MASK
                        if not is_noun(lk):
                            continue
                        for right in cells[after]:
                            rk = right & KIND_MASK
                            if is_property(rk) or is_noun(rk):
                                if (lk, rk) not in found:
                                    found.append((lk, rk))
        props = list(_BASE_PROPS)
        transforms: dict[int, int] = {}
        identities = {lk for lk, rk in found if lk == rk}
        for lk, rk in found:
            kind = lk - NOUN_OFFSET
            if is_property(rk):
                props[kind] |= 1 << (rk - PROPERTY_OFFSET)
            elif lk != rk and kind not in transforms and lk not in identities:
                transforms[kind] = rk - NOUN_OFFSET
        self._props = props
        self._transforms = transforms
        self.rules = tuple((text_word(lk), text_word(rk)) for lk, rk in found)

    def _apply_transforms(self) -> None:
        transforms, cells = self._transforms, self.cells
        for idx, cell in enumerate(cells):
            if cell and any((c & KIND_MASK) in transforms for c in cell):
                cells[idx] = tuple(
                    sorted(
                        item_code(OBJECT_NAMES[transforms[c & KIND_MASK] - 1]) if (c & KIND_MASK) in transforms else c
                        for c in cell
                    )
                )

    def properties(self, code: int) -> frozenset[str]:
        """The properties item ``code`` has under the current rules (text blocks: ``{"push"}``)."""
        bits = self._props[code & KIND_MASK]
        return frozenset(name for name, bit in PROPERTY_BITS.items() if bits & bit)

    # ------------------------------------------------------------------ queries
    def _you_cells(self) -> list[tuple[int, int]]:
        """``(cell index, code)`` of every YOU item in row-major order (cached between moves)."""
        if self._yous is None:
            props = self._props
            self._yous = [
                (idx, code)
                for idx, cell in enumerate(self.cells)
                if cell
                for code in cell
                if props[code & KIND_MASK] & YOU
            ]
        return self._yous

    def you_items(self) -> list[tuple[int, int, int]]:
        """``(x, y, code)`` of every YOU item, in row-major order (then by code within a cell)."""
        width = self.width
        return [(idx % width, idx // width, code) for idx, code in self._you_cells()]

    def player(self) -> tuple[int, int, int] | None:
        """``(x, y, code)`` of the first YOU item in row-major order, or ``None`` when nothing is YOU."""
        yous = self._you_cells()
        if not yous:
            return None
        idx, code = yous[0]
        return idx % self.width, idx // self.width, code

    def outcome(self) -> int:
        """:data:`WIN` if a YOU item shares a cell with a WIN item, :data:`LOSE` if nothing is YOU,
        else :data:`ONGOING` (DEFEAT is applied by :meth:`step`, not here)."""
        props = self._props
        alive = False
        for cell in self.cells:
            if not cell:
                continue
            bits = 0
            for code in cell:
                bits |= props[code & KIND_MASK]
            if bits & YOU:
                alive = True
                if bits & WIN_PROP:
                    return WIN
        return ONGOING if alive else LOSE

    @property
    def state_key(self) -> bytes:
        """The exact board as bytes (size, then each cell's sorted items and a 255 separator).

        Rules, properties and the player are functions of the board, so equal keys mean equal
        game states (the step count is not part of it). Cached until the board changes.
        """
        if self._key is None:
            out = [self.width, self.height]
            for cell in self.cells:
                if cell:
                    out.extend(cell)
                out.append(255)
            self._key = bytes(out)
        return self._key

    # ------------------------------------------------------------------ dynamics
    def step(self, action: int) -> int:
        """Play engine action ``action`` (index into :data:`ACTIONS`) and return the outcome.

        Returns:
            :data:`WIN`, :data:`LOSE` or :data:`ONGOING` (see the module docstring for the order of
            moves, rule updates, DEFEAT and the end checks).

        Raises:
            ValueError: ``action`` is not in ``range(5)``.
        """
        if not (action.__class__ is int and 0 <= action < 5):
            if isinstance(action, bool) or not isinstance(action, numbers.Integral) or not 0 <= action < 5:
                raise ValueError(f"action must be an int in range(5) ({ACTIONS}), got {action!r}")
            action = int(action)
        if action:
            movers = self._you_cells()
            if movers:
                dx, dy = DIRECTIONS[action]
                width = self.width
                if len(movers) > 1:  # front-most first, so that a line of YOU items moves together
                    movers = sorted(movers, key=lambda m: -((m[0] % width) * dx + (m[0] // width) * dy))
                delta = dy * width + dx
                text_moved = False
                for idx, code in movers:
                    if code in self.cells[idx]:
                        text_moved |= self._move(idx, code, delta)
                self._key = None
                if text_moved:
                    self._read_rules()
                if self._transforms:
                    self._apply_transforms()
        return self._resolve()

    def _move(self, idx: int, code: int, delta: int) -> bool:
        """Move item ``code`` from cell ``idx`` by ``delta`` cells, pushing; return whether text moved.

        Nothing happens when the move is blocked.
        """
        cells, solid, props = self.cells, self.solid, self._props
        chain: list[int] = []
        j = idx + delta
        while True:
            if solid[j]:
                return False
            pushed = False
            for c in cells[j]:
                bits = props[c & KIND_MASK]
                if bits & PUSH:
                    pushed = True
                elif bits & STOP:
                    return False
            if not pushed:
                break
            chain.append(j)
            j += delta
        text_moved = False
        for j in reversed(chain):
            moving = tuple(c for c in cells[j] if props[c & KIND_MASK] & PUSH)
            cells[j] = tuple(c for c in cells[j] if not props[c & KIND_MASK] & PUSH)
            cells[j + delta] = tuple(sorted(cells[j + delta] + moving))
            if not text_moved:
                text_moved = any((c & KIND_MASK) > NOUN_OFFSET for c in moving)
        src = list(cells[idx])
        src.remove(code)
        cells[idx] = tuple(src)
        cells[idx + delta] = tuple(sorted(cells[idx + delta] + (code,)))
        return text_moved

    def _resolve(self) -> int:
        """Destroy YOU items on DEFEAT cells, refresh the YOU cache, return the outcome."""
        props, cells = self._props, self.cells
        yous: list[tuple[int, int]] = []
        won = False
        for idx, cell in enumerate(cells):
            if not cell:
                continue
            bits = 0
            for code in cell:
                bits |= props[code & KIND_MASK]
            if not bits & YOU:
                continue
            if bits & DEFEAT:
                cells[idx] = tuple(c for c in cell if not props[c & KIND_MASK] & YOU)
                self._key = None
                continue
            yous.extend((idx, code) for code in cell if props[code & KIND_MASK] & YOU)
            if bits & WIN_PROP:
                won = True
        self._yous = yous
        if won:
            return WIN
        return ONGOING if yous else LOSE

    # ------------------------------------------------------------------ text
    def render(self) -> str:
        """The interior of the board in the token syntax of :func:`parse_board` (one row per line)."""
        rows = []
        for y in range(1, self.height - 1):
            tokens = []
            for x in range(1, self.width - 1):
                cell = self.cells[y * self.width + x]
                tokens.append("+".join(item_token(c) for c in cell) if cell else ".")
            rows.append(" ".join(tokens))
        return "\n".join(rows)

    def __repr__(self) -> str:
        return f"BabaGame({self.width}x{self.height}, rules={list(self.rules)})"


def parse_board(text: str) -> BabaGame:
    """Build a board from rows of whitespace-separated tokens (the solid edge ring is added around).

    Tokens: ``.`` empty; an object ``baba``, ``key``, ``ball``, ``door``, ``wall``, optionally with a
    colour (``key/red``); a text block in capitals (``BABA``, ``KEY``, ..., ``IS``, ``YOU``, ``WIN``,
    ``STOP``, ``PUSH``, ``DEFEAT``); several items on one cell joined by ``+`` (``baba+key``). Blank
    lines are ignored. Example::

        BABA IS  YOU .
        .    .   .   .
        baba .   KEY door

    Raises:
        ValueError: ragged rows, no rows, or an unknown token.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    rows = [line.split() for line in text.splitlines() if line.strip()]
    if not rows:
        raise ValueError("the board text has no rows")
    inner_w = len(rows[0])
    if any(len(r) != inner_w for r in rows):
        raise ValueError(f"all rows must have the same number of tokens, got {[len(r) for r in rows]}")
    game = BabaGame(inner_w + 2, len(rows) + 2)
    for y, row in enumerate(rows, start=1):
        for x, token in enumerate(row, start=1):
            if token == ".":
                continue
            for part in token.split("+"):
                game.add(x, y, parse_token(part))
    game.refresh()
    return game

