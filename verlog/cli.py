"""Command-line entry points: ``verlog-train``, ``verlog-eval``, ``verlog-plot`` and ``verlog-serve-env`` (thin:
parse, build, run).

Every malformed recipe, override or argument exits with status 2 and one line on stderr naming the
key and what was expected.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any, NoReturn

from verlog.config import ConfigError, TrainConfig, field_docs, load_recipe, section_docs


def _fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, no usage dump
        _fail(message)


def _config_help(width: int = 100) -> str:
    """The config keys, section by section: a heading per section, then one entry per key (its doc,
    type and default), wrapped to ``width`` columns."""
    sections = section_docs()
    lines = ["config keys (override with key=value; a recipe sets them as nested YAML):"]
    current = None
    for key, typ, default, doc in field_docs():
        section = key.rpartition(".")[0]
        if section != current:
            current = section
            lines += ["", f"{section or 'run'}: {sections.get(section, 'the run itself')}"]
        text = f"{doc} [{typ.replace('typing.', '')}, default: {default!r}]"
        lines += textwrap.wrap(text, width, initial_indent=f"  {key:<34} ", subsequent_indent=" " * 37,
                               break_on_hyphens=False)
    return "\n".join(lines)


def _quiet_libraries() -> None:
    """Keep the console for Verlog's own progress: no per-load progress bars or info tables."""
    import logging

    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)


def _load_config(recipe: str, overrides: list[str], *, train: bool = False) -> TrainConfig:
    """The validated config of ``recipe`` with ``overrides``, whose names all exist; exits 2 otherwise.

    Imports nothing heavy (see :mod:`verlog.preflight`), so every config error is reported within
    a second or two of the command. For training (``train``) also checks ``resume`` and the
    recipe's ``gpus_per_node``.
    """
    from verlog.preflight import check_buildable, check_gpus, check_resume

    try:
        cfg = load_recipe(recipe, overrides)
        check_buildable(cfg)
        if train:
            check_resume(cfg)
            check_gpus(cfg, f"recipe {recipe}")
    except ConfigError as err:
        _fail(str(err))
    return cfg


def _use_threads(threads: int) -> None:
    """Run with ``threads`` intra-op threads: ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` for what starts
    later (env workers, a first torch import) and torch's own setting.

    Also ``OMP_WAIT_POLICY=PASSIVE`` unless the caller set it: OpenMP's default lets a thread that
    reaches a barrier spin for its peers, and when another process holds one of the cores the peer
    is not running, so every small op waits out a scheduler slice. Measured on the 2-core machine
    with the tiny recipe at ``threads=2`` beside one busy process: 70-144 s per critic-only
    iteration spinning, 9.6-12.7 s passive, 8.7-19.0 s at ``threads=1``; idle, 5.5 s either way
    (docs/benchmarks.md, *Threads*). It takes effect only before the first torch import, which is
    here for the command-line tools.
    """
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    torch.set_num_threads(threads)


def _list_envs() -> None:
    """Print every registered environment, one family per line (Verlog's and installed plugins')."""
    from verlog.envs.registry import EnvImportError, list_envs, plugin_families

    try:
        names = list_envs()
    except (ImportError, EnvImportError) as err:
        _fail(str(err).splitlines()[0])
    plugins = plugin_families()
    by_family: dict[str, list[str]] = {}
    for name in names:
        by_family.setdefault(name.partition("/")[0], []).append(name.partition("/")[2])
    for family, tasks in by_family.items():
        origin = f" (plugin: {plugins[family].value})" if family in plugins else ""
        print(f"{family}{origin}: {', '.join(tasks)}")
    print("or any import path package.module:Name of a TextEnv subclass or factory, or an OpenEnv server openenv:<url>")


