"""Tests of verlog.agent and verlog.chat: token-in/token-out tool loop, parsing, limits, sample layouts, calculator."""

from __future__ import annotations

import asyncio
import json

import pytest

from helpers import small_corpus
from verlog.agent import AgentLimits, ToolAgentLoop
from verlog.agent.calculator import calculator_reward, calculator_tools, make_questions, parse_answer
from verlog.batch import TurnBatch
from verlog.chat import (ChatRenderer, parse_reply, reasoning_text, sequence_sample, strip_reasoning, turn_batch_inputs,
                         turn_samples)
from verlog.models import load_tokenizer
from verlog.rollout.engine import Generation, SamplingParams
from verlog.tiny_model import CHATML_TEMPLATE, PLAIN_CHATML_TEMPLATE, build_tiny_model
from verlog.tools import BaseTool, ToolResult, function_tool
from verlog.tools.examples import calculate

CORPUS = small_corpus() + ['<tool_call>\n{"name": "calculate", "arguments": {"expression": "3 + 4"}}\n</tool_call>',
                           "<tool_response>\n7\n</tool_response>", "ANSWER: 7", "What is 3 + 4?"]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", CORPUS, vocab_size=400, hidden_size=64,
                            num_heads=1, num_kv_heads=1, intermediate_size=64, num_layers=1)
    return load_tokenizer(path)


class Engine:
    """Scripted engine: each call returns the next script entry (a text, encoded + eos, or a list of
    ids), cut at ``max_tokens`` (finish "length"); logprobs are distinct per token and call."""

    def __init__(self, tok, script):
        self.tok, self.script, self.prompts, self.returned, self.params = tok, list(script), [], [], []

    def generate(self, prompts, params: SamplingParams):
        entry = self.script[min(len(self.prompts), len(self.script) - 1)]
        self.prompts.append(list(prompts[0]))
        self.params.append(params)
        ids = list(entry) if isinstance(entry, list) else self.tok.encode(entry, add_special_tokens=False) + [
            self.tok.eos_token_id]
        finish = "stop"
        if len(ids) > params.max_tokens:
            ids, finish = ids[: params.max_tokens], "length"
        logprobs = [-0.01 * (k + 1) - len(self.prompts) for k in range(len(ids))]
        self.returned.append((ids, logprobs))
        return [Generation(ids, logprobs, finish)]

    def load_weights(self, named_tensors):  # pragma: no cover
        raise NotImplementedError


def call(name, **arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


QUESTION = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "What is 3 + 4?"}]


def run(tok, script, tools=(calculate,), **kwargs):
    engine = Engine(tok, script)
    loop = ToolAgentLoop(engine, tok, list(tools), **kwargs)
    return asyncio.run(loop.run(QUESTION)), engine


# ------------------------------------------------------------------------------ template


def test_plain_chat_renders_byte_identical_to_plain_chatml(tok):
    assert tok.chat_template == CHATML_TEMPLATE
    convs = [
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "S"}, {"role": "user", "content": "a\nb"},
         {"role": "assistant", "content": "turn left"}, {"role": "user", "content": "émoji ✓  x"}],
    ]
    for messages in convs:
        for gen in (True, False):
            new = tok.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False)
            old = tok.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False,
                                          chat_template=PLAIN_CHATML_TEMPLATE)
            assert new == old


def test_template_renders_tools_tool_calls_and_grouped_tool_messages(tok):
    messages = QUESTION + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "calculate", "arguments": {"expression": "3+4"}}}]},
        {"role": "tool", "content": "7"}, {"role": "tool", "content": "8"}]
    text = tok.apply_chat_template(messages, tools=[calculate.openai_schema()], add_generation_prompt=True,
                                   tokenize=False)
    assert text.startswith("<|im_start|>system\nUse tools.\n\n# Tools\n")
    assert json.dumps(calculate.openai_schema()) in text
    assert text.count("<|im_start|>system") == 1
    assert '<tool_call>\n{"name": "calculate", "arguments": {"expression": "3+4"}}\n</tool_call><|im_end|>' in text
    assert text.endswith("<|im_start|>user\n<tool_response>\n7\n</tool_response>\n<tool_response>\n8\n"
                         "</tool_response><|im_end|>\n<|im_start|>assistant\n")


