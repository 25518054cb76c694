"""Fixed-seed evaluation: run whole episodes side by side, one batched policy call per turn.

Every evaluation (the end-of-training evaluation of one task, and the BALROG suite of
:mod:`verlog.suite`) plays its episodes with :func:`verlog.rollout.runner.run_episodes`: each episode
is given by an :class:`~verlog.rollout.runner.EpisodeSpec` (task and reset seed), runs exactly once to
its end (no auto-reset waste), and up to ``num_envs`` episodes run side by side; episodes of different
tasks may share a batch. The memory is the training memory, so evaluation sees the prompts the policy
was trained on. :class:`EvalResult` aggregates the :class:`~verlog.rollout.records.EpisodeRecord` s.

Policies: :class:`ModelPolicy` (a rollout engine, greedy or seeded sampling) and
:class:`RandomPolicy` (a uniformly random valid action per step, seeded per episode: the floor that
BALROG-style numbers are read against).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterable, Sequence

from verlog.rollout.engine import RolloutEngine, SamplingParams
from verlog.rollout.records import EpisodeRecord
from verlog.rollout.runner import EpisodeSpec, generate_turn, run_episodes
from verlog.warmup import format_reply

__all__ = [
    "EvalResult",
    "ModelPolicy",
    "RandomPolicy",
    "evaluate",
    "mean_and_se",
]


class ModelPolicy:
    """The :class:`~verlog.rollout.runner.Policy` of a rollout engine: one batched ``generate`` over the
    memories' prompts per turn (:func:`~verlog.rollout.runner.generate_turn`).

    Args:
        engine: the rollout engine.
        decode: response token ids -> reply texts.
        sampling: decoding parameters. With ``sampling.seed`` set, turn j samples with seed
            ``sampling.seed + j``: results are reproducible and the engine's own sampling stream (used
            by training rollouts) is untouched.
    """

    needs_memory = True

    def __init__(self, engine: RolloutEngine, decode: Callable[[list[list[int]]], list[str]],
                 sampling: SamplingParams) -> None:
        self.engine, self.decode, self.sampling = engine, decode, sampling

    @property
    def greedy(self) -> bool:
        """Whether decoding is argmax."""
        return self.sampling.is_greedy

    def act(self, memories: Sequence[Any], infos: Sequence[dict[str, Any]], specs: Sequence[EpisodeSpec],
            turn: int) -> list[str]:
        """Generate one reply per memory's current prompt."""
        params = self.sampling if self.sampling.seed is None else replace(self.sampling, seed=self.sampling.seed + turn)
        return list(generate_turn(memories, self.engine, self.decode, params)[2])


class RandomPolicy:
    """A uniformly random action from ``info["valid_actions"]``, written as
    :func:`~verlog.warmup.format_reply` writes it (``"ACTION: <action>"``).

    Each episode draws from its own ``random.Random((seed, task, episode seed))`` stream, so an
    episode's actions do not depend on which other episodes share its batch. For free-text games the
    valid actions are the game's admissible commands.

    Raises (from :meth:`act`):
        RuntimeError: an env offered no valid action.
    """

    needs_memory = False
    greedy = False

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._rngs: dict[EpisodeSpec, random.Random] = {}

    def act(self, memories: Sequence[Any], infos: Sequence[dict[str, Any]], specs: Sequence[EpisodeSpec],
            turn: int) -> list[str]:
        """One random valid action per running episode."""
        replies = []
        for info, spec in zip(infos, specs):
            actions = list(info["valid_actions"])
            if not actions:
                raise RuntimeError(f"{spec.task} (seed {spec.seed}) offered no valid action to choose from")
            rng = self._rngs.setdefault(spec, random.Random(f"{self.seed}/{spec.task}/{spec.seed}"))
            replies.append(format_reply(rng.choice(actions)))
        return replies

    def forget(self, spec: EpisodeSpec) -> None:
        """Drop the finished episode's stream."""
        self._rngs.pop(spec, None)


