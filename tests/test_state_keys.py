"""State keys (``TextEnv.state_key``, GiGPO's anchor states) of Crafter, MiniHack, NetHack and TextWorld.

Each family's key must be bytes, the same for the same state in two envs (same seed, same actions),
different after a change of state, and cover state that the text does not show (or, where that is
the point, stay put when only the text changes). The last test collects grouped episodes of every
family with state keys on and runs GiGPO's estimator on them.

These games are the ``balrog`` extra (setup.cfg): a family whose package is missing is skipped.
"""

from __future__ import annotations

import pytest
import torch

from verlog.algos.batch_estimators import gigpo_estimator
from verlog.config import AlgoConfig
from verlog.envs import make_env, make_vector_env
from verlog.envs.groups import group_seeds
from verlog.rollout.engine import Generation, SamplingParams
from verlog.rollout.episodes import EpisodeCollector


# ----------------------------------------------------------------------------- Crafter
def _crafter_env(seed: int):
    pytest.importorskip("crafter")
    env = make_env("crafter/default")
    env.reset(seed=seed)
    return env


def _crafter_seen(env) -> tuple[str, str]:
    """What the agent is told: the observation text and the context."""
    return env.describe(), env.context


def test_crafter_key_is_deterministic_and_follows_the_game():
    a, b = _crafter_env(5), _crafter_env(5)
    assert isinstance(a.state_key, bytes) and len(a.state_key) == 32
    assert a.state_key == b.state_key
    assert _crafter_env(6).state_key != a.state_key  # another world
    for action in ["Move West", "Do", "Move North", "Noop", "Move East", "Do"]:
        before = a.state_key
        a.step(f"ACTION: {action}")
        b.step(f"ACTION: {action}")
        assert a.state_key == b.state_key
        assert a.state_key != before  # at least the clock and the hunger/thirst counters moved
    moved, stayed = _crafter_env(5), _crafter_env(5)
    moved.step("ACTION: Move West")
    stayed.step("ACTION: Noop")
    assert moved.state_key != stayed.state_key


def test_crafter_key_holds_the_whole_world_and_hidden_counters_but_not_the_random_stream():
    env, twin = _crafter_env(5), _crafter_env(5)
    seen, key = _crafter_seen(env), env.state_key
    world, player = env.crafter._world, env.crafter._player
    assert tuple(player.pos) == (32, 32)  # the corner cell below is far outside the 9 x 7 view
    world[(0, 0)] = "lava" if world[(0, 0)][0] != "lava" else "grass"
    assert _crafter_seen(env) == seen and env.state_key != key  # the same text, another world
    player._hunger = twin.crafter._player._hunger + 1
    world[(0, 0)] = twin.crafter._world[(0, 0)][0]
    assert _crafter_seen(env) == seen and env.state_key != key  # the same text, hungrier sooner
    player._hunger = twin.crafter._player._hunger
    assert env.state_key == key
    env.crafter._world.random.uniform()  # the random stream moved on: chance, not state
    assert env.state_key == key


def test_crafter_actions_without_effect_lead_to_one_key():
    # nothing to craft with and nothing to place: both leave the world as a Noop does (no random draw)
    noop, craft, place = _crafter_env(5), _crafter_env(5), _crafter_env(5)
    noop.step("ACTION: Noop")
    craft.step("ACTION: Make Wood Pickaxe")
    place.step("ACTION: Place Stone")
    assert noop.state_key == craft.state_key == place.state_key


def test_crafter_key_before_reset_raises():
    pytest.importorskip("crafter")
    with pytest.raises(RuntimeError, match="reset"):
        _ = make_env("crafter/default").state_key


# ----------------------------------------------------------------------------- MiniHack and NetHack
NETHACK_TASKS = ["minihack/MazeWalk-9x9", "nle/default"]
MOVES = ["north", "east", "south", "west", "northeast", "southeast", "southwest", "northwest"]


def _nethack_env(task: str, seed: int):
    pytest.importorskip("nle")
    if task.startswith("minihack/"):
        pytest.importorskip("minihack")
    env = make_env(task)
    env.reset(seed=seed)
    return env


