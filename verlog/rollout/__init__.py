"""Rollout: the engine protocol and its backends.

``VLLMEngine`` imports vLLM only when constructed, so importing this package never needs vLLM.
"""

from verlog.rollout.engine import EngineConfigError, Generation, RolloutEngine, SamplingParams
from verlog.rollout.hf import HFEngine
from verlog.rollout.vllm import VLLMEngine

__all__ = ["EngineConfigError", "Generation", "RolloutEngine", "SamplingParams", "HFEngine", "VLLMEngine"]
