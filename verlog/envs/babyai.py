"""BabyAI (upstream ``minigrid``) as a :class:`~verlog.envs.base.TextEnv`, in BALROG's text conventions.

Each observation lists what the agent sees in its 7x7 egocentric view (minigrid's own partial view,
walls and closed doors blocking sight), one item per line, in one of two text styles
(:mod:`verlog.envs.babyai_text`): ``text_style="balrog"`` (the default) is byte for byte BALROG's text
(``You carry a red key`` first; a wall ahead, left or right only when nothing stands in between;
objects column by column from the left, far rows first; ``a open purple door``), ``"tidy"`` Verlog's
earlier wording (walls behind objects too, nearest objects first, ``an open``, ``You carry`` last).

The six actions are BALROG's: ``turn left``, ``turn right``, ``go forward``, ``pick up``, ``drop``,
``toggle``; the default (for invalid replies) is ``go forward``. The reward is minigrid's native
``1 - 0.9 * step_count / max_steps`` on success (else 0), computed with OUR step limit, which is also
given to the minigrid level (so it never truncates earlier or later than the text env). Progression is
1.0 once any step had reward > 0 (BALROG's BabyAI progression), else 0.0.

Optional, for training only: ``distance_shaping`` = beta > 0 adds the potential-based shaping term
gamma * Phi(s') - Phi(s) to every step's reward, with Phi(s) = -beta * the grid distance (|dx| + |dy|)
the mission still needs the agent to walk: to the object of a go-to or pick-up mission, to the door of
an open mission (by way of its key while a locked door's key is not carried), to the object to move and
on to the one it goes next to, through both stages of a sequence
(:func:`~verlog.envs.babyai_distance.mission_distance`; :func:`~verlog.envs.shaping.potential_shaping`).
The positions come from the level itself, not from the text the agent reads. ``revisit_penalty`` = c > 0
subtracts c from a step that returns the level to a state (:attr:`BabyAITextEnv.state_key`) it was in
earlier in the episode (:class:`~verlog.envs.shaping.RevisitPenalty`). Success and progression are
unaffected by either (they read minigrid's own reward).

Registered tasks (see :data:`BABYAI_TASKS`): BALROG's five, ``babyai/goto``, ``babyai/pickup``,
``babyai/open``, ``babyai/putnext``, ``babyai/pick_up_seq_go_to`` (BALROG's levels, the same layout as
BALROG's for the same seed: :class:`~verlog.envs.babyai_levels.BalrogLocalLevel`); harder levels under
names that say what they are, ``babyai/goto_local``, ``babyai/pickup_loc``, ``babyai/open_door_color``,
``babyai/putnext_local``, ``babyai/pickup_then_goto_local`` (what the first five names ran before they
became BALROG's); ``babyai/easy_goto``; and ``babyai/balrog_mix``, a
:class:`~verlog.envs.mixture.TaskMixture` of BALROG's five that draws the task per episode (uniformly,
or by ``task_weights``), as BALROG's mixed generator draws the mission kind.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import math
from typing import Any, Callable, Mapping

import gymnasium
import numpy as np
from minigrid.core.actions import Actions
from minigrid.minigrid_env import MiniGridEnv

from verlog.catalog import MIXTURE_TASKS
from verlog.envs.babyai_distance import mission_distance
from verlog.envs.babyai_levels import BALROG_KINDS, BalrogLocalLevel, PickupThenGoToLocal
from verlog.envs.babyai_text import TEXT_STYLES, describe_view, render_view
from verlog.envs.base import TextEnv, require_episode
from verlog.envs.options import instruction_builder, task_entry
from verlog.envs.mixture import make_task_mixture
from verlog.envs.registry import register
from verlog.envs.shaping import RevisitPenalty, potential_shaping

__all__ = [
    "BABYAI_ACTIONS",
    "BABYAI_TASKS",
    "BabyAITextEnv",
    "BalrogLocalLevel",
    "PickupThenGoToLocal",
    "TEXT_STYLES",
    "build_instruction",
    "build_brief_instruction",
    "describe_view",
    "make_babyai",
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

#: What an observation means, per text style (the rest of the full prompt is the same for both).
_VIEW_HELP = {
    "balrog": (
        "Each turn you are told what you can see, one thing per line: an area 7 cells wide and 7 cells deep "
        "in front of you (including your own row). Walls and closed doors block your view. Positions are "
        'relative to you, e.g. "a red ball 2 steps left and 3 steps forward". "You carry a blue key" comes '
        "first while you hold something. A wall straight ahead, to your left or to your right is listed only "
        'when nothing stands between you and it; "a wall 1 step forward" means the cell right in front of '
        "you is a wall. An empty observation means there is nothing of note in view.\n\n"
    ),
    "tidy": (
        "Each turn you are told what you can see: an area 7 cells wide and 7 cells deep in front of you "
        "(including your own row). Walls and closed doors block your view. Positions are relative to "
        'you, e.g. "a red ball 2 steps left and 3 steps forward"; "a wall 1 step forward" means the '
        "cell right in front of you is a wall.\n\n"
    ),
}


def build_instruction(mission: str, text_style: str = "balrog") -> str:
    """The system prompt of one BabyAI episode (our own words, BALROG's content and more).

    It carries what BALROG's BabyAI prompt says (the goal, each action with its meaning, the tip to
    toggle what is in front and not to repeat an action that changes nothing) and adds what an
    observation means (in the words of ``text_style``), where pick up and toggle act, and the reply
    format; ``docs/balrog.md`` lists the differences.

    Args:
        mission: minigrid's mission string, e.g. ``"go to the red ball"``.
        text_style: the observation text style the episode uses (``"balrog"`` or ``"tidy"``).

    Returns:
        Text explaining the game, stating the mission, listing the actions and tips, and asking for a
        final ``ACTION: <action>`` line.

    Raises:
        KeyError: an unknown ``text_style``.
    """
    actions = "\n".join(f"- {name}: {help_}" for name, help_ in _ACTION_HELP.items())
    return (
        "You are playing a simple navigation game in a grid world made of rooms, walls, doors and "
        f"objects (balls, boxes and keys). Your goal is to {mission}.\n\n"
        f"{_VIEW_HELP[text_style]}"
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


def build_brief_instruction(mission: str, text_style: str = "balrog") -> str:
    """A short system prompt: the mission, the actions and the reply format, nothing else.

    Meant for small models trained from scratch (the tiny CPU recipe), where BALROG's full
    instruction would be ~90% of every prompt's tokens while carrying no information the policy
    can use; language-model agents should use :func:`build_instruction`. ``text_style`` is accepted
    for symmetry with :func:`build_instruction` and unused.
    """
    return f"Your goal is to {mission}. Actions: {', '.join(BABYAI_ACTIONS)}. Reply with ACTION: <action>."


INSTRUCTION_STYLES = {"full": build_instruction, "brief": build_brief_instruction}


def _balrog_level(kind: str) -> Callable[..., MiniGridEnv]:
    """The level factory of BALROG's task ``kind`` (:class:`BalrogLocalLevel`, named for error messages)."""

    def make(**kwargs: Any) -> MiniGridEnv:
        return BalrogLocalLevel(kind, **kwargs)

    make.__name__ = f"BalrogLocalLevel(kind={kind!r})"
    return make


