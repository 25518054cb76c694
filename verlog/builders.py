"""Components built from a :class:`~verlog.config.TrainConfig`, shared by training and ``verlog-eval``:
the base model, the format warm-up, memories, decoding, the collector of the run, evaluation."""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from verlog import distributed as D
from verlog.agent.loading import load_agent_fn
from verlog.agent.loop import AgentLimits, ToolAgentLoop
from verlog.agent.scripted import scripted_examples
from verlog.agent.tasks import AgentTask, make_agent_task, with_tool_latency
from verlog.algos.registry import AlgorithmSpec
from verlog.config import MemoryConfig, RolloutConfig, TrainConfig
from verlog.envs.vector import make_vector_env
from verlog.evaluate import EvalResult, evaluate
from verlog.imports import is_import_path
from verlog.memory import Memory, memory_class
from verlog.model_sources import locate_model, resolve_model, source_kind
from verlog.models import ModelLoadError, load_actor, load_tokenizer
from verlog.rollout.collector import FixedTurnCollector
from verlog.rollout.conversations import ProxyCollector, ToolLoopCollector
from verlog.rollout.engine import RolloutEngine, SamplingParams
from verlog.rollout.episodes import EpisodeCollector
from verlog.rollout.records import EpisodeRecord
from verlog.rollout.server import EngineClient, EngineServer, ServedEngine
from verlog.tiny_model import build_tiny_model, build_tiny_vl_model
from verlog.training_models import train_top_layers
from verlog.vision import copy_image_processor
from verlog.warmup import WarmupExample, collect_prompts, env_corpus, format_warmup


def tiny_model_dir(cfg: TrainConfig) -> Path:
    """Where ``model.path=tiny`` keeps the tiny model of ``cfg.env.task`` (or of ``cfg.agent.task``
    for a tool task) under ``model.cache_dir`` (``/`` and ``:`` of the name written ``-``)."""
    name = f"agent-{cfg.agent.task}" if uses_agent(cfg) else cfg.env.task
    kind = "tiny-vl" if cfg.model.tiny.vision else "tiny"
    return Path(cfg.model.cache_dir) / f"{kind}-{name.replace('/', '-').replace(':', '-')}"


def uses_agent(cfg: TrainConfig) -> bool:
    """Whether conversations come from a tool task (``agent.loop`` tools or proxy), not text envs."""
    return cfg.agent.loop != "env"


def task_label(cfg: TrainConfig) -> str:
    """The task a run reports (``eval.json``, evaluation results): ``env.task``, or ``agent/<agent.task>``."""
    return f"agent/{cfg.agent.task}" if uses_agent(cfg) else cfg.env.task


def build_tiny_for(cfg: TrainConfig) -> Path:
    """Build (or reuse, see :func:`~verlog.tiny_model.build_tiny_model`) the tiny model of ``cfg``: its
    tokenizer is trained on ``model.tiny.corpus_episodes`` random-play episodes of ``cfg.env.task``
    (a tool task: that many items' warm-up conversations), in text mode (the full text observations).
    With ``model.tiny.vision`` it is the tiny vision-language model
    (:func:`~verlog.tiny_model.build_tiny_vl_model`).

    Returns:
        :func:`tiny_model_dir` of ``cfg``.
    """
    tiny = cfg.model.tiny
    if uses_agent(cfg):
        corpus = agent_task(cfg).corpus(tiny.corpus_episodes, tiny.seed)
    else:
        text_kwargs = {k: v for k, v in cfg.env.env_kwargs().items() if k not in ("observation_mode", "image_tile_px")}
        corpus = env_corpus(cfg.env.task, episodes=tiny.corpus_episodes, seed=tiny.seed, env_kwargs=text_kwargs)
    if tiny.vision:
        return build_tiny_vl_model(tiny_model_dir(cfg), corpus, seed=tiny.seed, vocab_size=tiny.vocab_size,
                                   hidden_size=tiny.hidden_size, num_layers=tiny.num_layers, num_heads=tiny.num_heads,
                                   num_kv_heads=tiny.num_kv_heads, intermediate_size=tiny.intermediate_size,
                                   vision_depth=tiny.vision_depth, vision_hidden_size=tiny.vision_hidden_size,
                                   vision_heads=tiny.vision_heads, patch_size=tiny.patch_size)
    return build_tiny_model(tiny_model_dir(cfg), corpus, seed=tiny.seed, vocab_size=tiny.vocab_size,
                            hidden_size=tiny.hidden_size, num_layers=tiny.num_layers, num_heads=tiny.num_heads,
                            num_kv_heads=tiny.num_kv_heads, intermediate_size=tiny.intermediate_size)


