"""Tests of verlog.proxy: the OpenAI-compatible proxy, its recordings, the adapter and pause/drain."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch

from helpers import small_corpus
from verlog.algos.gae import dual_discount_gae
from verlog.batch import TurnBatch
from verlog.chat import ChatRenderer
from verlog.models import load_tokenizer
from verlog.proxy import (CallRecord, OpenAIProxy, ProxyServer, RolloutRecord, create_app, proxy_batch_inputs,
                          rollout_samples)
from verlog.rollout.engine import Generation, SamplingParams
from verlog.tiny_model import build_tiny_model

ROOT = Path(__file__).resolve().parents[1]
CORPUS = small_corpus() + ['<tool_call>\n{"name": "calculate", "arguments": {"expression": "3 + 4"}}\n</tool_call>',
                           "<tool_response>\n7\n</tool_response>", "ANSWER: 7", "What is 3 + 4?", "<think>add</think>"]
TOOLS = [{"type": "function", "function": {"name": "calculate", "description": "Evaluate arithmetic.",
                                           "parameters": {"type": "object", "properties": {
                                               "expression": {"type": "string"}}, "required": ["expression"]}}}]
QUESTION = [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "What is 3 + 4?"}]
CALL = '<think>add them</think><tool_call>\n{"name": "calculate", "arguments": {"expression": "3 + 4"}}\n</tool_call>'


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", CORPUS, vocab_size=400, hidden_size=64,
                            num_heads=1, num_kv_heads=1, intermediate_size=64, num_layers=1)


@pytest.fixture(scope="module")
def tok(model_dir):
    return load_tokenizer(model_dir)


class Scripted:
    """Replies from a script (text -> ids + eos, or a list of ids), cut at max_tokens; distinct
    logprobs per token and call; records every prompt, batch and returned generation."""

    def __init__(self, tok, script):
        self.tok, self.script = tok, list(script)
        self.prompts, self.returned, self.batches = [], [], []

    def generate(self, prompts, params: SamplingParams):
        self.batches.append(len(prompts))
        out = []
        for prompt in prompts:
            entry = self.script[min(len(self.prompts), len(self.script) - 1)]
            self.prompts.append(list(prompt))
            ids = list(entry) if isinstance(entry, list) else (
                self.tok.encode(entry, add_special_tokens=False) + [self.tok.eos_token_id])
            finish = "stop"
            if len(ids) > params.max_tokens:
                ids, finish = ids[: params.max_tokens], "length"
            gen = Generation(ids, [-0.01 * (k + 1) - len(self.prompts) for k in range(len(ids))], finish)
            self.returned.append(gen)
            out.append(gen)
        return out

    def load_weights(self, named_tensors):  # pragma: no cover
        raise NotImplementedError


class Echo:
    """Replies with the prompt's last 3 ids + eos (so each reply is tied to its own prompt)."""

    def __init__(self, eos):
        self.eos, self.batches = eos, []

    def generate(self, prompts, params):
        self.batches.append(len(prompts))
        return [Generation(list(p[-3:]) + [self.eos], [-1.0] * 4, "stop") for p in prompts]


def client(proxy):
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(proxy)), base_url="http://proxy")


def url(rollout="r", attempt=0, what="v1/chat/completions"):
    return f"/rollout/{rollout}/attempt/{attempt}/{what}"


def test_openai_client_reads_content_reasoning_and_tool_calls(tok):
    openai = pytest.importorskip("openai")
    engine = Scripted(tok, [CALL, "ANSWER: 7"])
    proxy = OpenAIProxy(engine, tok)

    async def main():
        async with client(proxy) as http:
            api = openai.AsyncOpenAI(base_url="http://proxy" + url("r1", 0, "v1"), api_key="none", http_client=http)
            first = await api.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS, max_tokens=64)
            message = first.choices[0].message
            history = QUESTION + [message.model_dump(exclude_none=True),
                                  {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "7"}]
            second = await api.chat.completions.create(model="tiny", messages=history, tools=TOOLS)
            return first, second

    first, second = asyncio.run(main())
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "calculate"
    assert json.loads(call.function.arguments) == {"expression": "3 + 4"}
    assert choice.message.model_extra["reasoning_content"] == "add them"
    assert first.usage.completion_tokens == len(engine.returned[0].token_ids)
    assert first.usage.prompt_tokens == len(engine.prompts[0]) and first.model == "tiny"
    assert second.choices[0].message.content == "ANSWER: 7" and second.choices[0].finish_reason == "stop"
    assert not second.choices[0].message.tool_calls
    # the history (assistant tool call + tool result) was rendered through the template
    rendered = ChatRenderer(tok, TOOLS).render(proxy.recorder.get("r1", "0").calls[1].messages, True)
    assert "<tool_response>\n7\n</tool_response>" in rendered and '"expression": "3 + 4"' in rendered


