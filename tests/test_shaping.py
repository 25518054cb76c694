"""Potential-based distance shaping: the formula on hand-worked numbers and against its telescoping
sum, the BabyAI potential measured independently from the grid, and where the shaping applies
(training envs only, single-object missions, one line for a task that has none)."""

from __future__ import annotations

import random

import pytest
from helpers import face_from_distance, red_ball

from verlog.config import ConfigError, load_recipe
from verlog.envs import make_env
from verlog.envs.babyai import target_distance
from verlog.envs.shaping import potential_shaping
from verlog.preflight import check_distance_shaping



def test_hand_worked_shaping_terms():
    # F = gamma * Phi(s') - Phi(s): one cell closer with beta 0.1, gamma 0.9, from 5 cells to 4
    assert potential_shaping(-0.5, -0.4, 0.9, False) == pytest.approx(0.9 * -0.4 + 0.5)  # 0.14
    assert potential_shaping(-0.5, -0.4, 1.0, False) == pytest.approx(0.1)
    assert potential_shaping(-0.3, -0.3, 0.9, False) == pytest.approx(0.03)  # standing still, gamma < 1
    assert potential_shaping(-0.1, -0.7, 0.9, True) == pytest.approx(0.1)  # terminal: Phi(s') counts as 0
    with pytest.raises(ValueError, match="gamma"):
        potential_shaping(0.0, 0.0, 1.5, False)


@pytest.mark.parametrize("terminates", [False, True])
def test_discounted_sum_telescopes(terminates):
    rng = random.Random(3)
    gamma, phis = 0.97, [-rng.random() for _ in range(12)]
    last = len(phis) - 2
    total = sum(gamma**t * potential_shaping(phis[t], phis[t + 1], gamma, terminates and t == last)
                for t in range(len(phis) - 1))
    end = 0.0 if terminates else gamma ** (len(phis) - 1) * phis[-1]
    assert total == pytest.approx(end - phis[0])


def _distance_by_scan(env) -> int:
    """The same distance from the grid itself: every cell holding the mission's red ball."""
    bx, by = red_ball(env)
    ax, ay = env.minigrid.agent_pos
    return abs(bx - ax) + abs(by - ay)


def test_babyai_potential_is_the_grid_distance_to_the_missions_object():
    env = make_env("babyai/easy_goto")
    for seed in range(5):
        env.reset(seed=seed)
        assert target_distance(env.minigrid) == _distance_by_scan(env)
    env.reset(seed=5)
    face_from_distance(env, red_ball(env), 4)
    assert target_distance(env.minigrid) == 4


@pytest.mark.parametrize("task, target", [("goto", "key ball box"), ("pickup", "key ball box"), ("open", "door")])
def test_on_balrogs_levels_the_potential_measures_to_the_one_target(task, target):
    # BALROG's goto and pickup hold one object, open one door (the locked one): the distance is to it.
    env = make_env(f"babyai/{task}")
    for seed in range(10):
        env.reset(seed=seed)
        grid, (ax, ay) = env.minigrid.grid, env.minigrid.agent_pos
        (tx, ty), = [(x, y) for x in range(grid.width) for y in range(grid.height)
                     if (c := grid.get(x, y)) is not None and c.type in target.split()]
        assert target_distance(env.minigrid) == abs(tx - ax) + abs(ty - ay)


def test_shaped_steps_add_the_term_and_leave_success_alone():
    beta, gamma = 0.1, 0.9
    plain, shaped = make_env("babyai/easy_goto"), make_env("babyai/easy_goto", distance_shaping=beta,
                                                             shaping_gamma=gamma)
    for env in (plain, shaped):
        env.reset(seed=5)
        face_from_distance(env, red_ball(env), 3)
    steps = []
    for env in (plain, shaped):
        steps.append([env.step(f"ACTION: {a}") for a in ("turn left", "turn right", "go forward", "go forward")])
    for (_, r0, te0, tr0, i0), (_, r1, te1, tr1, i1), expected in zip(*steps, [
            gamma * -0.3 + 0.3,   # turning: 3 cells before and after
            gamma * -0.3 + 0.3,
            gamma * -0.2 + 0.3,   # one cell closer
            0.0 + 0.2]):          # reaches the ball: terminal, Phi(s') = 0
        assert r1 - r0 == pytest.approx(expected)
        assert (te0, tr0, i0["success"], i0["progression"]) == (te1, tr1, i1["success"], i1["progression"])
    assert steps[1][-1][2] and steps[1][-1][4]["success"]


def test_invalid_replies_are_shaped_by_the_action_executed():
    env = make_env("babyai/easy_goto", distance_shaping=0.1, shaping_gamma=1.0, format_penalty=-0.1)
    env.reset(seed=5)
    face_from_distance(env, red_ball(env), 3)
    _, reward, *_ = env.step("no idea")  # the default action, go forward: one cell closer
    assert reward == pytest.approx(-0.1 + 0.1)


def test_only_training_envs_are_shaped():
    cfg = load_recipe("tiny", ["env.distance_shaping=0.2", "gae.gamma_step=0.98"])
    assert "distance_shaping" not in cfg.env.env_kwargs()
    kwargs = cfg.env.env_kwargs(shaping_gamma=cfg.gae.gamma_step)
    assert (kwargs["distance_shaping"], kwargs["shaping_gamma"]) == (0.2, 0.98)
    assert "distance_shaping" not in load_recipe("tiny").env.env_kwargs(shaping_gamma=0.99)


@pytest.mark.parametrize("task, message", [
    ("babyai/putnext", "env.distance_shaping: babyai/putnext: BalrogLocalLevel's mission 'put the "),
    ("babyai/pick_up_seq_go_to", "env.distance_shaping: babyai/pick_up_seq_go_to:"),
    ("babyai/putnext_local", "env.distance_shaping: babyai/putnext_local: PutNext"),
    ("babyai/pickup_then_goto_local", "env.distance_shaping: babyai/pickup_then_goto_local:"),
    ("crafter/default", "env.distance_shaping: crafter/default has no distance shaping"),
])
def test_tasks_without_one_target_are_refused_in_one_line(task, message):
    cfg = load_recipe("tiny", [f"env.task={task}", "env.distance_shaping=0.1"])
    with pytest.raises(ConfigError) as err:
        check_distance_shaping(cfg)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_shaping_is_checked_on_the_tasks_that_have_it():
    for task in ("babyai/goto", "babyai/pickup", "babyai/open", "babyai/goto_local", "babyai/pickup_loc",
                 "babyai/open_door_color", "babyai/easy_goto"):
        check_distance_shaping(load_recipe("tiny", [f"env.task={task}", "env.distance_shaping=0.1"]))
    with pytest.raises(ValueError, match="distance_shaping"):
        make_env("babyai/goto", distance_shaping=-1.0)
