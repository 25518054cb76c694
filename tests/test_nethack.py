"""Tests of the MiniHack and NetHack (NLE) text envs and their shared text rendering."""

from __future__ import annotations

import json
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
from nle import nethack

from verlog.envs import make_env, make_vector_env
from verlog.envs.registry import is_registered
from verlog.envs import nethack_actions as na
from verlog.envs import nethack_glyphs as ng
from verlog.envs import nethack_screen as ns
from verlog.envs import nethack_text as nt
from verlog.envs.base import INFO_KEYS
from verlog.envs.minihack import MINIHACK_TASKS
from verlog.envs.nle import NLE_ACTION_NAMES, NLE_NAMED_ACTIONS, load_progression_table, progression_of
from helpers import transcript_digest

MOVES = ["north", "east", "south", "west", "northeast", "southeast", "southwest", "northwest"]
FAR = [f"far {m}" for m in MOVES]
QUEST_ACTIONS = MOVES + FAR + [
    "down", "wait", "more", "apply", "close", "open", "eat", "force", "kick", "loot",
    "pickup", "pray", "puton", "quaff", "search", "zap",
]  # fmt: skip
STONE = nethack.GLYPH_CMAP_OFF + 0
VALKYRIE = "val-hum-neu-fem"


def _mon(name: str) -> int:
    return next(i for i in range(nethack.NUMMONS) if nethack.permonst(i).mname == name)


def _obj(name: str) -> int:
    return next(i for i in range(nethack.NUM_OBJECTS) if nethack.OBJ_NAME(nethack.objclass(i)) == name)


def _cmap(index: int) -> int:
    return nethack.GLYPH_CMAP_OFF + index


def _section(obs: str, header: str) -> list[str]:
    """The lines of one ``header:`` section of an observation."""
    body = obs.split(f"{header}:\n", 1)[1]
    return body if header == "map" else body.split("\n\n", 1)[0].split("\n")


@pytest.fixture(scope="module")
def nle_env():
    env = make_env("nle/NetHackChallenge", env_kwargs={"character": VALKYRIE}, text_style="tidy")
    yield env
    env.close()


# ----------------------------------------------------------------------------------------- rendering
def test_offset_text():
    assert ng.offset_text(0, 1) == "adjacent east"
    assert ng.offset_text(-1, -1) == "adjacent northwest"
    assert ng.offset_text(1, 0) == "adjacent south"
    assert ng.offset_text(-3, -3) == "3 steps northwest"
    assert ng.offset_text(0, -4) == "4 steps west"
    assert ng.offset_text(2, 0) == "2 steps south"
    assert ng.offset_text(2, 5) == "2 steps south and 5 steps east"
    assert ng.offset_text(-1, 2) == "1 step north and 2 steps east"
    assert ng.offset_text(0, 0) == "here"


def test_describe_surroundings_on_hand_made_glyphs():
    glyphs = np.full((21, 79), STONE, dtype=np.int16)
    x, y = 10, 5
    glyphs[y, x] = nethack.GLYPH_MON_OFF + _mon("valkyrie")
    glyphs[y, x + 1] = nethack.GLYPH_PET_OFF + _mon("kitten")
    glyphs[y - 1, x] = _cmap(2)  # horizontal wall
    glyphs[y + 1, x] = _cmap(19)  # floor of a room: never listed
    glyphs[y - 3, x - 3] = _cmap(24)  # staircase down
    glyphs[y, x + 9] = _cmap(1)  # a far wall: not listed
    glyphs[y + 4, x] = _cmap(21)  # a far corridor: not listed
    glyphs[y + 2, x + 5] = nethack.GLYPH_OBJ_OFF + _obj("long sword")
    glyphs[y + 2, x - 5] = nethack.GLYPH_OBJ_OFF + _obj("gain level")  # a potion: named by its class
    glyphs[y - 2, x + 2] = nethack.GLYPH_OBJ_OFF + _obj("ruby")
    for k in range(4):  # four newts in a row: only the 3 nearest are listed
        glyphs[y + 7, x + 2 * k] = nethack.GLYPH_MON_OFF + _mon("newt")
    assert ng.describe_surroundings(glyphs, x, y) == [
        "wall adjacent north",
        "tame kitten adjacent east",
        "red gem 2 steps northeast",
        "staircase down 3 steps northwest",
        "potion 2 steps south and 5 steps west",
        "long sword 2 steps south and 5 steps east",
        "newt 7 steps south",
        "newt 7 steps south and 2 steps east",
        "newt 7 steps south and 4 steps east",
    ]
    assert ng.cursor_line(glyphs, x, y) == "Yourself a valkyrie (x=10, y=5)"
    with pytest.raises(ValueError, match="outside"):
        ng.describe_surroundings(glyphs, 79, 0)