# ------------------------------------------------------------------------------ token-in/token-out


def test_ids_are_the_engines_and_tool_tokens_have_mask_0(tok):
    traj, engine = run(tok, [call("calculate", expression="3 + 4"), "ANSWER: 7"])
    assert traj.stop_reason == "answer" and traj.answer == "ANSWER: 7"
    assert len(traj.turns) == 2 and len(engine.prompts) == 2
    generated = set()
    for turn, prompt, (ids, logprobs) in zip(traj.turns, engine.prompts, engine.returned):
        assert traj.ids[turn.start: turn.end] == ids
        assert traj.logprobs[turn.start: turn.end] == logprobs
        assert traj.mask[turn.start: turn.end] == [1] * len(ids)
        assert traj.ids[: turn.start] == prompt  # the engine saw exactly the accumulated ids
        generated.update(range(turn.start, turn.end))
    others = [k for k in range(len(traj.ids)) if k not in generated]
    assert all(traj.mask[k] == 0 and traj.logprobs[k] == 0.0 for k in others)
    assert len(traj.ids) == len(traj.mask) == len(traj.logprobs)
    observation = tok.decode(traj.ids[traj.turns[0].end: traj.turns[1].start])
    assert observation == ("\n<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n"
                           "<|im_start|>assistant\n")
    assert traj.turns[0].responses == ["7"]


def test_delta_tokenisation_equals_full_rerender(tok):
    replies = [call("calculate", expression="2 * 3") + call("calculate", expression="1 + 1"), "six", "ANSWER: 6"]
    engine = Engine(tok, replies)
    loop = ToolAgentLoop(engine, tok, [calculate], user_fn=lambda a, t: "Sure?" if a == "six" else None)
    traj = asyncio.run(loop.run(QUESTION))
    assert traj.stop_reason == "answer" and len(traj.turns) == 3
    assert traj.stats.get("template_mismatches", 0) == 0 and traj.stats.get("template_fallbacks", 0) == 0
    chat = ChatRenderer(tok, [calculate.openai_schema()])
    # Before every generation the ids equal a full re-render of the conversation so far.
    assert engine.prompts[2] == chat.encode(chat.render(traj.messages[:-1], True))
    full = chat.encode(chat.render(traj.messages, False))
    assert full[: len(traj.ids)] == traj.ids and full[len(traj.ids):] == chat.encode("\n")
    user_part = tok.decode(traj.ids[traj.turns[1].end: traj.turns[2].start])
    assert "Sure?" in user_part and set(traj.mask[traj.turns[1].end: traj.turns[2].start]) == {0}


def test_noncanonical_engine_ids_are_kept_and_reported(tok):
    text = "ANSWER: 7"
    canonical = tok.encode(text, add_special_tokens=False)
    # One byte-level token per character: a valid but non-canonical tokenisation of the same text.
    odd = [tok.convert_tokens_to_ids(tok.convert_ids_to_tokens(tok.encode(ch, add_special_tokens=False))[0])
           for ch in text]
    assert odd != canonical and tok.decode(odd) == text
    traj, engine = run(tok, [odd + [tok.eos_token_id]])
    assert traj.ids[traj.turns[0].start: traj.turns[0].end] == odd + [tok.eos_token_id]
    assert traj.stats["template_mismatches"] == 1 and traj.mismatch_steps == [0]
    assert traj.answer == text


def with_content(expression: str) -> str:
    """The tiny model's template with each plain message's content rendered by ``expression``."""
    template = CHATML_TEMPLATE.replace(
        "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}",
        "{{- '<|im_start|>' + message['role'] + '\n' + " + expression + " + '<|im_end|>' + '\n' }}")
    assert template != CHATML_TEMPLATE
    return template


def test_history_rewriting_template_is_reported_and_ids_kept(tok):
    # Like Qwen3: earlier assistant turns lose their reasoning when re-rendered.
    stripping = with_content("message['content'].split('</think>')[-1]")
    first = "<think>add them</think>" + call("calculate", expression="3 + 4")
    traj, engine = run(tok, [first, "ANSWER: 7"], chat_template=stripping)
    assert traj.stop_reason == "answer" and traj.stats["template_mismatches"] == 2
    assert traj.stats.get("template_fallbacks", 0) == 0  # the delta itself is still an exact suffix
    assert traj.ids[traj.turns[0].start: traj.turns[0].end] == engine.returned[0][0]
    assert traj.ids[: traj.turns[1].start] == engine.prompts[1]
    assert "<tool_response>\n7\n</tool_response>" in tok.decode(engine.prompts[1])


