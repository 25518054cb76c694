"""How far a BabyAI mission still is: the grid distance its remaining stages need the agent to walk.

:func:`mission_distance` is the potential of the training-only distance shaping of
:class:`~verlog.envs.babyai.BabyAITextEnv` (Phi(s) = -beta x this distance; Ng, Harada & Russell 1999,
potential-based shaping, which leaves the optimal policies unchanged for any such Phi). It reads the
level's own state (the mission's verifier, object positions, what the agent carries), never the text
the agent sees. Distances are Manhattan distances |dx| + |dy| in cells, walls ignored; a stage's
distance runs from where the previous stage ends (its target's cell) to the next target:

==========================  ================================================================================
mission (minigrid verifier)  remaining distance from the agent's cell ``a``
==========================  ================================================================================
go to X                     ``d(a, X)`` to the nearest of the verifier's target cells for X (0 while carrying X)
pick up X                   ``d(a, X)`` to the nearest X (its current cell); 0 while carrying an X
open door D                 ``d(a, D)``; a locked D while the agent lacks its key: ``d(a, key) + d(key, D)``
                            via the nearest key of D's colour
put X next to Y             carrying an X: ``d(a, Y)``; else ``min d(a, X) + d(X, Y)`` over the pairs
A, then B / B after A       A done: B's distance; else A's distance, then B's from A's target
==========================  ================================================================================

A carried object counts as lying on the agent's cell (carrying the wrong object of a put-next
mission, say, leaves the mission measurable). Picking up an object is a step of 1 cell from the cell
in front of it, so the potential never jumps by more than a stage's own move when a stage completes.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from minigrid.envs.babyai.core.verifier import (
    AfterInstr,
    BeforeInstr,
    GoToInstr,
    OpenInstr,
    PickupInstr,
    PutNextInstr,
)
from minigrid.minigrid_env import MiniGridEnv

__all__ = ["mission_distance"]

Cell = tuple[int, int]


def _cell(pos: Any) -> Cell:
    return int(pos[0]), int(pos[1])


def _d(a: Cell, b: Cell) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def _placed(objs: Iterable[Any], level: MiniGridEnv) -> list[tuple[Any, Cell]]:
    """Each object with its cell: the one carried is where the agent is (its own ``cur_pos`` is not a
    cell while carried); objects never placed are left out."""
    out = []
    for o in objs:
        if o is level.carrying:
            out.append((o, _cell(level.agent_pos)))
        elif o.cur_pos is not None and int(o.cur_pos[0]) >= 0:
            out.append((o, _cell(o.cur_pos)))
    return out


def _nearest(start: Cell, cells: Sequence[Cell], what: str) -> tuple[int, Cell]:
    if not cells:
        raise ValueError(f"no {what} left on the grid to measure a distance to")
    return min((_d(start, c), c) for c in cells)


def _stage(instr: Any, level: MiniGridEnv, start: Cell) -> tuple[int, Cell]:
    """(cells from ``start`` to complete ``instr``, the cell where it ends)."""
    carrying = level.carrying
    if isinstance(instr, BeforeInstr | AfterInstr):
        first, second, first_done = ((instr.instr_a, instr.instr_b, instr.a_done) if isinstance(instr, BeforeInstr)
                                     else (instr.instr_b, instr.instr_a, instr.b_done))
        if first_done == "success":
            return _stage(second, level, start)
        d1, mid = _stage(first, level, start)
        d2, end = _stage(second, level, mid)
        return d1 + d2, end
    if isinstance(instr, GoToInstr):
        # the verifier's target cells; none while the agent carries the object (it must drop it first)
        cells = [_cell(p) for p in instr.desc.obj_poss] or [c for _, c in _placed(instr.desc.obj_set, level)]
        return _nearest(start, cells, "object to go to")
    if isinstance(instr, PickupInstr):
        if carrying is not None and carrying in instr.desc.obj_set:
            return 0, start
        return _nearest(start, [c for _, c in _placed(instr.desc.obj_set, level)], "object to pick up")
    if isinstance(instr, OpenInstr):
        best: tuple[int, Cell] | None = None
        for door, cell in _placed(instr.desc.obj_set, level):
            has_key = carrying is not None and carrying.type == "key" and carrying.color == door.color
            if getattr(door, "is_locked", False) and not has_key:
                keys = [c for o, c in _placed((o for o in level.grid.grid if o is not None), level)
                        if o.type == "key" and o.color == door.color]
                if not keys:
                    continue
                to_key, key = _nearest(start, keys, "key")
                option = (to_key + _d(key, cell), cell)
            else:
                option = (_d(start, cell), cell)
            best = option if best is None or option < best else best
        if best is None:
            raise ValueError("no door of the mission that can be opened (a locked door needs its key on the grid)")
        return best
    if isinstance(instr, PutNextInstr):
        fixed = _placed(instr.desc_fixed.obj_set, level)
        if carrying is not None and carrying in instr.desc_move.obj_set:
            return _nearest(start, [c for f, c in fixed if f is not carrying], "object to put the carried one next to")
        pairs = [(m_cell, f_cell) for m, m_cell in _placed(instr.desc_move.obj_set, level)
                 for f, f_cell in fixed if m is not f]  # not next to itself
        if not pairs:
            raise ValueError("the objects of the put-next mission are not on the grid")
        return min((_d(start, m) + _d(m, f), f) for m, f in pairs)
    raise ValueError(f"no distance for a {type(instr).__name__} mission")


def mission_distance(level: MiniGridEnv) -> int:
    """Cells the agent still has to walk to complete its mission (see the module docstring's table).

    Args:
        level: a BabyAI level after ``reset`` (its ``instrs`` verifier set up).

    Returns:
        A non-negative int (0 once nothing is left to walk, e.g. carrying the object to pick up).

    Raises:
        ValueError: a mission kind with no distance here (``AndInstr``: "X and Y"), or one whose
            objects are gone from the grid (a locked door's key included).
    """
    instrs = getattr(level, "instrs", None)
    if instrs is None:
        raise ValueError(f"{type(level).__name__} has no mission verifier (reset it first)")
    return _stage(instrs, level, _cell(level.agent_pos))[0]