def test_glyph_kinds_match_nethack_symbols():
    names, kinds = ng.glyph_table()
    assert len(names) == nethack.MAX_GLYPH
    explanation = lambda i: nethack.symdef.from_idx(i).explanation  # noqa: E731
    assert {explanation(i) for i in ng._CMAP_ADJACENT} == {"wall", "iron bars", "tree", "corridor", "lit corridor"}
    assert {explanation(i) for i in (0, 19, 20)} == {"dark part of a room", "floor of a room"}
    assert explanation(24) == "staircase down" and kinds[_cmap(24)] == ng.KIND_ANY
    assert kinds[STONE] == kinds[_cmap(19)] == ng.KIND_SKIP
    assert kinds[_cmap(2)] == ng.KIND_ADJACENT
    assert names[nethack.GLYPH_BODY_OFF + _mon("newt")] == "newt corpse"
    assert names[nethack.GLYPH_OBJ_OFF + _obj("boulder")] == "boulder"


def test_map_message_and_inventory_helpers():
    tty = np.full((24, 80), ord(" "), dtype=np.uint8)
    tty[0, :13] = np.frombuffer(b"Hello--More--", dtype=np.uint8)
    tty[6, 2:5] = np.frombuffer(b"@..", dtype=np.uint8)
    lines = ns.render_map(tty).split("\n")
    assert len(lines) == 23 and lines[5] == "  @.." and lines[0] == "" and lines[-1] == ""
    assert ns.find_more(tty) == (0, 5)
    assert ns.more_text(tty, 0, 5) == "Hello"
    window = np.full((24, 80), ord(" "), dtype=np.uint8)  # a text window at column 40, rows 0-2
    for row, text in enumerate([b"Things that are here:", b"a dagger", b"a rock"]):
        window[row, 40 : 40 + len(text)] = np.frombuffer(text, dtype=np.uint8)
    window[3, 40:48] = np.frombuffer(b"--More--", dtype=np.uint8)
    window[1, :5] = np.frombuffer(b"|...|", dtype=np.uint8)  # map left of the window is ignored
    assert ns.find_more(window) == (3, 40)
    assert ns.more_text(window, 3, 40) == "Things that are here:\na dagger\na rock"
    assert ns.find_more(np.full((24, 80), 32, dtype=np.uint8)) is None

    message = np.zeros(256, dtype=np.uint8)
    message[:5] = np.frombuffer(b"Hi!  ", dtype=np.uint8)
    assert ns.decode_message(message) == "Hi!"
    letters = np.zeros(55, dtype=np.uint8)
    strs = np.zeros((55, 80), dtype=np.uint8)
    assert ns.render_inventory(letters, strs) == "Inventory:\n(empty)"
    for i, (letter, text) in enumerate([(b"a", b"a +1 long sword (weapon in hand)"), (b"d", b"a food ration")]):
        letters[i] = letter[0]
        strs[i, : len(text)] = np.frombuffer(text, dtype=np.uint8)
    assert ns.render_inventory(letters, strs) == "Inventory:\na: a +1 long sword (weapon in hand)\nd: a food ration"
    with pytest.raises(ValueError, match="uint8"):
        ns.render_map(np.zeros((24, 80), dtype=np.int16))


class _RoomEnv(nt.NetHackTextEnvBase):
    """A hand-made MiniHack room (walls, a sleeping peaceful kitten, a fountain, the stairs down)."""

    def __init__(self) -> None:
        from minihack import LevelGenerator

        level = LevelGenerator(map="---------\n|.......|\n|.......|\n|.......|\n|.......|\n---------", lit=True)
        level.set_start_pos((1, 1))
        level.add_monster(name="kitten", place=(2, 1), args=("peaceful", "asleep"))
        level.add_fountain((6, 1))
        level.add_stair_down((4, 4))
        kwargs = {
            "des_file": level.get_des(),
            "character": VALKYRIE,
            "max_episode_steps": nt.NATIVE_STEP_LIMIT,
            "fix_moon_phase": True,
        }
        env = nt.make_nle_env("MiniHack-Navigation-Custom-v0", kwargs)
        super().__init__(env, MOVES, max_steps=20, format_penalty=0.0, text_style="tidy")

    default_action = "north"
    instruction = "test room"
    progression = 0.0


