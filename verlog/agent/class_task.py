"""An environment class in TRL's convention (:mod:`verlog.env_class`) run unchanged as a tool task:
``agent.task=package.module:Class`` with ``agent.loop=tools``.

Every conversation gets its own instance: built with no arguments, ``reset(**row)`` called with a
copy of its row, its public methods offered as tools bound to it (sync ones run in a worker thread,
one call at a time; a method that raises is an ``Error: ...`` text for the model), and
``get_reward()`` (sync or async) read once the conversation has ended. A reward that is None, not a
finite number, or raised counts as 0: the trajectory's ``stats["reward_fallbacks"]`` counts it and
its ``reward_note`` says why (the collector counts and logs it as a fault). An episode whose reward
reaches :data:`SUCCESS_REWARD` is a success.

For the tiny model the format warm-up and the tokenizer corpus are derived from the class alone:
per row, one script per tool that calls it with arguments drawn from its schema (words and integers
of the row's prompt) and then ends with :data:`FINAL_REPLY`; the corpus renders those conversations
with the real tool responses of a fresh instance.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import math
import numbers
import random
import zlib
from typing import Any, Callable

from verlog.agent.formats import corpus_text, draw_arguments, prompt_vocabulary, tool_call_text
from verlog.agent.tasks import AgentTask, Conversation
from verlog.env_class import check_env_class, load_object, opening_messages, row_source
from verlog.tools.base import ToolError, one_line
from verlog.tools.methods import MethodTool, class_method, method_tools

__all__ = ["FINAL_REPLY", "SUCCESS_REWARD", "class_task", "env_reward", "start_conversation"]

#: The warm-up scripts' last reply: a turn without a tool call ends the conversation.
FINAL_REPLY = "Done."
#: A class task's episode counts as a success when its reward reaches this.
SUCCESS_REWARD = 1.0


def class_task(path: str, dataset: str | None = None) -> AgentTask:
    """The tool task of the environment class at ``path`` (``package.module:Class``).

    Args:
        path: the class (``agent.task``).
        dataset: where the rows come from (``agent.dataset``, see
            :func:`verlog.env_class.row_source`); None: ``reset`` writes the prompt.

    Raises:
        ValueError: one line: the class or the rows cannot be loaded, or the class breaks the
            convention (:func:`verlog.env_class.check_env_class`).
    """
    cls = load_object(path)
    names = check_env_class(cls, path)
    rows = row_source(dataset)
    parameters = {name: MethodTool(class_method(cls, name)).parameters for name in names}

    def start(row: dict[str, Any]) -> Conversation:
        return start_conversation(cls, path, names, row)

    def warmup_calls(row: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """One call per tool with arguments drawn from its schema, seeded by the row."""
        rng = random.Random(zlib.crc32(json.dumps(row, sort_keys=True, default=str).encode()))
        prompt = row.get("prompt", "")
        words, ints = prompt_vocabulary([{"content": prompt}] if isinstance(prompt, str) else prompt)
        return [(name, draw_arguments(parameters[name], rng, words, ints)) for name in names]

    def warmup_scripts(row: dict[str, Any]) -> list[list[str]]:
        return [[tool_call_text(name, args), FINAL_REPLY] for name, args in warmup_calls(row)]

    def corpus(n: int, seed: int) -> list[str]:
        async def texts() -> list[str]:
            out = []
            for row in rows(n, seed):
                conv = start(row)
                tools = {tool.name: tool for tool in conv.tools}
                for name, args in warmup_calls(row):
                    try:
                        response = (await tools[name].execute("corpus", args)).text
                    except ToolError as exc:
                        response = "Error: " + exc.message
                    turns = [{"role": "assistant", "content": tool_call_text(name, args)},
                             {"role": "tool", "content": response},
                             {"role": "assistant", "content": FINAL_REPLY}]
                    out.append(corpus_text(conv.messages, conv.tools, turns))
            return out

        return asyncio.run(texts())

    return AgentTask(name=path, make_items=rows, start=start, success_reward=SUCCESS_REWARD,
                     warmup_scripts=warmup_scripts, corpus=corpus)


def start_conversation(cls: type, path: str, names: list[str], row: dict[str, Any]) -> Conversation:
    """A new instance of ``cls`` reset with a copy of ``row``: the opening messages (the row's prompt
    with ``reset``'s text appended), its methods ``names`` as tools, and :func:`env_reward`.

    Raises:
        RuntimeError: one line naming ``path``: building or resetting the instance raised, or the
            row and ``reset``'s return value give no usable prompt.
    """
    try:
        env = cls()
        observation = env.reset(**copy.deepcopy(row))
        messages = opening_messages(row, observation)
    except Exception as exc:  # the user's class may raise anything
        raise RuntimeError(f"{path}: starting an episode failed: {type(exc).__name__}: {one_line(str(exc), 300)}") \
            from exc
    return Conversation(messages, method_tools(env, names), env_reward(env))


def env_reward(env: Any) -> Callable[..., Any]:
    """The reward function of one conversation on ``env``: ``async (answer, trajectory) -> float``, the
    value of ``env.get_reward()`` (a sync one runs in a worker thread), 0.0 when it is None, not a
    finite number, or raises (counted in ``trajectory.stats["reward_fallbacks"]``, the reason in
    ``trajectory.reward_note``)."""

    async def reward(answer: str | None, trajectory: Any) -> float:
        get = env.get_reward
        try:
            value = await get() if inspect.iscoroutinefunction(get) else await asyncio.to_thread(get)
        except Exception as exc:  # the user's method may raise anything; the run goes on
            return _fallback(trajectory, f"get_reward raised {type(exc).__name__}: {one_line(str(exc), 200)}")
        if value is None:
            return _fallback(trajectory, "get_reward returned None")
        if not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
            return _fallback(trajectory, f"get_reward returned {one_line(repr(value), 80)}, not a finite number")
        return float(value)

    return reward


def _fallback(trajectory: Any, why: str) -> float:
    """Reward 0 for an unscored conversation, counted and explained on its trajectory."""
    trajectory.count("reward_fallbacks")
    trajectory.reward_note = f"{why} (counted as 0)"
    return 0.0
