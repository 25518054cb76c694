"""Checks that a valid config can be built: every name it gives exists where it is looked up.

:func:`verlog.config.validate` checks values alone (types, ranges, choices); the names below need
the registries of the layers above the config, so they are checked here, once the config is loaded
and before anything is built: the algorithm (its entry in :data:`verlog.algos.registry.ALGORITHMS`
and what the entry requires of the rest of the config), the environment task, the tool task, the
proxy's credit mode and the proxy's agent function; and that the reply prefix applies (text envs
only, and a start of the format warm-up's replies).
"""

from __future__ import annotations

from verlog.agent.loading import load_agent_fn
from verlog.agent.tasks import AGENT_TASKS
from verlog.algos.registry import ALGORITHMS
from verlog.config import ConfigError, TrainConfig
from verlog.envs.registry import accepts_argument, is_registered, make_env
from verlog.frozen_base import SPLITTABLE_MODEL_TYPES
from verlog.proxy.adapter import CREDIT_MODES
from verlog.warmup import REPLY_PREFIX

__all__ = ["check_algorithm", "check_buildable", "check_distance_shaping", "check_reply_prefix", "check_state_keys",
           "check_trainable_layers"]


def check_algorithm(cfg: TrainConfig) -> None:
    """Check ``algo.algorithm`` against the algorithm table and what its entry requires.

    Raises:
        ConfigError: one line naming the key: an algorithm not in the table; a critic warm-up that
            leaves no policy update; a group algorithm with ``algo.group_size`` < 2 or not dividing
            ``env.num_envs``; ``algo.dynamic_sampling`` without grouped rollouts; an algorithm that
            needs state keys on tool conversations (which report none).
    """
    algo = cfg.algo
    spec = ALGORITHMS.get(algo.algorithm)
    if spec is None:
        raise ConfigError(f"algo.algorithm: expected one of {', '.join(ALGORITHMS)}, got {algo.algorithm!r}")
    if spec.needs_critic and cfg.ppo.critic_warmup_iterations >= cfg.iterations:
        raise ConfigError(f"ppo.critic_warmup_iterations: {cfg.ppo.critic_warmup_iterations} leaves no policy update "
                          f"in {cfg.iterations} iterations")
    if spec.needs_state_keys and cfg.agent.loop != "env":
        raise ConfigError(f"algo.algorithm: {algo.algorithm} groups turns by exact environment state, which tool "
                          "conversations do not report; use grpo or another algorithm")
    if spec.grouped_rollouts:
        if algo.group_size < 2:
            raise ConfigError(f"algo.group_size: algorithm {algo.algorithm} compares episodes of a group and needs "
                              f">= 2, got {algo.group_size}")
        if cfg.env.num_envs % algo.group_size:
            raise ConfigError(f"algo.group_size: env.num_envs={cfg.env.num_envs} is not divisible by group size "
                              f"{algo.group_size}")
    elif algo.dynamic_sampling:
        raise ConfigError(f"algo.dynamic_sampling: needs a group algorithm, not {algo.algorithm}")


def check_state_keys(cfg: TrainConfig) -> None:
    """An algorithm that groups turns by exact state (GiGPO) needs an env that reports state keys;
    builds one env of ``env.task`` and resets it to find out (nothing to check otherwise).

    Raises:
        ConfigError: one line naming ``algo.algorithm`` and the env.
    """
    if not ALGORITHMS[cfg.algo.algorithm].needs_state_keys or cfg.agent.loop != "env":
        return
    env = make_env(cfg.env.task, **cfg.env.env_kwargs())
    try:
        env.reset(seed=0)
        env.unwrapped.state_key
    except NotImplementedError:
        raise ConfigError(f"algo.algorithm: {cfg.algo.algorithm} groups turns by exact game state, and {cfg.env.task} "
                          "does not report a state key (TextEnv.state_key); use grpo or another algorithm") from None
    finally:
        env.close()


def check_distance_shaping(cfg: TrainConfig) -> None:
    """``env.distance_shaping`` needs a training env that can measure it (a BabyAI go-to, pick-up or
    open task); builds one env of ``env.task`` with it and resets it to find out (nothing to check
    when it is off).

    Raises:
        ConfigError: one line naming ``env.distance_shaping`` and the task.
    """
    if not cfg.env.distance_shaping or cfg.agent.loop != "env":
        return
    try:
        env = make_env(cfg.env.task, **cfg.env.env_kwargs(shaping_gamma=cfg.gae.gamma_step))
    except TypeError:
        raise ConfigError(f"env.distance_shaping: {cfg.env.task} has no distance shaping (BabyAI's go-to, pick-up "
                          "and open tasks have)") from None
    try:
        env.reset(seed=0)
    except ValueError as exc:
        raise ConfigError(f"env.distance_shaping: {cfg.env.task}: {exc}") from None
    finally:
        env.close()


