"""Tests of the BabyAI text env, the TextEnv contract it inherits, and the env registry."""

from __future__ import annotations

import random
import re
import warnings

import numpy as np
import pytest
from helpers import face_from_distance, red_ball, trace_digest
from minigrid.core.grid import Grid
from minigrid.core.world_object import Ball, Box, Door, Key, Wall

from verlog.envs import TextEnv, list_envs, make_env, register
from verlog.envs.babyai import BabyAITextEnv, describe_view
from verlog.envs.base import INFO_KEYS, invalid_action_notice

NORTH, EAST, SOUTH, WEST = 3, 0, 1, 2  # minigrid's agent_dir values
ACTIONS = ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"]


def _empty_room(env: BabyAITextEnv, size: int = 8) -> Grid:
    """Replace the level's grid by an empty walled size x size room and return it."""
    grid = Grid(size, size)
    grid.wall_rect(0, 0, size, size)
    env.minigrid.grid = grid
    env.minigrid.carrying = None
    return grid


@pytest.fixture
def room_env():
    """An env in the tidy text style (the balrog style's tests follow them)."""
    env = make_env("babyai/easy_goto", text_style="tidy")
    env.reset(seed=0)
    return env


# ----------------------------------------------------------------------------- text rendering
def test_objects_and_walls_facing_north(room_env):
    grid = _empty_room(room_env)
    grid.set(1, 2, Ball("red"))
    grid.set(3, 4, Key("blue"))
    grid.set(5, 5, Box("green"))
    grid.set(3, 6, Ball("purple"))  # behind the agent: not visible
    room_env.minigrid.agent_pos, room_env.minigrid.agent_dir = (3, 5), NORTH
    # Forward is -y, right is +x. Walls: y=0 is 5 steps ahead, x=0 is 3 steps left, x=7 (4 steps right)
    # is outside the 7x7 view.
    assert room_env.describe().split("\n") == [
        "a wall 5 steps forward",
        "a wall 3 steps left",
        "a blue key 1 step forward",
        "a green box 2 steps right",
        "a red ball 2 steps left and 3 steps forward",
    ]


def test_same_layout_facing_east(room_env):
    grid = _empty_room(room_env)
    grid.set(1, 2, Ball("red"))  # now behind the agent: not visible
    grid.set(3, 4, Key("blue"))
    grid.set(5, 5, Box("green"))
    grid.set(3, 6, Ball("purple"))
    room_env.minigrid.agent_pos, room_env.minigrid.agent_dir = (3, 5), EAST
    # Forward is +x, right is +y (south), left is -y.
    assert room_env.describe().split("\n") == [
        "a wall 4 steps forward",
        "a wall 2 steps right",
        "a blue key 1 step left",
        "a purple ball 1 step right",
        "a green box 2 steps forward",
    ]


def test_objects_behind_walls_and_closed_doors_are_not_listed(room_env):
    grid = _empty_room(room_env)
    for x in range(1, 7):
        grid.set(x, 3, Wall())
    door = Door("yellow", is_open=False)
    grid.set(3, 3, door)
    grid.set(3, 1, Ball("red"))
    grid.set(2, 1, Key("grey"))
    room_env.minigrid.agent_pos, room_env.minigrid.agent_dir = (3, 5), NORTH
    # The forward ray meets the door (not a wall) and cannot see past it: no forward wall line.
    assert room_env.describe().split("\n") == ["a wall 3 steps left", "a closed yellow door 2 steps forward"]

    door.is_open = True
    lines = room_env.describe().split("\n")
    assert lines[:3] == ["a wall 5 steps forward", "a wall 3 steps left", "an open yellow door 2 steps forward"]
    assert "a red ball 4 steps forward" in lines

    door.is_open, door.is_locked = False, True
    assert "a locked yellow door 2 steps forward" in room_env.describe().split("\n")


