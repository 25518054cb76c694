"""Tests of verlog.rollout.server: request-level batching, the multi-server client (least loaded,
sticky trajectories), pause/drain around weight loads, errors to their caller only, and the tool-loop
collector served from it."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch

from verlog.rollout.engine import Generation, SamplingParams
from verlog.rollout.server import EngineClient, EngineServer, ServedEngine

POISON = 13
P = SamplingParams(max_tokens=3, greedy=True)


class FakeEngine:
    """Answers prompt ``p`` with ids ``[p[-1] + 1, p[-1] + 2, ...]`` (max_tokens of them), logprobs
    ``-id / 100``; raises for a prompt containing :data:`POISON`. Records every call's prompts; with
    ``hold`` set, a call waits for ``release`` (``entered`` is set once a call has started)."""

    def __init__(self, name: str = "e", hold: bool = False) -> None:
        self.name, self.calls, self.loads, self.log = name, [], [], []
        self.entered, self.release = threading.Event(), threading.Event()
        if not hold:
            self.release.set()
        self._lock = threading.Lock()

    def generate(self, prompts, params):
        with self._lock:
            self.calls.append([list(p) for p in prompts])
            self.log.append(("generate", len(prompts)))
        self.entered.set()
        assert self.release.wait(10)
        if any(POISON in p for p in prompts):
            raise RuntimeError(f"poisoned prompt in {prompts}")
        out = []
        for p in prompts:
            ids = [p[-1] + k + 1 for k in range(params.max_tokens)]
            out.append(Generation(ids, [-i / 100 for i in ids], "length"))
        return out

    def load_weights(self, named_tensors):
        self.loads.append([name for name, _ in named_tensors])
        self.log.append(("load", len(self.loads)))


def expected(prompt, max_tokens=3):
    ids = [prompt[-1] + k + 1 for k in range(max_tokens)]
    return ids, [-i / 100 for i in ids]


def wait_for(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.002)


# ------------------------------------------------------------------------------ one server
def test_waiting_requests_share_one_engine_call_and_each_caller_gets_its_own_ids():
    engine = FakeEngine(hold=True)
    with EngineServer(engine, max_batch=64) as server:
        first = server.submit([1], P)
        assert engine.entered.wait(5)  # the engine is busy with [1] alone
        rest = [server.submit([10 * k], P) for k in range(1, 8)]
        wait_for(lambda: server.inflight == 8)
        engine.release.set()
        gens = [f.result(5) for f in [first, *rest]]
    assert [len(c) for c in engine.calls] == [1, 7]  # the 7 that waited went in together
    for prompt, gen in zip([[1]] + [[10 * k] for k in range(1, 8)], gens):
        assert (gen.token_ids, gen.logprobs) == expected(prompt)
    assert server.requests == 8 and server.engine_calls == 2


def test_requests_are_grouped_by_sampling_params_and_cut_at_max_batch():
    engine = FakeEngine(hold=True)
    other = SamplingParams(max_tokens=2, temperature=0.5)
    with EngineServer(engine, max_batch=3) as server:
        first = server.submit([0], P)
        assert engine.entered.wait(5)
        a = [server.submit([k], P) for k in range(1, 6)]  # 5 with P
        b = [server.submit([100 + k], other) for k in range(2)]  # 2 with other
        wait_for(lambda: server.inflight == 8)
        engine.release.set()
        assert [len(f.result(5).token_ids) for f in [first, *a]] == [3] * 6
        assert [f.result(5).token_ids for f in b] == [[101, 102], [102, 103]]
    # after [0]: at most 3 per call, never P and `other` in one call
    sizes = [len(c) for c in engine.calls[1:]]
    assert max(sizes) <= 3 and sum(sizes) == 7
    for call in engine.calls[1:]:
        assert len({p[0] >= 100 for p in call}) == 1


def test_an_engine_error_reaches_only_the_caller_whose_prompt_failed():
    engine = FakeEngine(hold=True)
    with EngineServer(engine) as server:
        first = server.submit([1], P)
        assert engine.entered.wait(5)
        good = [server.submit([2], P), server.submit([3], P)]
        bad = server.submit([4, POISON], P)
        wait_for(lambda: server.inflight == 4)
        engine.release.set()
        assert first.result(5).token_ids == [2, 3, 4]
        assert [f.result(5).token_ids for f in good] == [[3, 4, 5], [4, 5, 6]]
        with pytest.raises(RuntimeError, match="poisoned"):
            bad.result(5)
        assert server.submit([7], P).result(5).token_ids == [8, 9, 10]  # the server goes on


def test_linger_gathers_requests_that_arrive_one_by_one_but_not_after_a_flush():
    engine = FakeEngine()
    with EngineServer(engine, linger_s=0.3) as server:
        futures = []
        for k in range(4):  # 4 requests 20 ms apart reach an idle server
            futures.append(server.submit([k + 20], P))
            time.sleep(0.02)
        assert [f.result(5).token_ids for f in futures] == [expected([k + 20])[0] for k in range(4)]
        assert [len(c) for c in engine.calls] == [4]
        tic = time.monotonic()
        lock_step = server.submit_many([[1], [2], [3]], P)  # the last one flushes: no waiting
        assert [f.result(5).token_ids[0] for f in lock_step] == [2, 3, 4]
        assert time.monotonic() - tic < 0.25 and [len(c) for c in engine.calls] == [4, 3]
    eager = FakeEngine(hold=True)
    with EngineServer(eager) as server:  # no linger: the first request goes alone
        first = server.submit([1], P)
        assert eager.entered.wait(5)
        rest = [server.submit([k], P) for k in (2, 3)]
        eager.release.set()
        [f.result(5) for f in [first, *rest]]
    assert [len(c) for c in eager.calls] == [1, 2]
    with pytest.raises(ValueError, match="linger_s"):
        EngineServer(engine, linger_s=-1.0)


def test_generate_is_awaitable_from_another_event_loop_and_keeps_order():
    engine = FakeEngine()

    async def main(server):
        return await asyncio.gather(*(server.generate([k + 20], P) for k in range(20)))

    with EngineServer(engine, max_batch=4) as server:
        gens = asyncio.run(main(server))
    assert [g.token_ids for g in gens] == [expected([k + 20])[0] for k in range(20)]
    assert max(len(c) for c in engine.calls) <= 4


def test_pause_drains_in_flight_requests_and_holds_new_ones_until_the_weights_are_loaded():
    engine = FakeEngine(hold=True)
    with EngineServer(engine) as server:
        in_flight = server.submit([1], P)
        assert engine.entered.wait(5)
        loaded = threading.Event()

        def load():
            with server.paused(timeout=5):
                engine.load_weights([("w", torch.zeros(1))])
            loaded.set()

        loader = threading.Thread(target=load)
        loader.start()
        time.sleep(0.05)
        assert not engine.loads  # the pause waits for the request in flight
        later = server.submit([5], P)  # arrives during the pause: waits, does not fail
        engine.release.set()
        loader.join(5)
        assert loaded.is_set() and in_flight.result(5).token_ids == [2, 3, 4]
        assert later.result(5).token_ids == [6, 7, 8]
    # the request in flight was generated with the old weights, the later one with the new
    assert engine.log == [("generate", 1), ("load", 1), ("generate", 1)]


def test_a_pause_that_cannot_drain_in_time_is_undone():
    engine = FakeEngine(hold=True)
    with EngineServer(engine) as server:
        stuck = server.submit([1], P)
        assert engine.entered.wait(5)
        with pytest.raises(TimeoutError):
            with server.paused(timeout=0.05):
                pass  # pragma: no cover
        assert not server.gate.is_paused
        engine.release.set()
        assert stuck.result(5).token_ids == [2, 3, 4]


def test_a_caller_that_goes_away_drops_its_request():
    engine = FakeEngine(hold=True)
    with EngineServer(engine) as server:
        first = server.submit([1], P)
        assert engine.entered.wait(5)
        gone, kept = server.submit_many([[2], [3]], P)
        wait_for(lambda: server.inflight == 3)
        assert gone.cancel()
        wait_for(lambda: server.inflight == 2)
        engine.release.set()
        assert kept.result(5).token_ids == [4, 5, 6] and first.result(5).token_ids == [2, 3, 4]
    assert engine.calls == [[[1]], [[3]]]  # the cancelled prompt never reached the engine


def test_stop_cancels_waiting_requests_and_refuses_new_ones():
    engine = FakeEngine(hold=True)
    server = EngineServer(engine).start()
    first = server.submit([1], P)
    assert engine.entered.wait(5)
    waiting = server.submit([2], P)
    engine.release.set()
    first.result(5)
    server.stop()
    assert waiting.done()
    with pytest.raises(RuntimeError, match="not running"):
        server.submit([3], P)
    with pytest.raises(ValueError, match="max_batch"):
        EngineServer(engine, max_batch=0)


# ------------------------------------------------------------------------------ the client
def test_client_keeps_each_trajectory_on_one_server_and_balances_new_ones():
    engines = [FakeEngine("a"), FakeEngine("b")]
    client = EngineClient.over(engines, max_batch=8)

    async def trajectory(t):
        ids, session = [1000 * (t + 1)], client.session(("traj", t))
        for _ in range(3):
            gen = (await session.generate([ids], P))[0]
            assert gen.token_ids == expected(ids)[0]
            ids = ids + gen.token_ids
        session.close()
        return ids

    async def main():
        return await asyncio.gather(*(trajectory(t) for t in range(8)))

    try:
        finals = asyncio.run(main())
    finally:
        client.stop()
    for t, ids in enumerate(finals):
        assert len(ids) == 10 and ids[0] == 1000 * (t + 1)
    # every prompt of trajectory t went to one server: its first id names the trajectory
    where = {}
    for k, engine in enumerate(engines):
        for call in engine.calls:
            for prompt in call:
                assert where.setdefault(prompt[0], k) == k
    assert sorted(where) == [1000 * (t + 1) for t in range(8)]
    assert sorted(client.assigned) == [4, 4] and sum(client.sent) == 24  # least loaded: an even split
    assert client.inflight == [0, 0] and client.server_of(("traj", 0)) is None  # released


def test_client_sends_a_new_trajectory_to_the_server_with_fewest_requests_in_flight():
    busy, idle = FakeEngine("busy", hold=True), FakeEngine("idle")
    client = EngineClient.over([busy, idle])
    try:
        held = [client.submit([1], P, session="x"), client.submit([2], P, session="x")]
        assert busy.entered.wait(5) and client.server_of("x") == 0
        assert client.submit([3], P, session="y").result(5).token_ids == [4, 5, 6]
        assert client.server_of("y") == 1
        assert client.submit([4], P, session="x") is not None and client.inflight[0] == 3  # sticky although busy
        busy.release.set()
        assert [f.result(5).token_ids for f in held] == [[2, 3, 4], [3, 4, 5]]
    finally:
        busy.release.set()
        client.stop()
    with pytest.raises(ValueError, match="own engine"):
        EngineClient.over([idle, idle])
    with pytest.raises(ValueError, match="at least one"):
        EngineClient([])


def test_client_errors_propagate_to_their_caller_only():
    client = EngineClient.over([FakeEngine(), FakeEngine()])

    async def main():
        return await asyncio.gather(client.generate([1], P, session=1), client.generate([POISON], P, session=2),
                                    client.generate([3], P, session=3), return_exceptions=True)

    try:
        ok1, bad, ok3 = asyncio.run(main())
    finally:
        client.stop()
    assert ok1.token_ids == [2, 3, 4] and ok3.token_ids == [4, 5, 6]
    assert isinstance(bad, RuntimeError) and "poisoned" in str(bad)


def test_served_engine_is_a_lock_step_engine_and_loads_weights_into_every_server():
    engines = [FakeEngine("a"), FakeEngine("b")]
    served = ServedEngine(EngineClient.over(engines))
    try:
        prompts = [[10 * k] for k in range(6)]
        for _ in range(2):
            gens = served.generate(prompts, P)
            assert [g.token_ids for g in gens] == [expected(p)[0] for p in prompts]
        assert served.generate([], P) == []
        with pytest.raises(RuntimeError, match="poisoned"):
            served.generate([[1], [POISON]], P)
        served.load_weights(iter([("w", torch.zeros(1)), ("v", torch.ones(1))]))
    finally:
        served.close()
    assert [e.loads for e in engines] == [[["w", "v"]], [["w", "v"]]]
    # slot j stays on one server across calls
    seen = {}
    for k, engine in enumerate(engines):
        for call in engine.calls:
            for prompt in call:
                assert seen.setdefault(prompt[0], k) == k


# ------------------------------------------------------------------------------ collectors on servers
class CalculatorOracle:
    """Calls ``calculate`` on the question's expression, then answers with the tool's response; records
    each engine call's batch size."""

    def __init__(self, tok):
        self.tok, self.batches = tok, []

    def generate(self, prompts, params):
        import re

        from verlog.agent.formats import tool_call_text

        self.batches.append(len(prompts))
        out = []
        for ids in prompts:
            text = self.tok.decode(ids)
            responses = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text)
            reply = (f"ANSWER: {responses[-1]}" if responses else
                     tool_call_text("calculate", {"expression": re.findall(r"What is (.*?)\?", text)[-1]}))
            gen = self.tok.encode(reply, add_special_tokens=False) + [self.tok.eos_token_id]
            out.append(Generation(gen, [-0.5 - 0.01 * k for k in range(len(gen))], "stop"))
        return out

    def load_weights(self, named_tensors):  # pragma: no cover
        pass


