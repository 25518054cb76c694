"""Steps per second of the bare MiniHack/NLE gymnasium envs versus our text envs, on the same actions.

    python benchmarks/bench_env_nethack.py [--steps 2000 --seed 0 --pairs 5 --tasks minihack/MazeWalk-9x9,...]

For each task it draws one seeded sequence of uniformly random action names from the text env's
``valid_actions`` and plays it by two sides:

* **bare**: the gymnasium env (the class registered under the task's gymnasium id, built with the
  wrapper's constructor arguments: the same observation keys and game settings), stepped with the
  action's index; reset at
  game over, after the task's step limit (100 for MiniHack) and, for NetHack, after 150 steps without
  the turn counter advancing, like the wrapper;
* **wrapped**: ``make_env(<task>)`` stepped with ``"ACTION: <name>"``: the reply is parsed, ``--More--``
  dismissed, the text observation, the inventory context and the info dict built.

Both seed NetHack identically (the same core/display seeds from the same ``--seed``), so they start
from the same game; they drift apart once the wrapper presses MORE. After an untimed run of each, the
two sides run alternately, wrapped and bare, ``--pairs`` times (:mod:`envbench`). Step time and reset
time are measured separately; each task's line gives steps/s over steps only (medians) and overhead =
bare steps/s / wrapped steps/s per pair (the median and min-max), then the wrapper's MORE presses (extra
env steps it makes, included in its time) and the resets (after the first) with their mean time in the
last pair. The result is the median of all the tasks' per-pair overheads (goal: <= 1.2x, or at most
10 us added per step). Random actions in NetHack spend many steps in prompts and menus, where NLE's own
step is very cheap.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfbench import Stopwatch, add_common_args, preset_threads, report  # noqa: E402

preset_threads()  # OMP_NUM_THREADS before numpy is imported
import numpy as np  # noqa: E402
from nle import nethack  # noqa: E402
from nle.env.base import NLE  # noqa: E402

from envbench import env_result, paired_task, task_line  # noqa: E402
from verlog.envs import make_env  # noqa: E402
from verlog.envs.nethack_text import NetHackTextEnvBase, make_nle_env  # noqa: E402

DEFAULT_TASKS = (
    "minihack/MazeWalk-9x9",
    "minihack/MazeWalk-15x15",
    "minihack/Corridor-R3",
    "minihack/CorridorBattle-Dark",
    "minihack/Quest-Easy",
    "minihack/Quest-Medium",
    "nle/NetHackChallenge",
)


def _bare_env(wrapped: NetHackTextEnvBase) -> NLE:
    """A fresh gymnasium env with the wrapper's id and constructor arguments."""
    env = make_nle_env(wrapped.env_id, wrapped.env_kwargs)
    if wrapped.env_id.startswith("NetHackChallenge"):
        for name in ("set_initial_seeds", "set_current_seeds", "get_current_seeds"):
            vars(env.nethack).pop(name, None)
    return env


def _seeds(rng: np.random.Generator) -> tuple[int, int]:
    core, disp = (int(v) for v in rng.integers(0, 2**62, size=2))
    return core, disp


def run_bare(task: str, actions: list[str], seed: int) -> tuple[float, float, int]:
    """Returns (seconds in step, seconds in reset, number of resets after the first)."""
    wrapped = make_env(task)
    env = _bare_env(wrapped)
    index = {name: wrapped._action_index[name] for name in set(actions)}
    limit = wrapped.max_steps
    stuck_limit = getattr(wrapped, "stuck_limit", None)
    wrapped.close()
    rng = np.random.default_rng(seed)  # the same stream as the wrapper's np_random after reset(seed)
    NLE.seed(env, *_seeds(rng), reseed=False)
    obs, _ = env.reset()
    step_s, reset_s = Stopwatch(), Stopwatch()
    resets = steps = stuck = 0
    turn = int(obs["blstats"][nethack.NLE_BL_TIME])
    for name in actions:
        with step_s:
            obs, _, done, truncated, _ = env.step(index[name])
        steps += 1
        new_turn = int(obs["blstats"][nethack.NLE_BL_TIME])
        stuck = stuck + 1 if new_turn == turn else 0
        turn = new_turn
        if done or truncated or steps >= limit or (stuck_limit is not None and stuck >= stuck_limit):
            with reset_s:
                NLE.seed(env, *_seeds(rng), reseed=False)
                obs, _ = env.reset()
            resets += 1
            steps = stuck = 0
            turn = int(obs["blstats"][nethack.NLE_BL_TIME])
    env.close()
    return step_s.seconds, reset_s.seconds, resets


def run_wrapped(task: str, actions: list[str], seed: int) -> tuple[float, float, int, int]:
    """Returns (seconds in step, seconds in reset, resets after the first, MORE presses)."""
    env = make_env(task)
    env.reset(seed=seed)
    replies = [f"ACTION: {name}" for name in actions]
    step_s, reset_s = Stopwatch(), Stopwatch()
    resets = presses = 0
    for reply in replies:
        with step_s:
            _, _, terminated, truncated, info = env.step(reply)
            _ = info["context"]
        presses += info["more_presses"]
        if terminated or truncated:
            with reset_s:
                env.reset()
            resets += 1
    env.close()
    return step_s.seconds, reset_s.seconds, resets, presses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000, help="random actions per task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", default=",".join(DEFAULT_TASKS), help="comma-separated task names")
    add_common_args(parser)
    args = parser.parse_args(argv)

    results = {}
    for task in args.tasks.split(","):
        probe = make_env(task)  # warm-up: imports, glyph table, MiniHack level compilation
        probe.reset(seed=args.seed + 1)
        names = list(probe.valid_actions)
        probe.close()
        rng = np.random.default_rng(args.seed)
        actions = [names[i] for i in rng.integers(0, len(names), args.steps)]
        times, (_, bare_reset, bare_resets), (_, wrap_reset, wrap_resets, presses) = paired_task(
            task, lambda: run_bare(task, actions, args.seed), lambda: run_wrapped(task, actions, args.seed),
            args.pairs)
        results[task] = times
        mean = lambda total, n: (total / n if n else float("nan"))  # noqa: E731
        print(
            f"{task_line(task, times, args.steps)} "
            f"[{args.steps} random actions of {len(names)}, seed {args.seed}; MORE presses {presses}; "
            f"resets (after the first): bare {bare_resets} x {mean(bare_reset, bare_resets) * 1e3:.1f} ms, "
            f"wrapped {wrap_resets} x {mean(wrap_reset, wrap_resets) * 1e3:.1f} ms]",
            flush=True,
        )
    report(env_result("nethack", results, args.threads, args.steps), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
