"""P5 scaling: training turns/s with 2 data-parallel processes against 1, same total envs, in pairs.

    python benchmarks/bench_scaling.py [--iterations 3 --total-envs 8 --turns 8 --procs 2 --pairs 5] [--quick]

Runs ``verlog-train tiny`` under ``torch.distributed.run`` on loopback (as ``tests/test_distributed.py``
does), alternately (:mod:`paired`, no warm-up pair: every run is a fresh process whose first
iteration is left out): A with ``--procs`` processes and ``--total-envs / --procs`` environments each,
B with 1 process and ``--total-envs`` environments, so every iteration collects the same
``total envs x --turns`` turns. Both runs: the format warm-up off, no critic warm-up (every
iteration updates actor and critic), sync vector envs, episodes cut at 16 steps and a 1-episode final
evaluation (both only shorten what is not timed: every iteration is T x N turns either way), and
1 torch thread per process (``--threads``, which sets ``threads=`` and ``OMP_NUM_THREADS`` of every
process; 0 = CPUs // processes, the same cores for both runs):
one process on one core against N processes on N cores. Why not the recipe's 2 threads: on this
loaded 2-core machine 2 OpenMP threads per process stall on each other (measured at load ~7: the
1-process run made 2.5 turns/s with 2 threads, 56.6 with 1), which swamps what is measured here.

turns/s of a run = turns of all ranks / (rollout + scoring + update + sync seconds) summed over the
iterations after the first (the trainer's ``turns_per_second``; the first iteration pays one-off
warm-up and is left out; with ``--iterations 1`` it is kept). Start-up, the final evaluation and
checkpoints are not counted. The ratio of a pair is N-process / 1-process turns/s, the result the
median of the per-pair ratios with their min-max; the goal is ideal scaling (N), reported as is: with
as many processes as cores, expect little.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paired import interleave, spread  # noqa: E402
from perfbench import Result, add_common_args, load_note, report  # noqa: E402
from verlog.logging import read_metrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAIN = "from verlog.cli import train_main; train_main()"


def free_port() -> int:
    """A free TCP port on loopback for the rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def process_threads(threads: int, procs: int) -> int:
    """Torch threads per process of a ``procs``-process run: ``threads``, or CPUs // procs for 0."""
    return threads or max(1, (os.cpu_count() or 1) // procs)


def train_overrides(procs: int, total_envs: int, turns: int, iterations: int, run_root: Path,
                    threads: int) -> list[str]:
    """The tiny recipe's overrides for one run of ``procs`` processes (``threads`` per process; 0:
    CPUs // procs)."""
    envs = total_envs // procs
    threads = process_threads(threads, procs)
    turns_per_rank = envs * turns
    return [f"iterations={iterations}", f"env.num_envs={envs}", f"rollout.turns_per_env={turns}",
            "env.vector_mode=sync", "format_warmup.steps=0", "ppo.critic_warmup_iterations=0",
            f"ppo.minibatches={min(4, turns_per_rank)}", f"ppo.micro_batch_size={max(1, turns_per_rank // 4)}",
            "ppo.epochs=2", f"threads={threads}", "eval.baseline=false", "env.max_steps=16",
            "eval.episodes=1", "eval.num_envs=1", "logging.progress=false", f"run_root={run_root}",
            f"name=p{procs}"]


def run_training(procs: int, total_envs: int, turns: int, iterations: int, run_root: Path,
                 timeout: float, threads: int = 1) -> float:
    """Train under the launcher with ``procs`` processes; returns its turns/s (see the module docstring).

    Raises:
        RuntimeError: the run failed (the tail of its output is in the message).
    """
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs), "--master_addr",
           "127.0.0.1", "--master_port", str(free_port()), "--no-python", sys.executable, "-c", TRAIN, "tiny",
           *train_overrides(procs, total_envs, turns, iterations, run_root, threads)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": str(process_threads(threads, procs))}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{procs}-process run failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    rows = read_metrics(run_root / f"p{procs}" / "metrics.jsonl")
    timed = rows[1:] or rows
    turns_done = sum(r["rollout/turns"] for r in timed) * procs  # rollout/turns: rank 0's turns
    seconds = sum(v for r in timed for k, v in r.items() if k.startswith("time/"))
    return turns_done / seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iterations", type=int, default=3, help="PPO iterations per run (default 3)")
    p.add_argument("--total-envs", type=int, default=8, help="environments over all processes (default 8)")
    p.add_argument("--turns", type=int, default=8, help="turns per env per iteration (default 8)")
    p.add_argument("--procs", type=int, default=2, help="processes of the parallel run (default 2)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads per process (default 1; 0: CPUs // processes, the same cores in total)")
    add_common_args(p, threads=False)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per run (default 600)")
    p.add_argument("--quick", action="store_true", help="smallest run: 1 iteration, 2 envs x 2 turns, 2 pairs")
    args = p.parse_args(argv)
    if args.quick:
        args.iterations, args.total_envs, args.turns, args.pairs = 1, 2, 2, 2
    if args.total_envs % args.procs:
        p.error(f"--total-envs {args.total_envs} must be divisible by --procs {args.procs}")
    with tempfile.TemporaryDirectory(prefix="bench_scaling_") as tmp:
        def seconds_per_turn(procs: int) -> float:
            run_root = Path(tempfile.mkdtemp(dir=tmp))  # a fresh run directory for every run
            return 1.0 / run_training(procs, args.total_envs, args.turns, args.iterations, run_root, args.timeout,
                                      args.threads)

        times = interleave(lambda: seconds_per_turn(args.procs), lambda: seconds_per_turn(1), pairs=args.pairs,
                           warmup=0)
    many, one = 1.0 / spread(times.a).median, 1.0 / spread(times.b).median
    threads = process_threads(args.threads, args.procs)
    print(f"bench_scaling: tiny recipe, {args.total_envs} envs in total x {args.turns} turns, {args.iterations} "
          f"iterations (first left out when more than one), {args.threads or 'CPUs // processes'} thread(s) per "
          f"process; medians of {args.pairs} pairs: 1 process {one:.1f} turns/s, {args.procs} processes "
          f"{many:.1f} turns/s; {load_note()}")
    report(Result.of("P5", "scaling", f"{args.procs} processes {many:.1f} turns/s vs 1 process {one:.1f} turns/s",
                     f">= {args.procs:.2f} (ideal; {os.cpu_count()} CPUs here)", times.rate_ratios(), threads),
           args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