def test_recorded_ids_are_the_engines_and_prompt_is_the_template(tok):
    engine = Scripted(tok, [CALL, [5, 6, 7, 8, 9, 10]])  # second reply: no eos, cut by max_tokens=4
    proxy = OpenAIProxy(engine, tok)

    async def main():
        async with client(proxy) as http:
            a = await http.post(url(), json={"messages": QUESTION, "tools": TOOLS})
            b = await http.post(url(), json={"messages": QUESTION, "max_completion_tokens": 4, "temperature": 0})
            return a, b

    a, b = asyncio.run(main())
    assert a.status_code == b.status_code == 200
    assert b.json()["choices"][0]["finish_reason"] == "length"
    record = proxy.recorder.get("r", "0")
    assert [c.seq for c in record.calls] == [0, 1]
    for call, prompt, gen in zip(record.calls, engine.prompts, engine.returned):
        assert call.prompt_ids == prompt and call.response_ids == gen.token_ids and call.logprobs == gen.logprobs
        assert call.finish_reason == gen.finish_reason and call.finished >= call.started >= call.arrived
    assert record.calls[0].prompt_ids == ChatRenderer(tok, TOOLS).prompt_ids(QUESTION)
    assert record.calls[1].prompt_ids == ChatRenderer(tok).prompt_ids(QUESTION)
    assert record.calls[1].response_ids == [5, 6, 7, 8] and record.calls[1].finish_reason == "length"
    assert record.calls[0].reply["tool_calls"][0]["function"]["name"] == "calculate"


def test_url_tags_separate_rollouts_and_attempts_and_reward_endpoint(tok):
    proxy = OpenAIProxy(Echo(tok.eos_token_id), tok)
    plan = [("a", 0), ("a", 1), ("b", 0), ("a", 0), ("a", 0)]

    async def main():
        async with client(proxy) as http:
            for k, (rollout, attempt) in enumerate(plan):
                r = await http.post(url(rollout, attempt), json={"messages": [{"role": "user", "content": f"go {k}"}]})
                assert r.status_code == 200
            rewards = [await http.post(url("a", 0, "reward"), json={"reward": 1.5}),
                       await http.post(url("b", 0, "reward"), json={"reward": -2})]
            bad = [await http.post(url("a", 1, "reward"), json=body) for body in ({"reward": "x"}, {}, [1])]
            return rewards, bad

    rewards, bad = asyncio.run(main())
    assert rewards[0].json() == {"rollout_id": "a", "attempt": "0", "reward": 1.5}
    assert sorted(proxy.recorder.keys()) == [("a", "0"), ("a", "1"), ("b", "0")]
    a0 = proxy.recorder.get("a", "0")
    assert len(a0.calls) == 3 and a0.reward == 1.5
    assert [c.messages[0]["content"] for c in a0.calls] == ["go 0", "go 3", "go 4"]
    assert len(proxy.recorder.get("a", "1").calls) == 1 and proxy.recorder.get("a", "1").reward is None
    assert proxy.recorder.get("b", "0").reward == -2.0
    for r in bad:
        assert r.status_code == 400 and r.json()["error"]["param"] == "reward"
        assert "\n" not in r.json()["error"]["message"]
    popped = proxy.recorder.pop("a", "0")
    assert len(popped.calls) == 3 and ("a", "0") not in proxy.recorder.keys()
    assert len(proxy.recorder.pop_all()) == 2 and proxy.recorder.keys() == []
    with pytest.raises(KeyError):
        proxy.recorder.get("a", "0")


