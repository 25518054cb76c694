"""Environment classes in the convention of TRL's ``environment_factory``: finding the class and its
rows, and checking both, without making an instance and without importing torch (so
:mod:`verlog.preflight` runs it before anything heavy is imported; only the user's modules are).

The convention, for one episode (one conversation): the class is built with no arguments;
``reset(**row)`` gets every column of a dataset row (``prompt`` included) and returns None or a
text that is appended, as it is, to the last message of the row's prompt; the public methods
(:func:`verlog.tools.methods.tool_method_names`) are the tools; ``get_reward()`` scores the episode.
A row is a dict with a ``prompt``: a list of ``{"role", "content"}`` messages, or a text (one user
message). :mod:`verlog.agent.class_task` runs such a class as a tool task.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import random
from typing import Any, Callable

from verlog.imports import is_import_path, module_exists
from verlog.tools.base import one_line
from verlog.tools.methods import MethodTool, class_method, tool_method_names

__all__ = ["EMPTY_PROMPT_ROW", "RowSource", "RowSourceError", "check_env_class", "check_reset_takes", "load_object",
           "opening_messages", "row_problem", "row_source"]

#: A dataset-less task's row (what TRL uses too): an empty user message that ``reset`` must fill.
EMPTY_PROMPT_ROW: dict[str, Any] = {"prompt": [{"role": "user", "content": ""}]}

#: ``(n, seed) -> n rows``, a function of its arguments (and of what the user's rows do with them).
RowSource = Callable[[int, int], list[dict[str, Any]]]


class RowSourceError(ValueError):
    """Rows that break the contract of :func:`row_source` (a function that returned other than a list of
    ``n`` rows); the message is one line naming the source."""


def load_object(path: str) -> Any:
    """The object ``package.module:name``; the module is found before it is imported.

    Raises:
        ValueError: one line: not of that form, no such module, the import failed (its exception
            type and message), or the module has no such name.
    """
    if not is_import_path(path):
        raise ValueError(f"expected an import path package.module:name, got {path!r}")
    module_name, _, name = path.partition(":")
    if not module_exists(module_name):
        raise ValueError(f"cannot load {path!r}: no module named {module_name!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module may raise anything while it loads
        raise ValueError(f"cannot load {path!r}: importing {module_name} raised {type(exc).__name__}: "
                         f"{one_line(str(exc), 200)}") from None
    if not hasattr(module, name):
        raise ValueError(f"cannot load {path!r}: module {module_name!r} has no {name!r}")
    return getattr(module, name)


def check_env_class(obj: Any, path: str) -> list[str]:
    """Check that ``obj`` (loaded from ``path``) keeps the convention; return its tool names.

    Raises:
        ValueError: one line naming ``path``: not a class; no plain (not async) ``reset``; no
            ``get_reward`` (the episode's only reward); no public method to offer as a tool; or a
            method that cannot be a tool (an unannotated or unsupported parameter, no docstring:
            see :class:`~verlog.tools.methods.MethodTool`).
    """
    if not inspect.isclass(obj):
        raise ValueError(f"{path!r} is not a class (it is a {type(obj).__name__})")
    reset = class_method(obj, "reset")
    if not callable(reset):
        raise ValueError(f"{path} has no reset method (called with each row to start an episode)")
    if inspect.iscoroutinefunction(reset):
        raise ValueError(f"{path}.reset is async; the convention's reset is a plain method")
    if not callable(class_method(obj, "get_reward")):
        raise ValueError(f"{path} has no get_reward method, the episode's reward and the task's only one")
    names = tool_method_names(obj)
    if not names:
        raise ValueError(f"{path} has no public method to offer as a tool (methods starting with '_', reset "
                         "and get_reward are not tools)")
    for name in names:
        try:
            MethodTool(class_method(obj, name))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}.{name} cannot be a tool: {one_line(str(exc), 300)}") from None
    return names


def check_reset_takes(cls: type, path: str, row: dict[str, Any]) -> None:
    """Check that ``cls.reset`` accepts ``row``'s columns as keyword arguments (only its signature
    is read).

    Raises:
        ValueError: one line naming ``path`` and the columns.
    """
    try:
        inspect.signature(class_method(cls, "reset")).bind(**row)
    except TypeError as exc:
        raise ValueError(f"{path}.reset cannot take the row's columns ({', '.join(row)}) as keyword arguments: "
                         f"{exc}; give it **kwargs") from None


def row_problem(row: Any) -> str | None:
    """What makes ``row`` unusable (not a dict with str keys, no ``prompt``, a prompt that is neither a
    text nor a non-empty list of ``{"role": str, "content": str}`` messages), or None."""
    if not isinstance(row, dict) or not all(isinstance(k, str) for k in row):
        return f"is a {type(row).__name__}, not a dict of columns"
    if "prompt" not in row:
        return f"has no 'prompt' column (columns: {', '.join(row) or 'none'})"
    prompt = row["prompt"]
    if isinstance(prompt, str):
        return None
    if not isinstance(prompt, list) or not prompt:
        return f"has a prompt of type {type(prompt).__name__}; expected a text or a non-empty list of messages"
    for k, message in enumerate(prompt):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            return f"has a prompt whose message {k} is not {{'role': str, 'content': str}}"
    return None


def opening_messages(row: dict[str, Any], observation: Any) -> list[dict[str, Any]]:
    """The conversation's opening messages: ``row``'s prompt (a text is one user message) with
    ``observation`` (``reset``'s return value) appended as it is to the last message's content.

    Raises:
        ValueError: the row is unusable (:func:`row_problem`), or the last message is empty.
        TypeError: ``observation`` is neither None nor a str.
    """
    problem = row_problem(row)
    if problem is not None:
        raise ValueError(f"the row {problem}")
    prompt = row["prompt"]
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    if observation is not None:
        if not isinstance(observation, str):
            raise TypeError(f"reset returned a {type(observation).__name__}; expected a str or None")
        messages[-1]["content"] += observation
    if not messages[-1]["content"]:
        raise ValueError("the prompt's last message is empty: the row gives no prompt and reset returned no text")
    return messages


def row_source(path: str | None) -> RowSource:
    """The rows named by ``agent.dataset``: ``package.module:name`` of a function ``(n, seed) -> n
    rows``, or of a sequence of rows (a list, or anything with ``len`` and integer indexing) from
    which ``n`` are drawn uniformly with replacement from ``seed``. None: rows of an empty prompt
    (:data:`EMPTY_PROMPT_ROW`) that ``reset`` fills.

    The source returns fresh copies (see :func:`row_problem` for what a row must be).

    Raises:
        ValueError: one line: the path cannot be loaded (:func:`load_object`) or names something
            that is neither. Calling the source raises :class:`RowSourceError` when the function
            returns something other than a list of ``n`` rows.
    """
    if path is None:
        return lambda n, seed: [_copy(EMPTY_PROMPT_ROW) for _ in range(n)]
    obj = load_object(path)
    if callable(obj) and not inspect.isclass(obj):
        def call(n: int, seed: int) -> list[dict[str, Any]]:
            rows = obj(n, seed)
            if not isinstance(rows, list) or len(rows) != n:
                got = f"{len(rows)} rows" if isinstance(rows, list) else f"a {type(rows).__name__}"
                raise RowSourceError(f"{path}({n}, {seed}) returned {got}; expected a list of {n} rows")
            return [_copy(row) for row in rows]

        return call
    if hasattr(obj, "__len__") and hasattr(obj, "__getitem__") and not isinstance(obj, (str, bytes, dict)):
        if len(obj) == 0:
            raise ValueError(f"{path} has no rows")

        def draw(n: int, seed: int) -> list[dict[str, Any]]:
            rng = random.Random(seed)
            return [_copy(obj[rng.randrange(len(obj))]) for _ in range(n)]

        return draw
    raise ValueError(f"{path} is a {type(obj).__name__}; expected a function (n, seed) -> rows or a list of rows")


def _copy(row: Any) -> Any:
    """A deep copy of a row (a dict of plain values), so no episode changes another's row."""
    return copy.deepcopy(dict(row)) if isinstance(row, dict) else copy.deepcopy(row)
