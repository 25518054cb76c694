"""How cost grows with work: seconds per training iteration against the batch's shape and the memory
window, and GAE seconds against batch size; a JSON file and a figure of four panels.

    python benchmarks/growth.py [--what envs,steps,window,gae] [--rounds 2 --iterations 3 --threads 1]
                                [--out runs/growth] [--plot docs/growth.png] [--quick]
    python benchmarks/growth.py --replot runs/growth/growth.json --plot docs/growth.png

Sweeps (each point a fresh ``verlog-train tiny`` process with the format warm-up and the critic
warm-up off, so every iteration collects, scores, updates actor and critic and syncs the engine;
``--iterations`` iterations, the first untimed; ``env.vector_mode=sync`` so that the env steps run in
the training process and the figure is the trainer's own cost):

* ``envs``: ``env.num_envs`` 8, 16, 32, 64 at 16 turns per env (the batch grows with N);
* ``steps``: the episode step limit ``env.max_steps`` 16, 32, 64, 128 at the recipe's 32 x 16 batch
  (same turns per batch; longer episodes, fewer resets);
* ``window``: ``memory.history_turns`` 0, 1, 2, 4 at 32 x 16 (longer prompts, same turns);
* ``gae``: one ``dual_discount_gae`` call (T = 32 turns, R = 256 token slots, N = 16 ... 512 envs),
  the median over ``--repeats`` calls after warm-up calls, in this process.

The points of a sweep run round-robin, ``--rounds`` times (a change of machine load then touches
every point, not one); a point's figure is the median over its rounds of the median seconds per timed
iteration, split into the trainer's phases (``time/rollout``, ``time/scoring``, ``time/update``,
``time/sync``), with the turns and the mean prompt tokens of an iteration. The JSON
(``--out``/growth.json) keeps every round. The figure plots seconds per iteration (stacked by phase)
against the swept value, with the line through the origin and the smallest point (linear growth) for
the sweeps whose work grows with the value.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfbench import load_note, set_threads, timed  # noqa: E402

TRAIN = "from verlog.cli import train_main; train_main()"
PHASES = ("rollout", "scoring", "update", "sync")
SWEEPS: dict[str, tuple[str, tuple[int, ...]]] = {
    "envs": ("env.num_envs", (8, 16, 32, 64)),
    "steps": ("env.max_steps", (16, 32, 64, 128)),
    "window": ("memory.history_turns", (0, 1, 2, 4)),
}
GAE_ENVS = (16, 32, 64, 128, 256, 512)
_RUNS = itertools.count(1)


def iteration_seconds(key: str, value: int, args: argparse.Namespace, root: Path) -> dict[str, float]:
    """One ``verlog-train tiny`` run with ``key=value``: :func:`summarise` of its timed iterations.

    Raises:
        SystemExit: the run failed (its last stderr line is given).
    """
    from verlog.logging import read_metrics

    name = f"run{next(_RUNS)}"
    overrides = [f"iterations={args.iterations}", "format_warmup.steps=0", "ppo.critic_warmup_iterations=0",
                 f"threads={args.threads}", "env.vector_mode=sync", "checkpoint_every=0", "eval.baseline=false",
                 "eval.episodes=1", "eval.num_envs=1", "logging.progress=false", f"run_root={root}",
                 f"name={name}", *args.overrides, f"{key}={value}"]  # the swept key last: it wins
    proc = subprocess.run([sys.executable, "-c", TRAIN, "tiny", *overrides], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"growth: the run {key}={value} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return summarise(read_metrics(root / name / "metrics.jsonl")[1:])


def summarise(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Medians over the timed iterations' metrics rows: seconds of each phase (a phase missing from a
    row counts 0 s), of the whole iteration (the phases' sum), the turns and the mean prompt tokens.

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("growth: no timed iteration in the run's metrics")
    out = {p: statistics.median(r.get(f"time/{p}", 0.0) for r in rows) for p in PHASES}
    out["total"] = statistics.median(sum(r.get(f"time/{p}", 0.0) for p in PHASES) for r in rows)
    out["turns"] = statistics.median(r["rollout/turns"] for r in rows)
    out["prompt_tokens"] = statistics.median(r.get("prompt/tokens_mean", float("nan")) for r in rows)
    return out


def sweep(what: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Every point of one sweep, ``--rounds`` times round-robin; per point its rounds and their medians."""
    key, values = SWEEPS[what]
    rounds: dict[int, list[dict[str, Any]]] = {v: [] for v in values}
    for r in range(args.rounds):
        for v in values:
            rounds[v].append(iteration_seconds(key, v, args, root))
            print(f"growth {what}: round {r + 1} {key}={v}: {rounds[v][-1]['total']:.2f} s/iteration "
                  f"({load_note()})", flush=True)
    points = [{"value": v, **{k: statistics.median(x[k] for x in rounds[v]) for k in rounds[v][0]},
               "rounds": rounds[v]} for v in values]
    return {"key": key, "points": points}


