"""``@function_tool``: a typed Python function with a Google-style docstring becomes a BaseTool.

The argument schema is inferred from the annotations (:mod:`verlog.tools.schema`), the tool's
description is the docstring's first paragraph and each argument's description comes from the
``Args:`` section. Parameters without a default are required. Arguments are validated before the
call; a sync function runs in a worker thread (``asyncio.to_thread``) so it never blocks the loop.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import typing
from typing import Any, Callable, overload

from verlog.tools.base import BaseTool, ToolError, ToolResult
from verlog.tools.schema import ArgumentError, annotation_schema, parse_docstring, validate_arguments

__all__ = ["FunctionTool", "function_tool"]


class FunctionTool(BaseTool):
    """A tool that calls a Python function; made by :func:`function_tool`.

    The instance is still callable like the original function (``tool(x=1)``), so the function stays
    usable and testable as plain Python.

    Args:
        fn: a sync or async function whose parameters are all annotated with supported types.
        name: the tool name; defaults to ``fn.__name__``.
        description: the tool description; defaults to the docstring's first paragraph.

    Raises:
        TypeError: a parameter is unannotated, has an unsupported annotation or is ``*args`` /
            ``**kwargs`` / positional-only; the docstring documents a parameter that does not exist;
            or there is no description.
        ValueError: an invalid tool name.
    """

    def __init__(
        self, fn: Callable[..., Any], name: str | None = None, description: str | None = None
    ) -> None:
        if not callable(fn):
            raise TypeError(f"function_tool needs a function, got {type(fn).__name__}")
        tool_name = name if name is not None else getattr(fn, "__name__", "")
        doc_description, arg_docs = parse_docstring(inspect.getdoc(fn))
        parameters = _parameters_schema(fn, tool_name, arg_docs)
        description = doc_description if description is None else description
        if not description:
            raise TypeError(f"tool {tool_name!r} has no description: add a docstring or pass description=")
        super().__init__(tool_name, description, parameters)
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly (no validation, no error wrapping)."""
        return self.fn(*args, **kwargs)

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> ToolResult:
        """Validate ``arguments``, call the function and convert what it returns.

        Raises:
            ToolError: invalid arguments (missing, unknown, wrong type: the message names the
                argument), an exception inside the function (type and message), or a return
                value that is not str, dict, ToolResult or a (response, reward[, metrics]) tuple.
        """
        try:
            kwargs = validate_arguments(self.parameters, arguments)
        except ArgumentError as exc:
            raise ToolError(f"tool '{self.name}': {exc}") from None
        try:
            if self.is_async:
                value = await self.fn(**kwargs)
            else:
                value = await asyncio.to_thread(self.fn, **kwargs)
        except ToolError:
            raise
        except Exception as exc:  # the model must hear about it; the loop must go on
            raise ToolError(f"tool '{self.name}' failed: {type(exc).__name__}: {exc}") from exc
        return self._to_result(value)

    def _to_result(self, value: Any) -> ToolResult:
        """Convert an accepted return value to a ToolResult; raises ToolError for anything else."""
        if isinstance(value, ToolResult):
            return value
        reward: Any = 0.0
        metrics: Any = {}
        if isinstance(value, tuple):
            if len(value) not in (2, 3):
                raise ToolError(
                    f"tool '{self.name}' returned a tuple of {len(value)}; expected (response, reward) "
                    "or (response, reward, metrics)"
                )
            value, reward, *rest = value
            metrics = rest[0] if rest else {}
        if isinstance(value, dict):
            try:
                value = json.dumps(value, ensure_ascii=False)
            except (TypeError, ValueError) as exc:
                raise ToolError(f"tool '{self.name}' returned a dict that is not JSON: {exc}") from exc
        if not isinstance(value, str):
            raise ToolError(
                f"tool '{self.name}' returned {type(value).__name__}; expected str, dict, ToolResult "
                "or a (response, reward[, metrics]) tuple"
            )
        try:
            return ToolResult(value, reward, metrics)
        except (TypeError, ValueError) as exc:
            raise ToolError(f"tool '{self.name}' returned a bad reward or metrics: {exc}") from exc


def _parameters_schema(fn: Callable[..., Any], tool_name: str, arg_docs: dict[str, str]) -> dict[str, Any]:
    """The object schema of ``fn``'s parameters; raises TypeError naming a bad parameter."""
    signature = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # e.g. a string annotation naming an unknown type
        raise TypeError(f"tool {tool_name!r}: cannot resolve annotations: {exc}") from exc
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in signature.parameters.items():
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise TypeError(
                f"tool {tool_name!r}: parameter {pname!r} must be a named parameter "
                "(no *args, **kwargs or positional-only)"
            )
        if pname not in hints:
            raise TypeError(f"tool {tool_name!r}: parameter {pname!r} has no type annotation")
        try:
            schema = annotation_schema(hints[pname])
        except TypeError as exc:
            raise TypeError(f"tool {tool_name!r}: parameter {pname!r}: {exc}") from None
        if pname in arg_docs and arg_docs[pname]:
            schema["description"] = arg_docs[pname]
        properties[pname] = schema
        if param.default is inspect.Parameter.empty:
            required.append(pname)
    unknown = sorted(set(arg_docs) - set(properties))
    if unknown:
        raise TypeError(f"tool {tool_name!r}: docstring documents {unknown[0]!r}, which is not a parameter")
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


@overload
def function_tool(fn: Callable[..., Any], /) -> FunctionTool: ...


@overload
def function_tool(
    *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def function_tool(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None, description: str | None = None
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a typed function into a :class:`FunctionTool`; use as ``@function_tool`` or
    ``@function_tool(name=..., description=...)``.

    Raises:
        TypeError: at decoration time, for an unannotated or unsupported parameter (named in the
            message), a docstring entry for a parameter that does not exist, or no description.
        ValueError: an invalid tool name.
    """
    if fn is not None:
        return FunctionTool(fn, name=name, description=description)

    def decorate(inner: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(inner, name=name, description=description)

    return decorate
