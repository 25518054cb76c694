"""Tools from an object's public methods: every public method of a class becomes a tool bound to
one instance (the environment-class convention of :mod:`verlog.env_class`).

Which methods count: the public attributes of the class (names not starting with ``_``, inherited
ones included, ``reset`` and ``get_reward`` excepted) that an instance sees as bound methods, so
plain and class methods count, and static methods, properties and other attributes do not. The
schema comes from the method's annotations and Google-style docstring exactly as
:class:`~verlog.tools.function.FunctionTool` builds it, ``self`` left out.
"""

from __future__ import annotations

import asyncio
import inspect
import types
from typing import Any, Callable

from verlog.tools.base import ToolResult
from verlog.tools.function import FunctionTool

__all__ = ["RESERVED_METHODS", "MethodTool", "class_method", "method_tools", "tool_method_names"]

#: The methods of the convention that are never tools: the episode's start and its reward.
RESERVED_METHODS = frozenset({"reset", "get_reward"})


class _Unmade:
    """Stands in for an instance when a method is bound only to read its signature (no ``__init__`` runs)."""


def class_method(cls: type, name: str) -> Callable[..., Any] | None:
    """``cls``'s attribute ``name`` as an instance would see it, without making an instance: a plain
    method comes back bound to a stand-in object (so its signature lacks ``self``), a class method
    bound to ``cls``, a static method as its function. None when the attribute is missing or is
    not a function, class method or static method (a property's getter is never run)."""
    try:
        static = inspect.getattr_static(cls, name)
    except AttributeError:
        return None
    if isinstance(static, types.FunctionType):
        return types.MethodType(static, _Unmade())
    if isinstance(static, (classmethod, staticmethod)):
        return static.__get__(None, cls)
    return None


def tool_method_names(cls: type) -> list[str]:
    """The names of ``cls``'s methods that are tools, sorted (see the module docstring)."""
    names = []
    for name in dir(cls):
        if name.startswith("_") or name in RESERVED_METHODS:
            continue
        if inspect.ismethod(class_method(cls, name)):
            names.append(name)
    return names


class MethodTool(FunctionTool):
    """One bound method as a tool: :class:`FunctionTool`'s schema, argument validation and worker
    thread for sync methods, with two differences.

    - The return value is sent back as ``str(value)`` (a str as it is): a method of the convention
      may return any value, e.g. an int.
    - Calls holding the same ``lock`` run one at a time, in the order they were made, so several calls
      in one reply never run the same object's methods concurrently.

    Args:
        method: a bound method (or any typed, documented function).
        lock: shared by the tools of one object; None: a lock of its own.

    Raises:
        TypeError, ValueError: as :class:`FunctionTool` (an unannotated or unsupported parameter, no
            docstring, an invalid name).
    """

    def __init__(self, method: Callable[..., Any], lock: asyncio.Lock | None = None) -> None:
        super().__init__(method)
        self.lock = lock if lock is not None else asyncio.Lock()

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> ToolResult:
        """:meth:`FunctionTool.execute` under the lock.

        Raises:
            ToolError: invalid arguments or an exception inside the method (type and message).
        """
        async with self.lock:
            return await super().execute(instance_id, arguments)

    def _to_result(self, value: Any) -> ToolResult:
        return ToolResult(value if isinstance(value, str) else str(value))


def method_tools(obj: Any, names: list[str]) -> list[MethodTool]:
    """The methods ``names`` of ``obj`` as tools that share one lock.

    Raises:
        AttributeError: ``obj`` has no attribute of one of the names.
        TypeError, ValueError: a method cannot be a tool (see :class:`MethodTool`).
    """
    lock = asyncio.Lock()
    return [MethodTool(getattr(obj, name), lock) for name in names]
