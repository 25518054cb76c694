"""Learning curves from a run's ``metrics.jsonl`` (matplotlib, headless)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from verlog.logging import read_metrics  # noqa: E402

PANELS = (
    ("episode/success", "training episode success"),
    ("episode/return", "training episode return"),
    ("episode/length", "episode length (steps)"),
    ("critic/explained_variance", "critic explained variance"),
    ("actor/entropy", "policy entropy (nats/token)"),
    ("rollout/invalid_action_rate", "invalid-action rate"),
)


def plot_run(run_dir: Path, out: Path | None = None) -> list[Path]:
    """Plot the standard panels against environment turns; returns the PNG paths written.

    Raises:
        FileNotFoundError: the run has no ``metrics.jsonl``.
    """
    rows = read_metrics(run_dir / "metrics.jsonl")
    out = out or run_dir / "curves.png"
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    warm_end = max((r["turns"] for r in rows if r.get("phase") == "critic_warmup"), default=None)
    for ax, (key, title) in zip(axes.flat, PANELS):
        pts = [(r["turns"], r[key]) for r in rows if r.get(key) is not None and not _nan(r[key])]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, lw=1.2)
        if warm_end is not None:
            ax.axvspan(0, warm_end, color="0.9", label="critic warm-up")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("environment turns")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{run_dir.name}", fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return [out]


def _nan(x: object) -> bool:
    return isinstance(x, float) and math.isnan(x)
