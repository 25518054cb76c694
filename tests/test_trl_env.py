"""Environment classes in TRL's convention (``reset(**row)``, public methods as tools, ``get_reward()``)
run unchanged as tool tasks: the tools and their schemas, one instance per conversation, scripted
conversations through the tool loop, raising tools and unusable rewards, the derived warm-up and
corpus, preflight's one-line errors and a short ``verlog-train`` run. The classes are defined here,
outside Verlog, as a user would write them."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
from pathlib import Path

import pytest

from helpers import cli_error_line, train_cli
from verlog.agent import AgentLimits, ToolAgentLoop
from verlog.agent.class_task import FINAL_REPLY
from verlog.agent.formats import tool_call_text
from verlog.agent.scripted import ScriptedEngine
from verlog.agent.tasks import make_agent_task
from verlog.config import ConfigError, load_recipe
from verlog.logging import read_metrics
from verlog.models import load_tokenizer
from verlog.preflight import check_buildable
from verlog.rollout.conversations import ToolLoopCollector
from verlog.rollout.engine import Generation, SamplingParams
from verlog.tiny_model import build_tiny_model
from verlog.tools.methods import tool_method_names

HERE = Path(__file__).resolve().parent
MODULE = __name__  # importable by this name wherever tests/ is on the path (pytest puts it there)
TASK = f"{MODULE}:CounterEnv"
ROWS = f"{MODULE}:counter_rows"
LIMITS = AgentLimits(max_response_tokens=64, max_total_tokens=1024, max_assistant_turns=4)


# ----------------------------------------------------------------- environment classes, as a user writes them
class CounterEnv:
    """Bring a counter from 0 to the row's target with ``increment``; reward 1 when it is there."""

    def __init__(self) -> None:
        self.counter = 0
        self.target = 0

    def reset(self, target: int = 3, **kwargs) -> str | None:
        self.counter, self.target = 0, target
        log = os.environ.get("COUNTER_ENV_LOG")
        if log:  # lets the training test see that the run used this class
            with open(log, "a") as f:
                f.write(f"{target}\n")
        return f" The counter is at {self.counter}."

    def get_reward(self) -> float:
        return float(self.counter == self.target)

    def increment(self, step: int) -> int:
        """Add to the counter.

        Args:
            step: how much to add (0 to 9).

        Returns:
            The counter's new value.
        """
        if not 0 <= step <= 9:
            raise ValueError(f"step must be 0..9, got {step}")
        self.counter += step
        return self.counter

    def read(self) -> str:
        """The counter's value."""
        return f"counter={self.counter}"

    def _bump(self) -> None:  # private: not a tool
        self.counter += 1

    @staticmethod
    def clamp(x: int) -> int:  # static: not a tool (the convention's tools are an instance's methods)
        """Clamp to 0..9.

        Args:
            x: a value.
        """
        return max(0, min(9, x))


def counter_rows(n: int, seed: int) -> list[dict]:
    """``n`` rows: a chat prompt and the target (1..9) that reaches ``reset``."""
    rng = random.Random(seed)
    targets = [rng.randint(1, 9) for _ in range(n)]
    return [{"prompt": [{"role": "user", "content": f"Make the counter {t}."}], "target": t} for t in targets]


ROW_LIST = [{"prompt": "Make the counter 4.", "target": 4}, {"prompt": "Make the counter 7.", "target": 7}]


class NoneRewardEnv(CounterEnv):
    def get_reward(self) -> float | None:
        return None


class AsyncRewardEnv(CounterEnv):
    async def get_reward(self) -> float:
        await asyncio.sleep(0)
        return 2.0 * (self.counter == self.target)


class SilentEnv(CounterEnv):
    def reset(self, **kwargs) -> None:
        self.counter = 0


class NoToolsEnv:
    def reset(self, **kwargs) -> None:
        pass

    def get_reward(self) -> float:
        return 0.0


class NoRewardEnv:
    def reset(self, **kwargs) -> None:
        pass

    def move(self, direction: str) -> str:
        """Move.

        Args:
            direction: where.
        """
        return direction


class UntypedEnv(NoToolsEnv):
    def move(self, direction):
        """Move.

        Args:
            direction: where.
        """
        return direction


class StrictResetEnv(CounterEnv):
    def reset(self) -> None:
        self.counter = 0


def rows_without_prompt(n: int, seed: int) -> list[dict]:
    return [{"target": 1} for _ in range(n)]


def rows_of_wrong_length(n: int, seed: int) -> list[dict]:
    return counter_rows(n + 1, seed)