@pytest.mark.parametrize("body, param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0]"),
    ({"messages": QUESTION, "n": 2}, "n"),
    ({"messages": QUESTION, "stream": "yes"}, "stream"),
    ({"messages": QUESTION, "stream": True, "stream_options": [1]}, "stream_options"),
    ({"messages": QUESTION, "stream": True, "stream_options": {"include_usage": 1}}, "stream_options"),
    ({"messages": QUESTION, "max_tokens": 0}, "max_tokens"),
    ({"messages": QUESTION, "temperature": 3}, "temperature"),
    ({"messages": QUESTION, "top_p": 0}, "top_p"),
    ({"messages": QUESTION, "tools": [{"type": "code"}]}, "tools"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0]"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[" * 5_000}}]}]},
     "messages[0]"),
    ("not json", None),
    ("[" * 10_000, None),  # json.loads alone raises RecursionError on this
    ('{"messages": ' + "[" * 100 + "]" * 100 + "}", None),  # decodes, but deeper than MAX_JSON_DEPTH
])
def test_bad_requests_are_400_with_one_line_openai_errors(tok, body, param):
    engine = Scripted(tok, ["hi"])
    proxy = OpenAIProxy(engine, tok)

    async def main():
        async with client(proxy) as http:
            if isinstance(body, str):
                return await http.post(url(), content=body, headers={"content-type": "application/json"})
            return await http.post(url(), json=body)

    r = asyncio.run(main())
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"] and "\n" not in error["message"]
    assert engine.prompts == [] and proxy.recorder.keys() == []


def test_engine_failure_is_500_and_a_bad_prompt_does_not_fail_its_batch(tok):
    class Picky:
        def generate(self, prompts, params):
            if any(len(p) > 40 for p in prompts):
                raise ValueError("prompt too long")
            return [Generation([tok.eos_token_id], [0.0], "stop") for _ in prompts]

    proxy = OpenAIProxy(Picky(), tok)

    async def main():
        async with client(proxy) as http:
            long = [{"role": "user", "content": "go to the red ball " * 20}]
            short = [{"role": "user", "content": "hi"}]
            return await asyncio.gather(*(http.post(url("r", k), json={"messages": long if k == 0 else short})
                                          for k in range(4)))

    results = asyncio.run(main())
    assert results[0].status_code == 400 and "prompt too long" in results[0].json()["error"]["message"]
    assert [r.status_code for r in results[1:]] == [200, 200, 200]
    assert proxy.recorder.num_calls() == 3


def test_concurrent_requests_are_batched_and_each_recorded_once(tok):
    engine = Echo(tok.eos_token_id)
    proxy = OpenAIProxy(engine, tok, max_batch=16)
    n_rollouts, per = 6, 10

    async def agent(http, r):
        for k in range(per):
            res = await http.post(url(f"r{r}", 0), json={"messages": [{"role": "user", "content": f"agent {r} call {k}"}]})
            assert res.status_code == 200

    async def main():
        async with client(proxy) as http:
            await asyncio.gather(*(agent(http, r) for r in range(n_rollouts)))

    asyncio.run(main())
    assert proxy.recorder.num_calls() == n_rollouts * per == sum(engine.batches)
    assert max(engine.batches) > 1  # requests from concurrent agents shared engine calls
    for r in range(n_rollouts):
        record = proxy.recorder.get(f"r{r}", "0")
        assert [c.seq for c in record.calls] == list(range(per))
        assert [c.messages[0]["content"] for c in record.calls] == [f"agent {r} call {k}" for k in range(per)]
        for call in record.calls:  # each reply went to the request whose prompt produced it
            assert call.response_ids == call.prompt_ids[-3:] + [tok.eos_token_id]


def test_pause_holds_new_requests_drains_inflight_and_resume_releases(tok):
    class Slow:
        def __init__(self):
            self.release, self.calls = asyncio.Event(), 0

        async def generate(self, prompts, params):
            self.calls += 1
            await self.release.wait()
            return [Generation([tok.eos_token_id], [-1.0], "stop") for _ in prompts]

    async def main():
        engine = Slow()
        proxy = OpenAIProxy(engine, tok)
        body = {"messages": [{"role": "user", "content": "hi"}]}
        async with client(proxy) as http:
            inflight = asyncio.create_task(http.post(url("a", 0), json=body))
            while engine.calls == 0:
                await asyncio.sleep(0.01)
            events = []

            async def trainer():
                async with proxy.pause():
                    events.append(("paused", inflight.done(), proxy.gate.inflight))
                    await asyncio.sleep(0.1)  # "load_weights"
                    events.append(("loaded", engine.calls))
            pausing = asyncio.create_task(trainer())
            await asyncio.sleep(0.05)
            assert not pausing.done() and not events  # draining: the in-flight request holds the pause
            during = asyncio.create_task(http.post(url("b", 0), json=body))
            await asyncio.sleep(0.02)
            engine.release.set()
            await pausing
            first, second = await inflight, await during
            return events, first, second, engine, proxy

    events, first, second, engine, proxy = asyncio.run(main())
    assert events[0] == ("paused", True, 0)
    assert events[1] == ("loaded", 1)  # the request issued during the pause did not reach the engine
    assert first.status_code == second.status_code == 200 and engine.calls == 2
    assert proxy.recorder.num_calls() == 2 and not proxy.gate.is_paused


