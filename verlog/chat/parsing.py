"""Hermes-style tool-call parsing of one assistant reply (the format the Qwen family writes).

A reply may hold reasoning (``<think>...</think>``), free text and any number of
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks. Reasoning is removed *before*
calls are parsed, so a call the model only thought about is never run. Each block becomes a
:class:`ToolCall`; a block that cannot be used keeps an ``error`` for the model instead of raising.

Replies are untrusted text (a model under training writes anything), so parsing is linear in the
reply's length whatever its tags (blocks are found with forward ``str.find`` scans, never a lazy regex
that rescans the rest of the text from every unclosed tag), and a call's JSON may nest at most
:data:`~verlog.chat.bounded_json.MAX_JSON_DEPTH` levels.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from verlog.chat.bounded_json import loads_bounded

__all__ = ["ToolCall", "ParsedReply", "parse_reply", "reasoning_text", "strip_reasoning", "tool_call_text"]

_THINK = ("<think>", "</think>")
_CALL = ("<tool_call>", "</tool_call>")
_OPEN_CALL = _CALL[0]


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


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    """A Hermes tool call as the Qwen-family templates write one, the block :func:`parse_reply` reads:
    ``<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`` (``json.dumps`` with its default
    separators). The format warm-ups teach it and the chat renderer writes it for templates that drop
    an assistant message's ``tool_calls`` (:mod:`verlog.chat.renderer`)."""
    return _CALL[0] + "\n" + json.dumps({"name": name, "arguments": arguments}) + "\n" + _CALL[1]


def _blocks(text: str, tags: tuple[str, str]) -> tuple[str, list[str]]:
    """``text`` without its closed ``open...close`` blocks, and the blocks' inner texts in order.

    A block runs from an opening tag to the first closing tag after it (tags inside are text); an
    opening tag with no closing tag after it is left in the text, and so is every tag after it.
    Linear in ``len(text)``: each scan starts where the last one ended.
    """
    open_tag, close_tag = tags
    kept: list[str] = []
    inner: list[str] = []
    pos = 0
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            break
        end = text.find(close_tag, start + len(open_tag))
        if end < 0:  # no closing tag after this one, so none after any later opening tag either
            break
        kept.append(text[pos:start])
        inner.append(text[start + len(open_tag):end])
        pos = end + len(close_tag)
    kept.append(text[pos:])
    return "".join(kept), inner


def strip_reasoning(text: str) -> str:
    """``text`` without ``<think>...</think>`` blocks; an unclosed ``<think>`` removes the rest of
    the text, a stray ``</think>`` removes everything before it. Never raises; linear time."""
    text = _blocks(text, _THINK)[0]
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        text = text.split("<think>", 1)[0]
    return text


def reasoning_text(text: str) -> str:
    """The reasoning :func:`strip_reasoning` removes: the text of the ``<think>`` blocks (and before a
    stray ``</think>``), each stripped, joined by newlines. Never raises; linear time."""
    rest, blocks = _blocks(text, _THINK)
    parts = [b.strip() for b in blocks]
    if "</think>" in rest:
        parts.insert(0, rest.rsplit("</think>", 1)[0].replace("<think>", "").strip())
    return "\n".join(p for p in parts if p)


def _decode_call(raw: str) -> ToolCall:
    try:
        obj = loads_bounded(raw)
    except json.JSONDecodeError as exc:
        return ToolCall("", raw=raw, error=f"malformed tool call: invalid JSON ({exc.msg} at char {exc.pos})")
    except ValueError as exc:  # nested too deep, an integer too long to convert
        return ToolCall("", raw=raw, error=f"malformed tool call: {' '.join(str(exc).split())}")
    if not isinstance(obj, dict):
        return ToolCall("", raw=raw, error="malformed tool call: expected a JSON object with 'name' and 'arguments'")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall("", raw=raw, error="malformed tool call: missing 'name'")
    arguments = obj.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = loads_bounded(arguments) if arguments.strip() else {}
        except ValueError:
            return ToolCall(name, raw=raw, error=f"malformed tool call to '{name}': 'arguments' is not JSON")
    if not isinstance(arguments, dict):
        return ToolCall(name, raw=raw, error=f"malformed tool call to '{name}': 'arguments' must be an object")
    return ToolCall(name, arguments, raw=raw)


def parse_reply(text: str) -> ParsedReply:
    """Parse one decoded assistant reply (without the end-of-turn token). Never raises; time linear
    in ``len(text)``.

    Returns:
        the reply's content and calls; a ``<tool_call>`` with no closing tag, JSON that does not
        decode or nests deeper than :data:`~verlog.chat.bounded_json.MAX_JSON_DEPTH` levels is a
        call with an error.
    """
    visible = strip_reasoning(text)
    rest, blocks = _blocks(visible, _CALL)
    calls = [_decode_call(b.strip()) for b in blocks]
    if _OPEN_CALL in rest:
        head, tail = rest.split(_OPEN_CALL, 1)
        calls.append(ToolCall("", raw=tail.strip(), error="malformed tool call: missing </tool_call>"))
        rest = head
    return ParsedReply(rest.strip(), calls)
