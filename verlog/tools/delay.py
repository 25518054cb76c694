"""A tool with an injected latency: :class:`DelayedTool` waits a fixed time before each call of the
tool it wraps, the way a remote tool (a web search, a sandbox) keeps a conversation waiting. Used by
``agent.tool_latency_s`` for benchmarks and tests of asynchronous rollout."""

from __future__ import annotations

import asyncio
from typing import Any

from verlog.tools.base import BaseTool, ToolResult

__all__ = ["DelayedTool"]


class DelayedTool(BaseTool):
    """``tool`` with ``seconds`` of waiting (``asyncio.sleep``: the event loop goes on) before each
    :meth:`execute`; name, schema, ``create`` and ``release`` are the wrapped tool's.

    Args:
        tool: the wrapped tool.
        seconds: the wait per call, >= 0.

    Raises:
        ValueError: ``seconds`` negative or not finite.
    """

    def __init__(self, tool: BaseTool, seconds: float) -> None:
        if not 0.0 <= float(seconds) < float("inf"):
            raise ValueError(f"DelayedTool: seconds must be a finite number >= 0, got {seconds!r}")
        super().__init__(tool.name, tool.description, tool.parameters)
        self.tool, self.seconds = tool, float(seconds)

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> str:
        return await self.tool.create(instance_id, **kwargs)

    async def execute(self, instance_id: str, arguments: dict[str, Any]) -> ToolResult:
        """Wait ``seconds``, then run the wrapped tool's call (raises what it raises)."""
        await asyncio.sleep(self.seconds)
        return await self.tool.execute(instance_id, arguments)

    async def release(self, instance_id: str) -> None:
        await self.tool.release(instance_id)
