"""Steps per second of TextWorld's bare gym env versus our text env, on the same commands.

    python benchmarks/bench_env_textworld.py [--steps 2000 --seed 0 --tasks treasure_hunter,... --cache DIR --text-style tidy]

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

Both replays see the same game states (the games are deterministic). Step time and reset time are
measured separately; the line gives steps/s over steps only, overhead = bare steps/s / wrapped steps/s
(goal <= 1.2x), then the mean reset time of each side.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
import textworld  # noqa: E402
import textworld.gym  # noqa: E402
from jericho.jericho import UnsupportedGameWarning  # noqa: E402

from verlog.envs import make_env  # noqa: E402
from verlog.envs.textworld import REQUEST_INFOS, TEXTWORLD_TASKS  # noqa: E402

EXTRA_COMMANDS = ["look", "goal", "inventory", "dance"]
RESET = None  # marker in the recorded command list


def bare_env(game: Path):
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
    step_s = reset_s = 0.0
    resets = 0
    for command in commands:
        t0 = time.perf_counter()
        if command is RESET:
            env.reset()
            reset_s += time.perf_counter() - t0
            resets += 1
        else:
            env.step(command)
            step_s += time.perf_counter() - t0
    env.close()
    return step_s, reset_s, resets


def run_wrapped(task: str, cache: Path | None, commands: list[str | None], text_style: str = "tidy",
                ) -> tuple[float, float, int]:
    """Returns (seconds in step, seconds in reset, number of resets after the first)."""
    env = make_env(f"textworld/{task}", num_games=1, cache_dir=cache, text_style=text_style)
    env.reset(seed=0)  # untimed (loads the game)
    replies = [None if c is RESET else f"ACTION: {c}" for c in commands]
    step_s = reset_s = 0.0
    resets = 0
    for reply in replies:
        t0 = time.perf_counter()
        if reply is None:
            env.reset(seed=0)
            reset_s += time.perf_counter() - t0
            resets += 1
        else:
            _, _, terminated, truncated, info = env.step(reply)
            step_s += time.perf_counter() - t0
            assert info["action_valid"], reply
    env.close()
    return step_s, reset_s, resets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="commands per task")
    parser.add_argument("--seed", type=int, default=0, help="seed of the command sequence")
    parser.add_argument("--tasks", default=",".join(TEXTWORLD_TASKS), help="comma-separated task names")
    parser.add_argument("--cache", type=Path, default=None, help="game cache (default: the env's default)")
    parser.add_argument("--text-style", default="tidy", choices=("tidy", "balrog"),
                        help="the text env's text_style (balrog: two interpreters per game)")
    args = parser.parse_args()
    warnings.simplefilter("ignore", UnsupportedGameWarning)

    for task in args.tasks.split(","):
        env = make_env(f"textworld/{task}", num_games=1, cache_dir=args.cache)
        t0 = time.perf_counter()
        game = env.game_file(0)
        waited = time.perf_counter() - t0
        meta = json.loads(game.with_suffix(".meta.json").read_text())
        env.close()
        commands = record(game, args.steps, args.seed)
        n_steps = sum(c is not RESET for c in commands)
        b_step, b_reset, b_resets = run_bare(game, commands)
        w_step, w_reset, w_resets = run_wrapped(task, args.cache, commands, args.text_style)
        assert b_resets == w_resets
        bare_sps, wrapped_sps = n_steps / b_step, n_steps / w_step
        print(
            f"textworld/{task}: bare {bare_sps:.1f} steps/s, wrapped {wrapped_sps:.1f} steps/s, "
            f"overhead {bare_sps / wrapped_sps:.2f}x | {b_resets} resets: bare "
            f"{1000 * b_reset / max(b_resets, 1):.1f} ms, wrapped {1000 * w_reset / max(w_resets, 1):.1f} ms | "
            f"game generation {meta['seconds']:.1f} s ({'now' if waited > 1 else 'cached'}), "
            f"walkthrough {meta.get('walkthrough_length')} commands, max score {meta.get('max_score')}",
            flush=True,
        )


if __name__ == "__main__":
    main()
