"""Steps per second of the bare minigrid level versus our BabyAI text env, on the same actions.

    python benchmarks/bench_env_babyai.py [--steps 3000 --seed 0 --pairs 5 --threads 1 --tasks goto pickup ...]

For each task one seeded sequence of uniformly random actions is played by two sides:

* **bare**: the minigrid level the text env wraps (``env.minigrid``, built once with the same
  level, step limit and kwargs), stepped with the action's ``Actions`` index and reset with
  ``seed + episode`` when an episode ends (terminated or truncated);
* **wrapped**: ``make_env("babyai/<task>")`` stepped with the reply ``"ACTION: <name>"`` (parsing,
  BALROG's object descriptions, the info dict) and reset at the same points with the same seeds.

Both play the same episodes (checked by comparing where they end, in an untimed warm-up run of each).
Then the two sides run alternately, wrapped and bare, ``--pairs`` times (:mod:`envbench`); overhead =
bare steps/s / wrapped steps/s, per pair. Resets are inside the timing on both sides. One line per
task (median steps/s of each side, the median overhead and its min-max), then the result: the median
of all the tasks' per-pair overheads (goal: <= 1.2x, or at most 10 us added per step).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfbench import add_common_args, preset_threads, report  # noqa: E402

preset_threads()  # OMP_NUM_THREADS before numpy is imported
import numpy as np  # noqa: E402

from envbench import Mismatch, env_result, paired_task, play, play_text_env, task_line  # noqa: E402
from verlog.envs.babyai import BABYAI_ACTIONS  # noqa: E402
from verlog.envs.registry import make_env  # noqa: E402

NAMES = list(BABYAI_ACTIONS)


def run_bare(task: str, actions: list[int], seed: int) -> tuple[float, list[int]]:
    """Seconds for the bare minigrid level, and the step indices where episodes ended."""
    level = make_env(f"babyai/{task}").minigrid
    codes = [BABYAI_ACTIONS[name] for name in NAMES]
    return play(lambda s: level.reset(seed=s), lambda a: any(level.step(codes[a])[2:4]), actions, seed)


def run_wrapped(task: str, actions: list[int], seed: int) -> tuple[float, list[int]]:
    """Seconds for the text env on the same actions, and the step indices where episodes ended."""
    return play_text_env(make_env(f"babyai/{task}"), [f"ACTION: {name}" for name in NAMES], actions, seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", nargs="*", default=["goto", "pickup", "open", "putnext", "pick_up_seq_go_to"])
    add_common_args(parser)
    args = parser.parse_args(argv)
    results = {}
    for task in args.tasks:
        actions = np.random.default_rng(args.seed).integers(len(NAMES), size=args.steps).tolist()
        try:
            times, bare, _ = paired_task(f"babyai/{task}", lambda: run_bare(task, actions, args.seed),
                                         lambda: run_wrapped(task, actions, args.seed), args.pairs,
                                         match=lambda out: out[1])
        except Mismatch as err:
            print(err)
            return 1
        results[task] = times
        print(task_line(f"babyai/{task}", times, args.steps) + f" ({len(bare[1])} episodes)", flush=True)
    report(env_result("babyai", results, args.threads, args.steps), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
