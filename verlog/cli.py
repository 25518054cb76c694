"""Command-line entry points: ``verlog-train``, ``verlog-eval`` and ``verlog-plot`` (thin: parse, build, run).

Every malformed recipe, override or argument exits with status 2 and one line on stderr naming the
key and what was expected.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NoReturn

from verlog.config import ConfigError, field_docs, load_recipe


def _fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, no usage dump
        _fail(message)


def _config_help() -> str:
    lines = ["config keys (override with key=value):"]
    for key, typ, default, doc in field_docs():
        lines.append(f"  {key:<36} {doc} [{typ.replace('typing.', '')}, default: {default!r}]")
    return "\n".join(lines)


def _quiet_libraries() -> None:
    """Keep the console for Verlog's own progress: no per-load progress bars or info tables."""
    import logging

    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)


def train_main(argv: list[str] | None = None) -> None:
    """``verlog-train <recipe name or YAML> [key=value ...]``."""
    parser = _Parser(prog="verlog-train", description="Train an agent with turn-level PPO.",
                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_config_help())
    parser.add_argument("recipe", help="recipe name from recipes/ (e.g. tiny) or a YAML file")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. ppo.actor_lr=1e-5")
    args = parser.parse_args(argv)
    try:
        cfg = load_recipe(args.recipe, args.overrides)
    except ConfigError as err:
        _fail(str(err))
    _quiet_libraries()
    from verlog.models import ModelLoadError
    from verlog.trainer import Trainer

    try:
        trainer = Trainer(cfg)
    except (ModelLoadError, FileNotFoundError) as err:
        _fail(str(err).splitlines()[0])
    result = trainer.train()
    if result:
        from verlog.plots import plot_run

        pngs = plot_run(trainer.run_dir)
        print(json.dumps({k: result[k] for k in ("task", "success_mean", "success_se", "episodes") if k in result}))
        print(f"run directory: {trainer.run_dir} (config.yaml, metrics.jsonl, eval.json, "
              f"checkpoints/, {', '.join(p.name for p in pngs)})")


def eval_main(argv: list[str] | None = None) -> None:
    """``verlog-eval <checkpoint or model dir> [task=...] [episodes=N] [key=value ...]``.

    Uses the run's own config (``config.yaml`` beside or above the checkpoint) when there is one,
    so evaluation builds prompts with the memory the policy was trained with.
    """
    parser = _Parser(prog="verlog-eval", description="Evaluate a checkpoint on fixed seeds.")
    parser.add_argument("checkpoint", help="a checkpoint's actor directory, a checkpoint or run directory, or a model")
    parser.add_argument("overrides", nargs="*", help="task=<env/task> episodes=N greedy=true seed=S, or config keys")
    args = parser.parse_args(argv)
    short = {"task": "env.task", "episodes": "eval.episodes", "greedy": "eval.greedy", "seed": "eval.seed"}
    overrides = []
    for item in args.overrides:
        key, sep, value = item.partition("=")
        overrides.append(f"{short.get(key, key)}={value}" if sep else item)
    model_dir, recipe = _resolve_checkpoint(Path(args.checkpoint))
    try:
        cfg = load_recipe(str(recipe) if recipe else "tiny", overrides + [f"model.path={model_dir}"])
    except ConfigError as err:
        _fail(str(err))
    _quiet_libraries()
    from verlog.builders import evaluate_config
    from verlog.models import ModelLoadError, load_tokenizer
    from verlog.rollout.hf import HFEngine

    try:
        tokenizer = load_tokenizer(cfg.model.path)
        engine = HFEngine(cfg.model.path, tokenizer, seed=cfg.seed)
    except ModelLoadError as err:
        _fail(str(err).splitlines()[0])
    result = evaluate_config(cfg, engine, tokenizer, greedy=cfg.eval.greedy)
    print(json.dumps(result.summary()))


def _resolve_checkpoint(path: Path) -> tuple[Path, Path | None]:
    """Find the actor directory and the run's config.yaml for a checkpoint/run/model path."""
    if not path.exists():
        _fail(f"checkpoint: not found: {path}")
    model_dir = path
    if (path / "checkpoints").is_dir():  # a run directory: its newest checkpoint
        from verlog.trainer import newest_checkpoint

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
    """``verlog-plot <run dir>``: write the learning-curve PNGs from ``metrics.jsonl``."""
    parser = _Parser(prog="verlog-plot", description="Plot a run's learning curves.")
    parser.add_argument("run_dir")
    args = parser.parse_args(argv)
    run = Path(args.run_dir)
    if not (run / "metrics.jsonl").is_file():
        _fail(f"run_dir: no metrics.jsonl in {run}")
    from verlog.plots import plot_run

    for png in plot_run(run):
        print(png)
