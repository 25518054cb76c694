"""Metric sinks: ``metrics.jsonl`` (one line per iteration), optional wandb and TensorBoard runs, a progress bar.

Only rank 0 creates a :class:`MetricLogger`; other ranks log nothing.

The progress bar's description names the run's phase (:data:`PHASES`); an evaluation gets a second bar
counting its episodes (:meth:`MetricLogger.evaluation`). The recent success is shown with the number of
episodes it averages (``success=1.00 (3 eps)``), so a rate over a handful of short early episodes does not
pass for one over 100.
"""

from __future__ import annotations

import json
import math
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from tqdm import tqdm

#: Progress-bar labels of a run's phases, in the order a run goes through them.
PHASES = {"format_warmup": "warm-up", "baseline": "baseline", "critic_warmup": "critic pre-training",
          "eval": "evaluation", "final_eval": "final eval"}


def phase_label(phase: str) -> str:
    """The progress-bar label of a phase: :data:`PHASES`' entry, else the algorithm's name upper-cased
    (an iteration's ``phase`` metric is ``critic_warmup`` or the algorithm, e.g. ``ppo`` -> ``PPO``)."""
    return PHASES.get(phase, phase.upper())


_TASK_PREFIX, _RECENT_SUFFIX = "task/", "/success_recent100"


def recent_success_key(task: str) -> str:
    """The metrics key of ``task``'s success over its own last 100 finished episodes (a task mixture)."""
    return f"{_TASK_PREFIX}{task}{_RECENT_SUFFIX}"


def task_of_recent_success_key(key: str) -> str | None:
    """The task that a :func:`recent_success_key` names, or None for any other key."""
    if key.startswith(_TASK_PREFIX) and key.endswith(_RECENT_SUFFIX) and len(key) > len(_TASK_PREFIX + _RECENT_SUFFIX):
        return key[len(_TASK_PREFIX): -len(_RECENT_SUFFIX)]
    return None


def progress_postfix(metrics: dict[str, Any]) -> dict[str, str]:
    """The progress bar's figures from one metrics row (keys absent or None are left out).

    The recent success reads ``"<rate> (<n> eps)"`` with ``n`` the finished episodes it averages
    (``episode/recent_episodes``, at most 100); a task mixture adds each task's recent success under
    the last part of its name (``task/babyai/open/success_recent100`` shows as ``open``).
    """
    postfix = {}
    for key, label, fmt in (("turns_per_second", "turns/s", "{:.0f}"),
                            ("episode/success_recent100", "success", "{:.2f}"),
                            ("episode/return", "return", "{:.2f}"),
                            ("critic/explained_variance", "EV", "{:.2f}")):
        value = metrics.get(key)
        if value is not None:
            postfix[label] = fmt.format(value)
    episodes = metrics.get("episode/recent_episodes")
    if "success" in postfix and episodes is not None:
        postfix["success"] += f" ({int(episodes)} eps)"
    for key, value in metrics.items():
        task = task_of_recent_success_key(key)
        if task is not None and value is not None:
            postfix[task.split("/")[-1]] = f"{value:.2f}"
    return postfix


def _clean(value: Any) -> Any:
    """JSON-safe scalars: NaN/inf become None (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricLogger:
    """Write per-iteration metrics to JSONL (append mode: a resumed run continues the file),
    mirror them to wandb and TensorBoard when asked, and drive a progress bar.

    Args:
        run_dir: the run directory; metrics go to ``run_dir/metrics.jsonl``.
        total_iterations: for the progress bar's ETA.
        start_iteration: first iteration of this process (non-zero when resuming).
        wandb_config: ``None`` for no wandb, else ``{"project", "mode", "name", "config"}``.
        progress: show the bar (on stderr).
        tensorboard: also write every numeric metric as a TensorBoard scalar under
            ``run_dir/tensorboard/`` (``torch.utils.tensorboard``), step = iteration.

    Raises:
        ImportError: ``tensorboard`` is asked for and the ``tensorboard`` package is not installed.
    """

    def __init__(self, run_dir: Path, *, total_iterations: int, start_iteration: int = 0,
                 wandb_config: dict[str, Any] | None = None, progress: bool = True,
                 tensorboard: bool = False) -> None:
        self.path = run_dir / "metrics.jsonl"
        self._file = self.path.open("a")
        self._wandb = None
        if wandb_config is not None:
            import wandb

            self._wandb = wandb.init(project=wandb_config["project"], mode=wandb_config["mode"],
                                     name=wandb_config["name"], config=wandb_config["config"],
                                     dir=str(run_dir))
        self._tensorboard = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tensorboard = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        self._bar = tqdm(total=total_iterations, initial=start_iteration, disable=not progress,
                         file=sys.stderr, dynamic_ncols=True, unit="it")
        self.current_phase = ""

    def log(self, metrics: dict[str, Any]) -> None:
        """Record one iteration's metrics (must include ``iteration``)."""
        line = {k: _clean(v) for k, v in metrics.items()}
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()
        step = int(metrics["iteration"])
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in line.items() if v is not None}, step=step)
        if self._tensorboard is not None:
            for key, value in line.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "iteration":
                    self._tensorboard.add_scalar(key, value, global_step=step)
            self._tensorboard.flush()
        self._bar.set_postfix(progress_postfix(line), refresh=False)
        self._bar.update(1)

    def phase(self, phase: str) -> None:
        """Show ``phase`` (a key of :data:`PHASES` or an algorithm's name) as the bar's description."""
        self.current_phase = phase
        self._bar.set_description(phase_label(phase), refresh=True)

    @contextmanager
    def evaluation(self, phase: str, episodes: int, what: str = "") -> Iterator[Callable[..., None]]:
        """Show an evaluation's progress: the bar names ``phase``, a second bar counts ``episodes`` episodes.

        Args:
            phase: the run's phase during the evaluation (e.g. ``baseline``, ``final_eval``).
            episodes: how many episodes the evaluation runs.
            what: shown on the second bar (e.g. ``greedy``).

        Yields:
            A callback to call once per finished episode (its arguments are ignored).
        """
        previous = self.current_phase
        self.phase(phase)
        bar = tqdm(total=episodes, desc=f"  {phase_label(phase)} {what}".rstrip(), leave=False, position=1,
                   disable=self._bar.disable, file=sys.stderr, dynamic_ncols=True, unit="ep",
                   mininterval=0.0)  # every episode shows: evaluations are short
        try:
            yield lambda *args, **kwargs: bar.update(1)
        finally:
            bar.close()
            self.phase(previous)

    def write(self, message: str) -> None:
        """Print a line without breaking the progress bar."""
        self._bar.write(message, file=sys.stderr)

    def close(self) -> None:
        """Close the bar and every sink."""
        self._bar.close()
        self._file.close()
        if self._wandb is not None:
            self._wandb.finish()
        if self._tensorboard is not None:
            self._tensorboard.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Read ``metrics.jsonl`` back (later lines for the same iteration win, as after a resume)."""
    by_iter: dict[int, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            by_iter[int(row["iteration"])] = row
    return [by_iter[k] for k in sorted(by_iter)]
