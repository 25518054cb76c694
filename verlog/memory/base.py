"""The memory protocol: what every per-turn prompt memory offers the episode runner, and the small
data types shared by all memories (reply prefix helpers, prompt statistics, turn outcomes).

A memory turns one environment's episode so far into the next turn's prompt ids. Verlog's own are in
:mod:`verlog.memory` (``none``, ``window``, ``full``, ``summary``, chosen by ``memory.type``); a user's
own class is named by import path (``memory.type=my_pkg.mem:MyMemory``) and must implement
:class:`Memory` (subclassing it is the easy way; :func:`verlog.memory.types.check_memory_class` says
what is checked).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["EVENT_INFO_KEYS", "Memory", "PromptStats", "TurnOutcome", "completion_of", "join_reply"]

#: ``info`` keys whose value (a list of str) names the key events of an env step, first one present
#: wins: ``events`` for any env that reports them, Crafter's ``new_achievements`` otherwise.
EVENT_INFO_KEYS: tuple[str, ...] = ("events", "new_achievements")


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
        trimmed_turns: stored history items (turns, or a summary's turn lines) left out of this
            prompt to fit the budget.
        trimmed_observation_tokens: tokens cut from the end of the current observation because
            even a prompt with no history did not fit (counted in the observation's own
            tokenisation); normally 0.
        dropped_images: stored images (of the kept turns and the current observation) not shown in
            this prompt, by the memory's image limit or its token budget; 0 for text memories.
    """

    num_tokens: int
    trimmed_turns: int
    trimmed_observation_tokens: int
    dropped_images: int = 0


@dataclass(frozen=True)
class TurnOutcome:
    """What an env step made of the agent's reply, for memories that record outcomes (``summary``).

    Attributes:
        action: the action the env executed (``info["action"]``; for an invalid reply, the default
            action it fell back to, if any).
        valid: whether the reply held a valid action (``info["action_valid"]``).
        reward: the step's reward (format penalty included).
        events: the step's key events, as the env names them (:data:`EVENT_INFO_KEYS`); ``()`` when
            the env reports none.
    """

    action: str
    valid: bool
    reward: float
    events: tuple[str, ...] = ()

    @classmethod
    def from_step(cls, reward: float, info: Mapping[str, Any]) -> "TurnOutcome":
        """The outcome of a step from its reward and ``info`` (a :class:`~verlog.envs.base.TextEnv` info)."""
        events: tuple[str, ...] = ()
        for key in EVENT_INFO_KEYS:
            if key in info:
                events = tuple(str(e) for e in info[key] or ())
                break
        return cls(str(info.get("action", "")), bool(info.get("action_valid", True)), float(reward), events)


class Memory(abc.ABC):
    """The protocol of a per-environment prompt memory. Use **one instance per environment slot**.

    The episode runner (:mod:`verlog.rollout.runner`, used by the collectors, fixed-seed evaluation,
    the BALROG suite and the format warm-up) calls, for the episode running in a slot:

    1. :meth:`start_episode` once when the env resets (the instruction, the first observation and
       its context): everything of the previous episode is forgotten.
    2. :meth:`prompt_ids` before each turn: the prompt the model answers, and a :class:`PromptStats`
       whose ``trimmed_*`` counts are added to the run's ``prompt/trimmed_*`` metrics (what the
       token budget dropped). It may be called several times without a turn in between and must
       return the same ids.
    3. :meth:`add_turn` after each env step that did not end the episode (the whole reply, the next
       observation, its context and the step's :class:`TurnOutcome`). The fixed-turn collector also
       calls it after a truncated step, then :meth:`prompt_ids` once more, for the bootstrap value of
       the observation that followed the cut.
    4. :meth:`state_dict` / :meth:`load_state_dict` when a checkpoint is written / resumed (the
       fixed-turn collector keeps running episodes across iterations); JSON-serialisable.

    ``reply_prefix`` (``None``: none) is the text its prompts pre-fill the reply with (the prompt ids
    end with its ids); the runner hands :meth:`add_turn` the whole reply, :func:`join_reply` of it and
    the generated completion.

    Built by :func:`verlog.builders.memory_factory` with :meth:`from_config`, once per env slot.
    """

    reply_prefix: str | None = None

    @classmethod
    def from_config(cls, tokenizer: Any, memory: Any) -> "Memory":
        """A memory configured by ``memory`` (a :class:`~verlog.config.MemoryConfig`).

        The default calls ``cls(tokenizer, history_turns=..., max_prompt_tokens=..., reply_hint=...,
        reply_prefix=...)`` with the config's values; a class that needs other keys overrides it.
        """
        return cls(tokenizer, **standard_kwargs(memory))  # type: ignore[call-arg]

    @abc.abstractmethod
    def start_episode(self, instruction: str, observation: str, context: str = "") -> None:
        """Begin a new episode; ``observation`` (with its current-only ``context``) becomes current."""

    @abc.abstractmethod
    def add_turn(self, reply: str, next_observation: str, context: str = "",
                 outcome: TurnOutcome | None = None) -> None:
        """Record the whole ``reply`` to the current observation and what it led to;
        ``next_observation`` (with ``context``) becomes current. ``outcome``: ``None`` when unknown."""

    @abc.abstractmethod
    def prompt_ids(self) -> tuple[list[int], PromptStats]:
        """The current prompt's token ids (ending with the generation header and the reply prefix's
        ids) and what the budget dropped from it."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable state; :meth:`load_state_dict` of it restores identical prompts."""

    @abc.abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (raises ``ValueError``/``TypeError`` on a mismatch)."""


def standard_kwargs(memory: Any) -> dict[str, Any]:
    """The constructor keywords every memory class takes, from a :class:`~verlog.config.MemoryConfig`."""
    return {"history_turns": memory.history_turns, "max_prompt_tokens": memory.max_prompt_tokens,
            "reply_hint": memory.reply_hint, "reply_prefix": memory.reply_prefix}