def gae_sweep(args: argparse.Namespace) -> dict[str, Any]:
    """Seconds per ``dual_discount_gae`` call against N (T = 32, R = 256), in this process."""
    import torch

    from bench_gae import make_batch
    from verlog.algos.gae import dual_discount_gae

    gammas = (0.99, 0.95, 1.0, 1.0)
    points = []
    for n in GAE_ENVS:
        batch = make_batch(32, n, 256, torch.float32, "cpu", seed=n)
        for _ in range(3):
            dual_discount_gae(*batch, *gammas)
        secs = statistics.median(timed(lambda: dual_discount_gae(*batch, *gammas)) for _ in range(args.repeats))
        points.append({"value": n, "total": secs, "turns": 32 * n})
        print(f"growth gae: N={n}: {secs * 1e3:.2f} ms a call ({load_note()})", flush=True)
    return {"key": "envs (T=32, R=256)", "points": points}


def plot(results: dict[str, Any], path: Path) -> None:
    """Four panels: seconds per iteration by phase for each sweep, and GAE seconds against N."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.6), squeeze=False)
    for ax, (what, res) in zip(axes[0], results.items()):
        xs = [p["value"] for p in res["points"]]
        if what == "gae":
            ys = [p["total"] * 1e3 for p in res["points"]]
            ax.loglog(xs, ys, "o-", label="measured")
            ax.loglog(xs, [ys[0] * x / xs[0] for x in xs], "k--", lw=0.8, label="linear from the first point")
            ax.set_xticks(xs, [str(x) for x in xs])
            ax.minorticks_off()
            ax.set_ylabel("ms per call")
        else:
            bottom = [0.0] * len(xs)
            for phase in PHASES:
                ys = [p[phase] for p in res["points"]]
                ax.bar([str(x) for x in xs], ys, bottom=bottom, label=phase)
                bottom = [b + y for b, y in zip(bottom, ys)]
            if what == "envs":  # the work grows with N: the linear line through the first point
                ax.plot([str(x) for x in xs], [bottom[0] * x / xs[0] for x in xs], "k--", lw=0.8,
                        label="linear from the first point")
            if what == "window" and all(p.get("prompt_tokens") for p in res["points"]):
                tokens = [p["prompt_tokens"] for p in res["points"]]  # the work grows with the prompt
                ax.plot([str(x) for x in xs], [bottom[0] * t / tokens[0] for t in tokens], "k--", lw=0.8,
                        label="prompt tokens, from the first point")
            ax.set_ylabel("seconds per iteration")
        ax.set_xlabel(res["key"])
        ax.set_title(what)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--what", default="envs,steps,window,gae", help="comma-separated sweeps (default all four)")
    parser.add_argument("--rounds", type=int, default=2, help="round-robin passes over a sweep's points (default 2)")
    parser.add_argument("--iterations", type=int, default=3, help="iterations per run, the first untimed (default 3)")
    parser.add_argument("--repeats", type=int, default=20, help="gae: timed calls per point (default 20)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--out", default="runs/growth", help="directory of growth.json (default runs/growth)")
    parser.add_argument("--plot", default=None, help="where the PNG goes (default <out>/growth.png)")
    parser.add_argument("--quick", action="store_true", help="1 round of 2 iterations, gae 3 repeats")
    parser.add_argument("--replot", default=None, metavar="JSON",
                        help="draw the figure of an earlier run's growth.json (to --plot) and measure nothing")
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    args = parser.parse_args(argv)
    if args.replot:
        saved = json.loads(Path(args.replot).read_text())
        target = Path(args.plot) if args.plot else Path(args.replot).with_suffix(".png")
        plot({k: v for k, v in saved.items() if k != "meta"}, target)
        print(f"growth: drew {target} from {args.replot}")
        return 0
    if args.quick:
        args.rounds, args.iterations, args.repeats = 1, 2, 3
    wanted = [w.strip() for w in args.what.split(",") if w.strip()]
    unknown = [w for w in wanted if w not in (*SWEEPS, "gae")]
    if unknown:
        parser.error(f"--what: unknown sweep(s) {unknown}; choose from {[*SWEEPS, 'gae']}")
    if args.iterations < 2:
        parser.error("--iterations must be >= 2 (the first is not timed)")
    set_threads(args.threads)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for what in wanted:
            results[what] = gae_sweep(args) if what == "gae" else sweep(what, args, Path(tmp))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"threads": args.threads, "rounds": args.rounds, "iterations": args.iterations, "load_at_end": load_note()}
    (out / "growth.json").write_text(json.dumps({"meta": meta, **results}, indent=1))
    plot(results, Path(args.plot) if args.plot else out / "growth.png")
    print(f"growth: wrote {out / 'growth.json'} and the figure ({load_note()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
