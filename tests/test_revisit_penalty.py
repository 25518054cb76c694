"""env.revisit_penalty: a step back into a state of the episode costs c, by hand, on BabyAI's own
states against a slow reference, and where it applies (training envs only, one line elsewhere)."""

from __future__ import annotations

import random

import pytest

from verlog.config import ConfigError, load_recipe
from verlog.envs import make_env
from verlog.envs.babyai import BABYAI_ACTIONS
from verlog.envs.shaping import RevisitPenalty
from verlog.preflight import check_distance_shaping


def test_hand_worked_revisits():
    pen = RevisitPenalty(0.05)
    pen.reset(b"a")
    assert [pen.step(k) for k in (b"b", b"a", b"a", b"c", b"b", b"d")] == [0.0, -0.05, -0.05, 0.0, -0.05, 0.0]
    pen.reset(b"b")  # a new episode forgets the old one's states
    assert [pen.step(k) for k in (b"a", b"b")] == [0.0, -0.05]
    assert [RevisitPenalty(0.0).step(k) for k in (b"x", b"x")] == [0.0, -0.0]
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="revisit_penalty"):
            RevisitPenalty(bad)


def _empty_ahead_seed(task: str) -> int:
    env = make_env(task)
    for seed in range(100):
        env.reset(seed=seed)
        level = env.minigrid
        if level.grid.get(*level.front_pos) is None:
            return seed
    raise AssertionError("no start with an empty cell ahead")


def test_a_no_op_and_a_full_turn_cost_c_and_change_nothing_else():
    seed = _empty_ahead_seed("babyai/pickup")
    plain, penalised = make_env("babyai/pickup"), make_env("babyai/pickup", revisit_penalty=0.05)
    plain.reset(seed=seed)
    penalised.reset(seed=seed)
    # pick up with nothing ahead: the same state again; then a full turn on the spot: back at the start
    actions = ["pick up", "turn left", "turn left", "turn left", "turn left", "go forward"]
    got = []
    for action in actions:
        a, b = plain.step(action), penalised.step(action)
        assert a[0] == b[0] and a[2:4] == b[2:4]  # same observation, terminated, truncated
        got.append(round(b[1] - a[1], 9))
    assert got == [-0.05, 0.0, 0.0, 0.0, -0.05, 0.0]
    assert plain.progression == penalised.progression


@pytest.mark.parametrize("task", ["babyai/goto", "babyai/open", "babyai/putnext"])
def test_random_episodes_match_a_slow_reference(task):
    """c x [the level's state after the step equals a state listed earlier in the episode], the list
    scanned element by element, on 300 random steps (resets included)."""
    plain, penalised = make_env(task), make_env(task, revisit_penalty=0.1)
    rng = random.Random(7)
    names = list(BABYAI_ACTIONS)
    seen: list[bytes] = []
    revisits = 0
    for step in range(300):
        if step % 100 == 0:
            plain.reset(seed=step)
            penalised.reset(seed=step)
            seen = [penalised.state_key]
        action = rng.choice(names)
        a, b = plain.step(action), penalised.step(action)
        key = penalised.state_key
        revisit = any(k == key for k in seen)
        revisits += revisit
        if not revisit:
            seen.append(key)
        assert b[1] - a[1] == pytest.approx(-0.1 if revisit else 0.0, abs=1e-12)
        if a[2] or a[3]:
            plain.reset(seed=10_000 + step)
            penalised.reset(seed=10_000 + step)
            seen = [penalised.state_key]
    assert 30 < revisits < 270  # both kinds of step occur: the check above can fail either way


def test_the_penalty_reaches_training_envs_only_and_bad_values_are_one_line():
    cfg = load_recipe("tiny", ["env.revisit_penalty=0.05"])
    assert "revisit_penalty" not in cfg.env.env_kwargs()
    assert cfg.env.env_kwargs(shaping_gamma=0.99)["revisit_penalty"] == 0.05
    assert "revisit_penalty" not in load_recipe("tiny").env.env_kwargs(shaping_gamma=0.99)
    with pytest.raises(ConfigError, match=r"^env\.revisit_penalty: "):
        load_recipe("tiny", ["env.revisit_penalty=-1"])
    with pytest.raises(ConfigError) as err:
        check_distance_shaping(load_recipe("tiny", ["env.task=crafter/default", "env.revisit_penalty=0.1"]))
    assert str(err.value) == "env.revisit_penalty: crafter/default has no revisit penalty (BabyAI's tasks have)"
    check_distance_shaping(load_recipe("tiny", ["env.task=babyai/balrog_mix", "env.revisit_penalty=0.1",
                                                "env.distance_shaping=0.05"]))
