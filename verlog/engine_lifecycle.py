"""The rollout engine's life in a run: built once, put to sleep around updates, given new weights.

The rollout engine (:class:`~verlog.rollout.engine.RolloutEngine`) generates the replies; the
actor's DeepSpeed engine is what trains. After each update the actor's weights are loaded into the
rollout engine (gathered from ZeRO-3 shards, or LoRA adapters merged into the base weights), while
the collector holds new requests (:meth:`~verlog.rollout.engine.Collector.weights_changing`). With
``rollout.vllm_sleep_between_updates`` a vLLM engine frees its KV cache and weights during the update
and wakes before the next rollout.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from verlog import distributed as D
from verlog.config import TrainConfig
from verlog.lora import merged_named_parameters
from verlog.rollout.engine import RolloutEngine

__all__ = ["RolloutLifecycle", "make_rollout_engine"]


def make_rollout_engine(cfg: TrainConfig, path: str | Path, tokenizer: Any, *, rank: int) -> RolloutEngine:
    """The configured rollout engine (``rollout.engine``: ``hf`` or ``vllm``) on the model at ``path``,
    its sampling seeded with ``seed + rank``."""
    r = cfg.rollout
    if r.engine == "vllm":
        from verlog.rollout.vllm import VLLMEngine

        return VLLMEngine(str(path), dtype=cfg.model.dtype, max_model_len=cfg.memory.max_prompt_tokens + r.max_response_tokens,
                          seed=cfg.seed + rank, gpu_memory_utilization=r.vllm_gpu_memory_utilization,
                          tensor_parallel_size=r.vllm_tensor_parallel_size, cpu_kv_cache_gb=r.vllm_cpu_kv_cache_gb,
                          sleep_mode=r.vllm_sleep_between_updates, threads=cfg.threads)
    from verlog.rollout.hf import HFEngine

    dtype = torch.bfloat16 if cfg.model.dtype == "bfloat16" else torch.float32
    return HFEngine(path, tokenizer, dtype=dtype, device=str(D.device()), seed=cfg.seed + rank)


class RolloutLifecycle:
    """Sleep, weight sync and wake-up of a rollout engine around the updates.

    Args:
        engine: the rollout engine.
        sleep_between_updates: put the engine to sleep after each rollout (vLLM's sleep mode).
        lora: the actor carries LoRA adapters (their merged weights are loaded).
    """

    def __init__(self, engine: RolloutEngine, *, sleep_between_updates: bool, lora: bool) -> None:
        self.engine, self.sleep_between_updates, self.lora = engine, sleep_between_updates, lora

    def release(self) -> bool:
        """Before the update: free the engine's memory if configured. Returns whether it slept."""
        if self.sleep_between_updates:
            self.engine.sleep()
            return True
        return False

    def sync(self, actor_module: torch.nn.Module, collector: Any = None) -> None:
        """Load the actor's current weights into the engine; ``collector`` (if any) holds its requests meanwhile.

        A sleeping vLLM engine wakes its weights, loads, then its KV cache.
        """
        named = merged_named_parameters(actor_module) if self.lora else D.gathered_named_parameters(actor_module)
        with collector.weights_changing() if collector is not None else nullcontext():
            self.engine.load_weights(named)

    def resume(self) -> None:
        """Before the next rollout: wake an engine still asleep (after a critic warm-up, no new weights)."""
        if getattr(self.engine, "asleep", False):
            self.engine.wake_up()
