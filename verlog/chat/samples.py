"""Training samples from a :class:`~verlog.chat.trajectory.Trajectory`, in two layouts.

(a) :func:`sequence_sample`: the whole trajectory as one masked sequence (prompt + response of R
    tokens, where R = S - P; tool/user tokens in the response carry mask 0).
(b) :func:`turn_samples`: one sample per assistant turn, prompt = every id before that turn's
    generation, response = the ids generated that turn; :func:`turn_batch_inputs` packs several
    trajectories into the keyword arguments of :meth:`verlog.batch.TurnBatch.from_turns` (one
    trajectory per env, whole-episode layout), so GAE and the critic apply unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verlog.chat.trajectory import Trajectory

__all__ = ["SequenceSample", "TurnSample", "sequence_sample", "turn_samples", "turn_batch_inputs",
           "samples_batch_inputs"]


@dataclass
class SequenceSample:
    """Layout (a). Lengths: P prompt tokens, R response tokens.

    Attributes:
        prompt_ids: [P] the first prompt.
        response_ids: [R] everything after it, exactly as in the trajectory.
        response_mask: [R] 1 on tokens the engine generated, 0 on tool/user tokens and template glue.
        response_logprobs: [R] the engine's logprobs (0.0 where the mask is 0).
        token_rewards: [R] each turn's tool reward on its last generated token, plus the task reward
            on the last generated token of the trajectory.
        reward: the total reward (task + tools).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    token_rewards: list[float]
    reward: float


@dataclass
class TurnSample:
    """Layout (b): one assistant turn as the fixed-turn pipeline's sample.

    Attributes:
        prompt_ids: every trajectory id before this turn's generation.
        response_ids: the ids the engine generated this turn (L >= 1).
        logprobs: their L engine logprobs.
        reward: the turn's tool reward, plus the task reward on the last turn.
        terminated: True on the last turn (the trajectory is over and scored: no bootstrap).
        action_valid: every tool call of the turn was well-formed.
        cut_at_max_tokens: the engine's finish reason was ``"length"``.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    reward: float
    terminated: bool
    action_valid: bool
    cut_at_max_tokens: bool


def sequence_sample(traj: Trajectory) -> SequenceSample:
    """Layout (a) of ``traj``.

    Raises:
        ValueError: the trajectory has no assistant turn.
    """
    if not traj.turns:
        raise ValueError("sequence_sample: the trajectory has no assistant turn")
    P = traj.prompt_length
    rewards = [0.0] * (len(traj.ids) - P)
    for turn in traj.turns:
        rewards[turn.end - 1 - P] += turn.tool_reward
    rewards[traj.turns[-1].end - 1 - P] += traj.reward
    return SequenceSample(traj.ids[:P], traj.ids[P:], traj.mask[P:], traj.logprobs[P:], rewards,
                          traj.total_reward)


def turn_samples(traj: Trajectory) -> list[TurnSample]:
    """Layout (b) of ``traj``: one :class:`TurnSample` per assistant turn, in order."""
    out = []
    for k, turn in enumerate(traj.turns):
        last = k == len(traj.turns) - 1
        out.append(TurnSample(
            prompt_ids=traj.ids[: turn.start], response_ids=traj.ids[turn.start: turn.end],
            logprobs=traj.logprobs[turn.start: turn.end],
            reward=turn.tool_reward + (traj.reward if last else 0.0), terminated=last,
            action_valid=all(c.error is None for c in turn.calls),
            cut_at_max_tokens=turn.finish_reason == "length",
        ))
    return out


def turn_batch_inputs(trajectories: list[Trajectory], episode_ids: list[int] | None = None) -> dict[str, Any]:
    """Keyword arguments of :meth:`verlog.batch.TurnBatch.from_turns` (``pad_id`` and
    ``max_response_tokens`` still to be given) for N trajectories, time-major ``[t][n]``.

    T is the most turns of any trajectory; the missing turns of shorter ones are padding
    (``turn_mask`` False, empty prompt and response), as in whole-episode batches. No turn needs a
    bootstrap value: every trajectory's last turn is terminated.

    Raises:
        ValueError: no trajectory, a trajectory without turns, or ``episode_ids`` of another length.
    """
    if not trajectories or any(not t.turns for t in trajectories):
        raise ValueError("turn_batch_inputs: needs trajectories with at least one turn each")
    return samples_batch_inputs([turn_samples(t) for t in trajectories], episode_ids)


def samples_batch_inputs(per_env: list[list[TurnSample]], episode_ids: list[int] | None = None) -> dict[str, Any]:
    """Keyword arguments of :meth:`verlog.batch.TurnBatch.from_turns` (``pad_id`` and
    ``max_response_tokens`` still to be given) for N episodes given as lists of turn samples,
    time-major ``[t][n]``; shorter episodes are padded as in :func:`turn_batch_inputs`. Each episode's
    last sample must be terminated (no bootstrap prompts are produced).

    Raises:
        ValueError: no episode, an episode without samples, or ``episode_ids`` of another length.
    """
    if not per_env or any(not s for s in per_env):
        raise ValueError("turn_batch_inputs: needs trajectories with at least one turn each")
    ids = list(range(len(per_env))) if episode_ids is None else list(episode_ids)
    if len(ids) != len(per_env):
        raise ValueError("turn_batch_inputs: one episode id per trajectory")
    T = max(len(s) for s in per_env)
    keys = ("prompts", "responses", "logprobs", "rewards", "terminated", "truncated", "episode_ids",
            "action_valid", "cut_at_max_tokens", "turn_mask")
    out: dict[str, Any] = {k: [[None] * len(per_env) for _ in range(T)] for k in keys}
    for n, samples in enumerate(per_env):
        for t in range(T):
            s = samples[t] if t < len(samples) else None
            row = {
                "prompts": s.prompt_ids if s else [], "responses": s.response_ids if s else [],
                "logprobs": s.logprobs if s else [], "rewards": s.reward if s else 0.0,
                "terminated": s.terminated if s else False, "truncated": False, "episode_ids": ids[n],
                "action_valid": s.action_valid if s else True,
                "cut_at_max_tokens": s.cut_at_max_tokens if s else False, "turn_mask": s is not None,
            }
            for k in keys:
                out[k][t][n] = row[k]
    out["bootstrap_prompts"] = {}
    return out
