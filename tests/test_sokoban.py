"""Tests of our Sokoban: the push rules and rewards on hand-made rooms, the reverse-play generator
(rooms solvable, deterministic per seed) and the TextEnv contract of ``sokoban/*``."""

from __future__ import annotations

import pickle
import random
import warnings

import numpy as np
import pytest

from verlog.catalog import ENV_TASKS
from verlog.envs import make_env, make_vector_env
from verlog.envs.base import invalid_action_notice
from verlog.envs.groups import StateKeyInfo
from verlog.envs.sokoban import (
    SOKOBAN_ACTIONS,
    SOKOBAN_MAX_STEPS,
    SOKOBAN_TASKS,
    SokobanTextEnv,
    generate_room,
    move,
    parse_room,
    render_room,
    reverse_play,
    solve,
    step_reward,
)
from verlog.envs.sokoban.generator import carve_topology

TASKS = [f"sokoban/{task}" for task in SOKOBAN_TASKS]


def room_env(text: str, **kwargs) -> SokobanTextEnv:
    """A 6x6_1box env playing the hand-made room ``text`` (episode counters fresh)."""
    env = make_env("sokoban/6x6_1box", **kwargs)
    env.reset(seed=0)
    env.layout, env.state = parse_room(text)
    return env


def play(env: SokobanTextEnv, moves: str) -> list[tuple[float, bool, bool]]:
    """Step ``env`` through space-separated moves; ``(reward, terminated, truncated)`` of each."""
    return [env.step(f"ACTION: {m}")[1:4] for m in moves.split()]


# ----------------------------------------------------------------------------- rules and rewards
def test_a_push_into_a_wall_or_a_second_box_is_blocked():
    layout, state = parse_room(
        """
        # # # # # #
        # _ _ _ O #
        # P X X O #
        # _ _ _ O #
        # X _ _ _ #
        # # # # # #
        """
    )
    after, pushed = move(layout, state, "right")  # two boxes in a row: nothing moves
    assert (after, pushed) == (state, False)
    after, pushed = move(layout, state, "left")  # a wall
    assert (after, pushed) == (state, False)
    down, _ = move(layout, state, "down")
    after, pushed = move(layout, down, "down")  # the box below is pushed into the wall: blocked
    assert (after, pushed) == (down, False) and down.player == (3, 1)
    up, pushed = move(layout, state, "up")  # a free cell: the player walks
    assert up.player == (1, 1) and up.boxes == state.boxes and not pushed


def test_pushes_move_one_box_onto_and_off_targets_with_gym_sokobans_rewards():
    env = room_env(
        """
        # # # # # # #
        # P X O _ _ #
        # _ _ _ _ _ #
        # _ _ X O _ #
        # # # # # # #
        """
    )
    assert env.progression == 0.0
    assert play(env, "right") == [(pytest.approx(0.9), False, False)]  # -0.1 + 1: onto a target
    assert env.state.boxes == frozenset({(1, 3), (3, 3)}) and env.progression == 0.5
    assert play(env, "right") == [(pytest.approx(-1.1), False, False)]  # -0.1 - 1: off it again
    assert play(env, "down") == [(pytest.approx(-0.1), False, False)]  # a plain step
    obs, reward, terminated, truncated, info = env.step("ACTION: left")
    assert (reward, terminated) == (pytest.approx(-0.1), False)
    assert "X" in obs and info["boxes_on_target"] == 0


def test_the_solving_push_terminates_with_ten_plus_one_minus_a_tenth():
    env = room_env(
        """
        # # # # # #
        # _ _ _ _ #
        # P X O _ #
        # _ * _ _ #
        # # # # # #
        """
    )
    assert env.progression == 0.5
    obs, reward, terminated, truncated, info = env.step("ACTION: right")
    assert reward == pytest.approx(step_reward(1, 2, 2)) == pytest.approx(-0.1 + 1 + 10)
    assert terminated and not truncated and info["success"] and info["progression"] == 1.0
    rows = obs.splitlines()[1:-1]
    assert obs.endswith("Boxes on targets: 2 of 2.") and "".join(rows).count("*") == 2 and "X" not in "".join(rows)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("ACTION: left")


def test_a_box_moved_from_one_target_to_another_earns_nothing_but_the_step():
    assert step_reward(1, 1, 2) == pytest.approx(-0.1)
    assert step_reward(0, 0, 1) == pytest.approx(-0.1)
    assert step_reward(2, 1, 2) == pytest.approx(-1.1)