def _position(env) -> tuple[int, int]:
    from nle import nethack

    blstats = env.blstats
    return int(blstats[nethack.NLE_BL_X]), int(blstats[nethack.NLE_BL_Y])


@pytest.mark.parametrize("task", NETHACK_TASKS)
def test_nethack_key_is_deterministic_and_follows_the_game(task):
    a, b = _nethack_env(task, 3), _nethack_env(task, 3)
    assert isinstance(a.state_key, bytes) and len(a.state_key) == 32
    assert a.state_key == b.state_key
    assert _nethack_env(task, 4).state_key != a.state_key  # another level or character
    moved = False
    for action in ["esc", *MOVES]:  # esc first: NetHack's welcome may wait for a key
        before, where = a.state_key, _position(a)
        a.step(f"ACTION: {action}")
        b.step(f"ACTION: {action}")
        assert a.state_key == b.state_key
        if _position(a) != where:
            moved = True
            assert a.state_key != before
    assert moved, "no move changed the position"
    a.close(), b.close()


@pytest.mark.parametrize("task", NETHACK_TASKS)
def test_nethack_key_holds_the_inventory_the_observation_text_leaves_out(task):
    env = _nethack_env(task, 3)
    text, key = env.describe(), env.state_key
    obs = env._obs
    inv_strs = obs["inv_strs"].copy()
    inv_strs[0, 0] = ord("Z") if inv_strs[0, 0] != ord("Z") else ord("Y")
    env._obs = {**obs, "inv_strs": inv_strs}  # the same screen, another inventory
    assert env.describe() == text and env.state_key != key
    env._obs = obs
    assert env.state_key == key
    env.close()


def test_nethack_key_before_reset_raises():
    pytest.importorskip("minihack")
    env = make_env("minihack/MazeWalk-9x9")
    with pytest.raises(RuntimeError, match="reset"):
        _ = env.state_key
    env.close()


# ----------------------------------------------------------------------------- TextWorld
def _textworld_env(cache, seed: int, **kwargs):
    from helpers import TEXTWORLD_FAST_SETTINGS

    env = make_env("textworld/treasure_hunter", cache_dir=cache, settings=TEXTWORLD_FAST_SETTINGS["treasure_hunter"],
                   num_games=2, **kwargs)
    env.reset(seed=seed)
    return env


@pytest.fixture(scope="module")
def tw_cache(tmp_path_factory):
    """A TextWorld cache holding the two treasure-hunter games these tests play (a skip without TextWorld)."""
    pytest.importorskip("textworld")
    from helpers import TEXTWORLD_FAST_SETTINGS
    from verlog.envs.textworld_games import ensure_game, resolve_spec

    root = tmp_path_factory.mktemp("tw_keys")
    for index in (0, 1):
        ensure_game(resolve_spec("treasure_hunter", TEXTWORLD_FAST_SETTINGS["treasure_hunter"]), index, root)
    return root


def test_textworld_key_is_the_game_state_whatever_the_text_style(tw_cache):
    a, b = _textworld_env(tw_cache, 0), _textworld_env(tw_cache, 0, text_style="tidy")
    assert isinstance(a.state_key, bytes)
    assert a.state_key == b.state_key  # one game state, two wordings
    assert _textworld_env(tw_cache, 1).state_key != a.state_key  # another game of the pool
    keys = [a.state_key]
    for command in a.walkthrough:
        a.step(f"ACTION: {command}")
        b.step(f"ACTION: {command}")
        assert a.state_key == b.state_key
        keys.append(a.state_key)
    assert a.success and len(set(keys)) == len(keys)  # every command of the walkthrough changes the state
    a.close(), b.close()


def test_textworld_text_changes_alone_keep_the_key(tw_cache):
    env = _textworld_env(tw_cache, 0)
    first, _ = env.reset(seed=0)
    key = env.state_key
    looked, *_ = env.step("ACTION: look")
    confused, *_ = env.step("ACTION: dance wildly")  # the game does not understand it
    assert len({first, looked, confused}) == 3 and env.state_key == key  # three texts, one state
    env.step(f"ACTION: {env.walkthrough[0]}")
    assert env.state_key != key
    env.close()