def test_real_room_text_is_hand_checkable():
    env = _RoomEnv()
    obs, info = env.reset(seed=0)
    assert _section(obs, "message") == ["You are lucky!  Full moon tonight."]  # fix_moon_phase: from the seed
    assert _section(obs, "language observation") == [
        "wall adjacent northwest",
        "wall adjacent north",
        "wall adjacent northeast",
        "wall adjacent west",
        "kitten adjacent east",
        "wall adjacent southwest",
        "staircase down 3 steps southeast",
        "fountain 5 steps east",
    ]
    cursor = _section(obs, "cursor")[0]
    assert cursor.startswith("Yourself a valkyrie (x=")
    x, y = (int(part.split("=")[1]) for part in cursor[cursor.index("(") + 1 : -1].split(", "))
    lines = _section(obs, "map").split("\n")
    assert len(lines) == 23 and lines[y][x] == "@" and lines[y + 3][x + 3] == ">" and lines[y][x + 5] == "{"
    assert "Dlvl:1" in lines[-1] and lines[-2].startswith("Agent the")
    assert env.context.startswith("Inventory:\na: a +1 long sword")
    for _ in range(2):
        obs, reward, terminated, truncated, info = env.step("ACTION: southeast")
        assert not (terminated or truncated)
    assert "staircase down adjacent southeast" in _section(obs, "language observation")
    obs, reward, terminated, truncated, info = env.step("ACTION: southeast")
    assert terminated and not truncated and reward >= 1.0
    env.close()


# ----------------------------------------------------------------------------------------- actions
@pytest.mark.parametrize(
    "task, expected",
    [
        ("MazeWalk-9x9", MOVES),
        ("MazeWalk-15x15", MOVES),
        ("CorridorBattle-Dark", MOVES),
        ("Corridor-R3", MOVES + ["open", "kick", "search"]),
        ("Quest-Easy", QUEST_ACTIONS),
        ("Quest-Medium", QUEST_ACTIONS),
    ],
)
def test_minihack_action_tables_and_every_action_executes(task, expected):
    env = make_env(f"minihack/{task}")
    assert env.valid_actions == expected and env.default_action == "north"
    for name in expected:
        index = env._action_index[name]
        assert int(env.nle.actions[index]) == na.NAMED_ACTIONS[name]
        env.reset(seed=1)
        _, _, _, _, info = env.step(f"ACTION: {name}")
        assert info["action"] == name and info["action_valid"]
    env.close()


def test_nle_action_table():
    assert len(NLE_ACTION_NAMES) == len(set(NLE_ACTION_NAMES)) == len(NLE_NAMED_ACTIONS) + 52 + 10
    assert NLE_NAMED_ACTIONS[:8] == tuple(MOVES) and NLE_NAMED_ACTIONS[8:16] == tuple(FAR)
    assert {"esc", "zap", "annotate", "teleport", "travel", "minus", "apos", "space"} <= set(NLE_NAMED_ACTIONS)
    assert "overview" not in NLE_NAMED_ACTIONS and "shell" not in NLE_NAMED_ACTIONS
    assert not any(len(a) == 2 and a.isdigit() for a in NLE_ACTION_NAMES)  # no 00-99
    named_keys = set(na.NAMED_ACTIONS.values())
    useful = {int(a) for a in nethack.USEFUL_ACTIONS} - {int(nethack.Command.SHELL)}
    assert useful <= named_keys  # every useful command has a name
    assert all(name in na.ACTION_GLOSSES for name in NLE_NAMED_ACTIONS)


def test_every_nle_action_executes(nle_env):
    assert nle_env.valid_actions == list(NLE_ACTION_NAMES) and nle_env.default_action == "esc"
    for name in NLE_ACTION_NAMES:
        index = nle_env._action_index[name]
        assert int(nle_env.nle.actions[index]) == (na.NAMED_ACTIONS[name] if len(name) > 1 else ord(name))
        nle_env.reset(seed=2)
        _, _, _, _, info = nle_env.step(f"ACTION: {name}")
        assert info["action"] == name


