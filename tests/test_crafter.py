"""Tests of the Crafter text env: the tidy text on hand-made states, all 17 actions, rewards, episode
ends, seeding/reproducibility and step-by-step equality with the bare ``crafter.Env`` (BALROG's text,
the default, is tested against BALROG's own output in ``test_crafter_balrog.py``)."""

from __future__ import annotations

import hashlib
import random
import subprocess
import sys
import warnings
from pathlib import Path

import crafter
import numpy as np
import pytest
from crafter import constants, objects

from verlog.envs import make_env
from verlog.envs.registry import is_registered
from verlog.envs.base import INFO_KEYS, invalid_action_notice
from verlog.envs.crafter import ACHIEVEMENTS, CRAFTER_ACTIONS, CrafterTextEnv
from verlog.envs.crafter_balrog_text import SLEEPING
from verlog.envs.crafter_game import make_world_deterministic
from verlog.envs.crafter_text import describe_location, describe_status, describe_surroundings

ACTIONS = list(CRAFTER_ACTIONS)
NORTH, SOUTH, WEST, EAST = (0, -1), (0, 1), (-1, 0), (1, 0)


# ----------------------------------------------------------------------------- helpers
def _pos(env: CrafterTextEnv) -> tuple[int, int]:
    return tuple(int(v) for v in env.crafter._player.pos)


def _at(env: CrafterTextEnv, dx: int, dy: int) -> tuple[int, int]:
    x, y = _pos(env)
    return x + dx, y + dy


def _flatten_world(env: CrafterTextEnv, material: str = "sand") -> None:
    """Make every cell `material` and remove every creature/object but the player.

    On an all-sand map nothing spawns (zombies and cows need grass, skeletons need tunnel paths), so
    the state stays exactly as the test builds it.
    """
    world = env.crafter._world
    world._mat_map[:] = world._mat_ids[material]
    for obj in world.objects:
        if obj is not env.crafter._player:
            world.remove(obj)


def _set(env: CrafterTextEnv, dx: int, dy: int, material: str) -> None:
    env.crafter._world[_at(env, dx, dy)] = material


def _add(env: CrafterTextEnv, cls, dx: int, dy: int, **attrs):
    world = env.crafter._world
    args = (world, _at(env, dx, dy)) + ((env.crafter._player,) if cls in (objects.Zombie, objects.Skeleton) else ())
    obj = cls(*args)
    for key, value in attrs.items():
        setattr(obj, key, value)
    world.add(obj)
    return obj


@pytest.fixture
def env():
    game = make_env("crafter/default")
    game.reset(seed=0)
    return game


@pytest.fixture
def tidy_env():
    game = make_env("crafter/default", text_style="tidy")
    game.reset(seed=0)
    return game


# ----------------------------------------------------------------------------- pure text functions
def test_describe_location_styles():
    assert describe_location(-4, 1) == "1 step south and 4 steps west"
    assert describe_location(2, -3) == "3 steps north and 2 steps east"
    assert describe_location(0, -1) == "1 step north"
    assert describe_location(3, 0) == "3 steps east"
    assert describe_location(-4, 1, "compass") == "5 steps to your south-west"
    assert describe_location(2, -3, "compass") == "5 steps to your north-east"
    assert describe_location(0, 1, "compass") == "1 step to your south"
    assert describe_location(-2, 0, "compass") == "2 steps to your west"
    with pytest.raises(ValueError, match="own cell"):
        describe_location(0, 0)
    with pytest.raises(ValueError, match="style"):
        describe_location(1, 0, "polar")


def test_describe_surroundings_lists_the_nearest_of_each_kind_by_distance():
    things = [
        ("grass", 1, 0),  # walkable ground is never listed
        ("sand", 0, 1),
        ("path", -1, 0),
        ("tree", -3, 2),  # distance 5
        ("tree", 1, 1),  # distance 2: the nearest tree
        ("water", 0, -3),  # distance 3
        ("cow", 2, -1),  # distance 3 like the water: equal distances are sorted by name
        ("stone", 2, 0),  # distance 2 like the tree: stone before tree
        ("zombie", 1, -1),  # distance 2 like the zombie below: the northern one is chosen
        ("zombie", 1, 1),
    ]
    assert describe_surroundings(things, "grass").split("\n") == [
        "You see:",
        "- stone 2 steps east",
        "- tree 1 step south and 1 step east",
        "- zombie 1 step north and 1 step east",
        "- cow 1 step north and 2 steps east",
        "- water 3 steps north",
        "",
        "You face grass at your front.",
    ]
    compass = describe_surroundings(things, "cow", location_style="compass").split("\n")
    assert compass[1] == "- stone 2 steps to your east"
    assert compass[2] == "- tree 2 steps to your south-east"
    assert compass[-1] == "You face cow at your front."
    empty = describe_surroundings([("grass", 1, 1)], "nothing")
    assert empty == "You see nothing nearby.\n\nYou face nothing at your front."
    with pytest.raises(ValueError, match="own cell"):
        describe_surroundings([("cow", 0, 0)], "grass")
    with pytest.raises(ValueError, match="location_style"):
        describe_surroundings([], "grass", location_style="exact")