def test_template_that_rewrites_on_append_uses_the_fallback_delta(tok):
    # Reasoning kept only while the assistant message is the last one: appending a tool message changes
    # the earlier text, so the longer render no longer extends the shorter one.
    rewriting = with_content("(message['content'] if loop.last else message['content'].split('</think>')[-1])")
    first = "<think>add them</think>" + call("calculate", expression="3 + 4")
    traj, engine = run(tok, [first, "ANSWER: 7"], chat_template=rewriting)
    assert traj.stats["template_fallbacks"] == 1 and traj.stats["template_mismatches"] >= 1
    assert traj.ids[: traj.turns[1].start] == engine.prompts[1]
    assert traj.ids[traj.turns[0].start: traj.turns[0].end] == engine.returned[0][0]
    observation = tok.decode(traj.ids[traj.turns[0].end: traj.turns[1].start])
    assert observation == ("\n<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n"
                           "<|im_start|>assistant\n")


# ------------------------------------------------------------------------------ parsing and errors


def test_parse_reply_strips_reasoning_and_reports_malformed_calls():
    parsed = parse_reply("<think>" + call("calculate", expression="1") + "</think>ANSWER: 2")
    assert parsed.calls == [] and parsed.content == "ANSWER: 2"
    assert strip_reasoning("a<think>never closed " + call("x")) == "a"
    parsed = parse_reply("x " + call("f", a=1) + '<tool_call>{"name": "g", "arguments": "{\\"b\\": 2}"}</tool_call>'
                         "<tool_call>{bad</tool_call><tool_call>{\"arguments\": {}}</tool_call>"
                         '<tool_call>{"name": "h", "arguments": [1]}</tool_call><tool_call>{"name": "k"')
    assert [(c.name, c.arguments, c.error is None) for c in parsed.calls[:2]] == [("f", {"a": 1}, True),
                                                                                  ("g", {"b": 2}, True)]
    errors = [c.error for c in parsed.calls[2:]]
    assert "invalid JSON" in errors[0] and "missing 'name'" in errors[1]
    assert "must be an object" in errors[2] and "missing </tool_call>" in errors[3]
    assert parsed.content == "x"


def test_reasoning_text_is_what_strip_reasoning_removes():
    text = "early</think>a <think> one </think>b<think>\ntwo\n</think> c"
    assert strip_reasoning(text) == "a b c"
    assert reasoning_text(text) == "early\none\ntwo"
    assert reasoning_text("no reasoning") == "" and reasoning_text("<think></think>x") == ""


class Exploding(BaseTool):
    def __init__(self):
        super().__init__("explode", "Always fails.", {"type": "object", "properties": {}})

    async def execute(self, instance_id, arguments):
        raise RuntimeError("boom")


def test_errors_reach_the_model_as_tool_messages(tok):
    first = ("<tool_call>{not json}</tool_call>" + '<tool_call>{"arguments": {}}</tool_call>'
             + call("search", q="x") + call("calculate", expression=3) + call("calculate", expression="1/0")
             + call("explode") + call("calculate", expression="2 + 2"))
    traj, engine = run(tok, [first, "ANSWER: 4"], tools=(calculate, Exploding()))
    responses = traj.turns[0].responses
    assert len(responses) == 7 and responses[-1] == "4"
    assert all(r.startswith("Error: ") for r in responses[:-1])
    assert "invalid JSON" in responses[0] and "missing 'name'" in responses[1]
    assert "unknown tool 'search'" in responses[2] and "calculate, explode" in responses[2]
    assert "argument 'expression' must be string" in responses[3]
    assert "division by zero" in responses[4] and "RuntimeError: boom" in responses[5]
    seen = tok.decode(engine.prompts[1])
    assert all(f"<tool_response>\n{r}\n</tool_response>" in seen for r in responses)
    assert traj.stats["tool_errors"] == 6 and traj.stats["malformed_calls"] == 2
    assert traj.stats["unknown_tools"] == 1 and traj.stats["tool_calls"] == 7
    assert turn_samples(traj)[0].action_valid is False and traj.stop_reason == "answer"


