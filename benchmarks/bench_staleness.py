"""P7 collecting ahead: training turns/s with ``rollout.max_staleness=1`` against the synchronous loop.

    python benchmarks/bench_staleness.py [--iterations 6 --envs 32 --turns 16 --pairs 3 --threads 1 --json F] [--quick]

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
import itertools
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from paired import interleave, spread  # noqa: E402
from perfbench import Result, add_common_args, report  # noqa: E402
from verlog.logging import read_metrics  # noqa: E402

TRAIN = "from verlog.cli import train_main; train_main()"
GOAL = 1.0
_RUN_NUMBERS = itertools.count(1)  # each run its own directory


def seconds_per_turn(staleness: int, args: argparse.Namespace, root: Path) -> float:
    """One run of the tiny recipe at ``rollout.max_staleness=staleness``; its seconds per turn (module docstring)."""
    name = f"s{staleness}_{next(_RUN_NUMBERS)}"
    overrides = [f"iterations={args.iterations}", f"env.num_envs={args.envs}", f"rollout.turns_per_env={args.turns}",
                 f"rollout.max_staleness={staleness}", "format_warmup.steps=0", "ppo.critic_warmup_iterations=0",
                 f"threads={args.threads}", "checkpoint_every=0", "eval.baseline=false", "eval.episodes=1",
                 "eval.num_envs=1", "logging.progress=false", f"run_root={root}", f"name={name}"]
    proc = subprocess.run([sys.executable, "-c", TRAIN, "tiny", *overrides], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench_staleness: the run {name} failed: {proc.stderr.strip().splitlines()[-1:]}")
    rows = read_metrics(root / name / "metrics.jsonl")[2:]
    seconds = sum(v for r in rows for k, v in r.items() if k.startswith("time/"))
    return seconds / sum(r["rollout/turns"] for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=6, help="PPO iterations per run (default 6)")
    parser.add_argument("--envs", type=int, default=32, help="environments (default 32, the recipe's)")
    parser.add_argument("--turns", type=int, default=16, help="turns per env and iteration (default 16)")
    add_common_args(parser, pairs=3)
    parser.add_argument("--quick", action="store_true", help="3 iterations of 8 envs x 4 turns, 1 pair")
    args = parser.parse_args(argv)
    if args.quick:
        args.iterations, args.envs, args.turns, args.pairs = 3, 8, 4, 1
    if args.iterations < 3:
        parser.error("--iterations must be >= 3 (the first two are not timed)")
    with tempfile.TemporaryDirectory() as tmp:
        times = interleave(lambda: seconds_per_turn(1, args, Path(tmp)), lambda: seconds_per_turn(0, args, Path(tmp)),
                           pairs=args.pairs, warmup=0)
    ahead, sync = 1.0 / spread(times.a).median, 1.0 / spread(times.b).median
    report(Result.of("P7", "staleness", f"collecting ahead {ahead:.1f} turns/s vs synchronous {sync:.1f} turns/s "
                     f"({args.envs} envs x {args.turns} turns)", f">= {GOAL:.2f}", times.rate_ratios(), args.threads),
           args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
