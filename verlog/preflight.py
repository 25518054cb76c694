"""Checks that a valid config can be built: every name it gives exists where it is looked up.

:func:`verlog.config.validate` checks values alone (types, ranges, choices); the names below are
checked here, once the config is loaded and before anything is built: the algorithm (its traits in
:data:`verlog.catalog.ALGORITHM_TRAITS` and what they require of the rest of the config), the
environment task, the tool task (an environment class given by import path and its rows too), the
proxy's credit mode, the proxy's agent function and the memory
class (``memory.type``); that the
reply prefix applies (text envs only, and a start of the format warm-up's replies); that ``resume``
names a run directory; and that the machine has the GPUs a recipe asks for.

Names are checked against the import-free lists of :mod:`verlog.catalog`, so a bad name is refused
within a second of the command; the heavy modules (env families, torch, an agent's module) are
imported only by the checks that need them: :func:`check_state_keys` and
:func:`check_distance_shaping` build an env, ``agent.agent`` imports the agent's module, an
environment class given as ``agent.task`` imports its module (and that of ``agent.dataset``).
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

from verlog.catalog import (AGENT_TASK_NAMES, ALGORITHM_TRAITS, CREDIT_MODES, MIXTURE_TASKS, OPENENV_PREFIX,
                            OPTIONAL_AGENT_TASKS, OPTIONAL_FAMILIES, REPLY_PREFIX, did_you_mean, env_names,
                            openenv_url)
from verlog.config import ConfigError, TrainConfig
from verlog.imports import is_import_path, module_exists

__all__ = ["check_agent_task", "check_algorithm", "check_buildable", "check_distance_shaping", "check_env_task",
           "check_external_env", "check_gpus", "check_memory_type", "check_reply_prefix", "check_resume", "check_state_keys",
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
    spec = ALGORITHM_TRAITS.get(algo.algorithm)
    if spec is None:
        raise ConfigError(f"algo.algorithm: expected one of {', '.join(ALGORITHM_TRAITS)}, got {algo.algorithm!r}"
                          f"{did_you_mean(algo.algorithm, ALGORITHM_TRAITS)}")
    warmup = cfg.ppo.critic_warmup_iterations
    if spec.needs_critic and warmup >= cfg.iterations:
        raise ConfigError(f"ppo.critic_warmup_iterations: {warmup} value-only iterations leave no policy update in "
                          f"iterations={cfg.iterations}; use iterations={warmup + 1} or more, or "
                          f"ppo.critic_warmup_iterations={cfg.iterations - 1} or less")
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
    if cfg.rollout.max_staleness and spec.policy_loss != "ppo":
        raise ConfigError(f"rollout.max_staleness: the stale-token correction weighs each token's advantage, which "
                          f"{algo.algorithm}'s sequence-ratio loss does not take; use 0 with {algo.algorithm}")


def check_state_keys(cfg: TrainConfig) -> None:
    """An algorithm that groups turns by exact state (GiGPO) needs an env that reports state keys;
    builds one env of ``env.task`` and resets it to find out (nothing to check otherwise).

    Raises:
        ConfigError: one line naming ``algo.algorithm`` and the env.
    """
    if not ALGORITHM_TRAITS[cfg.algo.algorithm].needs_state_keys or cfg.agent.loop != "env":
        return
    from verlog.envs.registry import make_env

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
    """``env.distance_shaping``, ``env.revisit_penalty`` and ``env.revisit_penalty_schedule`` need a
    training env that has them (a BabyAI task); builds one env of ``env.task`` with each that is on and
    resets it to find out (nothing to check when all are off). A schedule also needs the env's
    ``set_revisit_penalty``, which the trainer calls with each scheduled cost.

    Raises:
        ConfigError: one line naming the key and the task.
    """
    schedule = cfg.env.revisit_penalty_schedule
    if cfg.agent.loop != "env":
        if schedule:
            raise ConfigError(f"env.revisit_penalty_schedule: agent.loop {cfg.agent.loop} has no training envs "
                              "with a revisit cost; leave it empty")
        return
    from verlog.envs.registry import make_env

    kwargs = cfg.env.env_kwargs(shaping_gamma=cfg.gae.gamma_step)
    shaping = {"distance_shaping": {"distance_shaping", "shaping_gamma"}, "revisit_penalty": {"revisit_penalty"}}
    tries = [(name, own, {}) for name, own in shaping.items() if name in kwargs]
    if schedule:  # built with its cost, 0 or not: an env without one refuses the argument
        tries.append(("revisit_penalty_schedule", shaping["revisit_penalty"],
                      {"revisit_penalty": cfg.env.revisit_penalty}))
    for name, own, extra in tries:
        others = set().union(*shaping.values()) - own  # each is tried alone, so the message names the right key
        try:
            env = make_env(cfg.env.task, **{**{k: v for k, v in kwargs.items() if k not in others}, **extra})
        except TypeError:
            raise ConfigError(f"env.{name}: {cfg.env.task} has no {name.replace('_', ' ')} (BabyAI's tasks "
                              "have)") from None
        setter = None
        try:
            env.reset(seed=0)
            if name == "revisit_penalty_schedule":  # found as the vector env's call finds it, through wrappers
                try:
                    setter = env.get_wrapper_attr("set_revisit_penalty")
                except AttributeError:
                    setter = None  # refused below
                for cost in schedule.values() if setter is not None else ():
                    setter(cost)
        except ValueError as exc:
            raise ConfigError(f"env.{name}: {cfg.env.task}: {exc}") from None
        finally:
            env.close()
        if name == "revisit_penalty_schedule" and setter is None:
            raise ConfigError(f"env.{name}: {cfg.env.task} cannot change its revisit penalty during a run (it has "
                              "no set_revisit_penalty)")


def check_task_weights(cfg: TrainConfig) -> None:
    """``env.task_weights`` (when set) weighs the tasks of a task mixture: ``env.task`` must be one
    (:data:`verlog.catalog.MIXTURE_TASKS`) and the weights must name its tasks, be finite, non-negative
    and not all zero (:func:`verlog.envs.mixture.mixture_weights`, imported only then).

    Raises:
        ConfigError: one line naming ``env.task_weights``.
    """
    if not cfg.env.task_weights or cfg.agent.loop != "env":
        return
    tasks = MIXTURE_TASKS.get(cfg.env.task)
    if tasks is None:
        raise ConfigError(f"env.task_weights: {cfg.env.task} is not a task mixture (those are "
                          f"{', '.join(sorted(MIXTURE_TASKS))}); leave the weights empty")
    from verlog.envs.mixture import mixture_weights

    try:
        mixture_weights(tasks, cfg.env.task_weights)
    except ValueError as exc:
        raise ConfigError(f"env.task_weights: {exc}") from None


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


def check_memory_type(cfg: TrainConfig) -> None:
    """``memory.type`` names a built-in memory or an importable class that keeps the memory contract
    (:func:`verlog.memory.types.memory_class`: the user's module is imported; nothing is built).

    Raises:
        ConfigError: one line naming ``memory.type``.
    """
    from verlog.memory.types import memory_class

    try:
        memory_class(cfg.memory.type)
    except ValueError as exc:
        raise ConfigError(f"memory.type: {exc}") from None


def check_buildable(cfg: TrainConfig) -> None:
    """Check that the algorithm, environment, tool task, credit mode and agent function of ``cfg``
    exist (:func:`check_algorithm` included; :func:`check_state_keys` is separate: it builds an env).

    Environment names are those of :mod:`verlog.catalog` and any registered in this process already
    (:func:`verlog.envs.registry.register`); nothing is imported for them. Imports the module of
    ``agent.agent`` (agent loop ``proxy``) when it exists.

    Raises:
        ConfigError: one line naming the first offending key: ``agent.credit`` not a credit mode of
            :mod:`verlog.proxy.adapter`, ``env.task`` not a registered environment, ``agent.task`` or
            ``agent.dataset`` refused by :func:`check_agent_task`, ``agent.agent`` not a loadable function, a
            ``memory.reply_prefix`` that :func:`check_reply_prefix` refuses, ``env.task_weights`` that
            :func:`check_task_weights` refuses, an ``env.task`` that :func:`check_env_task` refuses, a
            ``memory.type`` that
            :func:`check_memory_type` refuses, or ``model.trainable_layers``
            beyond the model's layers (:func:`check_trainable_layers`).
    """
    check_algorithm(cfg)
    check_reply_prefix(cfg)
    check_memory_type(cfg)
    check_trainable_layers(cfg)
    if cfg.agent.credit not in CREDIT_MODES:
        raise ConfigError(f"agent.credit: expected one of {', '.join(CREDIT_MODES)}, got {cfg.agent.credit!r}")
    if cfg.agent.loop == "env":
        check_env_task(cfg.env.task)
    check_task_weights(cfg)
    if cfg.agent.loop != "env":
        check_agent_task(cfg)
    if cfg.agent.loop == "proxy":
        _check_agent_fn(cfg.agent.agent)


def check_agent_task(cfg: TrainConfig) -> None:
    """``agent.task`` names a built-in tool task, the import path of a row function whose rows an agent of
    ``agent.loop=proxy`` plays (:func:`_check_rows_task`), or the import path of an environment class in TRL's
    convention (:mod:`verlog.env_class`) run by ``agent.loop=tools``; then the class and its rows
    (``agent.dataset``) are checked without making an instance: the user's modules are imported, two
    rows are drawn (``(2, 0)``) and each must have a prompt that ``reset`` can take with the other
    columns.

    Raises:
        ConfigError: one line naming ``agent.task`` (an unknown name, a path that cannot be loaded, not
            a class, no ``reset`` or ``get_reward``, no public method, a method that cannot be a tool,
            a ``reset`` that cannot take the row's columns, a class with ``agent.loop=proxy``, a built-in
            task whose optional package is missing, with its install line) or
            ``agent.dataset`` (given with a built-in task, cannot be loaded or drawn from, a row
            without a usable prompt).
    """
    task, dataset = cfg.agent.task, cfg.agent.dataset
    if not is_import_path(task):
        if task not in AGENT_TASK_NAMES:
            raise ConfigError(f"agent.task: expected one of {', '.join(sorted(AGENT_TASK_NAMES))} or an import path "
                              f"package.module:Class, got {task!r}{did_you_mean(task, AGENT_TASK_NAMES)}")
        if dataset is not None:
            raise ConfigError(f"agent.dataset: rows are for an agent.task given as a class package.module:Class, "
                              f"not the built-in {task!r}; leave agent.dataset unset")
        modules, install = OPTIONAL_AGENT_TASKS.get(task, ((), ""))
        missing = [m for m in modules if not module_exists(m)]
        if missing:
            raise ConfigError(f"agent.task: {task} needs the {' and '.join(missing)} package"
                              f"{'s' if len(missing) > 1 else ''}, not installed: {install}")
        return
    from verlog.env_class import check_env_class, check_reset_takes, load_object, row_problem

    try:
        cls = load_object(task)
    except ValueError as exc:
        raise ConfigError(f"agent.task: {exc}") from None
    if not inspect.isclass(cls):
        _check_rows_task(cfg, task)
        return
    if cfg.agent.loop != "tools":
        raise ConfigError(f"agent.task: an environment class ({task}) runs with agent.loop=tools, not "
                          f"{cfg.agent.loop}")
    try:
        check_env_class(cls, task)
    except ValueError as exc:
        raise ConfigError(f"agent.task: {exc}") from None
    rows = _two_rows(dataset, "agent.dataset")
    for k, row in enumerate(rows):
        problem = row_problem(row)
        if problem is not None:
            raise ConfigError(f"agent.dataset: row {k} of {dataset}(2, 0) {problem}")
        try:
            check_reset_takes(cls, task, row)
        except ValueError as exc:
            raise ConfigError(f"agent.task: {exc}") from None


def _check_rows_task(cfg: TrainConfig, task: str) -> None:
    """``agent.task`` names a row function (:mod:`verlog.agent.rows_task`): its rows are played by the
    agent of ``agent.loop=proxy``, there is nothing to warm up on, and two rows must come out of
    ``(2, 0)``.

    Raises:
        ConfigError: one line naming ``agent.task``, ``agent.dataset`` or ``format_warmup.steps``.
    """
    if cfg.agent.loop != "proxy":
        raise ConfigError(f"agent.task: {task} is not a class; the rows of a row function are played by an agent of "
                          f"agent.loop=proxy, and agent.loop={cfg.agent.loop} needs an environment class "
                          "package.module:Class")
    if cfg.agent.dataset is not None:
        raise ConfigError(f"agent.dataset: {task} is a row function and gives the rows itself; leave agent.dataset "
                          "unset")
    if cfg.format_warmup.steps > 0:
        raise ConfigError(f"format_warmup.steps: the agent of the row function {task} writes its own replies, so "
                          "there are no scripts to warm up on; set format_warmup.steps=0")
    _two_rows(task, "agent.task")


def _two_rows(path: str | None, key: str) -> list:
    """The rows ``(2, 0)`` of the row source at ``path`` (:func:`verlog.env_class.row_source`; None: the
    empty-prompt rows).

    Raises:
        ConfigError: one line naming ``key``: the source cannot be loaded, returns the wrong rows, or raises.
    """
    from verlog.env_class import RowSourceError, row_source

    try:
        source = row_source(path)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    try:
        return source(2, 0)
    except RowSourceError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    except Exception as exc:  # the user's row function may raise anything
        raise ConfigError(f"{key}: {path}(2, 0) raised {type(exc).__name__}: {_one_line(exc)}") from None


def check_env_task(task: str) -> None:
    """``env.task`` names an environment: one of :mod:`verlog.catalog` or registered in this process
    (nothing imported; a family of :data:`~verlog.catalog.OPTIONAL_FAMILIES` must have its packages
    installed), an import path ``package.module:Name`` (its module must exist; it is then imported and
    registered), a task of an installed plugin family (the plugin is loaded), or an OpenEnv server
    ``openenv:<url>`` (the URL's form only: the server is first contacted when the env is built,
    :func:`check_external_env`).

    Raises:
        ConfigError: one line naming ``env.task``.
    """
    if task.startswith(OPENENV_PREFIX):
        try:
            openenv_url(task)
        except ValueError as exc:
            raise ConfigError(f"env.task: {exc}") from None
        if not module_exists("websockets"):
            raise ConfigError(f"env.task: {task} needs the websockets package, not installed: "
                              "pip install 'verlog[openenv]'")
        return
    if task in _env_names():
        modules, install = OPTIONAL_FAMILIES.get(task.partition("/")[0], ((), ""))
        missing = [m for m in modules if not module_exists(m)]
        if missing:
            raise ConfigError(f"env.task: {task} needs the {' and '.join(missing)} package"
                              f"{'s' if len(missing) > 1 else ''}, not installed: {install}")
        return
    family = task.partition("/")[0]
    if not is_import_path(task):
        from importlib.metadata import entry_points

        from verlog.catalog import ENTRY_POINT_GROUP, ENV_TASKS

        if family in ENV_TASKS or family not in {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}:
            raise ConfigError(f"env.task: expected a registered environment <family>/<task> or an import path "
                              f"package.module:Name, got {task!r}{did_you_mean(task, _env_names())}")
    elif not module_exists(task.partition(":")[0]):
        raise ConfigError(f"env.task: cannot load {task!r}: no module named {task.partition(':')[0]!r}")
    from verlog.envs.registry import EnvImportError, is_registered, registered_names

    try:
        found = is_registered(task)
    except EnvImportError as exc:
        raise ConfigError(f"env.task: {exc}") from None
    if not found:
        known = [n for n in registered_names() if n.startswith(family + "/")]
        raise ConfigError(f"env.task: {task!r} is not a task of the installed family {family!r} (its tasks: "
                          f"{', '.join(known) or 'none'}){did_you_mean(task, known)}")


def check_external_env(cfg: TrainConfig) -> None:
    """An environment from outside Verlog (import path, plugin family or OpenEnv server) keeps the gymnasium
    contract: one env is built with the run's arguments and checked by gymnasium's ``check_env`` (reset and
    step types, spaces, seeding); Verlog's own environments are tested in its suite and skipped here. For
    an OpenEnv server this is where it is first contacted.

    Raises:
        ConfigError: one line naming ``env.task``: the env cannot be built with the run's arguments (an
            OpenEnv server that does not answer included),
            it sets no step limit (``max_steps`` None with ``env.max_steps`` unset), or it breaks the
            contract.
    """
    from verlog.catalog import ENV_TASKS

    if cfg.agent.loop != "env" or cfg.env.task.partition("/")[0] in ENV_TASKS:
        return
    import warnings

    from gymnasium.utils.env_checker import check_env

    from verlog.envs.registry import make_env

    try:
        env = make_env(cfg.env.task, **cfg.env.env_kwargs(shaping_gamma=cfg.gae.gamma_step))
    except Exception as exc:  # the user's factory may raise anything
        raise ConfigError(f"env.task: {cfg.env.task} cannot be built with the run's arguments: "
                          f"{type(exc).__name__}: {_one_line(exc)}") from None
    if getattr(env.unwrapped, "max_steps", None) is None:
        env.close()
        raise ConfigError(f"env.task: {cfg.env.task} sets no step limit, and random play, warm-up and evaluation "
                          "run episodes to their end; set env.max_steps (or the env's max_steps)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # gymnasium's advice on spaces and seeding is not an error,
            # but an observation outside the text space (longer than OBS_MAX_CHARS, say) is
            warnings.filterwarnings("error", message=".*not within the observation space")
            check_env(env, skip_render_check=True)
    except Exception as exc:
        raise ConfigError(f"env.task: {cfg.env.task} breaks the gymnasium environment contract: "
                          f"{type(exc).__name__}: {_one_line(exc)}") from None
    finally:
        env.close()


def _one_line(exc: BaseException) -> str:
    """The exception's message on one line (whitespace runs joined), at most 300 characters."""
    return " ".join(str(exc).split())[:300]


