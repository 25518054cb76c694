"""BALROG's MiniHack and NetHack text, byte for byte: the golden corpus of BALROG's own output replayed
step by step, the text rules on hand-made inputs, and the tidy option."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from nle import nethack

from verlog.config import load_recipe
from verlog.envs import make_env
from verlog.envs import nethack_balrog_text as bt
from verlog.envs.minihack import MINIHACK_TASKS
from verlog.envs.nle import NLE_ACTION_NAMES

GOLDEN = Path(__file__).parent / "data" / "balrog_nle.jsonl.gz"
_LINES = gzip.decompress(GOLDEN.read_bytes()).decode("utf-8").splitlines()
HEADER = json.loads(_LINES[0])
EPISODES = [json.loads(line) for line in _LINES[1:]]


def _env_name(episode: dict) -> str:
    if episode["family"] == "nle":
        return "nle/NetHackChallenge"
    return "minihack/" + episode["task"].removeprefix("MiniHack-").removesuffix("-v0")


def _message(text: str) -> str:
    return text.split("\n\nlanguage observation:\n")[0].removeprefix("message:\n")


def _is_cut_by_minihacks_limit(episode: dict, index: int) -> bool:
    """The one listed difference: the last observation of a MiniHack episode cut at BALROG's 100 steps
    (there NLE's own limit aborts the game and shows its end screen; Verlog keeps the live game)."""
    step = episode["steps"][index]
    return episode["family"] == "minihack" and index == 100 and step["truncated"]


# ----------------------------------------------------------------------------- the golden corpus
def test_corpus_is_balrogs_output_and_covers_the_rules():
    assert HEADER["balrog_commit"].startswith("af7d1f1")
    assert HEADER["versions"]["nle-language-wrapper"] == "0.2.0" and HEADER["versions"]["nle"] == "1.3.0"
    steps = {family: [s for ep in EPISODES if ep["family"] == family for s in ep["steps"]] for family in ("minihack", "nle")}
    assert len(steps["minihack"]) >= 300 and len(steps["nle"]) >= 300
    assert {_env_name(ep) for ep in EPISODES if ep["family"] == "minihack"} == {f"minihack/{t}" for t in MINIHACK_TASKS}
    for ep in EPISODES:
        assert len(ep["steps"]) == len(ep["actions"]) + 1
    nle_steps = steps["nle"]
    # --More-- joined into one message, menus ending in (end) and paged windows (n of m)
    assert sum("\n" in _message(s["text"]) and "--More--" not in _message(s["text"]) for s in nle_steps) >= 30
    assert sum(_message(s["text"]).endswith("(end)") for s in nle_steps) >= 5
    assert any(" of " in _message(s["text"]).rsplit("\n", 1)[-1] for s in nle_steps)
    everything = [s for family in steps.values() for s in family]
    assert sum(", and " in s["text"] for s in everything) >= 50  # three or more directions
    assert sum("\ncursor:\n\n(x=" in s["text"] for s in everything) >= 50  # the cursor off the map
    assert sum("\ncursor:\nYourself a " in s["text"] for s in everything) >= 300
    assert any(s.get("terminated") for s in steps["minihack"])  # a death
    assert any(s.get("truncated") for s in steps["minihack"])  # BALROG's 100-step limit
    assert any(s.get("reward", 0) > 0 for s in nle_steps)  # score from a kill or gold


@pytest.mark.parametrize("episode", EPISODES, ids=lambda ep: f"{_env_name(ep)}-seed{ep['seed']}")
def test_replay_gives_balrogs_text_rewards_and_ends(episode):
    env = make_env(_env_name(episode))
    obs, info = env.reset(seed=episode["seed"])
    got = [(obs, info["context"], None)]
    for action in episode["actions"]:
        obs, reward, terminated, truncated, info = env.step(f"ACTION: {action}")
        assert info["action_valid"], action
        got.append((obs, info["context"], (reward, terminated, truncated)))
    env.close()
    for index, (want, (text, context, ends)) in enumerate(zip(episode["steps"], got)):
        if index:
            assert ends == (want["reward"], want["terminated"], want["truncated"]), index
        if _is_cut_by_minihacks_limit(episode, index):
            # BALROG: the aborted game's screen, seen from square (0, 0); Verlog: the game the agent was in
            assert "\ncursor:\nYourself a " not in want["text"] and "\ncursor:\nYourself a " in text
            continue
        assert text == want["text"], index
        assert context == want["context"], index


# ----------------------------------------------------------------------------- the rules, by hand
def test_position_words_and_plurals():
    assert bt.position_words(1, 0) == ("adjacent", "east")
    assert bt.position_words(-2, -2) == ("very near", "southwest")
    assert bt.position_words(3, 1) == ("near", "eastnortheast")
    assert bt.position_words(-1, 5) == ("near", "northnorthwest")
    assert bt.position_words(6, 0) == ("far", "east") and bt.position_words(0, -20) == ("very far", "south")
    assert bt.position_words(0, 0) == ("very far", "")
    words = ["jackal", "fly", "donkey", "fox", "bush", "glass", "dwarf", "staff", "gas", "lich", "iron bars",
             "ice", "scroll labeled FOO", "unknown creature causing you worry"]  # fmt: skip
    assert [bt.plural(w) for w in words] == [
        "jackals", "flies", "donkeys", "foxes", "bushes", "glasses", "dwarves", "staves", "gases", "lichs",
        "iron bars", "area of ice", "scrolls labeled FOO", "unknown creatures causing you worry",
    ]  # fmt: skip


def _glyphs(cells: dict[tuple[int, int], int], fill: int | None = None) -> np.ndarray:
    floor = nethack.GLYPH_CMAP_OFF + 19 if fill is None else fill
    glyphs = np.full((bt.MAP_HEIGHT, bt.MAP_WIDTH), floor, dtype=np.int16)
    for (col, row), glyph in cells.items():
        glyphs[row, col] = glyph
    return glyphs


def test_description_orders_merges_and_stops_rays():
    wall, stairs, door = (nethack.GLYPH_CMAP_OFF + i for i in (1, 24, 12))
    jackal = nethack.GLYPH_MON_OFF + next(i for i in range(nethack.NUMMONS) if nethack.permonst(i).mname == "jackal")
    x, y = 40, 10
    cells = {(x + 3, y + dy): wall for dy in (-1, 0, 1)}  # a wall three columns east
    cells[(x + 7, y)] = stairs  # beyond the wall: screen names are listed anywhere
    cells[(x + 2, y)] = jackal  # a monster on the ray does not stop it
    cells[(x - 2, y)] = door  # a doorway is listed but does not stop the ray
    cells[(x - 5, y)] = wall
    cells[(x - 8, y)] = wall  # behind the first wall west: not listed
    assert bt.describe_glyphs(_glyphs(cells), x, y).split("\n") == [
        "stairs down far east",  # very far first, ..., adjacent last
        "vertical wall near east and west",  # one name at one distance: one line; the rays miss the others
        "jackal very near east",  # north, then clockwise
        "doorway very near west",
    ]
    # the same name, distance and direction twice: a plural line
    twice = {(x + 3, y): nethack.GLYPH_CMAP_OFF + 24, (x + 4, y): nethack.GLYPH_CMAP_OFF + 24}
    assert bt.describe_glyphs(_glyphs(twice), x, y) == "stairs downs near east"
    # a mass noun's plural is its singular: the plural line takes the singular's place and is written twice
    bars = nethack.GLYPH_CMAP_OFF + 17
    mass = {(x + 3, y): bars, (x + 4, y): bars, (x - 3, y): bars}
    assert bt.describe_glyphs(_glyphs(mass), x, y) == "bars near east\nbars near east"


def test_cursor_message_and_inventory_rules():
    x, y = 10, 5
    glyphs = _glyphs({(x, y): nethack.GLYPH_MON_OFF})
    name = nethack.permonst(0).mname
    assert bt.cursor_text(glyphs, x, y, y + 1, x) == f"Yourself a {name}"
    assert bt.cursor_text(glyphs, x, y, y + 1, x + 2) == "very near east "  # floor has no name
    assert bt.cursor_text(glyphs, x, y, 0, 30) == ""  # the message line
    tty = np.full((24, 80), ord(" "), dtype=np.uint8)

    def put(row: int, col: int, text: str) -> None:
        tty[row, col : col + len(text)] = np.frombuffer(text.encode(), dtype=np.uint8)

    assert bt.screen_message(tty) == ""
    put(0, 0, "Hello.")
    put(3, 0, "not part of the message")
    assert bt.screen_message(tty) == "Hello."  # no page end: the first row alone
    put(0, 79, "x")
    assert bt.screen_message(tty) == "Hello." + " " * 73 + "x"
    tty[0, :] = ord(" ")
    put(0, 79, "x")
    assert bt.screen_message(tty) == ""  # a lone last character is dropped
    tty[:] = ord(" ")
    put(0, 4, " Things that are here:")
    put(1, 0, "ab  a dagger")  # read from the first row's indent on
    put(2, 5, "(1 of 2)")
    assert bt.screen_message(tty) == "Things that are here:\ndagger\n(1 of 2)"
    assert bt.join_more("You hit it.--More--", "It dies.") == "You hit it.\nIt dies."
    letters = np.zeros(55, dtype=np.uint8)
    strs = np.zeros((55, 80), dtype=np.uint8)
    assert bt.inventory_text(letters, strs) == ""
    letters[:2] = [ord("a"), ord("b")]
    strs[0, :5] = np.frombuffer(b"a rug", dtype=np.uint8)
    strs[1, :4] = np.frombuffer(b"2 gp", dtype=np.uint8)
    assert bt.balrog_context(bt.inventory_text(letters, strs)) == "inventory:\na: a rug\nb: 2 gp\n"


def _screen_message_reference(tty: np.ndarray) -> str:
    """The message rule read row by row, as the module docstring states it (slow, for comparison)."""
    rows = [tty[i].tobytes().decode("latin-1") for i in range(tty.shape[0])]
    indent = len(rows[0]) - len(rows[0].lstrip(" "))
    if not bt._trim(rows[0]):
        return ""
    lines = []
    for row in rows:
        lines.append(bt._trim(row[indent:]))
        if bt._is_page_end(lines[-1]):
            return "\n".join(lines)
    return bt._trim(rows[0])


def test_screen_message_and_map_match_the_row_by_row_reading_on_random_screens():
    rng = np.random.default_rng(0)
    pieces = ["--More--", "(end)", "(1 of 3)", " of ", "(2 of", "You see here a dagger.", "x", "\x1a", " "]
    for _ in range(2000):
        tty = np.full((24, 80), ord(" "), dtype=np.uint8)
        for _ in range(int(rng.integers(0, 6))):
            text = "".join(rng.choice(pieces, size=int(rng.integers(1, 4))))[:80].encode("latin-1")
            row, col = int(rng.integers(0, 24)), int(rng.integers(0, 80 - len(text) + 1))
            tty[row, col : col + len(text)] = np.frombuffer(text, dtype=np.uint8)
        assert bt.screen_message(tty) == _screen_message_reference(tty)
        rows = tty[1:].tobytes().decode("latin-1")
        screen = "\n".join(rows[i : i + 80] for i in range(0, len(rows), 80))
        assert bt.balrog_observation("m", "d", "c", (1, 2), tty).endswith(f"map:\n{screen}\n\n")


# ----------------------------------------------------------------------------- styles and actions
def test_tidy_is_an_option_and_balrog_the_default():
    balrog, tidy = make_env("minihack/MazeWalk-9x9"), make_env("minihack/MazeWalk-9x9", text_style="tidy")
    assert (balrog.text_style, tidy.text_style) == ("balrog", "tidy")
    text, info = balrog.reset(seed=0)
    assert text.startswith("message:\n") and text.endswith("\n\n") and info["context"].startswith("inventory:\n")
    assert "\n(x=" in text and '"stairs down near northwest"' in balrog.instruction
    text, info = tidy.reset(seed=0)
    assert info["context"].startswith("Inventory:") and '"staircase down 3 steps northwest"' in tidy.instruction
    with pytest.raises(ValueError, match="text_style"):
        make_env("nle/NetHackChallenge", text_style="pretty")
    cfg = load_recipe("tiny", ["env.task=nle/NetHackChallenge", "env.text_style=tidy"])
    assert make_env(cfg.env.task, **cfg.env.env_kwargs()).text_style == "tidy"


def test_nle_offers_balrogs_action_names():
    assert "turnundead" in NLE_ACTION_NAMES and "turn" not in NLE_ACTION_NAMES