def test_describe_status_text():
    inventory = {name: info["initial"] for name, info in constants.items.items()}
    assert describe_status(inventory) == (
        "Your status:\n- health: 9/9\n- food: 9/9\n- drink: 9/9\n- energy: 9/9\n\n"
        "You have nothing in your inventory."
    )
    inventory.update(health=3, drink=0, wood=2, wood_pickaxe=1, sapling=0)
    assert describe_status(inventory) == (
        "Your status:\n- health: 3/9\n- food: 9/9\n- drink: 0/9\n- energy: 9/9\n\n"
        "Your inventory:\n- wood: 2\n- wood pickaxe: 1"
    )


# ----------------------------------------------------------------------------- text of the env
def test_text_on_a_hand_made_world(tidy_env):
    env = tidy_env
    _flatten_world(env, "grass")
    env.crafter._player.facing = SOUTH
    _set(env, 0, 1, "stone")  # the faced cell
    _set(env, -2, 1, "tree")  # nearest tree: 1 south, 2 west
    _set(env, 4, -3, "tree")  # farther tree: not listed
    _set(env, 4, 3, "water")  # view corner (9 x 7 view: dx in [-4, 4], dy in [-3, 3])
    _set(env, 5, 0, "lava")  # outside the view (dx = 5)
    _set(env, 0, -4, "diamond")  # outside the view (dy = -4)
    _add(env, objects.Cow, 3, 0)
    assert env.describe().split("\n") == [
        "You see:",
        "- stone 1 step south",
        "- cow 3 steps east",
        "- tree 1 step south and 2 steps west",
        "- water 3 steps south and 4 steps east",
        "",
        "You face stone at your front.",
    ]
    env.location_style = "compass"
    assert "- tree 3 steps to your south-west" in env.describe().split("\n")
    env.location_style = "offset"

    # A creature on the faced cell is named instead of the material below it.
    env.crafter._player.facing = WEST
    _add(env, objects.Zombie, -1, 0)
    lines = env.describe().split("\n")
    assert lines[-1] == "You face zombie at your front."
    assert "- zombie 1 step west" in lines
    env.crafter._player.facing = NORTH
    assert env.describe().split("\n")[-1] == "You face grass at your front."  # ground is named when faced


def test_text_at_the_map_edge_skips_cells_outside_the_map(tidy_env):
    env = tidy_env
    _flatten_world(env, "grass")
    world, player = env.crafter._world, env.crafter._player
    world.move(player, (0, 1))
    player.facing = WEST  # off the map
    world[(1, 0)] = "tree"
    world[(0, 4)] = "coal"
    assert env.describe().split("\n") == [
        "You see:",
        "- tree 1 step north and 1 step east",
        "- coal 3 steps south",
        "",
        "You face nothing at your front.",
    ]


def test_reset_observation_and_context(env):
    obs, info = env.reset(seed=3)
    assert obs == env.describe() and obs.endswith("at your front.")
    assert obs.startswith("You see")
    assert info["context"] == env.context == (
        "Your status:\n- health: 9/9\n- food: 9/9\n- drink: 9/9\n- energy: 9/9\n\n"
        "You have nothing in your inventory."
    )
    assert "Your status" not in obs and "inventory" not in obs  # the context is not part of the observation
    env.crafter._player.inventory.update(wood=3, stone_sword=1, food=4)
    _, _, _, _, info = env.step("ACTION: Noop")
    assert info["context"].endswith("Your inventory:\n- wood: 3\n- stone_sword: 1")  # crafter's names, as BALROG
    assert "- food: 4/9" in info["context"]
    env.text_style = "tidy"
    assert env.context.endswith("Your inventory:\n- wood: 3\n- stone sword: 1")


