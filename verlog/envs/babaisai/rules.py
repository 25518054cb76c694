"""The Baba Is AI rule engine: a grid of stacked items whose behaviour is set by rules written on it.

Semantics: those of ``nacloos/baba-is-ai``, the game BALROG uses, written independently here, with
upstream's top-of-the-stack logic kept so that a seed and a list of actions give BALROG's game:

* The board is ``width`` x ``height`` cells, ``(x, y)`` with ``x`` to the right and ``y`` down.
  The outer ring is the solid, indestructible edge of the map: nothing enters it and it is no object
  (upstream's border ``Wall``). Every other cell holds any number of items, a stack in the order they
  arrived: the last item is on top.
* Items are objects (``baba``, ``key``, ``ball``, ``door``, ``wall``; each with a colour) or text
  blocks: nouns (the same five names), the operator ``is`` and the properties ``you``, ``win``,
  ``stop``, ``push``, ``defeat``.
* Rules are read from the top item of each cell: an ``is`` block with a noun on its left and a
  property (or a noun) on its right is a horizontal rule, with a noun above and a property/noun below
  a vertical one (``"key is win"``). Text blocks are always PUSH; objects have exactly the properties
  the rules give their kind.
* An action ``up``/``right``/``down``/``left`` moves the YOU items one cell each, in upstream's order:
  cells in row-major order, each cell's top item if it is YOU and has not moved yet (a YOU item
  under another item does not move). A move first pushes the item on top of the cell ahead if it
  is PUSH (recursively, so a line of blocks moves together or not at all); it then fails if the cell
  ahead is the edge or has a text block or a STOP object on top. Anything else is walked over (the
  mover lands on top of it and hides it). ``idle`` moves nothing.
* The step is won if the last YOU item to move found a WIN item on top of its destination (its own
  cell when it could not move, so a YOU that is also WIN wins by walking into a wall), lost if it
  found a DEFEAT item there; both under the rules from before the move. Then the rules are re-read,
  and each ``X is <noun Y>`` sentence puts a new Y object on top of every cell whose top item is an X
  (the X stays underneath; ``X is X`` stacks a copy).

Two departures: when no item is YOU the step returns :data:`LOSE` (upstream goes on; BALROG's wrapper
then silently starts a new level); and a YOU item that a push uncovers further along the scan moves
when the scan reaches it (upstream keeps a "has moved" flag only on items that were on top when the
step began, so there it raises an ``AttributeError`` or reads a flag left from an earlier step).

Items are ints (:mod:`verlog.envs.babaisai.items`).
"""

from __future__ import annotations

