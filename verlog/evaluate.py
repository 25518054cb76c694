"""Fixed-seed evaluation: N episodes, episode i reset with seed ``seed + i``, BALROG's metrics.

Each episode runs exactly once to its end (no auto-reset waste); up to ``num_envs`` episodes run
side by side and share one batched ``generate`` call per turn. The memory is the same as in
training, so evaluation sees the prompts the policy was trained on.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

from verlog.envs import make_env
from verlog.rollout.engine import RolloutEngine, SamplingParams


@dataclass
class EvalResult:
    """Outcome of one evaluation.

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

    def summary(self) -> dict[str, Any]:
        """Everything but the per-episode list."""
        out = asdict(self)
        out.pop("per_episode")
        return out


def mean_and_se(xs: list[float]) -> tuple[float, float]:
    """Mean and standard error (population std / sqrt(n)) as BALROG aggregates; (nan, nan) if empty."""
    if not xs:
        return math.nan, math.nan
    m = sum(xs) / len(xs)
    var = sum((x - m) ** 2 for x in xs) / len(xs)
    return m, math.sqrt(var / len(xs))


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
    """Run ``episodes`` fixed-seed episodes of ``task`` with the engine's policy.

    Args:
        engine: the policy's rollout engine.
        decode: token ids -> reply text.
        make_memory: builds a fresh per-environment memory (as in training).
        sampling: greedy (``SamplingParams(greedy=True)``) or sampled decoding. With ``sampling.seed``
            set, turn j of the evaluation samples with seed ``sampling.seed + j``: the result is then
            reproducible and the engine's own sampling stream (used by training rollouts) is untouched.
    Raises:
        ValueError: ``episodes`` or ``num_envs`` is not positive.
    """
    if episodes <= 0 or num_envs <= 0:
        raise ValueError(f"evaluate: episodes ({episodes}) and num_envs ({num_envs}) must be positive")
    slots = min(num_envs, episodes)
    envs = [make_env(task, **(env_kwargs or {})) for _ in range(slots)]
    memories = [make_memory() for _ in range(slots)]
    next_episode = 0
    active: dict[int, dict[str, Any]] = {}
    records: list[dict[str, Any]] = []

    def start(slot: int) -> None:
        nonlocal next_episode
        ep_seed = seed + next_episode
        obs, info = envs[slot].reset(seed=ep_seed)
        memories[slot].start_episode(info["instruction"], obs, info["context"])
        active[slot] = {"episode": next_episode, "seed": ep_seed, "return": 0.0, "length": 0, "invalid": 0}
        next_episode += 1

    for slot in range(slots):
        start(slot)
    turn = 0
    try:
        while active:
            order = sorted(active)
            prompts = [memories[s].prompt_ids()[0] for s in order]
            params = sampling if sampling.seed is None else replace(sampling, seed=sampling.seed + turn)
            gens = engine.generate(prompts, params)
            turn += 1
            replies = decode([g.token_ids for g in gens])
            for slot, reply in zip(order, replies):
                obs, reward, terminated, truncated, info = envs[slot].step(reply)
                ep = active[slot]
                ep["return"] += float(reward)
                ep["length"] += 1
                ep["invalid"] += int(not info["action_valid"])
                if terminated or truncated:
                    records.append({**ep, "success": bool(info["success"]),
                                    "progression": float(info["progression"]), "truncated": bool(truncated)})
                    del active[slot]
                    if next_episode < episodes:
                        start(slot)
                else:
                    memories[slot].add_turn(reply, obs, info["context"])
    finally:
        for env in envs:
            env.close()

    records.sort(key=lambda r: r["episode"])
    success_m, success_se = mean_and_se([float(r["success"]) for r in records])
    prog_m, prog_se = mean_and_se([r["progression"] for r in records])
    steps = sum(r["length"] for r in records)
    return EvalResult(
        task=task, episodes=len(records), greedy=sampling.is_greedy,
        success_mean=success_m, success_se=success_se, progression_mean=prog_m, progression_se=prog_se,
        return_mean=sum(r["return"] for r in records) / len(records),
        length_mean=steps / len(records),
        invalid_action_rate=sum(r["invalid"] for r in records) / max(steps, 1),
        per_episode=records,
    )
