"""BALROG's Baba Is AI, byte for byte: our levels, moves and text against a corpus of BALROG's own env.

``tests/data/balrog_babaisai.jsonl.gz`` holds only outputs of BALROG's Baba Is AI env (the BALROG and
``baba-is-ai`` commits are in its first line; how it was made: ``docs/balrog.md``), one JSON record
per line. Cells are ``[x, y, items]`` with the items of the cell bottom to top, an object as
``kind:colour`` and a text block as its word in capitals:

* ``level``: for each of the 40 levels and seeds 0-19, the board right after BALROG's evaluator seeds
  numpy with the seed and resets: grid size, every non-empty interior cell, the target plan, and for
  seeds 0-4 the observation text;
* ``episode``: a level, a seed, the actions played (uniformly random, runs of one direction, or a
  random opening then a winning plan), BALROG's text after the reset and after every step, the
  rewards and end flags, and the action after which BALROG found no player and started a new level
  (``you_broken_after``), if it did;
* ``board``: a random hand-made board (several YOU objects, ``X is Y`` sentences, stacked cells) put
  into BALROG's env, with random actions and BALROG's text after each.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import load_golden_corpus

from verlog.envs import make_env
from verlog.envs.babaisai import BABAISAI_LEVELS, BabaGame
from verlog.envs.babaisai.env import LOST_NOTICE, balrog_player
from verlog.envs.babaisai.items import (
    COLOR_NAMES,
    COLOR_SHIFT,
    IS,
    KIND_MASK,
    OBJECT_NAMES,
    item_code,
    noun_code,
    property_code,
    text_word,
)

CORPUS = Path(__file__).resolve().parent / "data" / "balrog_babaisai.jsonl.gz"


HEADER, LEVELS, EPISODES, BOARDS = load_golden_corpus(CORPUS)


def _token(code: int) -> str:
    kind = code & KIND_MASK
    if 1 <= kind <= len(OBJECT_NAMES):
        return f"{OBJECT_NAMES[kind - 1]}:{COLOR_NAMES[code >> COLOR_SHIFT]}"
    return text_word(kind).upper()


def _code(token: str) -> int:
    if ":" in token:
        return item_code(*token.split(":"))
    word = token.lower()
    return IS if word == "is" else noun_code(word) if word in OBJECT_NAMES else property_code(word)


def _cells(game: BabaGame) -> list[list]:
    """Every non-empty interior cell as ``[x, y, [token, ...]]`` (bottom to top), row by row."""
    return [[x, y, [_token(c) for c in cell]]
            for y in range(1, game.height - 1) for x in range(1, game.width - 1)
            if (cell := game.items_at(x, y))]


def _replay(env, record: dict, where: str) -> int:
    """Step ``env`` through the record's actions, asserting BALROG's text, reward and end flags at
    every step; return the number of steps compared. BALROG ends an episode at its step limit as
    terminated; Verlog calls that truncated. Where BALROG found no player (no top item of the kind
    the last ``X is you`` names) it silently started a new level, writing an object's representation
    into the text: Verlog then ends the episode as lost if nothing is YOU, and otherwise plays on."""
    steps = zip(record["actions"], record["observations"][1:], record["rewards"], record["terminated"],
                record["truncated"])
    n = 0
    for n, (action, text, reward, terminated, truncated) in enumerate(steps, start=1):
        obs, got_reward, got_terminated, got_truncated, _ = env.step(f"ACTION: {action}")
        at = f"{where} step {n} ({action})"
        assert obs == text, at
        time_up = terminated and reward == 0 and n == env.max_steps
        assert (got_reward, got_terminated, got_truncated) == (reward, terminated and not time_up,
                                                              truncated or time_up), at
    if record["you_broken_after"]:
        obs, reward, terminated, truncated, _ = env.step(f"ACTION: {record['you_broken_after']}")
        assert balrog_player(env.game) is None, where
        if env.game.you_items():  # BALROG lost its player, but another YOU object remains
            assert (reward, terminated, obs.startswith("Active rules:")) == (0.0, False, True), where
        else:
            assert (reward, terminated, obs.split("\n")[0]) == (-1.0, True, LOST_NOTICE), where
    return n


def test_the_corpus_names_its_sources_and_covers_every_level():
    assert HEADER["balrog_commit"].startswith("af7d1f1") and len(HEADER["balrog_commit"]) == 40
    assert HEADER["baba_is_ai_commit"].startswith("ad466e0") and len(HEADER["baba_is_ai_commit"]) == 40
    assert set(LEVELS) == set(EPISODES) == set(BABAISAI_LEVELS)
    for level in BABAISAI_LEVELS:
        assert [r["seed"] for r in LEVELS[level]] == list(range(20))
        assert sum("text" in r for r in LEVELS[level]) == 5
    observations = sum(len(e["observations"]) for eps in EPISODES.values() for e in eps)
    assert observations >= 3000 and sum(len(b["observations"]) for b in BOARDS) >= 2000
    wins = sum(any(r > 0 for r in e["rewards"]) for eps in EPISODES.values() for e in eps)
    assert wins >= 80  # every level is won at least once on the way
    assert sum(bool(e["you_broken_after"]) for eps in EPISODES.values() for e in eps) >= 1


@pytest.mark.parametrize("level", BABAISAI_LEVELS)
def test_every_seed_lays_out_balrogs_level(level):
    env = make_env(f"babaisai/{level}")
    for record in LEVELS[level]:
        obs, info = env.reset(seed=record["seed"])
        where = f"babaisai/{level} seed {record['seed']}"
        assert [env.game.width, env.game.height] == record["grid"], where
        assert _cells(env.game) == record["cells"], where
        assert info["target_plan"] == record["target_plan"], where
        assert obs == record.get("text", obs), where


@pytest.mark.parametrize("level", BABAISAI_LEVELS)
def test_every_observation_is_balrogs_byte_for_byte(level):
    compared = 0
    for episode in EPISODES[level]:
        env = make_env(f"babaisai/{level}")
        obs, _ = env.reset(seed=episode["seed"])
        where = f"babaisai/{level} seed {episode['seed']} ({episode['style']})"
        assert obs == episode["observations"][0], where
        compared += 1 + _replay(env, episode, where)
    assert compared == sum(len(e["observations"]) for e in EPISODES[level])


def test_hand_made_boards_play_and_read_as_balrogs():
    """Random boards with several YOU objects, ``X is Y`` sentences and stacked cells: the moves
    (row-major order, top items only, walking over objects), the rules and the text all match."""
    several_you = 0
    for record in BOARDS:
        env = make_env("babaisai/goto_win")
        env.reset(seed=0)
        game = BabaGame(*record["grid"])
        for x, y, tokens in record["cells"]:
            for token in tokens:
                game.add(x, y, _code(token))
        game.refresh()
        env.game = game
        assert env.describe() == record["observations"][0], f"board {record['seed']}"
        _replay(env, record, f"board {record['seed']}")
        several_you += any(o.count(" is you\n") > 1 for o in record["observations"])
    assert several_you >= 20
    # where BALROG lost its player, Verlog ended some episodes as lost and played others on
    assert 1 <= sum(bool(r["you_broken_after"]) for r in BOARDS) < len(BOARDS) // 2