def test_nle_letters_keep_their_case(nle_env):
    parse = nle_env.parse_action
    assert parse("ACTION: A") == "A" and parse("ACTION: a") == "a"
    assert parse("I think so.\nAction: `Q`") == "Q" and parse("**ACTION**: q.") == "q"
    assert parse("Z") == "Z" and parse(" z ") == "z"
    assert parse("ACTION: 7") == "7" and parse("ACTION: far north") == "far north"
    assert parse("ACTION: Esc") == "esc" and parse("ACTION: 42") is None and parse("hello there") is None


# ----------------------------------------------------------------------------------------- game loop
def test_more_is_dismissed_automatically(nle_env):
    nle_env.reset(seed=5)  # a valkyrie holds items a-d only
    _, _, _, _, info = nle_env.step("ACTION: tip")
    assert nle_env.message == "What do you want to tip? [*]" and info["more_presses"] == 0
    obs, _, terminated, truncated, info = nle_env.step("ACTION: y")  # "You don't have that object.--More--"
    assert info["more_presses"] == 1 and info["episode_step"] == 2 and not (terminated or truncated)
    assert _section(obs, "message") == ["You don't have that object.", "What do you want to tip? [*]"]
    assert "--More--" not in obs
    nle_env.step("ACTION: esc")
    assert nle_env.message == "Never mind."


@pytest.mark.parametrize("name", ["minihack/Quest-Easy", "minihack/MazeWalk-15x15", "nle/NetHackChallenge"])
def test_same_seed_same_actions_same_episode(name):
    env = make_env(name)
    rng = np.random.default_rng(0)
    actions = [env.valid_actions[i] for i in rng.integers(0, len(env.valid_actions), 40)]

    def play(e, seed):
        obs, info = e.reset(seed=seed)
        out = [(obs, info["context"])]
        for action in actions:
            obs, reward, terminated, truncated, info = e.step(f"ACTION: {action}")
            out.append((obs, reward, terminated, truncated, info["context"]))
            if terminated or truncated:
                break
        return out

    first = play(env, 11)
    assert play(env, 11) == first  # the same env object, after another episode
    assert play(make_env(name), 11) == first  # a fresh env
    assert play(env, 12)[0] != first[0]
    env.reset(seed=3)
    after_3 = env.reset()[0]  # seed=None continues the env's own RNG
    env.reset(seed=3)
    assert env.reset()[0] == after_3


def test_minihack_success_progression_and_no_done_latch():
    env = make_env("minihack/MazeWalk-9x9", text_style="tidy")
    for seed in range(200):  # find a maze whose stairs start next to the agent
        obs, info = env.reset(seed=seed)
        near = [line for line in _section(obs, "language observation") if line.startswith("staircase down adjacent")]
        if near:
            break
    else:
        pytest.fail("no maze with the stairs next to the start in 200 seeds")
    assert info["progression"] == 0.0 and not info["success"]
    direction = near[0].split()[-1]
    obs, reward, terminated, truncated, info = env.step(f"ACTION: {direction}")
    assert reward >= 1.0 and terminated and not truncated
    assert info["progression"] == 1.0 and info["success"]
    assert _section(obs, "cursor") == ["The game is over."] and _section(obs, "language observation") == [
        "(nothing noteworthy)"
    ]
    # A goal step that took no game time (a fast character) also gets MiniHack's -0.01 penalty: reward
    # 0.99. BALROG's "reward >= 1" would call it a failure; the goal was reached, so it is a success.
    env.reset(seed=seed)
    env.nle._get_time_penalty = lambda last, new: -0.01
    _, reward, terminated, _, info = env.step(f"ACTION: {direction}")
    assert reward == pytest.approx(0.99) and terminated and info["success"] and info["progression"] == 1.0
    del env.nle._get_time_penalty
    for _ in range(3):  # several later episodes on the same object: nothing is latched
        obs, info = env.reset()
        assert info["progression"] == 0.0 and info["episode_step"] == 0
        for step in range(1, 101):
            obs, reward, terminated, truncated, info = env.step("ACTION: west")
            if terminated:
                assert info["success"]
                break
            assert truncated == (step == 100) and reward <= 0.0
        assert terminated or truncated


