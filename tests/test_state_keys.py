"""State keys (``TextEnv.state_key``, GiGPO's anchor states) of Crafter, MiniHack, NetHack and TextWorld.

Each family's key must be bytes, the same for the same state in two envs (same seed, same actions),
different after a change of state, and cover state that the text does not show (or, where that is
the point, stay put when only the text changes).

These games are the ``balrog`` extra (setup.cfg): a family whose package is missing is skipped.
"""

from __future__ import annotations

import pytest

from verlog.envs import make_env


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
