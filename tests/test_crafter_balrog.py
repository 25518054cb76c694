"""BALROG's Crafter text, byte for byte: the golden corpus of BALROG's own output, replayed step by step,
and its rules on hand-made states; the tidy option; the instruction's content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from crafter import objects

from verlog.config import ConfigError, load_recipe
from verlog.envs import make_env
from verlog.envs.crafter import ACHIEVEMENTS, CRAFTER_ACTIONS, CrafterTextEnv
from verlog.envs.crafter_balrog_text import (
    DIED, SLEEPING, balrog_window, describe_balrog_surroundings, describe_balrog_view, nearest_things,
)
from verlog.envs.crafter_text import visible_things
from verlog.catalog import ENV_TASKS, TIDY_TEXT_FAMILIES
from verlog.envs.registry import accepts_argument
from verlog.preflight import check_buildable

GOLDEN = Path(__file__).parent / "data" / "balrog_crafter_golden.json"
CORPUS = json.loads(GOLDEN.read_text())
EPISODES = CORPUS["episodes"]
NORTH, SOUTH, WEST, EAST = (0, -1), (0, 1), (-1, 0), (1, 0)


def _replay(episode: dict) -> tuple[list[str], list[str]]:
    """Verlog's observations and contexts for the corpus episode's seed and actions; the episode must
    end (death) exactly where BALROG's did."""
    env = make_env("crafter/default", location_style="offset" if episode["precise_location"] else None)
    obs, info = env.reset(seed=episode["seed"])
    observations, contexts, ends = [obs], [info["context"]], []
    for action in episode["actions"]:
        obs, _, terminated, truncated, info = env.step(f"ACTION: {action}")
        observations.append(obs)
        contexts.append(info["context"])
        ends.append((terminated, truncated))
    assert ends == [(False, False)] * (len(ends) - 1) + [(episode["died"], False)]
    return observations, contexts


# ----------------------------------------------------------------------------- the golden corpus
def test_corpus_is_balrogs_output_and_covers_its_quirks():
    assert CORPUS["balrog_commit"].startswith("af7d1f1") and CORPUS["crafter_version"] == "1.8.3"
    observations = [obs for ep in EPISODES for obs in ep["observations"]]
    contexts = [ctx for ep in EPISODES for ctx in ep["contexts"]]
    assert len(observations) == len(contexts) >= 1000
    for ep in EPISODES:
        assert len(ep["observations"]) == len(ep["contexts"]) == len(ep["actions"]) + 1
        assert set(ep["actions"]) <= set(CRAFTER_ACTIONS)
    # Every rule of the module docstring of verlog.envs.crafter_balrog_text is exercised.
    assert sum(obs.startswith(SLEEPING + "\n\n\n\n") for obs in observations) >= 50
    assert sum(obs.startswith(DIED + "\n\n\n\n") for obs in observations) >= 2
    assert sum("You see nothing away from you." in obs for obs in observations) >= 50  # the empty window
    assert sum("_" in ctx for ctx in contexts) >= 100  # crafter's item names (wood_pickaxe)
    assert any("steps to your" in obs for obs in observations)
    precise = [obs for ep in EPISODES if ep["precise_location"] for obs in ep["observations"]]
    assert precise and any(" and " in obs for obs in precise) and not any("to your" in obs for obs in precise)
    assert sum(len(ep["actions"]) >= 150 for ep in EPISODES) >= 3  # past step 150: night, BALROG's render noise


@pytest.mark.parametrize("episode", EPISODES, ids=[f"seed{ep['seed']}-{ep['policy']}" for ep in EPISODES])
def test_text_equals_balrogs_byte_for_byte_on_every_step(episode):
    observations, contexts = _replay(episode)
    for step, (got, want) in enumerate(zip(observations, episode["observations"])):
        assert got == want, f"observation after step {step} differs:\n--- BALROG\n{want}\n--- Verlog\n{got}"
    for step, (got, want) in enumerate(zip(contexts, episode["contexts"])):
        assert got == want, f"context after step {step} differs:\n--- BALROG\n{want}\n--- Verlog\n{got}"
    assert len(observations) == len(episode["observations"])


# ----------------------------------------------------------------------------- the rules on hand-made states
@pytest.fixture
def env():
    game = make_env("crafter/default")
    game.reset(seed=0)
    return game


def _flat(env: CrafterTextEnv, pos: tuple[int, int] = (32, 32), material: str = "sand") -> None:
    """Every cell `material`, no creature but the player, the player at `pos` facing north."""
    world, player = env.crafter._world, env.crafter._player
    world._mat_map[:] = world._mat_ids[material]
    for obj in world.objects:
        if obj is not player:
            world.remove(obj)
    if tuple(int(v) for v in player.pos) != pos:
        world.move(player, pos)
    player.facing = NORTH


