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
from helpers import transcript_digest

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
    pieces = ["--More--", "(end)", "(1 of 3)", " of ", "(2 of", "You see here a dagger.", "x", "\x1a", " ",
              "--More", "(end", " o", "f 2)", "a lot of gold"]  # fmt: skip
    for _ in range(4000):
        tty = np.full((24, 80), ord(" "), dtype=np.uint8)
        for _ in range(int(rng.integers(0, 6))):
            text = "".join(rng.choice(pieces, size=int(rng.integers(1, 4))))[:80].encode("latin-1")
            row, col = int(rng.integers(0, 24)), int(rng.integers(0, 80 - len(text) + 1))
            tty[row, col : col + len(text)] = np.frombuffer(text, dtype=np.uint8)
        assert bt.screen_message(tty) == _screen_message_reference(tty)
        rows = tty[1:].tobytes().decode("latin-1")
        screen = "\n".join(rows[i : i + 80] for i in range(0, len(rows), 80))
        assert bt.balrog_observation("m", "d", "c", (1, 2), tty).endswith(f"map:\n{screen}\n\n")


# ----------------------------------------------------------------------------- fast rules = the rules as first written
def _describe_reference(glyphs: np.ndarray, x: int, y: int) -> tuple[str, int]:
    """The description as first written (slow, for comparison): one item per square, screen names in
    scan order then the rays, a stable sort by (distance, direction), then the merge. Also returns
    the number of plural lines."""
    screen, near, on_screen = bt.glyph_names()
    flat = glyphs.ravel()
    items = []
    for index in np.flatnonzero(on_screen[flat]).tolist():
        row, col = divmod(index, bt.MAP_WIDTH)
        if col == x and row == y:
            continue
        items.append((screen[flat[index]], *bt.position_words(col - x, y - row)))
    for step_x, step_y in bt._RAYS:
        for reach in range(1, 10):
            col, row = x + step_x * reach, y + step_y * reach
            if not (0 <= col < bt.MAP_WIDTH and 0 <= row < bt.MAP_HEIGHT):
                break
            glyph = int(glyphs[row, col])
            name = near[glyph]
            if name and not screen[glyph]:
                items.append((name, *bt.position_words(col - x, y - row)))
                if name in bt._BLOCKING:
                    break
    items = [item for item in items if item[2] in bt._DIRECTION_ORDER]
    items.sort(key=lambda item: (bt._DISTANCE_ORDER[item[1]], bt._DIRECTION_ORDER[item[2]]))
    groups: dict[tuple[str, str], list[str]] = {}
    for name, distance, direction in items:
        groups.setdefault((name, distance), []).append(direction)
    order, merged, plural_lines = [], {}, 0
    for (name, distance), directions in groups.items():
        counts: dict[str, int] = {}
        for direction in directions:
            counts[direction] = counts.get(direction, 0) + 1
        once = [d for d, n in counts.items() if n == 1]
        more = [d for d, n in counts.items() if n > 1]
        if once:
            order.append((name, distance))
            merged[(name, distance)] = once
        if more:
            key = (bt.plural(name), distance)
            order.append(key)
            merged[key] = more
            plural_lines += 1
    lines = [f"{n} {d} {bt._join_directions(merged[(n, d)])}" for n, d in order]
    return "\n".join(lines), plural_lines


def _cursor_reference(glyphs: np.ndarray, x: int, y: int, cursor_row: int, cursor_col: int) -> str:
    """The cursor line as first written (for comparison)."""
    screen, _, _ = bt.glyph_names()
    map_row = cursor_row - 1
    dx, dy = cursor_col - x, y - map_row
    index = cursor_col + map_row * bt.MAP_WIDTH
    if not (-bt.MAP_WIDTH <= dx < bt.MAP_WIDTH and -bt.MAP_HEIGHT <= dy < bt.MAP_HEIGHT and 0 < index < glyphs.size):
        return ""
    name = screen[int(glyphs.ravel()[index])]
    if dx == 0 and dy == 0:
        return "Yourself a " + name
    distance, direction = bt.position_words(dx, dy)
    return f"{distance} {direction} {name}"