def check_model_sources(cfg: TrainConfig) -> None:
    """Fail fast, before any process group exists, when ``model.path`` or ``model.critic_path`` cannot be found
    (:func:`~verlog.model_sources.locate_model`: nothing is converted); a model directory or hub id given as
    ``model.path`` must also have a loadable tokenizer.

    Raises:
        ModelLoadError: one line naming the key.
    """
    for key, path in (("model.path", cfg.model.path), ("model.critic_path", cfg.model.critic_path)):
        if path is None or (key == "model.path" and path == "tiny"):
            continue
        try:
            located = locate_model(path)
            if key == "model.path" and source_kind(path) in ("local", "hub"):
                load_tokenizer(located)
        except ModelLoadError as err:
            raise ModelLoadError(f"{key}: {err}") from None


def _resolved(path: str, cfg: TrainConfig) -> str:
    """:func:`~verlog.model_sources.resolve_model` of ``path``, converted on rank 0 while the others wait."""
    if D.is_main():
        resolve_model(path, cfg.model.cache_dir)
    D.barrier()
    return resolve_model(path, cfg.model.cache_dir)


def base_model_path(cfg: TrainConfig) -> str | Path:
    """Where the run's base model is: the tiny model of the task (built on rank 0), or ``model.path`` resolved
    (:func:`~verlog.model_sources.resolve_model`: a GGUF file or packaged model is converted once, on rank 0,
    into ``model.cache_dir``)."""
    if cfg.model.path != "tiny":
        return _resolved(cfg.model.path, cfg)
    if D.is_main():
        build_tiny_for(cfg)
    D.barrier()
    return tiny_model_dir(cfg)


def critic_base_path(cfg: TrainConfig) -> str | None:
    """Where the critic's own backbone is: ``model.critic_path`` resolved as :func:`base_model_path` resolves
    ``model.path``, or None when the critic starts from the actor's weights."""
    return None if cfg.model.critic_path is None else _resolved(cfg.model.critic_path, cfg)


def run_format_warmup(cfg: TrainConfig, tokenizer: Any, make_memory: Callable[[], Any], base_path: str | Path,
                      out: Path) -> float | None:
    """Teach the reply format to the base model and save the result to ``out`` (rank 0; every rank waits).

    The examples are random-play prompts of ``env.task`` (or a tool task's scripted conversations),
    each with every valid reply (:mod:`verlog.warmup`).

    Returns:
        The warm-up's seconds on rank 0, None on the other ranks.
    """
    fw = cfg.format_warmup
    seconds = None
    if D.is_main():
        tic = time.perf_counter()
        model = load_actor(base_path)
        if cfg.model.trainable_layers is not None:  # the warm-up trains what the run trains
            train_top_layers(model, cfg.model.trainable_layers)
        if uses_agent(cfg):
            examples = agent_warmup_examples(cfg, tokenizer, items=fw.episodes, seed=cfg.seed + 77)
        else:
            examples = collect_prompts(cfg.env.task, make_memory, episodes=fw.episodes, seed=cfg.seed + 77,
                                       env_kwargs=cfg.env.env_kwargs())
        losses = format_warmup(model, lambda s: tokenizer.encode(s, add_special_tokens=False),
                               int(tokenizer.eos_token_id), int(tokenizer.pad_token_id), examples, steps=fw.steps,
                               batch_size=fw.batch_size, lr=fw.lr, seed=cfg.seed, progress=cfg.logging.progress,
                               prompt_lm_weight=fw.prompt_lm_weight)
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        copy_image_processor(tokenizer, tmp)  # a vision-language model's processor
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        seconds = time.perf_counter() - tic
        print(f"format warm-up: {fw.steps} steps on {len(examples)} prompts, target NLL "
              f"{losses[0]:.3f} -> {losses[-1]:.3f} nats/token ({seconds:.1f} s)", flush=True)
    D.barrier()
    return seconds