def test_the_step_limit_truncates_and_invalid_replies_are_penalised():
    env = room_env(
        """
        # # # # # #
        # P _ _ _ #
        # _ X _ _ #
        # _ _ _ O #
        # # # # # #
        """,
        max_steps=3,
        format_penalty=-0.5,
    )
    obs, reward, terminated, truncated, info = env.step("I am not sure")
    assert obs.startswith(invalid_action_notice("up") + "\n") and reward == pytest.approx(-0.6)
    assert not info["action_valid"] and info["action"] == "up"
    assert play(env, "right down") == [(pytest.approx(-0.1), False, False), (pytest.approx(-0.1), False, True)]


def test_room_text_round_trip_and_bad_rooms():
    text = "# # # # #\n# S X _ #\n# _ * _ #\n# # # # #"
    layout, state = parse_room(text)
    assert render_room(layout, state) == text
    for bad in ("# # #\n# P\n# # #", "# # # #\n# P X #\n# # # #", "# # # #\n# P ? #\n# # # #",
                "# # # # #\n_ P X O #\n# # # # #", "# # # # #\n# _ X O #\n# # # # #"):
        with pytest.raises(ValueError):
            parse_room(bad)


# ----------------------------------------------------------------------------- generator
def test_reverse_play_rooms_are_solved_by_their_recorded_moves_and_by_bfs():
    for task in TASKS:
        env = make_env(task, max_steps=1000)  # the reverse path may be longer than the step limit
        for seed in range(12):
            env.reset(seed=seed)
            room = env.room
            assert room.score > 0 and room.start.on_targets(room.layout) == 0  # every box off its target
            for action in room.solution[:-1]:
                obs, reward, terminated, truncated, info = env.step(f"ACTION: {action}")
                assert not terminated
            obs, reward, terminated, truncated, info = env.step(f"ACTION: {room.solution[-1]}")
            assert terminated and info["success"] and reward > 10
            if task != "sokoban/8x8_2box":
                shortest = solve(room.layout, room.start)
                assert shortest is not None and 0 < len(shortest) <= len(room.solution)


def test_the_topology_is_walled_and_connected():
    rng = np.random.default_rng(7)
    for _ in range(50):
        walls = carve_topology(rng, 8, 8, walk_steps=27)
        assert walls[0].all() and walls[-1].all() and walls[:, 0].all() and walls[:, -1].all()
        floor = {tuple(c) for c in np.argwhere(~walls)}
        assert floor
        seen, todo = set(), [next(iter(floor))]  # the walk's stamps overlap: one region
        while todo:
            r, c = todo.pop()
            if (r, c) in seen or (r, c) not in floor:
                continue
            seen.add((r, c))
            todo += [(r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)]
        assert seen == floor


def test_reverse_play_keeps_the_best_scoring_state():
    # A corridor: the box can only be pulled left, at most two cells (the player needs a cell beyond it).
    layout, solved = parse_room("# # # # # # #\n# _ _ P * _ #\n# # # # # # #")
    state, score, reverse_moves = reverse_play(layout, solved)
    assert score == 2 * 2  # two pulls x two cells of displacement
    assert state.boxes == frozenset({(1, 2)}) and state.player == (1, 1) and reverse_moves == ("left", "left")
    stuck_layout, stuck = parse_room("# # # # #\n# _ * P #\n# # # # #")  # the player cannot get behind it
    assert reverse_play(stuck_layout, stuck)[1] == 0


def test_rooms_are_deterministic_per_seed_and_differ_between_seeds():
    for task in TASKS:
        first, second = make_env(task), make_env(task)
        texts = [first.reset(seed=s)[0] for s in range(6)]
        assert texts == [second.reset(seed=s)[0] for s in range(6)]
        assert len(set(texts)) > 3
    rooms = [generate_room(np.random.default_rng(11), 6, 6, 2) for _ in range(2)]
    assert rooms[0].start == rooms[1].start and rooms[0].solution == rooms[1].solution
    state = random.getstate(), np.random.get_state()[1].tobytes()
    make_env("sokoban/6x6_2box").reset(seed=3)
    assert (random.getstate(), np.random.get_state()[1].tobytes()) == state  # the global RNGs are untouched


def test_generator_and_tasks_refuse_bad_arguments():
    from verlog.envs.sokoban import make_sokoban

    with pytest.raises(ValueError, match="4x4"):
        generate_room(np.random.default_rng(0), 3, 6, 1)
    with pytest.raises(ValueError, match="box"):
        generate_room(np.random.default_rng(0), 6, 6, 0)
    with pytest.raises(ValueError, match="Sokoban task"):
        make_sokoban("5x5_9box")


# ----------------------------------------------------------------------------- text env contract
#: The first observation of ``sokoban/6x6_1box`` at seed 0.
GOLDEN_FIRST_OBSERVATION = """\
Legend: # wall, _ floor, O target, X box, * box on a target, P you, S you on a target.
# # # # # #
# # # # # #
# # # # # #
# # # _ # #
# # O X P #
# # # # # #
Boxes on targets: 0 of 1."""


