"""The calculator task written as a plain OpenAI-client agent, as a user's agent would be: it knows
nothing of Verlog but the proxy's URLs. :class:`~verlog.rollout.conversations.ProxyCollector` calls
:func:`solve` once per question (``agent.loop=proxy``, ``agent.agent=verlog.agent.calculator_openai:solve``).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from openai import OpenAI

from verlog.agent.calculator import CalculatorQuestion, calculator_reward
from verlog.tools.examples import calculate

__all__ = ["solve"]


def _run_tool(name: str, arguments: str) -> str:
    """The text a tool call gives back: calculate's result, or an ``Error: ...`` line."""
    if name != "calculate":
        return f"Error: unknown tool '{name}' (available: calculate)"
    try:
        args = json.loads(arguments or "{}")
        return str(calculate(**args))
    except Exception as exc:  # noqa: BLE001 - the model hears about its bad call
        return f"Error: {type(exc).__name__}: {exc}"


def solve(question: CalculatorQuestion, *, base_url: str, reward_url: str, temperature: float = 1.0,
          max_tokens: int = 64, max_turns: int = 3, timeout: float = 120.0) -> float:
    """Answer ``question`` with chat completions and the ``calculate`` tool; post and return the reward.

    The conversation is the tool loop's: call the model with the tool's schema, run each tool call
    it makes and send the result back, until it answers without a call or ``max_turns`` calls were
    made (then the answer is missing: reward 0).

    Raises:
        openai.APIError, httpx.HTTPError: the proxy refused a request or the reward.
    """
    client = OpenAI(base_url=base_url, api_key="verlog", max_retries=0, timeout=timeout)
    tools = [calculate.openai_schema()]
    messages: list[dict[str, Any]] = question.messages()
    answer = None
    for _ in range(max_turns):
        reply = client.chat.completions.create(model="verlog", messages=messages, tools=tools,
                                               temperature=temperature, max_tokens=max_tokens)
        message = reply.choices[0].message
        if not message.tool_calls:
            answer = message.content
            break
        messages.append({"role": "assistant", "content": message.content or "",
                         "tool_calls": [call.model_dump() for call in message.tool_calls]})
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": _run_tool(call.function.name, call.function.arguments)})
    reward = calculator_reward(question)(answer)
    httpx.post(reward_url, json={"reward": reward}, timeout=timeout).raise_for_status()
    return reward
