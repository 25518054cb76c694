"""Sokoban rooms generated from a seed by reverse play, the method of gym-sokoban (Schrader,
``gym_sokoban/envs/room_utils.py``, after Racanière et al. 2017, "Imagination-Augmented Agents",
appendix), which the peers' Sokoban environments (RAGEN, verl-agent) also use.

1. **Topology** (:func:`carve_topology`): a random walk of ``walk_steps`` steps inside the room,
   changing direction with probability ``p_change_direction`` per step, stamps a random one of five
   small floor masks (a line, a corner, a block ...) around each cell it visits. The outer ring stays
   wall.
2. **Placement**: the player on a uniformly drawn floor cell, then each box on its own target, each on
   a uniformly drawn free floor cell (a solved room).
3. **Reverse play** (:func:`reverse_play`): from the solved room the player moves backwards through
   the state space, depth first (at most ``max_depth`` moves deep, at most ``max_states`` states).
   Each move goes one cell up, down, left or right onto a free cell and may *pull* the box standing
   right behind the player along. Every state reached is scored ``pulls x displacement``, where
   displacement is the sum over boxes of the grid distance (|dr| + |dc|) from the box's own target
   and pulls the number of pulls on the path to it; a state with a box on a target scores 0. The best
   state becomes the start of the episode. gym-sokoban calls its factor "box swaps", but its code
   counts every pull, which is what we count.
4. A room whose best score is 0 (no box could be moved off its target) is thrown away and the
   generation starts again from step 1 with the same RNG, as gym-sokoban's reset does.

Every pull is reversible by a push, so the reversed, mirrored path of reverse moves solves the room
(:attr:`GeneratedRoom.solution`, cut where the last box reaches its target); it is not always the
shortest solution.

Everything random comes from the caller's :class:`numpy.random.Generator`, so a seed gives one room.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verlog.envs.sokoban.game import MOVES, Cell, Layout, State, move

__all__ = ["GeneratedRoom", "carve_topology", "generate_room", "reverse_play", "walk_steps_for"]

_OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}
_DIRECTIONS = ((1, 0), (0, 1), (-1, 0), (0, -1))
#: The 3x3 floor masks stamped by the walk (gym-sokoban's five).
_MASKS = np.array(
    [
        [[0, 0, 0], [1, 1, 1], [0, 0, 0]],
        [[0, 1, 0], [0, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [1, 1, 0]],
        [[0, 0, 0], [0, 1, 1], [0, 1, 0]],
    ],
    dtype=bool,
)
#: How many whole generations :func:`generate_room` tries before it gives up.
MAX_GENERATIONS = 1000


@dataclass(frozen=True)
class GeneratedRoom:
    """A generated room.

    Attributes:
        layout: walls and targets.
        start: the state the episode starts in.
        solution: moves (keys of :data:`~verlog.envs.sokoban.game.MOVES`) that solve the room from
            ``start``: the reverse play's path, reversed and mirrored.
        score: the reverse play's score of ``start`` (> 0).
        generations: how many generations it took (1 when the first room was kept).
    """

    layout: Layout
    start: State
    solution: tuple[str, ...]
    score: int
    generations: int


def walk_steps_for(height: int, width: int) -> int:
    """gym-sokoban's default walk length: ``int(1.7 * (height + width))`` steps (20 for 6x6)."""
    return int(1.7 * (height + width))


def carve_topology(rng: np.random.Generator, height: int, width: int, *, walk_steps: int,
                   p_change_direction: float = 0.35) -> np.ndarray:
    """Step 1 of the module docstring: the wall mask of a room.

    Returns:
        bool array ``[height, width]``, True on wall; the outer ring is wall.
    """
    floor = np.zeros((height, width), dtype=bool)
    direction = _DIRECTIONS[rng.integers(4)]
    position = np.array([rng.integers(1, height), rng.integers(1, width)])
    for _ in range(walk_steps):
        if rng.random() < p_change_direction:
            direction = _DIRECTIONS[rng.integers(4)]
        position = np.clip(position + direction, 1, [height - 2, width - 2])
        r, c = position - 1
        floor[r : r + 3, c : c + 3] |= _MASKS[rng.integers(len(_MASKS))]
    floor[[0, -1], :] = False
    floor[:, [0, -1]] = False
    return ~floor


