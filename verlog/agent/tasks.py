"""Tool tasks the trainer can run through the agent loop or the proxy: questions, tools, reward,
and (for the tiny model) a tokenizer corpus and format warm-up scripts.

A task is looked up by name with :func:`make_agent_task`; ``calculator`` is built in
(:mod:`verlog.agent.calculator`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from verlog.agent import calculator

__all__ = ["AgentTask", "AGENT_TASKS", "make_agent_task"]


@dataclass(frozen=True)
class AgentTask:
    """One tool task.

    Attributes:
        name: the task's name (``agent.task``).
        make_items: ``(n, seed) -> n items``, a pure function of its arguments; an item has
            ``messages()`` (the opening chat messages).
        tools: ``() -> the tools`` (BaseTool instances) offered to the model.
        reward_fn: ``item -> (final answer or None, trajectory) -> reward``.
        success_reward: an episode with total reward at least this counts as a success.
        warmup_scripts: ``item -> reply scripts`` for the format warm-up (see
            :func:`verlog.agent.scripted.scripted_examples`).
        corpus: ``(n, seed) -> texts`` for the tiny model's tokenizer.
    """

    name: str
    make_items: Callable[[int, int], list[Any]]
    tools: Callable[[], list[Any]]
    reward_fn: Callable[[Any], Callable[..., float]]
    success_reward: float
    warmup_scripts: Callable[[Any], list[list[str]]]
    corpus: Callable[[int, int], list[str]]


def _calculator(max_operand: int = 99) -> AgentTask:
    return AgentTask(
        name="calculator",
        make_items=lambda n, seed: calculator.make_questions(n, seed, max_operand),
        tools=calculator.calculator_tools, reward_fn=calculator.calculator_reward, success_reward=1.0,
        warmup_scripts=calculator.warmup_scripts,
        corpus=lambda n, seed: calculator.calculator_corpus(n, seed, max_operand),
    )


AGENT_TASKS: dict[str, Callable[..., AgentTask]] = {"calculator": _calculator}


def make_agent_task(name: str, **kwargs: Any) -> AgentTask:
    """The task ``name`` built with ``kwargs`` (calculator: ``max_operand``).

    Raises:
        KeyError: an unknown task name (the message lists the known ones).
    """
    if name not in AGENT_TASKS:
        raise KeyError(f"unknown agent task {name!r}; known: {', '.join(sorted(AGENT_TASKS))}")
    return AGENT_TASKS[name](**kwargs)
