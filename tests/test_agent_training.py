"""Training on tool tasks: the calculator's warm-up scripts, scripted warm-up prompts, the tool-loop and
proxy collectors (ids trained = ids generated, rewards, groups, failures) and short runs of both recipes."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
import torch

from helpers import train_cli
from verlog.agent import AgentLimits, ToolAgentLoop
from verlog.agent.calculator import answer_text, calculator_tools, make_questions, tool_call_text, warmup_scripts
from verlog.agent.loading import load_agent_fn
from verlog.agent.scripted import ScriptedEngine, scripted_examples
from verlog.agent.tasks import make_agent_task
from verlog.config import ConfigError, load_recipe
from verlog.logging import read_metrics
from verlog.preflight import check_buildable
from verlog.rollout.conversations import ProxyCollector, ToolLoopCollector
from verlog.rollout.engine import Collector, Generation, SamplingParams
from verlog.tools.examples import evaluate_arithmetic

LIMITS = AgentLimits(max_response_tokens=64, max_total_tokens=1024, max_assistant_turns=3)
TASK = make_agent_task("calculator", max_operand=20)


@pytest.fixture
def tok(calc_tok):
    """The calculator tokenizer of ``conftest.py``."""
    return calc_tok


class Oracle:
    """A fake engine that solves the calculator: it calls ``calculate`` on a prefix of the question's
    expression (the whole one, or only the first operand when ``wrong`` says so for that question), then
    answers with the last tool response. Records every generation it returns."""

    def __init__(self, tok, wrong=lambda expression: False):
        self.tok, self.wrong, self.generated = tok, wrong, []

    def generate(self, prompts, params: SamplingParams):
        out = []
        for ids in prompts:
            text = self.tok.decode(ids)
            expression = re.findall(r"What is (.*?)\?", text)[-1]
            responses = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text)
            if responses:
                reply = f"ANSWER: {responses[-1]}"
            else:
                reply = tool_call_text("calculate", {"expression": expression.split(" ")[0] if self.wrong(expression)
                                                     else expression})
            gen_ids = self.tok.encode(reply, add_special_tokens=False) + [self.tok.eos_token_id]
            logprobs = [-0.5 - 0.01 * k for k in range(len(gen_ids))]
            self.generated.append(gen_ids)
            out.append(Generation(gen_ids, logprobs, "stop"))
        return out


def test_warmup_scripts_are_prefix_calls_answered_with_their_value():
    q = make_questions(1, 3, 20)[0]
    a, op1, b, op2, c = q.expression.split(" ")
    scripts = warmup_scripts(q)
    expressions = [json.loads(s[0][len("<tool_call>\n"):-len("\n</tool_call>")])["arguments"]["expression"]
                   for s in scripts]
    assert expressions == [a, f"{a} {op1} {b}", q.expression]
    for script, e in zip(scripts, expressions):
        value = evaluate_arithmetic(e)
        assert script[1] == f"ANSWER: {value}"
    assert answer_text(12.0) == "ANSWER: 12" and answer_text(2.5) == "ANSWER: 2.5"
    assert make_questions(5, 7, 20) == make_questions(5, 7, 20)
    assert all(2 <= int(x) <= 20 for q in make_questions(50, 1, 20) for x in q.expression.split(" ")[::2])
    with pytest.raises(ValueError, match="max_operand"):
        make_questions(1, 0, 1)


def test_scripted_examples_use_the_loops_own_prompts(tok):
    q = make_questions(1, 5, 20)[0]
    scripts = warmup_scripts(q)
    make_loop = lambda engine: ToolAgentLoop(engine, tok, calculator_tools(), limits=LIMITS)  # noqa: E731
    examples = asyncio.run(scripted_examples(tok, make_loop, q.messages(), scripts))
    # per script: the shared first prompt (with all three calls to draw from), then its answer prompt
    assert len(examples) == 6
    firsts, answers = examples[0::2], examples[1::2]
    assert all(ex.prompt_ids == firsts[0].prompt_ids and ex.replies == [s[0] for s in scripts] for ex in firsts)
    assert [ex.replies for ex in answers] == [[s[1]] for s in scripts]
    # each answer prompt is what the loop builds after that call: the first prompt, the call, its result
    for k, ex in enumerate(answers):
        engine = ScriptedEngine(tok, scripts[k])
        traj = asyncio.run(make_loop(engine).run(q.messages()))
        assert ex.prompt_ids == traj.ids[: traj.turns[1].start]
        assert ex.prompt_ids[: len(firsts[0].prompt_ids)] == firsts[0].prompt_ids
        value = scripts[k][1].removeprefix("ANSWER: ")
        assert f"<tool_response>\n{value}\n</tool_response>" in tok.decode(ex.prompt_ids)
    with pytest.raises(ValueError, match="ran 2 turns"):  # the answer ends the run: a third reply is never used
        asyncio.run(scripted_examples(tok, make_loop, q.messages(), [scripts[0] + ["ANSWER: 1"]]))
    with pytest.raises(IndexError):
        ScriptedEngine(tok, []).generate([[1]], SamplingParams())


def check_ids_trained_are_ids_generated(batch, generated: list[list[int]]) -> None:
    trained = [batch.response_ids[t, n][batch.response_mask[t, n]].tolist()
               for t in range(batch.num_turns) for n in range(batch.num_envs) if batch.turns[t, n]]
    assert sorted(trained) == sorted(generated)


@pytest.mark.parametrize("group_size", [1, 2])
def test_tool_loop_collector_batches_whole_conversations(tok, group_size):
    engine = Oracle(tok, wrong=lambda e: e.startswith(("2 ", "3 ", "4 ", "5 ", "6 ")))
    collector = ToolLoopCollector(TASK, engine, tok, LIMITS, num_envs=8, group_size=group_size, seed=1,
                                  pad_id=tok.pad_token_id, sampling=SamplingParams())
    items = collector.round_items()
    assert items[::group_size] == TASK.make_items(8 // group_size, 1 * 1_000_003)
    batch, stats = collector.collect()
    assert (batch.num_turns, batch.num_envs) == (2, 8)
    check_ids_trained_are_ids_generated(batch, engine.generated)
    right = [not engine.wrong(q.expression) for q in items]
    assert batch.rewards[1].tolist() == [float(r) for r in right] and batch.rewards[0].eq(0).all()
    assert batch.terminated[1].all() and not batch.terminated[0].any() and not batch.truncated.any()
    assert batch.bootstrap_prompts == {}
    assert batch.group_ids[0].tolist() == [n // group_size for n in range(8)]
    assert [e.success for e in stats.episodes] == right and stats.turns == 16 and stats.invalid_actions == 0
    # the next round has new items and new episode ids; state restores the round
    state = collector.state_dict()
    assert collector.round_items() != items
    collector.load_state_dict({"round": 0})
    assert collector.round_items() == items
    collector.load_state_dict(state)
    records = collector.evaluate(make_questions(6, 9, 20), greedy=True, seed=0)
    assert [r.success for r in records] == [not engine.wrong(q.expression) for q in make_questions(6, 9, 20)]
    assert [r.episode_id for r in records] == list(range(6)) and {r.task for r in records} == {"calculator"}
    assert all(r.progression == float(r.success) and r.failure is None for r in records)
    assert isinstance(collector, Collector)
    with collector.weights_changing():
        pass


def agent_failing_after_one_call(item, *, base_url, reward_url, temperature, max_tokens):
    from openai import OpenAI

    OpenAI(base_url=base_url, api_key="x", max_retries=0).chat.completions.create(
        model="m", messages=item.messages(), max_tokens=max_tokens)
    raise RuntimeError("agent bug")


@pytest.mark.parametrize("credit", ["gae", "final"])
def test_proxy_collector_records_an_openai_agent(tok, credit):
    engine = Oracle(tok, wrong=lambda e: e.startswith(("3 ", "4 ", "5 ")))
    agent = load_agent_fn("verlog.agent.calculator_openai:solve")
    collector = ProxyCollector(TASK, engine, tok, agent, max_response_tokens=64, credit=credit, gamma=1.0,
                               num_envs=6, group_size=1, seed=2, pad_id=tok.pad_token_id, sampling=SamplingParams())
    try:
        assert isinstance(collector, Collector)
        items = collector.round_items()
        gate = collector.proxy.gate
        with collector.weights_changing():  # new requests wait, none is in flight
            assert gate.is_paused and gate.inflight == 0
        batch, stats = collector.collect()  # the gate opened again after the weights changed
        check_ids_trained_are_ids_generated(batch, engine.generated)
        right = torch.tensor([0.0 if engine.wrong(q.expression) else 1.0 for q in items])
        assert (batch.num_turns, batch.num_envs) == (2, 6)
        assert torch.equal(batch.rewards[1], right)
        if credit == "gae":  # the reward on the last call only; the first call is not terminal
            assert batch.rewards[0].eq(0).all() and not batch.terminated[0].any()
        else:
            assert torch.equal(batch.rewards[0], right) and batch.terminated.all()
        assert [e.episode_return for e in stats.episodes] == right.tolist() and stats.env_faults == 0

        # an agent that raises after a call: counted and logged, its reward is 0
        collector.agent_fn = agent_failing_after_one_call
        batch, stats = collector.collect()
        assert stats.env_faults == 6 and all("agent bug" in m for m in stats.env_fault_messages)
        assert all("agent bug" in e.failure for e in stats.episodes)
        assert batch.rewards.eq(0).all() and [e.length for e in stats.episodes] == [1] * 6
        collector.agent_fn = lambda item, **kw: None  # never calls the proxy
        with pytest.raises(RuntimeError, match="no assistant turn"):
            collector.collect()
    finally:
        collector.close()


def test_agent_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="^agent.loop"):
        load_recipe("calculator_tools", ["agent.loop=web"])
    with pytest.raises(ConfigError, match="^agent.task"):
        check_buildable(load_recipe("calculator_tools", ["agent.task=chess"]))
    with pytest.raises(ConfigError, match="^algo.algorithm: gigpo"):
        check_buildable(load_recipe("calculator_tools", ["algo.algorithm=gigpo", "algo.group_size=4"]))
    with pytest.raises(ConfigError, match="^agent.agent"):
        check_buildable(load_recipe("calculator_proxy", ["agent.agent=verlog.nothing:here"]))
    assert load_recipe("calculator_tools", ["env.task=not/registered"]).agent.loop == "tools"


SHORT = ["iterations=2", "ppo.critic_warmup_iterations=1", "env.num_envs=4", "format_warmup.steps=5",
         "format_warmup.episodes=4", "model.tiny.corpus_episodes=20", "eval.episodes=4", "logging.progress=false",
         "model.tiny.hidden_size=64", "model.tiny.num_heads=1", "model.tiny.intermediate_size=64",
         "model.tiny.vocab_size=400", "rollout.max_response_tokens=24"]


@pytest.mark.parametrize("recipe", ["calculator_tools", "calculator_proxy"])
def test_short_run_of_each_calculator_recipe(tmp_path, recipe):
    train_cli(recipe, *SHORT, f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", "name=r")
    rows = read_metrics(tmp_path / "r" / "metrics.jsonl")
    assert [r["phase"] for r in rows] == ["critic_warmup", "ppo"]
    assert all(r["episodes"] == 4 and r["rollout/turns"] >= 4 for r in rows)
    result = json.loads((tmp_path / "r" / "eval.json").read_text())
    assert result["task"] == "agent/calculator" and result["episodes"] == 4
    assert set(result) >= {"untrained", "trained"}
