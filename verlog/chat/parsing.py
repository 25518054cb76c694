"""Hermes-style tool-call parsing of one assistant reply (the format the Qwen family writes).

A reply may hold reasoning (``<think>...</think>``), free text and any number of
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks. Reasoning is removed *before*
calls are parsed, so a call the model only thought about is never run. Each block becomes a
:class:`ToolCall`; a block that cannot be used keeps an ``error`` for the model instead of raising.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ToolCall", "ParsedReply", "parse_reply", "reasoning_text", "strip_reasoning"]

_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_OPEN_CALL = "<tool_call>"


@dataclass
class ToolCall:
    """One call the model wrote.

    Attributes:
        name: the function name ("" when missing).
        arguments: the decoded argument object ({} when missing or unusable).
        raw: the text between the tags.
        error: why the call cannot run (bad JSON, missing name, arguments not an object,
            an unclosed tag), or None for a well-formed call.
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str = ""
    error: str | None = None


@dataclass
class ParsedReply:
    """An assistant reply split into its visible answer text and its tool calls.

    Attributes:
        content: the reply without reasoning and without tool-call blocks, stripped.
        calls: the tool calls in order of appearance (well-formed or not).
    """

    content: str
    calls: list[ToolCall]


def strip_reasoning(text: str) -> str:
    """``text`` without ``<think>...</think>`` blocks; an unclosed ``<think>`` removes the rest of
    the text, a stray ``</think>`` removes everything before it. Never raises."""
    text = _THINK.sub("", text)
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        text = text.split("<think>", 1)[0]
    return text


def reasoning_text(text: str) -> str:
    """The reasoning :func:`strip_reasoning` removes: the text of the ``<think>`` blocks (and before a
    stray ``</think>``), each stripped, joined by newlines. Never raises."""
    parts = [m.strip() for m in _THINK.findall(text)]
    rest = _THINK.sub("", text)
    if "</think>" in rest:
        parts.insert(0, rest.rsplit("</think>", 1)[0].replace("<think>", "").strip())
    return "\n".join(p for p in parts if p)


def _decode_call(raw: str) -> ToolCall:
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        return ToolCall("", raw=raw, error=f"malformed tool call: invalid JSON ({exc.msg} at char {exc.pos})")
    if not isinstance(obj, dict):
        return ToolCall("", raw=raw, error="malformed tool call: expected a JSON object with 'name' and 'arguments'")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall("", raw=raw, error="malformed tool call: missing 'name'")
    arguments = obj.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return ToolCall(name, raw=raw, error=f"malformed tool call to '{name}': 'arguments' is not JSON")
    if not isinstance(arguments, dict):
        return ToolCall(name, raw=raw, error=f"malformed tool call to '{name}': 'arguments' must be an object")
    return ToolCall(name, arguments, raw=raw)


def parse_reply(text: str) -> ParsedReply:
    """Parse one decoded assistant reply (without the end-of-turn token). Never raises.

    Returns:
        the reply's content and calls; a ``<tool_call>`` with no closing tag is a call with an error.
    """
    visible = strip_reasoning(text)
    calls = [_decode_call(m.group(1).strip()) for m in _CALL.finditer(visible)]
    rest = _CALL.sub("", visible)
    if _OPEN_CALL in rest:
        head, tail = rest.split(_OPEN_CALL, 1)
        calls.append(ToolCall("", raw=tail.strip(), error="malformed tool call: missing </tool_call>"))
        rest = head
    return ParsedReply(rest.strip(), calls)
