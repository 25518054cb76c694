"""Streamed chat completions: one finished reply as OpenAI's server-sent events.

The proxy generates a reply in full (as for a non-streamed request: same ids, same parsing) and then
sends it as ``chat.completion.chunk`` events, in OpenAI's order:

1. a role chunk (``delta: {"role": "assistant", "content": ""}``);
2. ``reasoning_content`` deltas, when the reply had reasoning;
3. ``content`` deltas of at most ``delta_chars`` characters each;
4. per tool call, a chunk opening it (``index``, ``id``, ``type``, ``function.name``, empty
   ``arguments``) and chunks carrying its arguments' JSON in pieces;
5. a chunk with an empty delta and the ``finish_reason``;
6. with ``stream_options.include_usage``, a chunk with no choices and the ``usage``
   (every earlier chunk then carries ``"usage": null``, as OpenAI sends them);
7. ``data: [DONE]``.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

__all__ = ["DELTA_CHARS", "DONE_EVENT", "completion_chunks", "sse_event"]

DELTA_CHARS = 32
"""Most characters of content, reasoning or arguments per delta chunk."""

DONE_EVENT = b"data: [DONE]\n\n"
"""The event that ends a stream."""


def sse_event(chunk: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``chunk`` as compact JSON."""
    return b"data: " + json.dumps(chunk, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def _pieces(text: str, size: int) -> Iterator[str]:
    """``text`` cut into consecutive pieces of at most ``size`` characters (none for an empty text)."""
    for start in range(0, len(text), size):
        yield text[start:start + size]


def _deltas(message: dict[str, Any], size: int) -> Iterator[dict[str, Any]]:
    """The deltas that rebuild ``message`` when concatenated (after the role delta)."""
    for piece in _pieces(message.get("reasoning_content") or "", size):
        yield {"reasoning_content": piece}
    for piece in _pieces(message.get("content") or "", size):
        yield {"content": piece}
    for index, call in enumerate(message.get("tool_calls") or []):
        yield {"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                               "function": {"name": call["function"]["name"], "arguments": ""}}]}
        for piece in _pieces(call["function"]["arguments"], size):
            yield {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


def completion_chunks(response: dict[str, Any], include_usage: bool,
                      delta_chars: int = DELTA_CHARS) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a chat-completion ``response`` (see the module docstring).

    Raises:
        ValueError: ``delta_chars`` < 1.
    """
    if delta_chars < 1:
        raise ValueError(f"delta_chars must be >= 1, got {delta_chars}")
    choice = response["choices"][0]
    head = {"id": response["id"], "object": "chat.completion.chunk", "created": response["created"],
            "model": response["model"]}
    if include_usage:
        head["usage"] = None

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return dict(head, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk(delta) for delta in _deltas(choice["message"], delta_chars)]
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append(dict(head, choices=[], usage=dict(response["usage"])))
    return chunks
