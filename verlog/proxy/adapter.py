"""Turn samples from the proxy's recordings, with a choice of credit assignment.

Each recorded call becomes one :class:`~verlog.chat.samples.TurnSample` in call order: prompt = the
recorded prompt ids, response = the recorded response ids and logprobs, so the ids trained are the ids
generated. The rollout's reward R is assigned to its T turns by ``credit``:

- ``"final"``: R on every turn; every turn is terminated (a one-step episode), so the critic's
  advantage of turn t is R - V(s_t).
- ``"discounted"``: gamma^(T-1-t) * R on turn t, every turn terminated likewise.
- ``"gae"``: R on the last turn only, which alone is terminated: the trainer's dual-discount GAE with
  the critic propagates it over the turns.
"""

from __future__ import annotations

import math
from typing import Any

from verlog.catalog import CREDIT_MODES
from verlog.chat.samples import TurnSample, samples_batch_inputs
from verlog.proxy.recorder import RolloutRecord

__all__ = ["CREDIT_MODES", "rollout_samples", "proxy_batch_inputs"]


def rollout_samples(record: RolloutRecord, credit: str = "final", gamma: float = 1.0,
                    default_reward: float | None = None) -> list[TurnSample]:
    """One turn sample per recorded call of ``record`` (see the module docstring).

    Args:
        record: one (rollout, attempt)'s recording.
        credit: one of :data:`CREDIT_MODES`.
        gamma: the discount of ``"discounted"``, in (0, 1].
        default_reward: the reward when the agent posted none (None: that is an error).

    Raises:
        ValueError: an unknown credit mode, gamma outside (0, 1], no recorded call, or no reward and
            no default.
    """
    if credit not in CREDIT_MODES:
        raise ValueError(f"credit must be one of {', '.join(CREDIT_MODES)}, got {credit!r}")
    if not (0.0 < gamma <= 1.0) or math.isnan(gamma):
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    where = f"rollout {record.rollout_id!r} attempt {record.attempt!r}"
    if not record.calls:
        raise ValueError(f"{where} has no recorded call")
    reward = record.reward if record.reward is not None else default_reward
    if reward is None:
        raise ValueError(f"{where} has no reward")
    T = len(record.calls)
    out = []
    for t, call in enumerate(record.calls):
        last = t == T - 1
        if credit == "final":
            r = reward
        elif credit == "discounted":
            r = gamma ** (T - 1 - t) * reward
        else:
            r = reward if last else 0.0
        out.append(TurnSample(
            prompt_ids=list(call.prompt_ids), response_ids=list(call.response_ids), logprobs=list(call.logprobs),
            reward=float(r), terminated=last or credit != "gae", action_valid=call.malformed_calls == 0,
            cut_at_max_tokens=call.finish_reason == "length"))
    return out


def proxy_batch_inputs(records: list[RolloutRecord], credit: str = "final", gamma: float = 1.0,
                       default_reward: float | None = None, episode_ids: list[int] | None = None) -> dict[str, Any]:
    """Keyword arguments of :meth:`verlog.batch.TurnBatch.from_turns` (``pad_id`` and
    ``max_response_tokens`` still to be given) for N rollouts, one env each, time-major ``[t][n]``.

    Raises:
        ValueError: as :func:`rollout_samples`, no record, or ``episode_ids`` of another length.
    """
    if not records:
        raise ValueError("proxy_batch_inputs: no rollout record")
    return samples_batch_inputs([rollout_samples(r, credit, gamma, default_reward) for r in records], episode_ids)
