"""Per-turn prompt memory: builds the prompt of one turn from a bounded window of past turns.

Every turn of every environment is one training sample, and its prompt is produced here. The
memory keeps the last ``k`` (observation, reply) pairs of the current episode plus the current
observation, renders them as chat messages through the tokenizer's chat template and enforces a
token budget, so the prompt length stays (nearly) constant however long the episode runs.

The layout follows the "latest n+1 turns" history of the Verlog paper and BALROG's history prompt
(past observations and replies as alternating messages), with the instruction as the system message.

History text (observations and the agent's previous replies) is tokenised again as part of the new
prompt: that is what the next turn's prompt *is*. The ids that get trained for a reply are the
engine's own response ids, never these re-tokenised ones.

A *reply prefix* (``reply_prefix``, e.g. ``"ACTION:"``) pre-fills the assistant's turn: its tokens
follow the generation header at the end of every prompt, so the model writes only the rest of the
reply (the completion). The reply as a whole, :func:`join_reply` of the prefix and the decoded
completion, is what the environment parses and what the history shows as the assistant's message;
the ids trained are still exactly the generated ones (the completion's).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PromptStats", "WindowMemory", "completion_of", "join_reply"]

# 3: ``reply_prefix`` added; a version-2 state is a version-3 state with ``reply_prefix=None``.
_STATE_VERSION = 3
_ELLIPSIS = " …"
_OBS_PREFIX = "Observation:\n"
_CURRENT_PREFIX = "Current observation:\n"


def join_reply(reply_prefix: str | None, completion: str) -> str:
    """The agent's whole reply: the pre-filled ``reply_prefix`` (``None``: none) then the model's
    decoded ``completion``, joined as text with nothing added between them.

    This is the text the environment parses and the memory stores as the assistant's message.
    Example: ``join_reply("ACTION:", " turn left") == "ACTION: turn left"``.
    """
    return completion if reply_prefix is None else reply_prefix + completion


def completion_of(reply_prefix: str | None, reply: str) -> str:
    """The inverse of :func:`join_reply`: what the model writes after ``reply_prefix`` so that the
    whole reply is ``reply`` (e.g. a supervised target whose prompt already ends with the prefix).

    Raises:
        ValueError: ``reply`` does not start with ``reply_prefix``.
    """
    if reply_prefix is None:
        return reply
    if not reply.startswith(reply_prefix):
        raise ValueError(f"reply {reply!r} does not start with the reply prefix {reply_prefix!r}")
    return reply[len(reply_prefix) :]


@dataclass(frozen=True)
class PromptStats:
    """What the token budget did to one prompt (for the "nothing is silently dropped" counters).

    Attributes:
        num_tokens: length of the prompt in tokens (<= the memory's ``max_prompt_tokens``).
        trimmed_turns: stored history turns left out of this prompt to fit the budget.
        trimmed_observation_tokens: tokens cut from the end of the current observation because
            even a prompt with no history did not fit (counted in the observation's own
            tokenisation); normally 0.
    """

    num_tokens: int
    trimmed_turns: int
    trimmed_observation_tokens: int


class WindowMemory:
    """Prompt = instruction + the last ``history_turns`` turns + the current observation.

    Use **one instance per environment**: it holds that environment's episode state.

    Messages, in order:

    * ``system``: the episode's instruction;
    * for each of the last ``history_turns`` turns, oldest first: ``user`` = ``"Observation:\\n"``
      + the observation the agent saw, then ``assistant`` = the agent's reply to it;
    * ``user`` = ``"Current observation:\\n"`` + the current observation (+ ``"\\n\\n"`` + the
      current-only ``context`` when non-empty) (+ ``"\\n\\n"`` + ``reply_hint`` when given).

    The ``context`` (BALROG's short-term context: inventory, vitals) describes the present only, so it
    is shown with the current observation and never stored in the history.

    The chat template is applied with ``add_generation_prompt=True``, so the prompt ends with the
    assistant header, followed by the ids of ``reply_prefix`` when one is set (tokenised once, on
    its own, without special tokens; they count towards ``max_prompt_tokens``). The replies given
    to :meth:`add_turn` are whole replies (prefix included, see :func:`join_reply`), so past turns
    show the model's replies as they were. Only the last ``history_turns`` turns are stored (O(k)
    memory for episodes of any length).

    Token budget, applied in :meth:`prompt_ids`: when the prompt exceeds ``max_prompt_tokens``,
    the oldest history turns are dropped first (binary search over the number kept: O(log k)
    template renders, assuming the length grows with the number of turns kept; the result always
    fits either way). The instruction, the current observation and the generation header are
    never dropped. If the prompt does not fit even with no history, the end of the current
    observation is cut at a token boundary and ``" …"`` appended, keeping the longest prefix
    that fits (again by binary search). The reply prefix is never dropped either.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        history_turns: k >= 0, how many past turns to show; 0 shows only the current observation.
        max_prompt_tokens: the prompt-length budget in tokens, >= 1.
        reply_hint: optional text appended to the current observation (e.g. the answer format).
        reply_prefix: optional text the assistant's reply starts with, placed in the prompt after the
            generation header; the model writes the rest. Best without a trailing space (``"ACTION:"``,
            not ``"ACTION: "``): byte-level BPE vocabularies hold words with their leading space, so
            the model then writes ``" turn left"`` as it would after ``ACTION:`` in running text.

    Raises:
        TypeError: wrong argument types.
        ValueError: negative ``history_turns``, non-positive ``max_prompt_tokens``, an empty
            ``reply_prefix`` or one holding a special token, or a tokenizer without a chat template.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        history_turns: int = 1,
        max_prompt_tokens: int = 1024,
        reply_hint: str | None = None,
        reply_prefix: str | None = None,
    ) -> None:
        _check_int("history_turns", history_turns, minimum=0)
        _check_int("max_prompt_tokens", max_prompt_tokens, minimum=1)
        if reply_hint is not None and not isinstance(reply_hint, str):
            raise TypeError(f"reply_hint must be a str or None, got {type(reply_hint).__name__}")
        if reply_prefix is not None and not isinstance(reply_prefix, str):
            raise TypeError(f"reply_prefix must be a str or None, got {type(reply_prefix).__name__}")
        if reply_prefix == "":
            raise ValueError("reply_prefix must not be empty (None: no prefix)")
        if not hasattr(tokenizer, "apply_chat_template"):
            raise TypeError(
                f"tokenizer must be a Hugging Face tokenizer with apply_chat_template, "
                f"got {type(tokenizer).__name__}"
            )
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("tokenizer has no chat_template; WindowMemory renders chat messages")
        self.tokenizer = tokenizer
        self.history_turns = history_turns
        self.max_prompt_tokens = max_prompt_tokens
        self.reply_hint = reply_hint
        self.reply_prefix = reply_prefix
        self._special_tokens = _special_token_strings(tokenizer)
        self._prefix_ids: list[int] = []
        if reply_prefix is not None:
            self._check_text("reply_prefix", reply_prefix)
            self._prefix_ids = self._encode(reply_prefix)
        self._instruction: str | None = None
        self._observation: str | None = None
        self._context = ""
        self._history: deque[tuple[str, str]] = deque(maxlen=history_turns)
        self._num_turns = 0
        self._cache: tuple[list[dict[str, str]], list[int], PromptStats] | None = None

    # ------------------------------------------------------------------ episode state

    @property
    def num_turns(self) -> int:
        """Turns recorded with :meth:`add_turn` since the last :meth:`start_episode`."""
        return self._num_turns

    def start_episode(self, instruction: str, observation: str, context: str = "") -> None:
        """Begin a new episode: forget all history; ``observation`` (with ``context``) becomes current.

        Raises:
            TypeError: a non-str argument.
            ValueError: text containing one of the tokenizer's special tokens.
        """
        self._check_text("instruction", instruction)
        self._check_text("observation", observation)
        self._check_text("context", context)
        self._instruction = instruction
        self._observation = observation
        self._context = context
        self._history.clear()
        self._num_turns = 0
        self._cache = None

    def add_turn(self, reply: str, next_observation: str, context: str = "") -> None:
        """Record the agent's ``reply`` to the current observation; ``next_observation`` becomes current.

        The previous observation enters the history without its context; ``context`` is the new one's.

        Raises:
            RuntimeError: called before :meth:`start_episode`.
            TypeError: a non-str argument.
            ValueError: text containing one of the tokenizer's special tokens.
        """
        self._require_started("add_turn")
        self._check_text("reply", reply)
        self._check_text("next_observation", next_observation)
        self._check_text("context", context)
        assert self._observation is not None
        self._history.append((self._observation, reply))  # deque(maxlen=k) drops the oldest
        self._observation = next_observation
        self._context = context
        self._num_turns += 1
        self._cache = None

    # ------------------------------------------------------------------ rendering

    def prompt_ids(self) -> tuple[list[int], PromptStats]:
        """The current prompt as token ids, within the budget.

        Returns:
            ``(ids, stats)``: ``ids`` is a fresh list of ``stats.num_tokens <= max_prompt_tokens``
            token ids ending with the chat template's assistant generation header, then the reply
            prefix's ids when a prefix is set.

        Raises:
            RuntimeError: called before :meth:`start_episode`.
            ValueError: the instruction plus the generation header and reply prefix (the prompt with
                the current observation cut to nothing) already exceeds ``max_prompt_tokens``; the
                message names both numbers.
        """
        _, ids, stats = self._build()
        return list(ids), stats

    def render_messages(self) -> list[dict[str, str]]:
        """The chat messages of the current prompt exactly as rendered by :meth:`prompt_ids`.

        That is after the budget: trimmed history turns are absent and a shortened observation
        appears shortened. The reply prefix is no message: it follows the rendered messages' generation
        header. Returns a fresh list of ``{"role", "content"}`` dicts.

        Raises:
            RuntimeError / ValueError: as :meth:`prompt_ids`.
        """
        messages, _, _ = self._build()
        return [dict(m) for m in messages]

    def _build(self) -> tuple[list[dict[str, str]], list[int], PromptStats]:
        self._require_started("prompt_ids")
        if self._cache is None:
            self._cache = self._fit()
        return self._cache

    def _messages(self, turns: list[tuple[str, str]], observation: str) -> list[dict[str, str]]:
        assert self._instruction is not None
        messages = [{"role": "system", "content": self._instruction}]
        for obs, reply in turns:
            messages.append({"role": "user", "content": _OBS_PREFIX + obs})
            messages.append({"role": "assistant", "content": reply})
        current = _CURRENT_PREFIX + observation
        if self.reply_hint is not None:
            current += "\n\n" + self.reply_hint
        messages.append({"role": "user", "content": current})
        return messages

    def _render(self, messages: list[dict[str, str]]) -> list[int]:
        out = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(out, Mapping) or hasattr(out, "keys"):  # transformers 5: BatchEncoding
            out = out["input_ids"]
        ids = list(out)
        if ids and not isinstance(ids[0], int):
            raise TypeError(f"apply_chat_template returned {type(ids[0]).__name__} items, expected int ids")
        return ids + self._prefix_ids

    def _current_text(self) -> str:
        """The current observation followed by its current-only context (if any)."""
        assert self._observation is not None
        return self._observation + ("\n\n" + self._context if self._context else "")

    def _fit(self) -> tuple[list[dict[str, str]], list[int], PromptStats]:
        budget = self.max_prompt_tokens
        turns = list(self._history)
        stored = len(turns)
        current = self._current_text()

        def attempt(kept: int) -> tuple[list[dict[str, str]], list[int]]:
            messages = self._messages(turns[stored - kept :], current)
            return messages, self._render(messages)

        full = attempt(stored)
        if len(full[1]) <= budget:
            return full[0], full[1], PromptStats(len(full[1]), 0, 0)
        if stored > 0:
            bare = attempt(0)
            if len(bare[1]) <= budget:
                # keeping 0 turns fits, keeping all `stored` does not
                lo, best = _longest_fit(attempt, 0, stored, bare, budget)
                return best[0], best[1], PromptStats(len(best[1]), stored - lo, 0)
        return self._fit_observation(stored)

    def _fit_observation(self, stored: int) -> tuple[list[dict[str, str]], list[int], PromptStats]:
        """No history fits: keep the longest token prefix of the current text (plus " …") that fits."""
        budget = self.max_prompt_tokens
        obs_ids = self._encode(self._current_text())

        def attempt(kept: int) -> tuple[list[dict[str, str]], list[int], int]:
            text, kept = self._prefix_text(obs_ids, kept)
            messages = self._messages([], text + _ELLIPSIS)
            return messages, self._render(messages), kept

        best = attempt(0)
        if len(best[1]) > budget:
            raise ValueError(
                f"max_prompt_tokens={budget} is too small: the instruction, generation header and "
                f"reply prefix alone (current observation cut to nothing) take {len(best[1])} tokens"
            )
        # Keeping 0 observation tokens fits; keeping all of them does not (all of them without the
        # ellipsis did not fit either, so len(obs_ids) is safe to start from).
        _, best = _longest_fit(attempt, 0, len(obs_ids), best, budget)
        return best[0], best[1], PromptStats(len(best[1]), stored, len(obs_ids) - best[2])

    def _encode(self, text: str) -> list[int]:
        out = self.tokenizer(text, add_special_tokens=False)
        return list(out["input_ids"])

    def _prefix_text(self, ids: list[int], kept: int) -> tuple[str, int]:
        """Text of the first ``kept`` tokens, and how many tokens it really keeps.

        A cut inside a multi-byte character (byte-level BPE) decodes to a trailing U+FFFD; such
        cuts move back to the previous token boundary that ends a whole character (at most 3
        steps for UTF-8), so the counted cut tokens match the text.
        """
        while kept > 0:
            text = self.tokenizer.decode(
                ids[:kept], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            if not text.endswith("\ufffd"):
                return text, kept
            kept -= 1
        return "", 0

    # ------------------------------------------------------------------ checkpointing

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable state for exact resume (configuration included for checking).

        Keys: ``version``, ``history_turns``, ``max_prompt_tokens``, ``reply_hint``, ``reply_prefix``,
        ``instruction`` and ``observation`` (``None`` before the first episode), ``context``, ``history``
        (list of ``[observation, reply]`` pairs, oldest first, at most ``history_turns``) and
        ``num_turns``.
        """
        return {
            "version": _STATE_VERSION,
            "history_turns": self.history_turns,
            "max_prompt_tokens": self.max_prompt_tokens,
            "reply_hint": self.reply_hint,
            "reply_prefix": self.reply_prefix,
            "instruction": self._instruction,
            "observation": self._observation,
            "context": self._context,
            "history": [[obs, reply] for obs, reply in self._history],
            "num_turns": self._num_turns,
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
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a mapping, got {type(state).__name__}")
        if state.get("version") == 2 and "reply_prefix" not in state:
            state = {**state, "version": _STATE_VERSION, "reply_prefix": None}
        expected = set(self.state_dict())
        if set(state) != expected:
            raise ValueError(
                f"memory state keys mismatch: missing {sorted(expected - set(state))}, "
                f"unexpected {sorted(set(state) - expected)}"
            )
        if state["version"] != _STATE_VERSION:
            raise ValueError(f"memory state version {state['version']!r} is not {_STATE_VERSION}")
        for key in ("history_turns", "max_prompt_tokens", "reply_hint", "reply_prefix"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"memory state was saved with {key}={state[key]!r} but this memory has "
                    f"{key}={getattr(self, key)!r}"
                )
        instruction, observation, context = state["instruction"], state["observation"], state["context"]
        self._check_text("context", context)
        history, num_turns = state["history"], state["num_turns"]
        _check_int("num_turns", num_turns, minimum=0)
        if not isinstance(history, (list, tuple)):
            raise TypeError(f"history must be a list, got {type(history).__name__}")
        if len(history) > self.history_turns:
            raise ValueError(f"history has {len(history)} turns but history_turns={self.history_turns}")
        if len(history) > num_turns:
            raise ValueError(f"history has {len(history)} turns but num_turns={num_turns}")
        if instruction is None or observation is None:
            if instruction is not None or observation is not None or history or num_turns:
                raise ValueError("memory state has history or text but no started episode")
        else:
            self._check_text("instruction", instruction)
            self._check_text("observation", observation)
        pairs = []
        for i, pair in enumerate(history):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ValueError(f"history[{i}] must be an [observation, reply] pair, got {pair!r}")
            self._check_text(f"history[{i}][0]", pair[0])
            self._check_text(f"history[{i}][1]", pair[1])
            pairs.append((pair[0], pair[1]))
        self._instruction, self._observation, self._context = instruction, observation, context
        self._history = deque(pairs, maxlen=self.history_turns)
        self._num_turns = num_turns
        self._cache = None

    # ------------------------------------------------------------------ checks

    def _require_started(self, what: str) -> None:
        if self._instruction is None:
            raise RuntimeError(f"{what}() called before start_episode()")

    def _check_text(self, name: str, value: Any) -> None:
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        for token in self._special_tokens:
            if token in value:
                raise ValueError(
                    f"{name} contains the special token {token!r}, which would corrupt the chat "
                    f"template's structure"
                )


def _longest_fit(attempt: Any, lo: int, hi: int, best: Any, budget: int) -> tuple[int, Any]:
    """Binary search for the largest k in [lo, hi) whose ``attempt(k)`` (messages, ids, ...) has at most
    ``budget`` ids, given that ``lo`` fits (``best`` is its attempt) and ``hi`` does not.

    Returns:
        (k, attempt(k)).
    """
    while hi - lo > 1:
        mid = (lo + hi) // 2
        candidate = attempt(mid)
        if len(candidate[1]) <= budget:
            lo, best = mid, candidate
        else:
            hi = mid
    return lo, best


def _check_int(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _special_token_strings(tokenizer: Any) -> tuple[str, ...]:
    """Special-token strings the tokenizer would turn into control ids if they appeared in text."""
    tokens = set(getattr(tokenizer, "all_special_tokens", []) or [])
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    tokens.update(tok.content for tok in added.values() if getattr(tok, "special", False))
    return tuple(sorted(t for t in tokens if t))
