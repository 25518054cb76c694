"""A task mixture: one text env that plays a task drawn per episode from several tasks of one family.

Training one policy on several tasks (BALROG's five BabyAI tasks, say) needs every env slot to play
all of them. :class:`TaskMixture` holds one built env per task; each reset draws the episode's task
from its reset seed (:func:`draw_task`) and resets that task's env with the same seed, so an episode
is reproducible from its seed alone, as every text env's is: checkpoint replay, fixed-seed evaluation
and the grouped collectors (whose group members share a seed, hence a task) all work unchanged.
Steps go to the drawn env, and every ``info`` gets one more key, ``task``: the drawn task's name,
which the collectors and evaluation copy into each episode's record for per-task metrics.

The tasks must be of one family (``babyai/...``): tasks of one family share their info keys, action
parsing and prompt layout, which a vector env and the memory rely on.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import gymnasium
import numpy as np

from verlog.envs.base import TextEnv
from verlog.envs.registry import make_env

__all__ = ["TASK_INFO_KEY", "TaskMixture", "draw_task", "make_task_mixture", "mixture_weights"]

#: The ``info`` key that names the drawn task.
TASK_INFO_KEY = "task"

#: Mixed into the episode seed for the task draw, so the draw does not reuse the stream that the
#: drawn env seeds its level generator with.
_DRAW_STREAM = 0x7461736B  # "task"


def draw_task(seed: int, weights: Sequence[float]) -> int:
    """The index of the task that the episode reset with ``seed`` plays.

    Inverse-CDF sampling of the categorical distribution ``weights / sum(weights)`` on one uniform
    number drawn from ``numpy.random.SeedSequence([seed, _DRAW_STREAM])`` (the same on every
    platform and process): over many seeds task ``k`` is drawn with probability ``weights[k] / sum``.

    Args:
        seed: the episode's reset seed (a non-negative int).
        weights: one finite non-negative weight per task, not all zero.

    Raises:
        ValueError: empty, negative, non-finite or all-zero ``weights``, or a negative ``seed``.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"task weights must be finite, non-negative and not all zero, got {list(weights)}")
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    u = np.random.default_rng(np.random.SeedSequence([int(seed), _DRAW_STREAM])).random()
    cdf = np.cumsum(w) / w.sum()
    return int(min(np.searchsorted(cdf, u, side="right"), w.size - 1))


def mixture_weights(tasks: Sequence[str], task_weights: Mapping[str, float] | None) -> list[float]:
    """One weight per task: 1 for a task ``task_weights`` does not name, its value otherwise.

    Raises:
        ValueError: a name that is not one of ``tasks``, a negative or non-finite weight, or all zero.
    """
    given = dict(task_weights or {})
    unknown = sorted(set(given) - set(tasks))
    if unknown:
        raise ValueError(f"task weights name {unknown}, which are not tasks of this mixture: {list(tasks)}")
    weights = [float(given.get(task, 1.0)) for task in tasks]
    if any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"task weights must be finite, non-negative and not all zero, got {dict(zip(tasks, weights))}")
    return weights