def tool_collector(tok, engine, client=None, latency=0.0):
    from verlog.agent import AgentLimits
    from verlog.agent.tasks import make_agent_task, with_tool_latency
    from verlog.rollout.conversations import ToolLoopCollector

    task = with_tool_latency(make_agent_task("calculator", max_operand=20), latency)
    limits = AgentLimits(max_response_tokens=64, max_total_tokens=1024, max_assistant_turns=3)
    return ToolLoopCollector(task, engine, tok, limits, num_envs=6, group_size=1, seed=3, pad_id=tok.pad_token_id,
                             sampling=SamplingParams(), client=client)


def test_tool_loop_on_the_server_gives_the_batch_of_the_direct_path(calc_tok):
    direct_batch, direct_stats = tool_collector(calc_tok, CalculatorOracle(calc_tok)).collect()
    served = CalculatorOracle(calc_tok)
    client = EngineClient.over([served])
    collector = tool_collector(calc_tok, None, client, latency=0.05)
    with collector.weights_changing():
        assert client.servers[0].gate.is_paused
    assert not client.servers[0].gate.is_paused
    batch, stats = collector.collect()
    collector.close()
    assert not client.servers[0].running
    for key in ("prompt_ids", "response_ids", "behaviour_logprobs", "rewards", "terminated", "turn_mask"):
        assert torch.equal(getattr(batch, key), getattr(direct_batch, key)), key
    assert [e.success for e in stats.episodes] == [e.success for e in direct_stats.episodes] == [True] * 6
    # 6 conversations x 2 turns = 12 requests; while the tools wait, their turns batch together
    assert sum(served.batches) == 12 and len(served.batches) < 12
    assert client.assigned == [6] and client.inflight == [0]


