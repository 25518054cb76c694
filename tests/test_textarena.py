"""textarena/<game>: TextArena's single-player games (verlog/envs/textarena.py): the end reward read at close,
the end at a turn limit (terminated when the prompt states it, truncated when it does not), the seeds."""

from __future__ import annotations

import random
import subprocess
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("textarena", reason="textarena is not installed (pip install 'verlog[textarena]')")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from verlog.catalog import ENV_TASKS  # noqa: E402
from verlog.envs import make_env  # noqa: E402
from verlog.envs.adapters import isolated_global_random  # noqa: E402
from verlog.envs.base import TEXT_CHARSET, invalid_action_notice  # noqa: E402
from verlog.envs.textarena import GAME_RULES, load_textarena, textarena_move  # noqa: E402
from verlog.warmup import format_reply  # noqa: E402

TASKS = ENV_TASKS["textarena"]
HANOI = "textarena/TowerOfHanoi-v0"  # 3 disks; TextArena ends it after 15 moves, a limit its prompt never states
GUESS = "textarena/GuessTheNumber-v0"  # 1..20; the prompt states 10 turns (TextArena allows 11 guesses)
_WARNING = "You attempted an invalid move."


def _raw(game: str):
    """TextArena's own game (no wrappers), built and played with the caller's random states kept."""
    with isolated_global_random():
        return load_textarena().make(f"{game}-raw")


def _raw_play(game: str, seed: int, moves: list[str]) -> tuple[int, float, str]:
    """Play ``moves`` on TextArena's own game until it ends: (moves taken, reward at close, reason)."""
    env = _raw(game)
    with isolated_global_random():
        env.reset(num_players=1, seed=seed)
        for taken, move in enumerate(moves, 1):
            done, _ = env.step(move)
            if done:
                rewards, info = env.close()
                return taken, rewards[0], info[0]["reason"]
    raise AssertionError(f"{game} did not end in {len(moves)} moves")


def _shuttle(n: int) -> list[str]:
    """Tower of Hanoi moves that undo each other, so the puzzle is never solved."""
    return ["[A B]", "[B A]"] * (n // 2) + ["[A B]"] * (n % 2)


def test_the_tasks_are_single_player_games_textarena_registers():
    from textarena.envs.registration import ENV_REGISTRY

    assert set(TASKS) <= set(ENV_REGISTRY) and len(TASKS) == len(set(TASKS))
    for game in TASKS:
        env = _raw(game)
        with isolated_global_random():
            env.reset(num_players=1, seed=0)
        assert type(env.state).__name__ == "SinglePlayerState" and type(env).__name__ in GAME_RULES


@pytest.mark.parametrize("task", TASKS)
def test_gymnasiums_check_env_passes_with_observations_in_the_text_space(task):
    env = make_env(f"textarena/{task}", format_penalty=-0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("error", message=".*not within the observation space")
        check_env(env, skip_render_check=True)


@pytest.mark.parametrize("task", TASKS)
def test_every_game_takes_its_hints_and_refuses_a_reply_without_a_move(task):
    env = make_env(f"textarena/{task}", format_penalty=-0.5)
    obs, info = env.reset(seed=3)
    assert info["valid_actions"] and set(env.instruction + obs) <= set(TEXT_CHARSET)
    for move in info["valid_actions"]:
        assert env.parse_action(format_reply(move)) == move  # every hint fits the game's syntax
    obs, reward, terminated, truncated, info = env.step("I pass.")
    assert not info["action_valid"] and info["action"] == "[]" and reward == -0.5
    assert obs.startswith(invalid_action_notice("[]")) and _WARNING in obs  # TextArena's first warning
    assert not (terminated or truncated)


def test_a_second_invalid_reply_in_a_row_ends_the_game_with_textarenas_reward():
    env = make_env(GUESS, format_penalty=-0.25)
    env.reset(seed=4)
    env.step("ACTION: [7]")
    env.step("no move")
    obs, reward, terminated, truncated, info = env.step("still none")
    taken, raw_reward, reason = _raw_play("GuessTheNumber-v0", 4, ["[7]", "[]", "[]"])
    assert (taken, terminated, truncated, info["game_reward"]) == (3, True, False, raw_reward)
    assert reward == pytest.approx(raw_reward - 0.25) and reason.startswith("Invalid Move") and reason in obs
    assert env.end == (raw_reward, reason)


def test_an_unstated_turn_limit_truncates_and_pays_textarenas_end_reward():
    env = make_env(HANOI)
    env.reset(seed=0)
    steps = [env.step(format_reply(move)) for move in _shuttle(15)]
    taken, raw_reward, reason = _raw_play("TowerOfHanoi-v0", 0, _shuttle(15))
    assert taken == 15 and "turn limit" in reason and "14" not in env.instruction and "limit" not in env.instruction
    assert [s[2:4] for s in steps] == [(False, False)] * 14 + [(False, True)]  # a cut the player never saw coming
    assert [s[1] for s in steps] == [0.0] * 14 + [raw_reward]  # the reward arrives at the end only
    assert steps[-1][0].endswith(f"The game is over: {reason}")


def test_a_stated_turn_limit_is_the_end_of_the_game_terminated():
    env = make_env(GUESS)
    env.reset(seed=1)
    secret = env.textarena_env.game_number
    guesses = [f"[{g}]" for g in range(1, 21) if g != secret][:11]
    steps = [env.step(f"My guess: {g}") for g in guesses]
    taken, raw_reward, reason = _raw_play("GuessTheNumber-v0", 1, guesses)
    assert taken == 11 and reason.startswith("The turn limit") and "within 10 turns" in env.instruction
    assert [s[2:4] for s in steps] == [(False, False)] * 10 + [(True, False)]
    assert steps[-1][1] == raw_reward > 0 and not steps[-1][4]["success"]  # paid for how close the last guess was


def test_a_win_pays_one_and_succeeds():
    env = make_env(GUESS)
    env.reset(seed=2)
    obs, reward, terminated, truncated, info = env.step(f"ACTION: {env.textarena_env.game_number}")
    assert (reward, terminated, truncated, info["success"], info["progression"]) == (1.0, True, False, True, 1.0)
    assert "Congratulations" in obs


def test_a_limit_from_outside_the_game_truncates():
    env = make_env(HANOI, max_steps=3)
    env.reset(seed=0)
    assert [env.step(format_reply(m))[2:4] for m in _shuttle(3)] == [(False, False), (False, False), (False, True)]


@pytest.mark.parametrize("task", ["Mastermind-v0", "Minesweeper-v0-small", "Sudoku-v0-easy", "RushHour-v0"])
def test_a_seed_gives_the_same_episode_and_the_global_random_states_are_untouched(task):
    random.seed(5), np.random.seed(5)
    python_state, numpy_state = random.getstate(), np.random.get_state()

    def play(env) -> list:
        obs, info = env.reset(seed=9)
        trace, done, rng = [obs, env.instruction], False, random.Random(0)
        while not done and len(trace) < 40:
            obs, reward, terminated, truncated, info = env.step(format_reply(rng.choice(info["valid_actions"])))
            trace.append((obs, reward, terminated, truncated, info["valid_actions"]))
            done = terminated or truncated
        return trace

    env = make_env(f"textarena/{task}")
    first = play(env)
    assert random.getstate() == python_state
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), numpy_state))
    env.reset(seed=10)
    random.seed(6)
    assert play(env) == first  # the same env after another episode
    assert play(make_env(f"textarena/{task}")) == first  # a new env