def train_main(argv: list[str] | None = None) -> None:
    """``verlog-train <recipe name or YAML> [key=value ...]``."""
    parser = _Parser(prog="verlog-train", description="Train an agent with turn-level PPO.",
                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_config_help())
    parser.add_argument("recipe", nargs="?", help="recipe name from recipes/ (e.g. tiny) or a YAML file")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. ppo.actor_lr=1e-5")
    parser.add_argument("--list-envs", action="store_true",
                        help="list every environment env.task may name (installed plugin families included) and exit")
    # DeepSpeed's launcher appends --local_rank=<n>; the rank is read from LOCAL_RANK, which it also sets
    parser.add_argument("--local_rank", type=int, help=argparse.SUPPRESS)
    args = parser.parse_intermixed_args(argv)
    if args.list_envs:
        _list_envs()
        return
    if args.recipe is None:
        _fail("recipe: give a recipe name from recipes/ (e.g. tiny) or a YAML file")
    cfg = _load_config(args.recipe, args.overrides, train=True)
    _use_threads(cfg.threads)
    _quiet_libraries()
    from verlog.checkpointing import CheckpointError
    from verlog.models import ModelLoadError
    from verlog.rollout.engine import EngineConfigError
    from verlog.trainer import NumericalFault, Trainer

    try:
        trainer = Trainer(cfg)
    except (ModelLoadError, FileNotFoundError, ConfigError, EngineConfigError, CheckpointError) as err:
        _fail(str(err).splitlines()[0])
    from verlog.envs.faults import EnvFaultError

    try:
        result = trainer.train()
    except (NumericalFault, EnvFaultError) as err:  # EnvFaultError: an env (an OpenEnv server, say) stayed down
        print(f"error: {err}", file=sys.stderr)
        print(f"resume with: {trainer.resume_command()}", file=sys.stderr)
        raise SystemExit(1) from None
    if result.get("stopped"):
        return  # SIGINT/SIGTERM: the trainer wrote a checkpoint and printed the resume command
    if result:
        from verlog.plots import plot_run

        pngs = plot_run(trainer.run_dir)
        print(json.dumps({k: result[k] for k in ("task", "success_mean", "success_se", "episodes") if k in result}))
        print(f"run directory: {trainer.run_dir} (config.yaml, metrics.jsonl, eval.json, "
              f"checkpoints/, {', '.join(p.name for p in pngs)})")


_EVAL_SHORT = {"task": "env.task", "episodes": "eval.episodes", "greedy": "eval.greedy", "seed": "eval.seed",
               "num_envs": "eval.num_envs"}
#: verlog-eval's own keys for the BALROG suite mode (not config keys): name -> (parser, expected).
_SUITE_KEYS = {
    "suite": (str, "'balrog' or 'balrog_<env>'"),
    "envs": (lambda v: [e for e in v.split(",") if e], "a comma-separated list of suite envs"),
    "episodes_per_task": (int, "a positive int"),
    "tasks_per_env": (int, "a positive int"),
    "out": (str, "an output directory"),
    "record_turns": (lambda v: {"true": True, "false": False}[v.lower()], "true or false"),
}


def _suite_envs(suite_opts: dict[str, Any]) -> None:
    """Check ``suite=`` and expand ``suite=balrog_<env>`` into ``suite=balrog envs=<env>`` (in place);
    a bad value exits with one line naming the key."""
    name = suite_opts.get("suite")
    if name is None:
        _fail(f"suite: expected 'balrog' or 'balrog_<env>' with {sorted(suite_opts)}, got nothing")
    if name == "balrog":
        return
    env = name.removeprefix("balrog_") if name.startswith("balrog_") else None
    if not env:
        _fail(f"suite: expected 'balrog' or 'balrog_<env>', got {name!r}")
    if "envs" in suite_opts:
        _fail(f"envs: suite={name} already names its env; use suite=balrog envs=... for several")
    suite_opts["suite"], suite_opts["envs"] = "balrog", [env]


