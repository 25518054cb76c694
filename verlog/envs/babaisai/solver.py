"""A best-first solver for Baba Is AI boards (used by the tests to prove every level is solvable).

:func:`solve` searches the states reachable with the real engine (:meth:`BabaGame.step`), so a plan it
returns is a plan the game accepts. To keep the search small it uses the classic Sokoban reduction
when exactly one item is YOU: walking over free cells changes nothing but the player's position, so
a search node is "the board without the player + the region the player can walk to", and its
successors are the *pushes* (and other non-walking moves) made from any cell of that region, each
with the shortest walk to it. With several (or no) YOU items every node expands the four moves
one by one.

Nodes are expanded in order of ``(h, pushes)`` (greedy best-first with a breadth-first tie break),
where ``h`` is :func:`heuristic`: the distance from YOU to a WIN object when a WIN rule exists, else
the distance of a usable noun block to the free end of an ``is win`` pair. The heuristic only orders
the search; with ``heuristic=False`` it is a plain breadth-first search over macro moves. Plans are
therefore valid but not necessarily shortest.
"""

from __future__ import annotations

import heapq
from collections import deque

from verlog.envs.babaisai.items import DEFEAT, IS, NOUN_OFFSET, PROPERTY_OFFSET, PUSH, STOP, WIN_PROP, YOU
from verlog.envs.babaisai.rules import ACTIONS, DIRECTIONS, LOSE, WIN, BabaGame

__all__ = ["heuristic", "solve"]

_KIND = 31
_WIN_BLOCK = PROPERTY_OFFSET + 1  # the `win` property block
_NO_WIN_RULE = 50  # h when no `is win` pair can take a noun