def _random_map(rng: np.random.Generator, x: int, y: int) -> np.ndarray:
    """A map of floor or dark area with things scattered over it and crowded around ``(x, y)``: walls,
    doors, traps, stairs, iron bars, monsters, objects and any glyph at all, often the same one twice
    in one direction (plural lines)."""
    cmap = [nethack.GLYPH_CMAP_OFF + i for i in (0, 1, 2, 3, 7, 12, 13, 15, 17, 18, 21, 24, 31, 33, 42, 52)]
    others = [nethack.GLYPH_MON_OFF + 5, nethack.GLYPH_PET_OFF + 5, nethack.GLYPH_OBJ_OFF + 10,
              nethack.GLYPH_STATUE_OFF + 3, nethack.GLYPH_WARNING_OFF + 2, nethack.GLYPH_ZAP_OFF + 1]  # fmt: skip
    palette = np.array(cmap + others, dtype=np.int16)
    glyphs = np.full((bt.MAP_HEIGHT, bt.MAP_WIDTH), nethack.GLYPH_CMAP_OFF + int(rng.choice([0, 19])), np.int16)
    for _ in range(int(rng.integers(0, 60))):
        col = int(np.clip(x + rng.integers(-10, 11), 0, bt.MAP_WIDTH - 1))
        row = int(np.clip(y + rng.integers(-6, 7), 0, bt.MAP_HEIGHT - 1))
        glyphs[row, col] = rng.choice(palette)
    cells = rng.integers(0, glyphs.size, int(rng.integers(0, 40)))
    glyphs.flat[cells] = rng.choice(palette, size=cells.size)
    glyphs.flat[rng.integers(0, glyphs.size, 5)] = rng.integers(0, nethack.MAX_GLYPH, 5)
    return glyphs


def test_description_and_cursor_equal_the_rules_as_first_written_on_random_maps():
    rng = np.random.default_rng(1)
    plurals = 0
    for trial in range(1500):
        x, y = int(rng.integers(0, bt.MAP_WIDTH)), int(rng.integers(0, bt.MAP_HEIGHT))
        if trial % 10 == 0:  # the edges and corners
            x, y = int(rng.choice([0, bt.MAP_WIDTH - 1])), int(rng.choice([0, bt.MAP_HEIGHT - 1]))
        if trial % 50 == 1:  # off the map (no game puts the agent there; the rule still applies)
            x, y = int(rng.choice([-3, -1, bt.MAP_WIDTH, 90])), int(rng.choice([-2, 5, bt.MAP_HEIGHT]))
        glyphs = _random_map(rng, x, y)
        want, plural_lines = _describe_reference(glyphs, x, y)
        assert bt.describe_glyphs(glyphs, x, y) == want, (trial, x, y)
        plurals += plural_lines > 0
        for row, col in [(y + 1, x), (int(rng.integers(0, 24)), int(rng.integers(0, 80))), (0, 0), (1, 0)]:
            assert bt.cursor_text(glyphs, x, y, row, col) == _cursor_reference(glyphs, x, y, row, col)
    assert plurals >= 300  # the merge's plural lines were exercised


def test_terminal_map_reuses_its_buffer_without_mixing_screens():
    rng = np.random.default_rng(2)
    terminal_map = bt.TerminalMap()
    for _ in range(50):
        tty = rng.choice(np.array([32, 32, 46, 45, 64, 0, 255], dtype=np.uint8), size=(24, 80))
        rows = tty[1:].tobytes().decode("latin-1")
        assert terminal_map(tty) == "\n".join(rows[i : i + 80] for i in range(0, len(rows), 80))
    with pytest.raises(ValueError, match="shape"):
        terminal_map(np.zeros((23, 80), dtype=np.uint8))


# Digests of whole seeded episodes (observations, rewards, ends, info) in BALROG's text, recorded with
# nle 1.3.0 and minihack 1.0.2 before the text was made faster (2026-11-27): any change to the text
# shows up here (the golden corpus above is shorter and played by BALROG's own actions).
BALROG_TRANSCRIPT_DIGESTS = {
    "nle/NetHackChallenge": "8f6c69704bf22cb46a46273057b5a35800a4f36f56e42eb8ad77ae6a385439a6",
    "minihack/Quest-Medium": "15338cb5b3b62940fa0e51d132c0e49342f088055d5f23ecb524b4054df4ea0d",
    "minihack/CorridorBattle-Dark": "fc403cb6dfce973eeaf6c6d1bc9ceddfbc07c3751883b6df94c7b98ae7ea7882",
    "minihack/MazeWalk-15x15": "3be42c98ee7885a89f76d73b690da204d408f5269b9121e9e82b4699e3fd74da",
    "minihack/Quest-Easy": "bad010d5506a687279468300400a6ea406ca19bdf60d29ae7a3c7e1926ebfa00",
}


@pytest.mark.parametrize("name", sorted(BALROG_TRANSCRIPT_DIGESTS))
def test_balrog_episodes_match_the_pinned_transcripts(name):
    assert transcript_digest(name) == BALROG_TRANSCRIPT_DIGESTS[name]


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