def test_server_on_loopback_with_pause_from_another_thread(tok):
    import threading
    import time

    engine = Echo(tok.eos_token_id)
    with ProxyServer(OpenAIProxy(engine, tok)) as server:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(server.base_url("x", 2) + "/chat/completions", json=body).status_code == 200
        results = []
        with server.paused():
            worker = threading.Thread(target=lambda: results.append(
                httpx.post(server.base_url("x", 2) + "/chat/completions", json=body, timeout=30)))
            worker.start()
            time.sleep(0.2)
            assert not results and len(engine.batches) == 1
        worker.join(30)
        assert results[0].status_code == 200
        assert len(server.proxy.recorder.get("x", "2").calls) == 2


def _record(rewards_reward=2.0, finish=("stop", "stop", "length")):
    calls = [CallRecord(seq=t, prompt_ids=[1] * (3 + t), response_ids=[10 + t, 20 + t], logprobs=[-0.1 * t, -0.2],
                        finish_reason=finish[t], messages=[], tools=None, reply={}, malformed_calls=int(t == 1),
                        arrived=0.0, started=0.0, finished=0.0) for t in range(3)]
    return RolloutRecord("r", "0", calls, rewards_reward)


def test_adapter_credit_modes_on_hand_worked_numbers():
    record = _record(2.0)
    final = rollout_samples(record, "final")
    assert [s.reward for s in final] == [2.0, 2.0, 2.0] and [s.terminated for s in final] == [True] * 3
    disc = rollout_samples(record, "discounted", gamma=0.5)
    assert [s.reward for s in disc] == [0.5, 1.0, 2.0] and all(s.terminated for s in disc)
    gae = rollout_samples(record, "gae")
    assert [s.reward for s in gae] == [0.0, 0.0, 2.0] and [s.terminated for s in gae] == [False, False, True]
    for t, s in enumerate(gae):  # ids trained == ids recorded
        assert s.prompt_ids == [1] * (3 + t) and s.response_ids == [10 + t, 20 + t] and s.logprobs == [-0.1 * t, -0.2]
    assert [s.action_valid for s in gae] == [True, False, True]
    assert [s.cut_at_max_tokens for s in gae] == [False, False, True]
    with pytest.raises(ValueError, match="credit must be"):
        rollout_samples(record, "mc")
    with pytest.raises(ValueError, match="gamma"):
        rollout_samples(record, "discounted", gamma=0.0)
    with pytest.raises(ValueError, match="no reward"):
        rollout_samples(RolloutRecord("r", "0", record.calls, None), "final")
    assert rollout_samples(RolloutRecord("r", "0", record.calls, None), "final", default_reward=0.0)[0].reward == 0.0
    with pytest.raises(ValueError, match="no recorded call"):
        rollout_samples(RolloutRecord("r", "0", [], 1.0))


def test_adapter_batch_feeds_dual_discount_gae():
    """gae credit: with a zero critic, gamma_step 0.5 and token discounts 1, the first-token advantage
    of turn t is 0.5^(T-1-t) * R = [0.5, 1, 2] (the reward reaches earlier turns through GAE); the
    shorter rollout is padded."""
    short = RolloutRecord("s", "0", _record().calls[:1], 1.0)
    kwargs = proxy_batch_inputs([_record(2.0), short], "gae")
    batch = TurnBatch.from_turns(**kwargs, pad_id=0, max_response_tokens=2)
    assert batch.rewards.tolist() == [[0.0, 1.0], [0.0, 0.0], [2.0, 0.0]]
    assert batch.terminated.tolist() == [[False, True], [False, False], [True, False]]
    assert batch.turn_mask.tolist() == [[True, True], [True, False], [True, False]]
    assert batch.response_ids[:, 0].tolist() == [[10, 20], [11, 21], [12, 22]]
    T, _, R = batch.response_ids.shape  # GAE on the full rollout (the trainer handles padding turns)
    token_rewards = torch.zeros(T, 1, R)
    token_rewards[:, :, -1] = batch.rewards[:, :1]
    adv, _ = dual_discount_gae(token_rewards, torch.zeros(T, 1, R), batch.response_mask[:, :1],
                               batch.terminated[:, :1], batch.truncated[:, :1], torch.zeros(T, 1), gamma_step=0.5,
                               lam_step=1.0, gamma_token=1.0, lam_token=1.0)
    assert adv[:, 0, 0].tolist() == pytest.approx([0.5, 1.0, 2.0])
    final = TurnBatch.from_turns(**proxy_batch_inputs([_record(2.0)], "final"), pad_id=0, max_response_tokens=2)
    assert final.rewards[:, 0].tolist() == [2.0, 2.0, 2.0] and final.terminated.all()


