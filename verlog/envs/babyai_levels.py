"""BabyAI levels of our own, on upstream ``minigrid``: BALROG's five BabyAI tasks and a sequence level.

:class:`BalrogLocalLevel` reproduces the levels BALROG's BabyAI tasks run. BALROG plays
``BabyAI-MixedTrainLocal-v0`` of the minigrid fork it pins (a level from the "Grounding LLMs with
online RL" work) with ``num_dists=0``, and re-makes the env until the level's one action kind is the
task's. That level draws its action kind once, when the env is constructed, from the env's generator
before any seed is given (so from fresh OS entropy); ``reset(seed=s)`` then reseeds the generator and
lays the level out from ``s`` alone. So the re-making loop uses none of the episode's seed, and the
layout of a seed depends only on the task and the seed. :class:`BalrogLocalLevel` takes the kind as
an argument and makes the same random draws in the same order on upstream ``minigrid`` 3.2.0, so
``reset(seed=s)`` gives BALROG's layout for seed ``s`` (checked on 100 seeds per task by
``tests/test_babyai_balrog.py``).

The rules, per kind (``num_dists`` = 0 in BALROG; ``room_size`` = 8: 6 x 6 free cells per room):

* ``goto`` / ``pickup``: one room, the agent and ``num_dists + 1`` random objects (keys, balls and
  boxes, duplicates allowed); the mission names one of them ("go to the red ball", "pick up the
  green key").
* ``putnext``: one room, ``num_dists + 2`` objects; "put X next to Y" with X and Y drawn from them;
  Y may look like X only if two objects look alike. Layouts where X and Y are already next to each
  other, or where one object answers both descriptions, are rejected (upstream's check).
* ``pick_up_seq_go_to``: one room, ``num_dists + 2`` objects, X and Y drawn as for putnext; the
  mission is "pick up X, then go to Y" or "go to Y after you pick up X" (even odds).
* ``open``: two rooms side by side joined by one locked door of a random colour (yellow, green, blue
  or purple), its key in the other room with the agent (plus ``num_dists`` objects per unlocked
  room); the mission is "open the door" or "open the <colour> door" (even odds).
* every kind: all objects reachable; a mission that names a yellow box, red key, red door, green
  ball or grey door is redrawn with a new layout (the level's training split leaves those out).
* the step limit is upstream's rule: 64 steps per room and per navigation the mission needs (goto,
  pickup: 64; open: 2 rooms, 128; putnext, pick_up_seq_go_to: 2 navigations, 128).
"""

from __future__ import annotations

from typing import Any

from minigrid.core.roomgrid import RoomGrid
from minigrid.core.world_object import WorldObj
from minigrid.envs.babyai.core.roomgrid_level import RejectSampling, RoomGridLevel
from minigrid.envs.babyai.core.verifier import (
    AfterInstr,
    BeforeInstr,
    GoToInstr,
    ObjDesc,
    OpenInstr,
    PickupInstr,
    PutNextInstr,
)

__all__ = ["BALROG_KINDS", "EXCLUDED_PHRASES", "BalrogLocalLevel", "PickupThenGoToLocal"]

#: BALROG's BabyAI task names, which are the action kinds of its level (spaces as underscores).
BALROG_KINDS: tuple[str, ...] = ("goto", "pickup", "open", "putnext", "pick_up_seq_go_to")
#: Phrases no mission of BALROG's levels contains (held out of the level's training split).
EXCLUDED_PHRASES: tuple[str, ...] = ("yellow box", "red key", "red door", "green ball", "grey door")
#: Colours of the locked door of the ``open`` kind (red and grey are held out).
_LOCKED_DOOR_COLORS = ["yellow", "green", "blue", "purple"]