def check_reply_prefix(cfg: TrainConfig) -> None:
    """Check that ``memory.reply_prefix`` (when set) is used: only the memory of text environments
    builds prompts with it (the tool loop and the proxy render their own conversations), and a format
    warm-up on a text env teaches replies ``ACTION: <action>`` whose part after the prefix is the
    target, so the prefix must be a start of ``ACTION: ``.

    Raises:
        ConfigError: one line naming ``memory.reply_prefix``.
    """
    prefix = cfg.memory.reply_prefix
    if prefix is None:
        return
    if cfg.agent.loop != "env":
        raise ConfigError(f"memory.reply_prefix: agent.loop={cfg.agent.loop} renders its own conversations and does "
                          f"not use the memory's prompts; set memory.reply_prefix=null (got {prefix!r})")
    if cfg.format_warmup.steps > 0 and not REPLY_PREFIX.startswith(prefix):
        raise ConfigError(f"memory.reply_prefix: the format warm-up teaches replies {REPLY_PREFIX!r}<action>, which "
                          f"do not start with {prefix!r}; use a start of {REPLY_PREFIX!r} or format_warmup.steps=0")


def check_buildable(cfg: TrainConfig) -> None:
    """Check that the algorithm, environment, tool task, credit mode and agent function of ``cfg``
    exist (:func:`check_algorithm` included; :func:`check_state_keys` is separate: it builds an env).

    Imports the environment family of ``env.task`` (agent loop ``env``) and the module of
    ``agent.agent`` (agent loop ``proxy``).

    Raises:
        ConfigError: one line naming the first offending key: ``agent.credit`` not a credit mode of
            :mod:`verlog.proxy.adapter`, ``env.task`` not a registered environment, ``agent.task`` not
            a tool task of :mod:`verlog.agent.tasks`, ``agent.agent`` not a loadable function, an
            ``env.text_style`` other than ``balrog`` for an environment that has only BALROG's text, a
            ``memory.reply_prefix`` that :func:`check_reply_prefix` refuses, or ``model.trainable_layers``
            beyond the model's layers (:func:`check_trainable_layers`).
    """
    check_algorithm(cfg)
    check_reply_prefix(cfg)
    check_trainable_layers(cfg)
    if cfg.agent.credit not in CREDIT_MODES:
        raise ConfigError(f"agent.credit: expected one of {', '.join(CREDIT_MODES)}, got {cfg.agent.credit!r}")
    if cfg.agent.loop == "env" and not is_registered(cfg.env.task):
        raise ConfigError(f"env.task: expected a registered environment <family>/<task>, got {cfg.env.task!r}")
    if cfg.agent.loop == "env" and cfg.env.text_style != "balrog" and not accepts_argument(cfg.env.task, "text_style"):
        raise ConfigError(f"env.text_style: {cfg.env.task} has only BALROG's text; {cfg.env.text_style} is offered "
                          "by babyai/* and crafter/*")
    if cfg.agent.loop != "env" and cfg.agent.task not in AGENT_TASKS:
        raise ConfigError(f"agent.task: expected one of {', '.join(sorted(AGENT_TASKS))}, got {cfg.agent.task!r}")
    if cfg.agent.loop == "proxy":
        try:
            load_agent_fn(cfg.agent.agent)
        except ValueError as exc:
            raise ConfigError(f"agent.agent: {exc}") from None


def check_trainable_layers(cfg: TrainConfig) -> None:
    """``model.trainable_layers`` k must lie in 0..L, L the layer count of the model (and of
    ``model.critic_path`` when set): ``model.tiny.num_layers`` for the tiny model, else read from the
    source's config or GGUF header (:func:`~verlog.model_sources.model_shape`; a source that cannot be
    read is left to the loader). ``model.cache_frozen_activations`` needs ``model.trainable_layers`` and
    a model type :mod:`verlog.frozen_base` can split.

    Raises:
        ConfigError: one line naming ``model.trainable_layers`` or ``model.cache_frozen_activations``.
    """
    k, cache = cfg.model.trainable_layers, cfg.model.cache_frozen_activations
    if cache and k is None:
        raise ConfigError("model.cache_frozen_activations: needs model.trainable_layers (the frozen layers whose "
                          "output is kept)")
    if k is None:
        return
    if cfg.model.path == "tiny":
        shapes = {"tiny": ("qwen2", cfg.model.tiny.num_layers)}
    else:
        from verlog.model_sources import model_shape

        paths = dict.fromkeys(p for p in (cfg.model.path, cfg.model.critic_path) if p)
        shapes = {path: shape for path in paths if (shape := model_shape(path)) is not None}
    for path, (kind, layers) in shapes.items():
        if not 0 <= k <= layers:
            raise ConfigError(f"model.trainable_layers: expected 0..{layers} (the layers of {path}), got {k}")
        if cache and kind not in SPLITTABLE_MODEL_TYPES:
            raise ConfigError(f"model.cache_frozen_activations: model type {kind!r} of {path} is not supported "
                              f"(supported: {', '.join(SPLITTABLE_MODEL_TYPES)})")
    if k < 0:
        raise ConfigError(f"model.trainable_layers: expected >= 0, got {k}")