def test_end_to_end_with_the_tiny_model(model_dir, tok):
    openai = pytest.importorskip("openai")
    from verlog.rollout.hf import HFEngine

    engine = HFEngine(model_dir, tok, seed=0)
    proxy = OpenAIProxy(engine, tok)

    async def main():
        async with client(proxy) as http:
            api = openai.AsyncOpenAI(base_url="http://proxy" + url("e2e", 0, "v1"), api_key="none", http_client=http)
            return await asyncio.gather(*(api.chat.completions.create(
                model="tiny", messages=QUESTION, tools=TOOLS, max_tokens=8, temperature=t) for t in (0.0, 1.0)))

    replies = asyncio.run(main())
    record = proxy.recorder.get("e2e", "0")
    assert len(record.calls) == 2
    prompt = ChatRenderer(tok, TOOLS).prompt_ids(QUESTION)
    greedy = engine.generate([prompt], SamplingParams(max_tokens=8, greedy=True))[0]
    for call, reply in zip(record.calls, replies):
        assert call.prompt_ids == prompt
        assert len(call.response_ids) == len(call.logprobs) == reply.usage.completion_tokens <= 8
        assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert greedy.token_ids in [c.response_ids for c in record.calls]  # greedy and sampled: separate engine calls
    samples = rollout_samples(RolloutRecord("e2e", "0", record.calls, 1.0), "gae")
    assert [s.response_ids for s in samples] == [c.response_ids for c in record.calls]


def test_load_benchmark_quick():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "load_proxy.py"), "--quick"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("proxy load: ") and " 0 lost, 0 duplicated" in last
    done, total = last.split()[2].split("/")
    assert done == total


class Steps:
    """A deterministic engine for chunking and abandonment: each prompt's next token is its last id + 1
    (eos once ``eos_at`` is reached), logprob -id/100; ``step_s`` seconds per generated position (one
    step serves the whole batch, as on a GPU); counts tokens generated and records each call."""

    def __init__(self, eos, eos_at=10_000, step_s=0.0):
        self.eos, self.eos_at, self.step_s = eos, eos_at, step_s
        self.tokens, self.calls = 0, []

    def generate(self, prompts, params):
        import time

        self.calls.append((len(prompts), params.max_tokens, params.seed))
        out = []
        for prompt in prompts:
            ids, last = [], prompt[-1]
            while len(ids) < params.max_tokens:
                last = self.eos if last + 1 >= self.eos_at else last + 1
                ids.append(last)
                if last == self.eos:
                    break
            out.append(Generation(ids, [-t / 100 for t in ids], "stop" if ids[-1] == self.eos else "length"))
        steps = max(len(g.token_ids) for g in out)
        self.tokens += sum(len(g.token_ids) for g in out)
        time.sleep(self.step_s * steps)
        return out