def _put(env: CrafterTextEnv, dx: int, dy: int, what) -> None:
    x, y = (int(v) for v in env.crafter._player.pos)
    world = env.crafter._world
    if isinstance(what, str):
        world[(x + dx, y + dy)] = what
    else:
        world.add(what(world, (x + dx, y + dy)))


def test_scan_order_first_sighting_wins_ties_and_ground_is_listed(env):
    _flat(env)
    _put(env, 2, -1, "tree")  # distance 3, met in column dx=2
    _put(env, -1, 2, "tree")  # distance 3 too, met earlier (column dx=-1): this one is named
    _put(env, 1, 0, "tree")  # distance 1: nearer, named although met later
    _put(env, -3, 3, objects.Cow)  # column dx=-3: cow is met before any tree
    _put(env, 0, -1, "water")  # faced
    _put(env, -4, -3, "grass")  # the window's north-west corner: the first cell scanned
    assert env.describe().split("\n") == [
        "You see:",
        "- grass 7 steps to your north-west",
        "- sand 1 step to your west",  # met second, listed second; named at its nearest cell
        "- cow 6 steps to your south-west",
        "- tree 1 step to your east",
        "- water 1 step to your north",
        "",
        "You face water at your front.",
    ]
    env.location_style = "offset"  # BALROG's precise_location: the same choice, other words
    assert env.describe().split("\n")[1:3] == ["- grass 3 steps north and 4 steps west", "- sand 1 step west"]


def test_ties_go_to_the_western_cell_where_the_tidy_text_takes_the_northern(env):
    _flat(env)
    _put(env, 1, -1, "stone")
    _put(env, -1, 1, "stone")
    assert "- stone 2 steps to your south-west" in env.describe().split("\n")
    tidy = make_env("crafter/default", text_style="tidy")
    tidy.reset(seed=0)
    _flat(tidy)
    _put(tidy, 1, -1, "stone")
    _put(tidy, -1, 1, "stone")
    assert "- stone 1 step north and 1 step east" in tidy.describe().split("\n")


@pytest.mark.parametrize("pos, empty", [((3, 30), True), ((4, 30), False), ((30, 2), True), ((30, 3), False),
                                        ((0, 0), True), ((63, 63), False)])
def test_window_is_empty_near_the_west_and_north_edges(env, pos, empty):
    _flat(env, pos)
    for dx, dy in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        if 0 <= pos[0] + dx < 64 and 0 <= pos[1] + dy < 64:
            _put(env, dx, dy, "tree")
    text = env.describe()
    if empty:
        assert text == "You see nothing away from you.\n\nYou face nothing at your front."
    else:
        assert text.startswith("You see:\n") and "- tree 1 step to your" in text
    columns, rows = balrog_window(pos, (9, 7), (64, 64))
    assert (len(columns) == 0) == empty and (len(rows) == 0) == empty


def test_window_is_cut_at_the_east_and_south_edges(env):
    _flat(env, (62, 61))
    env.crafter._player.facing = EAST
    _put(env, 1, 2, "coal")  # (63, 63): the map's last cell
    assert env.describe().split("\n") == [
        "You see:",
        "- sand 1 step to your west",  # met first (column x=58), named at its nearest cell
        "- coal 3 steps to your south-east",
        "",
        "You face sand at your front.",
    ]
    assert balrog_window((62, 61), (9, 7), (64, 64)) == (range(58, 64), range(58, 64))
    env.crafter._world.move(env.crafter._player, (63, 61))
    assert env.describe().endswith("You face nothing at your front.")  # beyond the map


def test_sleeping_line_wins_over_death_and_three_blank_lines_follow(env):
    _flat(env)
    player = env.crafter._player
    body = env.describe()
    player.sleeping = True
    assert env.describe() == f"{SLEEPING}\n\n\n\n{body}"
    player.health = 0
    assert env.describe() == f"{SLEEPING}\n\n\n\n{body}"
    player.sleeping = False
    assert env.describe() == f"{DIED}\n\n\n\n{body}"


def test_context_keeps_crafters_item_names(env):
    env.crafter._player.inventory.update(wood=3, wood_pickaxe=1, stone_sword=2, drink=4)
    assert env.context == (
        "Your status:\n- health: 9/9\n- food: 9/9\n- drink: 4/9\n- energy: 9/9\n\n"
        "Your inventory:\n- wood: 3\n- wood_pickaxe: 1\n- stone_sword: 2"
    )


