"""Fixed-seed evaluation: run whole episodes side by side, one batched policy call per turn.

:func:`run_episodes` is the one episode runner behind every evaluation (the end-of-training
evaluation of one task, and the BALROG suite of :mod:`verlog.suite`). Each episode is given by an
:class:`EpisodeSpec` (task and reset seed), runs exactly once to its end (no auto-reset waste), and up
to ``num_envs`` episodes run side by side; episodes of different tasks may share a batch. The memory
is the training memory, so evaluation sees the prompts the policy was trained on.

Policies: :class:`ModelPolicy` (a rollout engine, greedy or seeded sampling) and
:class:`RandomPolicy` (a uniformly random valid action per step, seeded per episode: the floor that
BALROG-style numbers are read against).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Protocol, Sequence

from verlog.envs import make_env
from verlog.rollout.engine import RolloutEngine, SamplingParams

__all__ = [
    "EpisodeSpec",
    "EvalResult",
    "ModelPolicy",
    "Policy",
    "RandomPolicy",
    "evaluate",
    "mean_and_se",
    "run_episodes",
]


@dataclass(frozen=True)
class EpisodeSpec:
    """One evaluation episode: ``task`` reset with ``seed``; ``index`` is its number within the task."""

    task: str
    seed: int
    index: int


class Policy(Protocol):
    """Chooses the replies of one turn for the running episodes.

    ``act(memories, infos, specs, turn)`` gets, for each running episode, its memory (``None`` when
    the policy needs none), the latest ``info`` of its env and its :class:`EpisodeSpec`; ``turn``
    counts the policy calls of this evaluation. It returns one reply string per episode.
    """

    needs_memory: bool

    def act(self, memories: Sequence[Any], infos: Sequence[dict[str, Any]], specs: Sequence[EpisodeSpec],
            turn: int) -> list[str]: ...


class ModelPolicy:
    """The policy of a rollout engine: one batched ``generate`` over the memories' prompts per turn.

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
        prompts = [m.prompt_ids()[0] for m in memories]
        params = self.sampling if self.sampling.seed is None else replace(self.sampling, seed=self.sampling.seed + turn)
        gens = self.engine.generate(prompts, params)
        return list(self.decode([g.token_ids for g in gens]))