#: task -> (level: gymnasium id or level factory, step limit). The step limits are BALROG's: its levels
#: compute them (64 per room and per navigation the mission needs), the others reuse them per task.
#: BALROG's five tasks run :class:`BalrogLocalLevel` (one 8x8 room with one object for goto/pickup,
#: two for putnext/pick_up_seq_go_to; two rooms, a locked door and its key for open). The levels these
#: names ran before keep names that say what they are:
#:
#: * ``goto_local``: ``BabyAI-GoToLocal-v0``, one 8x8 room, "go to the <colour> <object>" among 8 objects.
#: * ``pickup_loc``: ``BabyAI-PickupLoc-v0``, one room, 8 objects, missions that may name a location.
#: * ``open_door_color``: ``BabyAI-OpenDoorColor-v0``: the agent starts in a room whose four walls each
#:   hold a closed door of a distinct colour and must open the one named by colour ("open the red door").
#: * ``putnext_local``: ``BabyAI-PutNextLocal-v0``, one room, 8 objects.
#: * ``pickup_then_goto_local``: :class:`PickupThenGoToLocal`, one room, 8 objects.
#: * ``easy_goto``: ``BabyAI-GoToRedBallNoDists-v0``, "go to the red ball" alone in one room.
BABYAI_TASKS: dict[str, tuple[str | Callable[..., MiniGridEnv], int]] = {
    "goto": (_balrog_level("goto"), 64),
    "pickup": (_balrog_level("pickup"), 64),
    "open": (_balrog_level("open"), 128),
    "putnext": (_balrog_level("putnext"), 128),
    "pick_up_seq_go_to": (_balrog_level("pick_up_seq_go_to"), 128),
    "goto_local": ("BabyAI-GoToLocal-v0", 64),
    "pickup_loc": ("BabyAI-PickupLoc-v0", 64),
    "open_door_color": ("BabyAI-OpenDoorColor-v0", 128),
    "putnext_local": ("BabyAI-PutNextLocal-v0", 128),
    "pickup_then_goto_local": (PickupThenGoToLocal, 128),
    "easy_goto": ("BabyAI-GoToRedBallNoDists-v0", 64),
}
assert all(kind in BABYAI_TASKS for kind in BALROG_KINDS)


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


