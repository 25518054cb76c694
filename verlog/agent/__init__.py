"""The tool agent loop (issue 7, part 2): token-in/token-out chat with Hermes tool calls through the
tokenizer's chat template, concurrent tool execution, limits, rewards and two sample layouts."""

from verlog.agent.chat import ChatRenderer
from verlog.agent.loop import TRUNCATION_MARKER, AgentLimits, ToolAgentLoop
from verlog.agent.parsing import ParsedReply, ToolCall, parse_reply, strip_reasoning
from verlog.agent.samples import SequenceSample, TurnSample, sequence_sample, turn_batch_inputs, turn_samples
from verlog.agent.trajectory import STOP_REASONS, AgentTurn, Trajectory

__all__ = [
    "AgentLimits", "AgentTurn", "ChatRenderer", "ParsedReply", "STOP_REASONS", "SequenceSample",
    "TRUNCATION_MARKER", "ToolAgentLoop", "ToolCall", "Trajectory", "TurnSample", "parse_reply",
    "sequence_sample", "strip_reasoning", "turn_batch_inputs", "turn_samples",
]