# ----------------------------------------------------------------------------- actions
def test_every_action_maps_onto_crafters_action_of_the_same_name(env):
    assert len(ACTIONS) == 17 and env.valid_actions == ACTIONS
    assert env.default_action == "Noop"
    for name in ACTIONS:
        _, reward, terminated, truncated, info = env.step(f"ACTION: {name}")
        assert info["action"] == name and info["action_valid"] is True
        assert env.crafter._player.action == CRAFTER_ACTIONS[name]
        assert isinstance(reward, float) and not truncated
        assert not terminated  # 17 steps from a fresh start cannot kill the player


def test_all_actions_have_their_effects_and_all_22_achievements_unlock(env):
    """Scripted run on a flat sand world where each action's effect is known; ends with 22/22."""
    _flatten_world(env, "sand")
    player = env.crafter._player
    inv = player.inventory
    unlocked: list[str] = []

    def act(name: str, expect_new: tuple[str, ...] = ()):
        obs, reward, terminated, truncated, info = env.step(f"ACTION: {name}")
        assert info["action"] == name
        assert info["new_achievements"] == sorted(expect_new), name
        unlocked.extend(expect_new)
        assert info["achievements"] == sorted(unlocked)
        assert info["progression"] == pytest.approx(len(unlocked) / 22)
        assert reward == (1.0 if expect_new else 0.0), name  # health stays 9: no health term
        assert not terminated and not truncated
        return obs

    start = _pos(env)
    for name, step in (("Move North", NORTH), ("Move East", EAST), ("Move South", SOUTH), ("Move West", WEST)):
        before = _pos(env)
        act(name)
        assert _pos(env) == (before[0] + step[0], before[1] + step[1]) and tuple(player.facing) == step
    assert _pos(env) == start
    act("Noop")
    assert _pos(env) == start and tuple(player.facing) == WEST

    def face(direction: tuple[int, int], material: str) -> None:
        """Turn towards a blocking cell (turning without moving), then give it `material`."""
        _set(env, *direction, "stone")
        act({NORTH: "Move North", SOUTH: "Move South", WEST: "Move West", EAST: "Move East"}[direction])
        assert _pos(env) == start and tuple(player.facing) == direction
        _set(env, *direction, material)

    face(SOUTH, "tree")
    act("Do", ("collect_wood",))
    assert inv["wood"] == 1
    inv["wood"] = 9
    _set(env, *SOUTH, "sand")
    act("Place Table", ("place_table",))
    assert env.crafter._world[_at(env, *SOUTH)][0] == "table" and inv["wood"] == 7
    act("Make Wood Pickaxe", ("make_wood_pickaxe",))
    act("Make Wood Sword", ("make_wood_sword",))
    assert inv["wood_pickaxe"] == inv["wood_sword"] == 1

    face(WEST, "stone")
    act("Do", ("collect_stone",))
    assert inv["stone"] == 1 and env.crafter._world[_at(env, *WEST)][0] == "path"
    act("Place Stone", ("place_stone",))
    assert env.crafter._world[_at(env, *WEST)][0] == "stone" and inv["stone"] == 0
    inv["stone"] = 9
    act("Make Stone Pickaxe", ("make_stone_pickaxe",))
    act("Make Stone Sword", ("make_stone_sword",))
    for material, achievement in (("coal", "collect_coal"), ("iron", "collect_iron")):
        _set(env, *WEST, material)
        act("Do", (achievement,))
    _set(env, *WEST, "sand")
    act("Place Furnace", ("place_furnace",))
    assert env.crafter._world[_at(env, *WEST)][0] == "furnace"
    inv.update(wood=9, coal=9, iron=9)
    act("Make Iron Pickaxe", ("make_iron_pickaxe",))
    act("Make Iron Sword", ("make_iron_sword",))
    assert inv["iron_pickaxe"] == inv["iron_sword"] == 1

    face(NORTH, "diamond")
    act("Do", ("collect_diamond",))
    _set(env, *NORTH, "water")
    act("Do", ("collect_drink",))
    # Creatures in front, killed by one iron-sword hit (damage 5); the zombie's cooldown keeps it
    # from hitting back in its last update.
    _set(env, *NORTH, "sand")
    _add(env, objects.Cow, *NORTH)
    act("Do", ("eat_cow",))
    _add(env, objects.Zombie, *NORTH, cooldown=5)
    act("Do", ("defeat_zombie",))
    _add(env, objects.Skeleton, *NORTH)
    act("Do", ("defeat_skeleton",))

    face(EAST, "grass")
    for _ in range(100):  # Do on grass yields a sapling with probability 0.1 (the world RNG: seeded)
        _, reward, _, _, info = env.step("ACTION: Do")
        if inv["sapling"]:
            break
        assert reward == 0.0 and info["new_achievements"] == []
    else:
        pytest.fail("no sapling in 100 tries")
    assert (reward, info["new_achievements"]) == (1.0, ["collect_sapling"])
    assert env.crafter._world[_at(env, *EAST)][0] == "grass"
    unlocked.append("collect_sapling")
    act("Place Plant", ("place_plant",))
    plant = env.crafter._world[_at(env, *EAST)][1]
    assert isinstance(plant, objects.Plant)
    plant.grown = 1000  # ripe
    act("Do", ("eat_plant",))

    inv["energy"] = 3
    obs = act("Sleep")
    assert player.sleeping and obs.split("\n")[0] == SLEEPING
    act("Move South")  # ignored while asleep
    assert _pos(env) == start and player.sleeping
    inv["energy"] = 9
    obs = act("Noop", ("wake_up",))
    assert not player.sleeping and not obs.startswith(SLEEPING)

    assert sorted(unlocked) == sorted(ACHIEVEMENTS)
    assert env.progression == 1.0 and env.success


