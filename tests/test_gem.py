"""gem/<game>: GEM's text games (verlog/envs/gem.py), the end of an episode at GEM's turn limit above all."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

pytest.importorskip("gem", reason="gem-llm is not installed (pip install --no-deps gem-llm==0.1.0)")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from verlog.catalog import ENV_TASKS  # noqa: E402
from verlog.envs import make_env  # noqa: E402
from verlog.envs.base import TEXT_CHARSET, invalid_action_notice  # noqa: E402
from verlog.envs.gem import gem_move  # noqa: E402
from verlog.warmup import format_reply  # noqa: E402

GUESS = "gem/GuessTheNumber-v0-easy"  # 1..10 in 4 turns


def _wrong_guesses(env) -> list[int]:
    secret = env.gem_env.game_number
    return [g for g in range(1, 11) if g != secret]


def test_the_tasks_are_games_gem_registers():
    from gem.envs.registration import ENV_REGISTRY

    assert {f"game:{task}" for task in ENV_TASKS["gem"]} <= set(ENV_REGISTRY)


def test_gymnasiums_check_env_passes_with_observations_in_the_text_space():
    env = make_env(GUESS, format_penalty=-0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("error", message=".*not within the observation space")
        check_env(env, skip_render_check=True)


def test_gems_turn_limit_is_the_end_of_the_game_terminated_not_truncated():
    env = make_env(GUESS)
    env.reset(seed=1)
    raw = make_env(GUESS)
    raw.reset(seed=1)
    ends = []
    for guess in _wrong_guesses(env)[:4]:
        _, reward, terminated, truncated, info = env.step(f"\\boxed{{{guess}}}")
        ends.append((terminated, truncated))
        gem_flags = raw.gem_env.step(f"\\boxed{{{guess}}}")[2:4]
    assert gem_flags == (True, True)  # GEM raises both at its limit ...
    assert ends == [(False, False)] * 3 + [(True, False)]  # ... a stated limit: the game is over, no bootstrap
    assert reward > 0 and not info["success"]  # the limit pays for how close the last guess was


def test_a_limit_from_outside_the_game_truncates():
    env = make_env(GUESS, max_steps=2)
    env.reset(seed=1)
    ends = [env.step(f"ACTION: {g}")[2:4] for g in _wrong_guesses(env)[:2]]
    assert ends == [(False, False), (False, True)]


def test_the_right_guess_wins():
    env = make_env(GUESS)
    env.reset(seed=2)
    obs, reward, terminated, truncated, info = env.step(f"I will say ACTION: {env.gem_env.game_number}")
    assert (reward, terminated, truncated, info["success"], info["progression"]) == (1.0, True, False, True, 1.0)
    assert obs.startswith("Congratulations!")


def test_a_reply_without_a_move_ends_the_game_by_gems_rule_and_is_penalised():
    env = make_env(GUESS, format_penalty=-0.25)
    env.reset(seed=2)
    obs, reward, terminated, truncated, info = env.step("five")
    assert obs.startswith(invalid_action_notice("\\boxed{}")) and terminated and not info["action_valid"]
    assert reward == pytest.approx(info["game_reward"] - 0.25)


def test_a_seed_gives_the_same_game_and_the_global_random_states_are_untouched():
    random.seed(5), np.random.seed(5)
    python_state, numpy_state = random.getstate(), np.random.get_state()
    env = make_env("gem/Mastermind-v0-easy")
    first, info = env.reset(seed=9)
    code = list(env.gem_env.game_code)
    env.step(format_reply(info["valid_actions"][0]))
    assert random.getstate() == python_state
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), numpy_state))
    random.seed(6)
    other = make_env("gem/Mastermind-v0-easy")
    other.reset(seed=9)
    assert other.gem_env.game_code == code and other.instruction == env.instruction


@pytest.mark.parametrize("task", ENV_TASKS["gem"])
def test_every_game_plays_a_random_move_in_the_text_space(task):
    env = make_env(f"gem/{task}")
    obs, info = env.reset(seed=0)
    assert info["valid_actions"] and set(env.instruction) <= set(TEXT_CHARSET)
    obs, _, _, _, info = env.step(format_reply(info["valid_actions"][0]))
    assert info["action_valid"] and set(obs) <= set(TEXT_CHARSET)


@pytest.mark.parametrize("reply, move", [
    ("I guess \\boxed{5}", "I guess \\boxed{5}"),
    ("ACTION: up\nbecause", "\\boxed{up}"),
    ("ACTION: reveal 1 2<|END|>", "\\boxed{reveal 1 2}"),
    ("up", None),
    ("ACTION:", None),
])
def test_the_move_is_gems_box_or_the_line_after_the_marker(reply, move):
    assert gem_move(reply) == move


@pytest.mark.parametrize("style", ["full", "brief"])
def test_the_run_configs_env_arguments_build_it(style):
    """verlog-train and verlog-eval pass env.* keys (the tiny recipe's brief prompt, its format penalty)."""
    from verlog.config import load_recipe

    cfg = load_recipe("tiny", ["env.task=gem/GuessTheNumber-v0-easy", f"env.instruction_style={style}"])
    env = make_env(cfg.env.task, **cfg.env.env_kwargs())
    env.reset(seed=0)
    assert "ACTION: <" in env.instruction
    with pytest.raises(ValueError, match="instruction_style"):
        make_env(cfg.env.task, instruction_style="short")


def test_the_random_floor_is_the_documented_one():
    """docs/environments.md: verlog-eval random task=gem/GuessTheNumber-v0-easy episodes=100."""
    from verlog.evaluate import RandomPolicy
    from verlog.rollout.runner import EpisodeSpec, run_episodes

    specs = [EpisodeSpec(GUESS, 100_000 + i, i) for i in range(100)]
    records = run_episodes(specs, RandomPolicy(100_000), num_envs=4)
    success = sum(r.success for r in records) / 100
    mean_return = sum(r.episode_return for r in records) / 100
    mean_length = sum(r.length for r in records) / 100
    assert (round(success, 2), round(mean_return, 3), round(mean_length, 2)) == (0.37, 0.726, 3.43)