def eval_main(argv: list[str] | None = None) -> None:
    """``verlog-eval <checkpoint | model dir | GGUF file | packaged model | hub id | random> [key=value ...]``.

    One task (default): ``task=<env/task> episodes=N greedy=true seed=S`` prints a JSON summary.
    The BALROG suite: ``suite=balrog [envs=babyai,crafter,...] [episodes_per_task=N] [tasks_per_env=K]
    [out=DIR] [record_turns=true]`` runs BALROG's protocol (see :mod:`verlog.suite`) and writes
    ``episodes.jsonl``, ``summary.json`` and ``summary.csv`` into ``out`` (resumable);
    ``suite=balrog_<env>`` is ``suite=balrog envs=<env>``, and in suite mode ``episodes=N`` means
    ``episodes_per_task=N``. It prints each env's and task's score ± SE and, where known, the
    published leaderboard rows and the random floor beside them (:mod:`verlog.leaderboard`).
    ``random`` instead of a checkpoint plays uniformly random valid actions (the floor).

    Uses the run's own config (``config.yaml`` beside or above the checkpoint) when there is one, so
    evaluation builds prompts with the memory the policy was trained with. Replies come from the
    configured ``rollout.engine`` (``rollout.engine=vllm`` serves them with vLLM and its prefix cache).
    """
    parser = _Parser(prog="verlog-eval", description="Evaluate a checkpoint on fixed seeds (one task or BALROG's suite).")
    parser.add_argument("checkpoint", help="a checkpoint's actor directory, a checkpoint or run directory, a model (directory, "
                        ".gguf file, packaged name such as smollm2-135m-instruct, hub id), or 'random'")
    parser.add_argument("overrides", nargs="*", help="task=<env/task> episodes=N greedy=true seed=S, suite keys, or config keys")
    args = parser.parse_args(argv)
    overrides, suite_opts = [], {}
    episodes: str | None = None  # the last episodes=N: per task in suite mode
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if sep and key == "episodes":
            episodes = value
        if sep and key in _SUITE_KEYS:
            convert, expected = _SUITE_KEYS[key]
            try:
                suite_opts[key] = convert(value)
            except (ValueError, KeyError):
                _fail(f"{key}: expected {expected}, got {value!r}")
            continue
        overrides.append(f"{_EVAL_SHORT.get(key, key)}={value}" if sep else item)
    if suite_opts:
        _suite_envs(suite_opts)
        if "episodes_per_task" not in suite_opts and episodes is not None:
            convert, expected = _SUITE_KEYS["episodes_per_task"]
            try:
                suite_opts["episodes_per_task"] = convert(episodes)
            except ValueError:
                _fail(f"episodes: expected {expected}, got {episodes!r}")
    is_random = args.checkpoint == "random"
    recipe: Path | None = None
    if not is_random:
        from verlog.model_sources import source_kind

        model_dir = args.checkpoint  # a GGUF file, a packaged model or a hub id: resolved below
        if source_kind(args.checkpoint) == "local":
            model_dir, recipe = _resolve_checkpoint(Path(args.checkpoint))
        overrides.append(f"model.path={model_dir}")
    cfg = _load_config(str(recipe) if recipe else "tiny", overrides)
    _use_threads(cfg.threads)
    _quiet_libraries()
    from verlog.builders import decoder, memory_factory, sampling_params
    from verlog.evaluate import EvalResult, ModelPolicy, RandomPolicy
    from verlog.rollout.runner import EpisodeSpec, run_episodes

    memory = None
    if is_random:
        policy = RandomPolicy(cfg.eval.seed)
    else:
        from verlog.engine_lifecycle import make_rollout_engine
        from verlog.model_sources import resolve_model
        from verlog.models import ModelLoadError, load_tokenizer
        from verlog.rollout.engine import EngineConfigError

        try:
            model_path = resolve_model(cfg.model.path, cfg.model.cache_dir)
            tokenizer = load_tokenizer(model_path)
            engine = make_rollout_engine(cfg, model_path, tokenizer, rank=0)  # the run's rollout.engine
        except (ModelLoadError, EngineConfigError) as err:
            _fail(str(err).splitlines()[0])
        sampling = sampling_params(cfg.rollout, greedy=cfg.eval.greedy)
        from dataclasses import replace

        from verlog.checkpointing import trained_iterations

        trained_through = trained_iterations(Path(str(model_dir)))
        if trained_through and not any(o.startswith("rollout.temperature=") for o in overrides):
            sampling = replace(sampling, temperature=cfg.rollout.temperature_at(trained_through))

        policy = ModelPolicy(engine, decoder(tokenizer), replace(sampling, seed=cfg.eval.seed))
        memory = memory_factory(cfg.memory, tokenizer)
    if not suite_opts:
        try:
            specs = [EpisodeSpec(cfg.env.task, cfg.eval.seed + i, i) for i in range(cfg.eval.episodes)]
            records = run_episodes(specs, policy, num_envs=cfg.eval.num_envs, make_memory=memory,
                                   env_kwargs=cfg.env.env_kwargs())
        except (ValueError, TypeError) as err:
            _fail(str(err).splitlines()[0])
        result = EvalResult.from_records(cfg.env.task, records, greedy=policy.greedy)
        print(json.dumps(result.summary()))
        return
    from verlog.suite import run_suite, select_suite

    try:
        suite = select_suite(suite_opts.get("envs"), episodes_per_task=suite_opts.get("episodes_per_task"),
                             tasks_per_env=suite_opts.get("tasks_per_env"))
    except (ValueError, ImportError) as err:
        _fail(str(err).splitlines()[0])
    name = "random" if is_random else Path(args.checkpoint).name
    out = Path(suite_opts.get("out", f"runs/eval/{name}-balrog"))
    style = cfg.env.instruction_style
    kwargs = {"format_penalty": cfg.env.format_penalty, **({"instruction_style": style} if style != "full" else {})}
    run_info = {"policy": "random" if is_random else str(cfg.model.path), "greedy": policy.greedy,
                "memory": {"history_turns": cfg.memory.history_turns, "max_prompt_tokens": cfg.memory.max_prompt_tokens},
                "env_kwargs": kwargs}
    try:
        summary = run_suite(policy, suite, out, seed=cfg.eval.seed, num_envs=cfg.eval.num_envs, make_memory=memory,
                            env_kwargs=kwargs, record_turns=suite_opts.get("record_turns", False), run_info=run_info,
                            progress=cfg.logging.progress)
    except ValueError as err:
        _fail(str(err).splitlines()[0])
    from verlog.leaderboard import reference_lines

    for env_name, env in summary["envs"].items():
        print(f"{env_name:<10} {env['progression']:6.2f} % ± {env['se']:.2f}  ({env['episodes']} episodes)")
        if len(env["tasks"]) > 1:
            for task, t in env["tasks"].items():
                print(f"  {task:<40} {t['progression']:6.2f} % ± {t['se']:.2f}  ({t['episodes']} episodes)")
        for line in reference_lines(env_name, env["progression"]):
            print(line)
    o = summary["overall"]
    print(f"{'overall':<10} {o['progression']:6.2f} % ± {o['se']:.2f}  ({o['envs']} envs)")
    print(f"written: {out}/episodes.jsonl, summary.json, summary.csv")