class VersionedOracle(CalculatorOracle):
    """The oracle whose logprobs name its weights' version (-1 - version); the first call waits for
    ``release``; ``load_weights`` bumps the version."""

    def __init__(self, tok):
        super().__init__(tok)
        self.version, self.entered, self.release = 0, threading.Event(), threading.Event()

    def generate(self, prompts, params):
        self.entered.set()
        assert self.release.wait(10)
        return [Generation(g.token_ids, [-1.0 - self.version] * len(g.token_ids), g.finish_reason)
                for g in super().generate(prompts, params)]

    def load_weights(self, named_tensors):
        self.version += 1


def test_weights_loaded_mid_round_wait_for_the_turns_in_flight_and_serve_the_rest(calc_tok):
    engine = VersionedOracle(calc_tok)
    collector = tool_collector(calc_tok, None, EngineClient.over([engine]), latency=0.05)
    result = {}
    worker = threading.Thread(target=lambda: result.update(out=collector.collect()))
    worker.start()
    try:
        assert engine.entered.wait(10)  # the first turns are in the engine
        loaded = threading.Event()

        def sync():
            with collector.weights_changing():
                engine.load_weights([])
            loaded.set()

        syncer = threading.Thread(target=sync)
        syncer.start()
        wait_for(lambda: collector.client.servers[0].gate.is_paused)
        time.sleep(0.02)
        assert engine.version == 0  # the load waits for the turns in flight
        engine.release.set()
        syncer.join(10)
        worker.join(20)
    finally:
        engine.release.set()
        collector.close()
    assert loaded.is_set() and "out" in result
    batch, stats = result["out"]
    assert [e.success for e in stats.episodes] == [True] * 6
    first, second = batch.behaviour_logprobs[0], batch.behaviour_logprobs[1]
    mask = batch.response_mask
    # each turn keeps the logprobs of the weights that sampled it: first turns old, second turns new
    assert first[mask[0]].eq(-1.0).all() and second[mask[1]].eq(-2.0).all()