def test_carried_object_is_reported(room_env):
    _empty_room(room_env)
    room_env.minigrid.agent_pos, room_env.minigrid.agent_dir = (3, 5), NORTH
    assert not any(line.startswith("You carry") for line in room_env.describe().split("\n"))
    room_env.minigrid.carrying = Key("red")
    assert room_env.describe().split("\n")[-1] == "You carry a red key"


def test_pick_up_through_the_env_updates_the_text(room_env):
    grid = _empty_room(room_env)
    grid.set(3, 4, Box("purple"))
    room_env.minigrid.agent_pos, room_env.minigrid.agent_dir = (3, 5), NORTH
    obs, *_ = room_env.step("ACTION: pick up")
    lines = obs.split("\n")
    assert "a purple box 1 step forward" not in lines
    assert lines[-1] == "You carry a purple box"


def test_describe_view_on_a_hand_encoded_image():
    image = np.zeros((7, 7, 3), dtype=np.uint8)  # all unseen
    image[3, 6] = (1, 0, 0)  # agent cell, empty
    image[3, 5] = (1, 0, 0)
    image[3, 4] = (2, 5, 0)  # grey wall 2 steps forward
    image[0, 6] = (6, 2, 0)  # blue ball 3 steps left
    image[6, 0] = (4, 4, 1)  # closed yellow door 3 steps right and 6 steps forward
    # The same lines in both styles: the unseen cells on the left end the tidy left line, and the
    # balrog style passes over them to the ball, which is not a wall.
    for style in ("balrog", "tidy"):
        assert describe_view(image, style) == [
            "a wall 2 steps forward",
            "a blue ball 3 steps left",
            "a closed yellow door 3 steps right and 6 steps forward",
        ]
    image[3, 6] = (5, 0, 0)  # carrying a red key: first in the balrog style, last in the tidy one
    assert describe_view(image, "balrog")[0] == describe_view(image, "tidy")[-1] == "You carry a red key"
    with pytest.raises(ValueError, match="shape"):
        describe_view(np.zeros((7, 6, 3)))


def _style_env(style: str) -> BabyAITextEnv:
    env = make_env("babyai/easy_goto", text_style=style)
    env.reset(seed=0)
    return env


def test_balrog_style_hides_walls_behind_objects_and_lists_objects_by_column():
    # The layout of test_objects_and_walls_facing_north. Forward, the key stands before the wall, and to
    # the right the box: only the left wall is reported. Objects go column by column from the left.
    env = _style_env("balrog")
    grid = _empty_room(env)
    grid.set(1, 2, Ball("red"))
    grid.set(3, 4, Key("blue"))
    grid.set(5, 5, Box("green"))
    env.minigrid.agent_pos, env.minigrid.agent_dir = (3, 5), NORTH
    assert env.describe().split("\n") == [
        "a wall 3 steps left",
        "a red ball 2 steps left and 3 steps forward",
        "a blue key 1 step forward",
        "a green box 2 steps right",
    ]
    env.minigrid.agent_dir = EAST  # the key is now on the left, the box ahead, nothing else between walls
    grid.set(3, 6, Ball("purple"))
    assert env.describe().split("\n") == [
        "a blue key 1 step left",
        "a green box 2 steps forward",
        "a purple ball 1 step right",
    ]


def test_balrog_style_doors_carrying_and_far_rows_first():
    env = _style_env("balrog")
    grid = _empty_room(env)
    for x in range(1, 7):
        grid.set(x, 3, Wall())
    door = Door("yellow", is_open=False)
    grid.set(3, 3, door)
    grid.set(3, 1, Ball("red"))
    grid.set(2, 1, Key("grey"))
    env.minigrid.agent_pos, env.minigrid.agent_dir = (3, 5), NORTH
    assert env.describe().split("\n") == ["a wall 3 steps left", "a closed yellow door 2 steps forward"]
    door.is_open = True  # the open door is the first thing ahead: no forward wall; "a open", as in BALROG
    env.minigrid.carrying = Key("purple")
    assert env.describe().split("\n") == [
        "You carry a purple key",
        "a wall 3 steps left",
        "a grey key 1 step left and 4 steps forward",
        "a red ball 4 steps forward",
        "a open yellow door 2 steps forward",
    ]
    door.is_open, door.is_locked = False, True
    assert "a locked yellow door 2 steps forward" in env.describe().split("\n")