def _resolve_checkpoint(path: Path) -> tuple[Path, Path | None]:
    """Find the actor directory and the run's config.yaml for a checkpoint/run/model path."""
    if not path.exists():
        _fail(f"checkpoint: not found: {path}")
    model_dir = path
    if (path / "checkpoints").is_dir():  # a run directory: its newest checkpoint
        from verlog.checkpointing import newest_checkpoint

        ckpt = newest_checkpoint(path)
        if ckpt is None:
            _fail(f"checkpoint: no complete checkpoint under {path}/checkpoints")
        model_dir = ckpt / "actor"
    elif (path / "actor").is_dir():
        model_dir = path / "actor"
    for parent in [model_dir, *model_dir.parents][:5]:
        if (parent / "config.yaml").is_file():
            return model_dir, parent / "config.yaml"
    return model_dir, None


def plot_main(argv: list[str] | None = None) -> None:
    """``verlog-plot <run dir>``: learning curves (``curves.png``) and the GAE figures (``figures/``).

    Prints each PNG path written, and one line per figure skipped for missing inputs (e.g. no
    dumped batches). Exits 2 with one line on stderr when the run directory is missing, has no
    ``metrics.jsonl``, or its ``metrics.jsonl`` cannot be parsed.
    """
    parser = _Parser(prog="verlog-plot", description="Plot a run's learning curves and GAE figures.")
    parser.add_argument("run_dir")
    args = parser.parse_args(argv)
    run = Path(args.run_dir)
    if not run.is_dir():
        _fail(f"run_dir: {run} is not a directory")
    if not (run / "metrics.jsonl").is_file():
        _fail(f"run_dir: no metrics.jsonl in {run}")
    from verlog.gae_figures import write_gae_figures
    from verlog.plots import plot_run

    try:
        paths = plot_run(run)
    except (ValueError, KeyError, TypeError) as err:  # json.JSONDecodeError is a ValueError
        _fail(f"run_dir: cannot read {run / 'metrics.jsonl'}: {str(err).splitlines()[0] if str(err) else type(err).__name__}")
    for png in paths:
        print(png)
    for png in write_gae_figures(run):
        print(png)


