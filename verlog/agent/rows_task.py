"""A task whose conversations belong to the agent: ``agent.task=package.module:rows`` with
``agent.loop=proxy``.

An agent run through the proxy (:class:`~verlog.rollout.conversations.ProxyCollector`) opens its own
conversations, calls its own tools and posts its own reward; what Verlog still has to choose is
*which* item each conversation plays. A row function ``rows(n, seed) -> n rows`` (or a list of rows
to draw from with replacement, see :func:`verlog.env_class.row_source`) gives those items: each row
is handed unchanged to the agent (``agent_fn(row, *, base_url, reward_url, ...)``). This is how an
outside harness with its own task set (verifiers, a user's evaluation script) is trained: the rows
name its tasks, the agent runs one of them against the proxy's URL.

An episode whose reward reaches :data:`SUCCESS_REWARD` is a success. There are no warm-up scripts (the
agent's replies are not Verlog's to script), and the tiny model's tokenizer corpus is the rows' JSON
text.
"""

from __future__ import annotations

import json
from typing import Any

from verlog.agent.tasks import AgentTask, Conversation
from verlog.env_class import row_source

__all__ = ["SUCCESS_REWARD", "rows_task"]

#: A row task's episode counts as a success when its reward reaches this.
SUCCESS_REWARD = 1.0


def rows_task(path: str) -> AgentTask:
    """The agent-owned task whose items are the rows at ``path`` (``agent.task``).

    Args:
        path: ``package.module:name`` of a function ``(n, seed) -> n rows`` or of a sequence of rows.

    Raises:
        ValueError: one line: the path cannot be loaded or names something else
            (:func:`~verlog.env_class.row_source`).
    """
    rows = row_source(path)

    def start(row: Any) -> Conversation:
        raise TypeError(f"{path} is a row function: its rows are played by the agent of agent.loop=proxy, "
                        "which opens its own conversations")

    def corpus(n: int, seed: int) -> list[str]:
        return [json.dumps(row, sort_keys=True, ensure_ascii=False, default=str) for row in rows(n, seed)]

    return AgentTask(name=path, make_items=rows, start=start, success_reward=SUCCESS_REWARD,
                     warmup_scripts=lambda row: [], corpus=corpus)
