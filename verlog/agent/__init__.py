"""The tool agent loop: token-in/token-out chat with Hermes tool calls through the tokenizer's chat
template, concurrent tool execution and limits (the chat bookkeeping itself is :mod:`verlog.chat`),
plus the tool tasks the trainer runs (:mod:`verlog.agent.tasks`)."""

from verlog.agent.loop import TRUNCATION_MARKER, AgentLimits, ToolAgentLoop

__all__ = ["AgentLimits", "TRUNCATION_MARKER", "ToolAgentLoop"]