@pytest.mark.parametrize("style, text", [("balrog", ""), ("tidy", "You see nothing around you.")])
def test_an_empty_view_in_each_style(style, text):
    env = _style_env(style)
    _empty_room(env, size=15)  # from the middle, every wall is beyond the 7x7 view
    env.minigrid.agent_pos, env.minigrid.agent_dir = (7, 7), NORTH
    assert env.describe() == text


def test_text_style_is_checked():
    with pytest.raises(ValueError, match="text_style must be one of"):
        make_env("babyai/easy_goto", text_style="fancy")
    with pytest.raises(ValueError, match="text_style must be one of"):
        describe_view(np.zeros((7, 7, 3)), "fancy")


# ----------------------------------------------------------------------------- TextEnv contract
def test_invalid_reply_runs_default_action_with_notice_and_added_penalty():
    penalised = make_env("babyai/easy_goto", format_penalty=-0.1)
    clean = make_env("babyai/easy_goto")
    for env in (penalised, clean):
        env.reset(seed=11)
        face_from_distance(env, red_ball(env), 2)  # one "go forward" reaches the ball
    obs, reward, terminated, truncated, info = penalised.step("I refuse to choose.")
    _, clean_reward, *_ = clean.step("ACTION: go forward")
    assert info["action"] == "go forward" and info["action_valid"] is False
    assert obs.split("\n")[0] == invalid_action_notice("go forward")
    assert "go forward" in obs.split("\n")[0]
    assert obs.split("\n")[1:] == clean.describe().split("\n")
    expected_game_reward = 1 - 0.9 * 1 / 64
    assert info["game_reward"] == pytest.approx(expected_game_reward)
    assert clean_reward == pytest.approx(expected_game_reward)
    assert reward == pytest.approx(expected_game_reward - 0.1)
    assert terminated and not truncated


def test_invalid_reply_without_reward_gets_exactly_the_penalty():
    env = make_env("babyai/goto", format_penalty=-0.25)
    env.reset(seed=3)
    _empty_room(env)
    env.minigrid.agent_pos, env.minigrid.agent_dir = (1, 1), NORTH  # facing the wall: forward is blocked
    before = env.describe()
    obs, reward, terminated, truncated, info = env.step("")
    assert (info["game_reward"], reward, terminated, truncated) == (0.0, -0.25, False, False)
    assert obs == invalid_action_notice("go forward") + "\n" + before
    ok_obs, ok_reward, _, _, ok_info = env.step("ACTION: turn left")
    assert not ok_obs.startswith("Your previous reply")
    assert (ok_reward, ok_info["action_valid"]) == (0.0, True)


def test_success_terminates_with_minigrid_reward_and_progression():
    env = make_env("babyai/easy_goto")
    _, info = env.reset(seed=5)
    assert info["progression"] == 0.0 and info["success"] is False
    face_from_distance(env, red_ball(env), 3)  # two "go forward" steps
    _, r1, te1, tr1, info1 = env.step("ACTION: go forward")
    assert (r1, te1, tr1, info1["progression"], info1["success"]) == (0.0, False, False, 0.0, False)
    _, r2, te2, tr2, info2 = env.step("ACTION: go forward")
    assert r2 == pytest.approx(1 - 0.9 * 2 / 64)
    assert te2 and not tr2
    assert info2["progression"] == 1.0 and info2["success"] is True and info2["episode_step"] == 2
    with pytest.raises(RuntimeError, match="reset"):
        env.step("ACTION: go forward")


