"""``memory.type``: the built-in memories by name, a user's own memory class by import path, and the
check of the memory contract that a user's class must pass before a run starts."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator, Mapping
from typing import Any

from verlog.imports import module_exists
from verlog.memory.base import Memory

__all__ = ["MEMORY_TYPES", "PROTOCOL_METHODS", "check_memory_class", "memory_class"]



class _BuiltinMemories(Mapping):
    """``memory.type`` name -> class, each module imported when its class is first asked for: the
    vision memory needs torch, which a config check must not wait for."""

    def __init__(self, paths: dict[str, str]) -> None:
        self._paths = paths

    def __getitem__(self, name: str) -> type[Memory]:
        module, _, attr = self._paths[name].partition(":")
        return getattr(importlib.import_module(module), attr)

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


#: The built-in memories, by ``memory.type`` (a read-only mapping to the classes).
MEMORY_TYPES: Mapping[str, type[Memory]] = _BuiltinMemories({
    "none": "verlog.memory.window:NoMemory",
    "window": "verlog.memory.window:WindowMemory",
    "full": "verlog.memory.window:FullMemory",
    "summary": "verlog.memory.summary:SummaryMemory",
    "vision": "verlog.memory.vision:VisionMemory",
})
#: The methods every memory class has (see :class:`~verlog.memory.base.Memory`).
PROTOCOL_METHODS = ("start_episode", "add_turn", "prompt_ids", "state_dict", "load_state_dict")


def memory_class(type_name: str) -> type:
    """The memory class that ``memory.type`` names: a built-in name of :data:`MEMORY_TYPES`, or
    ``"module.path:ClassName"`` (imported, then checked by :func:`check_memory_class`).

    Raises:
        ValueError: a one-line reason: an unknown name, a path that is not ``module:Class``, a module
            that cannot be imported (its error in one line), no such attribute, or a class that breaks
            the contract.
    """
    if type_name in MEMORY_TYPES:
        return MEMORY_TYPES[type_name]
    module_name, sep, attr = type_name.partition(":")
    if not sep or not module_name or not attr.isidentifier():
        raise ValueError(f"expected one of {', '.join(MEMORY_TYPES)} or a class as module.path:ClassName, "
                         f"got {type_name!r}")
    if not module_exists(module_name):
        raise ValueError(f"cannot load {type_name!r}: no module named {module_name!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module may raise anything while it is imported
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ValueError(f"cannot load {type_name!r}: importing {module_name!r} raised "
                         f"{type(exc).__name__}: {first}") from None
    if not hasattr(module, attr):
        raise ValueError(f"cannot load {type_name!r}: module {module_name!r} has no attribute {attr!r}")
    cls = getattr(module, attr)
    check_memory_class(cls, type_name)
    return cls


def check_memory_class(cls: Any, name: str) -> None:
    """Check that ``cls`` can serve as a memory: a class (not an instance), not abstract, with the
    callable methods of :data:`PROTOCOL_METHODS` and a ``from_config(tokenizer, memory)`` class
    method (inherited from :class:`~verlog.memory.base.Memory` when subclassing it), whose
    ``add_turn`` accepts ``(reply, next_observation, context, outcome)`` and, when ``from_config`` is
    the inherited default, whose constructor accepts ``(tokenizer, history_turns=, max_prompt_tokens=,
    reply_hint=, reply_prefix=)``. Nothing is built (no tokenizer is needed).

    Raises:
        ValueError: the first broken rule, in one line naming ``name``.
    """
    if not inspect.isclass(cls):
        raise ValueError(f"{name!r} is a {type(cls).__name__}, not a memory class")
    missing = [m for m in (*PROTOCOL_METHODS, "from_config") if not callable(getattr(cls, m, None))]
    if missing:
        raise ValueError(f"{name!r} is not a memory class: it lacks {', '.join(missing)} (subclass "
                         "verlog.memory.Memory)")
    if inspect.isabstract(cls):
        raise ValueError(f"{name!r} does not implement {', '.join(sorted(cls.__abstractmethods__))}")
    if not _accepts(cls.add_turn, object(), "reply", "obs", "", outcome=None):
        raise ValueError(f"{name!r}: add_turn must accept (reply, next_observation, context='', outcome=None)")
    if getattr(cls.from_config, "__func__", None) is Memory.from_config.__func__:
        kwargs = dict.fromkeys(("history_turns", "max_prompt_tokens", "reply_hint", "reply_prefix"))
        if not _accepts(cls, None, **kwargs):
            raise ValueError(f"{name!r}: the constructor must accept (tokenizer, history_turns=, max_prompt_tokens=, "
                             "reply_hint=, reply_prefix=), or the class must define from_config(tokenizer, memory)")


def _accepts(fn: Any, *args: Any, **kwargs: Any) -> bool:
    """Whether ``fn``'s signature binds ``args`` and ``kwargs`` (True when it has none to read)."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin)
        return True
    return True
