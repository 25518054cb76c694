"""Fixed-turn collection: T x N turns, bootstrap prompts, episodes running across batches; the
trainer's Collector protocol."""

import pytest
import torch

from helpers import COUNT_CORPUS, COUNT_TASK, ScriptedEngine
from verlog.envs.vector import make_vector_env
from verlog.memory import WindowMemory
from verlog.models import load_tokenizer
from verlog.tiny_model import build_tiny_model
from verlog.rollout.collector import FixedTurnCollector
from verlog.rollout.engine import Collector, SamplingParams
from verlog.rollout.episodes import EpisodeCollector


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("tiny"), COUNT_CORPUS, vocab_size=300, hidden_size=64,
                            num_heads=1, intermediate_size=64)
    return load_tokenizer(path)


def make_collector(tokenizer, script, *, num_envs=2, turns=5, max_steps=4, mode="sync"):
    venv = make_vector_env(COUNT_TASK, num_envs, seed=0, mode=mode, env_kwargs={"max_steps": max_steps,
                                                                                "format_penalty": -0.1})
    engine = ScriptedEngine(tokenizer, script)
    memories = [WindowMemory(tokenizer, history_turns=1, max_prompt_tokens=256) for _ in range(num_envs)]
    decode = lambda ids: tokenizer.batch_decode(ids, skip_special_tokens=True)  # noqa: E731
    collector = FixedTurnCollector(venv, memories, engine, decode, SamplingParams(max_tokens=8), turns,
                                   tokenizer.pad_token_id, seed=0)
    return collector, engine, venv


def test_batch_layout_rewards_and_episode_boundaries(tokenizer):
    # env 0 waits until the step limit (4) truncates; env 1 ends its episode at turns 1 and 3.
    script = [["ACTION: wait", "ACTION: wait"], ["ACTION: wait", "ACTION: end"], ["ACTION: wait", "gibberish"],
              ["ACTION: wait", "ACTION: end"], ["ACTION: wait", "ACTION: wait"]]
    collector, engine, venv = make_collector(tokenizer, script)
    batch, stats = collector.collect()
    venv.close()
    T, N = 5, 2
    assert batch.rewards.shape == (T, N) and batch.response_ids.shape == (T, N, 8)
    assert batch.terminated[:, 1].tolist() == [False, True, False, True, False]
    assert batch.truncated[:, 0].tolist() == [False, False, False, True, False]
    assert not batch.terminated[:, 0].any() and not batch.truncated[:, 1].any()
    assert batch.rewards[:, 1].tolist() == pytest.approx([0.0, 1.0, -0.1, 1.0, 0.0])
    assert batch.action_valid[:, 1].tolist() == [True, True, False, True, True]
    # ids are handed out in order: env0 -> 0, env1 -> 1 at reset; env1's next episode 2 (after t=1);
    # at t=3 env0 (truncated) gets 3 and env1 (terminated) gets 4.
    assert batch.episode_ids[:, 0].tolist() == [0, 0, 0, 0, 3]
    assert batch.episode_ids[:, 1].tolist() == [1, 1, 2, 2, 4]
    # the exact engine ids are stored, left-aligned and masked
    for t in range(T):
        for n in range(N):
            ids = engine.returned[t][n]
            assert batch.response_ids[t, n, : len(ids)].tolist() == ids
            assert batch.response_mask[t, n].sum() == len(ids)
    assert [e.length for e in stats.episodes] == [2, 4, 2]  # env1 ends at t=1 (2 steps), env0 truncates, env1 again
    assert sorted(e.truncated for e in stats.episodes) == [False, False, True]
    assert stats.invalid_actions == 1 and stats.turns == T * N


def test_bootstrap_prompts_truncated_and_last_turn_only(tokenizer):
    script = [["ACTION: wait", "ACTION: wait"]] * 3 + [["ACTION: wait", "ACTION: end"]] + [["ACTION: wait", "ACTION: end"]]
    collector, _, venv = make_collector(tokenizer, script, turns=5, max_steps=4)
    batch, _ = collector.collect()
    venv.close()
    # env 0: truncated after turn 3 (step limit 4) -> bootstrap at (3, 0); last turn (4, 0) continues.
    # env 1: terminated at turns 3 and 4 -> no bootstrap at all.
    assert set(batch.bootstrap_prompts) == {(3, 0), (4, 0)}
    text = tokenizer.decode(batch.bootstrap_prompts[(3, 0)])
    assert "Current observation:\ncount 4" in text  # the cut episode's own final observation
    assert "count 4" not in tokenizer.decode(batch.prompt_ids[4, 0, : batch.prompt_lengths[4, 0]])


