"""Per-turn prompt memories: each turns one environment's episode so far into the next turn's prompt.

``memory.type`` picks one (:func:`~verlog.memory.types.memory_class`):

* ``none`` (:class:`NoMemory`): the instruction and the current observation only;
* ``window`` (:class:`WindowMemory`, the default): plus the last ``memory.history_turns`` turns;
* ``full`` (:class:`FullMemory`): plus every turn of the episode, for comparison;
* ``summary`` (:class:`SummaryMemory`): plus a bounded running record (the latest turns as one line
  each, counts of older ones, the env's key events);
* ``vision`` (:class:`VisionMemory`): the window of a vision-language model, whose prompts show the
  last ``memory.max_images`` images of an env in an image mode (``env.observation_mode``);
* ``module.path:ClassName``: a user's class implementing :class:`Memory`.

All built-in ones render chat messages through the tokenizer's chat template within
``memory.max_prompt_tokens`` (:class:`~verlog.memory.chat.ChatMemory`). The protocol, what the runner
calls and when, is :class:`Memory`.
"""

from verlog.memory.base import EVENT_INFO_KEYS, Memory, PromptStats, TurnOutcome, completion_of, join_reply
from verlog.memory.chat import ChatMemory
from verlog.memory.summary import SummaryMemory
from verlog.memory.types import MEMORY_TYPES, check_memory_class, memory_class
from verlog.memory.window import FullMemory, NoMemory, WindowMemory

__all__ = [
    "EVENT_INFO_KEYS", "MEMORY_TYPES", "ChatMemory", "FullMemory", "Memory", "NoMemory", "PromptStats",
    "SummaryMemory", "TurnOutcome", "VisionMemory", "WindowMemory", "check_memory_class", "completion_of", "join_reply",
    "memory_class",
]


def __getattr__(name: str) -> object:
    """``VisionMemory`` on first use: it imports torch, which the rest of the package does not need."""
    if name == "VisionMemory":
        from verlog.memory.vision import VisionMemory

        return VisionMemory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
