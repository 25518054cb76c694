"""``memory.type``: what each memory keeps and drops, the summary's bound, the window's unchanged
prompts, a user's memory class by import path, and the one-line refusals of bad ones."""

from __future__ import annotations

import json

import pytest
from helpers import COUNT_TASK, cli_error_line
from test_memory import INSTRUCTION, chatml_tokenizer, expected_messages, ids_of, obs, reply

from verlog.builders import memory_factory
from verlog.cli import train_main
from verlog.config import MemoryConfig, build_config
from verlog.config_validate import MEMORY_TYPE_NAMES
from verlog.envs import make_env
from verlog.memory import (MEMORY_TYPES, FullMemory, Memory, NoMemory, PromptStats, SummaryMemory, TurnOutcome,
                           WindowMemory, memory_class)
from verlog.preflight import check_buildable
from verlog.rollout.runner import Slot, env_step


@pytest.fixture(scope="module")
def tok():
    return chatml_tokenizer()


def play(mem, n, outcomes=None):
    mem.start_episode(INSTRUCTION, obs(0))
    for i in range(n):
        mem.add_turn(reply(i), obs(i + 1), outcome=None if outcomes is None else outcomes(i))


# ---------------------------------------------------------------- what each type keeps and drops


def test_none_keeps_only_the_current_observation(tok):
    mem = NoMemory(tok, history_turns=5, max_prompt_tokens=4096)
    play(mem, 6)
    assert mem.render_messages() == expected_messages([], obs(6))
    ids, stats = mem.prompt_ids()
    assert ids == ids_of(tok, expected_messages([], obs(6)))
    assert stats == PromptStats(len(ids), 0, 0) and mem.state_dict()["history"] == []


def test_full_keeps_every_turn_when_the_budget_allows(tok):
    mem = FullMemory(tok, history_turns=1, max_prompt_tokens=100_000)
    play(mem, 30)
    want = expected_messages([(obs(i), reply(i)) for i in range(30)], obs(30))
    assert mem.render_messages() == want and mem.prompt_ids()[0] == ids_of(tok, want)
    assert len(mem.state_dict()["history"]) == 30


@pytest.mark.parametrize("budget", [120, 200, 400])
def test_full_trims_like_a_window_that_holds_every_turn(tok, budget):
    full, window = FullMemory(tok, max_prompt_tokens=budget), WindowMemory(tok, history_turns=30, max_prompt_tokens=budget)
    play(full, 30)
    play(window, 30)
    assert full.prompt_ids() == window.prompt_ids()
    assert full.prompt_ids()[1].trimmed_turns > 0  # the budget dropped old turns, and said so


def reference_window_ids(tok, turns, current, k, budget):
    """The window rule written out plainly: the most recent of the last k turns that fit, found by trying
    every count from k down (no binary search); None when not even zero turns fit."""
    turns = turns[max(0, len(turns) - k):]
    for kept in range(len(turns), -1, -1):
        ids = ids_of(tok, expected_messages(turns[len(turns) - kept:], current))
        if len(ids) <= budget:
            return ids, len(turns) - kept
    return None


@pytest.mark.parametrize("k", [0, 1, 3, 8])
@pytest.mark.parametrize("budget", [60, 90, 150, 4096])
def test_window_prompts_are_unchanged(tok, k, budget):
    mem = WindowMemory(tok, history_turns=k, max_prompt_tokens=budget)
    mem.start_episode(INSTRUCTION, obs(0))
    turns, compared = [], []
    for i in range(12):
        want = reference_window_ids(tok, turns, obs(i), k, budget)
        if want is not None:
            ids, stats = mem.prompt_ids()
            assert (ids, stats.trimmed_turns, stats.trimmed_observation_tokens) == (want[0], want[1], 0)
            compared.append(want[1])
        mem.add_turn(reply(i), obs(i + 1), outcome=TurnOutcome("go forward", True, 0.0))
        turns.append((obs(i), reply(i)))
    assert compared  # the case is not vacuous ...
    if k >= 3 and budget in (90, 150):
        assert max(compared) > 0  # ... and the budget trimmed turns where it should


def test_builtin_names_match_the_config_rules():
    assert tuple(MEMORY_TYPES) == MEMORY_TYPE_NAMES
    assert all(memory_class(name) is cls for name, cls in MEMORY_TYPES.items())
    assert MemoryConfig().type == "window"


def test_memory_factory_builds_the_named_type_from_the_config(tok):
    for name, cls in MEMORY_TYPES.items():
        if name == "vision":  # needs a vision-language model's image processor: tests/test_vision.py
            continue
        made = memory_factory(MemoryConfig(type=name, summary_turns=3, reply_prefix="ACTION:"), tok)()
        assert type(made) is cls and made.reply_prefix == "ACTION:"
    assert memory_factory(MemoryConfig(type="summary", summary_turns=3), tok)().summary_turns == 3


# ---------------------------------------------------------------- summary