def test_tool_calls_run_concurrently(tok):
    order = []
    started = {}

    def make(name, other):
        @function_tool(name=name)
        async def tool() -> str:
            """Waits for the other tool to start."""
            order.append(f"start {name}")
            started.setdefault(name, asyncio.Event()).set()
            await asyncio.wait_for(started.setdefault(other, asyncio.Event()).wait(), timeout=5)
            order.append(f"end {name}")
            return "ok"
        return tool

    traj, _ = run(tok, [call("a") + call("b"), "done"], tools=(make("a", "b"), make("b", "a")))
    assert traj.turns[0].responses == ["ok", "ok"]
    assert order[:2] == ["start a", "start b"] and sorted(order[2:]) == ["end a", "end b"]


# ------------------------------------------------------------------------------ limits


def test_max_assistant_turns(tok):
    traj, engine = run(tok, [call("calculate", expression="1 + 1")], limits=AgentLimits(max_assistant_turns=3))
    assert traj.stop_reason == "max_turns" and len(traj.turns) == 3 and len(engine.prompts) == 3
    assert traj.answer is None and traj.reward == 0.0


def test_max_response_tokens_per_turn(tok):
    traj, engine = run(tok, ["ANSWER: 7 and a long tail of words"], limits=AgentLimits(max_response_tokens=3))
    assert engine.params[0].max_tokens == 3 and len(engine.returned[0][0]) == 3
    assert traj.turns[0].finish_reason == "length" and traj.stats["cut_turns"] == 1
    assert turn_samples(traj)[0].cut_at_max_tokens
    assert traj.stop_reason == "answer" and traj.stats.get("template_mismatches", 0) == 0


def test_max_total_tokens(tok):
    probe, _ = run(tok, [call("calculate", expression="1 + 1"), "ANSWER: 2"])
    total = probe.turns[1].start + 2  # room for the first turn and its tool delta, then 2 tokens
    traj, engine = run(tok, [call("calculate", expression="1 + 1"), "ANSWER: 2"],
                       limits=AgentLimits(max_total_tokens=total))
    assert engine.params[1].max_tokens == 2 and len(traj.ids) == total
    assert traj.stop_reason == "max_total_tokens"
    # A budget that cannot hold the tool delta ends the run without appending it.
    traj, engine = run(tok, [call("calculate", expression="1 + 1")],
                       limits=AgentLimits(max_total_tokens=probe.turns[0].end + 3))
    assert traj.stop_reason == "max_total_tokens" and len(traj.ids) == probe.turns[0].end
    assert len(engine.prompts) == 1
    with pytest.raises(ValueError, match="first prompt"):
        run(tok, ["x"], limits=AgentLimits(max_total_tokens=5))


def test_max_tool_response_chars(tok):
    @function_tool
    def long_text() -> str:
        """Returns a long text."""
        return "x" * 50

    traj, engine = run(tok, [call("long_text"), "ok"], tools=(long_text,),
                       limits=AgentLimits(max_tool_response_chars=10))
    assert traj.turns[0].responses == ["x" * 10 + "... (truncated 40 characters)"]
    assert traj.stats["truncated_tool_responses"] == 1
    assert "x" * 11 not in tok.decode(engine.prompts[1])


def test_limits_are_validated():
    with pytest.raises(ValueError, match="max_assistant_turns"):
        AgentLimits(max_assistant_turns=0)


# ------------------------------------------------------------------------------ rewards and layouts


@function_tool
def rewarded(x: int) -> tuple:
    """Returns x with a reward of 0.25.

    Args:
        x: a number.
    """
    return str(x), 0.25


def _rewarded_run(tok, n_calls):
    script = [call("rewarded", x=k) for k in range(n_calls)] + ["ANSWER: 1"]
    return run(tok, script, tools=(rewarded,), reward_fn=lambda answer, traj: 1.0 if answer == "ANSWER: 1" else 0.0)