def test_tool_latency_wraps_every_tool_and_waits_before_the_call():
    from verlog.agent.tasks import make_agent_task, with_tool_latency
    from verlog.tools import DelayedTool

    task = make_agent_task("calculator", max_operand=20)
    assert with_tool_latency(task, 0) is task
    slow = with_tool_latency(task, 0.05)
    conv = slow.start(slow.make_items(1, 0)[0])
    tool = conv.tools[0]
    assert isinstance(tool, DelayedTool) and tool.name == "calculate" and tool.seconds == 0.05

    async def call():
        instance = await tool.create()
        tic = time.perf_counter()
        result = await tool.execute(instance, {"expression": "2 + 3"})
        await tool.release(instance)
        return result.text, time.perf_counter() - tic

    text, seconds = asyncio.run(call())
    assert text == "5" and seconds >= 0.05
    with pytest.raises(ValueError, match="seconds"):
        with_tool_latency(task, -1.0)


@pytest.mark.parametrize("kind", ["fixed_turns", "episodes"])
def test_lock_step_collector_on_a_served_engine_collects_the_same_turns(tmp_path, kind):
    """The real tiny model, sampled: a served lock-step collector (T x N turns, or grouped whole
    episodes) makes the very engine calls (same batches, same call seeds from the engine's stream) of
    the direct one."""
    from helpers import COUNT_CORPUS, COUNT_TASK
    from verlog.builders import decoder
    from verlog.envs.vector import make_vector_env
    from verlog.memory import WindowMemory
    from verlog.models import load_tokenizer
    from verlog.rollout.collector import FixedTurnCollector
    from verlog.rollout.episodes import EpisodeCollector
    from verlog.rollout.hf import HFEngine
    from verlog.tiny_model import build_tiny_model

    tiny = build_tiny_model(tmp_path / "m", COUNT_CORPUS, vocab_size=300, hidden_size=64, num_heads=1,
                            intermediate_size=64)
    tok = load_tokenizer(tiny)
    sampling = SamplingParams(max_tokens=6, temperature=1.0, seed=None)

    def collect(served: bool):
        engine = HFEngine(tiny, tok, seed=5)
        use = ServedEngine(EngineClient([EngineServer(engine)]).start()) if served else engine
        venv = make_vector_env(COUNT_TASK, 3, seed=1, mode="sync", env_kwargs={"max_steps": 2})
        memories = [WindowMemory(tok, history_turns=1, max_prompt_tokens=256) for _ in range(3)]
        if kind == "episodes":
            collector = EpisodeCollector(venv, memories, use, decoder(tok), sampling, tok.pad_token_id, seed=1,
                                         group_size=3)
        else:
            collector = FixedTurnCollector(venv, memories, use, decoder(tok), sampling, num_turns=3,
                                           pad_id=tok.pad_token_id, seed=1)
        try:
            batch, _ = collector.collect()
            with collector.weights_changing():  # paused and drained on the server
                if served:
                    assert use.client.servers[0].gate.is_paused
                engine.load_weights(engine.model.named_parameters())
            return batch
        finally:
            collector.close()

    direct, served = collect(False), collect(True)
    assert direct.num_real_turns > 3
    for key in ("prompt_ids", "response_ids", "behaviour_logprobs", "rewards", "terminated", "episode_ids"):
        assert torch.equal(getattr(direct, key), getattr(served, key)), key
    assert direct.bootstrap_prompts == served.bootstrap_prompts