@pytest.mark.parametrize("style", ["compass", "offset"])
def test_the_one_pass_view_equals_the_scan_and_the_pure_rule_on_random_walks(style):
    """describe_balrog_view reads the window in one pass (nearest_things); the slow reference is the
    per-cell scan (visible_things) fed to the pure rule, on random walks from 8 seeds."""
    import random

    rng, compared = random.Random(0), 0
    env = make_env("crafter/default", location_style=style)
    for seed in range(8):
        env.reset(seed=seed)
        for _ in range(150):
            world, player = env.crafter._world, env.crafter._player
            pos = (int(player.pos[0]), int(player.pos[1]))
            columns, rows = balrog_window(pos, (9, 7), (64, 64))
            things, kinds = visible_things(world, player, columns, rows)
            facing = kinds.get((int(player.facing[0]), int(player.facing[1])), "nothing")
            expected = describe_balrog_surroundings(things, facing, location_style=style)
            assert describe_balrog_view(world, player, (9, 7), style).endswith(expected)
            nearest, faced = nearest_things(world, player, columns, rows)
            assert faced == facing and len(nearest) == len({kind for kind, _, _ in things})
            compared += 1
            _, _, terminated, truncated, _ = env.step(f"ACTION: {rng.choice(sorted(CRAFTER_ACTIONS))}")
            if terminated or truncated:
                break
    assert compared > 500
    # a window cut away at the map's west or north edge describes nothing (balrog_window's rule)
    assert nearest_things(env.crafter._world, env.crafter._player, range(0), range(0)) == ({}, "nothing")


def test_describe_balrog_surroundings_pure():
    assert describe_balrog_surroundings([], "nothing") == "You see nothing away from you.\n\nYou face nothing at your front."
    things = [("grass", -1, 0), ("tree", 0, -2), ("grass", 0, 1)]
    assert describe_balrog_surroundings(things, "grass") == (
        "You see:\n- grass 1 step to your west\n- tree 2 steps to your north\n\nYou face grass at your front.")
    with pytest.raises(ValueError, match="own cell"):
        describe_balrog_surroundings([("cow", 0, 0)], "grass")
    with pytest.raises(ValueError, match="location_style"):
        describe_balrog_surroundings(things, "grass", location_style="polar")


# ----------------------------------------------------------------------------- the option and the prompt
def test_text_style_option_and_its_config_key():
    assert make_env("crafter/default").text_style == "balrog"
    tidy = make_env("crafter/default", text_style="tidy")
    assert (tidy.text_style, tidy.location_style) == ("tidy", "offset")
    obs, info = tidy.reset(seed=0)
    assert "grass" not in obs.split("\n\n")[0] and "to your" not in obs
    with pytest.raises(ValueError, match="text_style"):
        make_env("crafter/default", text_style="pretty")
    assert "text_style" not in load_recipe("crafter").env.env_kwargs()
    cfg = load_recipe("tiny", ["env.task=crafter/default", "env.text_style=tidy"])
    assert cfg.env.env_kwargs()["text_style"] == "tidy"
    check_buildable(cfg)
    with pytest.raises(ConfigError, match="env.text_style"):
        load_recipe("tiny", ["env.text_style=pretty"])
    # an env with BALROG's text only ignores the key (the tiny recipe pins tidy for its BabyAI results)
    cfg = load_recipe("tiny", ["env.task=babaisai/goto_win", "env.text_style=tidy"])
    assert "text_style" not in cfg.env.env_kwargs()
    check_buildable(cfg)
    for family, tasks in ENV_TASKS.items():  # the catalog's list of tidy families is the registry's
        assert accepts_argument(f"{family}/{tasks[0]}", "text_style") == (family in TIDY_TEXT_FAMILIES)
    with pytest.raises(ValueError, match="unknown environment"):
        accepts_argument("crafter/hard", "text_style")


def test_instruction_carries_balrogs_information_in_our_words():
    balrog = make_env("crafter/default").instruction
    for name in CRAFTER_ACTIONS:
        assert f"- {name}: " in balrog  # every action with its meaning
    for achievement in ACHIEVEMENTS:
        assert f"- {achievement.replace('_', ' ')}\n" in balrog
    assert "unlock as many of the 22 achievements" in balrog  # the goal
    assert "earlier actions and observations" in balrog  # the history BALROG announces
    assert "ground (grass, sand, path) included" in balrog and '"tree 3 steps to your north-west"' in balrog
    tidy = make_env("crafter/default", text_style="tidy").instruction
    assert "is not listed" in tidy and '"tree 1 step north and 2 steps west"' in tidy
    precise = make_env("crafter/default", location_style="offset").instruction
    assert "ground (grass, sand, path) included" in precise and '"tree 1 step north and 2 steps west"' in precise