def test_text_of_one_seed_is_the_golden_text():
    env = make_env("sokoban/6x6_1box")
    obs, info = env.reset(seed=0)
    assert obs == GOLDEN_FIRST_OBSERVATION
    assert info["valid_actions"] == ["up", "down", "left", "right"] and info["boxes_on_target"] == 0
    obs, reward, terminated, truncated, info = env.step("The box is left of me. **Action**: Left")  # shared parser
    assert info["action"] == "left" and info["action_valid"]
    assert obs.splitlines()[5] == "# # * P _ #" and terminated and reward == pytest.approx(10.9)


def test_state_key_is_the_exact_state():
    env = room_env("# # # # # #\n# P _ _ _ #\n# _ X _ _ #\n# _ _ _ O #\n# # # # # #")
    key = env.state_key
    env.step("ACTION: right")
    assert env.state_key != key
    env.step("ACTION: left")
    assert env.state_key == key  # same positions later in the episode: same key
    twin = room_env("# # # # # #\n# P _ _ _ #\n# _ X _ _ #\n# _ _ _ O #\n# # # # # #")
    assert twin.state_key == key
    moved_target = room_env("# # # # # #\n# P _ _ _ #\n# _ X _ _ #\n# _ _ O _ #\n# # # # # #")
    assert moved_target.state_key != key  # same positions, another room
    a, b = make_env("sokoban/6x6_2box"), make_env("sokoban/6x6_2box")
    a.reset(seed=4)
    b.reset(seed=4)
    assert a.state_key == b.state_key
    b.reset(seed=5)
    assert a.state_key != b.state_key
    wrapped = StateKeyInfo(make_env("sokoban/6x6_1box"))
    _, info = wrapped.reset(seed=1)
    assert isinstance(info["state_key"], int)
    with pytest.raises(RuntimeError, match="reset"):
        _ = make_env("sokoban/6x6_1box").state_key


def test_gymnasium_env_checker_accepts_the_env():
    from gymnasium.utils.env_checker import check_env

    for task in TASKS:
        env = make_env(task)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_env(env, skip_render_check=True)
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs) and env.observation_space.contains(env.instruction)


def test_env_pickles_and_vector_envs_run():
    env = make_env("sokoban/6x6_2box")
    env.reset(seed=4)
    env.step("ACTION: up")
    twin = pickle.loads(pickle.dumps(env))
    for action in ("left", "down", "right", "up"):
        assert twin.step(f"ACTION: {action}")[0] == env.step(f"ACTION: {action}")[0]
    vec = make_vector_env("sokoban/6x6_1box", 2, seed=0, mode="sync", env_kwargs={"instruction_style": "brief"})
    obs, infos = vec.reset()
    assert len(obs) == 2 and obs[0] != obs[1]
    for _ in range(5):
        obs, rewards, terminated, truncated, infos = vec.step(["ACTION: up", "ACTION: left"])
        assert len(obs) == 2
    vec.close()


def test_registry_catalog_instructions_and_constructor_checks():
    assert ENV_TASKS["sokoban"] == tuple(SOKOBAN_TASKS)
    env = make_env("sokoban/8x8_2box")
    assert env.max_steps == SOKOBAN_MAX_STEPS and (env.height, env.width, env.num_boxes) == (8, 8, 2)
    full = env.instruction
    for phrase in ("push all 2 boxes", "- #: wall", "- *: box on a target", "ACTION: <action>", "up, down, left, right", "cannot pull"):
        assert phrase in full, phrase
    brief = make_env("sokoban/6x6_1box", instruction_style="brief").instruction
    assert "ACTION: <action>" in brief and all(a in brief for a in SOKOBAN_ACTIONS) and len(brief) < len(full) / 4
    with pytest.raises(ValueError, match="instruction_style"):
        make_env("sokoban/6x6_1box", instruction_style="long")
    with pytest.raises(ValueError, match="max_steps"):
        make_env("sokoban/6x6_1box", max_steps=0)
    with pytest.raises(ValueError, match="4x4"):
        SokobanTextEnv(3, 3, 1)
    with pytest.raises(RuntimeError, match="reset"):
        make_env("sokoban/6x6_1box").describe()


def test_config_checks_accept_sokoban_with_gigpo_and_suggest_a_misspelt_size():
    from verlog.config import ConfigError, load_recipe
    from verlog.preflight import check_buildable, check_state_keys

    cfg = load_recipe("tiny", ["env.task=sokoban/6x6_1box", "algorithm=gigpo", "algo.group_size=2"])
    check_buildable(cfg)
    check_state_keys(cfg)  # builds the env and reads its state key
    with pytest.raises(ConfigError, match="did you mean 'sokoban/6x6_1box'"):
        check_buildable(load_recipe("tiny", ["env.task=sokoban/6x6_1bx"]))
