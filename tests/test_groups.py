"""Group rollouts: shared group seeds, exact state keys, and the whole-episode collector."""

import pytest
import torch

from helpers import COUNT_TASK
from verlog.envs.groups import StateKeyInfo, group_seeds, state_id
from verlog.envs.registry import make_env
from verlog.envs.vector import make_vector_env, split_infos
from verlog.rollout.records import CollectStats
from verlog.rollout.engine import Generation, SamplingParams
from verlog.rollout.episodes import EpisodeCollector

REPLIES = ["ACTION: turn left", "ACTION: turn right", "ACTION: go forward", "no action here"]


def test_group_seeds_are_shared_within_a_group_only():
    seeds = group_seeds(11, 0, 6, 3)
    assert seeds[0] == seeds[1] == seeds[2] and seeds[3] == seeds[4] == seeds[5] and seeds[0] != seeds[3]
    later = group_seeds(11, 1, 6, 3)
    assert later[0] == later[2] and later[0] not in seeds and later[3] not in seeds
    assert group_seeds(11, 1, 6, 3) == later  # deterministic
    with pytest.raises(ValueError):
        group_seeds(11, 0, 6, 4)
    with pytest.raises(ValueError):
        group_seeds(-1, 0, 6, 3)


def test_state_id_is_stable_and_typed():
    assert state_id(b"abc") == state_id(b"abc") != state_id(b"abd")
    assert -(2**63) <= state_id(b"abc") < 2**63
    with pytest.raises(TypeError):
        state_id("abc")


def test_babyai_state_key_is_the_exact_state_not_the_text():
    env = make_env("babyai/goto")
    env.reset(seed=3)
    start = env.unwrapped.state_key
    env.step("ACTION: turn left")
    turned = env.unwrapped.state_key
    assert turned != start
    env.step("ACTION: turn right")
    assert env.unwrapped.state_key == start  # the same state by another path
    other = make_env("babyai/goto")
    other.reset(seed=4)
    assert other.unwrapped.state_key != start
    again = make_env("babyai/goto")
    again.reset(seed=3)
    assert again.unwrapped.state_key == start


def test_state_key_info_and_envs_without_keys():
    env = StateKeyInfo(make_env("babyai/easy_goto"))
    _, info = env.reset(seed=1)
    assert info["state_key"] == state_id(env.unwrapped.state_key)
    _, _, _, _, info = env.step("ACTION: turn left")
    assert info["state_key"] == state_id(env.unwrapped.state_key)
    with pytest.raises(NotImplementedError, match="state key"):
        StateKeyInfo(make_env(COUNT_TASK)).reset(seed=0)


def test_vector_env_reports_state_keys():
    venv = make_vector_env("babyai/easy_goto", 2, seed=0, mode="sync", state_keys=True)
    _, infos = venv.reset(seed=[5, 5])
    a, b = split_infos(infos, 2)
    assert a["state_key"] == b["state_key"]
    venv.close()


class CyclingEngine:
    """Reply k of a call is REPLIES[(call + k) % 4] as one token id; logprob -1 per token."""

    def __init__(self) -> None:
        self.calls, self.prompt_counts = 0, []

    def generate(self, prompts, params):
        self.prompt_counts.append(len(prompts))
        out = [Generation([(self.calls + k) % 4 + 1], [-1.0], "stop") for k in range(len(prompts))]
        self.calls += 1
        return out


class TextMemory:
    """Prompt ids = the observation's characters (so equal observations give equal prompts)."""

    reply_prefix = None

    def start_episode(self, instruction, observation, context=""):
        self.obs = observation

    def add_turn(self, reply, next_observation, context="", outcome=None):
        self.obs = next_observation

    def prompt_ids(self):
        class Stats:
            num_tokens, trimmed_turns, trimmed_observation_tokens = len(self.obs), 0, 0

        return [ord(c) % 200 + 1 for c in self.obs], Stats()


def collector(num_envs=6, group_size=3, state_keys=True, seed=9, task="babyai/easy_goto"):
    venv = make_vector_env(task, num_envs, seed=0, mode="sync", state_keys=state_keys, env_kwargs={"max_steps": 10})
    return EpisodeCollector(venv, [TextMemory() for _ in range(num_envs)], CyclingEngine(),
                            lambda ids: [REPLIES[i[0] - 1] for i in ids], SamplingParams(max_tokens=4), pad_id=0,
                            seed=seed, group_size=group_size, state_keys=state_keys)


def test_one_complete_episode_per_env_in_groups():
    c = collector()
    batch, stats = c.collect()
    lengths = batch.turns.sum(0)
    assert len(stats.episodes) == 6 and stats.turns == int(lengths.sum())
    for e in stats.episodes:
        n = e.env_index
        assert e.length == int(lengths[n])
        assert e.episode_return == pytest.approx(float(batch.rewards[:, n].sum()))
        last = e.length - 1
        assert bool(batch.terminated[last, n]) or bool(batch.truncated[last, n])
        assert not bool(batch.terminated[:last, n].any() or batch.truncated[:last, n].any())
    # padding turns: no response tokens, no reward, group -1; real turns carry their group
    pad = ~batch.turns
    assert not bool(batch.response_mask[pad].any()) and float(batch.rewards[pad].abs().sum()) == 0.0
    assert batch.group_ids[0].tolist() == [0, 0, 0, 1, 1, 1]
    assert bool((batch.group_ids[pad] == -1).all())
    # a group starts from one state: equal first prompts and state ids, different between groups
    assert torch.equal(batch.prompt_ids[0, 0], batch.prompt_ids[0, 2])
    assert batch.state_ids[0, 0] == batch.state_ids[0, 1] == batch.state_ids[0, 2] != batch.state_ids[0, 3]
    # finished envs get no generations: prompts per call never exceed the envs still running
    running = [int((lengths > t).sum()) for t in range(batch.num_turns)]
    assert c.engine.prompt_counts == running
    assert batch.bootstrap_prompts == {}


def test_rounds_differ_and_resume_from_state_dict():
    a = collector()
    first, _ = a.collect()
    state = a.state_dict()
    second, _ = a.collect()
    assert second.group_ids[0].tolist() == [2, 2, 2, 3, 3, 3]
    assert not torch.equal(first.state_ids[0], second.state_ids[0])
    b = collector()
    b.load_state_dict(state)
    resumed, _ = b.collect()
    # the same round seeds (first states) and episode ids after a resume
    assert torch.equal(resumed.state_ids[0], second.state_ids[0])
    assert torch.equal(resumed.episode_ids[0], second.episode_ids[0])


def test_collect_stats_merge_in_trainer():
    from verlog.collection import merge_stats as _merge_stats

    a, b = CollectStats(turns=3, invalid_actions=1), CollectStats(turns=2, env_faults=1)
    b.prompt_tokens.append(7)
    _merge_stats(a, b)
    assert (a.turns, a.invalid_actions, a.env_faults, a.prompt_tokens) == (5, 1, 1, [7])


def test_bad_group_size():
    venv = make_vector_env("babyai/easy_goto", 4, seed=0, mode="sync")
    with pytest.raises(ValueError, match="group_size"):
        EpisodeCollector(venv, [TextMemory() for _ in range(4)], CyclingEngine(), lambda ids: [], SamplingParams(),
                         pad_id=0, seed=0, group_size=3)
    venv.close()
