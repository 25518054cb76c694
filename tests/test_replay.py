"""verlog.envs.replay: known episode seeds, reply logs, and restoring in-flight episodes."""

from __future__ import annotations

import random

import pytest

from verlog.envs.replay import env_states, episode_seed, restore_env_states
from verlog.envs.vector import make_vector_env

ACTIONS = ["turn left", "turn right", "go forward"]


def test_episode_seed_is_the_root_first_then_a_stable_hash():
    assert episode_seed(7, 0) == 7
    assert episode_seed(7, 1) == episode_seed(7, 1) != episode_seed(7, 2)
    assert episode_seed(7, 1) != episode_seed(8, 1) and 0 <= episode_seed(7, 3) < 2**31


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_restored_envs_continue_exactly_like_the_original(mode):
    kw = {"max_steps": 4}
    a = make_vector_env("babyai/goto", 2, seed=5, mode=mode, env_kwargs=kw)
    b = make_vector_env("babyai/goto", 2, seed=99, mode=mode, env_kwargs=kw)
    try:
        a.reset()
        rng = random.Random(0)
        for _ in range(6):  # crosses an autoreset (max_steps=4)
            obs, *_ = a.step([rng.choice(ACTIONS) for _ in range(2)])
        states = env_states(a)
        assert [s["episode_index"] for s in states] == [1, 1] and len(states[0]["replies"]) == 2
        b.reset()
        assert restore_env_states(b, states) == list(obs)
        for _ in range(6):
            acts = [rng.choice(ACTIONS) for _ in range(2)]
            ra, rb = a.step(acts), b.step(acts)
            assert ra[0] == rb[0] and ra[1].tolist() == rb[1].tolist() and ra[3].tolist() == rb[3].tolist()
        with pytest.raises(ValueError, match="3 env states"):
            restore_env_states(b, states + states[:1])
    finally:
        a.close()
        b.close()
