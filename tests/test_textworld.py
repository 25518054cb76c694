"""Tests of the TextWorld text env, its free-text command parser and the offline game cache.

Games are generated once per session into a temporary cache (with ``HOME`` pointed at an empty
temporary folder to check that generation writes nothing outside the cache). To stay fast, treasure
hunter uses level 5 here (1-2 s per game; its default level 25 takes 5-12 s and has its own slow test);
the cooking and coin games use their default (BALROG/IGE) settings.
"""

from __future__ import annotations

import multiprocessing
import random
import re
import time
import warnings
from pathlib import Path

import pytest
from helpers import TEXTWORLD_FAST_SETTINGS

from verlog.envs import make_env
from verlog.envs.base import INFO_KEYS, invalid_action_notice
from verlog.envs.registry import is_registered
from verlog.envs.textworld import (
    MAX_COMMAND_BYTES,
    TextWorldTextEnv,
    balrog_observation,
    clean_feedback,
    first_observation,
    parse_command,
)
from verlog.envs.textworld_games import ensure_game, game_paths, game_seed, resolve_spec

TASKS = ("treasure_hunter", "the_cooking_game", "coin_collector")
FAST_SETTINGS = TEXTWORLD_FAST_SETTINGS


@pytest.fixture(scope="session")
def cache(textworld_cache) -> Path:
    """The session's game cache (see ``textworld_cache`` in conftest.py)."""
    return textworld_cache


def _env(cache: Path, task: str, **kwargs) -> TextWorldTextEnv:
    kwargs.setdefault("num_games", 2)
    return make_env(f"textworld/{task}", cache_dir=cache, settings=FAST_SETTINGS[task], **kwargs)


# ----------------------------------------------------------------------------- command parsing
@pytest.mark.parametrize(
    "reply, command",
    [
        ("ACTION: go north", "go north"),
        ("I should explore.\nACTION: Go North.", "go north"),
        ('action: "Open the Wooden Chest"', "open the wooden chest"),
        ("**Action**: `take key`", "take key"),
        ("Action - unlock door with key", "unlock door with key"),
        ("<|ACTION|>examine cookbook<|END|>", "examine cookbook"),
        ("ACTION: look\nACTION: inventory", "inventory"),  # the last marker counts
        ("ACTION:\n\n  take coin  \nmore text", "take coin"),  # first non-empty line after the marker
        ("ACTION: go north. Then go east", "go north"),  # one command per step
        ("ACTION: go   west ;take key", "go west"),
        ("take red apple", "take red apple"),  # no marker: first non-empty line
        ("\n\n```\ntake red apple\n```", "take red apple"),
        ("Chop the carrot with the knife\nbecause the recipe says so", "chop the carrot with the knife"),
        ("ACTION: dance wildly", "dance wildly"),  # free text: not checked against admissible commands
        ("", None),
        ("   \n\t", None),
        ("ACTION:", None),
        ("ACTION: ...", None),
        ("ACTION: quit", None),  # interpreter meta commands are invalid
        ("ACTION: Restart please", None),
        ("ACTION: undo", None),
        ("ACTION: " + "x" * (MAX_COMMAND_BYTES + 1), None),
    ],
)
def test_parse_command(reply, command):
    assert parse_command(reply) == command


def test_parse_command_rejects_non_str():
    with pytest.raises(TypeError, match="reply"):
        parse_command(None)


def test_clean_feedback_and_first_observation():
    raw = "\n\n  banner  \nWelcome! Find the key.\n\n-= Room =-\nA room.\n\n>" + " " * 120 + "-= Room =-0/1\n"
    assert clean_feedback(raw).endswith("> -= Room =-0/1")
    assert first_observation(raw, "Welcome! Find the key.") == "-= Room =-\nA room.\n\n> -= Room =-0/1"
    assert first_observation("-= Room =-\nA room.", "Not there.") == "-= Room =-\nA room."


def test_balrog_observation_cuts_after_the_last_objective_and_keeps_inner_spaces():
    pad = ">" + " " * 120
    raw = "\n\n  banner  \nWelcome! Find the key.\n\n-= Room =-\nA room.\n\n" + pad + "-= Room =-0/1\n"
    assert balrog_observation(raw, "Welcome! Find the key.") == "-= Room =-\nA room.\n\n" + pad + "-= Room =-0/1"
    goal = "\nWelcome! Find the key.\n\n" + pad + "-= Room =-0/2"  # the reply to `goal` repeats the objective
    assert balrog_observation(goal, "Welcome! Find the key.") == pad + "-= Room =-0/2"
    assert balrog_observation("a X b X c ", "X") == "c"
    assert balrog_observation("\n-= Room =-\n", "Not there.") == balrog_observation("\n-= Room =-\n", "") == "-= Room =-"