def make_collector(cfg: TrainConfig, spec: AlgorithmSpec, engine: RolloutEngine, tokenizer: Any, *,
                   make_memory: Callable[[], Any], seed: int) -> Any:
    """The run's :class:`~verlog.rollout.engine.Collector`: tool conversations (``agent.loop`` tools
    or proxy), whole episodes in groups (algorithms without a critic), or T x N turns (PPO).

    Args:
        seed: this rank's environment seed.
    """
    pad_id = int(tokenizer.pad_token_id)
    group_size = cfg.algo.group_size if not spec.needs_critic else 1
    if uses_agent(cfg):
        return make_agent_collector(cfg, engine, tokenizer, pad_id=pad_id, seed=seed, group_size=group_size)
    if cfg.rollout.server:  # the lock-step collectors send each turn's prompts as requests
        engine = ServedEngine(engine_client(cfg, engine))
    venv = make_vector_env(cfg.env.task, cfg.env.num_envs, seed=seed, mode=cfg.env.vector_mode,
                           env_kwargs=cfg.env.env_kwargs(shaping_gamma=cfg.gae.gamma_step), step_timeout_s=cfg.env.step_timeout_s,
                           restart_attempts=cfg.env.restart_attempts, state_keys=spec.needs_state_keys)
    memories = [make_memory() for _ in range(cfg.env.num_envs)]
    sampling = sampling_params(cfg.rollout)
    if not spec.needs_critic:  # whole episodes in groups sharing a start state
        return EpisodeCollector(venv, memories, engine, decoder(tokenizer), sampling, pad_id, seed=seed,
                                group_size=group_size, state_keys=spec.needs_state_keys)
    return FixedTurnCollector(venv, memories, engine, decoder(tokenizer), sampling, cfg.rollout.turns_per_env,
                              pad_id, seed=seed)


def evaluate_policy(cfg: TrainConfig, engine: RolloutEngine, tokenizer: Any, collector: Any, *,
                    greedy: bool, on_episode: Callable[[EpisodeRecord], None] | None = None) -> EvalResult:
    """Fixed-seed evaluation of the run's current policy: :func:`evaluate_config` on the text env, or
    :func:`evaluate_agent` through the run's own tool loop or agent.

    ``on_episode`` gets each episode's record as it ends (tool tasks: all of them at the end)."""
    if uses_agent(cfg):
        return evaluate_agent(cfg, collector, greedy=greedy, on_episode=on_episode)
    return evaluate_config(cfg, engine, tokenizer, greedy=greedy, on_episode=on_episode)