def test_sequence_layout(tok):
    traj, engine = _rewarded_run(tok, 2)
    s = sequence_sample(traj)
    P = traj.prompt_length
    assert s.prompt_ids + s.response_ids == traj.ids and s.prompt_ids == engine.prompts[0]
    assert len(s.response_ids) == len(s.response_mask) == len(s.response_logprobs) == len(s.token_rewards)
    assert s.response_mask == traj.mask[P:] and sum(s.response_mask) == sum(len(i) for i, _ in engine.returned)
    ends = [t.end - 1 - P for t in traj.turns]
    assert [s.token_rewards[e] for e in ends] == [0.25, 0.25, 1.0]
    assert sum(s.token_rewards) == pytest.approx(1.5) and s.reward == pytest.approx(1.5)


def test_turn_layout_and_turn_batch(tok):
    long_traj, engine = _rewarded_run(tok, 2)
    samples = turn_samples(long_traj)
    for s, prompt, (ids, logprobs) in zip(samples, engine.prompts, engine.returned):
        assert s.prompt_ids == prompt and s.response_ids == ids and s.logprobs == logprobs
    assert [s.reward for s in samples] == [0.25, 0.25, 1.0]
    assert [s.terminated for s in samples] == [False, False, True]
    short_traj, _ = _rewarded_run(tok, 0)
    inputs = turn_batch_inputs([long_traj, short_traj], episode_ids=[10, 11])
    batch = TurnBatch.from_turns(**inputs, pad_id=tok.pad_token_id, max_response_tokens=64)
    assert batch.num_turns == 3 and batch.num_envs == 2
    assert batch.turn_mask.tolist() == [[True, True], [True, False], [True, False]]
    assert batch.terminated.tolist() == [[False, True], [False, False], [True, False]]
    assert batch.rewards.tolist() == [[0.25, 1.0], [0.25, 0.0], [1.0, 0.0]]
    L = len(samples[1].response_ids)
    assert batch.response_ids[1, 0, :L].tolist() == samples[1].response_ids
    assert batch.behaviour_logprobs[1, 0, :L].tolist() == pytest.approx(samples[1].logprobs)
    assert batch.prompt_lengths[2, 0] == len(samples[2].prompt_ids)


# ------------------------------------------------------------------------------ calculator task


def test_calculator_questions_and_reward():
    a, b = make_questions(5, seed=3), make_questions(5, seed=3)
    assert a == b and a != make_questions(5, seed=4)
    q = a[0]
    reward = calculator_reward(q)
    value = int(q.value)
    assert reward(f"thinking...\nANSWER: {value}") == 1.0
    assert reward(f"ANSWER: {value + 1}") == 0.0 and reward("no answer") == 0.0 and reward(None) == 0.0
    assert reward(f"ANSWER: {value}.0") == 1.0 and parse_answer("ANSWER: 1\nANSWER: -2.5") == -2.5
    assert q.messages()[1]["content"] == f"What is {q.expression}?"


def test_calculator_task_end_to_end(tok):
    q = make_questions(1, seed=0)[0]
    engine = Engine(tok, [call("calculate", expression=q.expression), f"ANSWER: {int(q.value)}"])
    loop = ToolAgentLoop(engine, tok, calculator_tools(), reward_fn=calculator_reward(q))
    traj = asyncio.run(loop.run(q.messages()))
    assert traj.turns[0].responses == [str(int(q.value))] and traj.reward == 1.0
    assert traj.stats.get("template_mismatches", 0) == 0


class Secret(BaseTool):
    """Returns the per-trajectory secret given to create."""

    def __init__(self):
        super().__init__("secret", "Tells the secret.", {"type": "object", "properties": {}})

    async def execute(self, instance_id, arguments):
        return ToolResult(str(self.instances[instance_id]["value"]))


def test_tool_kwargs_reach_create_and_instances_are_released(tok):
    secret, exploding = Secret(), Exploding()
    engine = Engine(tok, [call("secret") + call("explode"), "done"])
    loop = ToolAgentLoop(engine, tok, [secret, exploding])
    traj = asyncio.run(loop.run(QUESTION, tool_kwargs={"secret": {"value": 42}}))
    assert traj.turns[0].responses[0] == "42" and traj.turns[0].responses[1].startswith("Error: ")
    assert secret.instances == {} and exploding.instances == {} and calculate.instances == {}
