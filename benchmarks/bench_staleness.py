"""P7 collecting ahead: training turns/s with ``rollout.max_staleness=1`` against the synchronous loop.

    python benchmarks/bench_staleness.py [--iterations 6 --envs 32 --turns 16 --pairs 3 --threads 1] [--quick]

Runs ``verlog-train tiny`` in pairs, A (``rollout.max_staleness=1``: the next batch is collected in a
background thread while the trainer scores and updates) then B (0: collect, then update), with the
same settings: the format warm-up off, no critic warm-up (every iteration updates actor and critic
and syncs the engine), ``--threads`` torch threads, no checkpoint in between, a 1-episode final
evaluation. A run's turns/s = its turns / the summed phase seconds of its iterations after the first
two (the first pays one-off warm-up, and the first collection ahead starts in it); with staleness
the rollout phase is the wait for the batch collected during the last update. The figure is the
median over pairs of A / B (goal >= 1.0: never slower; on a machine with a core to spare for the
collection, faster), with its min-max, the thread count and the machine load.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from perfbench import load_note, result_line  # noqa: E402
from verlog.logging import read_metrics  # noqa: E402

TRAIN = "from verlog.cli import train_main; train_main()"
GOAL = 1.0


def run_turns_per_second(staleness: int, args: argparse.Namespace, root: Path, tag: str) -> float:
    """One run of the tiny recipe at ``rollout.max_staleness=staleness``; its turns/s (module docstring)."""
    name = f"s{staleness}_{tag}"
    overrides = [f"iterations={args.iterations}", f"env.num_envs={args.envs}", f"rollout.turns_per_env={args.turns}",
                 f"rollout.max_staleness={staleness}", "format_warmup.steps=0", "ppo.critic_warmup_iterations=0",
                 f"threads={args.threads}", "checkpoint_every=0", "eval.baseline=false", "eval.episodes=1",
                 "eval.num_envs=1", "logging.progress=false", f"run_root={root}", f"name={name}"]
    proc = subprocess.run([sys.executable, "-c", TRAIN, "tiny", *overrides], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench_staleness: the run {name} failed: {proc.stderr.strip().splitlines()[-1:]}")
    rows = read_metrics(root / name / "metrics.jsonl")[2:]
    seconds = sum(v for r in rows for k, v in r.items() if k.startswith("time/"))
    return sum(r["rollout/turns"] for r in rows) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--turns", type=int, default=16)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="3 iterations of 8 envs x 4 turns, 1 pair")
    args = parser.parse_args()
    if args.quick:
        args.iterations, args.envs, args.turns, args.pairs = 3, 8, 4, 1
    if args.iterations < 3:
        raise SystemExit("bench_staleness: --iterations must be >= 3 (the first two are not timed)")
    ratios, a_tps, b_tps = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            a = run_turns_per_second(1, args, Path(tmp), str(pair))
            b = run_turns_per_second(0, args, Path(tmp), str(pair))
            a_tps.append(a)
            b_tps.append(b)
            ratios.append(a / b)
            print(f"pair {pair + 1}: staleness 1 {a:.1f} turns/s, staleness 0 {b:.1f} turns/s, ratio {a / b:.2f}",
                  flush=True)
    med = statistics.median(ratios)
    print(f"{args.envs} envs x {args.turns} turns, {args.iterations} iterations, {args.threads} thread(s) per "
          f"process, {args.pairs} pairs; {load_note()}")
    print(f"ratio median {med:.2f} (min {min(ratios):.2f}, max {max(ratios):.2f}); turns/s median: staleness 1 "
          f"{statistics.median(a_tps):.1f}, staleness 0 {statistics.median(b_tps):.1f}")
    print(result_line("P7", "turns/s collecting ahead / synchronous", med, f">= {GOAL:.2f}"))


if __name__ == "__main__":
    main()