class TaskMixture(TextEnv):
    """One text env playing, per episode, a task drawn from ``envs`` with probability ∝ ``weights``.

    ``reset(seed=s)`` plays task :func:`draw_task` ``(s, weights)``, reset with ``s``; ``reset()`` with
    no seed draws a seed from the mixture's own RNG first. ``step`` and every property of the text-env
    contract (instruction, valid actions, progression, success, context, state key ...) are the drawn
    env's; each step limit is its task's own. ``info`` is the drawn env's plus ``task`` (str).

    Args:
        envs: task name -> its built env (at least one, names of one family ``<family>/<task>``).
        weights: one finite non-negative weight per env, in ``envs``' order (None: all equal).

    Raises:
        ValueError: no envs, tasks of several families, or bad weights.
    """

    def __init__(self, envs: Mapping[str, TextEnv], weights: Sequence[float] | None = None) -> None:
        super().__init__()
        if not envs:
            raise ValueError("a task mixture needs at least one task")
        families = sorted({name.partition("/")[0] for name in envs})
        if len(families) != 1:
            raise ValueError(f"a task mixture's tasks must be of one family (their info keys and prompts differ), "
                             f"got families {families}")
        self.tasks: tuple[str, ...] = tuple(envs)
        self._envs: list[TextEnv] = list(envs.values())
        self.weights: list[float] = [1.0] * len(self._envs) if weights is None else [float(w) for w in weights]
        if len(self.weights) != len(self._envs):
            raise ValueError(f"{len(self.weights)} weights for {len(self._envs)} tasks")
        draw_task(0, self.weights)  # validates the weights
        self._current = 0

    @property
    def task(self) -> str:
        """The name of the current episode's task (the first task before the first reset)."""
        return self.tasks[self._current]

    @property
    def env(self) -> TextEnv:
        """The current episode's env."""
        return self._envs[self._current]

    # The contract's game hooks are never called: reset and step go to the drawn env whole.
    def _reset_game(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError("TaskMixture.reset delegates to the drawn task's env")

    def _step_game(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        raise NotImplementedError("TaskMixture.step delegates to the drawn task's env")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Draw the episode's task from ``seed`` and reset its env with ``seed`` (see the class doc).

        Raises:
            ValueError: non-empty ``options``; whatever the drawn env's reset raises.
        """
        if options:
            raise ValueError(f"TaskMixture.reset takes no options, got {options!r}")
        gymnasium.Env.reset(self, seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(0, 2**31 - 1))
        self._current = draw_task(seed, self.weights)
        obs, info = self.env.reset(seed=seed)
        return obs, {**info, TASK_INFO_KEY: self.task}

    def step(self, reply: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The drawn env's step, with ``info["task"]`` added."""
        obs, reward, terminated, truncated, info = self.env.step(reply)
        return obs, reward, terminated, truncated, {**info, TASK_INFO_KEY: self.task}

    @property
    def instruction(self) -> str:
        return self.env.instruction

    @property
    def valid_actions(self) -> list[str]:
        return self.env.valid_actions

    @property
    def default_action(self) -> str:
        return self.env.default_action

    @property
    def progression(self) -> float:
        return self.env.progression

    @property
    def success(self) -> bool:
        return self.env.success

    @property
    def context(self) -> str:
        return self.env.context

    @property
    def state_key(self) -> bytes:
        return self.env.state_key

    @property
    def episode_step(self) -> int:
        return self.env.episode_step

    @property
    def actions_are_closed(self) -> bool:  # type: ignore[override]
        return self.env.actions_are_closed

    def parse_action(self, reply: str) -> str | None:
        return self.env.parse_action(reply)

    def set_revisit_penalty(self, cost: float) -> None:
        """Set the revisit cost of every task's env (all are built with the mixture, so a task drawn later
        has it too); see :meth:`verlog.envs.babyai.BabyAITextEnv.set_revisit_penalty`.

        Raises:
            AttributeError: a task's env has no revisit cost. ValueError: ``cost`` negative or not finite
                (refused by the first env, before any is changed).
        """
        for env in self._envs:
            env.set_revisit_penalty(cost)  # type: ignore[attr-defined]

    def close(self) -> None:
        """Close every task's env."""
        for env in self._envs:
            env.close()


def make_task_mixture(tasks: Sequence[str], *, task_weights: Mapping[str, float] | None = None,
                      **kwargs: Any) -> TaskMixture:
    """Build a :class:`TaskMixture` of the registered ``tasks``, each made by
    :func:`~verlog.envs.registry.make_env` with ``kwargs`` (tasks of weight 0 are not built).

    Args:
        tasks: registered names of one family.
        task_weights: task name -> sampling weight (tasks it does not name weigh 1; see
            :func:`mixture_weights`).
        kwargs: keyword arguments of every task's env (``max_steps`` given here overrides every task's own
            limit; left out, each task keeps its own).

    Raises:
        ValueError: bad weights or tasks (see :func:`mixture_weights` and :class:`TaskMixture`).
        TypeError: arguments a task's env does not accept.
    """
    weights = mixture_weights(tasks, task_weights)
    chosen = [(task, w) for task, w in zip(tasks, weights) if w > 0]
    return TaskMixture({task: make_env(task, **kwargs) for task, _ in chosen}, [w for _, w in chosen])