def mean_and_se(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error (population std / sqrt(n)) as BALROG aggregates; (nan, nan) if empty."""
    if not xs:
        return math.nan, math.nan
    m = sum(xs) / len(xs)
    var = sum((x - m) ** 2 for x in xs) / len(xs)
    return m, math.sqrt(var / len(xs))


@dataclass
class EvalResult:
    """Outcome of the evaluation of one task.

    ``success_se``, ``progression_se`` and ``return_se`` are BALROG's standard errors: population std / sqrt(n).
    ``per_task`` breaks a task mixture's episodes down by the task each one drew (task name ->
    ``episodes``, ``success_mean``, ``success_se``, ``progression_mean``, ``progression_se``, in order
    of first appearance); it is empty when every episode ran ``task`` itself.
    """

    task: str
    episodes: int
    greedy: bool
    success_mean: float
    success_se: float
    progression_mean: float
    progression_se: float
    return_mean: float
    return_se: float
    length_mean: float
    invalid_action_rate: float
    per_task: dict[str, dict[str, float]] = field(default_factory=dict)
    per_episode: list[EpisodeRecord] = field(default_factory=list)

    @classmethod
    def from_records(cls, task: str, records: Iterable[EpisodeRecord], *, greedy: bool) -> "EvalResult":
        """Aggregate per-episode records (as :func:`~verlog.rollout.runner.run_episodes` returns them).

        Raises:
            ValueError: no records.
        """
        records = list(records)
        if not records:
            raise ValueError(f"no episodes to aggregate for {task!r}")
        success_m, success_se = mean_and_se([float(r.success) for r in records])
        prog_m, prog_se = mean_and_se([r.progression for r in records])
        return_m, return_se = mean_and_se([r.episode_return for r in records])
        steps = sum(r.length for r in records)
        by_task: dict[str, list[EpisodeRecord]] = {}
        for r in records:
            by_task.setdefault(r.task or task, []).append(r)
        per_task = {}
        if set(by_task) != {task}:
            for name, rs in by_task.items():
                m, se = mean_and_se([float(r.success) for r in rs])
                pm, pse = mean_and_se([r.progression for r in rs])
                per_task[name] = {"episodes": len(rs), "success_mean": m, "success_se": se,
                                  "progression_mean": pm, "progression_se": pse}
        return cls(
            task=task, episodes=len(records), greedy=greedy,
            success_mean=success_m, success_se=success_se, progression_mean=prog_m, progression_se=prog_se,
            return_mean=return_m, return_se=return_se,
            length_mean=steps / len(records),
            invalid_action_rate=sum(r.invalid_actions for r in records) / max(steps, 1),
            per_task=per_task, per_episode=records,
        )

    def summary(self) -> dict[str, Any]:
        """Everything but the per-episode list (and ``per_task`` when it is empty)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name != "per_episode" and not (f.name == "per_task" and not self.per_task)}


def evaluate(
    engine: RolloutEngine,
    decode: Callable[[list[list[int]]], list[str]],
    make_memory: Callable[[], Any],
    *,
    task: str,
    episodes: int,
    seed: int,
    num_envs: int,
    sampling: SamplingParams,
    env_kwargs: dict[str, Any] | None = None,
    on_episode: Callable[[EpisodeRecord], None] | None = None,
) -> EvalResult:
    """Run ``episodes`` fixed-seed episodes of ``task`` (episode i reset with ``seed + i``).

    Args:
        engine: the policy's rollout engine.
        decode: token ids -> reply text.
        make_memory: builds a fresh per-environment memory (as in training).
        sampling: greedy or sampled decoding (see :class:`ModelPolicy` for ``sampling.seed``).
        env_kwargs: keyword arguments of :func:`~verlog.envs.make_env`.
        on_episode: called with each episode's record as soon as it ends (e.g. a progress bar).

    Raises:
        ValueError: ``episodes`` or ``num_envs`` is not positive.
    """
    if episodes <= 0 or num_envs <= 0:
        raise ValueError(f"evaluate: episodes ({episodes}) and num_envs ({num_envs}) must be positive")
    specs = [EpisodeSpec(task, seed + i, i) for i in range(episodes)]
    records = run_episodes(specs, ModelPolicy(engine, decode, sampling), num_envs=num_envs,
                           make_memory=make_memory, env_kwargs=env_kwargs, on_episode=on_episode)
    return EvalResult.from_records(task, records, greedy=sampling.is_greedy)