def test_chunked_generation_equals_one_call_and_seeds_each_chunk():
    from verlog.proxy.worker import GenerationWorker, chunk_seed

    async def run(chunk, prompts, params):
        engine = Steps(eos=999, eos_at=100)
        worker = GenerationWorker(engine, chunk_tokens=chunk)
        try:
            return await asyncio.gather(*(worker.generate(p, params) for p in prompts)), engine
        finally:
            await worker.close()

    prompts = [[1, 2], [70], [95]]  # ends by length (40 tokens asked), and by eos after 30 and 5 tokens
    params = SamplingParams(max_tokens=40, seed=7)
    whole, one = asyncio.run(run(None, prompts, params))
    chunked, many = asyncio.run(run(8, prompts, params))
    assert [(g.token_ids, g.logprobs, g.finish_reason) for g in chunked] == \
        [(g.token_ids, g.logprobs, g.finish_reason) for g in whole]
    assert [g.finish_reason for g in whole] == ["length", "stop", "stop"] and len(whole[0].token_ids) == 40
    assert one.calls == [(3, 40, 7)]
    assert [len(g.token_ids) for g in whole] == [40, 30, 5]
    # 5 rounds of 8 tokens for the longest; the eos-ended ones leave after 4 rounds and 1
    assert [c[0] for c in many.calls] == [3, 2, 2, 2, 1] and {c[1] for c in many.calls} == {8}
    assert [c[2] for c in many.calls] == [chunk_seed(7, k) for k in range(5)] and many.calls[0][2] == 7
    assert len({chunk_seed(7, k) for k in range(100)} | {chunk_seed(8, k) for k in range(100)}) == 200


def test_proxy_answers_within_10s_after_50_abandoned_long_requests(tok):
    """50 clients ask 900 tokens each (distinct seeds: 50 engine calls of 900 steps, minutes of work) and
    give up after 1 s; a new request must be answered within 10 s, and the abandoned generations
    must stop (far fewer tokens generated than asked)."""
    import threading
    import time

    engine = Steps(tok.eos_token_id, step_s=0.004)  # 900 steps: 3.6 s per call
    proxy = OpenAIProxy(engine, tok)
    with ProxyServer(proxy) as server:
        endpoint = server.base_url("gone", 0) + "/chat/completions"
        body = {"messages": [{"role": "user", "content": "count"}], "max_tokens": 900}
        outcomes = []

        def impatient(k):
            try:
                outcomes.append(httpx.post(endpoint, json=dict(body, seed=k), timeout=1.0).status_code)
            except httpx.TimeoutException:
                outcomes.append("gave up")

        clients = [threading.Thread(target=impatient, args=(k,)) for k in range(50)]
        for c in clients:
            c.start()
        for c in clients:
            c.join(30)
        assert outcomes == ["gave up"] * 50
        start = time.monotonic()
        answer = httpx.post(server.base_url("next", 0) + "/chat/completions",
                            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}, timeout=10.0)
        waited = time.monotonic() - start
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 5
        assert waited < 10.0
        deadline = time.monotonic() + 10
        while proxy.worker.abandoned < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        tokens_after = engine.tokens
        time.sleep(0.5)
        assert engine.tokens == tokens_after  # nothing is generated for the clients that left
    assert proxy.abandoned == 50 and proxy.worker.abandoned == 50 and proxy.admitted == 0
    assert engine.tokens < 50 * 900 / 4  # most of what they asked was never generated
    assert proxy.recorder.keys() == [("next", "0")]


def test_requests_beyond_max_pending_get_503_at_once(tok):
    class Held:
        def __init__(self):
            self.release, self.prompts = asyncio.Event(), 0

        async def generate(self, prompts, params):
            self.prompts += len(prompts)
            await self.release.wait()
            return [Generation([tok.eos_token_id], [-1.0], "stop") for _ in prompts]

    async def main():
        engine = Held()
        proxy = OpenAIProxy(engine, tok, max_pending=2)
        body = {"messages": [{"role": "user", "content": "hi"}]}
        async with client(proxy) as http:
            held = [asyncio.create_task(http.post(url("a", k), json=body)) for k in range(2)]
            while engine.prompts < 2:
                await asyncio.sleep(0.01)
            refused = await asyncio.wait_for(http.post(url("b", 0), json=body), 5)
            engine.release.set()
            served = [await t for t in held]
            after = await http.post(url("c", 0), json=body)
        return proxy, refused, served, after

    proxy, refused, served, after = asyncio.run(main())
    assert refused.status_code == 503
    error = refused.json()["error"]
    assert error["type"] == "server_error" and "max_pending 2" in error["message"] and "\n" not in error["message"]
    assert [r.status_code for r in served] == [200, 200] and after.status_code == 200
    assert proxy.refused == 1 and proxy.admitted == 0 and proxy.recorder.num_calls() == 3
    with pytest.raises(ValueError, match="max_pending"):
        OpenAIProxy(Echo(tok.eos_token_id), tok, max_pending=0)


