"""Load test of the OpenAI-compatible proxy (verlog/proxy) on loopback.

16 concurrent agents x 100 chat-completions requests each go through uvicorn on 127.0.0.1 to a fast
fake engine (short fixed replies, so the proxy is measured, not a model); every call must be recorded
exactly once (no loss, no duplicate). Prints requests/s through the proxy next to calling the same
engine directly, and a final line::

    proxy load: 1600/1600 calls recorded, 0 lost, 0 duplicated; proxy N req/s vs direct M req/s

Usage: ``PYTHONPATH=. python benchmarks/load_proxy.py [--agents 16] [--requests 100] [--quick]``.
Exits 1 when a call was lost or duplicated or a request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from verlog.models import load_tokenizer
from verlog.proxy import OpenAIProxy, ProxyServer
from verlog.rollout.engine import Generation, SamplingParams
from verlog.tiny_model import build_tiny_model

REPLY = "ANSWER: 7"


class FixedEngine:
    """Returns the same short reply (+ eos) for every prompt, instantly."""

    def __init__(self, tokenizer) -> None:
        ids = tokenizer.encode(REPLY, add_special_tokens=False) + [tokenizer.eos_token_id]
        self.ids, self.logprobs, self.calls = ids, [-0.1] * len(ids), 0

    def generate(self, prompts, params: SamplingParams) -> list[Generation]:
        self.calls += 1
        return [Generation(list(self.ids), list(self.logprobs), "stop") for _ in prompts]


def messages(agent: int, k: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Solve it."}, {"role": "user", "content": f"agent {agent} call {k}"}]


async def run_agents(server: ProxyServer, agents: int, requests: int) -> tuple[float, int]:
    """(seconds, failed requests) for ``agents`` concurrent agents of ``requests`` sequential calls."""
    failed = 0
    limits = httpx.Limits(max_connections=agents, max_keepalive_connections=agents)
    async with httpx.AsyncClient(limits=limits, timeout=60) as http:
        async def agent(a: int) -> None:
            nonlocal failed
            url = server.base_url(f"agent{a}", 0) + "/chat/completions"
            for k in range(requests):
                r = await http.post(url, json={"model": "fake", "messages": messages(a, k), "max_tokens": 16})
                if r.status_code != 200 or r.json()["choices"][0]["message"]["content"] != REPLY:
                    failed += 1
        # Its own clock (perfbench.timed times a plain call, not a coroutine); like the direct rate
        # below, this is context for the no-loss check, not one side of a paired ratio.
        start = time.perf_counter()
        await asyncio.gather(*(agent(a) for a in range(agents)))
        return time.perf_counter() - start, failed


def check(proxy: OpenAIProxy, agents: int, requests: int) -> tuple[int, int, int]:
    """(recorded unique, lost, duplicated) calls, by each call's (agent, index) tag."""
    seen: Counter[str] = Counter()
    for record in proxy.recorder.pop_all():
        for call in record.calls:
            seen[f"{record.rollout_id}|{call.messages[-1]['content']}"] += 1
    expected = {f"agent{a}|agent {a} call {k}" for a in range(agents) for k in range(requests)}
    lost = len(expected - set(seen))
    duplicated = sum(n - 1 for n in seen.values()) + len(set(seen) - expected)
    return len(expected & set(seen)), lost, duplicated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="4 agents x 25 requests (a smoke test)")
    args = parser.parse_args(argv)
    agents, requests = (4, 25) if args.quick else (args.agents, args.requests)
    corpus = [REPLY, "Solve it.", "agent call"] + [str(k) for k in range(100)]
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_model(Path(tmp) / "tok", corpus, vocab_size=300, hidden_size=16, num_heads=1,
                                num_kv_heads=1, intermediate_size=16, num_layers=1)
        tokenizer = load_tokenizer(path)
    engine = FixedEngine(tokenizer)
    proxy = OpenAIProxy(engine, tokenizer)
    with ProxyServer(proxy) as server:
        asyncio.run(run_agents(server, 2, 5))  # warm-up, not counted
        proxy.recorder.clear()
        seconds, failed = asyncio.run(run_agents(server, agents, requests))
    total, proxy_engine_calls = agents * requests, engine.calls
    recorded, lost, duplicated = check(proxy, agents, requests)
    prompt = proxy._chat.prompt_ids(messages(0, 0))
    params = SamplingParams(max_tokens=16)
    start = time.perf_counter()
    for _ in range(total):
        engine.generate([prompt], params)
    direct = total / (time.perf_counter() - start)
    through = total / seconds
    print(f"{agents} agents x {requests} requests: {seconds:.2f} s through the proxy, {failed} failed, "
          f"{proxy_engine_calls} engine calls (warm-up included; batched)")
    print(f"proxy load: {recorded}/{total} calls recorded, {lost} lost, {duplicated} duplicated; "
          f"proxy {through:.0f} req/s vs direct {direct:.0f} req/s")
    return 0 if recorded == total and not lost and not duplicated and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
