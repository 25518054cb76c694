"""A search task for the tool agent: questions about an invented world (:mod:`verlog.agent.search_world`),
the ``search`` tool over its passages (BM25, :mod:`verlog.tools.bm25`), and reward 1 when the final
``ANSWER: <answer>`` matches the gold answer exactly after SQuAD-style normalisation
(:mod:`verlog.agent.exact_match`), else 0.

For the tiny model it also gives the tokenizer's corpus and the *format* warm-up's scripts. Every
script first searches the entity the question names (its query copied from the question); then, for
a person, it answers with one of the person's two facts; for a company, it answers with one of the
company's three facts or searches the founder's name and answers with one of the founder's two
facts. So a question has 2 or 5 scripts, exactly one of them right: the warm-up teaches the call and
answer formats, the query and copying from a passage, and leaves which fact (and whether to search
again) to RL.
"""

from __future__ import annotations

import functools
from typing import Any

from verlog.agent.exact_match import exact_match
from verlog.agent.formats import answer_text, corpus_text, final_answer, tool_call_text
from verlog.agent.search_world import SearchQuestion, World, make_world, passages
from verlog.tools.bm25 import BM25Index, search_tool

__all__ = ["SYSTEM_PROMPT", "question_messages", "search_corpus", "search_reward", "search_tools", "warmup_scripts",
           "world_index"]

SYSTEM_PROMPT = (
    "Answer the question about the knowledge base. Call the search tool to find passages; "
    "end with a final line 'ANSWER: <answer>'."
)


def question_messages(question: SearchQuestion) -> list[dict[str, Any]]:
    """[system, user] messages that open the conversation about ``question``."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question.question}]


@functools.lru_cache(maxsize=4)
def world_index(seed: int) -> tuple[World, BM25Index]:
    """The world of ``seed`` (:func:`~verlog.agent.search_world.make_world` with its defaults) and the
    BM25 index of its passages, built once per process and seed (a few milliseconds).

    Raises:
        ImportError: bm25s is not installed (one line with the install command).
    """
    world = make_world(seed)
    return world, BM25Index([p.text for p in passages(world)])


def search_tools(seed: int, top_k: int) -> list:
    """The task's tools: ``[search]`` over the world of ``seed``, ``top_k`` passages per call.

    Raises:
        ValueError: ``top_k`` < 1.
        ImportError: bm25s is not installed.
    """
    return [search_tool(world_index(seed)[1], top_k)]


def search_reward(question: SearchQuestion):
    """The reward function of ``question`` for :class:`~verlog.agent.loop.ToolAgentLoop`:
    ``(answer, trajectory) -> 1.0`` when the answer's last ``ANSWER:`` line
    (:func:`~verlog.agent.formats.final_answer`) matches ``question.answer`` exactly after
    normalisation (:func:`~verlog.agent.exact_match.exact_match`), else 0.0."""

    def reward(answer: str | None, trajectory: Any = None) -> float:
        return 1.0 if exact_match(final_answer(answer), question.answer) else 0.0

    return reward


def _scripts(world: World, question: SearchQuestion, query_space: bool = False) -> list[list[tuple[str, str]]]:
    """The warm-up scripts as steps ``("search", query)`` / ``("answer", text)``; ``query_space``: every
    query starts with a space."""
    lead = " " if query_space else ""
    first = ("search", lead + question.entity)
    if question.entity in {p.name for p in world.people}:
        person = world.person(question.entity)
        return [[first, ("answer", person.city)], [first, ("answer", str(person.year))]]
    company = {c.name: c for c in world.companies}[question.entity]
    founder = world.person(company.founder)
    second = ("search", lead + founder.name)
    return ([[first, ("answer", v)] for v in (company.founder, str(company.year), company.city)]
            + [[first, second, ("answer", v)] for v in (founder.city, str(founder.year))])


def _reply(step: tuple[str, str]) -> str:
    kind, text = step
    return tool_call_text("search", {"query": text}) if kind == "search" else answer_text(text)


def warmup_scripts(world: World, question: SearchQuestion, query_space: bool = False) -> list[list[str]]:
    """The format warm-up's reply scripts for ``question`` (see the module's docstring): 2 for a
    question naming a person, 5 for one naming a company; exactly one ends with the gold answer.

    ``query_space``: each query is written with the space that precedes the name in the question or
    passage it is copied from (``{"query": " Tesdron Labs"}``). A byte-level BPE tokenizer then splits
    the name into the same tokens in the query as where it was read (without the space, the first
    piece is another token, ``T`` for the question's ``ĠT``); BM25 ignores the space."""
    return [[_reply(step) for step in script] for script in _scripts(world, question, query_space)]


def search_corpus(questions: list[SearchQuestion], seed: int, top_k: int) -> list[str]:
    """Texts for the tiny tokenizer: the warm-up conversations of ``questions`` (one per script, with
    the real search results of the world of ``seed``), rendered by
    :func:`~verlog.agent.formats.corpus_text` with the ``search`` tool.

    Raises:
        ImportError: bm25s is not installed.
    """
    world, _ = world_index(seed)
    tools = search_tools(seed, top_k)
    texts = []
    for q in questions:
        for script in _scripts(world, q):
            turns: list[dict[str, Any]] = []
            for step in script:
                turns.append({"role": "assistant", "content": _reply(step)})
                if step[0] == "search":
                    turns.append({"role": "tool", "content": tools[0](step[1])})
            texts.append(corpus_text(question_messages(q), tools, turns))
    return texts