def _streamed(chunks):
    """The content, reasoning, tool calls (index -> [id, name, arguments]), finish reason and usage read
    back from a list of openai ``ChatCompletionChunk`` objects, as a client reassembles them."""
    content, reasoning, calls, finish, usage = "", "", {}, None, None
    for chunk in chunks:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, ["", "", ""])
                entry[0] += call.id or ""
                entry[1] += (call.function.name or "") if call.function else ""
                entry[2] += (call.function.arguments or "") if call.function else ""
            finish = choice.finish_reason or finish
    return content, reasoning, calls, finish, usage


def test_streamed_completion_equals_non_streamed_with_the_tiny_model(model_dir, tok):
    """Same request greedy, then sampled with one seed: the streamed reply reassembles to the
    non-streamed one, the usage chunk matches, and both turns are recorded with the same ids."""
    openai = pytest.importorskip("openai")
    from verlog.rollout.hf import HFEngine

    proxy = OpenAIProxy(HFEngine(model_dir, tok, seed=0), tok)
    messages = [{"role": "user", "content": "What is 3 + 4?"}]
    settings = [{"temperature": 0}, {"temperature": 1.0, "seed": 11}]

    async def main():
        out = []
        async with client(proxy) as http:
            api = openai.AsyncOpenAI(base_url="http://proxy" + url("s", 0, "v1"), api_key="none", http_client=http)
            for extra in settings:
                whole = await api.chat.completions.create(model="tiny", messages=messages, max_tokens=40, **extra)
                stream = await api.chat.completions.create(model="tiny", messages=messages, max_tokens=40, stream=True,
                                                           stream_options={"include_usage": True}, **extra)
                out.append((whole, [chunk async for chunk in stream]))
        return out

    runs = asyncio.run(main())
    calls = proxy.recorder.get("s", "0").calls
    texts = ""
    for k, (whole, chunks) in enumerate(runs):
        content, reasoning, tool_calls, finish, usage = _streamed(chunks)
        message = whole.choices[0].message
        assert content == (message.content or "") and finish == whole.choices[0].finish_reason
        assert reasoning == ((message.model_extra or {}).get("reasoning_content") or "")
        assert [(name, args) for _, name, args in tool_calls.values()] == \
            [(c.function.name, c.function.arguments) for c in message.tool_calls or []]
        texts += content + reasoning
        assert chunks[0].choices[0].delta.role == "assistant" and chunks[-1].choices == []
        assert usage.model_dump() == whole.usage.model_dump()
        assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
        first, second = calls[2 * k], calls[2 * k + 1]
        assert second.response_ids == first.response_ids and second.prompt_ids == first.prompt_ids
        assert second.logprobs == pytest.approx(first.logprobs, abs=1e-5)
        assert usage.completion_tokens == len(second.response_ids) and usage.prompt_tokens == len(second.prompt_ids)
    assert texts  # something was streamed
    assert proxy.admitted == 0 and proxy.abandoned == 0


def test_streamed_tool_calls_and_reasoning_rebuild_the_reply(tok):
    """A reply with reasoning and a tool call streams OpenAI's way (the call opened with id and name,
    its arguments in pieces) and reassembles to the non-streamed message; without include_usage no
    usage chunk is sent; the raw stream ends with [DONE]."""
    openai = pytest.importorskip("openai")
    engine = Scripted(tok, [CALL, CALL, CALL])
    proxy = OpenAIProxy(engine, tok)

    async def main():
        async with client(proxy) as http:
            api = openai.AsyncOpenAI(base_url="http://proxy" + url("t", 0, "v1"), api_key="none", http_client=http)
            whole = await api.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS)
            stream = await api.chat.completions.create(model="tiny", messages=QUESTION, tools=TOOLS, stream=True)
            chunks = [chunk async for chunk in stream]
            raw = await http.post(url("t", 0), json={"messages": QUESTION, "tools": TOOLS, "stream": True})
            return whole, chunks, raw

    whole, chunks, raw = asyncio.run(main())
    content, reasoning, calls, finish, usage = _streamed(chunks)
    message = whole.choices[0].message
    assert content == "" and message.content is None and usage is None
    assert reasoning == message.model_extra["reasoning_content"] == "add them"
    assert finish == whole.choices[0].finish_reason == "tool_calls"
    (call_id, name, arguments), = calls.values()
    assert call_id.startswith("call_") and name == message.tool_calls[0].function.name == "calculate"
    assert json.loads(arguments) == json.loads(message.tool_calls[0].function.arguments)
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = [line for line in raw.text.split("\n\n") if line]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)
    assert len(proxy.recorder.get("t", "0").calls) == 3


