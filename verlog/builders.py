"""Components built from a :class:`~verlog.config.TrainConfig`, shared by training and ``verlog-eval``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from verlog.config import MemoryConfig, RolloutConfig, TrainConfig
from verlog.evaluate import EvalResult, evaluate
from verlog.memory import WindowMemory
from verlog.models import build_tiny_model
from verlog.rollout.engine import RolloutEngine, SamplingParams
from verlog.warmup import env_corpus


def tiny_model_dir(cfg: TrainConfig) -> Path:
    """Where ``model.path=tiny`` keeps the tiny model of ``cfg.env.task`` (under ``model.cache_dir``)."""
    return Path(cfg.model.cache_dir) / f"tiny-{cfg.env.task.replace('/', '-')}"


def build_tiny_for(cfg: TrainConfig) -> Path:
    """Build (or reuse, see :func:`~verlog.models.build_tiny_model`) the tiny model of ``cfg``: its
    tokenizer is trained on ``model.tiny.corpus_episodes`` random-play episodes of ``cfg.env.task``.

    Returns:
        :func:`tiny_model_dir` of ``cfg``.
    """
    tiny = cfg.model.tiny
    corpus = env_corpus(cfg.env.task, episodes=tiny.corpus_episodes, seed=tiny.seed, env_kwargs=cfg.env.env_kwargs())
    return build_tiny_model(tiny_model_dir(cfg), corpus, seed=tiny.seed, vocab_size=tiny.vocab_size,
                            hidden_size=tiny.hidden_size, num_layers=tiny.num_layers, num_heads=tiny.num_heads,
                            num_kv_heads=tiny.num_kv_heads, intermediate_size=tiny.intermediate_size)


def memory_factory(memory: MemoryConfig, tokenizer: Any) -> Callable[[], WindowMemory]:
    """A callable making a fresh per-environment memory as configured."""
    return lambda: WindowMemory(tokenizer, history_turns=memory.history_turns,
                                max_prompt_tokens=memory.max_prompt_tokens, reply_hint=memory.reply_hint)


def sampling_params(rollout: RolloutConfig, *, greedy: bool = False) -> SamplingParams:
    """Decoding parameters of training rollouts (or greedy decoding with the same token limit)."""
    return SamplingParams(max_tokens=rollout.max_response_tokens, greedy=greedy, temperature=rollout.temperature,
                          top_p=rollout.top_p, top_k=rollout.top_k)


def decoder(tokenizer: Any) -> Callable[[list[list[int]]], list[str]]:
    """Response ids -> reply text for the environment (special tokens dropped)."""
    return lambda ids: tokenizer.batch_decode(ids, skip_special_tokens=True)


def evaluate_config(cfg: TrainConfig, engine: RolloutEngine, tokenizer: Any, *, greedy: bool) -> EvalResult:
    """Fixed-seed evaluation of ``engine``'s policy on ``cfg.env.task`` with the run's memory and
    decoding limits (``cfg.eval``: episodes, first seed, parallel envs); sampled decoding is seeded
    from ``cfg.eval.seed``, so the result is reproducible."""
    e = cfg.eval
    # Seeded sampling: evaluating never shifts the training rollouts' random stream.
    sampling = replace(sampling_params(cfg.rollout, greedy=greedy), seed=e.seed)
    return evaluate(engine, decoder(tokenizer), memory_factory(cfg.memory, tokenizer), task=cfg.env.task,
                    episodes=e.episodes, seed=e.seed, num_envs=e.num_envs, sampling=sampling,
                    env_kwargs=cfg.env.env_kwargs())