def eval_payload(cfg: TrainConfig, eval_results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``eval.json``: the task, the trained policy's greedy success (mean, standard error, episodes)
    on top, then every evaluation of the run by label (``untrained``, ``iter_<k>``, ``trained``)."""
    trained = eval_results.get("trained", {}).get("greedy")
    payload: dict[str, Any] = {"task": task_label(cfg)}
    if trained:
        payload.update({k: trained[k] for k in ("success_mean", "success_se", "episodes")})
    payload.update(eval_results)
    return payload


def memory_factory(memory: MemoryConfig, tokenizer: Any) -> Callable[[], Memory]:
    """A callable making a fresh per-environment memory as configured: the class ``memory.type`` names
    (:func:`~verlog.memory.types.memory_class`), built by its ``from_config(tokenizer, memory)``.

    Raises:
        ValueError: a ``memory.type`` that :func:`~verlog.memory.types.memory_class` refuses (preflight
            refuses it first, as one line).
    """
    cls = memory_class(memory.type)
    return lambda: cls.from_config(tokenizer, memory)


def sampling_params(rollout: RolloutConfig, *, greedy: bool = False) -> SamplingParams:
    """Decoding parameters of training rollouts (or greedy decoding with the same token limit)."""
    return SamplingParams(max_tokens=rollout.max_response_tokens, greedy=greedy, temperature=rollout.temperature,
                          top_p=rollout.top_p, top_k=rollout.top_k)


def decoder(tokenizer: Any) -> Callable[[list[list[int]]], list[str]]:
    """Response ids -> reply text for the environment (special tokens dropped)."""
    return lambda ids: tokenizer.batch_decode(ids, skip_special_tokens=True)


def evaluate_config(cfg: TrainConfig, engine: RolloutEngine, tokenizer: Any, *, greedy: bool,
                    on_episode: Callable[[EpisodeRecord], None] | None = None) -> EvalResult:
    """Fixed-seed evaluation of ``engine``'s policy on ``cfg.env.task`` with the run's memory and
    decoding limits (``cfg.eval``: episodes, first seed, parallel envs); sampled decoding is seeded
    from ``cfg.eval.seed``, so the result is reproducible. ``on_episode``: see :func:`evaluate`."""
    e = cfg.eval
    # Seeded sampling: evaluating never shifts the training rollouts' random stream.
    sampling = replace(sampling_params(cfg.rollout, greedy=greedy), seed=e.seed)
    return evaluate(engine, decoder(tokenizer), memory_factory(cfg.memory, tokenizer), task=cfg.env.task,
                    episodes=e.episodes, seed=e.seed, num_envs=e.num_envs, sampling=sampling,
                    env_kwargs=cfg.env.env_kwargs(), on_episode=on_episode)


# ---------------------------------------------------------------------- tool tasks (agent.loop tools/proxy)
def agent_task(cfg: TrainConfig) -> AgentTask:
    """The tool task ``agent.task`` of ``cfg``: a built-in one (with its keys,
    :meth:`~verlog.config.AgentConfig.task_kwargs`) or an environment class by import path (with its
    rows from ``agent.dataset``)."""
    if is_import_path(cfg.agent.task):
        return make_agent_task(cfg.agent.task, dataset=cfg.agent.dataset)
    return make_agent_task(cfg.agent.task, **cfg.agent.task_kwargs())


def agent_limits(cfg: TrainConfig) -> AgentLimits:
    """The tool loop's limits: ``rollout.max_response_tokens`` per turn and the ``agent`` limits."""
    a = cfg.agent
    return AgentLimits(max_response_tokens=cfg.rollout.max_response_tokens, max_total_tokens=a.max_total_tokens,
                       max_assistant_turns=a.max_assistant_turns, max_tool_response_chars=a.max_tool_response_chars)


def agent_warmup_examples(cfg: TrainConfig, tokenizer: Any, *, items: int, seed: int) -> list[WarmupExample]:
    """The format warm-up's examples of a tool task: ``items`` items' warm-up scripts run through the
    tool loop (:func:`~verlog.agent.scripted.scripted_examples`), so the prompts are the loop's own.
    Each script runs on a conversation of its own (``task.start``), so no script sees another's state."""
    task, limits = agent_task(cfg), agent_limits(cfg)

    async def run() -> list[WarmupExample]:
        out: list[WarmupExample] = []
        for item in task.format_warmup_items(items, seed):
            def make_loop(engine: Any, item: Any = item) -> ToolAgentLoop:
                return ToolAgentLoop(engine, tokenizer, task.start(item).tools, limits=limits, check_template=False)

            messages = task.start(item).messages
            out += await scripted_examples(tokenizer, make_loop, messages, task.warmup_scripts(item))
        return out

    return asyncio.run(run())


def make_agent_collector(cfg: TrainConfig, engine: Any, tokenizer: Any, *, pad_id: int, seed: int,
                         group_size: int) -> ToolLoopCollector | ProxyCollector:
    """The collector of ``agent.loop``: the built-in tool loop, or ``agent.agent`` through the proxy."""
    common = dict(num_envs=cfg.env.num_envs, group_size=group_size, seed=seed, pad_id=pad_id,
                  sampling=sampling_params(cfg.rollout))
    if cfg.agent.loop == "tools":
        task = with_tool_latency(agent_task(cfg), cfg.agent.tool_latency_s)
        client = engine_client(cfg, engine) if cfg.rollout.server else None
        return ToolLoopCollector(task, engine, tokenizer, agent_limits(cfg), client=client, **common)
    return ProxyCollector(agent_task(cfg), engine, tokenizer, load_agent_fn(cfg.agent.agent),
                          max_response_tokens=cfg.rollout.max_response_tokens, credit=cfg.agent.credit,
                          gamma=cfg.agent.credit_gamma, **common)


def engine_client(cfg: TrainConfig, engine: RolloutEngine) -> EngineClient:
    """``rollout.server``: a started client over one :class:`~verlog.rollout.server.EngineServer` on
    this rank's engine (``rollout.server_max_batch`` prompts per call at most); the collector stops it."""
    return EngineClient([EngineServer(engine, max_batch=cfg.rollout.server_max_batch)]).start()


def evaluate_agent(cfg: TrainConfig, collector: ToolLoopCollector | ProxyCollector, *, greedy: bool,
                   on_episode: Callable[[EpisodeRecord], None] | None = None) -> EvalResult:
    """Fixed evaluation of a tool task: ``eval.episodes`` items made from ``eval.seed`` (never
    training's; a task with a held-out evaluation set gives its first ``eval.episodes``), one conversation each through the run's own loop or agent; success = the task's
    success reward reached. ``on_episode`` gets every record once all conversations have ended."""
    e = cfg.eval
    items = agent_task(cfg).evaluation_items(e.episodes, e.seed)
    records = collector.evaluate(items, greedy=greedy, seed=e.seed)
    for record in records if on_episode is not None else ():
        on_episode(record)
    return EvalResult.from_records(task_label(cfg), records, greedy=greedy)
