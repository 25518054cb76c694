"""The turn-history memories: ``window`` (the last k turns), ``full`` (every turn) and ``none`` (no turn).

All three show past turns as they were played, as alternating chat messages (BALROG's history prompt
and the "latest n+1 turns" history of the Verlog paper), within the same token budget
(:class:`~verlog.memory.chat.ChatMemory`: oldest turns dropped first, then the current observation cut).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from verlog.memory.base import TurnOutcome
from verlog.memory.chat import ChatMemory, check_int

__all__ = ["FullMemory", "NoMemory", "WindowMemory"]

# 3: ``reply_prefix`` added; a version-2 state is a version-3 state with ``reply_prefix=None``.
_STATE_VERSION = 3
_OBS_PREFIX = "Observation:\n"


class WindowMemory(ChatMemory):
    """Prompt = instruction + the last ``history_turns`` turns + the current observation
    (``memory.type=window``, the default).

    Use **one instance per environment**: it holds that environment's episode state.

    Messages, in order:

    * ``system``: the episode's instruction;
    * for each of the last ``history_turns`` turns, oldest first: ``user`` = ``"Observation:\\n"``
      + the observation the agent saw, then ``assistant`` = the agent's reply to it;
    * ``user`` = ``"Current observation:\\n"`` + the current observation (+ ``"\\n\\n"`` + the
      current-only ``context`` when non-empty) (+ ``"\\n\\n"`` + ``reply_hint`` when given).

    The replies given to :meth:`add_turn` are whole replies (prefix included, see
    :func:`~verlog.memory.base.join_reply`), so past turns show the model's replies as they were. Only
    the last ``history_turns`` turns are stored (O(k) memory for episodes of any length). The token
    budget drops the oldest of them first (:class:`~verlog.memory.chat.ChatMemory`); ``outcome`` is
    not used.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        history_turns: k >= 0, how many past turns to show; 0 shows only the current observation.
        max_prompt_tokens, reply_hint, reply_prefix: see :class:`~verlog.memory.chat.ChatMemory`.

    Raises:
        TypeError: wrong argument types.
        ValueError: negative ``history_turns``, and as :class:`~verlog.memory.chat.ChatMemory`.
    """

    def __init__(self, tokenizer: Any, *, history_turns: int = 1, max_prompt_tokens: int = 1024,
                 reply_hint: str | None = None, reply_prefix: str | None = None) -> None:
        check_int("history_turns", history_turns, minimum=0)
        super().__init__(tokenizer, max_prompt_tokens=max_prompt_tokens, reply_hint=reply_hint,
                         reply_prefix=reply_prefix)
        self.history_turns: int | None = history_turns
        self._history: deque[tuple[str, str]] = deque(maxlen=history_turns)

    def _items(self) -> list[tuple[str, str]]:
        return list(self._history)

    def _history_messages(self, items: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        messages = []
        for obs, reply in items:
            messages.append({"role": "user", "content": _OBS_PREFIX + obs})
            messages.append({"role": "assistant", "content": reply})
        return messages

    def _record(self, observation: str, reply: str, outcome: TurnOutcome | None) -> None:
        self._history.append((observation, reply))  # deque(maxlen=k) drops the oldest

    def _clear(self) -> None:
        self._history.clear()

    # ------------------------------------------------------------------ checkpointing

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable state for exact resume (configuration included for checking).

        Keys: ``version``, ``history_turns``, ``max_prompt_tokens``, ``reply_hint``, ``reply_prefix``,
        ``instruction`` and ``observation`` (``None`` before the first episode), ``context``, ``history``
        (list of ``[observation, reply]`` pairs, oldest first, at most ``history_turns``) and
        ``num_turns``.
        """
        episode = self._episode_state()
        return {
            "version": _STATE_VERSION,
            "history_turns": self.history_turns,
            "max_prompt_tokens": episode["max_prompt_tokens"],
            "reply_hint": episode["reply_hint"],
            "reply_prefix": episode["reply_prefix"],
            "instruction": episode["instruction"],
            "observation": episode["observation"],
            "context": episode["context"],
            "history": [[obs, reply] for obs, reply in self._history],
            "num_turns": episode["num_turns"],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; afterwards :meth:`prompt_ids` is identical.

        A version-2 state (saved before reply prefixes existed, so without ``reply_prefix``) loads
        as one with ``reply_prefix=None``.

        Raises:
            ValueError: missing/unknown keys, another version, a configuration
                (``history_turns``, ``max_prompt_tokens``, ``reply_hint``, ``reply_prefix``) different
                from this instance's, more history than ``history_turns``, or an inconsistent
                episode state.
            TypeError: fields of the wrong type.
        """
        if isinstance(state, Mapping) and state.get("version") == 2 and "reply_prefix" not in state:
            state = {**state, "version": _STATE_VERSION, "reply_prefix": None}
        self._check_state(state, _STATE_VERSION, ("history_turns", "max_prompt_tokens", "reply_hint", "reply_prefix"))
        history, num_turns = state["history"], state["num_turns"]
        if not isinstance(history, (list, tuple)):
            raise TypeError(f"history must be a list, got {type(history).__name__}")
        if self.history_turns is not None and len(history) > self.history_turns:
            raise ValueError(f"history has {len(history)} turns but history_turns={self.history_turns}")
        if len(history) > num_turns:
            raise ValueError(f"history has {len(history)} turns but num_turns={num_turns}")
        pairs = []
        for i, pair in enumerate(history):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ValueError(f"history[{i}] must be an [observation, reply] pair, got {pair!r}")
            self._check_text(f"history[{i}][0]", pair[0])
            self._check_text(f"history[{i}][1]", pair[1])
            pairs.append((pair[0], pair[1]))
        self._load_episode_state(state)
        self._history = deque(pairs, maxlen=self.history_turns)


class FullMemory(WindowMemory):
    """Every turn of the episode, as :class:`WindowMemory` shows them (``memory.type=full``), for
    comparison with the bounded memories.

    Nothing is forgotten during an episode: storage grows with the episode (O(turns) text) and each
    new prompt renders every stored turn once before the budget trims it. The prompt is still bounded
    by ``max_prompt_tokens`` with the same rules as the window (oldest turns dropped first, each
    counted in ``trimmed_turns``; then the current observation cut), so on long episodes it shows the
    most recent turns that fit. ``history_turns`` is not used (``None`` in the state).

    Args:
        tokenizer, max_prompt_tokens, reply_hint, reply_prefix: as :class:`WindowMemory`.
        history_turns: accepted for the common constructor and ignored.
    """

    def __init__(self, tokenizer: Any, *, history_turns: int | None = None, max_prompt_tokens: int = 1024,
                 reply_hint: str | None = None, reply_prefix: str | None = None) -> None:
        super().__init__(tokenizer, history_turns=0, max_prompt_tokens=max_prompt_tokens, reply_hint=reply_hint,
                         reply_prefix=reply_prefix)
        self.history_turns = None
        self._history = deque()


class NoMemory(WindowMemory):
    """Only the current observation (``memory.type=none``): :class:`WindowMemory` with
    ``history_turns=0``, the instruction and the current observation (with its context and the reply
    hint) under the same budget, which can then only cut the observation.

    Args:
        tokenizer, max_prompt_tokens, reply_hint, reply_prefix: as :class:`WindowMemory`.
        history_turns: accepted for the common constructor and ignored (always 0).
    """

    def __init__(self, tokenizer: Any, *, history_turns: int | None = None, max_prompt_tokens: int = 1024,
                 reply_hint: str | None = None, reply_prefix: str | None = None) -> None:
        super().__init__(tokenizer, history_turns=0, max_prompt_tokens=max_prompt_tokens, reply_hint=reply_hint,
                         reply_prefix=reply_prefix)
