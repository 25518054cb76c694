"""Tests of verlog.envs.vector: gymnasium Sync/Async vector envs of text envs, SAME_STEP autoreset."""

from __future__ import annotations

import random

import numpy as np
import pytest

from verlog.envs import (
    TextEnv,
    final_infos,
    final_observations,
    make_env,
    make_vector_env,
    register,
    split_infos,
)

MODES = ["sync", "async"]
ACTIONS = ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"]


class Corridor(TextEnv):
    """Deterministic toy game: walk right from cell 0 to cell `length`; reaching it terminates."""

    def __init__(self, length: int = 2, max_steps: int = 3, format_penalty: float = 0.0):
        super().__init__(max_steps=max_steps, format_penalty=format_penalty)
        self.length = length
        self.pos = 0

    valid_actions = property(lambda self: ["left", "right"])
    default_action = property(lambda self: "left")
    instruction = property(lambda self: f"Reach cell {self.length}.")
    progression = property(lambda self: self.pos / self.length)

    def _reset_game(self, seed):
        self.pos = 0
        return "at 0", {}

    def _step_game(self, action):
        self.pos = max(0, self.pos + (1 if action == "right" else -1))
        done = self.pos == self.length
        return f"at {self.pos}", float(done), done, False, {}


register("test/corridor", Corridor, replace=True)


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


def test_same_step_autoreset_keeps_final_obs_and_terminated_vs_truncated(mode):
    vec = make_vector_env("test/corridor", 2, seed=0, mode=mode)
    try:
        obs, infos = vec.reset()
        assert obs == ("at 0", "at 0")
        # env 0 walks right (terminates after 2 steps); env 1 walks left (truncated after 3 steps).
        obs, rew, term, trunc, infos = vec.step(["right", "left"])
        assert obs == ("at 1", "at 0") and final_observations(infos) == [None, None]
        assert final_infos(infos) == [None, None]

        obs, rew, term, trunc, infos = vec.step(["ACTION: right", "ACTION: left"])
        assert term.tolist() == [True, False] and trunc.tolist() == [False, False]
        assert rew.tolist() == [1.0, 0.0]
        assert obs[0] == "at 0"  # already the next episode
        assert final_observations(infos) == ["at 2", None]
        last = final_infos(infos)
        assert last[1] is None
        assert (last[0]["episode_step"], last[0]["success"], last[0]["progression"]) == (2, True, 1.0)
        assert split_infos(infos, 2)[0]["episode_step"] == 0  # env 0's top-level info is its reset info
        assert split_infos(infos, 2)[1]["episode_step"] == 2

        obs, rew, term, trunc, infos = vec.step(["right", "nonsense"])  # env 1: default "left"
        assert term.tolist() == [False, False] and trunc.tolist() == [False, True]
        assert final_observations(infos) == [None, 'Your previous reply did not contain a valid action, so "left" '
                                             "was executed instead.\nat 0"]
        assert final_infos(infos)[1]["action_valid"] is False
        assert obs == ("at 1", "at 0")
    finally:
        vec.close()


def test_split_infos_matches_single_env_infos(mode):
    vec = make_vector_env("babyai/goto", 3, seed=10, mode=mode, env_kwargs={"max_steps": 6})
    try:
        obs, infos = vec.reset()
        per_env = split_infos(infos, 3)
        for i in range(3):
            single = make_env("babyai/goto", max_steps=6)
            single_obs, single_info = single.reset(seed=10 + i)  # env i is seeded with seed + i
            assert obs[i] == single_obs
            assert per_env[i] == single_info
            assert type(per_env[i]["success"]) is bool and type(per_env[i]["episode_step"]) is int
    finally:
        vec.close()


def _rollout(mode: str, steps: int = 15) -> list:
    vec = make_vector_env("babyai/goto", 2, seed=123, mode=mode, env_kwargs={"max_steps": 4})
    rng = random.Random(0)
    try:
        obs, infos = vec.reset()
        trace = [obs, [i["mission"] for i in split_infos(infos, 2)]]
        for _ in range(steps):  # max_steps=4 forces several same-step autoresets
            obs, rew, term, trunc, infos = vec.step([rng.choice(ACTIONS) for _ in range(2)])
            trace.append((obs, rew.tolist(), term.tolist(), trunc.tolist(), final_observations(infos)))
        return trace
    finally:
        vec.close()


def test_runs_are_reproducible_and_sync_equals_async():
    sync = _rollout("sync")
    assert sync == _rollout("sync")
    assert sync == _rollout("async")
    assert any(any(t) for *_, t, _f in sync[2:]), "the rollout should cross a truncation"


def test_explicit_reset_seed_overrides_constructor_seed(mode):
    vec = make_vector_env("babyai/goto", 2, seed=0, mode=mode)
    try:
        obs, _ = vec.reset(seed=50)
        single = make_env("babyai/goto")
        assert obs[1] == single.reset(seed=51)[0]
    finally:
        vec.close()


def test_step_input_is_checked():
    vec = make_vector_env("test/corridor", 2, seed=0, mode="sync")
    with pytest.raises(RuntimeError, match="reset"):
        vec.step(["left", "left"])
    vec.reset()
    with pytest.raises(ValueError, match="expected 2 replies"):
        vec.step(["left"])
    with pytest.raises(TypeError, match="reply 1 must be a str"):
        vec.step(["left", 3])
    with pytest.raises(TypeError):
        vec.step("left")
    obs, *_ = vec.step(np.array(["right", "right"]))  # a 1-D array of str is fine
    assert obs == ("at 1", "at 1")
    vec.close()


def test_make_vector_env_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown environment"):
        make_vector_env("babyai/none", 2, seed=0)
    with pytest.raises(ValueError, match="num_envs"):
        make_vector_env("babyai/goto", 0, seed=0)
    with pytest.raises(ValueError, match="seed"):
        make_vector_env("babyai/goto", 2, seed=-1)
    with pytest.raises(ValueError, match="mode"):
        make_vector_env("babyai/goto", 2, seed=0, mode="threads")
    with pytest.raises(TypeError, match="accepted"):
        make_vector_env("babyai/goto", 2, seed=0, mode="async", env_kwargs={"max_step": 3})


def test_info_helpers_validate_input():
    assert final_observations({"_instruction": np.ones(3, dtype=bool)}) == [None, None, None]
    with pytest.raises(ValueError, match="num_envs"):
        final_observations({})
    with pytest.raises(ValueError, match="mask"):
        split_infos({"instruction": np.array(["a", "b"], dtype=object)}, 2)