class BalrogLocalLevel(RoomGridLevel):
    """One of BALROG's BabyAI tasks: the level of one action kind (module docstring for the rules).

    Args:
        kind: one of :data:`BALROG_KINDS`.
        room_size: side of a room in cells, walls included (8, as in BALROG).
        num_dists: extra random objects (0, as in BALROG's config).
        max_steps: a fixed step limit, or ``None`` for upstream's per-mission limit (64 or 128 here).
        kwargs: passed to minigrid's ``RoomGridLevel`` (e.g. ``agent_view_size``).

    Raises:
        ValueError: unknown ``kind`` or ``num_dists < 0``.
    """

    def __init__(self, kind: str, room_size: int = 8, num_dists: int = 0, max_steps: int | None = None,
                 **kwargs: Any) -> None:
        if kind not in BALROG_KINDS:
            raise ValueError(f"kind must be one of {list(BALROG_KINDS)}, got {kind!r}")
        if num_dists < 0:
            raise ValueError(f"num_dists must be >= 0, got {num_dists}")
        self.kind = kind
        self.num_dists = num_dists
        super().__init__(room_size=room_size, num_rows=1, num_cols=2 if kind == "open" else 1,
                         max_steps=max_steps, **kwargs)

    # BALROG's level first draws its action kind from a list of one (numpy draws nothing for a range
    # of one value), then redraws whole layouts until the mission is allowed and every object is
    # reachable; each branch below makes the draws of that level's branch, in the same order.
    def gen_mission(self) -> None:
        """Lay out the level and set ``self.instrs`` (upstream's hook, called by ``reset``)."""
        lay_out = {
            "goto": self._lay_out_goto, "pickup": self._lay_out_pickup, "open": self._lay_out_open,
            "putnext": self._lay_out_putnext, "pick_up_seq_go_to": self._lay_out_pickup_then_goto,
        }[self.kind]
        while True:
            # A fresh walled room grid, with the same door-position draws as the grid upstream's
            # reset built just before (the draws are part of the seed's sequence).
            RoomGrid._gen_grid(self, self.width, self.height)
            reachable = lay_out()
            if reachable and not any(phrase in self.instrs.surface(self) for phrase in EXCLUDED_PHRASES):
                return

    def _objects(self, count: int) -> tuple[list[WorldObj], bool]:
        """Place the agent, then ``count`` random objects; whether all are reachable."""
        self.place_agent()
        objs = self.add_distractors(num_distractors=count, all_unique=False)
        return objs, self.check_objs_reachable(raise_exc=False)

    def _not_door(self, objs: list[WorldObj]) -> WorldObj:
        obj = self._rand_elem(objs)
        while obj.type == "door":
            obj = self._rand_elem(objs)
        return obj

    def _second(self, first: WorldObj, objs: list[WorldObj]) -> WorldObj:
        """A second object; it may look like ``first`` only when another object looks like ``first``."""
        other = self._rand_elem(objs)
        if (other.type, other.color) == (first.type, first.color):
            lookalikes, _ = ObjDesc(first.type, first.color).find_matching_objs(self)
            while len(lookalikes) < 2 and (other.type, other.color) == (first.type, first.color):
                other = self._rand_elem(objs)
        return other

    def _lay_out_goto(self) -> bool:
        objs, reachable = self._objects(self.num_dists + 1)
        target = self._rand_elem(objs)
        self.instrs = GoToInstr(ObjDesc(target.type, target.color))
        return reachable

    def _lay_out_pickup(self) -> bool:
        objs, reachable = self._objects(self.num_dists + 1)
        target = self._not_door(objs)
        self.instrs = PickupInstr(ObjDesc(target.type, target.color))
        return reachable

    def _lay_out_putnext(self) -> bool:
        objs, reachable = self._objects(self.num_dists + 2)
        moved = self._not_door(objs)
        fixed = self._second(moved, objs)
        self.instrs = PutNextInstr(ObjDesc(moved.type, moved.color), ObjDesc(fixed.type, fixed.color))
        return reachable

    def _lay_out_pickup_then_goto(self) -> bool:
        objs, reachable = self._objects(self.num_dists + 2)
        picked = self._not_door(objs)
        reached = self._second(picked, objs)
        pickup = PickupInstr(ObjDesc(picked.type, picked.color))
        goto = GoToInstr(ObjDesc(reached.type, reached.color))
        if self._rand_elem(["before", "after"]) == "before":
            self.instrs = BeforeInstr(pickup, goto)
        else:
            self.instrs = AfterInstr(goto, pickup)
        return reachable

    def _lay_out_open(self) -> bool:
        color = self._rand_elem(_LOCKED_DOOR_COLORS)
        locked_room = self._add_locked_room(color)
        self.connect_all()
        for i in range(self.num_cols):
            if self.get_room(i, 0) is not locked_room:
                self.add_distractors(i, 0, num_distractors=self.num_dists, all_unique=False)
        while True:  # the agent starts outside the locked room
            self.place_agent()
            if self.room_from_pos(*self.agent_pos) is not locked_room:
                break
        reachable = self.check_objs_reachable(raise_exc=False)
        self.instrs = OpenInstr(ObjDesc("door", self._rand_elem([None, color])))
        return reachable

    def _add_locked_room(self, color: str) -> Any:
        """Lock a random inner door of a random room in ``color``; put its key in another room.

        The draws are those of upstream ``LevelGen.add_locked_room`` with the colour given.

        Returns:
            The locked room.
        """
        while True:
            i, j = self._rand_int(0, self.num_cols), self._rand_int(0, self.num_rows)
            side = self._rand_int(0, 4)
            room = self.get_room(i, j)
            if room.neighbors[side] is not None:
                door, _ = self.add_door(i, j, side, color=color, locked=True)
                break
        while True:
            ki, kj = self._rand_int(0, self.num_cols), self._rand_int(0, self.num_rows)
            if self.get_room(ki, kj) is not room:
                self.add_object(ki, kj, "key", door.color)
                return room


