"""Chat bookkeeping shared by the tool agent loop and the OpenAI-compatible proxy: rendering a
conversation with the tokenizer's chat template, parsing Hermes tool calls out of a reply, the
trajectory a tool conversation produces and the training samples made from it.

Nothing here runs a model or a tool; :mod:`verlog.agent` and :mod:`verlog.proxy` build on it.
"""

from verlog.chat.parsing import ParsedReply, ToolCall, parse_reply, reasoning_text, strip_reasoning
from verlog.chat.renderer import ChatRenderer
from verlog.chat.samples import (SequenceSample, TurnSample, samples_batch_inputs, sequence_sample, turn_batch_inputs,
                                 turn_samples)
from verlog.chat.trajectory import STOP_REASONS, AgentTurn, Trajectory

__all__ = [
    "AgentTurn", "ChatRenderer", "ParsedReply", "STOP_REASONS", "SequenceSample", "ToolCall", "Trajectory",
    "TurnSample", "parse_reply", "reasoning_text", "samples_batch_inputs", "sequence_sample", "strip_reasoning",
    "turn_batch_inputs", "turn_samples",
]