class BabyAITextEnv(TextEnv):
    """A BabyAI level as a text env (see the module docstring for the text conventions).

    Args:
        level: a gymnasium id of a minigrid level (e.g. ``"BabyAI-GoToLocal-v0"``) or a level class
            (or factory) taking ``max_steps`` and the level kwargs.
        max_steps: step limit per episode; given to the minigrid level too (its reward uses it).
        format_penalty: added to the reward of a step whose reply held no valid action (<= 0).
        level_kwargs: extra constructor arguments of the level (e.g. ``{"num_dists": 0}``).
        instruction_style: ``"full"`` (BALROG's content, the default) or ``"brief"`` (mission, actions
            and reply format only; see :func:`build_brief_instruction`).
        distance_shaping: beta >= 0 of the distance shaping (module docstring), reward per cell;
            0 (the default) is off.
        shaping_gamma: the learner's step discount, the gamma of the shaping term (in [0, 1]).
        revisit_penalty: c >= 0 taken from each step that returns to a state of the episode (module
            docstring); 0 (the default) is off.
        text_style: the observation text, ``"balrog"`` (BALROG's, byte for byte; the default) or
            ``"tidy"`` (Verlog's earlier wording); see :mod:`verlog.envs.babyai_text`.
        observation_mode: ``"text"`` (str observations, the default), ``"image"`` (a dict: the mission
            as text and the image of the agent's 7x7 view) or ``"both"`` (a dict: the text
            observation and the image); see :meth:`~verlog.envs.base.TextEnv.enable_images`.
        image_tile_px: pixels per grid cell of the image (the image is ``7 * image_tile_px`` pixels
            square: minigrid's own partial-view render, the agent at the bottom centre facing up).

    Attributes:
        minigrid: the raw minigrid level (for inspection and hand-made test layouts).
        rejected_layouts: how many layouts upstream rejection sampling discarded so far (upstream
            prints "Sampling rejected: ..." for each; we silence the print and count them instead).

    Raises:
        ValueError: unknown level id, bad ``max_steps``/``format_penalty``/``distance_shaping``/
            ``shaping_gamma``/``revisit_penalty``/``text_style``, or ``max_steps`` inside ``level_kwargs``;
            at reset, a shaped level whose mission has no distance
            (:func:`~verlog.envs.babyai_distance.mission_distance`).
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
        revisit_penalty: float = 0.0,
        text_style: str = "balrog",
        observation_mode: str = "text",
        image_tile_px: int = 8,
    ) -> None:
        super().__init__(max_steps=max_steps, format_penalty=format_penalty)
        if isinstance(image_tile_px, bool) or not isinstance(image_tile_px, int) or image_tile_px < 1:
            raise ValueError(f"image_tile_px must be an int >= 1, got {image_tile_px!r}")
        self.image_tile_px = image_tile_px
        if text_style not in TEXT_STYLES:
            raise ValueError(f"text_style must be one of {list(TEXT_STYLES)}, got {text_style!r}")
        self.text_style = text_style
        if not (math.isfinite(distance_shaping) and distance_shaping >= 0):
            raise ValueError(f"distance_shaping must be a finite number >= 0, got {distance_shaping}")
        if not 0.0 <= shaping_gamma <= 1.0:
            raise ValueError(f"shaping_gamma must be in [0, 1], got {shaping_gamma}")
        self.distance_shaping = float(distance_shaping)
        self.shaping_gamma = float(shaping_gamma)
        self._mission: str | None = None  # set by each reset
        self._revisits: RevisitPenalty | None = None
        self.set_revisit_penalty(revisit_penalty)
        self._build_instruction = instruction_builder(INSTRUCTION_STYLES, instruction_style)
        kwargs = dict(level_kwargs or {})
        if "max_steps" in kwargs:
            raise ValueError("pass max_steps as BabyAITextEnv's own argument, not inside level_kwargs")
        self.minigrid: MiniGridEnv = _build_level(level, max_steps, kwargs)
        side = self.minigrid.agent_view_size * image_tile_px
        self.enable_images(observation_mode, (side, side))
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

    def render_image(self) -> np.ndarray:
        """[7 * image_tile_px, 7 * image_tile_px, 3] uint8: minigrid's render of the agent's partial
        view (what the text lists: walls and closed doors hide what is behind them, unseen cells
        black), the agent at the bottom centre facing up. Raises RuntimeError before the first reset."""
        require_episode(self._mission)
        return np.ascontiguousarray(self.minigrid.get_pov_render(self.image_tile_px), dtype=np.uint8)

    def describe(self) -> str:
        """The text observation of the level's current state (no notice line)."""
        return render_view(self.minigrid.gen_obs()["image"], self.text_style)

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
        self._instruction = self._build_instruction(self._mission, self.text_style)  # it states the mission
        self._success = False
        if self.distance_shaping:
            mission_distance(self.minigrid)  # a mission without a distance is refused at reset, not mid-episode
        if self._revisits is not None:
            self._revisits.reset(self.state_key)
        return render_view(obs["image"], self.text_style), {"mission": self._mission}

    def set_revisit_penalty(self, cost: float) -> None:
        """Change the cost of a revisiting step (``revisit_penalty`` of the constructor) from the next step on.

        An env that has the cost keeps the states its episode has seen; one built without it (cost 0)
        starts remembering them now, from the current state when an episode is under way, so a cost
        switched on mid-episode counts revisits from there. 0 keeps the tracker (it charges nothing).

        Raises:
            ValueError: ``cost`` negative or not finite.
        """
        if self._revisits is not None:
            self._revisits.cost = cost
        elif cost != 0.0:  # RevisitPenalty refuses a negative or non-finite cost
            revisits = RevisitPenalty(cost)
            if self._mission is not None:  # an episode is under way
                revisits.reset(self.state_key)
            self._revisits = revisits

    def _potential(self) -> float:
        """Phi of the current state: -distance_shaping x :func:`mission_distance` (reward units)."""
        return -self.distance_shaping * mission_distance(self.minigrid)

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        potential = self._potential() if self.distance_shaping else 0.0
        obs, reward, terminated, truncated, _ = self.minigrid.step(BABYAI_ACTIONS[action])
        if reward > 0:
            self._success = True
        reward = float(reward)
        if self.distance_shaping:
            reward += potential_shaping(potential, self._potential(), self.shaping_gamma, bool(terminated))
        if self._revisits is not None:
            reward += self._revisits.step(self.state_key)
        return render_view(obs["image"], self.text_style), reward, terminated, truncated, {"mission": self.mission}


