"""Steps per second of TextWorld's bare gym env versus our text env, on the same commands.

    python benchmarks/bench_env_textworld.py [--steps 2000 --seed 0 --tasks treasure_hunter,... --cache DIR
        --text-style tidy --pairs 5]

For each task it takes game 0 of the task's pool (generated into the cache first if missing; the
generation time of that game, from its ``.meta.json``, is printed too), then:

1. **record** (untimed): plays ``--steps`` seeded random commands on the bare env: 90% one of the
   current admissible commands, 10% one of ``look``, ``goal``, ``inventory``, ``dance`` (free text the
   game does not know); an episode restarts when the game is won or lost or after 80 steps.
2. **bare**: ``textworld.gym.register_game(game, REQUEST_INFOS, max_episode_steps=80)`` (the
   ``EnvInfos`` of our env's ``tidy`` text style; the default ``balrog`` style plays each game in two
   interpreters, see :mod:`verlog.envs.textworld`) and ``textworld.gym.make``; replays the recorded commands with
   ``env.step(command)`` and ``env.reset()`` at the recorded episode ends (TextWorld's gym env reloads
   the game file at every reset).
3. **wrapped**: ``make_env("textworld/<task>", num_games=1, text_style=...)`` (``--text-style``, default
   ``tidy``: the same interpreter work as the bare env); replays the same commands as the
   replies ``"ACTION: <command>"`` (parsed, executed, the observation cleaned, the score differenced,
   the info dict built) and ``reset(seed=0)`` at the same points (the loaded game is reused).

Both replays see the same game states (the games are deterministic). After an untimed replay of each
(their reset counts must agree), the two replays run alternately, wrapped and bare, ``--pairs`` times
(:mod:`envbench`). Step time and reset time are measured separately; each task's line gives steps/s
over steps only (medians), overhead = bare steps/s / wrapped steps/s per pair (the median and
min-max), then the mean reset time of each side in the last pair. The result is the median of all the
tasks' per-pair overheads (goal: <= 1.2x, or at most 10 us added per step).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfbench import Stopwatch, add_common_args, preset_threads, report, timed  # noqa: E402

preset_threads()  # OMP_NUM_THREADS before numpy is imported
import textworld  # noqa: E402
import textworld.gym  # noqa: E402
from jericho.jericho import UnsupportedGameWarning  # noqa: E402

from envbench import env_result, paired_task, task_line  # noqa: E402
from verlog.envs import make_env  # noqa: E402
from verlog.envs.textworld import REQUEST_INFOS, TEXTWORLD_TASKS  # noqa: E402

EXTRA_COMMANDS = ["look", "goal", "inventory", "dance"]
RESET = None  # marker in the recorded command list


def bare_env(game: Path):
    """TextWorld's gym env of ``game`` with our env's ``REQUEST_INFOS`` and an 80-step episode limit."""
    env_id = textworld.gym.register_game(str(game), REQUEST_INFOS, max_episode_steps=80)
    return textworld.gym.make(env_id)


def record(game: Path, steps: int, seed: int) -> list[str | None]:
    """Seeded random commands with RESET markers where an episode ends (won, lost or 80 steps)."""
    rng = random.Random(seed)
    env = bare_env(game)
    _, infos = env.reset()
    commands: list[str | None] = []
    episode_steps = 0
    for _ in range(steps):
        pool = infos["admissible_commands"] if rng.random() < 0.9 else EXTRA_COMMANDS
        command = rng.choice(pool)
        commands.append(command)
        _, _, done, infos = env.step(command)
        episode_steps += 1
        if done or episode_steps >= 80:
            commands.append(RESET)
            _, infos = env.reset()
            episode_steps = 0
    env.close()
    return commands


def run_bare(game: Path, commands: list[str | None]) -> tuple[float, float, int]:
    """Returns (seconds in step, seconds in reset, number of resets after the first)."""
    env = bare_env(game)
    env.reset()  # untimed
    step_s, reset_s = Stopwatch(), Stopwatch()
    resets = 0
    for command in commands:
        if command is RESET:
            with reset_s:
                env.reset()
            resets += 1
        else:
            with step_s:
                env.step(command)
    env.close()
    return step_s.seconds, reset_s.seconds, resets


def run_wrapped(task: str, cache: Path | None, commands: list[str | None], text_style: str = "tidy",
                ) -> tuple[float, float, int]:
    """Returns (seconds in step, seconds in reset, number of resets after the first)."""
    env = make_env(f"textworld/{task}", num_games=1, cache_dir=cache, text_style=text_style)
    env.reset(seed=0)  # untimed (loads the game)
    replies = [None if c is RESET else f"ACTION: {c}" for c in commands]
    step_s, reset_s = Stopwatch(), Stopwatch()
    resets = 0
    for reply in replies:
        if reply is None:
            with reset_s:
                env.reset(seed=0)
            resets += 1
        else:
            with step_s:
                _, _, terminated, truncated, info = env.step(reply)
            assert info["action_valid"], reply
    env.close()
    return step_s.seconds, reset_s.seconds, resets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000, help="commands per task")
    parser.add_argument("--seed", type=int, default=0, help="seed of the command sequence")
    parser.add_argument("--tasks", default=",".join(TEXTWORLD_TASKS), help="comma-separated task names")
    parser.add_argument("--cache", type=Path, default=None, help="game cache (default: the env's default)")
    parser.add_argument("--text-style", default="tidy", choices=("tidy", "balrog"),
                        help="the text env's text_style (balrog: two interpreters per game)")
    add_common_args(parser)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", UnsupportedGameWarning)

    results, counts = {}, {}
    for task in args.tasks.split(","):
        env = make_env(f"textworld/{task}", num_games=1, cache_dir=args.cache)
        waited = timed(lambda: env.game_file(0))  # generates the game when it is not in the cache
        game = env.game_file(0)
        meta = json.loads(game.with_suffix(".meta.json").read_text())
        env.close()
        commands = record(game, args.steps, args.seed)
        n_steps = sum(c is not RESET for c in commands)
        times, (_, b_reset, b_resets), (_, w_reset, w_resets) = paired_task(
            f"textworld/{task}", lambda: run_bare(game, commands),
            lambda: run_wrapped(task, args.cache, commands, args.text_style), args.pairs,
            match=lambda out: out[2])
        results[task] = times
        counts[task] = n_steps
        print(
            f"{task_line(f'textworld/{task}', times, n_steps)} | {b_resets} resets: bare "
            f"{1000 * b_reset / max(b_resets, 1):.1f} ms, wrapped {1000 * w_reset / max(w_resets, 1):.1f} ms | "
            f"game generation {meta['seconds']:.1f} s ({'now' if waited > 1 else 'cached'}), "
            f"walkthrough {meta.get('walkthrough_length')} commands, max score {meta.get('max_score')}",
            flush=True,
        )
    report(env_result("textworld", results, args.threads, counts), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