def test_success_on_the_last_allowed_step_is_terminated_not_truncated():
    env = make_env("babyai/easy_goto", max_steps=1)
    env.reset(seed=5)
    face_from_distance(env, red_ball(env), 2)
    _, reward, terminated, truncated, _ = env.step("ACTION: go forward")
    assert reward == pytest.approx(1 - 0.9 * 1 / 1)
    assert terminated and not truncated


def test_step_limit_truncates():
    env = make_env("babyai/easy_goto", max_steps=3)
    env.reset(seed=5)
    assert env.minigrid.max_steps == 3
    ball = red_ball(env)
    # Stand in a corner far from the ball facing a wall; turning can never face the ball.
    corner = (1, 1) if ball[0] + ball[1] > 6 else (6, 6)
    env.minigrid.agent_pos, env.minigrid.agent_dir = corner, NORTH if corner == (1, 1) else SOUTH
    flags = [env.step("ACTION: turn left")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    with pytest.raises(RuntimeError):
        env.step("ACTION: turn left")


def test_info_keys_identical_at_reset_and_every_step():
    env = make_env("babyai/goto")
    _, info = env.reset(seed=1)
    keys = set(info)
    assert set(INFO_KEYS) <= keys
    assert (info["action"], info["action_valid"], info["game_reward"], info["episode_step"]) == ("", True, 0.0, 0)
    assert env.mission in info["instruction"] and "ACTION:" in info["instruction"]
    assert info["valid_actions"] == ACTIONS
    rng = random.Random(0)
    for step in range(1, 11):
        _, _, terminated, truncated, info = env.step(rng.choice(ACTIONS + ["garbage"]))
        assert set(info) == keys
        assert info["episode_step"] == step
        assert isinstance(info["success"], bool) and isinstance(info["game_reward"], float)
        if terminated or truncated:
            break


def test_same_seed_same_episode_and_unseeded_resets_continue_the_rng():
    def rollout(seed: int) -> list[str]:
        env = make_env("babyai/goto", max_steps=8)
        rng = random.Random(1234)
        obs, info = env.reset(seed=seed)
        seen = [info["mission"], obs]
        for _ in range(20):  # crosses episode boundaries: unseeded resets
            obs, _, terminated, truncated, _ = env.step(rng.choice(ACTIONS))
            seen.append(obs)
            if terminated or truncated:
                obs, info = env.reset()
                seen += [info["mission"], obs]
        return seen

    assert rollout(42) == rollout(42)
    firsts = {tuple(rollout(s)[:2]) for s in (1, 2, 3, 4)}
    assert len(firsts) > 1, "different seeds should give different layouts"


def test_gymnasium_env_checker_accepts_the_env():
    from gymnasium.utils.env_checker import check_env

    env = make_env("babyai/goto")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # only the "no render modes / no spec" notices
        check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert env.action_space.contains("Let me think \u2014 \u201cturn left\u201d.\nACTION: turn left")


def test_constructor_and_step_reject_bad_input():
    with pytest.raises(ValueError, match="format_penalty"):
        make_env("babyai/goto", format_penalty=0.5)
    with pytest.raises(ValueError, match="format_penalty"):
        make_env("babyai/goto", format_penalty=float("nan"))
    with pytest.raises(ValueError, match="max_steps"):
        make_env("babyai/goto", max_steps=0)
    with pytest.raises(ValueError, match="max_steps"):
        make_env("babyai/goto", level_kwargs={"max_steps": 5})
    with pytest.raises(TypeError, match="level_kwargs"):
        make_env("babyai/goto", level_kwargs={"no_such_option": 1})
    env = make_env("babyai/goto")
    with pytest.raises(RuntimeError, match="reset"):
        env.step("ACTION: drop")
    with pytest.raises(RuntimeError, match="reset"):
        _ = env.instruction
    env.reset(seed=0)
    with pytest.raises(TypeError, match="str"):
        env.step(3)
    with pytest.raises(ValueError, match="options"):
        env.reset(options={"x": 1})


def _objects(env: BabyAITextEnv) -> list:
    return [c for c in env.minigrid.grid.grid if c is not None and c.type not in ("wall", "door")]


def test_level_kwargs_reach_the_level():
    env = make_env("babyai/goto_local", level_kwargs={"num_dists": 1})
    env.reset(seed=0)
    assert len(_objects(env)) == 1
    env = make_env("babyai/goto", level_kwargs={"num_dists": 2})  # BALROG's goto: num_dists + 1 objects
    env.reset(seed=0)
    assert len(_objects(env)) == 3


# ----------------------------------------------------------------------------- tasks
BALROG_LIMITS = {"goto": 64, "pickup": 64, "open": 128, "putnext": 128, "pick_up_seq_go_to": 128,
                 "goto_local": 64, "pickup_loc": 64, "open_door_color": 128, "putnext_local": 128,
                 "pickup_then_goto_local": 128, "easy_goto": 64}
_OBJ = r"the (red|green|blue|purple|yellow|grey) (ball|box|key)"
MISSION = {
    "goto": f"go to {_OBJ}",
    "pickup": f"pick up {_OBJ}",
    "open": r"open the (yellow |green |blue |purple )?door",
    "putnext": f"put {_OBJ} next to {_OBJ}",
    "pick_up_seq_go_to": f"pick up {_OBJ}, then go to {_OBJ}|go to {_OBJ} after you pick up {_OBJ}",
    "goto_local": "go to (a|the) ",
    "pickup_loc": "pick up ",
    "open_door_color": "open the (red|green|blue|purple|yellow|grey) door",
    "putnext_local": "put ",
    "pickup_then_goto_local": "pick up (a|the) .*, then go to (a|the) ",
    "easy_goto": "go to the red ball",
}


def test_all_babyai_tasks_are_registered():
    mixtures = {"babyai/balrog_mix"}  # BALROG's five in one env (tests/test_mixture.py)
    assert {n for n in list_envs() if n.startswith("babyai/")} == {f"babyai/{t}" for t in BALROG_LIMITS} | mixtures


@pytest.mark.parametrize("task", sorted(BALROG_LIMITS))
def test_task_makes_resets_and_runs_20_random_steps(task):
    env = make_env(f"babyai/{task}")
    obs, info = env.reset(seed=7)
    assert isinstance(obs, str) and obs
    assert env.max_steps == env.minigrid.max_steps == BALROG_LIMITS[task]
    assert re.match(MISSION[task], info["mission"]), info["mission"]
    rng = random.Random(task)
    for _ in range(20):
        obs, reward, terminated, truncated, info = env.step(f"ACTION: {rng.choice(ACTIONS)}")
        assert isinstance(obs, str) and isinstance(reward, float)
        assert not (terminated and truncated)
        if terminated or truncated:
            obs, info = env.reset()


#: SHA-256 of :func:`helpers.trace_digest` per task (seed 5, 400 seeded random replies, one in ten
#: without a valid action), recorded before the text rendering was optimised, in the text that was the
#: default then (``text_style="tidy"``): observations, rewards, ends and info must stay byte-identical.
#: The replies were drawn for the name each level had then (``golden/<name>``): the first five levels
#: were ``babyai/goto`` ... ``babyai/pick_up_seq_go_to`` until those names became BALROG's levels, so
#: these traces also show the renamed levels unchanged.
GOLDEN_TRACE_DIGESTS = {  # task: (name the replies were drawn for, digest)
    "easy_goto": ("easy_goto", "ec1b5ae7b5953258c48e32a24b4e96067f02d4e175f84b46bc566c9a86a54dc3"),
    "goto_local": ("goto", "55d32c436c2749d9caa7ff9b471401a97fb2235113c73c913b667118932d9a18"),
    "open_door_color": ("open", "cf7d2be54568ab53a654bbbfe9c7b459461b51f675bfa7b13b0569f19c361fd9"),
    "pickup_then_goto_local": ("pick_up_seq_go_to",
                               "4c6e5407ef144fca9a650e795ce85bea23e34555e221e6c139ecfc09296782af"),
    "pickup_loc": ("pickup", "197f952b7cad7a6c09b1522104d4586329fd90c9ef88570fa981760c86d76914"),
    "putnext_local": ("putnext", "0d4cbbed3d7c5cf3bfc5848ba9cf8bb4dd2167f7eeee067e32326265b9736f5c"),
}


def _golden_replies(name: str) -> list[str]:
    rng = random.Random(f"golden/{name}")
    return ["no idea" if rng.random() < 0.1 else f"ACTION: {rng.choice(ACTIONS)}" for _ in range(400)]


@pytest.mark.parametrize("task", sorted(GOLDEN_TRACE_DIGESTS))
def test_observations_are_byte_identical_to_the_recorded_traces(task):
    name, digest = GOLDEN_TRACE_DIGESTS[task]
    assert trace_digest(make_env(f"babyai/{task}", text_style="tidy"), 5, _golden_replies(name)) == digest


#: The same traces in the default text (BALROG's, ``text_style="balrog"``), for every task, replies
#: drawn for the task's own name; recorded when that text became the default, after
#: ``tests/test_babyai_balrog.py`` had shown the text and BALROG's levels equal to BALROG's own.
BALROG_TEXT_TRACE_DIGESTS = {
    "easy_goto": "bdc2a5283aa9fec5db1d7ca76d70182410c6b9eda650759ec0055001c0a355d0",
    "goto": "d2779e54ed77afb7cbb8973c730948f2d32c762894e224baefc6659f2a44626f",
    "goto_local": "3977c09b3009c0ea0f32594d7e5e0971bddcb53e1c6a811e4d6fc8e058fde09d",
    "open": "27c1a8d2711174ba92c1c4ccacfb5952de3be5b229fa846ebae1ea6fb18be08b",
    "open_door_color": "4a753a536e79c10a873c258bb818e102bcc775a97b775753fa6ba7f9af3bf508",
    "pick_up_seq_go_to": "0cc276f306d17679485a7c2ea3a5f20bafa911285b702f9203244fbceecf1e38",
    "pickup": "c0ca05ae4bcadc0800cba8a644ded5d0c309d9b8f2be7583100c90deb7951399",
    "pickup_loc": "17dca5928a0863145330bbda4b9ea10d85d465da04b498898e7150283546f9b1",
    "pickup_then_goto_local": "9a81c3ff56e9e52894370749357df63cec2be85d4ce7d59d7b1a98aa2b80a74b",
    "putnext": "1b5b4789db445fe11bf085e3dd89c090ba3ee9b0fd6276c9a2feacee6a8d6dc1",
    "putnext_local": "7c9a846fa0368abe8942e30c2f52d8008d1aeae6d416218db358c8979f5c118b",
}


@pytest.mark.parametrize("task", sorted(BALROG_LIMITS))
def test_default_text_traces_are_byte_identical_to_the_recorded_ones(task):
    assert trace_digest(make_env(f"babyai/{task}"), 5, _golden_replies(task)) == BALROG_TEXT_TRACE_DIGESTS[task]


def test_pick_up_then_go_to_needs_the_right_order():
    env = make_env("babyai/pickup_then_goto_local")
    env.reset(seed=3)
    instr = env.minigrid.instrs
    to_pick = instr.instr_a.desc.obj_set[0]
    to_reach = instr.instr_b.desc.obj_set[0]
    # Going to the target first does not count ("drop" while facing an object changes nothing).
    face_from_distance(env, tuple(to_reach.cur_pos), 1)
    _, reward, terminated, *_ = env.step("ACTION: drop")
    assert (reward, terminated) == (0.0, False)
    face_from_distance(env, tuple(to_pick.cur_pos), 1)
    obs, reward, terminated, *_ = env.step("ACTION: pick up")
    assert (reward, terminated) == (0.0, False)
    assert obs.split("\n")[0] == f"You carry a {to_pick.color} {to_pick.type}"  # first, as in BALROG
    face_from_distance(env, tuple(to_reach.cur_pos), 1)
    _, reward, terminated, truncated, info = env.step("ACTION: drop")  # blocked: still carrying
    assert terminated and not truncated and info["success"]
    assert reward == pytest.approx(1 - 0.9 * 3 / 128)


def test_upstream_rejection_prints_are_silenced_and_counted(capsys):
    env = make_env("babyai/goto_local")
    for seed in range(25):
        env.reset(seed=seed)
    assert "Sampling rejected" not in capsys.readouterr().out
    raw = env.minigrid
    for seed in range(25):
        raw.reset(seed=seed)
    printed = capsys.readouterr().out.count("Sampling rejected")
    assert printed > 0, "these seeds should trigger upstream rejection sampling"
    assert env.rejected_layouts == printed


# ----------------------------------------------------------------------------- registry
def test_registry_errors_are_specific():
    with pytest.raises(ValueError, match="babyai/goto"):
        make_env("babyai/nope")
    with pytest.raises(TypeError, match="accepted"):
        make_env("babyai/goto", max_step=3)
    with pytest.raises(ValueError, match="already registered"):
        register("babyai/goto", lambda: None)
    register("test/not_a_text_env", lambda: object(), replace=True)
    with pytest.raises(TypeError, match="not a TextEnv"):
        make_env("test/not_a_text_env")
    assert isinstance(make_env("babyai/goto", max_steps=5), TextEnv)


class _TwoDoors(TextEnv):
    """A minimal game on TextEnv's defaults: fixed actions, a prompt set at reset."""

    fixed_actions = ("left door", "right door")
    default_action = "left door"
    progression = 0.0

    def _reset_game(self, seed):
        self._instruction = f"Pick a door (episode seeded {seed})."
        return "two doors", {}

    def _step_game(self, action):
        return f"you chose the {action}", float(action == "right door"), True, False, {}


def test_textenv_defaults_serve_fixed_actions_and_the_stored_prompt():
    env = _TwoDoors()
    assert env.valid_actions == ["left door", "right door"]
    assert env.valid_actions is not env.valid_actions  # a new list each time: callers may change it
    with pytest.raises(RuntimeError, match="no episode yet: call reset"):
        _ = env.instruction
    obs, info = env.reset(seed=7)
    assert env.instruction == info["instruction"] == "Pick a door (episode seeded 7)."
    assert info["valid_actions"] == ["left door", "right door"]
    obs, reward, terminated, _, info = env.step("I pick... ACTION: Right Door")
    assert (obs, reward, terminated, info["action"]) == ("you chose the right door", 1.0, True, "right door")
    env.reset(seed=8)
    obs, _, _, _, info = env.step("no idea")
    assert obs == invalid_action_notice("left door") + "\nyou chose the left door" and not info["action_valid"]


def test_shared_helpers_of_the_game_modules():
    from verlog.envs.base import require_episode
    from verlog.envs.options import instruction_builder, task_entry
    from verlog.envs.wording import steps

    assert (steps(1), steps(0), steps(12)) == ("1 step", "0 steps", "12 steps")
    assert require_episode(0) == 0 and require_episode("") == ""  # only None means "no episode"
    with pytest.raises(RuntimeError, match="no episode yet"):
        require_episode(None)
    assert task_entry({"a": 3, "b": 4}, "b", "Toy") == 4
    with pytest.raises(ValueError, match=r"unknown Toy task 'c'; known tasks: \['a', 'b'\]"):
        task_entry({"b": 4, "a": 3}, "c", "Toy")
    assert instruction_builder({"full": len, "brief": str}, "brief") is str
    with pytest.raises(ValueError, match=r"instruction_style must be one of \['brief', 'full'\], got 'long'"):
        instruction_builder({"full": len, "brief": str}, "long")