def test_importing_textarena_leaves_the_global_random_state_as_it_was():
    code = ("import random; random.seed(1); s = random.getstate(); from verlog.envs.textarena import load_textarena; "
            "load_textarena(); import textarena; assert random.getstate() == s; print('kept')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip() == "kept", proc.stderr


def test_what_textarena_prints_is_swallowed(capsys):
    env = make_env("textarena/RushHour-v0")  # reports its puzzle generation on stdout
    env.reset(seed=0)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("reply, move", [
    ("ACTION: [A C]", "[A C]"),
    ("ACTION: a b.\nthen [A C]", "[a b]"),
    ("I move [A B] or rather [A C]", "[A C]"),
    ("[A C] is best, [4 4] is not a move", "[A C]"),
    ("ACTION: A C<|END|>", "[A C]"),
    ("A C", None),
    ("ACTION: up", None),
    ("ACTION:", None),
])
def test_the_move_is_the_bracket_after_the_marker_or_the_last_that_fits(reply, move):
    assert textarena_move(reply, GAME_RULES["TowerOfHanoiEnv"].syntax) == move


def test_an_unknown_game_and_bad_arguments_are_refused_naming_them():
    from verlog.envs.textarena import TextArenaEnv

    with pytest.raises(ValueError, match="^game: 'Wordle-v0' is not one of"):
        TextArenaEnv("Wordle-v0")
    with pytest.raises(ValueError, match="hints"):
        TextArenaEnv("TowerOfHanoi-v0", hints=0)
    with pytest.raises(ValueError, match="instruction_style"):
        TextArenaEnv("TowerOfHanoi-v0", instruction_style="short")


@pytest.mark.parametrize("style", ["full", "brief"])
def test_the_run_configs_env_arguments_build_it(style):
    """verlog-train and verlog-eval pass env.* keys (the tiny recipe's brief prompt, its format penalty)."""
    from verlog.config import load_recipe

    cfg = load_recipe("tiny", [f"env.task={HANOI}", f"env.instruction_style={style}"])
    env = make_env(cfg.env.task, **cfg.env.env_kwargs())
    env.reset(seed=0)
    assert "ACTION: " in env.instruction and "Tower of Hanoi" in env.instruction


@pytest.mark.parametrize("task, floor", [
    ("GuessTheNumber-v0", (0.57, 0.851, 8.68)),
    ("Mastermind-v0", (0.04, 0.425, 21.08)),
    ("TowerOfHanoi-v0", (0.01, 0.06, 14.97)),
])
def test_the_random_floor_is_the_documented_one(task, floor):
    """docs/environments.md: verlog-eval random task=textarena/<game> episodes=100."""
    from verlog.evaluate import RandomPolicy
    from verlog.rollout.runner import EpisodeSpec, run_episodes

    specs = [EpisodeSpec(f"textarena/{task}", 100_000 + i, i) for i in range(100)]
    records = run_episodes(specs, RandomPolicy(100_000), num_envs=4)
    success = sum(r.success for r in records) / 100
    mean_return = sum(r.episode_return for r in records) / 100
    mean_length = sum(r.length for r in records) / 100
    assert (round(success, 2), round(mean_return, 3), round(mean_length, 2)) == floor