# ------------------------------------------------------------------------------------------------- helpers
class Solver:
    """A fake engine: calls ``increment`` with the prompt's target (or ``step``), then ends with
    :data:`FINAL_REPLY`. Records the generations it returns."""

    def __init__(self, tok, step=None):
        self.tok, self.step, self.generated = tok, step, []

    def generate(self, prompts, params: SamplingParams):
        out = []
        for ids in prompts:
            text = self.tok.decode(ids)
            target = int(re.findall(r"Make the counter (\d+)\.", text)[-1])
            done = "<tool_response>" in text
            reply = FINAL_REPLY if done else tool_call_text("increment", {"step": self.step or target})
            gen = self.tok.encode(reply, add_special_tokens=False) + [self.tok.eos_token_id]
            self.generated.append(gen)
            out.append(Generation(gen, [-0.5] * len(gen), "stop"))
        return out


@pytest.fixture(scope="module")
def task():
    return make_agent_task(TASK, dataset=ROWS)


@pytest.fixture(scope="module")
def tok(task, tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", task.corpus(30, 1), vocab_size=400,
                            hidden_size=64, num_heads=1, num_kv_heads=1, intermediate_size=64, num_layers=1)
    return load_tokenizer(path)


def run_script(tok, conv, replies):
    loop = ToolAgentLoop(ScriptedEngine(tok, replies), tok, conv.tools, reward_fn=conv.reward_fn, limits=LIMITS)
    return asyncio.run(loop.run(conv.messages))


def call(tool, **arguments) -> str:
    return asyncio.run(tool.execute("i", arguments)).text


# ------------------------------------------------------------------------------------------------- tests
def test_tools_are_the_public_methods_with_schemas_from_hints_and_docstrings(task):
    from transformers.utils import get_json_schema

    assert tool_method_names(CounterEnv) == ["increment", "read"]  # not reset/get_reward/_bump/clamp
    conv = task.start(counter_rows(1, 0)[0])
    schemas = {t.name: t.openai_schema()["function"] for t in conv.tools}
    assert schemas["increment"] == {
        "name": "increment", "description": "Add to the counter.",
        "parameters": {"type": "object", "properties": {"step": {"type": "integer",
                                                                 "description": "how much to add (0 to 9)."}},
                       "required": ["step"], "additionalProperties": False}}
    assert schemas["read"]["parameters"]["properties"] == {} and schemas["read"]["description"] == "The counter's value."
    # the same name, description, argument types and required ones as the schema TRL renders (transformers')
    hf = get_json_schema(CounterEnv().increment)["function"]
    assert (hf["name"], hf["description"], hf["parameters"]["required"]) == ("increment", "Add to the counter.", ["step"])
    assert hf["parameters"]["properties"]["step"]["type"] == schemas["increment"]["parameters"]["properties"]["step"]["type"]


def test_rows_prompt_and_reset_text_open_the_conversation(task):
    rows = task.make_items(3, 5)
    assert rows == counter_rows(3, 5) and task.make_items(3, 5) == rows
    conv = task.start(rows[0])
    assert conv.messages == [{"role": "user", "content": f"Make the counter {rows[0]['target']}. The counter is at 0."}]
    listed = make_agent_task(TASK, dataset=f"{MODULE}:ROW_LIST")  # a list of rows: drawn from the seed
    drawn = listed.make_items(6, 0)
    assert drawn == listed.make_items(6, 0) and all(r in ROW_LIST for r in drawn)
    assert listed.start(drawn[0]).messages[0]["content"].startswith("Make the counter ")  # a text prompt
    # no dataset: an empty user message that reset's text fills; a reset that returns nothing is refused
    rowless = make_agent_task(TASK)
    assert rowless.start(rowless.make_items(1, 0)[0]).messages == [{"role": "user", "content": " The counter is at 0."}]
    silent = make_agent_task(f"{MODULE}:SilentEnv")
    with pytest.raises(RuntimeError, match="SilentEnv: starting an episode failed: ValueError: the prompt's last "
                                           "message is empty"):
        silent.start(silent.make_items(1, 0)[0])


def test_each_conversation_has_its_own_instance(task, tok):
    row = counter_rows(1, 2)[0]
    before = json.dumps(row)
    a, b = task.start(row), task.start(row)
    tools_a, tools_b = ({t.name: t for t in c.tools} for c in (a, b))
    assert call(tools_a["increment"], step=row["target"]) == str(row["target"])
    assert call(tools_b["read"]) == "counter=0"  # b's counter did not move
    assert json.dumps(row) == before  # reset got a copy
    from verlog.chat.trajectory import Trajectory

    rewards = [asyncio.run(c.reward_fn(None, Trajectory([], 0, [], [], []))) for c in (a, b)]
    assert rewards == [1.0, 0.0]
    # through the collector: groups repeat the same row; a shared instance would overshoot every target
    engine = Solver(tok)
    collector = ToolLoopCollector(task, engine, tok, LIMITS, num_envs=4, group_size=2, seed=3,
                                  pad_id=tok.pad_token_id, sampling=SamplingParams())
    batch, stats = collector.collect()
    assert [e.episode_return for e in stats.episodes] == [1.0] * 4 and stats.env_faults == 0
    assert all(e.success and e.task == TASK for e in stats.episodes)
    assert batch.rewards[1].tolist() == [1.0] * 4 and batch.rewards[0].eq(0).all()


