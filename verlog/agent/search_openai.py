"""The search task written as a plain OpenAI-client agent (the calculator agent's loop,
:func:`~verlog.agent.openai_tools.solve_with_tools`, with the ``search`` tool):
``agent.loop=proxy``, ``agent.task=search``, ``agent.agent=verlog.agent.search_openai:solve``.
"""

from __future__ import annotations

from verlog.agent.openai_tools import solve_with_tools
from verlog.agent.search import question_messages, search_reward, search_tools
from verlog.agent.search_world import SearchQuestion

__all__ = ["solve"]


def solve(question: SearchQuestion, *, base_url: str, reward_url: str, temperature: float = 1.0,
          max_tokens: int = 64, max_turns: int = 3, timeout: float = 600.0, top_k: int = 2,
          world_seed: int = 0) -> float:
    """Answer ``question`` with chat completions and the ``search`` tool (``top_k`` passages of the
    world of ``world_seed`` per call); post and return the reward (0 without an answer after
    ``max_turns`` replies). ``timeout`` (seconds per request) is long because an evaluation sends its
    100 conversations at once: on one CPU thread SmolLM2 takes about a minute and a half per batch of
    100 replies, and a request may also wait for the batch in flight before its own.

    Raises:
        openai.APIError, httpx.HTTPError: the proxy refused a request or the reward.
    """
    return solve_with_tools(question_messages(question), search_tools(world_seed, top_k), search_reward(question),
                            base_url=base_url, reward_url=reward_url, temperature=temperature,
                            max_tokens=max_tokens, max_turns=max_turns, timeout=timeout)
