"""The rules of Sokoban on a fixed room: moves, pushes, the reward of a step and the text of a room.

A room is a rectangle of cells indexed ``(row, column)`` from the top-left corner; its outer ring is
wall. The layout (walls and targets) never changes during an episode; the state is the player's cell
and the boxes' cells. A move takes the player one cell up, down, left or right; a box in the way is
pushed one cell further when that cell is floor or an empty target, otherwise the move is blocked
(the player stays). Only one box can be pushed at a time and boxes are never pulled.

The step reward is gym-sokoban's (Schrader, ``gym_sokoban/envs/sokoban_env.py``, the Sokoban of
Racanière et al. 2017, "Imagination-Augmented Agents"): :data:`STEP_PENALTY` on every step, plus
:data:`BOX_ON_TARGET` when the number of boxes on targets went up, :data:`BOX_OFF_TARGET` when it
went down, and :data:`ALL_ON_TARGETS` on the step that puts the last box on its target.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "ALL_ON_TARGETS",
    "BOX_OFF_TARGET",
    "BOX_ON_TARGET",
    "Layout",
    "MOVES",
    "STEP_PENALTY",
    "SYMBOLS",
    "CELL_COLOURS",
    "render_room_image",
    "State",
    "move",
    "parse_room",
    "render_room",
    "step_reward",
]

Cell = tuple[int, int]

#: action name -> (row change, column change)
MOVES: dict[str, Cell] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

#: gym-sokoban's reward terms (reward units per step).
STEP_PENALTY = -0.1
BOX_ON_TARGET = 1.0
BOX_OFF_TARGET = -1.0
ALL_ON_TARGETS = 10.0

#: What each cell of a room's text shows. The peers' text (RAGEN) writes a box on a target as ``√``;
#: that character lies outside the text envs' observation charset, so ``*`` (the usual Sokoban file
#: notation for it) stands in.
SYMBOLS: dict[str, str] = {
    "#": "wall",
    "_": "floor",
    "O": "target",
    "X": "box",
    "*": "box on a target",
    "P": "you",
    "S": "you on a target",
}


@dataclass(frozen=True)
class Layout:
    """The fixed part of a room.

    Attributes:
        walls: bool array ``[height, width]``, True on wall cells (the outer ring included).
        targets: the target cells, sorted.
    """

    walls: np.ndarray
    targets: tuple[Cell, ...]

    @property
    def shape(self) -> tuple[int, int]:
        """``(height, width)`` in cells."""
        return int(self.walls.shape[0]), int(self.walls.shape[1])

    def is_free(self, cell: Cell, boxes: frozenset[Cell]) -> bool:
        """Whether ``cell`` is floor or target with no box on it (the player may stand there)."""
        return not self.walls[cell] and cell not in boxes

    def key(self) -> bytes:
        """The layout as bytes (shape, wall mask, targets), part of a state key."""
        head = np.array([*self.shape, *(c for cell in self.targets for c in cell)], dtype=np.int16)
        return head.tobytes() + np.packbits(self.walls).tobytes()


@dataclass(frozen=True)
class State:
    """The changing part of a room: the player's cell and the boxes' cells."""

    player: Cell
    boxes: frozenset[Cell]

    def on_targets(self, layout: Layout) -> int:
        """How many boxes stand on a target."""
        return sum(target in self.boxes for target in layout.targets)

    def key(self) -> bytes:
        """The exact positions as bytes: player first, then the boxes in sorted order."""
        cells = [self.player, *sorted(self.boxes)]
        return np.array(cells, dtype=np.int16).tobytes()


def move(layout: Layout, state: State, action: str) -> tuple[State, bool]:
    """The state after ``action`` and whether a box was pushed.

    Args:
        layout: the room.
        state: the state before the move.
        action: a key of :data:`MOVES`.

    Returns:
        ``(next_state, pushed)``; a blocked move returns ``(state, False)``.

    Raises:
        KeyError: an unknown action.
    """
    dr, dc = MOVES[action]
    row, col = state.player
    ahead = (row + dr, col + dc)
    if layout.walls[ahead]:
        return state, False
    if ahead not in state.boxes:
        return State(ahead, state.boxes), False
    beyond = (ahead[0] + dr, ahead[1] + dc)
    if not layout.is_free(beyond, state.boxes):
        return state, False
    return State(ahead, (state.boxes - {ahead}) | {beyond}), True


def step_reward(on_before: int, on_after: int, num_boxes: int) -> float:
    """gym-sokoban's reward of one step (module docstring), from the boxes on targets before and after.

    Args:
        on_before, on_after: boxes on targets before and after the step.
        num_boxes: boxes in the room.

    Returns:
        ``-0.1`` plus ``+1`` if ``on_after > on_before``, ``-1`` if ``on_after < on_before``, plus
        ``+10`` if ``on_after == num_boxes``: e.g. ``10.9`` for the step that solves the room.
    """
    reward = STEP_PENALTY
    if on_after > on_before:
        reward += BOX_ON_TARGET
    elif on_after < on_before:
        reward += BOX_OFF_TARGET
    if on_after == num_boxes:
        reward += ALL_ON_TARGETS
    return reward


#: RGB of each kind of cell in :func:`render_room_image` (the player is drawn as a smaller square on
#: its cell, so a player on a target still shows the target's colour around it).
CELL_COLOURS: dict[str, tuple[int, int, int]] = {
    "wall": (96, 96, 96), "floor": (0, 0, 0), "target": (200, 40, 40), "box": (200, 150, 40),
    "box_on_target": (40, 190, 60), "player": (60, 120, 255),
}


def render_room_image(layout: Layout, state: State, tile_px: int) -> np.ndarray:
    """The room as an RGB image, ``tile_px`` pixels per cell (:data:`CELL_COLOURS`): walls grey, floor
    black, targets red, boxes orange (green on a target), the player a blue square in the middle half
    of its cell, a one-pixel black grid between cells when ``tile_px >= 4``.

    Returns:
        uint8 ``[height * tile_px, width * tile_px, 3]``.
    """
    height, width = layout.shape
    targets = set(layout.targets)
    cells = np.zeros((height, width, 3), dtype=np.uint8)
    for r in range(height):
        for c in range(width):
            cell = (r, c)
            if layout.walls[cell]:
                kind = "wall"
            elif cell in state.boxes:
                kind = "box_on_target" if cell in targets else "box"
            else:
                kind = "target" if cell in targets else "floor"
            cells[r, c] = CELL_COLOURS[kind]
    image = np.repeat(np.repeat(cells, tile_px, axis=0), tile_px, axis=1)
    if tile_px >= 4:
        image[::tile_px] = 0
        image[:, ::tile_px] = 0
    r, c = state.player
    lo, hi = tile_px // 4, tile_px - tile_px // 4
    image[r * tile_px + lo:r * tile_px + hi, c * tile_px + lo:c * tile_px + hi] = CELL_COLOURS["player"]
    return image


def render_room(layout: Layout, state: State) -> str:
    """The room as rows of :data:`SYMBOLS`, cells separated by one space, rows by newlines."""
    targets = set(layout.targets)
    rows = []
    for r in range(layout.shape[0]):
        cells = []
        for c in range(layout.shape[1]):
            cell = (r, c)
            on_target = cell in targets
            if layout.walls[cell]:
                cells.append("#")
            elif cell == state.player:
                cells.append("S" if on_target else "P")
            elif cell in state.boxes:
                cells.append("*" if on_target else "X")
            else:
                cells.append("O" if on_target else "_")
        rows.append(" ".join(cells))
    return "\n".join(rows)


def parse_room(text: str) -> tuple[Layout, State]:
    """A room from rows of :data:`SYMBOLS` (cells may be separated by spaces), e.g. for tests.

    Raises:
        ValueError: rows of unequal length, an unknown symbol, not exactly one player, an open outer
            ring, no box, or as many boxes as targets not holding.
    """
    rows = [line.replace(" ", "") for line in text.strip().splitlines()]
    if not rows or len({len(row) for row in rows}) != 1:
        raise ValueError("a room needs rows of equal length")
    height, width = len(rows), len(rows[0])
    walls = np.zeros((height, width), dtype=bool)
    targets, boxes, players = [], set(), []
    for r, row in enumerate(rows):
        for c, symbol in enumerate(row):
            if symbol not in SYMBOLS:
                raise ValueError(f"unknown room symbol {symbol!r} at row {r}, column {c}")
            walls[r, c] = symbol == "#"
            if symbol in "O*S":
                targets.append((r, c))
            if symbol in "X*":
                boxes.add((r, c))
            if symbol in "PS":
                players.append((r, c))
    if len(players) != 1:
        raise ValueError(f"a room needs exactly one player, got {len(players)}")
    ring = np.ones_like(walls)
    ring[1:-1, 1:-1] = False
    if not walls[ring].all():
        raise ValueError("the outer ring of a room must be wall")
    if not boxes or len(boxes) != len(targets):
        raise ValueError(f"a room needs as many boxes as targets (at least one), got {len(boxes)} and {len(targets)}")
    return Layout(walls, tuple(sorted(targets))), State(players[0], frozenset(boxes))
