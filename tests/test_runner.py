"""The episode runner's pieces: slot accounting, the lazy turn, the turn cap, and the record's JSON."""

import json

import pytest

from helpers import COUNT_TASK
from verlog.envs import make_env
from verlog.rollout.records import EpisodeRecord
from verlog.rollout.runner import EpisodeSpec, Slot, Step, env_step, play_turn, run_episodes


class _Memory:
    def __init__(self):
        self.calls = []

    def start_episode(self, instruction, observation, context=""):
        self.calls.append(("start", observation))

    def add_turn(self, reply, next_observation, context="", outcome=None):
        self.calls.append(("turn", reply, next_observation))


def _step(obs, reward, *, valid=True, terminated=False, truncated=False, success=False):
    info = {"action_valid": valid, "action": "wait", "context": "", "success": success, "progression": 0.5}
    return Step(obs, reward, terminated, truncated, info)


def test_slot_accounts_its_episode_and_closes_it_into_a_record():
    memory = _Memory()
    slot = Slot(3, memory, record_turns=True)
    slot.begin(7, "o0", {"instruction": "i", "context": ""}, task="t", seed=11)
    assert slot.advance("r1", _step("o1", 0.5, valid=False)) is None
    record = slot.advance("r2", _step("o2", 1.0, terminated=True, success=True))
    assert memory.calls == [("start", "o0"), ("turn", "r1", "o1")]  # no turn after the end
    assert (record.episode_id, record.env_index, record.task, record.seed) == (7, 3, "t", 11)
    assert (record.episode_return, record.length, record.invalid_actions) == (1.5, 2, 1)
    assert record.success and not record.truncated and record.progression == 0.5
    assert [t["observation"] for t in record.turns] == ["o0", "o1"]
    assert [t["action_valid"] for t in record.turns] == [False, True]
    slot.begin(8, "p0", {"instruction": "i", "context": ""})
    assert slot.turns == [] and slot.length == 0 and slot.episode_return == 0.0 and record.length == 2


def test_play_turn_is_lazy_and_cuts_at_max_turns():
    slots = [Slot(n, _Memory()) for n in range(3)]
    for slot in slots:
        slot.begin(slot.index, "o", {"instruction": "i", "context": ""})
    slots[1].length = 3  # one more step reaches the cap of 4
    drawn = []

    def steps():
        for n in range(3):
            drawn.append(n)
            yield _step(f"o{n}", 0.0)

    seen = []
    for outcome in play_turn(slots, ["a", "b", "c"], steps(), max_turns=4):
        seen.append((outcome.slot.index, list(drawn)))
        assert (outcome.record is not None) == (outcome.slot.index == 1)
    assert seen == [(0, [0]), (1, [0, 1]), (2, [0, 1, 2])]  # step k is drawn after outcome k-1
    assert slots[1].memory.calls == [("start", "o")]  # the cut episode's memory gets no turn


def test_env_step_reports_cut_episodes_as_truncated():
    env = make_env(COUNT_TASK, max_steps=1)
    try:
        env.reset(seed=0)
        step = env_step(env, "ACTION: wait")
    finally:
        env.close()
    assert step.truncated and not step.terminated and step.done and step.valid


def test_record_json_round_trip_keeps_the_file_format():
    specs = [EpisodeSpec(COUNT_TASK, 5, 0), EpisodeSpec(COUNT_TASK, 6, 1)]

    class Waiter:
        needs_memory = False

        def act(self, memories, infos, specs, turn):
            return ["ACTION: wait" if turn < 1 else "ACTION: end"] * len(specs)

    records = run_episodes(specs, Waiter(), num_envs=2, env_kwargs={"max_steps": 5})
    for record in records:
        line = json.loads(json.dumps(record.to_json()))
        assert list(line) == ["task", "episode", "seed", "return", "length", "invalid", "success", "progression",
                              "truncated"]
        assert EpisodeRecord.from_json(line, env_index=record.env_index) == record
    assert [(r.episode_id, r.seed, r.length, r.success) for r in records] == [(0, 5, 2, True), (1, 6, 2, True)]
    with pytest.raises(KeyError):
        EpisodeRecord.from_json({"task": "x"})