def test_a_scripted_conversation_calls_the_method_with_its_arguments_and_reads_the_reward(task, tok):
    row = counter_rows(1, 4)[0]
    target = row["target"]
    first = target // 2
    traj = run_script(tok, task.start(row), [tool_call_text("increment", {"step": first}),
                                             tool_call_text("increment", {"step": target - first}), FINAL_REPLY])
    assert [t.calls[0].name for t in traj.turns[:2]] == ["increment", "increment"]
    assert traj.turns[0].calls[0].arguments == {"step": first}
    assert [t.responses for t in traj.turns] == [[str(first)], [str(target)], []]
    assert traj.stop_reason == "answer" and traj.answer == FINAL_REPLY and traj.reward == 1.0
    assert "The counter is at 0." in tok.decode(traj.ids[: traj.prompt_length])
    missed = run_script(tok, task.start(row), [tool_call_text("increment", {"step": first}), FINAL_REPLY])
    assert missed.reward == (1.0 if first == target else 0.0)
    async_task = make_agent_task(f"{MODULE}:AsyncRewardEnv", dataset=ROWS)  # async get_reward is awaited
    assert run_script(tok, async_task.start(row), [tool_call_text("increment", {"step": target}),
                                                   FINAL_REPLY]).reward == 2.0


def test_a_raising_method_is_an_error_text_and_the_conversation_goes_on(task, tok):
    row = counter_rows(1, 6)[0]
    traj = run_script(tok, task.start(row), [tool_call_text("increment", {"step": 50}),
                                             tool_call_text("increment", {"step": "two"}),
                                             tool_call_text("increment", {"step": row["target"]}), FINAL_REPLY])
    first, second, third = (t.responses[0] for t in traj.turns[:3])
    assert first == "Error: tool 'increment' failed: ValueError: step must be 0..9, got 50"
    assert second.startswith("Error: tool 'increment': argument 'step' must be integer")
    assert third == str(row["target"]) and traj.reward == 1.0 and traj.stats["tool_errors"] == 2


def test_an_unusable_reward_is_zero_counted_and_explained(tok):
    none_task = make_agent_task(f"{MODULE}:NoneRewardEnv", dataset=ROWS)
    collector = ToolLoopCollector(none_task, Solver(tok), tok, LIMITS, num_envs=2, group_size=1, seed=0,
                                  pad_id=tok.pad_token_id, sampling=SamplingParams())
    batch, stats = collector.collect()
    assert batch.rewards.eq(0).all() and stats.env_faults == 2
    assert all(m.endswith("get_reward returned None (counted as 0)") for m in stats.env_fault_messages)
    traj = run_script(tok, none_task.start(counter_rows(1, 0)[0]), [FINAL_REPLY])
    assert traj.reward == 0.0 and traj.stats["reward_fallbacks"] == 1


def test_warmup_scripts_and_corpus_come_from_the_class(task, tok):
    row = counter_rows(1, 8)[0]
    scripts = task.warmup_scripts(row)
    assert scripts == task.warmup_scripts(row) and len(scripts) == 2  # one per tool, seeded by the row
    calls = [json.loads(s[0].removeprefix("<tool_call>\n").removesuffix("\n</tool_call>")) for s in scripts]
    assert [c["name"] for c in calls] == ["increment", "read"] and all(s[1] == FINAL_REPLY for s in scripts)
    assert calls[0]["arguments"] == {"step": row["target"]} and calls[1]["arguments"] == {}  # the prompt's integer
    text = task.corpus(1, 8)[0]
    assert f"Make the counter {row['target']}. The counter is at 0." in text and '"name": "increment"' in text
    assert f"<tool_response>\n{row['target']}\n</tool_response>" in text  # the real method's response
    from verlog.builders import agent_warmup_examples

    cfg = load_recipe("calculator_tools", [f"agent.task={TASK}", f"agent.dataset={ROWS}"])
    examples = agent_warmup_examples(cfg, tok, items=2, seed=0)
    assert len(examples) == 2 * 2 * 2  # rows x scripts x turns
    assert [len(ex.replies) for ex in examples[:4]] == [2, 1, 2, 1]  # the first prompt: either tool's call


