"""PPO with turn-level GAE vs the critic-free family on the tiny task, same turn budget and seeds.

    python benchmarks/compare_algorithms.py [--algorithms ppo grpo gigpo] [--seeds 0 1 2]
        [--turn-budget 16384] [--parallel 2] [--out runs/compare_algorithms] [--recipe tiny] [KEY=VALUE ...]

Each (algorithm, seed) pair trains ``verlog-train <recipe> algorithm=<a> seed=<s> turn_budget=<B>``
(every run stops after the iteration in which it reaches B turns) and ends with the recipe's greedy
evaluation on fixed seeds. Runs go ``--parallel`` at a time with ``threads=1`` each. Writes to
``--out``:

* ``results.csv``: one row per run: final greedy success (and its standard error), training
  success over the last 10% of its turns, turns, wall seconds, iterations, and for the group
  algorithms the share of groups with no learning signal (all episode returns equal);
* ``table.md``: mean ± standard error over seeds per algorithm (the table in docs/results.md);
* ``success_vs_turns.png``: training success (per-iteration episode success, smoothed) against
  turns, one thin line per seed and the seed mean per algorithm.

It prints each run's summary line and, per group run, how many groups had no learning signal.
Extra ``KEY=VALUE`` arguments are passed to every run (e.g. ``env.task=babyai/goto``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from verlog.logging import read_metrics  # noqa: E402


def run_one(out: Path, recipe: str, algorithm: str, seed: int, budget: int, extra: list[str]) -> dict[str, Any]:
    """Train one (algorithm, seed) run; return its summary row."""
    name = f"{algorithm}_seed{seed}"
    args = [sys.executable, "-c", "from verlog.cli import train_main; train_main()", recipe, f"algorithm={algorithm}",
            f"seed={seed}", f"turn_budget={budget}", "iterations=100000", f"name={name}", f"run_root={out}",
            "overwrite=true", "threads=1", "logging.progress=false", "eval.baseline=false", *extra]
    # Its own clock: the run's wall seconds are a column of results.csv, not one side of a paired ratio.
    tic = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    seconds = time.perf_counter() - tic
    (out / f"{name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    return summarise(out, algorithm, seed, seconds)


def summarise(out: Path, algorithm: str, seed: int, seconds: float) -> dict[str, Any]:
    """The summary row of a finished run ``<out>/<algorithm>_seed<seed>``."""
    name = f"{algorithm}_seed{seed}"
    rows = read_metrics(out / name / "metrics.jsonl")
    ev = json.loads((out / name / "eval.json").read_text())
    turns = rows[-1]["turns"]
    tail = [r for r in rows if r["turns"] > 0.9 * turns] or rows[-1:]
    groups = sum(r.get("algo/groups", 0.0) for r in rows)
    no_signal = sum(r.get("algo/no_signal_groups", 0.0) for r in rows)
    return {"algorithm": algorithm, "seed": seed, "greedy_success": ev["success_mean"], "greedy_se": ev["success_se"],
            "train_success_last10pct": statistics.fmean(_finite(r["episode/success"] for r in tail) or [math.nan]),
            "turns": turns, "iterations": len(rows), "seconds": round(seconds, 1),
            "no_signal_groups": int(no_signal), "groups": int(groups)}


def _finite(xs) -> list[float]:
    """The values that are numbers (an iteration in which no episode ended logs null/NaN)."""
    return [float(x) for x in xs if x is not None and not math.isnan(x)]


def _mean_se(xs: list[float]) -> str:
    xs = _finite(xs)
    if not xs:
        return "–"
    m = statistics.fmean(xs)
    se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0
    return f"{m:.2f} ± {se:.2f}"


def write_table(results: list[dict[str, Any]], path: Path, budget: int) -> str:
    lines = [f"| algorithm | greedy success (100 eps, mean ± se over seeds) | training success, last 10% of turns | "
             f"turns | minutes per run | groups with no signal |",
             "|---|---|---|---|---|---|"]
    for algo in dict.fromkeys(r["algorithm"] for r in results):
        rs = [r for r in results if r["algorithm"] == algo]
        groups = sum(r["groups"] for r in rs)
        no_sig = f"{sum(r['no_signal_groups'] for r in rs)}/{groups}" if groups and algo != "ppo" else "–"
        lines.append(f"| {algo} ({len(rs)} seeds) | {_mean_se([r['greedy_success'] for r in rs])} | "
                     f"{_mean_se([r['train_success_last10pct'] for r in rs])} | "
                     f"{statistics.fmean(r['turns'] for r in rs):,.0f} | "
                     f"{statistics.fmean(r['seconds'] for r in rs) / 60:.1f} | {no_sig} |")
    text = "\n".join(lines) + f"\n\nTurn budget {budget:,} per run.\n"
    path.write_text(text)
    return text


def plot(out: Path, results: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, algo in enumerate(dict.fromkeys(r["algorithm"] for r in results)):
        color = f"C{i}"
        curves = []
        for r in (r for r in results if r["algorithm"] == algo):
            rows = read_metrics(out / f"{algo}_seed{r['seed']}" / "metrics.jsonl")
            x = np.array([row["turns"] for row in rows], dtype=float)
            raw = np.array([np.nan if row["episode/success"] is None else row["episode/success"] for row in rows],
                           dtype=float)
            # centred 3-iteration mean; iterations in which no episode ended are skipped
            y = np.array([np.nanmean(raw[max(0, k - 1):k + 2]) if np.isfinite(raw[max(0, k - 1):k + 2]).any()
                          else 0.0 for k in range(len(raw))])
            ax.plot(x, y, color=color, alpha=0.25, lw=0.8)
            curves.append((x, y))
        grid = np.linspace(0, min(c[0][-1] for c in curves), 60)
        mean = np.mean([np.interp(grid, x, y) for x, y in curves], axis=0)
        ax.plot(grid, mean, color=color, lw=2, label=f"{algo} (mean of {len(curves)} seeds)")
    ax.set_xlabel("turns")
    ax.set_ylabel("training episode success")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "success_vs_turns.png", dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--algorithms", nargs="+", default=["ppo", "grpo", "gigpo"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--turn-budget", type=int, default=16384)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--recipe", default="tiny")
    p.add_argument("--out", type=Path, default=REPO / "runs" / "compare_algorithms")
    p.add_argument("overrides", nargs="*", help="KEY=VALUE passed to every run")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    jobs = [(algo, seed) for seed in a.seeds for algo in a.algorithms]
    with ThreadPoolExecutor(a.parallel) as pool:
        futures = {job: pool.submit(run_one, a.out, a.recipe, *job, a.turn_budget, a.overrides) for job in jobs}
        results = []
        for job, fut in futures.items():
            r = fut.result()
            results.append(r)
            note = (f"; {r['no_signal_groups']}/{r['groups']} groups had no learning signal (all returns equal)"
                    if r["groups"] else "")
            print(f"{job[0]} seed {job[1]}: greedy success {r['greedy_success']:.2f} ± {r['greedy_se']:.2f}, "
                  f"{r['turns']} turns in {r['seconds'] / 60:.1f} min{note}", flush=True)
    results.sort(key=lambda r: (a.algorithms.index(r["algorithm"]), r["seed"]))
    with open(a.out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(results[0]))
        writer.writeheader()
        writer.writerows(results)
    print(write_table(results, a.out / "table.md", a.turn_budget))
    plot(a.out, results)
    print(f"wrote {a.out}/results.csv, table.md, success_vs_turns.png")


if __name__ == "__main__":
    main()
