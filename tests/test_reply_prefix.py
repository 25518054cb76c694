"""The reply prefix (``memory.reply_prefix``) from prompt to env and back: the engine gets prompts ending
with the prefix's ids, the ids trained are exactly the generated ones, the env and the history see
prefix + completion, and the format warm-up's targets are the part after the prefix. The last test
checks on SmolLM2-135M-Instruct that greedy first replies with the prefix ``ACTION:`` parse as actions."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import COUNT_CORPUS, COUNT_TASK, ScriptedEngine
from verlog.envs import make_env
from verlog.envs.vector import make_vector_env
from verlog.evaluate import ModelPolicy
from verlog.memory import WindowMemory
from verlog.models import load_tokenizer
from verlog.rollout.collector import FixedTurnCollector
from verlog.rollout.engine import SamplingParams
from verlog.rollout.episodes import EpisodeCollector
from verlog.rollout.runner import EpisodeSpec, generate_turn, run_episodes
from verlog.tiny_model import build_tiny_model
from verlog.warmup import collect_prompts, format_warmup

PREFIX = "ACTION:"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), COUNT_CORPUS, vocab_size=300, hidden_size=64,
                            num_heads=1, intermediate_size=64)


@pytest.fixture(scope="module")
def tokenizer(tiny_dir):
    return load_tokenizer(tiny_dir)


def decoder(tokenizer):
    return lambda ids: tokenizer.batch_decode(ids, skip_special_tokens=True)


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def test_run_episodes_prompts_end_with_the_prefix_and_the_env_sees_the_whole_reply(tokenizer):
    engine = ScriptedEngine(tokenizer, [[" wait"], [" end"]])  # completions: the model writes after the prefix
    policy = ModelPolicy(engine, decoder(tokenizer), SamplingParams(max_tokens=8, greedy=True))
    [record] = run_episodes([EpisodeSpec(COUNT_TASK, 0, 0)], policy, num_envs=1, record_turns=True,
                            make_memory=lambda: WindowMemory(tokenizer, history_turns=1, reply_prefix=PREFIX),
                            env_kwargs={"max_steps": 4})
    assert [t["reply"] for t in record.turns] == ["ACTION: wait", "ACTION: end"]
    assert [t["action"] for t in record.turns] == ["wait", "end"]
    assert record.success and record.invalid_actions == 0
    # the prompts are those of a memory without the prefix, plus the prefix's ids; the history holds
    # the whole reply "ACTION: wait"
    plain = WindowMemory(tokenizer, history_turns=1)
    env = make_env(COUNT_TASK, max_steps=4)
    observation, info = env.reset(seed=0)
    plain.start_episode(info["instruction"], observation, info["context"])
    assert engine.prompts[0][0] == plain.prompt_ids()[0] + encode(tokenizer, PREFIX)
    observation, *_, info = env.step("ACTION: wait")
    plain.add_turn("ACTION: wait", observation, info["context"])
    assert engine.prompts[1][0] == plain.prompt_ids()[0] + encode(tokenizer, PREFIX)
    assert "assistant\nACTION: wait<|im_end|>" in tokenizer.decode(engine.prompts[1][0])
    env.close()


def test_generate_turn_returns_the_generated_ids_and_joined_replies(tokenizer):
    memories = [WindowMemory(tokenizer, history_turns=0, reply_prefix=PREFIX), WindowMemory(tokenizer, history_turns=0)]
    for memory in memories:
        memory.start_episode("Say wait or end.", "count 0")
    engine = ScriptedEngine(tokenizer, [[" wait", "ACTION: end"]])
    prompts, gens, replies = generate_turn(memories, engine, decoder(tokenizer), SamplingParams(max_tokens=8))
    assert replies == ["ACTION: wait", "ACTION: end"]  # a memory without a prefix: the completion alone
    assert [g.token_ids for g in gens] == engine.returned[0]
    assert gens[0].token_ids == encode(tokenizer, " wait") + [tokenizer.eos_token_id]  # never re-tokenised
    assert prompts == engine.prompts[0] and prompts[0] == prompts[1] + encode(tokenizer, PREFIX)


@pytest.mark.parametrize("collector_kind", ["fixed", "episodes"])
def test_collectors_train_the_generated_ids_and_step_with_whole_replies(tokenizer, collector_kind):
    num_envs = 2
    venv = make_vector_env(COUNT_TASK, num_envs, seed=0, mode="sync", env_kwargs={"max_steps": 3,
                                                                                  "format_penalty": -0.1})
    memories = [WindowMemory(tokenizer, history_turns=1, max_prompt_tokens=256, reply_prefix=PREFIX)
                for _ in range(num_envs)]
    engine = ScriptedEngine(tokenizer, [[" wait", " end"], [" wait", " wait"], [" end", " wait"]])
    args = (venv, memories, engine, decoder(tokenizer), SamplingParams(max_tokens=8))
    if collector_kind == "fixed":
        collector = FixedTurnCollector(*args, 3, tokenizer.pad_token_id, seed=0)
    else:
        collector = EpisodeCollector(*args, tokenizer.pad_token_id, seed=0, group_size=1)
    batch, stats = collector.collect()
    collector.close()
    assert bool(batch.action_valid.all()) and stats.invalid_actions == 0  # "ACTION:" + " wait" parses
    completions = [encode(tokenizer, text) + [tokenizer.eos_token_id] for text in (" wait", " end")]
    for t, returned in enumerate(engine.returned):
        for j, ids in enumerate(returned):
            n = j if collector_kind == "fixed" or t == 0 else 0  # whole episodes: env 1 ends at its first turn
            assert ids in completions  # the completion's ids, without the prefix's
            assert batch.response_ids[t, n, : len(ids)].tolist() == ids
            assert int(batch.response_mask[t, n].sum()) == len(ids)
    prefix_ids = encode(tokenizer, PREFIX)
    assert all(p[-len(prefix_ids):] == prefix_ids for call in engine.prompts for p in call)
    # the second turn of env 0 shows its whole first reply in the history
    assert "assistant\nACTION: wait<|im_end|>" in tokenizer.decode(engine.prompts[1][0])


def test_warmup_targets_are_the_part_after_the_prefix(tokenizer, tiny_dir):
    from verlog.models import load_actor

    make_memory = lambda: WindowMemory(tokenizer, history_turns=1, reply_prefix=PREFIX)  # noqa: E731
    examples = collect_prompts(COUNT_TASK, make_memory, episodes=6, seed=0, env_kwargs={"max_steps": 3})
    prefix_ids = encode(tokenizer, PREFIX)
    assert examples and all(ex.prompt_ids[-len(prefix_ids):] == prefix_ids for ex in examples)
    assert all(sorted(ex.replies) == [" end", " wait"] for ex in examples)
    # the random play's history holds whole replies, as the runner hands on a model's
    assert any("assistant\nACTION: " in tokenizer.decode(ex.prompt_ids) for ex in examples)
    encoded = []

    def spy(text: str) -> list[int]:
        encoded.append(text)
        return encode(tokenizer, text)

    model = load_actor(tiny_dir)
    format_warmup(model, spy, tokenizer.eos_token_id, tokenizer.pad_token_id, examples, steps=1, batch_size=4,
                  lr=1e-3, seed=0)
    assert encoded and set(encoded) <= {" wait", " end"}
    with pytest.raises(ValueError, match="does not start with the reply prefix 'Sure:'"):
        collect_prompts(COUNT_TASK, lambda: WindowMemory(tokenizer, reply_prefix="Sure:"), episodes=1, seed=0)


# ---------------------------------------------------------------------------- SmolLM2-135M-Instruct
def test_smollm2_greedy_replies_with_the_prefix_are_valid_actions(smollm2_dir):
    from verlog.rollout.hf import HFEngine

    tokenizer = load_tokenizer(smollm2_dir)
    engine = HFEngine(str(smollm2_dir), tokenizer, seed=0)
    env = make_env("babyai/easy_goto", instruction_style="brief")
    seeds = range(4)
    memories = []
    for seed in seeds:
        observation, info = env.reset(seed=seed)
        memory = WindowMemory(tokenizer, history_turns=1, reply_prefix=PREFIX)
        memory.start_episode(info["instruction"], observation, info["context"])
        memories.append(memory)
    prompts, gens, replies = generate_turn(memories, engine, decoder(tokenizer),
                                           SamplingParams(max_tokens=8, greedy=True))
    prefix_ids = encode(tokenizer, PREFIX)
    assert all(p[-len(prefix_ids):] == prefix_ids for p in prompts)
    valid = []
    for seed, reply, gen in zip(seeds, replies, gens):
        completion = tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        assert reply == PREFIX + completion and not completion.startswith(PREFIX)
        env.reset(seed=seed)
        valid.append(env.step(reply)[4]["action_valid"])
    env.close()
    assert all(valid), replies
