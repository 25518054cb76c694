"""The observation text of the BabyAI env: minigrid's egocentric view written as lines of English.

Two styles (:data:`TEXT_STYLES`) describe the same ``V x V`` view (7 x 7 by default: the agent at the
middle of the bottom row, facing up; walls and closed doors block sight). Offsets are in grid steps,
sideways part first: ``a red ball 2 steps left and 3 steps forward``, ``a blue key 1 step forward``.

``"balrog"`` (the default) is byte for byte the text BALROG shows its agents (the descriptions of the
minigrid fork BALROG pins, with BALROG's ``You see`` prefix removed), quirks included:

* ``You carry a <colour> <type>`` first, when the agent holds something;
* then a wall straight ahead, to the left and to the right (in that order), each only when it is the
  first thing met on that line: an object (or door) in between hides it, and so does nothing else
  (empty and unseen cells are passed over);
* then every visible object, column by column from left to right, each column from the farthest row
  to the nearest (not by distance);
* a door is ``a <state> <colour> door`` with the article always ``a`` (``a open purple door``);
  anything else that is not empty floor, a wall or unseen is ``a <colour> <type>`` (so also
  ``a red lava``, ``a green goal``, ``a blue floor``);
* a view with nothing to report is the empty string.

``"tidy"`` is Verlog's earlier wording: the nearest wall on each of the three lines even behind
objects, objects nearest first (distance = steps sideways + forward, then forward, then left to
right), ``an open yellow door``, ``lava``, coloured floor tiles not listed, ``You carry ...`` last, and
``You see nothing around you.`` for an empty view.

The ``"balrog"`` rules were read off the fork's description code; ``tests/test_babyai_balrog.py``
checks them against that code's own output (``tests/data/balrog_babyai.jsonl``; ``docs/balrog.md``
says how it was made).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT, OBJECT_TO_IDX

from verlog.envs.wording import steps

__all__ = ["TEXT_STYLES", "describe_view", "render_view"]

#: The observation text styles: ``"balrog"`` (BALROG's text, the default) and ``"tidy"``.
TEXT_STYLES: tuple[str, ...] = ("balrog", "tidy")

_DOOR_STATE = {0: "open", 1: "closed", 2: "locked"}
_UNSEEN, _EMPTY, _WALL = OBJECT_TO_IDX["unseen"], OBJECT_TO_IDX["empty"], OBJECT_TO_IDX["wall"]
_DOOR = OBJECT_TO_IDX["door"]
#: Types the tidy style never lists as objects (walls are reported along the three lines instead).
_TIDY_NOT_LISTED = frozenset(OBJECT_TO_IDX[t] for t in ("unseen", "empty", "floor", "agent", "wall"))
#: Types the balrog style never lists as objects.
_BALROG_NOT_LISTED = frozenset((_UNSEEN, _EMPTY, _WALL))
#: Types a line from the agent passes over in the balrog style (anything else ends the line).
_BALROG_PASSED = frozenset((_UNSEEN, _EMPTY))
_EMPTY_TIDY_VIEW = "You see nothing around you."


def _tidy_name(type_idx: int, color_idx: int, state: int) -> str:
    obj_type = IDX_TO_OBJECT[type_idx]
    color = IDX_TO_COLOR[color_idx]
    if obj_type == "door":
        adjective = _DOOR_STATE[state]
        article = "an" if adjective[0] in "aeiou" else "a"
        return f"{article} {adjective} {color} door"
    if obj_type == "lava":
        return "lava"
    return f"a {color} {obj_type}"


def _balrog_name(type_idx: int, color_idx: int, state: int) -> str:
    color = IDX_TO_COLOR[color_idx]
    if type_idx == _DOOR:
        return f"a {_DOOR_STATE[state]} {color} door"
    return f"a {color} {IDX_TO_OBJECT[type_idx]}"


def _offset(lateral: int, forward: int) -> str:
    side = f"{steps(abs(lateral))} {'left' if lateral < 0 else 'right'}" if lateral else ""
    ahead = f"{steps(forward)} forward" if forward else ""
    return " and ".join(part for part in (side, ahead) if part)


@functools.lru_cache(maxsize=1 << 16)
def _object_line(style: str, type_idx: int, color_idx: int, state: int, lateral: int, forward: int) -> str:
    """``"a red ball 2 steps left and 3 steps forward"`` (cached: views repeat the same few objects)."""
    name = _balrog_name if style == "balrog" else _tidy_name
    return f"{name(type_idx, color_idx, state)} {_offset(lateral, forward)}"


class _ViewGeometry(NamedTuple):
    """Where things are in a ``V x V`` view flattened to cell index ``col * V + row``."""

    agent: int  # the agent's cell (bottom row, middle column)
    rays: tuple[tuple[tuple[int, str], ...], ...]  # forward, left, right: (cell, "a wall k steps <dir>") outwards
    tidy_order: tuple[int, ...]  # the other cells by distance, then forward, then left to right
    balrog_order: tuple[int, ...]  # the other cells column by column from the left, far rows first
    offsets: tuple[tuple[int, int], ...]  # (lateral, forward) of each cell from the agent


@functools.lru_cache(maxsize=None)
def _view_geometry(size: int) -> _ViewGeometry:
    """The :class:`_ViewGeometry` of a ``size x size`` view (computed once per size)."""
    ax, ay = size // 2, size - 1
    offsets = tuple((col - ax, ay - row) for col in range(size) for row in range(size))
    agent = ax * size + ay
    rays = tuple(
        tuple((col * size + row, f"a wall {steps(k)} {label}") for k, (col, row) in enumerate(ray, start=1))
        for label, ray in (
            ("forward", [(ax, ay - k) for k in range(1, ay + 1)]),
            ("left", [(ax - k, ay) for k in range(1, ax + 1)]),
            ("right", [(ax + k, ay) for k in range(1, size - ax)]),
        )
    )
    others = [cell for cell in range(size * size) if cell != agent]  # col * size + row: already column-major
    tidy_order = sorted(
        others, key=lambda cell: (abs(offsets[cell][0]) + offsets[cell][1], offsets[cell][1], offsets[cell][0])
    )
    return _ViewGeometry(agent, rays, tuple(tidy_order), tuple(others), offsets)


def _balrog_lines(cells: np.ndarray, geometry: _ViewGeometry) -> list[str]:
    types = cells[:, 0].tolist()
    lines: list[str] = []
    carried_type, carried_color, _ = cells[geometry.agent].tolist()
    if carried_type not in _BALROG_NOT_LISTED:
        lines.append(f"You carry a {IDX_TO_COLOR[carried_color]} {IDX_TO_OBJECT[carried_type]}")
    for ray in geometry.rays:
        for cell, wall_line in ray:
            if types[cell] in _BALROG_PASSED:
                continue
            if types[cell] == _WALL:
                lines.append(wall_line)
            break  # the first thing on the line ends it, wall or not
    for cell in geometry.balrog_order:
        if types[cell] not in _BALROG_NOT_LISTED:
            lines.append(_object_line("balrog", *cells[cell].tolist(), *geometry.offsets[cell]))
    return lines


def _tidy_lines(cells: np.ndarray, geometry: _ViewGeometry) -> list[str]:
    types = cells[:, 0].tolist()
    lines: list[str] = []
    for ray in geometry.rays:
        for cell, wall_line in ray:
            if types[cell] == _UNSEEN:
                break
            if types[cell] == _WALL:
                lines.append(wall_line)
                break
    for cell in geometry.tidy_order:  # only the few listed cells are looked at closely
        if types[cell] not in _TIDY_NOT_LISTED:
            lines.append(_object_line("tidy", *cells[cell].tolist(), *geometry.offsets[cell]))
    carried_type, carried_color, carried_state = cells[geometry.agent].tolist()
    if carried_type not in _TIDY_NOT_LISTED:
        lines.append(f"You carry {_tidy_name(carried_type, carried_color, carried_state)}")
    return lines


def describe_view(image: np.ndarray, style: str = "balrog") -> list[str]:
    """Describe minigrid's egocentric encoded view as text lines, in the text style ``style``.

    Args:
        image: ``env.gen_obs()["image"]``: shape ``(V, V, 3)`` (V odd, 7 by default) indexed
            ``[column, row]`` with the agent at ``(V // 2, V - 1)`` facing towards row 0; channels are
            ``(OBJECT_IDX, COLOR_IDX, STATE)`` from ``minigrid.core.constants``; cells the agent cannot
            see are ``unseen`` (type 0), and a carried object is encoded on the agent's own cell.
        style: ``"balrog"`` or ``"tidy"`` (module docstring).

    Returns:
        The observation lines, in the order of the style (none for an empty view).

    Raises:
        ValueError: ``image`` does not have shape ``(V, V, 3)`` with odd ``V >= 3``, or an unknown style.
    """
    if style not in TEXT_STYLES:
        raise ValueError(f"text_style must be one of {list(TEXT_STYLES)}, got {style!r}")
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.shape[0] != image.shape[1] or image.shape[0] % 2 == 0:
        raise ValueError(f"expected an egocentric view of shape (V, V, 3) with odd V, got {image.shape}")
    size = image.shape[0]
    if size < 3:
        raise ValueError(f"view size must be >= 3, got {size}")
    cells = image.reshape(size * size, 3)  # cells[col * size + row] = (type, color, state)
    lines = (_balrog_lines if style == "balrog" else _tidy_lines)(cells, _view_geometry(size))
    return lines


def render_view(image: np.ndarray, style: str = "balrog") -> str:
    """The observation string of a view: :func:`describe_view`'s lines joined by newlines.

    An empty view is ``""`` in the ``"balrog"`` style (as in BALROG) and ``"You see nothing around
    you."`` in the ``"tidy"`` style. Raises as :func:`describe_view`.
    """
    lines = describe_view(image, style)
    if not lines and style == "tidy":
        return _EMPTY_TIDY_VIEW
    return "\n".join(lines)