def make_babyai(
    task: str,
    *,
    max_steps: int | None = None,
    format_penalty: float = 0.0,
    level_kwargs: Mapping[str, Any] | None = None,
    instruction_style: str = "full",
    distance_shaping: float = 0.0,
    shaping_gamma: float = 1.0,
    revisit_penalty: float = 0.0,
    text_style: str = "balrog",
    observation_mode: str = "text",
    image_tile_px: int = 8,
) -> BabyAITextEnv:
    """Build the BabyAI task ``task`` (a key of :data:`BABYAI_TASKS`).

    Args:
        task: BALROG's ``goto``, ``pickup``, ``open``, ``putnext``, ``pick_up_seq_go_to``, or
            ``goto_local``, ``pickup_loc``, ``open_door_color``, ``putnext_local``,
            ``pickup_then_goto_local``, ``easy_goto`` (see :data:`BABYAI_TASKS`).
        max_steps: step limit; ``None`` uses BALROG's (64 or 128, see :data:`BABYAI_TASKS`).
        format_penalty: see :class:`~verlog.envs.base.TextEnv`.
        level_kwargs: extra constructor arguments of the minigrid level.
        instruction_style: ``"full"`` or ``"brief"`` (see :class:`BabyAITextEnv`).
        distance_shaping, shaping_gamma: the training-only distance shaping (see :class:`BabyAITextEnv`).
        revisit_penalty: the training-only cost of a revisiting step (see :class:`BabyAITextEnv`).
        text_style: ``"balrog"`` or ``"tidy"`` (see :class:`BabyAITextEnv`).
        observation_mode, image_tile_px: image observations (see :class:`BabyAITextEnv`).

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
        revisit_penalty=revisit_penalty,
        text_style=text_style,
        observation_mode=observation_mode,
        image_tile_px=image_tile_px,
    )


for _task in BABYAI_TASKS:
    register(f"babyai/{_task}", functools.partial(make_babyai, _task))
# BALROG's five tasks in one env, the task drawn per episode (``task_weights`` may reweigh them).
assert MIXTURE_TASKS["babyai/balrog_mix"] == tuple(f"babyai/{kind}" for kind in BALROG_KINDS)
register("babyai/balrog_mix", functools.partial(make_task_mixture, MIXTURE_TASKS["babyai/balrog_mix"]))
