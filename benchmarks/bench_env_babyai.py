"""Steps per second of the bare minigrid level versus our BabyAI text env, on the same actions.

    python benchmarks/bench_env_babyai.py [--steps 3000 --seed 0 --repeats 3 --tasks goto pickup ...]

For each task one seeded sequence of uniformly random actions is played twice:

* **bare**: the minigrid level the text env wraps (``env.minigrid``, built once with the same
  level, step limit and kwargs), stepped with the action's ``Actions`` index and reset with
  ``seed + episode`` when an episode ends (terminated or truncated);
* **wrapped**: ``make_env("babyai/<task>")`` stepped with the reply ``"ACTION: <name>"`` (parsing,
  BALROG's object descriptions, the info dict) and reset at the same points with the same seeds.

Both play the same episodes (checked by comparing where they end). Times are the best of
``--repeats`` runs (the CPU is shared); overhead = bare steps/s / wrapped steps/s. Resets are inside
the timing on both sides.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from envbench import play, play_text_env  # noqa: E402
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tasks", nargs="*", default=["goto", "pickup", "open", "putnext", "pick_up_seq_go_to"])
    args = parser.parse_args()
    ratios = []
    for task in args.tasks:
        actions = np.random.default_rng(args.seed).integers(len(NAMES), size=args.steps).tolist()
        bare_time, bare_ends = min(run_bare(task, actions, args.seed) for _ in range(args.repeats))
        wrapped_time, wrapped_ends = min(run_wrapped(task, actions, args.seed) for _ in range(args.repeats))
        if bare_ends != wrapped_ends:
            print(f"babyai/{task}: MISMATCH: bare and wrapped episodes end at different steps")
            return 1
        bare, wrapped = args.steps / bare_time, args.steps / wrapped_time
        ratios.append(bare / wrapped)
        print(f"babyai/{task}: bare {bare:.0f} steps/s, wrapped {wrapped:.0f} steps/s, "
              f"overhead {bare / wrapped:.2f}x ({len(bare_ends)} episodes)")
    print(f"mean overhead over {len(ratios)} tasks: {np.mean(ratios):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
