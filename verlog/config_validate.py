"""The value rules of a run configuration: choices, ranges and cross-field constraints.

Pure data and pure functions: :func:`first_problem` reads a :class:`~verlog.config.TrainConfig`
and returns its first problem as one line naming the key, or None; :func:`verlog.config.validate`
raises it as a ``ConfigError``. Whether the names a config gives exist (an algorithm of the
algorithm table, a registered environment, a known tool task, a loadable agent function) and the
rules that depend on them are checked by :mod:`verlog.preflight`, which needs the registries.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterator

from verlog.imports import is_import_path

__all__ = ["AGENT_LOOPS", "ENV_ARGUMENTS_OF_KEYS", "INT_MAX", "MEMORY_TYPE_NAMES", "SEED_MAX", "first_problem"]

AGENT_LOOPS = ("env", "tools", "proxy")
#: The built-in ``memory.type`` names (the classes are in :data:`verlog.memory.MEMORY_TYPES`).
MEMORY_TYPE_NAMES = ("none", "window", "full", "summary", "vision")

_CHOICES = {
    "model.dtype": ("float32", "bfloat16"),
    "env.vector_mode": ("async", "sync"),
    "env.instruction_style": ("full", "brief"),
    "env.text_style": ("balrog", "tidy"),
    "env.observation_mode": ("text", "image", "both"),
    "rollout.engine": ("hf", "vllm"),
    "ppo.kl_kind": ("k1", "k2", "k3"),
    "logging.wandb_mode": ("offline", "online", "disabled"),
    "algo.norm": ("mean_std", "mean"),
    "agent.loop": AGENT_LOOPS,
    "algo.loss_aggregation": ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum"),
    "deepspeed.offload_optimizer": ("none", "cpu"),
    "deepspeed.offload_param": ("none", "cpu"),
}
_POSITIVE = (
    "iterations", "threads", "env.num_envs", "rollout.turns_per_env", "rollout.max_response_tokens",
    "memory.max_prompt_tokens", "ppo.epochs", "ppo.minibatches", "ppo.micro_batch_size", "eval.episodes",
    "eval.num_envs", "format_warmup.batch_size", "model.tiny.vocab_size", "env.restart_attempts",
    "ppo.actor_lr", "ppo.critic_lr", "ppo.behaviour_weight_cap", "ppo.max_grad_norm", "format_warmup.lr", "model.tiny.hidden_size",
    "model.tiny.num_layers", "model.tiny.num_heads", "model.tiny.num_kv_heads", "model.tiny.intermediate_size",
    "model.tiny.corpus_episodes", "rollout.vllm_gpu_memory_utilization", "rollout.vllm_tensor_parallel_size",
    "algo.group_size", "algo.std_eps", "algo.overlong_cache_tokens", "agent.max_assistant_turns",
    "agent.max_total_tokens", "agent.max_tool_response_chars", "memory.summary_turns", "env.image_tile_px",
    "model.tiny.vision_depth", "model.tiny.vision_hidden_size", "model.tiny.vision_heads", "model.tiny.patch_size",
    "rollout.server_max_batch",
)
_NON_NEGATIVE = (
    "memory.history_turns", "ppo.critic_warmup_iterations", "ppo.max_skipped_steps", "format_warmup.steps", "checkpoint_every",
    "checkpoint_keep",
    "turn_budget", "algo.max_refills", "gpus_per_node", "model.lora_rank", "model.lora_dropout",
    "ppo.micro_batch_tokens",
    "eval.every", "ppo.entropy_coef", "ppo.kl_coef", "ppo.clip_low", "ppo.clip_high", "rollout.temperature",
    "ppo.weight_decay", "ppo.value_coef", "seed", "eval.seed", "model.tiny.seed", "format_warmup.episodes",
    "rollout.vllm_cpu_kv_cache_gb", "model.value_head_init_std", "algo.gigpo_omega", "algo.overlong_penalty_factor",
    "env.distance_shaping", "memory.max_images", "agent.tool_latency_s", "format_warmup.prompt_lm_weight",
    "env.revisit_penalty",
)
#: Optional keys that must be positive when set.
_POSITIVE_OR_NONE = ("ppo.target_kl", "ppo.value_clip", "env.step_timeout_s", "env.max_steps")
#: Seeds feed numpy's legacy seeding (0..2**32-1); every other int feeds torch/numpy int64 at most.
_SEEDS = ("seed", "eval.seed", "model.tiny.seed")
SEED_MAX = 2**32 - 1
INT_MAX = 2**63 - 1
_UNIT_INTERVAL = ("gae.gamma_step", "gae.lam_step", "gae.gamma_token", "gae.lam_token", "rollout.top_p",
                  "algo.gigpo_gamma", "algo.reinforce_pp_gamma", "agent.credit_gamma", "env.shaping_gamma")


def _get(cfg: Any, key: str) -> Any:
    obj: Any = cfg
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def _leaves(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf value of a nested config dataclass as ``(dotted key, value)``, in field order."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _leaves(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", value


def _table_problem(cfg: Any) -> str | None:
    """The first key that breaks the finite / choice / range tables."""
    for key, value in _leaves(cfg):
        if isinstance(value, float) and not math.isfinite(value):
            return f"{key}: expected a finite number, got {value!r}"
        limit = SEED_MAX if key in _SEEDS else INT_MAX
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > limit:
            what = "a seed in 0..2**32-1 (numpy's seed range)" if key in _SEEDS else "an integer within int64 (|x| < 2**63)"
            return f"{key}: expected {what}, got {value}"
    for key, choices in _CHOICES.items():
        if _get(cfg, key) not in choices:
            return f"{key}: expected one of {', '.join(choices)}, got {_get(cfg, key)!r}"
    for key in _POSITIVE:
        if _get(cfg, key) <= 0:
            return f"{key}: expected a positive number, got {_get(cfg, key)!r}"
    for key in _NON_NEGATIVE:
        if _get(cfg, key) < 0:
            return f"{key}: expected a non-negative number, got {_get(cfg, key)!r}"
    for key in _UNIT_INTERVAL:
        if _get(cfg, key) is not None and not 0.0 <= _get(cfg, key) <= 1.0:
            return f"{key}: expected a number in [0, 1], got {_get(cfg, key)!r}"
    for key in _POSITIVE_OR_NONE:
        if _get(cfg, key) is not None and _get(cfg, key) <= 0:
            return f"{key}: expected a positive number or null, got {_get(cfg, key)!r}"
    return None


def _name_problem(name: str) -> str | None:
    """``name`` must be one path component, so the run stays inside ``run_root``."""
    if name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
        return (f"name: expected a plain directory name inside run_root (no '/', '..' or absolute path), "
                f"got {name!r}")
    return None


def _cross_field_problem(cfg: Any) -> str | None:
    """The first broken rule that ties several keys together (engine, model shape, batch split)."""
    rollout, tiny = cfg.rollout, cfg.model.tiny
    if rollout.vllm_gpu_memory_utilization > 1:
        return ("rollout.vllm_gpu_memory_utilization: expected a fraction in (0, 1], "
                f"got {rollout.vllm_gpu_memory_utilization}")
    if rollout.max_staleness not in (0, 1):
        return f"rollout.max_staleness: expected 0 (synchronous) or 1, got {rollout.max_staleness}"
    if rollout.max_staleness and rollout.vllm_sleep_between_updates:
        return ("rollout.max_staleness: 1 generates during the update, when vLLM's sleep mode has freed the engine; "
                "set rollout.vllm_sleep_between_updates=false")
    tempered = rollout.temperature not in (0.0, 1.0) or any(t != 1.0 for t in rollout.temperature_schedule.values())
    if rollout.max_staleness and rollout.engine == "vllm" and tempered:
        return ("rollout.max_staleness: the stale-token weights need the engine's logprobs at the sampling "
                "temperature, and vLLM's are at 1; use rollout.temperature 1 without a temperature_schedule, "
                "or rollout.engine=hf")
    if rollout.vllm_sleep_between_updates and rollout.engine != "vllm":
        return ("rollout.vllm_sleep_between_updates: needs rollout.engine=vllm "
                f"(got {rollout.engine!r}, which has no sleep mode)")
    if rollout.server and cfg.agent.loop == "proxy":
        return ("rollout.server: the proxy batches its own requests; use it with agent.loop env or tools, "
                "got agent.loop=proxy")
    if rollout.server and cfg.env.observation_mode != "text" and cfg.agent.loop == "env":
        return ("rollout.server: the engine server takes token ids only; image observations need it off "
                f"(got env.observation_mode={cfg.env.observation_mode})")
    if rollout.top_k != -1 and rollout.top_k < 1:
        return f"rollout.top_k: expected -1 (off) or a positive int, got {rollout.top_k}"
    if tiny.hidden_size % tiny.num_heads or tiny.num_heads % tiny.num_kv_heads or (tiny.hidden_size // tiny.num_heads) % 2:
        return (f"model.tiny.num_heads: expected to divide model.tiny.hidden_size ({tiny.hidden_size}) into an even head dim "
                f"and be a multiple of model.tiny.num_kv_heads ({tiny.num_kv_heads}), got {tiny.num_heads}")
    if not 0 <= cfg.deepspeed.zero_stage <= 3:
        return f"deepspeed.zero_stage: expected 0, 1, 2 or 3, got {cfg.deepspeed.zero_stage}"
    if cfg.deepspeed.offload_optimizer != "none" and cfg.deepspeed.zero_stage == 0:
        return ("deepspeed.offload_optimizer: needs deepspeed.zero_stage 1, 2 or 3 (ZeRO offloads the optimizer "
                "states it partitions), got 0")
    if cfg.deepspeed.offload_param != "none" and cfg.deepspeed.zero_stage != 3:
        return ("deepspeed.offload_param: needs deepspeed.zero_stage 3 (only ZeRO-3 partitions the parameters), "
                f"got {cfg.deepspeed.zero_stage}")
    if cfg.model.cache_frozen_activations and cfg.ppo.gradient_checkpointing:
        return ("model.cache_frozen_activations: not with ppo.gradient_checkpointing (the top layers would get "
                "inputs that require no grad); the frozen layers keep no activations anyway")
    if cfg.model.cache_frozen_activations and cfg.deepspeed.zero_stage == 3:
        return ("model.cache_frozen_activations: needs deepspeed.zero_stage 0-2 (ZeRO-3 partitions the layers "
                "it would run in two parts)")
    if problem := _memory_type_problem(cfg.memory.type):
        return problem
    if cfg.memory.reply_prefix == "":
        return "memory.reply_prefix: expected a non-empty text or null (off), got ''"
    if problem := _schedules_problem(cfg):
        return problem
    if cfg.ppo.dual_clip is not None and cfg.ppo.dual_clip <= 1.0:
        return f"ppo.dual_clip: expected a number > 1 or null, got {cfg.ppo.dual_clip}"
    turns = rollout.turns_per_env * cfg.env.num_envs
    if turns % cfg.ppo.minibatches:
        return (f"ppo.minibatches: the batch of {turns} turns (rollout.turns_per_env x env.num_envs) "
                f"is not divisible by {cfg.ppo.minibatches}")
    return None


def _schedule_problem(key: str, schedule: dict, what: str, ok: Callable[[float], bool]) -> str | None:
    """An ``{iteration: value}`` schedule: iterations >= 1 as keys, values numbers that ``ok`` accepts
    (``what`` names them in the message)."""
    for it, value in schedule.items():
        if isinstance(it, bool) or not isinstance(it, int) or it < 1:
            return f"{key}: expected iterations >= 1 as keys, got {it!r}"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
            return f"{key}: expected {what}, got {value!r} at iteration {it}"
    return None


def _schedules_problem(cfg: Any) -> str | None:
    """``gae.gamma_step_schedule``: discounts in [0, 1]; with distance shaping, the envs' shaping discount
    must be fixed (``env.shaping_gamma``): the envs are built once and cannot follow it.
    ``ppo.kl_coef_schedule``: KL weights >= 0; ``ppo.actor_lr_schedule``: learning rates > 0.
    ``env.revisit_penalty_schedule``: costs >= 0 (whether the envs have the cost is checked by
    :func:`verlog.preflight.check_distance_shaping`).
    ``rollout.temperature_schedule``: temperatures > 0 (a tempered distribution to train)."""
    schedule = cfg.gae.gamma_step_schedule
    if problem := _schedule_problem("gae.gamma_step_schedule", schedule, "discounts in [0, 1]",
                                    lambda g: 0.0 <= g <= 1.0):
        return problem
    if schedule and cfg.env.distance_shaping and cfg.env.shaping_gamma is None:
        return ("gae.gamma_step_schedule: with env.distance_shaping, set env.shaping_gamma (the envs' shaping "
                "discount is fixed when they are built and cannot follow the schedule)")
    if problem := _schedule_problem("ppo.kl_coef_schedule", cfg.ppo.kl_coef_schedule, "KL weights >= 0",
                                    lambda k: 0.0 <= k and math.isfinite(k)):
        return problem
    if problem := _schedule_problem("ppo.actor_lr_schedule", cfg.ppo.actor_lr_schedule, "learning rates > 0",
                                    lambda lr: 0.0 < lr and math.isfinite(lr)):
        return problem
    if problem := _schedule_problem("env.revisit_penalty_schedule", cfg.env.revisit_penalty_schedule,
                                    "costs >= 0", lambda c: 0.0 <= c and math.isfinite(c)):
        return problem
    return _schedule_problem("rollout.temperature_schedule", cfg.rollout.temperature_schedule,
                             "temperatures > 0", lambda t: t > 0.0 and math.isfinite(t))


def _memory_type_problem(type_name: Any) -> str | None:
    """``memory.type`` is a built-in memory or has the form ``module.path:ClassName`` (whether that
    class exists and keeps the memory contract is checked by :func:`verlog.preflight.check_memory_type`)."""
    if type_name in MEMORY_TYPE_NAMES or is_import_path(type_name):
        return None
    return (f"memory.type: expected one of {', '.join(MEMORY_TYPE_NAMES)} or a class as module.path:ClassName, "
            f"got {type_name!r}")


#: The env factory arguments that config keys of their own set (``env.kwargs`` may not repeat them).
ENV_ARGUMENTS_OF_KEYS = {"format_penalty": "env.format_penalty", "max_steps": "env.max_steps",
                         "instruction_style": "env.instruction_style", "text_style": "env.text_style",
                         "task_weights": "env.task_weights", "distance_shaping": "env.distance_shaping",
                         "observation_mode": "env.observation_mode", "image_tile_px": "env.image_tile_px",
                         "shaping_gamma": "env.shaping_gamma", "revisit_penalty": "env.revisit_penalty"}


def _env_kwargs_problem(kwargs: Any) -> str | None:
    """``env.kwargs`` names are identifiers and none is an argument another key sets."""
    for name in kwargs:
        if not str(name).isidentifier():
            return f"env.kwargs: {name!r} is not a keyword argument name"
        if name in ENV_ARGUMENTS_OF_KEYS:
            return f"env.kwargs: {name} is set by {ENV_ARGUMENTS_OF_KEYS[name]}; set it there"
    return None


def _agent_problem(cfg: Any) -> str | None:
    """The first broken rule of the ``agent`` section when a tool task is used."""
    agent = cfg.agent
    if agent.max_operand < 2:
        return f"agent.max_operand: expected an integer >= 2, got {agent.max_operand}"
    if agent.top_k < 1:
        return f"agent.top_k: expected an integer >= 1, got {agent.top_k}"
    if agent.warmup_worlds < 0:
        return f"agent.warmup_worlds: expected an integer >= 0, got {agent.warmup_worlds}"
    if agent.credit_gamma <= 0:
        return f"agent.credit_gamma: expected a number in (0, 1], got {agent.credit_gamma}"
    return None


def _algo_problem(cfg: Any) -> str | None:
    """The first broken rule of the ``algo`` section that needs no algorithm table (the rules that do
    are checked by :func:`verlog.preflight.check_buildable`)."""
    algo = cfg.algo
    if algo.overlong_penalty and algo.overlong_cache_tokens > cfg.rollout.max_response_tokens:
        return (f"algo.overlong_cache_tokens: {algo.overlong_cache_tokens} exceeds rollout.max_response_tokens="
                f"{cfg.rollout.max_response_tokens}")
    return None


def first_problem(cfg: Any) -> str | None:
    """The first value problem of ``cfg`` (a :class:`~verlog.config.TrainConfig`), or None.

    Order: non-finite numbers and integers out of their range (seeds 0..2**32-1, others int64), choices,
    ranges, the run name, cross-field rules, the ``agent`` section (tool
    loops only), LoRA with ZeRO-3, the ``algo`` section.

    Returns:
        one line that starts with the offending key, or None when every rule holds.
    """
    problem = (_table_problem(cfg) or _name_problem(cfg.name) or _cross_field_problem(cfg)
               or _env_kwargs_problem(cfg.env.kwargs))
    if problem is None and cfg.agent.loop != "env":
        problem = _agent_problem(cfg)
    if problem is None and cfg.model.lora_rank and cfg.deepspeed.zero_stage == 3:
        problem = ("model.lora_rank: LoRA is not supported with deepspeed.zero_stage=3 yet (use 0-2: the "
                   "adapters are small, so ZeRO-3's parameter partitioning gains little)")
    return problem or _algo_problem(cfg) or _vision_problem(cfg)


#: The env families whose games can show images (``env.observation_mode`` image or both).
IMAGE_FAMILIES = ("babyai", "sokoban")


def _vision_problem(cfg: Any) -> str | None:
    """Image observations and the vision memory go together, and with what the vision path supports."""
    images = cfg.env.observation_mode != "text"
    if images and cfg.memory.type != "vision":
        return (f"env.observation_mode: {cfg.env.observation_mode} observations need memory.type=vision (got "
                f"{cfg.memory.type!r}, which shows text only)")
    if cfg.memory.type == "vision" and not images:
        return "memory.type: vision needs env.observation_mode image or both (the env shows no images)"
    if images and cfg.env.task.partition("/")[0] not in IMAGE_FAMILIES:
        return (f"env.observation_mode: image observations exist for {', '.join(f'{f}/*' for f in IMAGE_FAMILIES)} "
                f"tasks only, got {cfg.env.task!r}")
    if cfg.memory.type == "vision" and cfg.rollout.engine == "vllm":
        return ("rollout.engine: vllm does not generate from images yet (its Qwen2-VL models need torchvision, and "
                "prompts with pixel values are not wired); use hf with memory.type=vision")
    if cfg.memory.type == "vision" and cfg.model.cache_frozen_activations:
        return "model.cache_frozen_activations: not with memory.type=vision (images enter below the split)"
    tiny = cfg.model.tiny
    if tiny.vision and ((tiny.hidden_size // tiny.num_heads) % 16 or tiny.vision_hidden_size % tiny.vision_heads
                        or (tiny.vision_hidden_size // tiny.vision_heads) % 4):
        return (f"model.tiny.vision: needs a head dim (hidden_size / num_heads) divisible by 16 and a vision head dim "
                f"(vision_hidden_size / vision_heads) divisible by 4, got {tiny.hidden_size // tiny.num_heads} and "
                f"{tiny.vision_hidden_size / tiny.vision_heads:g}")
    return None