def _env_names() -> list[str]:
    """The environment names of :mod:`verlog.catalog` and those registered in this process so far
    (without importing the registry)."""
    registry = sys.modules.get("verlog.envs.registry")
    return sorted({*env_names(), *(registry.registered_names() if registry is not None else ())})


def _check_agent_fn(path: str) -> None:
    """``agent.agent`` names a callable ``module:function``; a module that cannot be found is refused
    before anything is imported, an existing one is imported to find the function."""
    module, _, name = path.partition(":")
    if module and name:
        if not module_exists(module):
            raise ConfigError(f"agent.agent: cannot load {path!r}: no module named {module!r}")
    from verlog.agent.loading import load_agent_fn

    try:
        load_agent_fn(path)
    except ValueError as exc:
        raise ConfigError(f"agent.agent: {exc}") from None


def check_resume(cfg: TrainConfig) -> None:
    """``resume`` (when set) names an existing run directory, one with a ``checkpoints`` directory.

    Only that the directory is there is checked here, in milliseconds; the trainer picks its newest
    complete checkpoint (and refuses a run without one).

    Raises:
        ConfigError: one line naming ``resume``.
    """
    if cfg.resume is None:
        return
    run = Path(cfg.resume)
    if not run.is_dir():
        raise ConfigError(f"resume: no run directory at {run} (resume=<run_root>/<name> of an earlier run)")
    if not (run / "checkpoints").is_dir():
        raise ConfigError(f"resume: {run} is not a run directory (no checkpoints/ in it)")


