"""A plain OpenAI-client tool agent, the loop that :mod:`verlog.agent.calculator_openai` and
:mod:`verlog.agent.search_openai` share: chat completions with the tools' schemas, each tool call run
and its result sent back, until a reply without a call; then the reward is posted to the proxy.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import httpx
from openai import OpenAI

__all__ = ["run_tool", "solve_with_tools"]


def run_tool(tools: dict[str, Callable[..., Any]], name: str, arguments: str) -> str:
    """The text a tool call gives back: ``tools[name](**json arguments)`` as a string, or an
    ``Error: ...`` line (unknown tool, arguments that are not a JSON object, or the tool raised)."""
    if name not in tools:
        return f"Error: unknown tool '{name}' (available: {', '.join(tools)})"
    try:
        args = json.loads(arguments or "{}")
        if not isinstance(args, dict):
            raise ValueError("the arguments are not a JSON object")
        return str(tools[name](**args))
    except Exception as exc:  # noqa: BLE001 - the model hears about its bad call
        return f"Error: {type(exc).__name__}: {exc}"


def solve_with_tools(messages: list[dict[str, Any]], tools: list[Any], reward_fn: Callable[[str | None], float], *,
                     base_url: str, reward_url: str, temperature: float = 1.0, max_tokens: int = 64,
                     max_turns: int = 3, timeout: float = 120.0) -> float:
    """Run one conversation from ``messages`` with ``tools`` (callable tools with ``name`` and
    ``openai_schema()``, e.g. :class:`~verlog.tools.FunctionTool`), post ``reward_fn(answer)`` to
    ``reward_url`` and return it.

    The model is called with the tools' schemas; each tool call it makes is run and its result sent
    back, until it answers without a call (the answer is that reply's content) or ``max_turns``
    replies were made (then the answer is None).

    Raises:
        openai.APIError, httpx.HTTPError: the proxy refused a request or the reward.
    """
    client = OpenAI(base_url=base_url, api_key="verlog", max_retries=0, timeout=timeout)
    by_name = {tool.name: tool for tool in tools}
    schemas = [tool.openai_schema() for tool in tools]
    messages = [dict(m) for m in messages]
    answer = None
    for _ in range(max_turns):
        reply = client.chat.completions.create(model="verlog", messages=messages, tools=schemas,
                                               temperature=temperature, max_tokens=max_tokens)
        message = reply.choices[0].message
        if not message.tool_calls:
            answer = message.content
            break
        messages.append({"role": "assistant", "content": message.content or "",
                         "tool_calls": [call.model_dump() for call in message.tool_calls]})
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": run_tool(by_name, call.function.name, call.function.arguments)})
    reward = reward_fn(answer)
    httpx.post(reward_url, json={"reward": reward}, timeout=timeout).raise_for_status()
    return reward