def test_invalid_reply_runs_noop_with_notice_and_penalty():
    penalised = make_env("crafter/default", format_penalty=-0.3)
    clean = make_env("crafter/default")
    penalised.reset(seed=2)
    clean.reset(seed=2)
    obs, reward, terminated, truncated, info = penalised.step("I would like to go west, please.")
    clean_obs, clean_reward, *_ = clean.step("ACTION: Noop")
    assert info["action"] == "Noop" and info["action_valid"] is False
    assert obs == invalid_action_notice("Noop") + "\n" + clean_obs
    assert info["game_reward"] == clean_reward == 0.0
    assert reward == pytest.approx(-0.3)
    assert (terminated, truncated) == (False, False)
    assert penalised.crafter._player.action == "noop"
    obs, reward, *_ = penalised.step("ACTION: move west")  # case-insensitive match
    assert not obs.startswith("Your previous reply") and reward == 0.0


# ----------------------------------------------------------------------------- rewards and episode ends
def test_death_terminates_with_the_health_penalty(env):
    """The player dies when health reaches 0; we set it through crafter's player object."""
    env.crafter._player.health = 0
    obs, reward, terminated, truncated, info = env.step("ACTION: Noop")
    assert terminated and not truncated
    assert reward == pytest.approx(-0.9)  # (0 - 9) / 10, no achievement
    assert obs.split("\n")[0] == "You died."
    assert info["success"] is False and info["episode_step"] == 1
    with pytest.raises(RuntimeError, match="reset"):
        env.step("ACTION: Noop")
    obs, info = env.reset()  # a reused env starts a fresh, living episode
    assert not obs.startswith("You died") and env.crafter._player.health == 9
    _, _, terminated, _, _ = env.step("ACTION: Noop")
    assert not terminated


def test_health_loss_and_achievement_on_one_step_add_up(env):
    _flatten_world(env, "sand")
    env.crafter._player.facing = SOUTH
    _set(env, 0, 1, "water")
    env.crafter._player.health = 5
    env.crafter._last_health = 7  # crafter's reward compares with the health after the previous step
    _, reward, terminated, _, info = env.step("ACTION: Do")
    assert info["new_achievements"] == ["collect_drink"]
    assert reward == pytest.approx(1.0 + (5 - 7) / 10)
    assert not terminated


