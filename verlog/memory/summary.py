"""The ``summary`` memory: a compact running record of the episode instead of past observations.

Over hundreds of steps a window of raw turns shows only the last few moves; this memory shows what the
agent did over the whole episode in a text whose size has a fixed upper bound, whatever the episode's
length.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verlog.memory.base import TurnOutcome
from verlog.memory.chat import ChatMemory, check_int

__all__ = ["SummaryMemory", "SummaryLine"]

_STATE_VERSION = 1
#: The summary's header lines (turn count, earlier turns, key events) as one droppable history item.
_HEADER = "header"
#: Longest action text shown on a turn line, and longest event name, in characters (longer ones end in "…").
ACTION_CHARS = 60
EVENT_CHARS = 40


@dataclass(frozen=True)
class SummaryLine:
    """One recorded turn: its number in the episode (1-based) and what became of the reply.

    ``valid`` and ``reward`` are ``None`` when the turn's outcome was not given.
    """

    turn: int
    action: str
    valid: bool | None
    reward: float | None

    def text(self) -> str:
        """``"turn 12: move left (reward +1)"``; an invalid reply: ``"turn 12: invalid reply 'xyz' (reward -0.1)"``."""
        what = f"invalid reply {self.action!r}" if self.valid is False else self.action
        return f"turn {self.turn}: {what}" + ("" if self.reward is None else f" (reward {self.reward:+g})")


class SummaryMemory(ChatMemory):
    """Prompt = instruction + a summary of the episode so far + the current observation
    (``memory.type=summary``).

    What it keeps (bounded: at most ``summary_turns`` turn lines and ``summary_turns`` event names of
    at most 60 and 40 characters, plus a few counters, however long the episode):

    * the last ``summary_turns`` turns, one line each, oldest first: ``turn <n>: <action> (reward
      <r>)``; the action is the one the env executed (:class:`~verlog.memory.base.TurnOutcome`), an
      invalid reply is shown as ``invalid reply '<reply, whitespace collapsed>'``; without an outcome
      the line shows the reply and no reward;
    * counts of the older turns: how many, how many invalid replies, their total reward;
    * the env's key events (e.g. Crafter's newly unlocked achievements,
      :data:`~verlog.memory.base.EVENT_INFO_KEYS`): the latest ``summary_turns`` with their turn
      numbers, and how many there were in all.

    Rendered as the start of the current user message, before ``"Current observation:"`` (no past
    observations and no past replies as messages)::

        Episode so far (40 turns):
        Earlier turns: 24 (3 invalid replies), total reward +1.
        Key events (2): turn 7 collect_wood; turn 31 place_table.
        Last 16 turns:
        turn 25: move_left (reward +0)
        ...

        Current observation:
        ...

    Lines with nothing to say are left out (no earlier turns, no events, no turn yet: no summary at
    all). Under the token budget the turn lines are dropped oldest first (each counted in
    ``trimmed_turns``; the counts are not updated for them), then the header lines all together
    (counted as one more), then the current observation is cut, as for the window
    (:class:`~verlog.memory.chat.ChatMemory`).

    Args:
        tokenizer, max_prompt_tokens, reply_hint, reply_prefix: see :class:`~verlog.memory.chat.ChatMemory`.
        summary_turns: k >= 1, the latest turns kept as lines (and the latest events kept).
        history_turns: accepted for the common constructor and ignored.

    Raises:
        TypeError / ValueError: ``summary_turns`` not an int >= 1, and as :class:`~verlog.memory.chat.ChatMemory`.
    """

    def __init__(self, tokenizer: Any, *, summary_turns: int = 16, history_turns: int | None = None,
                 max_prompt_tokens: int = 1024, reply_hint: str | None = None,
                 reply_prefix: str | None = None) -> None:
        check_int("summary_turns", summary_turns, minimum=1)
        super().__init__(tokenizer, max_prompt_tokens=max_prompt_tokens, reply_hint=reply_hint,
                         reply_prefix=reply_prefix)
        self.summary_turns = summary_turns
        self._lines: deque[SummaryLine] = deque(maxlen=summary_turns)
        self._events: deque[tuple[int, str]] = deque(maxlen=summary_turns)
        self._older = {"turns": 0, "invalid": 0, "reward": 0.0}
        self._event_count = 0

    @classmethod
    def from_config(cls, tokenizer: Any, memory: Any) -> "SummaryMemory":
        """As :meth:`Memory.from_config <verlog.memory.base.Memory.from_config>`, plus ``memory.summary_turns``."""
        return cls(tokenizer, summary_turns=memory.summary_turns, max_prompt_tokens=memory.max_prompt_tokens,
                   reply_hint=memory.reply_hint, reply_prefix=memory.reply_prefix)

    # ------------------------------------------------------------------ hooks

    def _items(self) -> list[Any]:
        # Dropped from the front: the turn lines oldest first, then the header (last to go).
        return [*self._lines, _HEADER] if self._num_turns else []

    def _preamble(self, items: Sequence[Any]) -> str:
        if _HEADER not in items:
            return ""
        items = [x for x in items if x is not _HEADER]
        out = [f"Episode so far ({self._num_turns} turns):"]
        older = self._older
        if older["turns"]:
            out.append(f"Earlier turns: {older['turns']} ({older['invalid']} invalid replies), "
                       f"total reward {older['reward']:+g}.")
        if self._events:
            shown = "; ".join(f"turn {t} {name}" for t, name in self._events)
            latest = f"latest {len(self._events)} of " if self._event_count > len(self._events) else ""
            out.append(f"Key events ({latest}{self._event_count}): {shown}.")
        if items:
            out.append(f"Last {len(items)} turns:")
            out += [line.text() for line in items]
        return "\n".join(out) + "\n\n"

    def _record(self, observation: str, reply: str, outcome: TurnOutcome | None) -> None:
        turn = self._num_turns + 1
        if outcome is None:
            line = SummaryLine(turn, _short(reply, ACTION_CHARS), None, None)
        else:
            action = outcome.action if outcome.valid else reply
            line = SummaryLine(turn, _short(action, ACTION_CHARS), outcome.valid, outcome.reward)
            for event in outcome.events:
                self._events.append((turn, _short(event, EVENT_CHARS)))
                self._event_count += 1
        if len(self._lines) == self.summary_turns:
            self._fold(self._lines[0])
        self._lines.append(line)

    def _fold(self, line: SummaryLine) -> None:
        """Count a turn line that leaves the kept ones."""
        self._older["turns"] += 1
        self._older["invalid"] += int(line.valid is False)
        self._older["reward"] += line.reward or 0.0

    def _clear(self) -> None:
        self._lines.clear()
        self._events.clear()
        self._older = {"turns": 0, "invalid": 0, "reward": 0.0}
        self._event_count = 0

    # ------------------------------------------------------------------ checkpointing

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable state for exact resume.

        Keys: ``version``, ``summary_turns``, ``max_prompt_tokens``, ``reply_hint``, ``reply_prefix``,
        ``instruction``, ``observation``, ``context``, ``num_turns``, ``lines`` (``[turn, action, valid,
        reward]`` lists), ``events`` (``[turn, name]`` lists), ``older`` (``turns``, ``invalid``,
        ``reward``) and ``event_count``.
        """
        return {"version": _STATE_VERSION, "summary_turns": self.summary_turns, **self._episode_state(),
                "lines": [[x.turn, x.action, x.valid, x.reward] for x in self._lines],
                "events": [[t, name] for t, name in self._events], "older": dict(self._older),
                "event_count": self._event_count}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; afterwards :meth:`prompt_ids` is identical.

        Raises:
            ValueError: missing/unknown keys, another version or configuration, more lines or events
                than ``summary_turns``, malformed lines or counts.
            TypeError: a state that is not a mapping, or text fields that are not str.
        """
        self._check_state(state, _STATE_VERSION, ("summary_turns", "max_prompt_tokens", "reply_hint", "reply_prefix"))
        lines, events, older = state["lines"], state["events"], state["older"]
        if len(lines) > self.summary_turns or len(events) > self.summary_turns:
            raise ValueError(f"summary state keeps more than summary_turns={self.summary_turns} lines or events")
        try:
            parsed = [SummaryLine(int(t), a, v, None if r is None else float(r)) for t, a, v, r in lines]
            parsed_events = [(int(t), name) for t, name in events]
            counts = {"turns": int(older["turns"]), "invalid": int(older["invalid"]),
                      "reward": float(older["reward"])}
        except (TypeError, ValueError, KeyError) as exc:
            raise ValueError(f"summary state is malformed: {exc}") from None
        check_int("event_count", state["event_count"], minimum=len(parsed_events))
        for line in parsed:
            self._check_text("lines action", line.action)
        for _, name in parsed_events:
            self._check_text("events name", name)
        self._load_episode_state(state)
        self._lines = deque(parsed, maxlen=self.summary_turns)
        self._events = deque(parsed_events, maxlen=self.summary_turns)
        self._older = counts
        self._event_count = int(state["event_count"])


def _short(text: str, limit: int) -> str:
    """``text`` on one line (whitespace runs collapsed to one space), cut to ``limit`` characters with "…"."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
