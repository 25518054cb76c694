"""BALROG's TextWorld text, byte for byte: the golden corpus of BALROG's own output (its TextWorld wrapper,
as its evaluator builds it, playing games made by Verlog's generator) replayed step by step through
Verlog's env; the listed differences (rewards, end flags) checked too; the instruction's commands."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

import pytest
from helpers import TEXTWORLD_FAST_SETTINGS, TEXTWORLD_PREMADE

from verlog.config import load_recipe
from verlog.envs import make_env

CORPUS_FILE = Path(__file__).parent / "data" / "balrog_textworld.jsonl"
HEADER, *EPISODES = [json.loads(line) for line in CORPUS_FILE.read_text().splitlines()]
TASKS = ("treasure_hunter", "the_cooking_game", "coin_collector")
#: BALROG's status line: ">", the Z-machine's padding, "-= Room =-score/moves".
STATUS_LINE = re.compile(r">  +-= [^\n]+ =-\d+/\d+")


def _episode_id(episode: dict) -> str:
    return f"{episode['task']}-game{episode['game_index']}-{episode['policy']}-{len(episode['actions'])}steps"


def _env(cache: Path, episode: dict, **kwargs):
    return make_env(f"textworld/{episode['task']}", cache_dir=cache, settings=episode["settings"], num_games=2,
                    **kwargs)


# ----------------------------------------------------------------------------- the golden corpus
def test_corpus_is_balrogs_output_and_covers_its_quirks():
    assert HEADER["balrog_commit"].startswith("af7d1f1")
    assert HEADER["textworld_version"] == metadata.version("textworld")
    for task in TASKS:
        episodes = [ep for ep in EPISODES if ep["task"] == task]
        assert sum(len(ep["observations"]) for ep in episodes) >= 50
        assert any(ep["won"] for ep in episodes)  # a walkthrough mixed with other commands wins
        assert any("goal" in ep["actions"] for ep in episodes)
    for ep in EPISODES:
        assert (ep["task"], ep["game_index"]) in TEXTWORLD_PREMADE  # the session's cache holds the game
        assert ep["settings"] == TEXTWORLD_FAST_SETTINGS[ep["task"]]
        n = len(ep["actions"])
        assert len(ep["observations"]) == n + 1 and len(ep["rewards"]) == len(ep["terminated"]) == n
        assert ep["terminated"] == [False] * (n - 1) + [True] and not any(ep["truncated"])  # BALROG: done, no cut
        assert set(ep["short_term"]) == {""}
        # BALROG's cut leaves the reply to `goal` a lone status line, padded as the game pads it
        for action, obs in zip(ep["actions"], ep["observations"][1:]):
            assert (action == "goal") <= bool(STATUS_LINE.fullmatch(obs))
    limit = [ep for ep in EPISODES if not ep["won"] and len(ep["actions"]) == 80]
    lost = [ep for ep in EPISODES if not ep["won"] and len(ep["actions"]) < 80]
    assert len(limit) >= 3 and len(lost) >= 2  # ended by the step limit, and lost games
    assert sum(len(ep["observations"]) for ep in EPISODES) >= 500


@pytest.mark.parametrize("episode", EPISODES, ids=[_episode_id(ep) for ep in EPISODES])
def test_text_equals_balrogs_byte_for_byte_on_every_step(textworld_cache, episode):
    env = _env(textworld_cache, episode)
    obs, info = env.reset(seed=episode["game_index"])
    assert obs == episode["observations"][0], f"first observation differs:\n--- BALROG\n{episode['observations'][0]}" \
                                              f"\n--- Verlog\n{obs}"
    assert info["context"] == episode["short_term"][0]
    steps = zip(episode["actions"], episode["observations"][1:], episode["rewards"], episode["terminated"])
    score = 0
    for step, (action, want, balrog_reward, done) in enumerate(steps, 1):
        obs, reward, terminated, truncated, info = env.step(f"ACTION: {action}")
        # every command is executed (lower-cased: Inform's parser ignores case, as BALROG's "BBQ" shows)
        assert (info["action"], info["action_valid"]) == (action.lower(), True)
        assert obs == want, f"observation after step {step} ({action!r}) differs:\n--- BALROG\n{want}\n--- Verlog\n{obs}"
        assert info["context"] == ""
        # Listed differences: BALROG's reward is the cumulative score, ours its difference; BALROG reports
        # the step limit as terminated, we as truncated.
        assert info["score"] == balrog_reward and reward == balrog_reward - score
        score = balrog_reward
        ended = info["won"] or info["lost"]
        assert (terminated, truncated) == (done and ended, done and not ended)
    assert info["won"] == episode["won"]
    assert info["progression"] == pytest.approx(episode["progression"])
    env.close()


# ----------------------------------------------------------------------------- the instruction
_VERBS = ("look", "inventory", "go", "examine", "eat", "open", "drop", "take", "put", "insert", "lock", "unlock",
          "cook", "slice", "chop", "dice", "prepare meal")


@pytest.mark.parametrize("task", TASKS)
def test_instruction_names_balrogs_commands_and_the_objective_goal_cannot_show(textworld_cache, task):
    balrog = HEADER["instructions"][task]
    commands = balrog.split("available commands:", 1)[1]
    named = [verb for verb in _VERBS if re.search(rf"\b{verb}\b", commands)]
    assert "go" in named and "take" in named
    episode = {"task": task, "settings": TEXTWORLD_FAST_SETTINGS[task]}
    index = next(i for t, i in TEXTWORLD_PREMADE if t == task)
    env = _env(textworld_cache, episode)
    _, info = env.reset(seed=index)
    for verb in named:
        assert re.search(rf"^- [^\n]*\b{verb}\b", info["instruction"], re.M), verb
    assert " ".join(env.objective.split()) in info["instruction"]  # BALROG's text cuts it from `goal`
    tidy = _env(textworld_cache, episode, text_style="tidy")
    _, info = tidy.reset(seed=index)
    assert "- goal: " in info["instruction"] and env.objective not in info["instruction"]


def test_text_style_config_key_reaches_textworld():
    assert "text_style" not in load_recipe("textworld").env.env_kwargs()  # BALROG's text
    cfg = load_recipe("tiny", ["env.task=textworld/coin_collector"])  # the tiny recipe pins the tidy text
    assert cfg.env.env_kwargs()["text_style"] == "tidy"
    assert make_env(cfg.env.task, **cfg.env.env_kwargs()).text_style == "tidy"
    assert make_env("textworld/coin_collector").text_style == "balrog"


def test_tidy_style_differs_in_whitespace_and_goal_only(textworld_cache):
    """The tidy text has the same words except in replies to goal, which keep the objective; the same
    admissible commands, rewards and end flags."""
    episode = next(ep for ep in EPISODES if ep["task"] == "the_cooking_game" and "goal" in ep["actions"])
    envs = [_env(textworld_cache, episode, text_style=style) for style in ("balrog", "tidy")]
    firsts = [env.reset(seed=episode["game_index"]) for env in envs]
    assert firsts[0][1]["valid_actions"] == firsts[1][1]["valid_actions"]
    objective = envs[1].objective.split()
    for action in episode["actions"]:
        (text, *rest, info), (tidy_text, *tidy_rest, tidy_info) = (env.step(f"ACTION: {action}") for env in envs)
        assert rest == tidy_rest and info["valid_actions"] == tidy_info["valid_actions"]
        assert "  " not in tidy_text
        if action == "goal":
            assert STATUS_LINE.fullmatch(text) and tidy_text.split() == objective + text.split()
        else:
            assert tidy_text.split() == text.split()
