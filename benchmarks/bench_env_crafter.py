"""Steps per second of the bare ``crafter.Env`` versus our text env, on the same actions.

    python benchmarks/bench_env_crafter.py [--steps 2000 --seed 0 --sizes 64,256 --steps-256 400 --pairs 5]

For each image size S (crafter's default 64x64, and BALROG's 256x256) it draws one seeded sequence
of uniformly random crafter actions and plays it by two sides:

* **bare**: ``crafter.Env(size=S, length=None)`` with its normal ``step`` (renders an S x S frame
  every step), reset when the player dies;
* **wrapped**: ``make_env("crafter/default", image_size=S)``: the reply ``"ACTION: <name>"`` is parsed,
  the step runs without rendering, and the text observation and context are built; reset when the
  episode ends (death; the 2000-step limit is not reached by a random agent).

Both start from the same world (seed); after the first death each continues with its own next
world, so episode lengths differ a little. After an untimed run of each, the two sides run
alternately, wrapped and bare, ``--pairs`` times (:mod:`envbench`). Step time and reset time are
measured separately; each size's line gives steps/s over steps only (medians), overhead = bare steps/s
/ wrapped steps/s per pair (below 1: the wrapper is faster; the median and min-max), and then the
number of resets and their mean time in the last pair (world generation; the very first reset of a
run also pays one-off warm-up, so both sides get one untimed reset first). The 256x256 bare env
renders ~20x slower, so it runs ``--steps-256`` steps only. The result is the median of the per-pair
overheads of all sizes (goal: <= 1.2x, or at most 10 us added per step).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfbench import Stopwatch, add_common_args, preset_threads, report  # noqa: E402

preset_threads()  # OMP_NUM_THREADS before numpy is imported
import crafter  # noqa: E402
import numpy as np  # noqa: E402

from envbench import env_result, paired_task, task_line  # noqa: E402
from verlog.envs import make_env  # noqa: E402
from verlog.envs.crafter import CRAFTER_ACTIONS  # noqa: E402

NAMES = list(CRAFTER_ACTIONS)
INDEX = {name: crafter.constants.actions.index(CRAFTER_ACTIONS[name]) for name in NAMES}


def run_bare(actions: list[str], size: int, seed: int) -> tuple[float, float, int]:
    """Returns (seconds in step, seconds in reset, number of resets after the first)."""
    env = crafter.Env(size=(size, size), seed=seed, length=None)
    env.reset()  # untimed: first episode
    steps, resets = Stopwatch(), Stopwatch()
    n_resets = 0
    for name in actions:
        with steps:
            _, _, done, _ = env.step(INDEX[name])
        if done:
            with resets:
                env.reset()
            n_resets += 1
    return steps.seconds, resets.seconds, n_resets


def run_wrapped(actions: list[str], size: int, seed: int) -> tuple[float, float, int]:
    """Returns (seconds in step, seconds in reset, number of resets after the first)."""
    env = make_env("crafter/default", image_size=(size, size))
    env.reset(seed=seed)  # untimed: first episode
    replies = [f"ACTION: {name}" for name in actions]
    steps, resets = Stopwatch(), Stopwatch()
    n_resets = 0
    for reply in replies:
        with steps:
            _, _, terminated, truncated, info = env.step(reply)
            _ = info["context"]
        if terminated or truncated:
            with resets:
                env.reset()
            n_resets += 1
    return steps.seconds, resets.seconds, n_resets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000, help="steps per run at 64x64")
    parser.add_argument("--steps-256", type=int, default=400, help="steps per run at 256x256")
    parser.add_argument("--sizes", default="64,256", help="comma-separated image sizes")
    parser.add_argument("--seed", type=int, default=0)
    add_common_args(parser)
    args = parser.parse_args(argv)

    # Warm-up (imports, opensimplex and texture caches) so neither side pays it in the timings.
    make_env("crafter/default").reset(seed=args.seed + 1)
    crafter.Env(seed=args.seed + 1).reset()

    results, counts = {}, {}
    for size in (int(s) for s in args.sizes.split(",")):
        steps = args.steps if size <= 64 else args.steps_256
        rng = np.random.default_rng(args.seed)
        actions = [NAMES[i] for i in rng.integers(0, len(NAMES), steps)]
        times, (_, bare_reset, bare_resets), (_, wrap_reset, wrap_resets) = paired_task(
            f"crafter/default {size}x{size}", lambda: run_bare(actions, size, args.seed),
            lambda: run_wrapped(actions, size, args.seed), args.pairs)
        results[f"{size}x{size}"] = times
        counts[f"{size}x{size}"] = steps
        mean = lambda total, n: (total / n if n else float("nan"))  # noqa: E731
        print(
            f"{task_line('crafter/default', times, steps)} "
            f"[image {size}x{size}, {steps} random actions, seed {args.seed}; resets (after the first): "
            f"bare {bare_resets} x {mean(bare_reset, bare_resets):.3f} s, "
            f"wrapped {wrap_resets} x {mean(wrap_reset, wrap_resets):.3f} s]",
            flush=True,
        )
    report(env_result("crafter", results, args.threads, counts, unit="image size"), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
