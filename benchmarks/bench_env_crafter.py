"""Steps per second of the bare ``crafter.Env`` versus our text env, on the same actions.

    python benchmarks/bench_env_crafter.py [--steps 2000 --seed 0 --sizes 64,256 --steps-256 400]

For each image size S (crafter's default 64x64, and BALROG's 256x256) it draws one seeded sequence
of uniformly random crafter actions and plays it twice:

* **bare**: ``crafter.Env(size=S, length=None)`` with its normal ``step`` (renders an S x S frame
  every step), reset when the player dies;
* **wrapped**: ``make_env("crafter/default", image_size=S)``: the reply ``"ACTION: <name>"`` is parsed,
  the step runs without rendering, and the text observation and context are built; reset when the
  episode ends (death; the 2000-step limit is not reached by a random agent).

Both start from the same world (seed); after the first death each continues with its own next
world, so episode lengths differ a little. Step time and reset time are measured separately; the
result line gives steps/s over steps only, overhead = bare steps/s / wrapped steps/s (below 1: the
wrapper is faster), and then the number of resets and their mean time (world generation; the very
first reset of a process also pays one-off warm-up, so both sides get one untimed warm-up reset).
The 256x256 bare env renders ~20x slower, so it runs ``--steps-256`` steps only.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import crafter
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from verlog.envs import make_env  # noqa: E402
from verlog.envs.crafter import CRAFTER_ACTIONS  # noqa: E402

NAMES = list(CRAFTER_ACTIONS)
INDEX = {name: crafter.constants.actions.index(CRAFTER_ACTIONS[name]) for name in NAMES}


def run_bare(actions: list[str], size: int, seed: int) -> tuple[float, float, int]:
    """Returns (seconds in step, seconds in reset, number of resets after the first)."""
    env = crafter.Env(size=(size, size), seed=seed, length=None)
    env.reset()  # untimed: first episode
    step_s = reset_s = 0.0
    resets = 0
    for name in actions:
        t0 = time.perf_counter()
        _, _, done, _ = env.step(INDEX[name])
        step_s += time.perf_counter() - t0
        if done:
            t0 = time.perf_counter()
            env.reset()
            reset_s += time.perf_counter() - t0
            resets += 1
    return step_s, reset_s, resets


def run_wrapped(actions: list[str], size: int, seed: int) -> tuple[float, float, int]:
    """Returns (seconds in step, seconds in reset, number of resets after the first)."""
    env = make_env("crafter/default", image_size=(size, size))
    env.reset(seed=seed)  # untimed: first episode
    replies = [f"ACTION: {name}" for name in actions]
    step_s = reset_s = 0.0
    resets = 0
    for reply in replies:
        t0 = time.perf_counter()
        _, _, terminated, truncated, info = env.step(reply)
        _ = info["context"]
        step_s += time.perf_counter() - t0
        if terminated or truncated:
            t0 = time.perf_counter()
            env.reset()
            reset_s += time.perf_counter() - t0
            resets += 1
    return step_s, reset_s, resets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="steps per run at 64x64")
    parser.add_argument("--steps-256", type=int, default=400, help="steps per run at 256x256")
    parser.add_argument("--sizes", default="64,256", help="comma-separated image sizes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    # Warm-up (imports, opensimplex and texture caches) so neither side pays it in the timings.
    make_env("crafter/default").reset(seed=args.seed + 1)
    crafter.Env(seed=args.seed + 1).reset()

    for size in (int(s) for s in args.sizes.split(",")):
        steps = args.steps if size <= 64 else args.steps_256
        rng = np.random.default_rng(args.seed)
        actions = [NAMES[i] for i in rng.integers(0, len(NAMES), steps)]
        bare_step, bare_reset, bare_resets = run_bare(actions, size, args.seed)
        wrap_step, wrap_reset, wrap_resets = run_wrapped(actions, size, args.seed)
        bare_rate, wrap_rate = steps / bare_step, steps / wrap_step
        mean = lambda total, n: (total / n if n else float("nan"))  # noqa: E731
        print(
            f"crafter/default: bare {bare_rate:.1f} steps/s, wrapped {wrap_rate:.1f} steps/s, "
            f"overhead {bare_rate / wrap_rate:.2f}x "
            f"[image {size}x{size}, {steps} random actions, seed {args.seed}; resets (after the first): "
            f"bare {bare_resets} x {mean(bare_reset, bare_resets):.3f} s, "
            f"wrapped {wrap_resets} x {mean(wrap_reset, wrap_resets):.3f} s]",
            flush=True,
        )


if __name__ == "__main__":
    main()