def _outcome(i):
    """Turn i+1: every third reply invalid (penalty -0.1), every fifth step unlocks an event."""
    if i % 3 == 2:
        return TurnOutcome("wait", False, -0.1)
    return TurnOutcome(f"move {i}", True, 1.0 if i % 5 == 4 else 0.0, (f"event_{i}",) if i % 5 == 4 else ())


def test_summary_keeps_the_last_lines_counts_and_events(tok):
    mem = SummaryMemory(tok, summary_turns=3, max_prompt_tokens=4096)
    play(mem, 6, _outcome)
    # turns 1..3 are folded into the counts: 1 invalid (turn 3), reward -0.1
    preamble = ("Episode so far (6 turns):\n"
                "Earlier turns: 3 (1 invalid replies), total reward -0.1.\n"
                "Key events (1): turn 5 event_4.\n"
                "Last 3 turns:\n"
                "turn 4: move 3 (reward +0)\n"
                "turn 5: move 4 (reward +1)\n"
                f"turn 6: invalid reply {reply(5)!r} (reward -0.1)\n\n")
    want = [{"role": "system", "content": INSTRUCTION},
            {"role": "user", "content": preamble + "Current observation:\n" + obs(6)}]
    assert mem.render_messages() == want
    assert mem.prompt_ids()[0] == ids_of(tok, want)
    # past observations and replies are not kept, only their lines
    assert obs(5) not in json.dumps(mem.state_dict())


def test_summary_without_outcomes_shows_the_replies_and_nothing_before_the_first_turn(tok):
    mem = SummaryMemory(tok, summary_turns=2)
    play(mem, 0)
    assert mem.render_messages() == expected_messages([], obs(0))
    mem.add_turn("ACTION:\n   go\tforward " + "x" * 80, obs(1))
    line = mem.render_messages()[-1]["content"].splitlines()[2]
    assert line.startswith("turn 1: ACTION: go forward xxx") and line.endswith("…") and len(line) == len("turn 1: ") + 60


def test_summary_stays_bounded_over_500_turns(tok):
    mem = SummaryMemory(tok, summary_turns=8, max_prompt_tokens=100_000)
    play(mem, 0)
    sizes = {}
    for i in range(500):
        mem.add_turn(reply(i), obs(i + 1), outcome=_outcome(i))
        if i + 1 in (20, 100, 500):
            ids, stats = mem.prompt_ids()
            sizes[i + 1] = (len(ids), len(json.dumps(mem.state_dict())))
            assert stats.trimmed_turns == 0 and stats.trimmed_observation_tokens == 0
    state = mem.state_dict()
    assert len(state["lines"]) == 8 and len(state["events"]) == 8 and state["event_count"] == sum(bool(_outcome(i).events) for i in range(500))
    assert state["older"]["turns"] == 492
    # only the numbers' digits grow: a few tokens and bytes between turn 100 and turn 500
    assert sizes[500][0] - sizes[100][0] <= 30 and sizes[500][1] - sizes[100][1] <= 60
    # a full history of the same episode is many times longer
    full = FullMemory(tok, max_prompt_tokens=10**9)
    play(full, 500, _outcome)
    assert len(full.prompt_ids()[0]) > 20 * sizes[500][0]


def test_summary_trims_lines_oldest_first_under_the_budget(tok):
    mem = SummaryMemory(tok, summary_turns=10, max_prompt_tokens=4096)
    play(mem, 10, _outcome)
    ids, _ = mem.prompt_ids()
    small = SummaryMemory(tok, summary_turns=10, max_prompt_tokens=len(ids) - 15)
    play(small, 10, _outcome)
    text = small.render_messages()[-1]["content"]
    ids, stats = small.prompt_ids()
    assert len(ids) <= small.max_prompt_tokens and stats.trimmed_turns > 0
    kept = 10 - stats.trimmed_turns
    assert f"Last {kept} turns:" in text and "turn 10:" in text and "turn 1:" not in text
    # a budget with room for no summary at all drops the header too, as one more item
    bare = SummaryMemory(tok, summary_turns=10, max_prompt_tokens=len(ids_of(tok, expected_messages([], obs(10)))))
    play(bare, 10, _outcome)
    assert bare.render_messages() == expected_messages([], obs(10)) and bare.prompt_ids()[1].trimmed_turns == 11


def test_summary_state_round_trip_gives_the_same_prompt(tok):
    mem = SummaryMemory(tok, summary_turns=4)
    play(mem, 9, _outcome)
    other = SummaryMemory(tok, summary_turns=4)
    other.load_state_dict(json.loads(json.dumps(mem.state_dict())))
    assert other.prompt_ids() == mem.prompt_ids()
    with pytest.raises(ValueError, match="summary_turns"):
        SummaryMemory(tok, summary_turns=5).load_state_dict(mem.state_dict())