def test_textworld_key_before_reset_raises(tmp_path):
    pytest.importorskip("textworld")
    with pytest.raises(RuntimeError, match="reset"):
        _ = make_env("textworld/treasure_hunter", cache_dir=tmp_path).state_key


# ----------------------------------------------------------------------------- GiGPO on every family
class SameReplyEngine:
    """Every prompt of call ``c`` gets reply ``c % n`` (one token, id ``c % n + 1``): all envs play alike."""

    def __init__(self, n: int) -> None:
        self.n, self.calls = n, 0

    def generate(self, prompts, params):
        out = [Generation([self.calls % self.n + 1], [-1.0], "stop") for _ in prompts]
        self.calls += 1
        return out


#: task -> (the package it needs, the replies played in turn).
SMOKE = {
    "crafter/default": ("crafter", ["Move West", "Do", "Noop"]),
    "minihack/MazeWalk-9x9": ("minihack", ["east", "north", "west"]),
    "nle/default": ("nle", ["esc", "east", "search"]),
    "textworld/treasure_hunter": ("textworld", ["look", "go north", "inventory"]),
}


@pytest.mark.parametrize("task", list(SMOKE))
def test_gigpo_groups_the_turns_of_every_family_by_state(task, request):
    from test_groups import TextMemory

    package, replies = SMOKE[task]
    pytest.importorskip(package)
    kwargs = {"max_steps": 3}
    if task.startswith("textworld/"):
        from helpers import TEXTWORLD_FAST_SETTINGS

        kwargs.update(cache_dir=request.getfixturevalue("tw_cache"), num_games=2,
                      settings=TEXTWORLD_FAST_SETTINGS["treasure_hunter"])
    # two groups of two envs; a seed whose two groups play different games of TextWorld's pool of 2
    seed = next(s for s in range(100) if len({g % 2 for g in group_seeds(s, 0, 4, 2)}) == 2)
    venv = make_vector_env(task, 4, seed=0, mode="sync", state_keys=True, env_kwargs=kwargs)
    collector = EpisodeCollector(venv, [TextMemory() for _ in range(4)], SameReplyEngine(len(replies)),
                                 lambda ids: [f"ACTION: {replies[i[0] - 1]}" for i in ids],
                                 SamplingParams(max_tokens=4), pad_id=0, seed=seed, group_size=2, state_keys=True)
    try:
        batch, _ = collector.collect()
    finally:
        venv.close()
    states = batch.state_ids
    assert bool(batch.turns.any(0).all())
    # the two envs of a group start from one seed and play alike: the same state at every turn
    assert torch.equal(states[:, 0], states[:, 1]) and torch.equal(states[:, 2], states[:, 3])
    assert states[0, 0] != states[0, 2]  # the groups' first states differ
    _, metrics = gigpo_estimator(batch, AlgoConfig(algorithm="gigpo", group_size=2))
    assert metrics["algo/anchor_groups"] >= 2 and metrics["algo/anchor_group_size_mean"] >= 2


@pytest.mark.parametrize("task", ["crafter/default", "minihack/MazeWalk-9x9", "nle/default"])
def test_config_checks_accept_gigpo_on_the_families(task):
    from verlog.config import load_recipe
    from verlog.preflight import check_buildable, check_state_keys

    pytest.importorskip(SMOKE[task][0])
    cfg = load_recipe("tiny", [f"env.task={task}", "algorithm=gigpo", "algo.group_size=2"])
    check_buildable(cfg)
    check_state_keys(cfg)  # builds one env, resets it and reads its state key


def test_config_checks_refuse_gigpo_on_a_game_without_state_keys(monkeypatch):
    from pathlib import Path

    from verlog.config import ConfigError, load_recipe
    from verlog.preflight import check_state_keys

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "docs" / "examples"))
    cfg = load_recipe("tiny", ["env.task=my_games:GuessNumber", "algorithm=gigpo", "algo.group_size=2"])
    with pytest.raises(ConfigError, match="^algo.algorithm: gigpo .*my_games:GuessNumber does not report a state key"):
        check_state_keys(cfg)