def _asgi_stream(app, body, leave_after):
    """Drive ``app`` with one POST of ``body`` as an ASGI server would (spec 2.3), the client leaving
    after ``leave_after`` body chunks: returns the messages sent."""
    sent, left = [], asyncio.Event()
    payload = json.dumps(body).encode()
    state = {"read": False}

    async def receive():
        if not state["read"]:
            state["read"] = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await left.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
        if message["type"] == "http.response.body" and message.get("body"):
            if sum(m["type"] == "http.response.body" for m in sent) >= leave_after:
                left.set()
                await asyncio.sleep(0.05)  # the server notices before it sends more

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": url("d", 0), "raw_path": url("d", 0).encode(),
             "query_string": b"", "root_path": "", "headers": [(b"content-type", b"application/json")],
             "client": ("127.0.0.1", 1), "server": ("proxy", 80)}
    asyncio.run(app(scope, receive, send))
    return sent


def test_client_leaving_mid_stream_frees_the_slot_records_nothing_and_is_counted(tok):
    engine = Scripted(tok, ["a long answer " * 20])  # many content chunks
    proxy = OpenAIProxy(engine, tok)
    app = create_app(proxy)
    body = {"messages": QUESTION, "stream": True, "max_tokens": 200}
    sent = _asgi_stream(app, body, leave_after=2)
    chunks = [m for m in sent if m["type"] == "http.response.body" and m.get("body")]
    assert sent[0]["status"] == 200 and 2 <= len(chunks) < 8
    assert b"[DONE]" not in b"".join(m["body"] for m in chunks)
    assert proxy.abandoned == 1 and proxy.admitted == 0 and proxy.recorder.keys() == []
    sent = _asgi_stream(app, body, leave_after=10_000)  # a client that stays gets all and is recorded
    assert sent[-2]["body"] == b"data: [DONE]\n\n" and sent[-1] == {"type": "http.response.body", "body": b"",
                                                                     "more_body": False}
    assert proxy.abandoned == 1 and proxy.admitted == 0 and len(proxy.recorder.get("d", "0").calls) == 1


def test_session_header_routes_episodes_on_one_base_url_and_rewards(tok):
    openai = pytest.importorskip("openai")
    proxy = OpenAIProxy(Echo(tok.eos_token_id), tok)

    async def main():
        async with client(proxy) as http:
            api = openai.AsyncOpenAI(base_url="http://proxy/v1", api_key="none", http_client=http)
            for k, session in enumerate(["ep-1", "ep-2", "ep-1"]):
                await api.chat.completions.create(model="m", messages=[{"role": "user", "content": f"go {k}"}],
                                                  extra_headers={"X-Session-ID": session}, stream=k == 2)
            ok = await http.post("/reward", json={"reward": 0.5}, headers={"X-Session-ID": "ep-1"})
            bad = {}
            for name, headers in [("missing", {}), ("long", {"X-Session-ID": "x" * 129}),
                                  ("chars", {"X-Session-ID": "a b\\c"}),
                                  ("twice", [("X-Session-ID", "a"), ("X-Session-ID", "b")])]:
                bad[name] = (await http.post("/v1/chat/completions", headers=headers, json={"messages": QUESTION}),
                             await http.post("/reward", headers=headers, json={"reward": 1}))
            return ok, bad

    ok, bad = asyncio.run(main())
    assert ok.status_code == 200 and ok.json() == {"rollout_id": "ep-1", "attempt": "0", "reward": 0.5}
    one = proxy.recorder.get("ep-1", "0")
    assert [c.messages[0]["content"] for c in one.calls] == ["go 0", "go 2"] and one.reward == 0.5
    assert [c.messages[0]["content"] for c in proxy.recorder.get("ep-2", "0").calls] == ["go 1"]
    for name, responses in bad.items():
        for r in responses:
            assert r.status_code == 400, name
            error = r.json()["error"]
            assert error["param"] == "X-Session-ID" and "\n" not in error["message"], name
    assert "at most 128" in bad["long"][0].json()["error"]["message"]
    assert sorted(proxy.recorder.keys()) == [("ep-1", "0"), ("ep-2", "0")]
