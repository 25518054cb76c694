"""Steps per second of crafter's own step versus our text env's, on the same actions.

    python benchmarks/bench_env_crafter.py [--steps 2000 --seed 0 --sizes 64,256 --pairs 5]

For each image size S (crafter's default 64x64, and BALROG's 256x256) it draws one seeded sequence
of uniformly random crafter actions and plays it by two sides:

* **bare**: the game as BALROG plays it, without frames: :class:`~verlog.envs.crafter_game.TextOnlyCrafter`
  (crafter's ``step`` and ``reset``, its ``_obs`` replaced by the night noise the frame would have
  drawn, so the world evolves as crafter's does) and, after each step, the noise of BALROG's second
  render (``draw_render_noise``: BALROG renders every state twice, and the world's random stream
  must advance as it does there); reset when the player dies. Rendering is left out of both sides,
  so the figure is the text layer's own cost (parsing, the text, the context and the info), not the
  frame it saves;
* **wrapped**: ``make_env("crafter/default", image_size=S)``: the reply ``"ACTION: <name>"`` is parsed,
  the same frameless step runs, and the text observation and context are built; reset when the
  episode ends (death; the 2000-step limit is not reached by a random agent).

Both sides play the same episodes: episode k starts from the world of seed ``--seed`` + k (with
BALROG's Noop step at reset on both), so a death ends both at the same step (checked on the untimed
run of each, as the episodes' end steps). After that untimed run of each, the two sides run
alternately, wrapped and bare, ``--pairs`` times (:mod:`envbench`). Step time and reset time are
measured separately; each size's line gives steps/s over steps only (medians), overhead = bare steps/s
/ wrapped steps/s per pair (the median and min-max), and then the number of resets and their mean
time in the last pair (world generation; the very first reset of a run also pays one-off warm-up, so
both sides get one untimed reset first). The image size changes only how many numbers the night noise
draws. The result is the median of the per-pair overheads of all sizes (goal: <= 1.2x, or at most
10 us added per step).
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
from verlog.envs.crafter import ACTION_INDEX, CRAFTER_ACTIONS, DEFAULT_ACTION  # noqa: E402
from verlog.envs.crafter_game import TextOnlyCrafter  # noqa: E402

NAMES = list(CRAFTER_ACTIONS)
INDEX = {name: crafter.constants.actions.index(CRAFTER_ACTIONS[name]) for name in NAMES}


def bare_reset(env: TextOnlyCrafter, episode_seed: int) -> None:
    """The episode the text env starts with ``reset(seed=episode_seed)``: crafter's world of that seed,
    then BALROG's Noop step at reset with its second render's noise."""
    env.reset_with_seed(episode_seed)
    env.step(ACTION_INDEX[DEFAULT_ACTION])
    env.draw_render_noise()


def run_bare(actions: list[str], size: int, seed: int) -> tuple[float, float, int, list[int]]:
    """Returns (seconds in step, seconds in reset, number of resets after the first, the steps at
    which episodes ended)."""
    env = TextOnlyCrafter((size, size))
    bare_reset(env, seed)  # untimed: first episode
    steps, resets = Stopwatch(), Stopwatch()
    ends: list[int] = []
    for t, name in enumerate(actions):
        with steps:
            _, _, done, _ = env.step(INDEX[name])
            env.draw_render_noise()  # BALROG's second render, as the text env's step draws it
        if done:
            ends.append(t)
            with resets:
                bare_reset(env, seed + len(ends))
    return steps.seconds, resets.seconds, len(ends), ends


def run_wrapped(actions: list[str], size: int, seed: int) -> tuple[float, float, int, list[int]]:
    """Returns (seconds in step, seconds in reset, number of resets after the first, the steps at
    which episodes ended)."""
    env = make_env("crafter/default", image_size=(size, size))
    env.reset(seed=seed)  # untimed: first episode
    replies = [f"ACTION: {name}" for name in actions]
    steps, resets = Stopwatch(), Stopwatch()
    ends: list[int] = []
    for t, reply in enumerate(replies):
        with steps:
            _, _, terminated, truncated, info = env.step(reply)
            _ = info["context"]
        if terminated or truncated:
            ends.append(t)
            with resets:
                env.reset(seed=seed + len(ends))
    return steps.seconds, resets.seconds, len(ends), ends


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000, help="steps per run")
    parser.add_argument("--sizes", default="64,256", help="comma-separated image sizes")
    parser.add_argument("--seed", type=int, default=0)
    add_common_args(parser)
    args = parser.parse_args(argv)

    # Warm-up (imports, opensimplex and texture caches) so neither side pays it in the timings.
    make_env("crafter/default").reset(seed=args.seed + 1)
    TextOnlyCrafter((64, 64)).reset_with_seed(args.seed + 1)

    steps = args.steps
    rng = np.random.default_rng(args.seed)
    actions = [NAMES[i] for i in rng.integers(0, len(NAMES), steps)]  # one sequence, played at every size
    results, counts = {}, {}
    for size in (int(s) for s in args.sizes.split(",")):
        times, (_, bare_resets_s, bare_resets, _), (_, wrap_resets_s, wrap_resets, _) = paired_task(
            f"crafter/default {size}x{size}", lambda: run_bare(actions, size, args.seed),
            lambda: run_wrapped(actions, size, args.seed), args.pairs, match=lambda out: out[3])
        results[f"{size}x{size}"] = times
        counts[f"{size}x{size}"] = steps
        mean = lambda total, n: (total / n if n else float("nan"))  # noqa: E731
        print(
            f"{task_line('crafter/default', times, steps)} "
            f"[image {size}x{size}, {steps} random actions, seed {args.seed}; resets (after the first): "
            f"bare {bare_resets} x {mean(bare_resets_s, bare_resets):.3f} s, "
            f"wrapped {wrap_resets} x {mean(wrap_resets_s, wrap_resets):.3f} s]",
            flush=True,
        )
    report(env_result("crafter", results, args.threads, counts, unit="image size"), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