# ------------------------------------------------------------------------------ the trainer
SMALL = ["iterations=3", "ppo.critic_warmup_iterations=1", "env.num_envs=4", "env.vector_mode=sync",
         "rollout.turns_per_env=4", "ppo.minibatches=2", "ppo.micro_batch_size=4", "format_warmup.steps=10",
         "format_warmup.episodes=2", "model.tiny.corpus_episodes=4", "eval.episodes=2", "eval.num_envs=2",
         "eval.baseline=false", "env.max_steps=12", "logging.progress=false", "checkpoint_every=0"]


def test_a_training_run_on_the_server_is_the_direct_run(tmp_path):
    """rollout.server on a text env: the same engine calls, so the same sampled turns, updates and
    metrics as without it; the weights loaded after each update reach the served engine."""
    from helpers import train_cli
    from verlog.logging import read_metrics

    common = [*SMALL, f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}"]
    train_cli("tiny", *common, "name=direct")
    train_cli("tiny", *common, "name=served", "rollout.server=true", "rollout.server_max_batch=4")

    def rows(name):
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "turns_per_second"))}
                for r in read_metrics(tmp_path / name / "metrics.jsonl")]

    direct, served = rows("direct"), rows("served")
    assert len(direct) == len(served) == 3
    for a, b in zip(direct, served):
        assert a == b