# ----------------------------------------------------------------------------- registry and arguments
def test_tasks_are_registered_and_construction_is_lazy(tmp_path):
    assert all(is_registered(f"textworld/{task}") for task in TASKS)
    env = make_env("textworld/treasure_hunter", cache_dir=tmp_path, max_steps=None)
    assert env.max_steps == 80 and env.num_games == 25
    assert env.game_spec.settings == (("level", 25),)
    assert list(tmp_path.iterdir()) == [], "construction must not generate games"
    with pytest.raises(RuntimeError, match="reset"):
        _ = env.instruction
    with pytest.raises(ValueError, match="index"):
        env.game_file(25)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"num_games": 0}, ValueError, "num_games"),
        ({"num_games": 2.0}, TypeError, "num_games"),
        ({"settings": {"levle": 3}}, ValueError, "levle"),
        ({"settings": {"level": 31}}, ValueError, "level"),
        ({"settings": {"level": "5"}}, TypeError, "level"),
        ({"settings": [("level", 5)]}, TypeError, "settings"),
        ({"instruction_style": "short"}, ValueError, "instruction_style"),
        ({"format_penalty": 0.5}, ValueError, "format_penalty"),
        ({"max_steps": 0}, ValueError, "max_steps"),
        ({"cache_dir": 3}, TypeError, "cache_dir"),
        ({"generation_timeout": 0}, ValueError, "generation_timeout"),
        ({"text_style": "pretty"}, ValueError, "text_style"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_env("textworld/treasure_hunter", **kwargs)


def test_bad_task_settings_are_rejected():
    with pytest.raises(ValueError, match="textworld/treasure_hunter"):
        make_env("textworld/zork")
    with pytest.raises(ValueError, match="go"):
        make_env("textworld/the_cooking_game", settings={"go": 5})
    with pytest.raises(ValueError, match="take"):
        make_env("textworld/the_cooking_game", settings={"recipe": 2, "take": 3})
    with pytest.raises(TypeError, match="cook"):
        make_env("textworld/the_cooking_game", settings={"cook": 1})
    with pytest.raises(ValueError, match="100 rooms"):
        make_env("textworld/coin_collector", settings={"level": 250})
    settings = dict(resolve_spec("the_cooking_game", {"recipe": 2, "take": 1}).settings)
    assert (settings["recipe"], settings["take"], settings["go"]) == (2, 1, 12)  # merged onto the defaults
    assert game_seed(3) == 3 and game_seed(3, 2) == 200_003


# ----------------------------------------------------------------------------- generation and cache
def _generate_in_child(cache_dir: str) -> str:
    return str(ensure_game(resolve_spec("treasure_hunter", {"level": 5}), 1, cache_dir))


def test_generation_is_deterministic_and_safe_across_processes(cache, tmp_path):
    # Two processes ask for the same missing game at once (as vector-env workers do): one makes it
    # under the lock, the other waits; the result equals the session's copy of that game.
    context = multiprocessing.get_context("fork")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (pytest's), harmless here
        with context.Pool(2) as pool:
            paths = pool.map(_generate_in_child, [str(tmp_path)] * 2)
    assert paths[0] == paths[1]
    spec = resolve_spec("treasure_hunter", {"level": 5})
    made, reference = game_paths(tmp_path, spec, 1), game_paths(cache, spec, 1)
    assert not list(made["z8"].parent.glob(".tmp-*"))
    for key in ("json", "ni"):
        assert made[key].read_bytes() == reference[key].read_bytes(), key
    z8_a, z8_b = bytearray(made["z8"].read_bytes()), bytearray(reference["z8"].read_bytes())
    z8_a[0x12:0x18] = z8_b[0x12:0x18] = b"000000"  # the serial number is the compile date
    assert z8_a == z8_b
    envs = [_env(root, "treasure_hunter") for root in (cache, tmp_path)]
    (obs_a, _), (obs_b, _) = envs[0].reset(seed=1), envs[1].reset(seed=1)
    assert obs_a == obs_b and envs[0].walkthrough == envs[1].walkthrough and envs[0].walkthrough
    assert obs_a != _env(cache, "treasure_hunter").reset(seed=0)[0]


def test_cache_is_reused_and_complete(cache):
    folder = game_paths(cache, resolve_spec("treasure_hunter", {"level": 5}), 0)["z8"].parent
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert sorted(before) == sorted(
        f"game_{i:03d}{ext}" for i in (0, 1) for ext in (".z8", ".json", ".ni", ".meta.json", ".lock")
    ), "no temporary folder may be left behind"
    start = time.perf_counter()
    env = _env(cache, "treasure_hunter")
    env.reset(seed=1)
    assert time.perf_counter() - start < 2.0, "a cached game must load in well under the generation time"
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


# ----------------------------------------------------------------------------- playing
def _play(env: TextWorldTextEnv, commands: list[str]):
    """Step ``commands``; return (total reward, last step's 5-tuple, progression after each step)."""
    total, progressions, result = 0.0, [], None
    for command in commands:
        result = env.step(f"Thinking...\nACTION: {command}")
        total += result[1]
        progressions.append(result[4]["progression"])
        if result[2] or result[3]:
            break
    return total, result, progressions


@pytest.mark.parametrize("task", TASKS)
def test_walkthrough_wins_with_progression_one(cache, task):
    env = _env(cache, task)
    obs, info = env.reset(seed=0)
    assert info["progression"] == 0.0 and info["score"] == 0 and not info["won"]
    walkthrough = env.walkthrough
    total, (obs, reward, terminated, truncated, info), progressions = _play(env, walkthrough)
    assert terminated and not truncated
    assert info["episode_step"] == len(walkthrough), "the game must end exactly on the last command"
    assert info["won"] and info["success"] and not info["lost"] and info["progression"] == 1.0
    assert total == info["score"] == info["max_score"] > 0
    assert progressions == sorted(progressions)
    assert "*** The End ***" in obs


def test_cooking_progression_counts_points_and_loss_terminates(cache):
    env = _env(cache, "the_cooking_game")
    env.reset(seed=0)
    for command in env.walkthrough:  # up to the first cooking step
        _, reward, terminated, _, info = env.step(f"ACTION: {command}")
        assert not terminated
        if reward > 0 and command.startswith("cook "):
            break
    assert command.startswith("cook "), "the default cooking game needs cooking"
    assert info["progression"] == pytest.approx(info["score"] / info["max_score"]) and 0 < info["progression"] < 1
    before = info["progression"]
    obs, reward, terminated, truncated, info = env.step(f"ACTION: {command}")  # cooking it twice burns it
    assert "*** You lost! ***" in obs
    assert terminated and not truncated and reward == 0.0
    assert info["lost"] and not info["won"] and not info["success"]
    assert info["progression"] == before


def test_tidy_style_cuts_the_objective_from_the_first_observation_only_so_goal_shows_it(cache):
    env = _env(cache, "coin_collector", text_style="tidy")
    obs, info = env.reset(seed=0)
    objective = env.objective
    assert objective and objective not in obs
    assert obs.startswith("-= ") and "TextWorld" not in obs  # banner cut too; room header first
    assert obs.splitlines()[-1].startswith("> -= ")  # the status line stays, its padding collapsed
    assert objective not in info["instruction"] and "- goal: " in info["instruction"]  # left to `goal`
    goal_obs, reward, *_ = env.step("ACTION: goal")
    assert objective in goal_obs and reward == 0.0
    brief = _env(cache, "coin_collector", instruction_style="brief")
    _, info = brief.reset(seed=0)
    assert objective.strip() in info["instruction"] and "ACTION: <command>" in info["instruction"]
    assert len(info["instruction"]) < 600


def test_balrog_style_cuts_the_objective_from_every_reply_so_the_instruction_states_it(cache):
    env = _env(cache, "coin_collector")
    assert env.text_style == "balrog"
    obs, info = env.reset(seed=0)
    objective = env.objective
    assert objective and objective not in obs and obs.startswith("-= ") and "TextWorld" not in obs
    assert re.fullmatch(r">  +-= [^=]+ =-0/1", obs.splitlines()[-1])  # the status line as the game pads it
    assert " ".join(objective.split()) in info["instruction"] and "- goal: " not in info["instruction"]
    goal_obs, reward, *_ = env.step("ACTION: goal")
    assert re.fullmatch(r">  +-= [^=]+ =-0/2", goal_obs) and reward == 0.0  # BALROG's cut leaves the status line
    look_obs, *_ = env.step("ACTION: look")
    assert look_obs.startswith("-= ") and objective not in look_obs


def test_free_text_is_executed_and_invalid_replies_run_look(cache):
    env = _env(cache, "treasure_hunter", format_penalty=-0.5)
    twin = _env(cache, "treasure_hunter")
    env.reset(seed=0)
    twin.reset(seed=0)
    obs, reward, _, _, info = env.step("ACTION: dance")
    assert (info["action"], info["action_valid"], reward) == ("dance", True, 0.0)
    assert "dance" not in info["valid_actions"] and obs  # the game answers, whatever it says
    twin.step("ACTION: dance")
    look_obs, *_ = twin.step("ACTION: look")
    for bad in ("", "I am not sure what to do.\nACTION:", "ACTION: quit"):
        obs, reward, terminated, truncated, info = env.step(bad)
        assert (info["action"], info["action_valid"], info["game_reward"], reward) == ("look", False, 0.0, -0.5)
        notice, rest = obs.split("\n", 1)
        assert notice == invalid_action_notice("look")
        assert _without_status(rest) == _without_status(look_obs)  # the status line counts moves
        assert not terminated and not truncated


def _without_status(obs: str) -> list[str]:
    return [line for line in obs.splitlines() if not line.startswith(">")]


def test_step_limit_truncates(cache):
    env = _env(cache, "treasure_hunter", max_steps=3)
    env.reset(seed=0)
    flags = [env.step("ACTION: look")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    with pytest.raises(RuntimeError, match="reset"):
        env.step("ACTION: look")
    obs, info = env.reset(seed=0)  # a reused env starts afresh
    assert info["episode_step"] == 0 and not env.step("ACTION: look")[3]


def test_seeds_pick_games_modulo_pool_and_reproduce(cache):
    def rollout(seed: int, steps: int = 12) -> list:
        env = _env(cache, "treasure_hunter", max_steps=5)
        rng = random.Random(99)
        obs, info = env.reset(seed=seed)
        seen = [info["game_index"], obs]
        for _ in range(steps):  # crosses episode boundaries: unseeded resets continue the env's RNG
            obs, reward, terminated, truncated, info = env.step(f"ACTION: {rng.choice(info['valid_actions'])}")
            seen += [obs, reward]
            if terminated or truncated:
                obs, info = env.reset()
                seen += [info["game_index"], obs]
        return seen

    assert rollout(4) == rollout(4)
    assert rollout(0)[:2] == rollout(2)[:2] and rollout(0)[0] == 0  # seed 2 % 2 games = game 0
    assert rollout(1)[0] == 1 and rollout(1)[1] != rollout(0)[1]


def test_info_keys_are_stable_and_plain(cache):
    env = _env(cache, "the_cooking_game")
    _, info = env.reset(seed=0)
    keys = set(info)
    assert set(INFO_KEYS) | {"game_index", "score", "max_score", "won", "lost"} == keys
    assert info["valid_actions"] and all(isinstance(a, str) for a in info["valid_actions"])
    rng = random.Random(0)
    for step in range(1, 16):
        replies = [f"ACTION: {a}" for a in info["valid_actions"]] + ["", "ACTION: sing"]
        _, reward, terminated, truncated, info = env.step(rng.choice(replies))
        assert set(info) == keys and info["episode_step"] == step
        assert isinstance(reward, float) and isinstance(info["score"], int) and isinstance(info["won"], bool)
        assert 0.0 <= info["progression"] <= 1.0
        if terminated or truncated:
            break


def test_gymnasium_env_checker_accepts_the_env(cache):
    from gymnasium.utils.env_checker import check_env

    env = _env(cache, "treasure_hunter")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # only the "no render modes / no spec" notices
        check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)


@pytest.mark.slow
def test_default_treasure_hunter_game_is_made_and_won(tmp_path):
    env = make_env("textworld/treasure_hunter", cache_dir=tmp_path, num_games=1)
    env.reset(seed=0)
    assert len(env.walkthrough) >= 11  # level 25: quest of 11 actions (shorter only via map cycles)
    total, (_, _, terminated, _, info), _ = _play(env, env.walkthrough)
    assert terminated and info["won"] and info["progression"] == 1.0 and total == info["max_score"]
