"""Tests of verlog.envs.parsing.extract_action: hand cases and hypothesis properties."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verlog.envs.parsing import action_key, after_last_marker, extract_action

BABYAI = ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"]


@pytest.mark.parametrize(
    "reply, expected",
    [
        # the plain marker, case and separators
        ("ACTION: turn left", "turn left"),
        ("action: Turn Left", "turn left"),
        ("ACTION:turn left", "turn left"),
        ("ACTION : drop", "drop"),
        ("ACTION: turn_left", "turn left"),
        ("ACTION: turn-left", "turn left"),
        ("ACTION: turnleft", "turn left"),
        ("ACTION: TURNLEFT", "turn left"),
        ("ACTION: pickup", "pick up"),
        ("ACTION: Go   Forward", "go forward"),
        # surrounding text after the action is ignored
        ("ACTION: turn left. Then I'll go forward", "turn left"),
        ("ACTION: pick up the blue key", "pick up"),
        ("ACTION: toggle\n\nI hope the door opens.", "toggle"),
        ("ACTION: go forward!", "go forward"),
        # quotes, backticks, markdown, brackets
        ("ACTION: `pick up`", "pick up"),
        ("ACTION: **pick up**", "pick up"),
        ('ACTION: "drop"', "drop"),
        ("ACTION: 'toggle'", "toggle"),
        ("ACTION: [drop]", "drop"),
        ("ACTION: <turn right>", "turn right"),
        ("**ACTION:** go forward", "go forward"),
        ("**Action**: go forward", "go forward"),
        ("`ACTION: turn right`", "turn right"),
        # other documented marker forms
        ("Action - turn right", "turn right"),
        ("Action \u2014 turn right", "turn right"),
        ("action=turn_right", "turn right"),
        ("<|ACTION|>toggle<|END|>", "toggle"),
        ("Final action: drop", "drop"),
        # reasoning before the marker, the LAST marker wins
        ("The ball is ahead so I go forward.\nACTION: go forward", "go forward"),
        ("ACTION: turn left\nWait, no.\nACTION: go forward", "go forward"),
        ("I considered ACTION: drop but\nACTION: toggle", "toggle"),
        # unicode compatibility forms (fullwidth letters) normalise
        ("ACTION: \uff54\uff55\uff52\uff4e \uff4c\uff45\uff46\uff54", "turn left"),
        # no marker: the whole reply must be exactly one action
        ("turn left", "turn left"),
        ("  Turn Left.  ", "turn left"),
        ("`go_forward`", "go forward"),
        ("**Toggle**", "toggle"),
        ("PICKUP", "pick up"),
        ("turn left" + "\n" * 500, "turn left"),
    ],
)
def test_extracts_expected_action(reply, expected):
    assert extract_action(reply, BABYAI) == expected


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "   ",
        "ACTION:",
        "ACTION: ",
        "ACTION: fly away",
        "ACTION: turn lefty",  # the action must end at a word boundary
        "ACTION: I will turn left",  # text after the marker must start with the action
        "ACTION: go forward\nlater... ACTION: jump",  # the last marker decides, even if invalid
        "turn left then go forward",  # no marker and more than one action
        "I think I should turn left",
        "Actions: turn left",  # plural is not a marker
        "transaction: drop",  # 'action' inside a word is not a marker
        "action-drop",  # a dash marker needs whitespace after it
        "go forward 3",
        "turn",
        "\x00\x01\x02",
    ],
)
def test_returns_none_without_a_valid_action(reply):
    assert extract_action(reply, BABYAI) is None


def test_longest_action_wins_and_word_boundary_is_respected():
    actions = ["go", "go forward", "goal"]
    assert extract_action("ACTION: go forward", actions) == "go forward"
    assert extract_action("ACTION: go.", actions) == "go"
    assert extract_action("ACTION: goal!", actions) == "goal"
    assert extract_action("ACTION: go fast", actions) == "go"
    assert extract_action("ACTION: gopher", actions) is None
    assert extract_action("go", actions) == "go"


def test_returns_the_canonical_string_object_from_valid_actions():
    actions = ["Move North", "move_south"]
    assert extract_action("ACTION: move north", actions) == "Move North"
    assert extract_action("action: MOVE SOUTH", actions) == "move_south"


@pytest.mark.parametrize(
    "actions, error",
    [([], ValueError), (["turn left", "turn_left"], ValueError), (["!!!"], ValueError), ([1, "drop"], TypeError)],
)
def test_bad_valid_actions_raise(actions, error):
    with pytest.raises(error):
        extract_action("ACTION: drop", actions)


def test_non_str_reply_raises_type_error():
    with pytest.raises(TypeError, match="reply must be a str"):
        extract_action(b"ACTION: drop", BABYAI)
    with pytest.raises(TypeError, match="single str"):
        extract_action("ACTION: d", "drop")


def test_action_key():
    assert action_key("Turn_Left!") == "turnleft"
    assert action_key("  pick-UP ") == "pickup"
    assert action_key("") == ""


def test_after_last_marker_is_the_text_after_the_final_marker():
    assert after_last_marker("ACTION: up. **Action**: down now") == " down now"
    assert after_last_marker("think <|ACTION|>go west<|END|>") == "go west<|END|>"
    assert after_last_marker("Action - left") == " left"
    assert after_last_marker("ACTION:") == ""  # a marker with nothing after it is not "no marker"
    assert after_last_marker("go north") is None
    assert after_last_marker("transaction: pay") is None  # "action" inside a longer word is no marker


def test_huge_replies_are_fast():
    big = "blah " * 200_000  # 1 MB
    replies = [
        big + "ACTION: drop",
        "ACTION: " + " " * 1_000_000 + "drop",
        "ACTION: " * 100_000,
        big,
        "action" * 200_000,
    ]
    start = time.perf_counter()
    results = [extract_action(r, BABYAI) for r in replies]
    elapsed = time.perf_counter() - start
    assert results == ["drop", "drop", None, None, None]
    assert elapsed < 2.0, f"parsing 5 MB of replies took {elapsed:.2f}s"


# ----------------------------------------------------------------------------- properties
_separators = st.sampled_from([" ", "_", "-", "", "  "])
_cases = st.sampled_from([str.lower, str.upper, str.title, lambda s: s])
_openers = st.sampled_from(["", " ", "`", "**", '"', "'", "[", " \n"])
_closers = st.sampled_from(["", ".", "!", "`", "**", '"', "'", "]", "\n", ". Then I will turn right."])
_markers = st.sampled_from(["ACTION:", "Action:", "action :", "**ACTION:**", "Action -", "action=", "<|ACTION|>"])
_prose = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80)


@settings(max_examples=2500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_never_raises_on_random_text(reply):
    result = extract_action(reply, BABYAI)
    assert result is None or result in BABYAI


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_never_raises_on_decoded_binary(data):
    for encoding in ("latin-1", "utf-8"):
        result = extract_action(data.decode(encoding, errors="replace"), BABYAI)
        assert result is None or result in BABYAI


@settings(max_examples=500, deadline=None)
@given(
    prose=_prose,
    action=st.sampled_from(BABYAI),
    sep=_separators,
    case=_cases,
    marker=_markers,
    opener=_openers,
    closer=_closers,
)
def test_decorated_action_after_last_marker_is_found(prose, action, sep, case, marker, opener, closer):
    variant = case(action.replace(" ", sep))
    reply = f"{prose}\n{marker} {opener}{variant}{closer}"
    assert extract_action(reply, BABYAI) == action


@settings(max_examples=300, deadline=None)
@given(
    first=st.sampled_from(BABYAI),
    second=st.sampled_from(BABYAI),
    middle=_prose.filter(lambda s: "action" not in s.lower()),
)
def test_last_marker_wins(first, second, middle):
    assert extract_action(f"ACTION: {first}\n{middle}\nACTION: {second}", BABYAI) == second
