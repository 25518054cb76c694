"""The OpenAI chat-completions wire format: validating a request, building the response.

Only what the proxy serves is accepted: ``messages``, ``tools`` (function tools), ``max_tokens`` /
``max_completion_tokens``, ``temperature``, ``top_p``, ``seed``, ``n`` = 1, ``stream`` (a boolean) and
``stream_options.include_usage`` (a boolean; read only when streaming); other fields (``model``,
``tool_choice``, ``user``, ...) are ignored. Every rejection is a
:class:`ProxyRequestError` with a one-line message, served as HTTP 400 with an OpenAI error body.
JSON (the body, a tool call's arguments) may nest at most
:data:`~verlog.chat.bounded_json.MAX_JSON_DEPTH` levels.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

from verlog.chat.bounded_json import MAX_JSON_DEPTH, JSONDepthError, loads_bounded
from verlog.chat.parsing import ParsedReply
from verlog.rollout.engine import SamplingParams

__all__ = ["ChatRequest", "ProxyRequestError", "error_body", "parse_body", "parse_chat_request", "completion_response"]

_ROLES = ("system", "user", "assistant", "tool")


class ProxyRequestError(ValueError):
    """A request the proxy cannot serve; ``status`` is the HTTP status (400 unless said) and ``kind``
    the OpenAI error type."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(" ".join(str(message).split()))
        self.param = param
        self.status = status
        self.kind = kind


def error_body(message: str, param: str | None = None, kind: str = "invalid_request_error") -> dict[str, Any]:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}`` (message on one line)."""
    return {"error": {"message": " ".join(str(message).split()), "type": kind, "param": param, "code": None}}


def parse_body(raw: bytes) -> Any:
    """The decoded JSON of a request body.

    Raises:
        ProxyRequestError: not JSON, or nested deeper than ``MAX_JSON_DEPTH`` levels.
    """
    try:
        return loads_bounded(raw)
    except JSONDepthError:
        raise ProxyRequestError(f"the request body nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError:
        raise ProxyRequestError("the request body is not valid JSON") from None


@dataclass(frozen=True)
class ChatRequest:
    """A validated request: messages normalised for the chat template, tools, sampling, model name."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    params: SamplingParams
    model: str
    stream: bool = False
    include_usage: bool = False


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ProxyRequestError(f"{where}.content: only text parts are supported", where)
            parts.append(part["text"])
        return "".join(parts)
    raise ProxyRequestError(f"{where}.content must be a string, a list of text parts or null", where)


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise ProxyRequestError(f"{where}.tool_calls must be a list", where)
    out = []
    for k, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ProxyRequestError(f"{where}.tool_calls[{k}] needs a function with a name", where)
        arguments = fn.get("arguments", "{}")
        if isinstance(arguments, str):
            try:
                arguments = loads_bounded(arguments) if arguments.strip() else {}
            except ValueError as exc:
                problem = str(exc) if isinstance(exc, JSONDepthError) else "is not JSON"
                raise ProxyRequestError(f"{where}.tool_calls[{k}].function.arguments {problem}", where) from None
        out.append({"id": call.get("id", f"call_{k}"), "type": "function",
                    "function": {"name": fn["name"], "arguments": arguments}})
    return out


def _messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise ProxyRequestError("messages must be a non-empty list", "messages")
    out = []
    for k, message in enumerate(raw):
        where = f"messages[{k}]"
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise ProxyRequestError(f"{where}.role must be one of {', '.join(_ROLES)}", where)
        norm: dict[str, Any] = {"role": message["role"], "content": _text(message.get("content"), where)}
        if message["role"] == "assistant" and message.get("tool_calls"):
            norm["tool_calls"] = _tool_calls(message["tool_calls"], where)
        if message["role"] == "tool" and isinstance(message.get("tool_call_id"), str):
            norm["tool_call_id"] = message["tool_call_id"]
        out.append(norm)
    return out


def _tools(raw: Any) -> list[dict[str, Any]] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise ProxyRequestError("tools must be a list", "tools")
    for k, tool in enumerate(raw):
        if (not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict)
                or not isinstance(tool["function"].get("name"), str)):
            raise ProxyRequestError(f"tools[{k}] must be a function tool with a name", "tools")
    return raw or None


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float, low_open: bool) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProxyRequestError(f"{name} must be a number", name)
    if value > high or value < low or (low_open and value == low):
        raise ProxyRequestError(f"{name} must be in {'(' if low_open else '['}{low}, {high}], got {value}", name)
    return float(value)


def parse_chat_request(body: Any, default_max_tokens: int) -> ChatRequest:
    """Validate a chat-completions request body.

    Raises:
        ProxyRequestError: not a JSON object, bad or empty messages, bad tools, a bad sampling value,
            ``n`` other than 1, or a ``stream`` / ``stream_options`` of the wrong type.
    """
    if not isinstance(body, dict):
        raise ProxyRequestError("the request body must be a JSON object")
    stream, include_usage = _streaming(body)
    if body.get("n", 1) != 1:
        raise ProxyRequestError(f"only n=1 is supported, got {body.get('n')!r}", "n")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = default_max_tokens
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ProxyRequestError(f"max_tokens must be a positive integer, got {max_tokens!r}", "max_tokens")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ProxyRequestError("seed must be an integer", "seed")
    params = SamplingParams(max_tokens=max_tokens, temperature=_number(body, "temperature", 1.0, 0.0, 2.0, False),
                            top_p=_number(body, "top_p", 1.0, 0.0, 1.0, True), seed=seed)
    model = body.get("model")
    return ChatRequest(_messages(body.get("messages")), _tools(body.get("tools")), params,
                       model if isinstance(model, str) else "", stream, include_usage)


def _streaming(body: dict[str, Any]) -> tuple[bool, bool]:
    """``(stream, include_usage)`` of a request; ``stream_options`` is read only when streaming.

    Raises:
        ProxyRequestError: ``stream`` not a boolean, or (streaming) ``stream_options`` not an object or
            its ``include_usage`` not a boolean.
    """
    stream = body.get("stream")
    if stream is None:
        return False, False
    if not isinstance(stream, bool):
        raise ProxyRequestError(f"stream must be a boolean, got {type(stream).__name__}", "stream")
    options = body.get("stream_options")
    if not stream or options is None:
        return stream, False
    if not isinstance(options, dict):
        raise ProxyRequestError("stream_options must be an object", "stream_options")
    usage = options.get("include_usage", False)
    if not isinstance(usage, bool):
        raise ProxyRequestError("stream_options.include_usage must be a boolean", "stream_options")
    return True, usage


def completion_response(parsed: ParsedReply, reasoning: str | None, engine_finish: str, prompt_tokens: int,
                        completion_tokens: int, model: str) -> dict[str, Any]:
    """The chat-completion object of one reply.

    Well-formed Hermes calls become ``tool_calls`` (arguments as JSON strings); a malformed
    ``<tool_call>`` block stays in ``content`` as written. ``finish_reason`` is ``"length"`` when the
    engine was cut, else ``"tool_calls"`` when there is a call, else ``"stop"``. Reasoning, when the
    reply had any, is in ``message.reasoning_content``.
    """
    calls = [c for c in parsed.calls if c.error is None]
    bad = [f"<tool_call>{c.raw}</tool_call>" for c in parsed.calls if c.error is not None]
    content = "\n".join([parsed.content] + bad if parsed.content else bad)
    message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for c in calls]
    if reasoning:
        message["reasoning_content"] = reasoning
    finish = "length" if engine_finish == "length" else ("tool_calls" if calls else "stop")
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
        "model": model, "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
