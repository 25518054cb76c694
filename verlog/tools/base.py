"""The tool contract: :class:`BaseTool`, its result :class:`ToolResult` and :class:`ToolError`.

A tool is called by an agent loop in three steps per trajectory: :meth:`BaseTool.create` sets up
per-trajectory state and returns an instance id, :meth:`BaseTool.execute` runs one call with the
arguments the model wrote (a JSON object, already decoded), :meth:`BaseTool.release` frees the state
(the loop calls it in a ``finally``). Anything the model did wrong — a bad argument, a failing call —
is reported as a :class:`ToolError`, whose one-line message the loop sends back to the model.
"""

from __future__ import annotations

import abc
import math
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BaseTool", "ToolError", "ToolResult", "one_line"]

# OpenAI function names: letters, digits, underscores and dashes, at most 64 characters.
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_MAX_ERROR_CHARS = 500


def one_line(text: str, limit: int = _MAX_ERROR_CHARS) -> str:
    """Collapse whitespace runs (newlines included) to single spaces and cut to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class ToolError(Exception):
    """A tool call failed in a way the model should be told about (its message is one line).

    Raised for invalid arguments and for exceptions inside a tool. The agent loop turns it into an
    error message for the model instead of ending the trajectory.
    """

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))

    @property
    def message(self) -> str:
        """The one-line message sent back to the model."""
        return str(self.args[0])


@dataclass
class ToolResult:
    """What one tool call gives back: the text for the model, a step reward and numeric metrics.

    Raises:
        TypeError: ``text`` is not a str, ``reward`` is not a real number (bools are refused), or
            ``metrics`` is not a dict of str to real numbers.
        ValueError: ``reward`` or a metric is NaN or infinite.
    """

    text: str
    reward: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"ToolResult.text must be a str, got {type(self.text).__name__}")
        self.reward = _finite_float(self.reward, "ToolResult.reward")
        if not isinstance(self.metrics, dict):
            raise TypeError(f"ToolResult.metrics must be a dict, got {type(self.metrics).__name__}")
        clean = {}
        for key, value in self.metrics.items():
            if not isinstance(key, str):
                raise TypeError(f"ToolResult.metrics keys must be str, got {key!r}")
            clean[key] = _finite_float(value, f"ToolResult.metrics[{key!r}]")
        self.metrics = clean


def _finite_float(value: Any, what: str) -> float:
    """``value`` as a float; raises TypeError for non-numbers and bools, ValueError for NaN/inf."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a real number, got {type(value).__name__}")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"{what} must be finite, got {out}")
    return out


class BaseTool(abc.ABC):
    """A tool the model can call: a name, a description and a JSON schema of its arguments.

    Subclasses implement :meth:`execute`; they may override :meth:`create` / :meth:`release` to hold
    per-trajectory state (the defaults keep the ``create`` keyword arguments in :attr:`instances`).

    Args:
        name: the function name the model writes (letters, digits, ``_``, ``-``; at most 64).
        description: what the tool does, for the model.
        parameters: a JSON schema of the arguments, an ``{"type": "object", ...}`` dict.

    Raises:
        ValueError: an invalid name, or ``parameters`` that is not an object schema.
        TypeError: ``description`` is not a str or ``parameters`` is not a dict.
    """

    def __init__(self, name: str, description: str, parameters: dict[str, Any]) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(
                f"invalid tool name {name!r}: use letters, digits, '_' or '-', at most 64 characters"
            )
        if not isinstance(description, str):
            raise TypeError(f"tool {name!r}: description must be a str")
        if not isinstance(parameters, dict):
            raise TypeError(f"tool {name!r}: parameters must be a JSON schema dict")
        if parameters.get("type") != "object":
            raise ValueError(f"tool {name!r}: parameters must be a schema of type 'object'")
        self.name = name
        self.description = description
        self.parameters = parameters
        self.instances: dict[str, dict[str, Any]] = {}

    def openai_schema(self) -> dict[str, Any]:
        """The OpenAI function-calling entry: ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> str:
        """Set up the state of one trajectory and return its instance id (a new uuid if not given).

        Raises:
            ValueError: ``instance_id`` is already live (created and not released).
        """
        if instance_id is None:
            instance_id = uuid.uuid4().hex
        if instance_id in self.instances:
            raise ValueError(f"tool {self.name!r}: instance {instance_id!r} already exists")
        self.instances[instance_id] = dict(kwargs)
        return instance_id

    @abc.abstractmethod
    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> ToolResult:
        """Run one call with the model's decoded arguments.

        Raises:
            ToolError: invalid arguments or a failure the model should hear about.
        """

    async def release(self, instance_id: str) -> None:
        """Free the state of one trajectory; releasing an unknown or released id is a no-op."""
        self.instances.pop(instance_id, None)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