class RandomPolicy:
    """A uniformly random action from ``info["valid_actions"]``, written as ``"ACTION: <action>"``.

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
            replies.append(f"ACTION: {rng.choice(actions)}")
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


def run_episodes(
    specs: Sequence[EpisodeSpec],
    policy: Policy,
    *,
    num_envs: int,
    make_memory: Callable[[], Any] | None = None,
    env_kwargs: Callable[[str], dict[str, Any]] | dict[str, Any] | None = None,
    record_turns: bool = False,
    on_episode: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every episode of ``specs`` once to its end with ``policy``; return their records.

    Up to ``num_envs`` episodes run side by side; a slot whose episode ends takes the next spec. Envs
    are built once per (slot, task) and reused across episodes.

    Args:
        specs: the episodes, in the order they are started.
        policy: see :class:`Policy`.
        num_envs: parallel slots (>= 1).
        make_memory: a fresh per-episode memory (required when ``policy.needs_memory``).
        env_kwargs: keyword arguments of :func:`~verlog.envs.make_env`, or a function task -> kwargs.
        record_turns: also store each episode's full turn log (``turns``: observation, context,
            reply, executed action, validity, reward per step).
        on_episode: called with each record as soon as its episode ends (e.g. to append it to a file).

    Returns:
        One record per spec, in the order of ``specs``: ``task``, ``episode`` (spec index), ``seed``,
        ``return``, ``length`` (steps), ``invalid`` (invalid replies), ``success``, ``progression``
        (final), ``truncated`` (bool), and ``turns`` when asked.

    Raises:
        ValueError: ``num_envs`` < 1, or a policy that needs memory without ``make_memory``.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
    if policy.needs_memory and make_memory is None:
        raise ValueError("this policy needs make_memory")
    kwargs_of = env_kwargs if callable(env_kwargs) else (lambda task, _kw=dict(env_kwargs or {}): _kw)
    pending = list(enumerate(specs))[::-1]  # pop() from the end = start in order
    envs: dict[tuple[int, str], Any] = {}
    active: dict[int, dict[str, Any]] = {}
    records: dict[int, dict[str, Any]] = {}

    def start(slot: int) -> None:
        order, spec = pending.pop()
        key = (slot, spec.task)
        if key not in envs:
            envs[key] = make_env(spec.task, **kwargs_of(spec.task))
        obs, info = envs[key].reset(seed=spec.seed)
        memory = None
        if policy.needs_memory:
            memory = make_memory()  # type: ignore[misc]
            memory.start_episode(info["instruction"], obs, info["context"])
        active[slot] = {"order": order, "spec": spec, "env": envs[key], "memory": memory, "info": info,
                        "obs": obs, "return": 0.0, "length": 0, "invalid": 0, "turns": []}

    for slot in range(min(num_envs, len(pending))):
        start(slot)
    turn = 0
    try:
        while active:
            slots = sorted(active)
            eps = [active[s] for s in slots]
            replies = policy.act([e["memory"] for e in eps], [e["info"] for e in eps], [e["spec"] for e in eps], turn)
            turn += 1
            for slot, ep, reply in zip(slots, eps, replies):
                obs, reward, terminated, truncated, info = ep["env"].step(reply)
                ep["return"] += float(reward)
                ep["length"] += 1
                ep["invalid"] += int(not info["action_valid"])
                if record_turns:
                    ep["turns"].append({"observation": ep["obs"], "context": ep["info"]["context"], "reply": reply,
                                        "action": info["action"], "action_valid": bool(info["action_valid"]),
                                        "reward": float(reward)})
                ep["obs"], ep["info"] = obs, info
                if not (terminated or truncated):
                    if ep["memory"] is not None:
                        ep["memory"].add_turn(reply, obs, info["context"])
                    continue
                spec = ep["spec"]
                record = {"task": spec.task, "episode": spec.index, "seed": spec.seed, "return": ep["return"],
                          "length": ep["length"], "invalid": ep["invalid"], "success": bool(info["success"]),
                          "progression": float(info["progression"]), "truncated": bool(truncated)}
                if record_turns:
                    record["turns"] = ep["turns"]
                records[ep["order"]] = record
                if hasattr(policy, "forget"):
                    policy.forget(spec)
                if on_episode is not None:
                    on_episode(record)
                del active[slot]
                if pending:
                    start(slot)
    finally:
        for env in envs.values():
            env.close()
    return [records[i] for i in range(len(specs))]


@dataclass
class EvalResult:
    """Outcome of the evaluation of one task.

    ``success_se`` and ``progression_se`` are BALROG's standard errors: population std / sqrt(n).
    """

    task: str
    episodes: int
    greedy: bool
    success_mean: float
    success_se: float
    progression_mean: float
    progression_se: float
    return_mean: float
    length_mean: float
    invalid_action_rate: float
    per_episode: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_records(cls, task: str, records: Iterable[dict[str, Any]], *, greedy: bool) -> "EvalResult":
        """Aggregate per-episode records (as :func:`run_episodes` returns them).

        Raises:
            ValueError: no records.
        """
        records = list(records)
        if not records:
            raise ValueError(f"no episodes to aggregate for {task!r}")
        success_m, success_se = mean_and_se([float(r["success"]) for r in records])
        prog_m, prog_se = mean_and_se([r["progression"] for r in records])
        steps = sum(r["length"] for r in records)
        return cls(
            task=task, episodes=len(records), greedy=greedy,
            success_mean=success_m, success_se=success_se, progression_mean=prog_m, progression_se=prog_se,
            return_mean=sum(r["return"] for r in records) / len(records),
            length_mean=steps / len(records),
            invalid_action_rate=sum(r["invalid"] for r in records) / max(steps, 1),
            per_episode=records,
        )

    def summary(self) -> dict[str, Any]:
        """Everything but the per-episode list."""
        out = asdict(self)
        out.pop("per_episode")
        return out


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
) -> EvalResult:
    """Run ``episodes`` fixed-seed episodes of ``task`` (episode i reset with ``seed + i``).

    Args:
        engine: the policy's rollout engine.
        decode: token ids -> reply text.
        make_memory: builds a fresh per-environment memory (as in training).
        sampling: greedy or sampled decoding (see :class:`ModelPolicy` for ``sampling.seed``).
        env_kwargs: keyword arguments of :func:`~verlog.envs.make_env`.

    Raises:
        ValueError: ``episodes`` or ``num_envs`` is not positive.
    """
    if episodes <= 0 or num_envs <= 0:
        raise ValueError(f"evaluate: episodes ({episodes}) and num_envs ({num_envs}) must be positive")
    specs = [EpisodeSpec(task, seed + i, i) for i in range(episodes)]
    records = run_episodes(specs, ModelPolicy(engine, decode, sampling), num_envs=num_envs,
                           make_memory=make_memory, env_kwargs=env_kwargs)
    return EvalResult.from_records(task, records, greedy=sampling.is_greedy)
