"""Time our Baba Is AI engine stepped bare against the text env, on the same seeded random actions.

    python benchmarks/bench_env_babaisai.py [--steps 2000 --seed 0 --tasks goto_win two_room-make_win]

For each task, one seeded sequence of ``--steps`` random actions is played twice:

* bare: :func:`~verlog.envs.babaisai.levels.generate_level` + :meth:`BabaGame.step` on engine action
  indices (no text at all), resetting (a new level from the next seed) when a level is won or lost
  or after 100 steps;
* wrapped: ``make_env("babaisai/<task>")`` with ``reset(seed=...)`` and ``step("ACTION: <name>")``
  (reply parsing, observation text, info dict), resetting at the same points.

Both runs see the same levels (``reset(seed=s)`` seeds the same PCG64 stream as ``default_rng(s)``),
which the script checks by comparing the episode ends. It prints one line per task:
``babaisai/<task>: bare N steps/s, wrapped M steps/s, overhead Kx`` (overhead = bare / wrapped),
then the mean over the tasks. Timings are the best of ``--repeats`` runs (the CPU is shared).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from envbench import play_text_env  # noqa: E402
from verlog.envs.babaisai import ACTIONS, BABAISAI_LEVELS, BABAISAI_MAX_STEPS, generate_level  # noqa: E402
from verlog.envs.registry import make_env  # noqa: E402


def run_bare(task: str, actions: np.ndarray, seed: int) -> tuple[float, list[int]]:
    """Seconds for the bare engine, and the step indices where episodes ended."""
    ends = []
    episode = 0
    start = time.perf_counter()
    game, _ = generate_level(task, np.random.RandomState(seed))
    t = 0
    for i, a in enumerate(actions.tolist()):
        result = game.step(a)
        t += 1
        if result or t >= BABAISAI_MAX_STEPS:
            ends.append(i)
            episode += 1
            game, _ = generate_level(task, np.random.RandomState(seed + episode))
            t = 0
    return time.perf_counter() - start, ends


def run_wrapped(task: str, actions: np.ndarray, seed: int) -> tuple[float, list[int]]:
    """Seconds for the text env on the same actions, and the step indices where episodes ended."""
    return play_text_env(make_env(f"babaisai/{task}"), [f"ACTION: {name}" for name in ACTIONS], actions.tolist(), seed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tasks", nargs="*", default=list(BABAISAI_LEVELS))
    args = parser.parse_args()
    ratios, bare_rates, wrapped_rates = [], [], []
    for task in args.tasks:
        actions = np.random.default_rng(args.seed).integers(len(ACTIONS), size=args.steps)
        bare_time, bare_ends = min(run_bare(task, actions, args.seed) for _ in range(args.repeats))
        wrapped_time, wrapped_ends = min(run_wrapped(task, actions, args.seed) for _ in range(args.repeats))
        if bare_ends != wrapped_ends:
            print(f"babaisai/{task}: MISMATCH: bare and wrapped episodes end at different steps")
            return 1
        bare, wrapped = args.steps / bare_time, args.steps / wrapped_time
        bare_rates.append(bare)
        wrapped_rates.append(wrapped)
        ratios.append(bare / wrapped)
        print(f"babaisai/{task}: bare {bare:.1f} steps/s, wrapped {wrapped:.1f} steps/s, "
              f"overhead {bare / wrapped:.2f}x ({len(bare_ends)} episodes)")
    print(f"mean over {len(ratios)} tasks: bare {np.mean(bare_rates):.1f} steps/s, "
          f"wrapped {np.mean(wrapped_rates):.1f} steps/s, overhead {np.mean(ratios):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
