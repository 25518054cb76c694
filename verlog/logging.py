"""Metric sinks: ``metrics.jsonl`` (one line per iteration), an optional wandb run, a progress bar.

Only rank 0 creates a :class:`MetricLogger`; other ranks log nothing.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm


def _clean(value: Any) -> Any:
    """JSON-safe scalars: NaN/inf become None (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricLogger:
    """Write per-iteration metrics to JSONL (append mode: a resumed run continues the file),
    mirror them to wandb when asked, and drive a progress bar.

    Args:
        run_dir: the run directory; metrics go to ``run_dir/metrics.jsonl``.
        total_iterations: for the progress bar's ETA.
        start_iteration: first iteration of this process (non-zero when resuming).
        wandb_config: ``None`` for no wandb, else ``{"project", "mode", "name", "config"}``.
        progress: show the bar (on stderr).
    """

    def __init__(self, run_dir: Path, *, total_iterations: int, start_iteration: int = 0,
                 wandb_config: dict[str, Any] | None = None, progress: bool = True) -> None:
        self.path = run_dir / "metrics.jsonl"
        self._file = self.path.open("a")
        self._wandb = None
        if wandb_config is not None:
            import wandb

            self._wandb = wandb.init(project=wandb_config["project"], mode=wandb_config["mode"],
                                     name=wandb_config["name"], config=wandb_config["config"],
                                     dir=str(run_dir))
        self._bar = tqdm(total=total_iterations, initial=start_iteration, disable=not progress,
                         file=sys.stderr, dynamic_ncols=True, unit="it")

    def log(self, metrics: dict[str, Any]) -> None:
        """Record one iteration's metrics (must include ``iteration``)."""
        line = {k: _clean(v) for k, v in metrics.items()}
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in line.items() if v is not None}, step=int(metrics["iteration"]))
        postfix = {}
        for key, label, fmt in (("turns_per_second", "turns/s", "{:.0f}"),
                                ("episode/success_recent100", "success(last 100)", "{:.2f}"),
                                ("episode/return", "return", "{:.2f}"),
                                ("critic/explained_variance", "EV", "{:.2f}")):
            value = line.get(key)
            if value is not None:
                postfix[label] = fmt.format(value)
        self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(1)

    def write(self, message: str) -> None:
        """Print a line without breaking the progress bar."""
        self._bar.write(message, file=sys.stderr)

    def close(self) -> None:
        self._bar.close()
        self._file.close()
        if self._wandb is not None:
            self._wandb.finish()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Read ``metrics.jsonl`` back (later lines for the same iteration win, as after a resume)."""
    by_iter: dict[int, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            by_iter[int(row["iteration"])] = row
    return [by_iter[k] for k in sorted(by_iter)]
