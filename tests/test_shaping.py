"""Potential-based distance shaping: the formula on hand-worked numbers and against its telescoping
sum, the BabyAI potential measured independently from the grid and the mission's words and along
the BabyAI bot's solutions, and where the shaping applies (training envs only, one line for a task
that has none)."""

from __future__ import annotations

import random
import re

import pytest
from minigrid.envs.babyai.core.verifier import AndInstr, GoToInstr, ObjDesc
from minigrid.utils.baby_ai_bot import BabyAIBot
from helpers import face_from_distance, red_ball

from verlog.config import ConfigError, load_recipe
from verlog.envs import make_env
from verlog.envs.babyai import BABYAI_ACTIONS
from verlog.envs.babyai_distance import mission_distance
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
        assert mission_distance(env.minigrid) == _distance_by_scan(env)
    env.reset(seed=5)
    face_from_distance(env, red_ball(env), 4)
    assert mission_distance(env.minigrid) == 4


def _cells_of(env, kind: str, color: str | None) -> list[tuple[int, int]]:
    grid = env.minigrid.grid
    return [(x, y) for x in range(grid.width) for y in range(grid.height)
            if (c := grid.get(x, y)) is not None and c.type == kind and color in (None, c.color)]


def _d(a, b) -> int:
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def _distance_from_the_mission_words(env) -> int:
    """The reset distance of BALROG's five tasks from the mission text and a scan of the grid (each
    level holds one object per description): the independent reference of mission_distance."""
    mission, agent = env.minigrid.mission, tuple(int(v) for v in env.minigrid.agent_pos)
    obj = r"(?:the|a) (\w+) (\w+)"
    if m := re.fullmatch(f"(?:go to|pick up) {obj}", mission):
        (x,) = _cells_of(env, m[2], m[1])
        return _d(agent, x)
    if m := re.fullmatch(r"open the (?:(\w+) )?door", mission):
        (door,) = _cells_of(env, "door", m[1])
        color = env.minigrid.grid.get(*door).color
        (key,) = _cells_of(env, "key", color)  # the door is locked and its key lies in the agent's room
        return _d(agent, key) + _d(key, door)
    if m := (re.fullmatch(f"put {obj} next to {obj}", mission) or re.fullmatch(f"pick up {obj}, then go to {obj}",
                                                                                mission)):
        xs, ys = _cells_of(env, m[2], m[1]), _cells_of(env, m[4], m[3])
    else:
        m = re.fullmatch(f"go to {obj} after you pick up {obj}", mission)
        ys, xs = _cells_of(env, m[2], m[1]), _cells_of(env, m[4], m[3])
    # X and Y may look alike: then X's own cell is a Y too (the go-to verifier checks the cells its
    # objects had at reset), and the walk on from X is 0
    return min(_d(agent, x) + _d(x, y) for x in xs for y in ys)


@pytest.mark.parametrize("task", ["goto", "pickup", "open", "putnext", "pick_up_seq_go_to"])
def test_on_balrogs_levels_the_distance_follows_the_missions_stages(task):
    env = make_env(f"babyai/{task}")
    for seed in range(25):
        env.reset(seed=seed)
        assert mission_distance(env.minigrid) == _distance_from_the_mission_words(env), env.minigrid.mission


@pytest.mark.parametrize("task", ["goto", "pickup", "open", "putnext", "pick_up_seq_go_to", "putnext_local",
                                  "pickup_then_goto_local", "open_door_color"])
def test_along_the_bots_solutions_the_distance_falls_to_the_goal_without_jumps(task):
    # One step moves the agent one cell (or picks up the object in front of it, which ends a stage one
    # cell from where the next one is measured), so the distance changes by at most 2 per step; it
    # ends next to the last target.
    actions = {v: k for k, v in BABYAI_ACTIONS.items()}
    env = make_env(f"babyai/{task}")
    for seed in range(8):
        env.reset(seed=seed)
        bot, distances = BabyAIBot(env.minigrid), [mission_distance(env.minigrid)]
        while True:
            *_, terminated, truncated, info = env.step("ACTION: " + actions[bot.replan()])
            if terminated or truncated:
                break
            distances.append(mission_distance(env.minigrid))
        assert info["success"]
        assert max((abs(a - b) for a, b in zip(distances, distances[1:])), default=0) <= 2, distances
        assert distances[-1] <= 2 and min(distances) >= 0


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


