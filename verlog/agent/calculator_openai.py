"""The calculator task written as a plain OpenAI-client agent, as a user's agent would be: it knows
nothing of Verlog but the proxy's URLs. :class:`~verlog.rollout.conversations.ProxyCollector` calls
:func:`solve` once per question (``agent.loop=proxy``, ``agent.agent=verlog.agent.calculator_openai:solve``).
"""

from __future__ import annotations

from verlog.agent.calculator import CalculatorQuestion, calculator_reward, calculator_tools
from verlog.agent.openai_tools import solve_with_tools

__all__ = ["solve"]


def solve(question: CalculatorQuestion, *, base_url: str, reward_url: str, temperature: float = 1.0,
          max_tokens: int = 64, max_turns: int = 3, timeout: float = 120.0) -> float:
    """Answer ``question`` with chat completions and the ``calculate`` tool; post and return the reward
    (the loop of :func:`~verlog.agent.openai_tools.solve_with_tools`: a conversation that makes
    ``max_turns`` calls without answering gets reward 0).

    Raises:
        openai.APIError, httpx.HTTPError: the proxy refused a request or the reward.
    """
    return solve_with_tools(question.messages(), calculator_tools(), calculator_reward(question), base_url=base_url,
                            reward_url=reward_url, temperature=temperature, max_tokens=max_tokens,
                            max_turns=max_turns, timeout=timeout)