def test_step_limit_truncates_and_crafter_never_ends_earlier():
    env = make_env("crafter/default", max_steps=3)
    assert env.max_steps == 3 and make_env("crafter/default").max_steps == 2000
    assert env.crafter._length is None  # crafter's own limit is off: only ours applies
    env.reset(seed=4)
    flags = [env.step("ACTION: Noop")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    with pytest.raises(RuntimeError, match="reset"):
        env.step("ACTION: Noop")
    env.reset(seed=4)  # death on the last allowed step is a termination
    env.step("ACTION: Noop")
    env.step("ACTION: Noop")
    env.crafter._player.health = 0
    assert env.step("ACTION: Noop")[2:4] == (True, False)


def test_info_keys_identical_at_reset_and_every_step():
    env = make_env("crafter/default")
    _, info = env.reset(seed=1)
    keys = set(info)
    assert keys == set(INFO_KEYS) | {"achievements", "new_achievements", "episode_seed"}
    assert (info["action"], info["action_valid"], info["game_reward"], info["episode_step"]) == ("", True, 0.0, 0)
    assert (info["achievements"], info["new_achievements"], info["episode_seed"]) == ([], [], 1)
    assert info["valid_actions"] == ACTIONS and "ACTION:" in info["instruction"]
    rng = random.Random(0)
    for step in range(1, 41):
        _, _, terminated, truncated, info = env.step(rng.choice(ACTIONS + ["garbage"]))
        assert set(info) == keys and info["episode_step"] == step
        assert isinstance(info["achievements"], list) and isinstance(info["episode_seed"], int)
        assert isinstance(info["success"], bool) and isinstance(info["game_reward"], float)
        if terminated or truncated:
            break


def test_instructions_full_and_brief():
    full = make_env("crafter/default").instruction
    for name in ACTIONS:
        assert f"- {name}: " in full
    for achievement in ACHIEVEMENTS:
        assert f"- {achievement.replace('_', ' ')}\n" in full
    assert "uses 2 wood" in full  # Place Table's cost, read from crafter's rules
    assert full.rstrip().endswith(", ".join(ACTIONS) + ".") and "ACTION: <action>" in full
    brief = make_env("crafter/default", instruction_style="brief").instruction
    assert len(brief) < len(full) / 5
    assert ", ".join(ACTIONS) in brief and "ACTION: <action>" in brief


# ----------------------------------------------------------------------------- seeding
def _rollout(seed: int, steps: int, env: CrafterTextEnv | None = None):
    env = env or make_env("crafter/default", max_steps=60)
    rng = random.Random(1234)
    obs, info = env.reset(seed=seed)
    trace = [(obs, info["episode_seed"])]
    for _ in range(steps):  # crosses episode boundaries: unseeded resets
        obs, reward, terminated, truncated, info = env.step("ACTION: " + rng.choice(ACTIONS))
        trace.append((obs, reward, terminated, truncated, info["context"], tuple(info["achievements"])))
        if terminated or truncated:
            obs, info = env.reset()
            trace.append((obs, info["episode_seed"]))
    return trace


def test_same_seed_same_episodes_and_different_seeds_different_worlds():
    first = _rollout(42, 150)
    assert first == _rollout(42, 150)
    seeds = [t[1] for t in first if len(t) == 2]
    assert len(seeds) >= 3 and len(set(seeds)) == len(seeds)  # unseeded resets draw fresh episode seeds
    maps = []
    for seed in (1, 2, 3):
        env = make_env("crafter/default")
        env.reset(seed=seed)
        maps.append(env.crafter._world._mat_map.copy())
    assert not np.array_equal(maps[0], maps[1]) and not np.array_equal(maps[1], maps[2])


def test_episode_seed_replays_an_unseeded_episode():
    env = make_env("crafter/default", max_steps=5)
    env.reset(seed=9)
    for _ in range(5):
        env.step("ACTION: Noop")
    obs, info = env.reset()  # unseeded: its own episode seed from the env's RNG
    rng = random.Random(5)
    replies = ["ACTION: " + rng.choice(ACTIONS) for _ in range(5)]
    trace = [obs] + [env.step(r)[0] for r in replies]
    replay = make_env("crafter/default", max_steps=5)
    obs2, info2 = replay.reset(seed=info["episode_seed"])
    assert info2["episode_seed"] == info["episode_seed"]
    assert [obs2] + [replay.step(r)[0] for r in replies] == trace


def _digest(seed: int, steps: int) -> str:
    env = make_env("crafter/default")
    env.reset(seed=seed)
    rng = random.Random(seed)
    text = []
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step("ACTION: " + rng.choice(ACTIONS))
        text.append(f"{obs}|{reward}|{terminated}")
        if terminated or truncated:
            break
    return hashlib.sha256("\n".join(text).encode()).hexdigest()


def test_episodes_reproduce_in_another_process():
    """A fresh interpreter (other memory addresses, other global RNG state) replays the same episode."""
    code = (
        "import sys; import numpy as np; np.random.seed(99)\n"  # the global RNG must not matter
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_crafter import _digest; print(_digest(21, 120))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == _digest(21, 120)


# ----------------------------------------------------------------------------- same game as crafter.Env
def _snapshot(game: crafter.Env):
    world = game._world
    rng_state = world.random.get_state()
    creatures = [(type(o).__name__, tuple(int(v) for v in o.pos), o.health) for o in world.objects]
    return (
        rng_state[1].tobytes(),
        rng_state[2],
        world._mat_map.tobytes(),
        creatures,
        dict(game._player.inventory),
        dict(game._player.achievements),
        game._player.sleeping,
    )


@pytest.mark.parametrize("image_size, jump_to_night, steps", [((64, 64), 0, 220), ((256, 256), 140, 50)])
def test_steps_equal_the_bare_crafter_env(image_size, jump_to_night, steps):
    """Same seed and actions: our text-only crafter and crafter.Env driven as BALROG drives it (a Noop
    step after reset, and one more ``render()`` after every step for BALROG's observation image; same
    ordered chunk sets) keep identical worlds, random streams, rewards and ends, also at night, when
    crafter's renderer draws noise from the world's RNG."""
    seed = 3
    noop = constants.actions.index("noop")
    bare = crafter.Env(size=image_size, seed=seed, length=None)
    make_world_deterministic(bare)
    bare.reset()
    bare.step(noop)
    bare.render()
    env = make_env("crafter/default", image_size=image_size)
    env.reset(seed=seed)
    assert env.crafter._step == 1 and env.episode_step == 0  # the reset's Noop is not an episode step
    for game in (bare, env.crafter):
        game._step += jump_to_night  # both clocks forward: night (daylight < 0.5) starts near step 150
    assert _snapshot(bare) == _snapshot(env.crafter)
    rng = random.Random(seed)
    night_steps = 0
    for _ in range(steps):
        action = rng.choice(ACTIONS)
        image, bare_reward, bare_done, bare_info = bare.step(constants.actions.index(CRAFTER_ACTIONS[action]))
        assert image.shape == (*image_size[::-1], 3)
        bare.render()
        _, reward, terminated, truncated, info = env.step(f"ACTION: {action}")
        assert reward == bare_reward and terminated == bool(bare_done) and not truncated
        assert _snapshot(bare) == _snapshot(env.crafter)
        assert info["achievements"] == sorted(k for k, v in bare_info["achievements"].items() if v > 0)
        night_steps += bare._world.daylight < 0.5
        if terminated:
            break
    assert night_steps >= 5, "the comparison must cover night steps (render noise)"


# ----------------------------------------------------------------------------- construction and registry
def test_registered_and_bad_arguments_are_rejected():
    assert is_registered("crafter/default")
    assert isinstance(make_env("crafter/default", max_steps=10, format_penalty=-0.1), CrafterTextEnv)
    with pytest.raises(ValueError, match="unknown Crafter task"):
        from verlog.envs.crafter import make_crafter

        make_crafter("hard")
    with pytest.raises(ValueError, match="instruction_style"):
        make_env("crafter/default", instruction_style="long")
    with pytest.raises(ValueError, match="location_style"):
        make_env("crafter/default", location_style="polar")
    with pytest.raises(TypeError, match="image_size"):
        make_env("crafter/default", image_size=64)
    with pytest.raises(ValueError, match="image_size"):
        make_env("crafter/default", image_size=(4, 4))
    with pytest.raises(ValueError, match="max_steps"):
        make_env("crafter/default", max_steps=0)
    with pytest.raises(ValueError, match="format_penalty"):
        make_env("crafter/default", format_penalty=0.1)
    env = make_env("crafter/default")
    with pytest.raises(RuntimeError, match="reset"):
        env.step("ACTION: Noop")
    with pytest.raises(RuntimeError, match="reset"):
        _ = env.context
    assert env.progression == 0.0 and env.achievements == []
    env.reset(seed=0)
    with pytest.raises(TypeError, match="str"):
        env.step(5)


def test_construction_does_not_touch_numpys_global_rng():
    np.random.seed(7)
    expected = np.random.RandomState(7).randint(0, 2**31 - 1)
    make_env("crafter/default")
    assert np.random.randint(0, 2**31 - 1) == expected


def test_gymnasium_env_checker_accepts_the_env():
    from gymnasium.utils.env_checker import check_env

    env = make_env("crafter/default")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # only the "no render modes / no spec" notices
        check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