def reverse_play(layout: Layout, solved: State, *, max_depth: int = 300,
                 max_states: int = 300_000) -> tuple[State, int, tuple[str, ...]]:
    """Step 3 of the module docstring: the best-scoring state reachable backwards from ``solved``.

    Args:
        layout: the room; ``solved``: the player and the boxes, each box on its own target.
        max_depth: most reverse moves on a path; max_states: most states visited.

    Returns:
        ``(state, score, reverse_moves)``: the best state, its score (0 when no state scored) and the
        reverse moves that reach it from ``solved``.
    """
    origins = tuple(sorted(solved.boxes))
    targets = frozenset(layout.targets)
    seen: set[tuple[Cell, frozenset[Cell]]] = set()
    best: list = [solved, 0, ()]
    path: list[str] = []

    def visit(player: Cell, boxes: tuple[Cell, ...], pulls: int, depth: int) -> None:
        # boxes[i] is where the box that started on origins[i] now stands
        if depth >= max_depth or len(seen) >= max_states:
            return
        key = (player, frozenset(boxes))
        if key in seen:
            return
        seen.add(key)
        if targets.isdisjoint(boxes):
            displacement = sum(abs(b[0] - o[0]) + abs(b[1] - o[1]) for b, o in zip(boxes, origins))
            if pulls * displacement > best[1]:
                best[:] = [State(player, key[1]), pulls * displacement, tuple(path)]
        occupied = key[1]
        for name, (dr, dc) in MOVES.items():
            ahead = (player[0] + dr, player[1] + dc)
            if layout.walls[ahead] or ahead in occupied:
                continue
            behind = (player[0] - dr, player[1] - dc)
            path.append(name)
            if behind in occupied:  # pull the box behind along
                pulled = tuple(player if b == behind else b for b in boxes)
                visit(ahead, pulled, pulls + 1, depth + 1)
            visit(ahead, boxes, pulls, depth + 1)  # or just step away
            path.pop()

    visit(solved.player, origins, 0, 0)
    return best[0], best[1], best[2]


def _solving_prefix(layout: Layout, start: State, moves: list[str]) -> tuple[str, ...]:
    """``moves`` up to the first one after which every box is on a target (the rest only walks the
    player back to where the reverse play began).

    Raises:
        RuntimeError: the moves never solve the room (a bug of the reverse play).
    """
    goal, state = frozenset(layout.targets), start
    for n, name in enumerate(moves, 1):
        state, _ = move(layout, state, name)
        if state.boxes == goal:
            return tuple(moves[:n])
    raise RuntimeError("the reversed reverse play does not solve its room")


def generate_room(rng: np.random.Generator, height: int, width: int, num_boxes: int, *,
                  walk_steps: int | None = None, p_change_direction: float = 0.35,
                  max_depth: int = 300, max_states: int = 300_000) -> GeneratedRoom:
    """A room generated by reverse play (module docstring).

    Args:
        rng: the only source of randomness.
        height, width: room size in cells, outer wall ring included (>= 4 each).
        num_boxes: boxes (and targets), >= 1.
        walk_steps: length of the topology walk; ``None`` uses :func:`walk_steps_for`.
        p_change_direction: the walk's chance to turn at each step.
        max_depth, max_states: the limits of :func:`reverse_play` (gym-sokoban's 300 and 300,000).

    Raises:
        ValueError: a room smaller than 4x4 or fewer than one box.
        RuntimeError: no room with a score > 0 in :data:`MAX_GENERATIONS` generations.
    """
    if height < 4 or width < 4:
        raise ValueError(f"a Sokoban room needs at least 4x4 cells, got {height}x{width}")
    if num_boxes < 1:
        raise ValueError(f"a Sokoban room needs at least one box, got {num_boxes}")
    steps = walk_steps_for(height, width) if walk_steps is None else walk_steps
    for generation in range(1, MAX_GENERATIONS + 1):
        walls = carve_topology(rng, height, width, walk_steps=steps, p_change_direction=p_change_direction)
        free = [tuple(int(v) for v in cell) for cell in np.argwhere(~walls)]
        if len(free) <= num_boxes + 1:  # gym-sokoban's "not enough free spots": carve again
            continue
        player = free.pop(rng.integers(len(free)))
        targets = [free.pop(rng.integers(len(free))) for _ in range(num_boxes)]
        layout = Layout(walls, tuple(sorted(targets)))
        start, score, reverse_moves = reverse_play(layout, State(player, frozenset(targets)),
                                                   max_depth=max_depth, max_states=max_states)
        if score > 0:
            solution = _solving_prefix(layout, start, [_OPPOSITE[m] for m in reversed(reverse_moves)])
            return GeneratedRoom(layout, start, solution, score, generation)
    raise RuntimeError(f"no {height}x{width} Sokoban room with {num_boxes} box(es) could be generated in "
                       f"{MAX_GENERATIONS} tries")