def test_minihack_limits_and_kwargs():
    env = make_env("minihack/Corridor-R3", max_steps=3, format_penalty=-0.5, instruction_style="brief")
    assert env.nle._max_episode_steps >= 10**9  # MiniHack's own limit never ends an episode first
    assert make_env("minihack/Corridor-R3").max_steps == 100
    assert env.instruction.startswith("MiniHack:") and "ACTION: <action>" in env.instruction
    assert all(a in env.instruction for a in env.valid_actions)
    obs, info = env.reset(seed=0)
    assert set(info) == set(INFO_KEYS) | {"more_presses", "turn"}
    obs, reward, terminated, truncated, info = env.step("I have no idea")
    assert info["action"] == "north" and not info["action_valid"] and reward == pytest.approx(info["game_reward"] - 0.5)
    assert obs.startswith("Your previous reply did not contain a valid action")
    env.step("ACTION: search")
    _, _, terminated, truncated, _ = env.step("ACTION: kick")
    assert truncated and not terminated
    full = make_env("minihack/Quest-Easy").instruction
    assert "staircase down" in full and all(f"- {a}:" in full for a in QUEST_ACTIONS)
    with pytest.raises(ValueError, match="instruction_style"):
        make_env("minihack/Quest-Easy", instruction_style="long")
    with pytest.raises(ValueError, match="must not set"):
        make_env("minihack/Quest-Easy", env_kwargs={"max_episode_steps": 5})


def test_boxoban_says_why_it_is_missing():
    with pytest.raises(ValueError, match="boxoban-levels"):
        make_env("minihack/Boxoban-Hard")
    with pytest.raises(ValueError, match="boxoban-levels"):
        make_env("minihack/Boxoban-Medium")


def test_registry_names():
    for task in MINIHACK_TASKS:
        assert is_registered(f"minihack/{task}")
    assert is_registered("nle/NetHackChallenge") and is_registered("nle/default")
    assert set(MINIHACK_TASKS) == {
        "MazeWalk-9x9", "MazeWalk-15x15", "Corridor-R3", "CorridorBattle-Dark", "Quest-Easy", "Quest-Medium",
    }  # fmt: skip
    assert all(env_id == f"MiniHack-{task}-v0" for task, (env_id, _) in MINIHACK_TASKS.items())


# ----------------------------------------------------------------------------------------- NetHack
def test_progression_table_lookup():
    dlvl, xp = load_progression_table()
    assert len(dlvl) == 50 and len(xp) == 30 and dlvl[1] == xp[1] == 0.0
    assert progression_of(1, 1) == 0.0 and progression_of(0, 0) == 0.0
    assert progression_of(2, 1) == pytest.approx(0.0154, abs=5e-5)
    assert progression_of(3, 1) == pytest.approx(0.0175, abs=5e-5)
    assert progression_of(10, 1) == pytest.approx(0.1256, abs=5e-5)
    assert progression_of(1, 2) == pytest.approx(0.0185, abs=5e-5)
    assert progression_of(1, 10) == pytest.approx(0.1791, abs=5e-5)
    assert progression_of(10, 10) == pytest.approx(0.1791, abs=5e-5)  # max over both
    assert progression_of(50, 1) == pytest.approx(0.8068, abs=5e-5)
    assert progression_of(1, 30) == pytest.approx(0.7805, abs=5e-5)
    assert progression_of(60, 40) == 0.0  # levels beyond the table count 0, as in BALROG
    raw = json.loads((Path(nt.__file__).parent / "data" / "nethack_progression.json").read_text(encoding="utf-8"))
    assert "balrog-ai/BALROG" in raw["source"] and "achievements.json" in raw["source"] and raw["derived_from"]


def test_nle_progression_follows_the_deepest_level(nle_env):
    obs, info = nle_env.reset(seed=0)
    assert info["progression"] == 0.0 and info["max_depth"] == 1 and info["max_xp_level"] == 1
    real = nle_env._obs
    fake = dict(real, blstats=real["blstats"].copy())
    nle_env._obs = fake
    fake["blstats"][nethack.NLE_BL_DEPTH] = 3
    nle_env._on_observation(False, 0.0, False, 0)
    assert nle_env.progression == pytest.approx(0.0175, abs=5e-5)
    fake["blstats"][nethack.NLE_BL_DEPTH] = 2  # going back up keeps the maximum
    fake["blstats"][nethack.NLE_BL_XP] = 2
    nle_env._on_observation(False, 0.0, False, 0)
    assert nle_env.progression == pytest.approx(0.0185, abs=5e-5)
    nle_env.reset(seed=0)
    assert nle_env.progression == 0.0


