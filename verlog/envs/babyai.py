"""BabyAI (upstream ``minigrid``) as a :class:`~verlog.envs.base.TextEnv`, in BALROG's text conventions.

Each observation lists what the agent sees in its 7x7 egocentric view (minigrid's own partial view,
walls and closed doors blocking sight), one item per line:

* the nearest wall straight ahead, to the left and to the right, if visible
  (``a wall 2 steps forward``, ``a wall 1 step left``);
* every visible object with its offset from the agent, sideways first, then forward
  (``a red ball 2 steps left and 3 steps forward``, ``a blue key 1 step forward``,
  ``a closed yellow door 3 steps right``); objects are ordered by distance (steps sideways +
  forward), then forward, then left to right;
* ``You carry a red key`` when holding something.

The six actions are BALROG's: ``turn left``, ``turn right``, ``go forward``, ``pick up``, ``drop``,
``toggle``; the default (for invalid replies) is ``go forward``. The reward is minigrid's native
``1 - 0.9 * step_count / max_steps`` on success (else 0), computed with OUR step limit, which is also
given to the minigrid level (so it never truncates earlier or later than the text env). Progression is
1.0 once any step had reward > 0 (BALROG's BabyAI progression), else 0.0.

Optional, for training only: ``distance_shaping`` = beta > 0 adds the potential-based shaping term
gamma * Phi(s') - Phi(s) to every step's reward, with Phi(s) = -beta * the grid distance (|dx| + |dy|)
from the agent to the nearest object the mission names (:func:`target_distance`;
:func:`~verlog.envs.shaping.potential_shaping`). The positions come from the level itself, not from
the text the agent reads. Success and progression are unaffected (they read minigrid's own reward).

Registered tasks (see :data:`BABYAI_TASKS`): ``babyai/goto``, ``babyai/pickup``, ``babyai/open``,
``babyai/putnext``, ``babyai/pick_up_seq_go_to``, ``babyai/easy_goto``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import math
from typing import Any, Callable, Mapping, NamedTuple

import gymnasium
import numpy as np
from minigrid.core.actions import Actions
from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT, OBJECT_TO_IDX
from minigrid.envs.babyai.core.roomgrid_level import RejectSampling, RoomGridLevel
from minigrid.envs.babyai.core.verifier import BeforeInstr, GoToInstr, ObjDesc, PickupInstr
from minigrid.minigrid_env import MiniGridEnv

from verlog.envs.base import TextEnv, require_episode
from verlog.envs.options import instruction_builder, task_entry
from verlog.envs.registry import register
from verlog.envs.shaping import potential_shaping
from verlog.envs.wording import steps

__all__ = [
    "BABYAI_ACTIONS",
    "BABYAI_TASKS",
    "BabyAITextEnv",
    "PickupThenGoToLocal",
    "build_instruction",
    "build_brief_instruction",
    "describe_view",
    "make_babyai",
    "target_distance",
]

logger = logging.getLogger(__name__)

#: Text action -> minigrid action, in BALROG's order.
BABYAI_ACTIONS: dict[str, Actions] = {
    "turn left": Actions.left,
    "turn right": Actions.right,
    "go forward": Actions.forward,
    "pick up": Actions.pickup,
    "drop": Actions.drop,
    "toggle": Actions.toggle,
}
_ACTION_HELP = {
    "turn left": "turn 90 degrees to your left, staying on the same cell",
    "turn right": "turn 90 degrees to your right, staying on the same cell",
    "go forward": "move one step in the direction you are facing (blocked by walls, objects and closed doors)",
    "pick up": "pick up the object directly in front of you (you can carry one object at a time)",
    "drop": "put the object you carry on the empty cell directly in front of you",
    "toggle": "open or close the door directly in front of you (or open a box)",
}
DEFAULT_ACTION = "go forward"

_DOOR_STATE = {0: "open", 1: "closed", 2: "locked"}
_IGNORED_TYPES = {"unseen", "empty", "floor", "agent"}
#: Object-type indices never listed as objects (walls are reported along the rays instead).
_NOT_LISTED = frozenset(OBJECT_TO_IDX[t] for t in _IGNORED_TYPES | {"wall"})
_UNSEEN, _WALL = OBJECT_TO_IDX["unseen"], OBJECT_TO_IDX["wall"]


def _object_name(type_idx: int, color_idx: int, state: int) -> str:
    obj_type = IDX_TO_OBJECT[type_idx]
    color = IDX_TO_COLOR[color_idx]
    if obj_type == "door":
        adjective = _DOOR_STATE[state]
        article = "an" if adjective[0] in "aeiou" else "a"
        return f"{article} {adjective} {color} door"
    if obj_type == "lava":
        return "lava"
    return f"a {color} {obj_type}"


def _offset(lateral: int, forward: int) -> str:
    side = f"{steps(abs(lateral))} {'left' if lateral < 0 else 'right'}" if lateral else ""
    ahead = f"{steps(forward)} forward" if forward else ""
    return " and ".join(part for part in (side, ahead) if part)


@functools.lru_cache(maxsize=1 << 16)
def _object_line(type_idx: int, color_idx: int, state: int, lateral: int, forward: int) -> str:
    """``"a red ball 2 steps left and 3 steps forward"`` (cached: views repeat the same few objects)."""
    return f"{_object_name(type_idx, color_idx, state)} {_offset(lateral, forward)}"


class _ViewGeometry(NamedTuple):
    """Where things are in a ``V x V`` view flattened to cell index ``col * V + row``."""

    agent: int  # the agent's cell (bottom row, middle column)
    rays: tuple[tuple[tuple[int, str], ...], ...]  # forward, left, right: (cell, "a wall k steps <dir>") outwards
    order: tuple[int, ...]  # every other cell in listing order: distance, then forward, then left to right
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
    order = sorted(
        (cell for cell in range(size * size) if cell != agent),
        key=lambda cell: (abs(offsets[cell][0]) + offsets[cell][1], offsets[cell][1], offsets[cell][0]),
    )
    return _ViewGeometry(agent, rays, tuple(order), offsets)


def describe_view(image: np.ndarray) -> list[str]:
    """Describe minigrid's egocentric encoded view as BALROG-style text lines.

    ``image`` is ``env.gen_obs()["image"]``: shape ``(V, V, 3)`` (V odd, 7 by default) indexed
    ``[column, row]`` with the agent at ``(V // 2, V - 1)`` facing towards row 0; channels are
    ``(OBJECT_IDX, COLOR_IDX, STATE)`` from ``minigrid.core.constants``; cells the agent cannot see are
    ``unseen`` (type 0), and a carried object is encoded on the agent's own cell.

    Returns:
        The observation lines: nearest visible wall forward/left/right, then visible objects (nearest
        first), then ``You carry ...``. Offsets are in grid steps, left/right before forward.

    Raises:
        ValueError: if ``image`` does not have shape ``(V, V, 3)`` with odd ``V >= 3``.
    """
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.shape[0] != image.shape[1] or image.shape[0] % 2 == 0:
        raise ValueError(f"expected an egocentric view of shape (V, V, 3) with odd V, got {image.shape}")
    size = image.shape[0]
    if size < 3:
        raise ValueError(f"view size must be >= 3, got {size}")
    geometry = _view_geometry(size)
    cells = image.reshape(size * size, 3)  # cells[col * size + row] = (type, color, state)
    types = cells[:, 0].tolist()
    lines: list[str] = []
    for ray in geometry.rays:
        for cell, wall_line in ray:
            if types[cell] == _UNSEEN:
                break
            if types[cell] == _WALL:
                lines.append(wall_line)
                break
    for cell in geometry.order:  # only the few listed cells are looked at closely
        if types[cell] not in _NOT_LISTED:
            lines.append(_object_line(*cells[cell].tolist(), *geometry.offsets[cell]))
    carried_type, carried_color, carried_state = cells[geometry.agent].tolist()
    if carried_type not in _NOT_LISTED:
        lines.append(f"You carry {_object_name(carried_type, carried_color, carried_state)}")
    return lines


def _render(image: np.ndarray) -> str:
    lines = describe_view(image)
    return "\n".join(lines) if lines else "You see nothing around you."


def build_instruction(mission: str) -> str:
    """The system prompt of one BabyAI episode (our own words, BALROG's content).

    Args:
        mission: minigrid's mission string, e.g. ``"go to the red ball"``.

    Returns:
        Text explaining the game, stating the mission, listing the actions and tips, and asking for a
        final ``ACTION: <action>`` line.
    """
    actions = "\n".join(f"- {name}: {help_}" for name, help_ in _ACTION_HELP.items())
    return (
        "You are playing a simple navigation game in a grid world made of rooms, walls, doors and "
        f"objects (balls, boxes and keys). Your goal is to {mission}.\n\n"
        "Each turn you are told what you can see: an area 7 cells wide and 7 cells deep in front of you "
        "(including your own row). Walls and closed doors block your view. Positions are relative to "
        'you, e.g. "a red ball 2 steps left and 3 steps forward"; "a wall 1 step forward" means the '
        "cell right in front of you is a wall.\n\n"
        f"Actions:\n{actions}\n\n"
        "Tips:\n"
        "- To go to an object, stand next to it and face it (it must be 1 step forward).\n"
        "- Pick up and toggle act on the object directly in front of you (1 step forward).\n"
        "- Toggle is how you open a door.\n"
        "- If an action does not change what you see, do not repeat it; try something else.\n\n"
        "Think briefly if you want, then end your reply with one line of the form\n"
        "ACTION: <action>\n"
        "where <action> is exactly one of: " + ", ".join(BABYAI_ACTIONS) + "."
    )


def build_brief_instruction(mission: str) -> str:
    """A short system prompt: the mission, the actions and the reply format, nothing else.

    Meant for small models trained from scratch (the tiny CPU recipe), where BALROG's full
    instruction would be ~90% of every prompt's tokens while carrying no information the policy
    can use; language-model agents should use :func:`build_instruction`.
    """
    return f"Your goal is to {mission}. Actions: {', '.join(BABYAI_ACTIONS)}. Reply with ACTION: <action>."


INSTRUCTION_STYLES = {"full": build_instruction, "brief": build_brief_instruction}


class PickupThenGoToLocal(RoomGridLevel):
    """Single-room level "pick up X, then go to Y" (BALROG's ``pick_up_seq_go_to`` task).

    One ``room_size`` x ``room_size`` room (no doors) with ``num_dists`` random objects (keys, balls,
    boxes; duplicates allowed, as in ``GoToLocal``), all reachable. Two objects with different
    (type, colour) are drawn: X to pick up and Y to go to afterwards; the instruction is upstream's
    ``BeforeInstr(PickupInstr(X), GoToInstr(Y))``, e.g. "pick up the blue key, then go to the red ball".
    Upstream's step limit for it is 2 navigations x room_size**2 = 128 for an 8x8 room.

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


#: task -> (level: gymnasium id or level class, BALROG step limit).
#: ``open`` uses ``BabyAI-OpenDoorColor-v0``: the agent starts in a room whose four walls each hold a
#: closed door of a distinct colour and must open the one named by colour ("open the red door"). It is
#: the closest registered single-room door-opening level: ``Open-v0`` spans 3x3 rooms with 18
#: distractors, ``OpenRedDoor`` never varies the colour, ``OpenTwoDoors``/``OpenDoorsOrder*`` are
#: sequences, and ``OpenDoorLoc``'s "the door on your left" refers to the agent's *starting* pose,
#: which a text-only agent would have to remember; the colour is what our observations report.
BABYAI_TASKS: dict[str, tuple[str | Callable[..., MiniGridEnv], int]] = {
    "goto": ("BabyAI-GoToLocal-v0", 64),
    "pickup": ("BabyAI-PickupLoc-v0", 64),
    "open": ("BabyAI-OpenDoorColor-v0", 128),
    "putnext": ("BabyAI-PutNextLocal-v0", 128),
    "pick_up_seq_go_to": (PickupThenGoToLocal, 128),
    "easy_goto": ("BabyAI-GoToRedBallNoDists-v0", 64),
}


def _build_level(level: str | Callable[..., MiniGridEnv], max_steps: int, kwargs: Mapping[str, Any]) -> MiniGridEnv:
    """Instantiate the raw (unwrapped) minigrid level with a fixed ``max_steps``."""
    name = level if isinstance(level, str) else getattr(level, "__name__", repr(level))
    try:
        if isinstance(level, str):
            env = gymnasium.make(level, disable_env_checker=True, max_steps=max_steps, **kwargs).unwrapped
        else:
            env = level(max_steps=max_steps, **kwargs)
    except gymnasium.error.Error as err:
        raise ValueError(f"cannot make minigrid level {name!r}: {err}") from err
    except TypeError as err:
        raise TypeError(f"bad level_kwargs {dict(kwargs)!r} for minigrid level {name!r}: {err}") from err
    if not isinstance(env, MiniGridEnv):
        raise TypeError(f"level {name!r} is a {type(env).__name__}, not a minigrid MiniGridEnv")
    return env


def target_distance(level: MiniGridEnv) -> int:
    """Grid distance (|dx| + |dy|, in cells) from the agent to the nearest object its mission names.

    The objects are those minigrid's verifier matched at reset (``instrs.desc.obj_poss``), so the
    mission must name one object description: BabyAI's go-to, pick-up and open missions (``goto``,
    ``easy_goto``, ``pickup``, ``open``); a sequence or put-next mission names several.

    Raises:
        ValueError: the level's mission names no single object description, or no object matches it.
    """
    desc = getattr(getattr(level, "instrs", None), "desc", None)
    positions = getattr(desc, "obj_poss", None)
    if not positions:
        raise ValueError(f"{type(level).__name__}'s mission {getattr(level, 'mission', '?')!r} does not name one "
                         "object to measure a distance to (go-to, pick-up and open missions do)")
    x, y = level.agent_pos
    return min(abs(int(px) - int(x)) + abs(int(py) - int(y)) for px, py in positions)


class BabyAITextEnv(TextEnv):
    """A BabyAI level as a text env (see the module docstring for the text conventions).

    Args:
        level: a gymnasium id of a minigrid level (e.g. ``"BabyAI-GoToLocal-v0"``) or a level class.
        max_steps: step limit per episode; given to the minigrid level too (its reward uses it).
        format_penalty: added to the reward of a step whose reply held no valid action (<= 0).
        level_kwargs: extra constructor arguments of the level (e.g. ``{"num_dists": 0}``).
        instruction_style: ``"full"`` (BALROG's content, the default) or ``"brief"`` (mission, actions
            and reply format only; see :func:`build_brief_instruction`).
        distance_shaping: beta >= 0 of the distance shaping (module docstring), reward per cell;
            0 (the default) is off.
        shaping_gamma: the learner's step discount, the gamma of the shaping term (in [0, 1]).

    Attributes:
        minigrid: the raw minigrid level (for inspection and hand-made test layouts).
        rejected_layouts: how many layouts upstream rejection sampling discarded so far (upstream
            prints "Sampling rejected: ..." for each; we silence the print and count them instead).

    Raises:
        ValueError: unknown level id, bad ``max_steps``/``format_penalty``/``distance_shaping``/
            ``shaping_gamma``, or ``max_steps`` inside ``level_kwargs``; at reset, a shaped level whose
            mission names no single object (:func:`target_distance`).
        TypeError: level kwargs the level does not accept.
    """

    def __init__(
        self,
        level: str | Callable[..., MiniGridEnv],
        *,
        max_steps: int,
        format_penalty: float = 0.0,
        level_kwargs: Mapping[str, Any] | None = None,
        instruction_style: str = "full",
        distance_shaping: float = 0.0,
        shaping_gamma: float = 1.0,
    ) -> None:
        super().__init__(max_steps=max_steps, format_penalty=format_penalty)
        if not (math.isfinite(distance_shaping) and distance_shaping >= 0):
            raise ValueError(f"distance_shaping must be a finite number >= 0, got {distance_shaping}")
        if not 0.0 <= shaping_gamma <= 1.0:
            raise ValueError(f"shaping_gamma must be in [0, 1], got {shaping_gamma}")
        self.distance_shaping = float(distance_shaping)
        self.shaping_gamma = float(shaping_gamma)
        self._build_instruction = instruction_builder(INSTRUCTION_STYLES, instruction_style)
        kwargs = dict(level_kwargs or {})
        if "max_steps" in kwargs:
            raise ValueError("pass max_steps as BabyAITextEnv's own argument, not inside level_kwargs")
        self.minigrid: MiniGridEnv = _build_level(level, max_steps, kwargs)
        self._mission: str | None = None
        self._success = False
        self.rejected_layouts = 0

    #: ``("turn left", "turn right", "go forward", "pick up", "drop", "toggle")``.
    fixed_actions = tuple(BABYAI_ACTIONS)
    #: ``"go forward"`` (BALROG's default for BabyAI).
    default_action = DEFAULT_ACTION

    # -------------------------------------------------------------- TextEnv properties
    @property
    def mission(self) -> str:
        """minigrid's mission of the current episode. Raises RuntimeError before the first reset."""
        return require_episode(self._mission)

    @property
    def progression(self) -> float:
        """1.0 once any step of this episode had reward > 0, else 0.0."""
        return 1.0 if self._success else 0.0

    @property
    def state_key(self) -> bytes:
        """The exact level state: grid encoding, agent position and direction, carried object, mission.

        Raises:
            RuntimeError: before the first reset.
        """
        g = self.minigrid
        carrying = g.carrying.encode() if g.carrying is not None else (0, 0, 0)
        head = np.array([*g.agent_pos, g.agent_dir, *carrying], dtype=np.int64).tobytes()
        return head + g.grid.encode().tobytes() + self.mission.encode()

    def describe(self) -> str:
        """The text observation of the level's current state (no notice line)."""
        return _render(self.minigrid.gen_obs()["image"])

    # -------------------------------------------------------------- game
    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        # Upstream retries rejected layouts and prints "Sampling rejected: ..." each time; keep the
        # retry, silence the print (counted and logged at debug level instead).
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            obs, _ = self.minigrid.reset(seed=seed)
        rejected = captured.getvalue().count("Sampling rejected")
        if rejected:
            self.rejected_layouts += rejected
            logger.debug("minigrid rejected %d layouts before this episode", rejected)
        if self.minigrid.max_steps != self.max_steps:
            raise RuntimeError(
                f"minigrid level uses max_steps={self.minigrid.max_steps}, expected {self.max_steps}"
            )
        self._mission = str(self.minigrid.mission)
        self._instruction = self._build_instruction(self._mission)  # the prompt states the mission
        self._success = False
        if self.distance_shaping:
            target_distance(self.minigrid)  # a mission without one object is refused at reset, not mid-episode
        return _render(obs["image"]), {"mission": self._mission}

    def _potential(self) -> float:
        """Phi of the current state: -distance_shaping x :func:`target_distance` (reward units)."""
        return -self.distance_shaping * target_distance(self.minigrid)

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        potential = self._potential() if self.distance_shaping else 0.0
        obs, reward, terminated, truncated, _ = self.minigrid.step(BABYAI_ACTIONS[action])
        if reward > 0:
            self._success = True
        reward = float(reward)
        if self.distance_shaping:
            reward += potential_shaping(potential, self._potential(), self.shaping_gamma, bool(terminated))
        return _render(obs["image"]), reward, terminated, truncated, {"mission": self.mission}


def make_babyai(
    task: str,
    *,
    max_steps: int | None = None,
    format_penalty: float = 0.0,
    level_kwargs: Mapping[str, Any] | None = None,
    instruction_style: str = "full",
    distance_shaping: float = 0.0,
    shaping_gamma: float = 1.0,
) -> BabyAITextEnv:
    """Build the BabyAI task ``task`` (a key of :data:`BABYAI_TASKS`).

    Args:
        task: ``goto``, ``pickup``, ``open``, ``putnext``, ``pick_up_seq_go_to`` or ``easy_goto``.
        max_steps: step limit; ``None`` uses BALROG's (64 or 128, see :data:`BABYAI_TASKS`).
        format_penalty: see :class:`~verlog.envs.base.TextEnv`.
        level_kwargs: extra constructor arguments of the minigrid level.
        instruction_style: ``"full"`` or ``"brief"`` (see :class:`BabyAITextEnv`).
        distance_shaping, shaping_gamma: the training-only distance shaping (see :class:`BabyAITextEnv`).

    Raises:
        ValueError: unknown task (the message lists the known ones), or bad arguments.
    """
    level, default_steps = task_entry(BABYAI_TASKS, task, "BabyAI")
    return BabyAITextEnv(
        level,
        max_steps=default_steps if max_steps is None else max_steps,
        format_penalty=format_penalty,
        level_kwargs=level_kwargs,
        instruction_style=instruction_style,
        distance_shaping=distance_shaping,
        shaping_gamma=shaping_gamma,
    )


for _task in BABYAI_TASKS:
    register(f"babyai/{_task}", functools.partial(make_babyai, _task))
