"""Learning curves from a run's ``metrics.jsonl`` (matplotlib, headless).

Six panels against environment turns, each y-axis labelled with its unit; the critic pre-training
iterations (value-only, the actor frozen) are a shaded band named in the legend; the title names the
run, its task and algorithm (from the run's ``config.yaml``/``eval.json`` when present). A series of a
few points is drawn with markers, so a run of one iteration still shows its point; a metric the run did
not log (e.g. explained variance without a critic) says so in its panel.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from verlog.logging import PHASES, read_metrics, recent_success_key, task_of_recent_success_key  # noqa: E402

#: (metric key, panel title, y-axis label with its unit)
PANELS = (
    ("episode/success", "training episode success", "success rate (fraction of episodes)"),
    ("episode/return", "training episode return", "return (reward per episode)"),
    ("episode/length", "episode length", "length (env steps per episode)"),
    ("critic/explained_variance", "critic explained variance", "explained variance (1 = exact; unitless)"),
    ("actor/entropy", "policy entropy", "entropy (nats/token)"),
    ("rollout/invalid_action_rate", "invalid-action rate", "invalid replies (fraction of turns)"),
)
#: Series with fewer points than this are drawn with markers (a line needs two points to show).
MARKERS_BELOW = 20


def run_title(run_dir: Path) -> str:
    """``<run name> · <task> · <algorithm>`` from the run's ``config.yaml`` (and ``eval.json``'s task,
    which names tool tasks ``agent/<task>``); parts the run directory lacks are left out."""
    parts = [run_dir.name]
    cfg: dict[str, Any] = {}
    if (run_dir / "config.yaml").is_file():
        loaded = yaml.safe_load((run_dir / "config.yaml").read_text())
        cfg = loaded if isinstance(loaded, dict) else {}
        parts = [str(cfg.get("name", run_dir.name))]
    task = None
    if (run_dir / "eval.json").is_file():
        task = json.loads((run_dir / "eval.json").read_text()).get("task")
    task = task or (cfg.get("env") or {}).get("task")
    algorithm = (cfg.get("algo") or {}).get("algorithm")
    return " · ".join(str(p) for p in (*parts, task, algorithm) if p)


def curves_figure(rows: list[dict[str, Any]], title: str) -> Figure:
    """The six-panel figure of ``rows`` (``metrics.jsonl`` rows, in iteration order) titled ``title``."""
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    warm_end = max((r["turns"] for r in rows if r.get("phase") == "critic_warmup"), default=None)
    for ax, (key, title_, ylabel) in zip(axes.flat, PANELS):
        pts = [(r["turns"], r[key]) for r in rows if r.get(key) is not None and not _nan(r[key])]
        if warm_end is not None:
            ax.axvspan(0, warm_end, color="0.9", label=PHASES["critic_warmup"])
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, lw=1.2, marker="o" if len(pts) < MARKERS_BELOW else None, ms=4, label=key)
        else:
            ax.text(0.5, 0.5, "not logged in this run", ha="center", va="center", transform=ax.transAxes,
                    color="0.4")
        ax.set_title(title_, fontsize=10)
        ax.set_xlabel("environment turns")
        ax.set_ylabel(ylabel, fontsize=9)
        ax.grid(alpha=0.3)
    if warm_end is not None:  # one legend names the band (it is the same on every panel)
        axes.flat[0].legend(handles=[h for h in axes.flat[0].get_legend_handles_labels()[0]
                                     if h.get_label() == PHASES["critic_warmup"]], fontsize=8, loc="best")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


#: ``metrics.jsonl`` logs each timed phase of an iteration as ``time/<phase>`` (seconds); their running
#: sum is the training time of the wall-clock axis (evaluations and the warm-ups are not in it).
_TIME_PREFIX = "time/"


def task_names(rows: list[dict[str, Any]]) -> list[str]:
    """The tasks with per-task success in ``rows`` (a task mixture's run), in first-logged order."""
    names: dict[str, None] = {}
    for r in rows:
        for key in r:
            task = task_of_recent_success_key(key)
            if task is not None:
                names.setdefault(task, None)
    return list(names)


def task_curves_figure(rows: list[dict[str, Any]], title: str) -> Figure:
    """Per-task training success (each task's last 100 finished episodes) against environment turns
    and against seconds of training phases (the running sum of the logged ``time/*`` phases), for the
    rows of a task mixture's run.

    Raises:
        ValueError: ``rows`` hold no per-task success.
    """
    tasks = task_names(rows)
    if not tasks:
        raise ValueError("task_curves_figure: no task/<task>/success_recent100 in these rows")
    seconds, elapsed = [], 0.0
    for r in rows:
        elapsed += sum(float(v or 0.0) for k, v in r.items() if k.startswith(_TIME_PREFIX))
        seconds.append(elapsed)
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2), sharey=True)
    for task in tasks:
        key = recent_success_key(task)
        pts = [(r["turns"], t, r[key]) for r, t in zip(rows, seconds) if r.get(key) is not None and not _nan(r[key])]
        if not pts:
            continue
        turns, secs, ys = zip(*pts)
        axes[0].plot(turns, ys, lw=1.2, label=task)
        axes[1].plot([x / 60 for x in secs], ys, lw=1.2, label=task)
    axes[0].set_xlabel("environment turns")
    axes[1].set_xlabel("training time (minutes of rollout, scoring and update; evaluations not included)")
    axes[0].set_ylabel("training success (fraction of each task's last 100 episodes)", fontsize=9)
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="best")
    fig.suptitle(title + " — per task", fontsize=11)
    fig.tight_layout()
    return fig


def plot_run(run_dir: Path, out: Path | None = None) -> list[Path]:
    """Plot the standard panels against environment turns, and for a task mixture's run also
    :func:`task_curves_figure` (``curves_tasks.png`` beside ``out``); returns the PNG paths written.

    Raises:
        FileNotFoundError: the run has no ``metrics.jsonl``.
    """
    rows = read_metrics(run_dir / "metrics.jsonl")
    out = out or run_dir / "curves.png"
    title = run_title(run_dir)
    fig = curves_figure(rows, title)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    written = [out]
    if task_names(rows):
        per_task = out.with_name(out.stem + "_tasks" + out.suffix)
        fig = task_curves_figure(rows, title)
        fig.savefig(per_task, dpi=90)
        plt.close(fig)
        written.append(per_task)
    return written


def _nan(x: object) -> bool:
    return isinstance(x, float) and math.isnan(x)