def test_nle_stuck_steps_truncate():
    env = make_env("nle/NetHackChallenge", stuck_limit=3, env_kwargs={"character": VALKYRIE})
    assert make_env("nle/default").stuck_limit == 150 and make_env("nle/default").max_steps == 100_000
    assert env.nle._max_episode_steps >= 10**9 and env.nle.no_progress_timeout >= 10**9
    obs, info = env.reset(seed=4)
    keys = set(info)
    assert keys == set(INFO_KEYS) | {"more_presses", "turn", "stuck_steps", "max_depth", "max_xp_level", "score"}
    for expected in (1, 2):
        _, _, terminated, truncated, info = env.step("ACTION: esc")  # takes no game time
        assert info["stuck_steps"] == expected and not (terminated or truncated)
    _, _, _, _, info = env.step("ACTION: search")  # takes a turn: the count restarts
    assert info["stuck_steps"] == 0
    for expected in (1, 2, 3):
        _, _, terminated, truncated, info = env.step("ACTION: esc")
        assert set(info) == keys and info["stuck_steps"] == expected
    assert truncated and not terminated
    obs, info = env.reset()  # no latch: the next episode runs
    _, _, terminated, truncated, info = env.step("ACTION: search")
    assert not (terminated or truncated) and info["stuck_steps"] == 0 and info["episode_step"] == 1


def test_nle_game_over_is_a_termination(nle_env, monkeypatch):
    nle_env.reset(seed=0)
    real_step = nle_env.nle.step

    def dying_step(index):
        obs, reward, done, truncated, info = real_step(index)
        return obs, reward, True, False, info

    monkeypatch.setattr(nle_env.nle, "step", dying_step)
    _, _, terminated, truncated, info = nle_env.step("ACTION: north")
    assert terminated and not truncated and not info["success"]
    monkeypatch.setattr(nle_env.nle, "step", real_step)
    nle_env.reset(seed=0)
    _, _, terminated, truncated, _ = nle_env.step("ACTION: north")
    assert not (terminated or truncated)


def test_nle_text_and_instruction(nle_env):
    obs, info = nle_env.reset(seed=1)
    for header in ("message", "language observation", "cursor", "map"):
        assert f"{header}:\n" in obs
    cursor = _section(obs, "cursor")[0]
    x, y = (int(part.split("=")[1]) for part in cursor[cursor.index("(") + 1 : -1].split(", "))
    assert _section(obs, "map").split("\n")[y][x] == "@" and cursor.startswith("Yourself a valkyrie")
    assert info["context"].startswith("Inventory:\na: a +1 long sword") and "Inventory" not in obs
    full = nle_env.instruction
    assert all(f"- {name}:" in full for name in NLE_NAMED_ACTIONS[16:])
    assert "ACTION: <action>" in full and "a ... z, A ... Z" in full
    brief = make_env("nle/default", instruction_style="brief").instruction
    assert len(brief) < len(full) / 3 and "esc" in brief and "ACTION: <action>" in brief
    # a rejected reply runs esc
    _, _, _, _, info = nle_env.step("I refuse")
    assert info["action"] == "esc" and not info["action_valid"]