def serve_env_main(argv: list[str] | None = None) -> None:
    """``verlog-serve-env <task> [--host 127.0.0.1] [--port N] [options]``: serve a Verlog environment as an
    OpenEnv server (:mod:`verlog.serve_env`) until interrupted.

    Prints one line with the server's URL once it listens (``--port 0`` lets the system pick a free
    port). Every session builds the task with ``--max-steps``, ``--format-penalty``,
    ``--instruction-style``, ``--text-style`` and ``--env-kwargs`` (a JSON object). A bad argument, a task
    that cannot be built, a non-loopback ``--host`` without ``--allow-remote`` or an address that cannot
    be bound exits with status 2 and one line naming the argument.
    """
    parser = _Parser(prog="verlog-serve-env", description="Serve a Verlog text environment as an OpenEnv server "
                     "(WebSocket /ws; HTTP /health, /schema, /metadata, /verlog/info).")
    parser.add_argument("task", help="a registered environment, e.g. babyai/easy_goto (verlog-train --list-envs)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; a non-loopback "
                        "address needs --allow-remote)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: a free port)")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow a non-loopback --host (the server has no authentication)")
    parser.add_argument("--max-steps", type=int, help="the served env's step limit (default: the task's)")
    parser.add_argument("--format-penalty", type=float, default=0.0,
                        help="the served env's penalty (<= 0) for a reply without a valid action (default 0)")
    parser.add_argument("--instruction-style", choices=("full", "brief"), help="Verlog's own tasks: the prompt")
    parser.add_argument("--text-style", choices=("balrog", "tidy"), help="Verlog's own tasks: the observation text")
    parser.add_argument("--env-kwargs", default="{}", help="more arguments of the task, as a JSON object")
    parser.add_argument("--max-sessions", type=int, default=128, help="sessions at once (default 128)")
    parser.add_argument("--max-message-bytes", type=int, default=1 << 20,
                        help="largest frame a client may send, bytes (default 1 MiB)")
    parser.add_argument("--idle-timeout-s", type=float, default=3600.0,
                        help="close a session silent this long, seconds (default 3600: a client is silent while it "
                             "trains)")
    args = parser.parse_args(argv)
    from verlog.serve_env import ServedEnv, check_host, listen, serve

    if not 0 <= args.port <= 65535:
        _fail(f"--port: expected 0..65535, got {args.port}")
    try:
        check_host(args.host, args.allow_remote)
    except ValueError as err:
        _fail(f"--host: {err}")
    try:
        kwargs = json.loads(args.env_kwargs)
    except ValueError as err:
        _fail(f"--env-kwargs: not JSON: {err}")
    if not isinstance(kwargs, dict):
        _fail(f"--env-kwargs: expected a JSON object, got a JSON {type(kwargs).__name__}")
    for flag, key, value in (("--max-steps", "max_steps", args.max_steps), ("--instruction-style", "instruction_style",
                             args.instruction_style), ("--text-style", "text_style", args.text_style)):
        if value is not None:
            if key in kwargs:
                _fail(f"--env-kwargs: {key!r} is set by {flag}; give it once")
            kwargs[key] = value
    kwargs.setdefault("format_penalty", args.format_penalty)
    try:
        served = ServedEnv(args.task, kwargs, max_sessions=args.max_sessions, max_message_bytes=args.max_message_bytes,
                           idle_timeout_s=args.idle_timeout_s)
    except (ValueError, TypeError, ImportError) as err:
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        flag = next((f for f in ("max_sessions", "max_message_bytes", "idle_timeout_s", "max_steps", "format_penalty")
                     if text.startswith(f)), None)
        _fail(f"--{flag.replace('_', '-')}: {text}" if flag else f"task: {args.task}: {text}")
    try:
        sock = listen(args.host, args.port)
    except OSError as err:
        _fail(f"--port: cannot listen on {args.host}:{args.port}: {err}")

    def ready(url: str) -> None:
        print(f"serving {args.task} at {url} (OpenEnv WebSocket {url.replace('http', 'ws', 1)}/ws); "
              f"train against it with env.task=openenv:{url}", flush=True)

    serve(served, sock, on_ready=ready)