import heapq
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
        cells: ``list[tuple[int, ...]]``, the items of each cell, bottom to top (read-only for callers: use
            :meth:`add`/:meth:`remove` and then :meth:`refresh` to edit a board by hand).
        rules: ``tuple[tuple[str, str], ...]`` of the active rules, e.g. ``(("baba", "you"),)``, in
            reading order (``is`` blocks row by row, horizontal before vertical), without duplicates.
        sentences: the same, but every sentence on the board, duplicates included (a rule written
            twice is listed twice, as in BALROG's ``Active rules``).

    Raises:
        ValueError: bad sizes, a wrong number of cells, invalid item codes or items on the edge.
        TypeError: sizes or codes that are not ints.
    """

    __slots__ = ("width", "height", "cells", "solid", "rules", "sentences", "_props", "_transforms", "_key",
                 "_yous")

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
            self.cells = [tuple(check_code(c) for c in cell) for cell in cells]
            for idx, cell in enumerate(self.cells):
                if cell and self.solid[idx]:
                    raise ValueError(f"cell {(idx % width, idx // width)} is on the edge of the map and must be empty")
        self.rules: tuple[tuple[str, str], ...] = ()
        self.sentences: tuple[tuple[str, str], ...] = ()
        self._props: list[int] = list(_BASE_PROPS)
        self._transforms: list[tuple[int, int]] = []
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
        """Put item ``code`` on top of cell ``(x, y)`` (call :meth:`refresh` after adding text blocks).

        Raises:
            ValueError: the cell is outside the board or on its solid edge, or the code is invalid.
            TypeError: ``code`` is not an int.
        """
        idx = self._index(x, y)
        if self.solid[idx]:
            raise ValueError(f"cell {(x, y)} is on the solid edge of the map")
        check_code(code)
        self.cells[idx] = self.cells[idx] + (code,)
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
        """The item codes on cell ``(x, y)``, bottom to top."""
        return self.cells[self._index(x, y)]

    def copy(self) -> "BabaGame":
        """An independent copy (cells are immutable tuples, so the list copy is enough)."""
        new = BabaGame.__new__(BabaGame)
        new.width, new.height, new.solid = self.width, self.height, self.solid
        new.cells = list(self.cells)
        new.rules, new.sentences = self.rules, self.sentences
        new._props, new._transforms = list(self._props), self._transforms
        new._key, new._yous = self._key, self._yous
        return new

    # ------------------------------------------------------------------ rules
    def refresh(self) -> None:
        """Re-read the rules from the board (after editing by hand). Transformations (``X is <noun>``)
        act from the next move on, as upstream, which applies them only after a move."""
        self._read_rules()
        self._key = self._yous = None

    def _read_rules(self) -> None:
        width, cells = self.width, self.cells
        found: list[tuple[int, int]] = []  # (noun kind, predicate kind)
        sentences: list[tuple[int, int]] = []
        size = len(cells)
        for idx, cell in enumerate(cells):
            if not cell or cell[-1] & KIND_MASK != IS:
                continue
            for before, after in ((idx - 1, idx + 1), (idx - width, idx + width)):
                if before < 0 or after >= size or not cells[before] or not cells[after]:
                    continue
                lk, rk = cells[before][-1] & KIND_MASK, cells[after][-1] & KIND_MASK
                if is_noun(lk) and (is_property(rk) or is_noun(rk)):
                    sentences.append((lk, rk))
                    if (lk, rk) not in found:
                        found.append((lk, rk))
        props = list(_BASE_PROPS)
        for lk, rk in found:
            if is_property(rk):
                props[lk - NOUN_OFFSET] |= 1 << (rk - PROPERTY_OFFSET)
        # X is <noun Y>: (object kind X, item code of a new Y), once per sentence, in reading order.
        transforms = [
            (lk - NOUN_OFFSET, item_code(OBJECT_NAMES[rk - NOUN_OFFSET - 1])) for lk, rk in sentences if is_noun(rk)
        ]
        self._props = props
        self._transforms = transforms
        self.rules = tuple((text_word(lk), text_word(rk)) for lk, rk in found)
        self.sentences = tuple((text_word(lk), text_word(rk)) for lk, rk in sentences)

    def _apply_transforms(self) -> None:
        """Upstream's ``X is Y``: for each such sentence in reading order, every cell whose top item is
        an X object gets a new Y object (default colour) on top; the X stays underneath."""
        cells = self.cells
        for kind, new in self._transforms:
            for idx, cell in enumerate(cells):
                if cell and cell[-1] & KIND_MASK == kind:
                    cells[idx] = cell + (new,)

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
        """The exact board as bytes (size, then each cell's items bottom to top and a 255 separator).

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
        bits = 0  # what the last YOU item to move found on top of its destination
        if action:
            dx, dy = DIRECTIONS[action]
            delta = dy * self.width + dx
            cells, props = self.cells, self._props
            moved: set[tuple[int, int]] = set()  # (cell, stack position) of the YOU items that moved
            text_moved = False
            # Upstream's order: the cells in row-major order as they are at that moment, each
            # cell's top item if it is YOU and has not moved yet. Only cells with a YOU item on top
            # are visited: those at the start, plus those further on whose top block a push took
            # away (a YOU item under it is then on top when upstream's scan gets there).
            todo = sorted({idx for idx, _ in self._you_cells() if props[cells[idx][-1] & KIND_MASK] & YOU})
            queued = set(todo)
            while todo:
                idx = heapq.heappop(todo)
                cell = cells[idx]
                if not cell or not props[cell[-1] & KIND_MASK] & YOU or (idx, len(cell) - 1) in moved:
                    continue
                dest, pushed_text, bits = self._move(idx, delta)
                text_moved |= pushed_text
                moved.add((dest, len(cells[dest]) - 1))
                if delta > 0:
                    j = idx + delta
                    while not self.solid[j]:
                        top = cells[j][-1] if cells[j] else 0
                        if (top and props[top & KIND_MASK] & YOU and j not in queued
                                and (j, len(cells[j]) - 1) not in moved):
                            heapq.heappush(todo, j)
                            queued.add(j)
                        j += delta
            self._key = None
            if text_moved:
                self._read_rules()
            if self._transforms:
                self._apply_transforms()
        return self._resolve(bits)

    def _move(self, idx: int, delta: int) -> tuple[int, bool, int]:
        """Move the top item of cell ``idx`` by ``delta`` cells, as upstream: a PUSH item on top of
        the cell ahead is pushed first (recursively); the move then happens unless the cell ahead
        is the edge or has a text block or a STOP object on top.

        Returns:
            ``(cell the item is on afterwards, whether a text block moved, the property bits of the
            top item of that cell before the item arrived)``: the bits decide WIN and DEFEAT (on a
            blocked move they are the item's own).
        """
        cells, props = self.cells, self._props
        j = idx + delta
        text_moved = False
        if not self.solid[j]:
            if cells[j] and props[cells[j][-1] & KIND_MASK] & PUSH:
                text_moved = self._move(j, delta)[1]
            ahead = cells[j]
            top = ahead[-1] & KIND_MASK if ahead else 0
            if not ahead or not (is_text(top) or props[top] & STOP):
                code = cells[idx][-1]
                cells[idx] = cells[idx][:-1]
                cells[j] = ahead + (code,)
                return j, text_moved or is_text(code & KIND_MASK), props[top] if ahead else 0
        return idx, text_moved, props[cells[idx][-1] & KIND_MASK]

    def _resolve(self, bits: int) -> int:
        """The outcome of a step whose last YOU mover found ``bits`` at its destination; refreshes
        the YOU cache."""
        self._yous = None
        if bits & WIN_PROP:
            return WIN
        if bits & DEFEAT:
            return LOSE
        return ONGOING if self._you_cells() else LOSE

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