def test_shaping_gamma_key_replaces_the_learners_discount_and_standing_still_then_earns_nothing():
    cfg = load_recipe("tiny", ["env.distance_shaping=0.1", "env.shaping_gamma=1.0", "gae.gamma_step=0.9"])
    kwargs = cfg.env.env_kwargs(shaping_gamma=cfg.gae.gamma_step)
    assert kwargs["shaping_gamma"] == 1.0
    for gamma, expected in ((1.0, 0.0), (0.9, (1 - 0.9) * 0.1 * 3)):  # Phi = -0.1 * 3 cells; F = (gamma - 1) * Phi
        env = make_env("babyai/easy_goto", distance_shaping=0.1, shaping_gamma=gamma)
        env.reset(seed=5)
        face_from_distance(env, red_ball(env), 3)
        env.step("ACTION: turn left")  # a turn changes no distance (the ball is now 3 cells away, to the side)
        _, reward, *_ = env.step("ACTION: turn right")
        assert reward == pytest.approx(expected)


def test_shaping_gamma_outside_the_unit_interval_is_one_line():
    with pytest.raises(ConfigError, match="env.shaping_gamma"):
        load_recipe("tiny", ["env.shaping_gamma=1.5"])


def test_a_mission_without_a_distance_is_refused():
    env = make_env("babyai/goto_local")
    env.reset(seed=0)
    level = env.minigrid
    level.instrs = AndInstr(GoToInstr(ObjDesc("ball")), GoToInstr(ObjDesc("key")))
    level.instrs.reset_verifier(level)
    with pytest.raises(ValueError, match="AndInstr"):
        mission_distance(level)


def test_a_family_without_shaping_is_refused_in_one_line():
    cfg = load_recipe("tiny", ["env.task=crafter/default", "env.distance_shaping=0.1"])
    with pytest.raises(ConfigError) as err:
        check_distance_shaping(cfg)
    assert str(err.value).startswith("env.distance_shaping: crafter/default has no distance shaping")
    assert "\n" not in str(err.value)


def test_shaping_is_checked_on_the_tasks_that_have_it():
    for task in ("babyai/goto", "babyai/pickup", "babyai/open", "babyai/putnext", "babyai/pick_up_seq_go_to",
                 "babyai/balrog_mix", "babyai/goto_local", "babyai/pickup_loc", "babyai/open_door_color",
                 "babyai/putnext_local", "babyai/pickup_then_goto_local", "babyai/easy_goto"):
        check_distance_shaping(load_recipe("tiny", [f"env.task={task}", "env.distance_shaping=0.1"]))
    with pytest.raises(ValueError, match="distance_shaping"):
        make_env("babyai/goto", distance_shaping=-1.0)


def test_a_carried_object_counts_as_on_the_agents_cell():
    env = make_env("babyai/putnext")
    env.reset(seed=0)
    level = env.minigrid
    instr = level.instrs
    (moved,), (fixed,) = list(instr.desc_move.obj_set), list(instr.desc_fixed.obj_set)
    level.grid.set(*fixed.cur_pos, None)  # the agent holds the object the other one must go next to
    fixed.cur_pos, level.carrying = (-1, -1), fixed
    agent = tuple(int(v) for v in level.agent_pos)
    x = tuple(int(v) for v in moved.cur_pos)
    assert mission_distance(level) == 2 * _d(agent, x)  # to X, and back to where Y now is


@pytest.mark.parametrize("task", ["pickup", "open", "putnext", "pick_up_seq_go_to"])
def test_random_play_never_leaves_the_mission_unmeasurable(task):
    # picking up, carrying and dropping the wrong objects: every state still has a distance
    env = make_env(f"babyai/{task}", distance_shaping=0.1, shaping_gamma=0.99)
    rng = random.Random(task)
    for seed in range(30):
        env.reset(seed=seed)
        done = False
        while not done:
            *_, terminated, truncated, _ = env.step("ACTION: " + rng.choice(env.valid_actions))
            done = terminated or truncated
            assert mission_distance(env.minigrid) >= 0
