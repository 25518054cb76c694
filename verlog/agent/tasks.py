"""Tool tasks the trainer can run through the agent loop or the proxy: items, how one conversation
starts (its messages, tools and reward), and (for the tiny model) a tokenizer corpus and format
warm-up scripts.

A task is looked up by :func:`make_agent_task`: by name (``calculator`` and ``search`` are built in,
:mod:`verlog.agent.calculator`, :mod:`verlog.agent.search`), by the import path ``package.module:Class`` of an environment
class in TRL's convention (:mod:`verlog.agent.class_task`), or by the import path of a row function
whose rows an outside agent plays through the proxy (:mod:`verlog.agent.rows_task`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from verlog.agent import calculator, search, search_world
from verlog.imports import is_import_path
from verlog.tools.delay import DelayedTool

__all__ = ["AgentTask", "AGENT_TASKS", "Conversation", "make_agent_task", "with_tool_latency"]


@dataclass(frozen=True)
class Conversation:
    """What one conversation starts with.

    Attributes:
        messages: the opening chat messages.
        tools: the tools (BaseTool instances) offered in this conversation; the objects behind
            them belong to this conversation alone where the task keeps state.
        reward_fn: ``(final answer or None, trajectory) -> reward``, a float or an awaitable of one
            (see :class:`~verlog.agent.loop.ToolAgentLoop`).
    """

    messages: list[dict[str, Any]]
    tools: list[Any]
    reward_fn: Callable[..., Any]


@dataclass(frozen=True)
class AgentTask:
    """One tool task.

    Attributes:
        name: the task's name (``agent.task``).
        make_items: ``(n, seed) -> n items``, a pure function of its arguments.
        start: ``item -> Conversation``, called once per conversation (a fresh one each time).
        success_reward: an episode with total reward at least this counts as a success.
        warmup_scripts: ``item -> reply scripts`` for the format warm-up (see
            :func:`verlog.agent.scripted.scripted_examples`).
        corpus: ``(n, seed) -> texts`` for the tiny model's tokenizer.
        eval_items: ``(n, seed) -> n items`` for evaluation when the task holds a fixed evaluation set
            out of training's items (``search``); None: evaluation draws ``make_items(n, eval seed)``.
        warmup_items: ``(n, seed) -> n items`` for the format warm-up when it has items of its own
            (``search`` with ``warmup_worlds``: questions about other invented worlds); None: the
            warm-up draws ``make_items(n, seed)``.
    """

    name: str
    make_items: Callable[[int, int], list[Any]]
    start: Callable[[Any], Conversation]
    success_reward: float
    warmup_scripts: Callable[[Any], list[list[str]]]
    corpus: Callable[[int, int], list[str]]
    eval_items: Callable[[int, int], list[Any]] | None = None
    warmup_items: Callable[[int, int], list[Any]] | None = None

    def format_warmup_items(self, n: int, seed: int) -> list[Any]:
        """The ``n`` items a format warm-up with ``seed`` runs: ``warmup_items`` when set, else ``make_items``."""
        return (self.warmup_items or self.make_items)(n, seed)

    def evaluation_items(self, n: int, seed: int) -> list[Any]:
        """The ``n`` items an evaluation with ``seed`` runs: ``eval_items`` when set, else ``make_items``."""
        return (self.eval_items or self.make_items)(n, seed)


def _calculator(max_operand: int = 99) -> AgentTask:
    return AgentTask(
        name="calculator",
        make_items=lambda n, seed: calculator.make_questions(n, seed, max_operand),
        start=lambda q: Conversation(q.messages(), calculator.calculator_tools(), calculator.calculator_reward(q)),
        success_reward=1.0,
        warmup_scripts=calculator.warmup_scripts,
        corpus=lambda n, seed: calculator.calculator_corpus(n, seed, max_operand),
    )


def _search(top_k: int = 2, world_seed: int = 0, warmup_worlds: int = 0, query_space: bool = False) -> AgentTask:
    world, _ = search.world_index(world_seed)
    held_out = search_world.eval_questions(world)

    def eval_items(n: int, seed: int) -> list[search_world.SearchQuestion]:
        if n > len(held_out):
            raise ValueError(f"the search task has {len(held_out)} evaluation questions, {n} were asked for")
        return held_out[:n]

    def make_items(n: int, seed: int) -> list[search_world.SearchQuestion]:
        return search_world.make_questions(world, n, seed)

    return AgentTask(
        name="search",
        make_items=make_items,
        start=lambda q: Conversation(search.question_messages(q), search.search_tools(q.world, top_k),
                                     search.search_reward(q)),
        success_reward=1.0,
        warmup_scripts=lambda q: search.warmup_scripts(search.world_index(q.world)[0], q, query_space),
        corpus=lambda n, seed: search.search_corpus(make_items(n, seed), world_seed, top_k),
        eval_items=eval_items,
        warmup_items=(lambda n, seed: search_world.practice_questions(world, n, warmup_worlds, seed))
        if warmup_worlds > 0 else None,
    )


AGENT_TASKS: dict[str, Callable[..., AgentTask]] = {"calculator": _calculator, "search": _search}


def make_agent_task(name: str, **kwargs: Any) -> AgentTask:
    """The task ``name`` built with ``kwargs``: a registered name (calculator: ``max_operand``; search:
    ``top_k`` passages per search, the ``world_seed`` of its invented world, ``warmup_worlds``, the
    number of other worlds the format warm-up's questions come from, 0: its own training questions, and
    ``query_space``, whether the warm-up's queries start with a space), or the
    import path ``package.module:Class`` of an environment class (``dataset``: see
    :func:`verlog.agent.class_task.class_task`), or the import path of a row function whose rows an
    agent of ``agent.loop=proxy`` plays (:func:`verlog.agent.rows_task.rows_task`).

    Raises:
        KeyError: neither a known name nor an import path (the message lists the known names).
        ValueError: a class that cannot be loaded or breaks the convention (one line).
        ImportError: the task's optional package is missing (search: bm25s; one line with the install
            command).
    """
    if name in AGENT_TASKS:
        return AGENT_TASKS[name](**kwargs)
    if is_import_path(name):
        import inspect

        from verlog.agent.class_task import class_task  # they build on this module's types
        from verlog.agent.rows_task import rows_task
        from verlog.env_class import load_object

        if inspect.isclass(load_object(name)):
            return class_task(name, **kwargs)
        if kwargs.get("dataset") is not None:
            raise ValueError(f"agent.dataset is for an environment class; {name} is not a class")
        return rows_task(name)
    raise KeyError(f"unknown agent task {name!r}; known: {', '.join(sorted(AGENT_TASKS))}, or an import path "
                   "package.module:Class")


def with_tool_latency(task: AgentTask, seconds: float) -> AgentTask:
    """``task`` whose every tool call first waits ``seconds`` (:class:`~verlog.tools.delay.DelayedTool`,
    ``agent.tool_latency_s``); ``seconds == 0`` returns ``task`` itself.

    Raises:
        ValueError: ``seconds`` negative or not finite.
    """
    if not 0.0 <= float(seconds) < float("inf"):
        raise ValueError(f"tool latency must be a finite number of seconds >= 0, got {seconds!r}")
    if seconds == 0:
        return task

    def start(item: Any) -> Conversation:
        conv = task.start(item)
        return replace(conv, tools=[DelayedTool(tool, seconds) for tool in conv.tools])

    return replace(task, start=start)