class PickupThenGoToLocal(RoomGridLevel):
    """Single-room level "pick up X, then go to Y" among ``num_dists`` objects (Verlog's own).

    One ``room_size`` x ``room_size`` room (no doors) with ``num_dists`` random objects (keys, balls,
    boxes; duplicates allowed, as in ``GoToLocal``), all reachable. Two objects with different
    (type, colour) are drawn: X to pick up and Y to go to afterwards; the instruction is upstream's
    ``BeforeInstr(PickupInstr(X), GoToInstr(Y))``, e.g. "pick up the blue key, then go to the red ball".
    Upstream's step limit for it is 2 navigations x room_size**2 = 128 for an 8x8 room. It was
    ``babyai/pick_up_seq_go_to`` before that name became BALROG's level (:class:`BalrogLocalLevel`).

    Raises:
        ValueError: if ``num_dists < 2``.
    """

    def __init__(self, room_size: int = 8, num_dists: int = 8, **kwargs: Any) -> None:
        if num_dists < 2:
            raise ValueError(f"PickupThenGoToLocal needs num_dists >= 2 objects, got {num_dists}")
        self.num_dists = num_dists
        super().__init__(num_rows=1, num_cols=1, room_size=room_size, **kwargs)

    def gen_mission(self) -> None:
        """Place the agent and objects and build the sequenced instruction (upstream API)."""
        self.place_agent()
        objs = self.add_distractors(num_distractors=self.num_dists, all_unique=False)
        self.check_objs_reachable()
        to_pick = self._rand_elem(objs)
        others = [o for o in objs if (o.type, o.color) != (to_pick.type, to_pick.color)]
        if not others:
            raise RejectSampling("all objects look alike: no distinct object to go to")
        to_reach = self._rand_elem(others)
        self.instrs = BeforeInstr(
            PickupInstr(ObjDesc(to_pick.type, to_pick.color)),
            GoToInstr(ObjDesc(to_reach.type, to_reach.color)),
        )
