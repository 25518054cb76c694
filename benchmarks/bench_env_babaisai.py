"""Time our Baba Is AI engine stepped bare against the text env, on the same seeded random actions.

    python benchmarks/bench_env_babaisai.py [--steps 2000 --seed 0 --pairs 5 --threads 1 --tasks goto_win ...]

For each task, one seeded sequence of ``--steps`` random actions is played by two sides:

* bare: :func:`~verlog.envs.babaisai.levels.generate_level` + :meth:`BabaGame.step` on engine action
  indices (no text at all), resetting (a new level from the next seed) when a level is won or lost
  or after 100 steps;
* wrapped: ``make_env("babaisai/<task>")`` with ``reset(seed=...)`` and ``step("ACTION: <name>")``
  (reply parsing, observation text, info dict), resetting at the same points.

Both runs see the same levels (``reset(seed=s)`` seeds the same PCG64 stream as ``default_rng(s)``),
which the script checks by comparing the episode ends in an untimed warm-up run of each. Then the two
sides run alternately, wrapped and bare, ``--pairs`` times (:mod:`envbench`). It prints one line per
task: ``babaisai/<task>: bare N steps/s, wrapped M steps/s, overhead Kx (min-max over n pairs)``
(overhead = bare / wrapped steps/s, the median of the per-pair overheads), then the result: the median
of all the tasks' per-pair overheads (goal: <= 1.2x, or at most 10 us added per step).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfbench import add_common_args, preset_threads, report, timed  # noqa: E402

preset_threads()  # OMP_NUM_THREADS before numpy is imported
import numpy as np  # noqa: E402

from envbench import Mismatch, env_result, paired_task, play_text_env, task_line  # noqa: E402
from verlog.envs.babaisai import ACTIONS, BABAISAI_LEVELS, BABAISAI_MAX_STEPS, generate_level  # noqa: E402
from verlog.envs.registry import make_env  # noqa: E402


def run_bare(task: str, actions: np.ndarray, seed: int) -> tuple[float, list[int]]:
    """Seconds for the bare engine, and the step indices where episodes ended (a tight loop of its own,
    not :func:`envbench.play`: a step takes ~3 us, so a call per step would weigh on the bare side)."""
    ends: list[int] = []

    def loop() -> None:
        game, _ = generate_level(task, np.random.RandomState(seed))
        t = 0
        for i, a in enumerate(actions.tolist()):
            result = game.step(a)
            t += 1
            if result or t >= BABAISAI_MAX_STEPS:
                ends.append(i)
                game, _ = generate_level(task, np.random.RandomState(seed + len(ends)))
                t = 0

    return timed(loop), ends


def run_wrapped(task: str, actions: np.ndarray, seed: int) -> tuple[float, list[int]]:
    """Seconds for the text env on the same actions, and the step indices where episodes ended."""
    return play_text_env(make_env(f"babaisai/{task}"), [f"ACTION: {name}" for name in ACTIONS], actions.tolist(), seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", nargs="*", default=list(BABAISAI_LEVELS))
    add_common_args(parser)
    args = parser.parse_args(argv)
    results = {}
    for task in args.tasks:
        actions = np.random.default_rng(args.seed).integers(len(ACTIONS), size=args.steps)
        try:
            times, bare, _ = paired_task(f"babaisai/{task}", lambda: run_bare(task, actions, args.seed),
                                         lambda: run_wrapped(task, actions, args.seed), args.pairs,
                                         match=lambda out: out[1])
        except Mismatch as err:
            print(err)
            return 1
        results[task] = times
        print(task_line(f"babaisai/{task}", times, args.steps) + f" ({len(bare[1])} episodes)", flush=True)
    report(env_result("babaisai", results, args.threads, args.steps), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
