"""Chat-template prompts within a token budget: the rendering and trimming shared by Verlog's memories.

Every turn of every environment is one training sample, and its prompt is produced by a memory. The
memories of this package render the episode as chat messages through the tokenizer's chat template
and enforce a token budget (``max_prompt_tokens``); they differ only in what of the episode they keep
(:mod:`verlog.memory.window`, :mod:`verlog.memory.summary`).

History text (observations and the agent's previous replies) is tokenised again as part of the new
prompt: that is what the next turn's prompt *is*. The ids that get trained for a reply are the
engine's own response ids, never these re-tokenised ones.

A *reply prefix* (``reply_prefix``, e.g. ``"ACTION:"``) pre-fills the assistant's turn: its tokens
follow the generation header at the end of every prompt, so the model writes only the rest of the
reply (the completion). The reply as a whole, :func:`~verlog.memory.base.join_reply` of the prefix and
the decoded completion, is what the environment parses and what the history shows as the assistant's
message; the ids trained are still exactly the generated ones (the completion's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from verlog.memory.base import Memory, PromptStats, TurnOutcome
from verlog.memory.encoding import encode_cached

__all__ = ["ChatMemory"]

_ELLIPSIS = " …"
_CURRENT_PREFIX = "Current observation:\n"


class ChatMemory(Memory):
    """Base of the chat memories: episode text, chat rendering and the token budget.

    Messages, in order: ``system`` = the episode's instruction; the subclass's history messages
    (:meth:`_history_messages`); ``user`` = the subclass's preamble (:meth:`_preamble`) +
    ``"Current observation:\\n"`` + the current observation (+ ``"\\n\\n"`` + the current-only
    ``context`` when non-empty) (+ ``"\\n\\n"`` + ``reply_hint`` when given).

    The ``context`` (BALROG's short-term context: inventory, vitals) describes the present only, so it
    is shown with the current observation and never stored in the history.

    The chat template is applied with ``add_generation_prompt=True``, so the prompt ends with the
    assistant header, followed by the ids of ``reply_prefix`` when one is set (tokenised once, on
    its own, without special tokens; they count towards ``max_prompt_tokens``).

    Token budget, applied in :meth:`prompt_ids`: the subclass's droppable history items
    (:meth:`_items`, oldest first) are dropped oldest first when the prompt exceeds
    ``max_prompt_tokens`` (binary search over the number kept: O(log n) template renders, assuming the
    length grows with the number of items kept; the result always fits either way); each dropped item
    counts in :attr:`PromptStats.trimmed_turns`. The instruction, the current observation, the
    generation header and the reply prefix are never dropped. If the prompt does not fit even with no
    items, the end of the current observation is cut at a token boundary and ``" …"`` appended,
    keeping the longest prefix that fits (again by binary search).

    Subclasses implement :meth:`_items`, :meth:`_record`, :meth:`_clear` and at least one of
    :meth:`_history_messages` / :meth:`_preamble`, plus their state.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        max_prompt_tokens: the prompt-length budget in tokens, >= 1.
        reply_hint: optional text appended to the current observation (e.g. the answer format).
        reply_prefix: optional text the assistant's reply starts with, placed in the prompt after the
            generation header; the model writes the rest. Best without a trailing space (``"ACTION:"``,
            not ``"ACTION: "``): byte-level BPE vocabularies hold words with their leading space, so
            the model then writes ``" turn left"`` as it would after ``ACTION:`` in running text.

    Raises:
        TypeError: wrong argument types.
        ValueError: non-positive ``max_prompt_tokens``, an empty ``reply_prefix`` or one holding a
            special token, or a tokenizer without a chat template.
    """

    def __init__(self, tokenizer: Any, *, max_prompt_tokens: int = 1024, reply_hint: str | None = None,
                 reply_prefix: str | None = None) -> None:
        check_int("max_prompt_tokens", max_prompt_tokens, minimum=1)
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
            raise ValueError(f"tokenizer has no chat_template; {type(self).__name__} renders chat messages")
        self.tokenizer = tokenizer
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
        self._num_turns = 0
        self._cache: tuple[list[dict[str, str]], list[int], PromptStats] | None = None

    # ------------------------------------------------------------------ subclass hooks

    def _items(self) -> list[Any]:
        """The droppable history items, oldest first."""
        raise NotImplementedError

    def _history_messages(self, items: Sequence[Any]) -> list[dict[str, str]]:
        """Messages between the system message and the current one, for the kept ``items``."""
        return []

    def _preamble(self, items: Sequence[Any]) -> str:
        """Text placed before ``"Current observation:"`` in the current message, for the kept ``items``."""
        return ""

    def _record(self, observation: str, reply: str, outcome: TurnOutcome | None) -> None:
        """Store the turn just played (the observation answered, the whole reply, its outcome)."""
        raise NotImplementedError

    def _clear(self) -> None:
        """Forget the episode's history."""
        raise NotImplementedError

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
        self._clear()
        self._num_turns = 0
        self._cache = None

    def add_turn(self, reply: str, next_observation: str, context: str = "",
                 outcome: TurnOutcome | None = None) -> None:
        """Record the agent's ``reply`` to the current observation; ``next_observation`` becomes current.

        The previous observation enters the history without its context; ``context`` is the new one's.
        ``outcome`` is what the step made of the reply (used by memories that record it).

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
        self._record(self._observation, reply, outcome)
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

        That is after the budget: trimmed history items are absent and a shortened observation
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

    def _messages(self, items: Sequence[Any], observation: str) -> list[dict[str, str]]:
        assert self._instruction is not None
        messages = [{"role": "system", "content": self._instruction}]
        messages += self._history_messages(items)
        current = self._preamble(items) + _CURRENT_PREFIX + observation
        if self.reply_hint is not None:
            current += "\n\n" + self.reply_hint
        messages.append({"role": "user", "content": current})
        return messages

    def _render(self, messages: list[dict[str, str]]) -> list[int]:
        # apply_chat_template(tokenize=True) in two steps, so that a prompt seen before skips the tokenizer.
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return self._encode(text) + self._prefix_ids

    def _current_text(self) -> str:
        """The current observation followed by its current-only context (if any)."""
        assert self._observation is not None
        return self._observation + ("\n\n" + self._context if self._context else "")

    def _fit(self) -> tuple[list[dict[str, str]], list[int], PromptStats]:
        budget = self.max_prompt_tokens
        items = self._items()
        stored = len(items)
        current = self._current_text()

        def attempt(kept: int) -> tuple[list[dict[str, str]], list[int]]:
            messages = self._messages(items[stored - kept :], current)
            return messages, self._render(messages)

        full = attempt(stored)
        if len(full[1]) <= budget:
            return full[0], full[1], PromptStats(len(full[1]), 0, 0)
        if stored > 0:
            bare = attempt(0)
            if len(bare[1]) <= budget:
                # keeping 0 items fits, keeping all `stored` does not
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
        return encode_cached(self.tokenizer, text)

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

    # ------------------------------------------------------------------ checkpointing helpers

    def _episode_state(self) -> dict[str, Any]:
        """The state every chat memory has: budget, hint, prefix, episode text, turn count."""
        return {"max_prompt_tokens": self.max_prompt_tokens, "reply_hint": self.reply_hint,
                "reply_prefix": self.reply_prefix, "instruction": self._instruction,
                "observation": self._observation, "context": self._context, "num_turns": self._num_turns}

    def _check_state(self, state: Any, version: int, config_keys: Sequence[str]) -> None:
        """Check ``state`` against this memory: a mapping with :meth:`state_dict`'s keys, ``version``,
        the same values of ``config_keys`` and a consistent episode text.

        Raises:
            TypeError / ValueError: as :meth:`load_state_dict` says.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a mapping, got {type(state).__name__}")
        expected = set(self.state_dict())
        if set(state) != expected:
            raise ValueError(
                f"memory state keys mismatch: missing {sorted(expected - set(state))}, "
                f"unexpected {sorted(set(state) - expected)}"
            )
        if state["version"] != version:
            raise ValueError(f"memory state version {state['version']!r} is not {version}")
        for key in config_keys:
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"memory state was saved with {key}={state[key]!r} but this memory has "
                    f"{key}={getattr(self, key)!r}"
                )
        self._check_text("context", state["context"])
        check_int("num_turns", state["num_turns"], minimum=0)
        instruction, observation = state["instruction"], state["observation"]
        if instruction is None or observation is None:
            if instruction is not None or observation is not None or state["num_turns"]:
                raise ValueError("memory state has history or text but no started episode")
        else:
            self._check_text("instruction", instruction)
            self._check_text("observation", observation)

    def _load_episode_state(self, state: Mapping[str, Any]) -> None:
        """Take the episode text and turn count of a state checked by :meth:`_check_state`."""
        self._instruction, self._observation = state["instruction"], state["observation"]
        self._context, self._num_turns = state["context"], state["num_turns"]
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


def check_int(name: str, value: Any, *, minimum: int) -> None:
    """Raise ``TypeError`` unless ``value`` is an int (not a bool), ``ValueError`` if below ``minimum``."""
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