def test_episodes_continue_across_batches(tokenizer):
    script = [["ACTION: wait", "ACTION: wait"]] * 6
    collector, engine, venv = make_collector(tokenizer, script, turns=3, max_steps=10)
    first, _ = collector.collect()
    second, _ = collector.collect()
    venv.close()
    for n in range(2):
        boot = first.bootstrap_prompts[(2, n)]
        assert second.prompt_ids[0, n, : second.prompt_lengths[0, n]].tolist() == boot
        assert second.episode_ids[0, n] == first.episode_ids[2, n]
    assert "count 3" in tokenizer.decode(first.bootstrap_prompts[(2, 0)])


def test_async_matches_sync(tokenizer):
    script = [["ACTION: wait", "ACTION: end"], ["ACTION: end", "x"], ["ACTION: wait", "ACTION: wait"]]
    batches = []
    for mode in ("sync", "async"):
        collector, _, venv = make_collector(tokenizer, script, turns=3, mode=mode)
        batches.append(collector.collect()[0])
        venv.close()
    a, b = batches
    for field in ("prompt_ids", "response_ids", "rewards", "terminated", "truncated", "episode_ids"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert a.bootstrap_prompts == b.bootstrap_prompts


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_state_dict_round_trip_continues_in_flight_episodes_exactly(tokenizer, mode):
    import json

    first = [["ACTION: wait", "ACTION: wait"], ["ACTION: end", "gibberish"], ["ACTION: wait", "ACTION: wait"]]
    then = [["ACTION: wait", "ACTION: end"], ["ACTION: wait", "ACTION: wait"], ["ACTION: end", "ACTION: wait"]]
    a, _, venv_a = make_collector(tokenizer, first + then, turns=3, mode=mode)
    b, _, venv_b = make_collector(tokenizer, then, turns=3, mode=mode)
    try:
        a.collect()
        state = json.loads(json.dumps(a.state_dict()))  # plain JSON, no pickle
        assert state["lengths"] == [1, 3] and state["invalid"] == [0, 1]  # env 0 restarted at t=1
        replies = state["envs"][1]["replies"]  # the decoded replies since env 1's reset
        assert len(replies) == 3 and replies[0] == replies[2] == "ACTION: wait"
        b.load_state_dict(state)
        batch_a, stats_a = a.collect()
        batch_b, stats_b = b.collect()
        assert torch.equal(batch_a.prompt_ids, batch_b.prompt_ids)
        assert torch.equal(batch_a.rewards, batch_b.rewards) and torch.equal(batch_a.episode_ids, batch_b.episode_ids)
        assert torch.equal(batch_a.truncated, batch_b.truncated) and stats_a.episodes == stats_b.episodes
        assert a.state_dict() == b.state_dict()
        state["observations"][1] = "count 99"  # a replay that does not reproduce the saved observation
        with pytest.raises(ValueError, match="not deterministic"):
            b.load_state_dict(state)
    finally:
        venv_a.close()
        venv_b.close()


@pytest.mark.parametrize("kind", ["fixed_turn", "episodes"])
def test_env_collectors_satisfy_the_collector_protocol(tokenizer, kind):
    script = [["ACTION: end", "ACTION: end"]] * 3
    if kind == "fixed_turn":
        collector, engine, venv = make_collector(tokenizer, script, turns=2)
    else:
        venv = make_vector_env(COUNT_TASK, 2, seed=0, mode="sync", env_kwargs={"max_steps": 4})
        engine = ScriptedEngine(tokenizer, script)
        memories = [WindowMemory(tokenizer, history_turns=1, max_prompt_tokens=256) for _ in range(2)]
        collector = EpisodeCollector(venv, memories, engine, lambda ids: tokenizer.batch_decode(
            ids, skip_special_tokens=True), SamplingParams(max_tokens=8), tokenizer.pad_token_id, seed=0, group_size=1)
    assert isinstance(collector, Collector)
    with collector.weights_changing():  # nothing to hold: collecting still works inside it
        batch, stats = collector.collect()
    assert batch.num_envs == 2 and len(stats.episodes) >= 2 and all(e.success for e in stats.episodes)
    collector.load_state_dict(collector.state_dict())
    assert not venv.unwrapped.closed
    collector.close()
    assert venv.unwrapped.closed