def heuristic(game: BabaGame) -> int:
    """A rough distance-to-win of ``game`` (0 = won or about to be), used to order the search.

    With a WIN object on the map: the Manhattan distance from the nearest YOU item to it. Otherwise:
    50 + the Manhattan distance from a noun block (of a kind with objects on the map) to the free end
    of an ``is win`` pair (the cell left of a horizontal pair or above a vertical one), counting a
    block stuck on a line along the edge only for targets on that line; 100 when there is none.
    """
    width, props = game.width, game._props
    yous, wins, nouns, blocks = [], [], [], {}
    present = set()
    for idx, cell in enumerate(game.cells):
        if not cell:
            continue
        x, y = idx % width, idx // width
        for code in cell:
            kind = code & _KIND
            bits = props[kind]
            if bits & YOU:
                yous.append((x, y))
            if bits & WIN_PROP:
                wins.append((x, y))
            if kind < NOUN_OFFSET:
                present.add(kind)
            elif kind < IS:
                nouns.append((x, y, kind - NOUN_OFFSET))
            else:
                blocks[idx] = kind
    if wins and yous:
        return min(abs(a - c) + abs(b - d) for a, b in yous for c, d in wins)
    targets = []
    for idx, kind in blocks.items():
        if kind == IS:
            if blocks.get(idx + 1) == _WIN_BLOCK:
                targets.append(idx - 1)
            if blocks.get(idx + width) == _WIN_BLOCK:
                targets.append(idx - width)
    # A block on a row or column next to the edge can never leave that line (nobody can stand in
    # the edge to push it away), so it only counts for targets on that same line.
    last_x, last_y = width - 2, game.height - 2
    dists = [
        abs(x - tx) + abs(y - ty)
        for x, y, k in nouns
        if k in present
        for tx, ty in ((t % width, t // width) for t in targets)
        if (y not in (1, last_y) or ty == y) and (x not in (1, last_x) or tx == x)
    ]
    if not dists:
        return 2 * _NO_WIN_RULE
    # Any state with a WIN object ranks before any state without one (a plateau of irrelevant
    # pushes must not hide the push that forms the rule).
    return _NO_WIN_RULE + min(dists)


def _walk_region(game: BabaGame, start: int) -> tuple[dict[int, tuple[int, int]], int | None]:
    """Cells the single YOU item at ``start`` can walk to without pushing or dying.

    Returns:
        ``(parents, goal)``: ``parents`` maps each reachable cell to ``(previous cell, action)``
        (``start`` maps to ``(-1, 0)``), in BFS order; ``goal`` is a reachable cell holding a WIN
        item (walking onto it wins), else ``None``.
    """
    cells, solid, props, width = game.cells, game.solid, game._props, game.width
    parents: dict[int, tuple[int, int]] = {start: (-1, 0)}
    queue = deque([start])
    while queue:
        cur = queue.popleft()
        for action in (1, 2, 3, 4):
            dx, dy = DIRECTIONS[action]
            nxt = cur + dy * width + dx
            if nxt in parents or solid[nxt]:
                continue
            bits = 0
            for c in cells[nxt]:
                bits |= props[c & _KIND]
            if bits & (PUSH | STOP | DEFEAT):
                continue
            parents[nxt] = (cur, action)
            if bits & WIN_PROP:
                return parents, nxt
            queue.append(nxt)
    return parents, None


def _path_to(parents: dict[int, tuple[int, int]], cell: int) -> list[int]:
    path = []
    while True:
        prev, action = parents[cell]
        if prev < 0:
            return path[::-1]
        path.append(action)
        cell = prev


def solve(game: BabaGame, *, max_nodes: int = 100_000, use_heuristic: bool = True) -> list[str] | None:
    """A winning action sequence for ``game``, or ``None``.

    Args:
        game: the board to solve (not modified).
        max_nodes: the most search nodes to expand before giving up.
        use_heuristic: order the search by :func:`heuristic` (else breadth-first in macro moves).

    Returns:
        Action names (``"up"``, ``"right"``, ...) whose replay from ``game`` wins (an empty list if
        ``game`` is already won), or ``None`` when the board is unsolvable or the node limit was hit.

    Raises:
        ValueError: ``max_nodes`` < 1.
    """
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
        raise ValueError(f"max_nodes must be a positive int, got {max_nodes!r}")
    root = game.copy()
    outcome = root.outcome()
    if outcome == WIN:
        return []
    if outcome == LOSE:
        return None
    # Node table: parent node and the engine actions leading from it.
    parents: list[tuple[int, list[int]]] = [(-1, [])]
    depth = [0]
    queue: list[tuple[int, int, int, BabaGame]] = [(0, 0, 0, root)]  # (pushes + h, h, node, state)
    seen: set = set()

    def plan(node: int, tail: list[int]) -> list[str]:
        actions = list(tail)
        while node > 0:
            parent, edge = parents[node]
            actions[:0] = edge
            node = parent
        return [ACTIONS[a] for a in actions]

    expanded = 0
    while queue:
        _, _, node, state = heapq.heappop(queue)
        yous = state.you_items()
        if len(yous) == 1:
            x, y, code = yous[0]
            start = y * state.width + x
            region, goal = _walk_region(state, start)
            if goal is not None:
                return plan(node, _path_to(region, goal))
            without = list(state.cells)
            cell = list(without[start])
            cell.remove(code)
            without[start] = tuple(cell)
            key = (tuple(without), min(region), code)
        else:
            region, key = None, tuple(state.cells)
        if key in seen:
            continue
        seen.add(key)
        expanded += 1
        if expanded > max_nodes:
            return None

        if region is None:
            moves = [([], state, action) for action in (1, 2, 3, 4)]
        else:
            moves = []
            width, solid = state.width, state.solid
            for cur in region:
                for action in (1, 2, 3, 4):
                    dx, dy = DIRECTIONS[action]
                    nxt = cur + dy * width + dx
                    if solid[nxt] or nxt in region:
                        continue  # the edge blocks; free cells are covered by the region itself
                    if cur == start:
                        here = state
                    else:  # teleport the player to `cur` (a free cell it can walk to)
                        here = state.copy()
                        here.cells[start] = without[start]
                        here.cells[cur] = here.cells[cur] + (code,)  # on top, as a walk leaves it
                        here._key = here._yous = None
                    moves.append((cur, here, action))
        for cur, here, action in moves:
            after = here.copy()
            result = after.step(action)
            if result == LOSE or after.cells == here.cells:
                continue
            walk = [] if region is None or cur == start else _path_to(region, cur)
            if result == WIN:
                return plan(node, walk + [action])
            parents.append((node, walk + [action]))
            depth.append(depth[node] + 1)
            h = heuristic(after) if use_heuristic else 0
            heapq.heappush(queue, (depth[-1] + h, h, len(parents) - 1, after))
    return None
