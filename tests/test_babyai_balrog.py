"""BALROG's BabyAI, byte for byte: our levels and text against the golden corpus of BALROG's own env.

``tests/data/balrog_babyai.jsonl`` holds only outputs of BALROG's BabyAI env (BALROG and minigrid-fork
commits in its first line; how it was made: ``docs/balrog.md``), one JSON record per line:

* ``level``: for each task and seeds 0-99, the layout right after ``reset(seed)``: action kind, rooms,
  grid size, agent ``[x, y, dir]``, every non-wall cell ``[type, colour, x, y, state]``, mission and
  step limit;
* ``episode``: a seed, the actions played (BabyAI-bot moves with random ones mixed in, or random play),
  BALROG's observation text after the reset and after every step, and the reward and end flags;
* ``view``: a hand-built state (grid size, cells, agent, carried object) and BALROG's text for it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers import load_golden_corpus
from minigrid.core.grid import Grid
from minigrid.core.world_object import Ball, Box, Door, Floor, Goal, Key, Lava, Wall

from verlog.envs import make_env
from verlog.envs.babyai_levels import BALROG_KINDS

CORPUS = Path(__file__).resolve().parent / "data" / "balrog_babyai.jsonl"


HEADER, LEVELS, EPISODES, VIEWS = load_golden_corpus(CORPUS)


def _cells(env) -> list[list]:
    """Every non-wall cell of the level as ``[type, colour, x, y, state]``, column by column."""
    grid = env.minigrid.grid
    return [[c.type, c.color, x, y, int(c.encode()[2])]
            for x in range(grid.width) for y in range(grid.height)
            if (c := grid.get(x, y)) is not None and c.type != "wall"]


def test_the_corpus_names_its_sources_and_is_big_enough():
    assert len(HEADER["balrog_commit"]) == len(HEADER["minigrid_fork_commit"]) == 40
    assert HEADER["balrog_commit"].startswith("af7d1f1") and HEADER["minigrid_fork_commit"].startswith("cf73dd1")
    assert HEADER["babyai_kwargs"] == {"num_dists": 0}
    assert set(LEVELS) == set(EPISODES) == set(BALROG_KINDS)
    for task in BALROG_KINDS:
        assert [r["seed"] for r in LEVELS[task]] == list(range(100))
        assert sum(len(e["observations"]) for e in EPISODES[task]) >= 200
    assert len(VIEWS) >= 300


@pytest.mark.parametrize("task", BALROG_KINDS)
def test_every_seed_lays_out_balrogs_level(task):
    env = make_env(f"babyai/{task}")
    for record in LEVELS[task]:
        env.reset(seed=record["seed"])
        level = env.minigrid
        seen = {
            "kind": level.kind.replace("_", " "),  # BALROG writes the kinds with spaces
            "rooms": level.num_rows * level.num_cols,
            "grid": [level.width, level.height],
            "agent": [int(level.agent_pos[0]), int(level.agent_pos[1]), int(level.agent_dir)],
            "objects": _cells(env),
            "mission": env.mission,
            "max_steps": env.max_steps,
        }
        assert seen == {key: record[key] for key in seen}, f"babyai/{task} seed {record['seed']}"


#: What BALROG's levels hold, per task, on all 100 seeds: (rooms, objects other than walls).
LEVEL_SHAPES = {
    "goto": (1, 1), "pickup": (1, 1), "open": (2, 2), "putnext": (1, 2), "pick_up_seq_go_to": (1, 2),
}


@pytest.mark.parametrize("task", BALROG_KINDS)
def test_balrogs_levels_are_small(task):
    """The level facts in words: goto/pickup one room, one object; putnext/sequence one room, two
    objects; open two rooms, a locked door and the key of its colour, the agent beside the key."""
    shapes = Counter((r["rooms"], len(r["objects"])) for r in LEVELS[task])
    assert shapes == {LEVEL_SHAPES[task]: 100}
    for record in LEVELS[task]:
        types = sorted(o[0] for o in record["objects"])
        assert "door" not in types or task == "open"
        assert not any(p in record["mission"] for p in ("yellow box", "red key", "red door", "green ball",
                                                         "grey door"))
        if task == "open":
            (door, key) = sorted(record["objects"], key=lambda o: o[0])
            assert (door[0], key[0], door[1], door[4]) == ("door", "key", key[1], 2)  # locked, same colour
            assert door[2] == 7 and (record["agent"][0] < 7) == (key[2] < 7)  # the agent is on the key's side
            assert record["mission"] in ("open the door", f"open the {door[1]} door")


def test_the_old_levels_are_not_balrogs():
    # The corpus tells BALROG's levels from the ones babyai/goto... ran before (now goto_local...).
    for task, old in (("goto", "goto_local"), ("pickup", "pickup_loc"), ("open", "open_door_color")):
        env = make_env(f"babyai/{old}")
        env.reset(seed=0)
        assert _cells(env) != LEVELS[task][0]["objects"]


@pytest.mark.parametrize("task", BALROG_KINDS)
def test_every_observation_is_balrogs_byte_for_byte(task):
    """Replays each episode's actions; observation text, reward and end flags must equal BALROG's at
    every step (Verlog reports a success on the last allowed step as terminated only)."""
    compared = 0
    for episode in EPISODES[task]:
        env = make_env(f"babyai/{task}")
        obs, info = env.reset(seed=episode["seed"])
        assert (obs, info["mission"]) == (episode["observations"][0], episode["mission"])
        steps = zip(episode["actions"], episode["observations"][1:], episode["rewards"], episode["terminated"],
                    episode["truncated"])
        for n, (action, text, reward, terminated, truncated) in enumerate(steps, start=1):
            obs, got_reward, got_terminated, got_truncated, _ = env.step(f"ACTION: {action}")
            where = f"babyai/{task} seed {episode['seed']} step {n} ({action})"
            assert obs == text, where
            assert (got_reward, got_terminated, got_truncated) == (reward, terminated, truncated and not terminated), where
            compared += 1
        assert got_terminated or got_truncated  # BALROG's episode ended here, and so does ours
    assert compared + len(EPISODES[task]) == sum(len(e["observations"]) for e in EPISODES[task])


_MAKERS = {"key": Key, "ball": Ball, "box": Box, "floor": Floor, "goal": lambda color: Goal(),
           "lava": lambda color: Lava(), "wall": lambda color: Wall()}


def _build(kind: str, color: str, state: int):
    if kind == "door":
        return Door(color, is_open=state == 0, is_locked=state == 2)
    return _MAKERS[kind](color)


def test_hand_built_views_read_as_balrogs():
    """Random walled grids (5-16 cells a side) with inner walls, doors in all three states, keys,
    balls, boxes, goals, lava and floor tiles, the agent anywhere, carrying or not."""
    env = make_env("babyai/goto")
    env.reset(seed=0)
    level = env.minigrid
    for n, view in enumerate(VIEWS):
        width, height = view["size"]
        grid = Grid(width, height)
        grid.wall_rect(0, 0, width, height)
        for kind, color, x, y, state in view["cells"]:
            grid.set(x, y, _build(kind, color, state))
        level.grid = grid
        level.agent_pos, level.agent_dir = np.array(view["agent"][:2]), view["agent"][2]
        level.carrying = None if view["carrying"] is None else _build(*view["carrying"], 0)
        assert env.describe() == view["text"], f"view {n}: {view}"
    assert sum(v["text"] == "" for v in VIEWS) >= 1  # an empty view is the empty string


def test_the_tidy_style_differs_from_balrogs_text():
    # The option keeps Verlog's earlier wording: on BALROG's own episodes most observations read otherwise.
    differ = total = 0
    for task in BALROG_KINDS:
        for episode in EPISODES[task][:3]:
            env = make_env(f"babyai/{task}", text_style="tidy")
            got = [env.reset(seed=episode["seed"])[0]]
            got += [env.step(f"ACTION: {a}")[0] for a in episode["actions"]]
            differ += sum(a != b for a, b in zip(got, episode["observations"]))
            total += len(got)
    assert differ > total // 4
