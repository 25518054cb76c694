"""``ToolRegistry``: the set of tools offered to the model, by name, and loading it from YAML.

A tools file lists tools by import path::

    tools:
      - path: verlog.tools.examples:calculate     # a BaseTool instance (e.g. a @function_tool)
      - path: mypkg.search:SearchTool             # a BaseTool subclass, built with kwargs
        kwargs: {top_k: 3}
      - mypkg.utils:word_count                    # shorthand; a plain typed function is wrapped
                                                  # with @function_tool

``path`` is ``module:attribute`` (the attribute may be dotted). Every problem is a one-line
:class:`ToolConfigError` naming the file and the entry.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any, Iterable, Iterator

import yaml

from verlog.tools.base import BaseTool, one_line
from verlog.tools.function import function_tool

__all__ = ["ToolConfigError", "ToolRegistry", "load_tool", "load_tools_yaml"]


class ToolConfigError(ValueError):
    """A tools file or entry is invalid; the message names the file and the entry."""


class ToolRegistry:
    """Tools by name, in insertion order.

    Args:
        tools: tools to add first.

    Raises:
        ValueError: two tools share a name (see :meth:`add`).
    """

    def __init__(self, tools: Iterable[BaseTool] = ()) -> None:
        self._tools: dict[str, BaseTool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: BaseTool) -> BaseTool:
        """Add ``tool`` and return it.

        Raises:
            TypeError: ``tool`` is not a BaseTool.
            ValueError: a tool with the same name is already registered (the name is in the message).
        """
        if not isinstance(tool, BaseTool):
            raise TypeError(f"ToolRegistry.add needs a BaseTool, got {type(tool).__name__}")
        if tool.name in self._tools:
            raise ValueError(f"tool name collision: {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def get(self, name: str) -> BaseTool:
        """The tool called ``name``.

        Raises:
            KeyError: no such tool (the message lists the registered names).
        """
        try:
            return self._tools[name]
        except KeyError:
            known = ", ".join(self._tools) or "none"
            raise KeyError(f"unknown tool {name!r} (registered: {known})") from None

    def __getitem__(self, name: str) -> BaseTool:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[BaseTool]:
        return iter(self._tools.values())

    def names(self) -> list[str]:
        """The registered names, in insertion order."""
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """The OpenAI function-calling schemas of all tools, in insertion order."""
        return [tool.openai_schema() for tool in self._tools.values()]

    def merge(self, other: ToolRegistry) -> ToolRegistry:
        """A new registry with this registry's tools, then ``other``'s; both stay unchanged.

        Raises:
            ValueError: a name is in both registries (the name is in the message).
        """
        merged = ToolRegistry(self)
        for tool in other:
            merged.add(tool)
        return merged

    @classmethod
    def from_yaml(cls, path: str | Path) -> ToolRegistry:
        """The registry described by a tools YAML file (see :func:`load_tools_yaml`)."""
        return cls(load_tools_yaml(path))

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()})"


_ENTRY_KEYS = {"path", "kwargs"}


def load_tool(entry: Any, where: str = "tool entry") -> BaseTool:
    """Build one tool from a tools-file entry: ``{"path": "module:attr", "kwargs": {...}}`` or a path string.

    The attribute may be a BaseTool instance (no kwargs), a BaseTool subclass (called with kwargs) or
    a plain typed function (wrapped with ``@function_tool``; no kwargs).

    Raises:
        ToolConfigError: a malformed entry or path, a failed import, a missing attribute, an object
            that is not a tool, or a tool that cannot be built; one line starting with ``where``.
    """

    def fail(message: str) -> ToolConfigError:
        return ToolConfigError(one_line(f"{where}: {message}"))

    if isinstance(entry, str):
        entry = {"path": entry}
    if not isinstance(entry, dict):
        kind = type(entry).__name__
        raise fail(f"expected a mapping with 'path' or a 'module:attribute' string, got {kind}")
    unknown = sorted(set(entry) - _ENTRY_KEYS, key=str)
    if unknown:
        raise fail(f"unknown key {unknown[0]!r} (allowed: kwargs, path)")
    path = entry.get("path")
    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        raise fail(f"'path' must be 'module:attribute', got {path!r}")
    kwargs = entry.get("kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise fail(f"'kwargs' must be a mapping, got {type(kwargs).__name__}")
    where = f"{where} ({path})"

    module_name, attribute = path.split(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise fail(f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}") from exc
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise fail(f"{module_name!r} has no attribute {attribute!r}")
        obj = getattr(obj, part)

    if isinstance(obj, BaseTool):
        if kwargs:
            raise fail("'kwargs' only applies to a BaseTool class, and this is a tool instance")
        return obj
    if inspect.isclass(obj):
        if not issubclass(obj, BaseTool):
            raise fail(f"class {obj.__name__} is not a BaseTool subclass")
        try:
            tool = obj(**(kwargs or {}))
        except Exception as exc:
            raise fail(f"cannot build {obj.__name__}: {type(exc).__name__}: {exc}") from exc
        return tool
    if inspect.isfunction(obj) or inspect.iscoroutinefunction(obj):
        if kwargs:
            raise fail("'kwargs' only applies to a BaseTool class, and this is a function")
        try:
            return function_tool(obj)
        except (TypeError, ValueError) as exc:
            raise fail(f"cannot make a tool of function {obj.__name__}: {exc}") from exc
    raise fail(f"expected a BaseTool, a BaseTool subclass or a function, got {type(obj).__name__}")


def load_tools_yaml(path: str | Path) -> list[BaseTool]:
    """The tools listed in a YAML file (``tools:`` a list of entries, see :func:`load_tool`).

    Raises:
        ToolConfigError: unreadable file, invalid YAML, a missing or non-list ``tools`` key, unknown
            top-level keys, a bad entry (named as ``file: tools[i] (path)``) or two tools with the
            same name.
    """
    source = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ToolConfigError(one_line(f"{source}: cannot read: {exc}")) from exc
    except yaml.YAMLError as exc:
        raise ToolConfigError(one_line(f"{source}: invalid YAML: {exc}")) from exc
    if not isinstance(data, dict) or "tools" not in data:
        raise ToolConfigError(f"{source}: expected a mapping with a 'tools' list")
    extra = sorted(set(data) - {"tools"}, key=str)
    if extra:
        raise ToolConfigError(f"{source}: unknown top-level key {extra[0]!r} (allowed: tools)")
    entries = data["tools"]
    if not isinstance(entries, list):
        raise ToolConfigError(f"{source}: 'tools' must be a list, got {type(entries).__name__}")
    registry = ToolRegistry()
    for i, entry in enumerate(entries):
        where = f"{source}: tools[{i}]"
        tool = load_tool(entry, where)
        try:
            registry.add(tool)
        except ValueError as exc:
            raise ToolConfigError(f"{where}: {exc}") from exc
    return list(registry)
