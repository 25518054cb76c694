"""The run directory: where it is, whether a run may use it, and making it.

A fresh run writes ``<run_root>/<name>/`` (``name`` is one path component, checked with the config);
a resumed one writes the directory ``resume`` names. A fresh run refuses a directory that already
holds files, since its metrics and checkpoints would mix with the old run's, unless ``overwrite=true``
asks to delete it first (only a directory with a Verlog run's ``config.yaml`` is deleted). Rank 0
decides and writes; every rank gets the same answer. Every failure is one line
(:class:`~verlog.config.ConfigError`) naming the key to change.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from verlog import distributed as D
from verlog.config import ConfigError, TrainConfig, save_config

__all__ = ["prepare_run_dir", "run_dir_of"]


def run_dir_of(cfg: TrainConfig) -> Path:
    """``resume`` when set, else ``<run_root>/<name>``."""
    return Path(cfg.resume) if cfg.resume else Path(cfg.run_root) / cfg.name


def _problem(cfg: TrainConfig, run_dir: Path) -> str | None:
    """Rank 0's part: check, clear (``overwrite``), create and write ``config.yaml``; the problem or None."""
    key = "resume" if cfg.resume else "run_root"
    try:
        used = run_dir.is_dir() and any(run_dir.iterdir())
        if used and not cfg.resume:
            if not cfg.overwrite:
                return (f"name: {run_dir} already holds a run; continue it with resume={run_dir}, replace it with "
                        f"overwrite=true, or choose another name=")
            if not (run_dir / "config.yaml").is_file():
                return f"overwrite: {run_dir} holds no Verlog run (no config.yaml); not deleted, choose another name="
            shutil.rmtree(run_dir)
            print(f"overwrite: deleted the earlier run in {run_dir}", flush=True)
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
    except OSError as err:
        reason = err.strerror or str(err).strip() or type(err).__name__
        where = f": {err.filename}" if err.filename else ""
        return f"{key}: cannot write the run directory {run_dir} ({reason}{where})"
    return None


def prepare_run_dir(cfg: TrainConfig) -> Path:
    """Make the run directory ready on rank 0 (every rank calls this after ``init_distributed``).

    Returns:
        The run directory, with the run's ``config.yaml`` written.

    Raises:
        ConfigError: one line: the name already holds a run (neither ``resume`` nor ``overwrite``),
            ``overwrite`` would delete a directory that holds no run, or the directory cannot be
            created or written (read-only, a file in the way, no permission).
    """
    run_dir = run_dir_of(cfg)
    problem = _problem(cfg, run_dir) if D.is_main() else None
    if D.any_rank(problem is not None):
        raise ConfigError(problem or f"run directory {run_dir}: refused on rank 0")
    return run_dir
