"""Assistant ``tool_calls`` through the proxy when the chat template renders only ``content``
(verlog.chat.renderer's probe and :func:`~verlog.chat.renderer.tool_calls_into_content`): an OpenAI
client sends the model's call back as ``tool_calls`` with empty content, and the next prompt must still
show the call, as the Hermes block the model wrote, exactly as the built-in tool loop's prompt does."""

from __future__ import annotations

import asyncio
import copy
import json
import logging

import pytest

from verlog.agent import ToolAgentLoop
from verlog.agent.calculator import CalculatorQuestion, calculator_reward, calculator_tools
from verlog.agent.openai_tools import solve_with_tools
from verlog.chat import ChatRenderer, parse_reply
from verlog.chat.parsing import tool_call_text
from verlog.chat.renderer import tool_calls_into_content
from verlog.models import ModelLoadError, load_tokenizer
from verlog.proxy import OpenAIProxy, ProxyServer
from verlog.rollout.engine import Generation
from verlog.tiny_model import PLAIN_CHATML_TEMPLATE

QUESTION = CalculatorQuestion("3 + 4", 7.0)
CALL = tool_call_text("calculate", {"expression": "3 + 4"})
SCRIPT = [CALL, "ANSWER: 7"]


class Scripted:
    """Replies the script's texts in turn (encoded, + eos) and records every prompt."""

    def __init__(self, tok, script):
        self.tok, self.script, self.prompts = tok, list(script), []

    def generate(self, prompts, params):
        out = []
        for prompt in prompts:
            text = self.script[min(len(self.prompts), len(self.script) - 1)]
            self.prompts.append(list(prompt))
            ids = self.tok.encode(text, add_special_tokens=False) + [self.tok.eos_token_id]
            out.append(Generation(ids, [-0.5] * len(ids), "stop"))
        return out


def content_only(tok):
    """A copy of ``tok`` whose own chat template is plain ChatML: it renders ``content`` and drops
    ``tool_calls``, as SmolLM2's does."""
    tok = copy.deepcopy(tok)
    tok.chat_template = PLAIN_CHATML_TEMPLATE
    return tok


def tool_loop_prompts(tok):
    """The prompts the built-in tool loop sends for the scripted conversation."""
    engine = Scripted(tok, SCRIPT)
    traj = asyncio.run(ToolAgentLoop(engine, tok, calculator_tools(), calculator_reward(QUESTION)).run(
        QUESTION.messages()))
    assert traj.answer == "ANSWER: 7" and len(engine.prompts) == 2
    return engine.prompts


def proxy_run(tok):
    """The scripted conversation through the proxy with the OpenAI-client agent: (proxy, prompts, record)."""
    pytest.importorskip("openai")
    engine = Scripted(tok, SCRIPT)
    proxy = OpenAIProxy(engine, tok)
    with ProxyServer(proxy) as server:
        base = server.base_url("r", 0)
        reward = solve_with_tools(QUESTION.messages(), calculator_tools(), calculator_reward(QUESTION),
                                  base_url=base, reward_url=base.removesuffix("/v1") + "/reward", temperature=0.0)
    assert reward == 1.0 and len(engine.prompts) == 2
    return proxy, engine.prompts, proxy.recorder.get("r", "0")


def check_call_shown_as_generated(tok, caplog):
    """Through the proxy, a content-only template's second prompt holds the call as the model wrote it
    and equals the tool loop's; the fallback is logged once, counted and marked on the record."""
    with caplog.at_level(logging.WARNING, logger="verlog.proxy"):
        proxy, prompts, record = proxy_run(tok)
    second = tok.decode(prompts[1])
    assert f"<|im_start|>assistant\n{CALL}<|im_end|>" in second
    assert "<|im_start|>tool\n7<|im_end|>" in second  # the tool message is rendered, not dropped
    assert prompts == tool_loop_prompts(tok)
    # without the fallback the template shows an empty assistant turn where the call was
    plain = tok.apply_chat_template(record.calls[1].messages, tokenize=False, add_generation_prompt=True)
    assert "<tool_call>" not in plain and "<|im_start|>assistant\n<|im_end|>" in plain
    assert proxy.tool_calls_as_text == 1
    assert [c.tool_calls_as_text for c in record.calls] == [False, True]
    warnings = [r for r in caplog.records if r.name == "verlog.proxy" and "tool_calls" in r.getMessage()]
    assert len(warnings) == 1


def test_content_only_template_gets_the_call_as_the_model_wrote_it(calc_tok, caplog):
    check_call_shown_as_generated(content_only(calc_tok), caplog)


def test_template_that_renders_tool_calls_is_unchanged(calc_tok):
    assert not ChatRenderer(calc_tok).tool_calls_as_text()
    proxy, prompts, record = proxy_run(calc_tok)
    schemas = [t.openai_schema() for t in calculator_tools()]
    for call, prompt in zip(record.calls, prompts):
        text = calc_tok.apply_chat_template(call.messages, tools=schemas, tokenize=False, add_generation_prompt=True)
        assert prompt == calc_tok.encode(text, add_special_tokens=False)
    assert proxy.tool_calls_as_text == 0 and not any(c.tool_calls_as_text for c in record.calls)
    assert record.calls[1].messages[2]["tool_calls"]  # the call reached the template as tool_calls


@pytest.fixture(scope="module")
def smol_tok(request):
    try:
        return load_tokenizer(request.getfixturevalue("smollm2_dir"))
    except ModelLoadError as exc:
        pytest.skip(f"SmolLM2-135M-Instruct is not available: {exc}")


def test_smollm2_template_gets_the_call_as_the_model_wrote_it(smol_tok, caplog):
    assert ChatRenderer(smol_tok).tool_calls_as_text()
    check_call_shown_as_generated(smol_tok, caplog)


def test_calls_are_written_after_the_content_in_the_parsers_format():
    calls = [{"id": "a", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}},
             {"id": "b", "type": "function", "function": {"name": "g", "arguments": '{"y": "z"}'}}]
    messages = [{"role": "user", "content": "q"},
                {"role": "assistant", "content": "Let me look.", "tool_calls": calls},
                {"role": "tool", "content": "1"},
                {"role": "assistant", "content": "", "tool_calls": calls[:1]}]
    before = copy.deepcopy(messages)
    out = tool_calls_into_content(messages)
    assert messages == before and out[0] is messages[0] and out[2] is messages[2]
    assert "tool_calls" not in out[1] and "tool_calls" not in out[3]
    assert out[3]["content"] == tool_call_text("f", {"x": 1})
    parsed = parse_reply(out[1]["content"])
    assert parsed.content == "Let me look."
    assert [(c.name, c.arguments, c.error) for c in parsed.calls] == [("f", {"x": 1}, None), ("g", {"y": "z"}, None)]
    assert out[1]["content"].startswith("Let me look.\n<tool_call>\n") and json.loads(
        out[1]["content"].split("\n")[-2]) == {"name": "g", "arguments": {"y": "z"}}


def test_template_that_fails_on_tool_calls_is_left_to_fail(calc_tok):
    failing = PLAIN_CHATML_TEMPLATE.replace(
        "{% for message in messages %}",
        "{% for message in messages %}{% if message.get('tool_calls') %}{{ raise_exception('no calls') }}{% endif %}")
    chat = ChatRenderer(calc_tok, chat_template=failing)
    assert not chat.tool_calls_as_text()
    with pytest.raises(Exception, match="no calls"):
        chat.render([{"role": "user", "content": "q"}, {"role": "assistant", "content": "",
                                                        "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}],
                    True)