def _gpu_devices_present() -> bool:
    """Whether a CUDA (or ROCm) device could be visible at all: a driver's device node exists and
    ``CUDA_VISIBLE_DEVICES`` does not hide every device. False is certain; True needs torch to count."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return any(Path(node).exists() for node in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/kfd"))


def check_gpus(cfg: TrainConfig, what: str) -> None:
    """The node has the ``gpus_per_node`` CUDA GPUs the recipe asks for (nothing to check for 0).

    Without a GPU device node the answer is known without importing torch; otherwise
    ``torch.cuda.device_count()`` counts them.

    Args:
        what: what asks for them, for the message (e.g. ``"recipe smollm2_goto"``).

    Raises:
        ConfigError: one line naming ``gpus_per_node`` and ``what``.
    """
    need = cfg.gpus_per_node
    if need <= 0:
        return
    found = 0
    if _gpu_devices_present():
        import torch

        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if found < need:
        raise ConfigError(f"gpus_per_node: {what} needs {need} CUDA GPU{'s' if need != 1 else ''} per node (see the "
                          f"recipe's header for GPU memory); this machine has {found}")


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
        if cache and kind not in _splittable_model_types():
            raise ConfigError(f"model.cache_frozen_activations: model type {kind!r} of {path} is not supported "
                              f"(supported: {', '.join(_splittable_model_types())})")
    if k < 0:
        raise ConfigError(f"model.trainable_layers: expected >= 0, got {k}")


def _splittable_model_types() -> tuple[str, ...]:
    """:data:`verlog.frozen_base.SPLITTABLE_MODEL_TYPES` (imported when asked: it imports torch)."""
    from verlog.frozen_base import SPLITTABLE_MODEL_TYPES

    return tuple(SPLITTABLE_MODEL_TYPES)
