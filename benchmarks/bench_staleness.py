"""P7 collecting ahead: training turns/s with ``rollout.max_staleness=1`` against the synchronous loop.

    python benchmarks/bench_staleness.py [--task babyai|tools] [--iterations 6 --envs N --turns T --pairs 3 --threads 1 --json F] [--quick]

Runs ``verlog-train`` in pairs, A (``rollout.max_staleness=1``: the next batch is collected in a
background thread while the trainer scores and updates) then B (0: collect, then update), with the
same settings: the format warm-up off, no critic warm-up (every iteration updates actor and critic
and syncs the engine), ``--threads`` torch threads, no checkpoint in between, a 1-episode final
evaluation. A run's turns/s = its turns / the summed phase seconds of its iterations after the first
two (the first pays one-off warm-up, and the first collection ahead starts in it); with staleness
the rollout phase is the wait for the batch collected during the last update. The figure is the
median over pairs of A / B, with its min-max, the thread count and the machine load.

``--task babyai`` (default): the ``tiny`` recipe (32 envs x 16 turns); goal >= 1.0, never slower (on a
machine with a core to spare for the collection, faster).

``--task tools``: the calculator tool task (``recipes/calculator_tools.yaml``, 64 conversations of up
to 2 turns) with ``agent.tool_latency_s=--latency`` (0.1 s) injected into every tool call: the
asynchronous figure of the agentic loop, goal >= 1.5. Its runs start from a model that writes tool
calls: ``--model DIR`` (a format-warmed model directory), else one is made first, untimed, by a
one-iteration run of the recipe with its format warm-up (several minutes), whose ``format_warmup``
directory serves every run.
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
GOALS = {"babyai": 1.0, "tools": 1.5}
SIZES = {"babyai": (32, 16), "tools": (64, 2)}  # (envs, turns per env): each recipe's own
RECIPES = {"babyai": "tiny", "tools": "calculator_tools"}
_RUN_NUMBERS = itertools.count(1)  # each run its own directory


def _train(args: argparse.Namespace, name: str, overrides: list[str]) -> None:
    """``verlog-train <the task's recipe> overrides...`` in a fresh process; exits with one line when it fails."""
    proc = subprocess.run([sys.executable, "-c", TRAIN, RECIPES[args.task], *overrides], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench_staleness: the run {name} failed: {proc.stderr.strip().splitlines()[-1:]}")


def warmed_model(args: argparse.Namespace, root: Path) -> str:
    """A directory of the calculator recipe's model after its format warm-up: ``--model`` when given,
    else the warm-up of a one-iteration run made here (untimed)."""
    if args.model:
        return args.model
    _train(args, "warmup", ["iterations=1", "ppo.critic_warmup_iterations=0", f"threads={args.threads}",
                            "eval.baseline=false", "eval.episodes=1", "eval.num_envs=1", "logging.progress=false",
                            f"run_root={root}", "name=warmup"])
    return str(root / "warmup" / "format_warmup")


def seconds_per_turn(staleness: int, args: argparse.Namespace, root: Path, extra: list[str]) -> float:
    """One run of the task's recipe at ``rollout.max_staleness=staleness`` (``extra``: the task's own
    overrides); its seconds per turn (module docstring)."""
    name = f"s{staleness}_{next(_RUN_NUMBERS)}"
    overrides = [f"iterations={args.iterations}", f"env.num_envs={args.envs}", f"rollout.turns_per_env={args.turns}",
                 f"rollout.max_staleness={staleness}", "format_warmup.steps=0", "ppo.critic_warmup_iterations=0",
                 f"threads={args.threads}", "checkpoint_every=0", "eval.baseline=false", "eval.episodes=1",
                 "eval.num_envs=1", "logging.progress=false", f"run_root={root}", f"name={name}", *extra]
    _train(args, name, overrides)
    rows = read_metrics(root / name / "metrics.jsonl")[2:]
    seconds = sum(v for r in rows for k, v in r.items() if k.startswith("time/"))
    return seconds / sum(r["rollout/turns"] for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(RECIPES), default="babyai",
                        help="babyai: the tiny recipe (default); tools: the calculator tool task with tool latency")
    parser.add_argument("--iterations", type=int, default=6, help="PPO iterations per run (default 6)")
    parser.add_argument("--envs", type=int, default=None, help="environments / conversations (default: the recipe's)")
    parser.add_argument("--turns", type=int, default=None, help="turns per env and iteration (default: the recipe's)")
    parser.add_argument("--latency", type=float, default=0.1, help="--task tools: seconds every tool call waits (0.1)")
    parser.add_argument("--model", default=None, help="--task tools: a format-warmed model directory to start from")
    add_common_args(parser, pairs=3)
    parser.add_argument("--quick", action="store_true", help="3 iterations of 8 envs x 4 turns (tools: 16 x 2), 1 pair")
    args = parser.parse_args(argv)
    envs, turns = SIZES[args.task]
    args.envs, args.turns = args.envs or envs, args.turns or turns
    if args.quick:
        args.iterations, args.pairs = 3, 1
        args.envs, args.turns = (8, 4) if args.task == "babyai" else (16, 2)
    if args.iterations < 3:
        parser.error("--iterations must be >= 3 (the first two are not timed)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        extra = [] if args.task == "babyai" else [f"model.path={warmed_model(args, root)}",
                                                  f"agent.tool_latency_s={args.latency}"]
        times = interleave(lambda: seconds_per_turn(1, args, root, extra),
                           lambda: seconds_per_turn(0, args, root, extra), pairs=args.pairs, warmup=0)
    ahead, sync = 1.0 / spread(times.a).median, 1.0 / spread(times.b).median
    where = (f"{args.envs} envs x {args.turns} turns" if args.task == "babyai" else
             f"calculator, {args.envs} conversations, {args.latency * 1000:.0f} ms a tool call")
    name = "staleness" if args.task == "babyai" else "staleness-tools"
    goal = GOALS[args.task]
    report(Result.of("P7", name, f"collecting ahead {ahead:.1f} turns/s vs synchronous {sync:.1f} turns/s "
                     f"({where})", f">= {goal:.2f}", times.rate_ratios(), args.threads), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