def test_factories_pickle_and_run_in_async_vector_env():
    from verlog.envs.registry import _FACTORIES

    pickle.dumps(_FACTORIES["minihack/MazeWalk-9x9"])
    pickle.dumps(_FACTORIES["nle/NetHackChallenge"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        venv = make_vector_env("minihack/MazeWalk-9x9", 2, seed=0, env_kwargs={"max_steps": 2})
        try:
            obs, infos = venv.reset()
            assert len(obs) == 2 and all("map:\n" in o for o in obs)
            for _ in range(2):
                obs, rewards, terminated, truncated, infos = venv.step(["ACTION: north", "ACTION: west"])
            assert all(terminated | truncated)
        finally:
            venv.close()


# ----------------------------------------------------------------------------- fast rendering = reference
def _reference_describe(glyphs: np.ndarray, x: int, y: int) -> list[str]:
    """The language observation by its definition, one square at a time (slow, obviously right)."""
    names, kinds = ng.glyph_table()
    items = []
    for r in range(glyphs.shape[0]):
        for c in range(glyphs.shape[1]):
            dist = max(abs(r - y), abs(c - x))
            kind = kinds[glyphs[r, c]]
            if dist == 1 and kind != ng.KIND_SKIP or dist > 1 and kind == ng.KIND_ANY:
                items.append((dist, r, c, names[glyphs[r, c]]))
    lines, counts = [], {}
    for dist, r, c, name in sorted(items):
        if dist > 1:
            counts[name] = counts.get(name, 0) + 1
            if counts[name] > ng.MAX_PER_NAME:
                continue
        lines.append(f"{name} {ng.offset_text(r - y, c - x)}")
    return lines[: ng.MAX_DESCRIPTION_LINES]


def _reference_map(tty: np.ndarray) -> str:
    return "\n".join(bytes(row).rstrip(b" ").decode("latin-1") for row in tty[1:])


def test_fast_rendering_equals_the_reference_on_random_screens():
    rng = np.random.default_rng(7)
    for trial in range(60):
        glyphs = np.full((21, 79), STONE, dtype=np.int16)
        cells = rng.integers(0, glyphs.size, rng.integers(0, 120 if trial % 2 else 1000))
        glyphs.flat[cells] = rng.integers(0, nethack.MAX_GLYPH, cells.size)
        x, y = int(rng.integers(0, 79)), int(rng.integers(0, 21))
        if trial % 5 == 0:  # corners and edges
            x, y = [0, 78][trial % 2], [0, 20][(trial // 2) % 2]
        assert ng.describe_surroundings(glyphs, x, y) == _reference_describe(glyphs, x, y)
        # bytes 0, 32 and 255 included: spaces, NULs and the latin-1 top byte, trailing or not
        tty = rng.choice(np.array([0, 32, 32, 32, 46, 64, 255], dtype=np.uint8), size=(24, 80))
        tty[rng.integers(0, 24, 5)] = 32  # some blank rows
        assert ns.render_map(tty) == _reference_map(tty)


def test_cursor_line_of_every_glyph_equals_the_reference():
    names, _ = ng.glyph_table()
    for glyph, name in enumerate(names):
        name = name if nethack.glyph_is_monster(glyph) else ""
        who = f"Yourself {'an' if name[:1].lower() in 'aeiou' else 'a'} {name}" if name else "Yourself"
        assert ng.cursor_line(np.full((2, 3), glyph, dtype=np.int16), 2, 1) == f"{who} (x=2, y=1)"


@pytest.mark.parametrize("name", ["nle/NetHackChallenge", "minihack/Quest-Medium"])
def test_fast_rendering_equals_the_reference_in_play(name):
    env = make_env(name, text_style="tidy")
    env.reset(seed=5)
    rng = np.random.default_rng(5)
    for i in rng.integers(0, len(env.valid_actions), 150):
        _, _, terminated, truncated, _ = env.step(f"ACTION: {env.valid_actions[i]}")
        glyphs, blstats, tty = env._obs["glyphs"], env._obs["blstats"], env._obs["tty_chars"]
        x, y = int(blstats[nethack.NLE_BL_X]), int(blstats[nethack.NLE_BL_Y])
        if env.nle.nethack.in_normal_game() and 0 <= x < 79 and 0 <= y < 21:
            assert _section(env.describe(), "language observation") == (
                _reference_describe(glyphs, x, y) or ["(nothing noteworthy)"]
            )
        assert _section(env.describe(), "map") == _reference_map(tty)
        if terminated or truncated:
            env.reset()
    env.close()


# Digests of whole seeded episodes (observations, rewards, ends, info) in the tidy text, recorded with
# nle 1.3.0 and minihack 1.0.2 before the rendering was optimised: any change to the text shows up
# here. NetHack's was recorded again when "turn" took BALROG's name "turnundead" (info lists the
# actions); with the old name it still gives the first digest, c426f9b2...
TRANSCRIPT_DIGESTS = {
    "nle/NetHackChallenge": "66101748eed74cd91c88e681a58cb0f23cb9527c52ec4b99a6c39a8e383fe021",
    "minihack/Quest-Medium": "e0d2573796e74e4867edb33a44798fe880aad509392142c4076b4f48830b0fe5",
    "minihack/CorridorBattle-Dark": "16a4ea95488665b057388ae309ff2cdbb7fe31af8c3eff7bb8400542b1c86e09",
    "minihack/MazeWalk-15x15": "965a05bcab186f93dd9cc384b8d907038caf90ad219b298f1ecea09b9e6aaf78",
}


@pytest.mark.parametrize("name", sorted(TRANSCRIPT_DIGESTS))
def test_episodes_match_the_pinned_transcripts(name):
    assert transcript_digest(name, text_style="tidy") == TRANSCRIPT_DIGESTS[name]