@pytest.mark.parametrize("overrides, message", [
    (["agent.task=no_such_module:Env"], "agent.task: cannot load 'no_such_module:Env': no module named"),
    ([f"agent.task={MODULE}:Missing"], f"agent.task: cannot load '{MODULE}:Missing': module '{MODULE}' has no"),
    ([f"agent.task={MODULE}:counter_rows"], f"agent.task: {MODULE}:counter_rows is not a class; the rows of a row "
                                            "function are played by an agent of agent.loop=proxy"),
    ([f"agent.task={MODULE}:NoToolsEnv"], f"agent.task: {MODULE}:NoToolsEnv has no public method to offer as a tool"),
    ([f"agent.task={MODULE}:NoRewardEnv"], f"agent.task: {MODULE}:NoRewardEnv has no get_reward method"),
    ([f"agent.task={MODULE}:UntypedEnv"], f"agent.task: {MODULE}:UntypedEnv.move cannot be a tool: tool 'move': "
                                          "parameter 'direction' has no type annotation"),
    ([f"agent.task={MODULE}:StrictResetEnv", f"agent.dataset={ROWS}"],
     f"agent.task: {MODULE}:StrictResetEnv.reset cannot take the row's columns (prompt, target)"),
    ([f"agent.task={TASK}", f"agent.dataset={MODULE}:rows_without_prompt"],
     f"agent.dataset: row 0 of {MODULE}:rows_without_prompt(2, 0) has no 'prompt' column (columns: target)"),
    ([f"agent.task={TASK}", f"agent.dataset={MODULE}:rows_of_wrong_length"],
     f"agent.dataset: {MODULE}:rows_of_wrong_length(2, 0) returned 3 rows; expected a list of 2 rows"),
    ([f"agent.task={TASK}", "agent.dataset=no_such_module:rows"], "agent.dataset: cannot load 'no_such_module:rows'"),
    ([f"agent.task={TASK}", "agent.loop=proxy"], f"agent.task: an environment class ({TASK}) runs with "
                                                 "agent.loop=tools, not proxy"),
    ([f"agent.dataset={ROWS}"], "agent.dataset: rows are for an agent.task given as a class"),
    (["agent.task=chess"], "agent.task: expected one of calculator, search or an import path package.module:Class, got"),
])
def test_preflight_refuses_with_one_line_naming_the_key(overrides, message):
    cfg = load_recipe("calculator_tools", overrides)  # the values alone are valid
    with pytest.raises(ConfigError) as err:
        check_buildable(cfg)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_preflight_accepts_a_class_with_or_without_rows_and_the_cli_says_one_line(capsys):
    check_buildable(load_recipe("calculator_tools", [f"agent.task={TASK}", f"agent.dataset={ROWS}"]))
    check_buildable(load_recipe("calculator_tools", [f"agent.task={TASK}"]))  # reset writes the prompt
    check_buildable(load_recipe("tiny", [f"agent.task={MODULE}:NoToolsEnv"]))  # text envs: agent.task unused
    from verlog.cli import train_main

    line = cli_error_line(train_main, ["calculator_tools", f"agent.task={MODULE}:NoToolsEnv"], capsys)
    assert line.startswith(f"error: agent.task: {MODULE}:NoToolsEnv has no public method"), line


# the calculator's short runs (tests/test_agent_training.py), lighter still: no untrained evaluation, 2 episodes
SHORT = ["iterations=2", "ppo.critic_warmup_iterations=1", "env.num_envs=4", "format_warmup.steps=5",
         "format_warmup.episodes=2", "model.tiny.corpus_episodes=8", "eval.episodes=2", "eval.baseline=false",
         "logging.progress=false", "model.tiny.hidden_size=64", "model.tiny.num_heads=1",
         "model.tiny.intermediate_size=64", "model.tiny.vocab_size=400", "rollout.max_response_tokens=24",
         "ppo.epochs=1", "ppo.minibatches=1"]


@pytest.mark.slow
def test_a_short_verlog_train_run_on_the_class(tmp_path):
    log = tmp_path / "resets.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "COUNTER_ENV_LOG": str(log)}
    train_cli("calculator_tools", f"agent.task={TASK}", f"agent.dataset={ROWS}", *SHORT, f"run_root={tmp_path}",
              f"model.cache_dir={tmp_path / 'cache'}", "name=r", env=env)
    rows = read_metrics(tmp_path / "r" / "metrics.jsonl")
    assert [r["phase"] for r in rows] == ["critic_warmup", "ppo"]
    assert all(r["episodes"] == 4 and r["rollout/turns"] >= 4 for r in rows)
    result = json.loads((tmp_path / "r" / "eval.json").read_text())
    assert result["task"] == f"agent/{TASK}" and result["episodes"] == 2 and "trained" in result
    targets = log.read_text().split()
    assert len(targets) >= 2 * 4 and set(targets) <= {str(t) for t in range(1, 10)}  # this class ran the episodes
