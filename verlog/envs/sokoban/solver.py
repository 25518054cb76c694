"""A breadth-first Sokoban solver: the fewest moves that solve a room (for tests and the docs' room
statistics; small rooms only, it visits every reachable state in the worst case)."""

from __future__ import annotations

from collections import deque

from verlog.envs.sokoban.game import MOVES, Layout, State, move

__all__ = ["solve"]


def solve(layout: Layout, start: State, *, max_states: int = 1_000_000) -> tuple[str, ...] | None:
    """The shortest sequence of moves that puts every box on a target, or ``None`` if there is none.

    Args:
        layout: the room; start: the state to solve from.
        max_states: most states visited before giving up.

    Returns:
        Moves (keys of :data:`~verlog.envs.sokoban.game.MOVES`); ``()`` when ``start`` is solved.

    Raises:
        RuntimeError: more than ``max_states`` states visited without a solution or a proof of none.
    """
    goal = frozenset(layout.targets)
    if start.boxes == goal:
        return ()
    parents: dict[State, tuple[State, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        for action in MOVES:
            nxt, _ = move(layout, state, action)
            if nxt in parents:
                continue
            parents[nxt] = (state, action)
            if nxt.boxes == goal:
                moves = []
                node: State = nxt
                while parents[node] is not None:
                    node, taken = parents[node]
                    moves.append(taken)
                return tuple(reversed(moves))
            if len(parents) > max_states:
                raise RuntimeError(f"no solution found within {max_states} states")
            queue.append(nxt)
    return None