def test_the_runner_hands_the_env_outcome_to_the_memory(tok):
    env = make_env(COUNT_TASK, max_steps=10)
    try:
        observation, info = env.reset(seed=0)
        slot = Slot(0, SummaryMemory(tok, summary_turns=4))
        slot.begin(0, observation, info)
        slot.advance("ACTION: wait", env_step(env, "ACTION: wait"))
        slot.advance("no action here", env_step(env, "no action here"))
    finally:
        env.close()
    lines = slot.memory.render_messages()[-1]["content"].splitlines()
    assert lines[2:4] == ["turn 1: wait (reward +0)", "turn 2: invalid reply 'no action here' (reward +0)"]


# ---------------------------------------------------------------- a user's memory class


class EchoMemory(Memory):
    """A user's memory: the prompt is the tokenised current observation, nothing else."""

    def __init__(self, tokenizer, *, history_turns, max_prompt_tokens, reply_hint=None, reply_prefix=None):
        self.tokenizer, self.reply_prefix, self.text = tokenizer, reply_prefix, ""

    def start_episode(self, instruction, observation, context=""):
        self.text = observation

    def add_turn(self, reply, next_observation, context="", outcome=None):
        self.text = next_observation

    def prompt_ids(self):
        ids = self.tokenizer(self.text, add_special_tokens=False)["input_ids"]
        return ids, PromptStats(len(ids), 0, 0)

    def state_dict(self):
        return {"text": self.text}

    def load_state_dict(self, state):
        self.text = state["text"]


class DuckMemory:
    """A memory that does not subclass Memory but keeps the contract (with its own from_config)."""

    reply_prefix = None

    @classmethod
    def from_config(cls, tokenizer, memory):
        return cls()

    def start_episode(self, instruction, observation, context=""): ...
    def add_turn(self, reply, next_observation, context="", outcome=None): ...
    def prompt_ids(self): return [1], PromptStats(1, 0, 0)
    def state_dict(self): return {}
    def load_state_dict(self, state): ...


class Incomplete(Memory):
    def start_episode(self, instruction, observation, context=""): ...
    def add_turn(self, reply, next_observation, context="", outcome=None): ...


class OldAddTurn(EchoMemory):
    def add_turn(self, reply, next_observation, context=""):  # no outcome: breaks the contract
        self.text = next_observation


class BadInit(EchoMemory):
    def __init__(self, tokenizer, window):  # not the common constructor, and no from_config
        super().__init__(tokenizer, history_turns=window, max_prompt_tokens=1)


NOT_A_CLASS = 3


def test_a_user_memory_class_by_import_path_is_built_and_used(tok):
    cfg = build_config({"env": {"task": COUNT_TASK}}, {"memory.type": "test_memory_types:EchoMemory"})
    check_buildable(cfg)  # preflight accepts it
    mem = memory_factory(cfg.memory, tok)()
    assert type(mem) is EchoMemory
    env = make_env(COUNT_TASK, max_steps=10)
    try:
        observation, info = env.reset(seed=0)
        slot = Slot(0, mem)
        slot.begin(0, observation, info)
        slot.advance("ACTION: wait", env_step(env, "ACTION: wait"))
    finally:
        env.close()
    assert mem.prompt_ids()[0] == tok("count 1", add_special_tokens=False)["input_ids"]
    assert type(memory_factory(MemoryConfig(type="test_memory_types:DuckMemory"), tok)()) is DuckMemory


@pytest.mark.parametrize("value, says", [
    ("windows", "expected one of none, window, full, summary, vision or a class as module.path:ClassName"),
    ("my_pkg.mem:", "expected one of none, window, full, summary"),
    ("no_such_package.mem:MyMemory", "no module named 'no_such_package.mem'"),
    ("test_memory_types:Missing", "has no attribute 'Missing'"),
    ("test_memory_types:NOT_A_CLASS", "is a int, not a memory class"),
    ("test_memory_types:reference_window_ids", "is a function, not a memory class"),
    ("test_memory_types:Slot", "it lacks start_episode, add_turn, prompt_ids, state_dict, load_state_dict, from_config"),
    ("test_memory_types:Incomplete", "does not implement load_state_dict, prompt_ids, state_dict"),
    ("test_memory_types:OldAddTurn", "add_turn must accept"),
    ("test_memory_types:BadInit", "the constructor must accept"),
])
def test_a_bad_memory_type_is_one_line_naming_the_key(capsys, value, says):
    line = cli_error_line(train_main, ["tiny", f"memory.type={value}"], capsys)
    assert line.startswith("error: memory.type: ") and says in line, line


def test_a_module_that_fails_to_import_is_one_line(capsys, tmp_path, monkeypatch):
    (tmp_path / "broken_memory_mod.py").write_text("raise RuntimeError('boom\\nsecond line')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    line = cli_error_line(train_main, ["tiny", "memory.type=broken_memory_mod:M"], capsys)
    assert line.startswith("error: memory.type: ") and "RuntimeError: boom" in line and "second" not in line


def test_summary_turns_must_be_positive(capsys):
    line = cli_error_line(train_main, ["tiny", "memory.summary_turns=0"], capsys)
    assert line.startswith("error: memory.summary_turns: ")
