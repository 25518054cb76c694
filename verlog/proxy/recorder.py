"""What the proxy records: every chat-completions call per (rollout, attempt), and the agent's reward.

Thread-safe: the server records from its event loop while a trainer may fetch and clear from another
thread. Calls are ordered by arrival (a per-attempt sequence number taken when the request arrives),
so the order is the agent's call order even when a later call finishes first.
"""

from __future__ import annotations

import copy
import math
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CallRecord", "ProxyRecorder", "RolloutKey", "RolloutRecord"]

RolloutKey = tuple[str, str]
"""(rollout id, attempt) as they appear in the URL."""


@dataclass
class CallRecord:
    """One chat-completions call.

    Attributes:
        seq: the call's arrival number within its (rollout, attempt), from 0.
        prompt_ids: the rendered prompt's token ids, exactly as sent to the engine.
        response_ids: the engine's token ids, exactly as returned (eos included when generated).
        logprobs: the engine's logprobs, one per response id.
        finish_reason: the engine's ``"stop"`` or ``"length"``.
        messages: the request's messages (normalised as rendered).
        tools: the request's tools (None for none).
        reply: the assistant message returned to the agent (OpenAI format).
        malformed_calls: ``<tool_call>`` blocks that could not be parsed into a call.
        arrived, started, finished: ``time.time()`` when the request arrived, when its generation was
            queued (after any pause) and when the engine answered.
        tool_calls_as_text: the prompt has the messages' ``tool_calls`` written into their content,
            because the chat template drops them (:mod:`verlog.chat.renderer`).
    """

    seq: int
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    reply: dict[str, Any]
    malformed_calls: int
    arrived: float
    started: float
    finished: float
    tool_calls_as_text: bool = False

    @property
    def latency(self) -> float:
        """Seconds from arrival to the engine's answer (pause and queueing included)."""
        return self.finished - self.arrived


@dataclass
class RolloutRecord:
    """Everything recorded for one (rollout, attempt).

    Attributes:
        rollout_id, attempt: the URL's tags.
        calls: the recorded calls in arrival order.
        reward: the reward the agent posted, or None.
    """

    rollout_id: str
    attempt: str
    calls: list[CallRecord] = field(default_factory=list)
    reward: float | None = None

    @property
    def key(self) -> RolloutKey:
        return (self.rollout_id, self.attempt)


class ProxyRecorder:
    """In-process store of the proxy's recordings (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[RolloutKey, RolloutRecord] = {}
        self._next_seq: dict[RolloutKey, int] = {}

    def _record(self, key: RolloutKey) -> RolloutRecord:
        rec = self._records.get(key)
        if rec is None:
            rec = self._records[key] = RolloutRecord(*key)
        return rec

    def reserve(self, rollout_id: str, attempt: str) -> int:
        """The next arrival number of (rollout, attempt); taken when a request arrives."""
        with self._lock:
            key = (rollout_id, attempt)
            seq = self._next_seq.get(key, 0)
            self._next_seq[key] = seq + 1
            return seq

    def add_call(self, rollout_id: str, attempt: str, call: CallRecord) -> None:
        """Store a finished call, keeping the attempt's calls in arrival order.

        Raises:
            ValueError: a call with the same arrival number is already stored.
        """
        with self._lock:
            calls = self._record((rollout_id, attempt)).calls
            if any(c.seq == call.seq for c in calls):
                raise ValueError(f"call {call.seq} of rollout {rollout_id!r} attempt {attempt!r} recorded twice")
            calls.append(call)
            calls.sort(key=lambda c: c.seq)

    def set_reward(self, rollout_id: str, attempt: str, reward: float) -> None:
        """Store the agent's reward (a later post replaces an earlier one).

        Raises:
            ValueError: the reward is not a finite number.
        """
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            raise ValueError(f"reward must be a finite number, got {reward!r}")
        with self._lock:
            self._record((rollout_id, attempt)).reward = float(reward)

    def keys(self) -> list[RolloutKey]:
        """The (rollout, attempt) pairs with a call or a reward, in first-seen order."""
        with self._lock:
            return list(self._records)

    def get(self, rollout_id: str, attempt: str) -> RolloutRecord:
        """A copy of the record of (rollout, attempt).

        Raises:
            KeyError: nothing was recorded for it.
        """
        with self._lock:
            return copy.deepcopy(self._records[self._recorded(rollout_id, attempt)])

    def pop(self, rollout_id: str, attempt: str) -> RolloutRecord:
        """Remove and return the record of (rollout, attempt) (later calls start a new record; arrival
        numbers keep counting, so they never collide with popped ones).

        Raises:
            KeyError: nothing was recorded for it.
        """
        with self._lock:
            return self._records.pop(self._recorded(rollout_id, attempt))

    def _recorded(self, rollout_id: str, attempt: str) -> RolloutKey:
        """The key of (rollout, attempt); the caller holds the lock. KeyError when nothing is recorded."""
        key = (rollout_id, attempt)
        if key not in self._records:
            raise KeyError(f"nothing recorded for rollout {rollout_id!r} attempt {attempt!r}")
        return key

    def pop_all(self) -> list[RolloutRecord]:
        """Remove and return every record, in first-seen order."""
        with self._lock:
            out = list(self._records.values())
            self._records.clear()
            return out

    def clear(self) -> None:
        """Forget every record and arrival counter."""
        with self._lock:
            self._records.clear()
            self._next_seq.clear()

    def num_calls(self) -> int:
        """Calls stored over every record."""
        with self._lock:
            return sum(len(r.calls) for r in self._records.values())
