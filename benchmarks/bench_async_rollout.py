"""Server-based asynchronous rollout (``rollout.server``): collection turns/s through an engine server
against the direct path, timed in pairs.

    python benchmarks/bench_async_rollout.py [--pairs 3 --babyai-pairs 9 --tool-envs 64 --envs 32 --turns 16 --threads 1]
        [--quick] [key=value ...]

Two figures, each the median over pairs of served turns/s / direct turns/s (:mod:`paired`; one untimed
pair first; side A is the served one, B the direct one, so the ratio is A's rate / B's rate):

* ``async/tools``: one :class:`~verlog.rollout.conversations.ToolLoopCollector` round of the calculator
  task (``recipes/calculator_tools.yaml``, its tiny model built by
  :func:`~verlog.builders.build_tiny_for`, ``--tool-envs`` conversations) with ``agent.tool_latency_s``
  = ``--latency`` (0.1 s) injected into every tool call. A: the conversations on an
  :class:`~verlog.rollout.server.EngineServer`; B: today's path, one
  :class:`~verlog.proxy.worker.GenerationWorker` batching the conversations inside ``collect()``. The
  untrained tiny model writes no tool call, so the engine of both sides generates with the tiny model
  (the generation cost is real) and returns the calculator oracle's reply instead (a call of
  ``calculate`` on the question, then the answer), so that every conversation waits on one tool call.
  A second line, ``async/tools-unbatched``, compares A with B at ``max_batch=1`` (one prompt per engine
  call: conversations not batched together), the path the server replaces where a loop calls its
  engine per conversation.
* ``async/babyai``: one :class:`~verlog.rollout.collector.FixedTurnCollector` batch of the tiny recipe
  (``babyai/easy_goto``, ``--envs`` x ``--turns``). A: the engine behind a server
  (:class:`~verlog.rollout.server.ServedEngine`: each turn's prompts sent together, lock-step as
  before); B: the engine called directly. Goal: no slower.

Each side has its own engine (same model, same seed); they never run at the same time.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
import perfbench  # noqa: E402
from perfbench import Result, add_common_args, json_for, load_note, preset_threads, report, threads_note  # noqa: E402

preset_threads()  # OMP_NUM_THREADS before torch is imported
import torch  # noqa: E402

from paired import interleave, spread  # noqa: E402
from verlog.agent.formats import tool_call_text  # noqa: E402
from verlog.builders import (agent_limits, agent_task, build_tiny_for, decoder, memory_factory,  # noqa: E402
                             sampling_params)
from verlog.agent.tasks import with_tool_latency  # noqa: E402
from verlog.config import TrainConfig, load_recipe  # noqa: E402
from verlog.envs.vector import make_vector_env  # noqa: E402
from verlog.models import load_tokenizer  # noqa: E402
from verlog.rollout.collector import FixedTurnCollector  # noqa: E402
from verlog.rollout.conversations import ToolLoopCollector  # noqa: E402
from verlog.rollout.engine import Generation, SamplingParams  # noqa: E402
from verlog.rollout.hf import HFEngine  # noqa: E402
from verlog.rollout.server import EngineClient, EngineServer, ServedEngine  # noqa: E402

TOOLS_GOAL, BABYAI_GOAL = 1.5, 0.95


class OracleReplies:
    """The tiny model generates each call (its cost is real); the replies returned are the calculator
    oracle's: ``calculate`` on the question's expression, then ``ANSWER: <the tool's response>``."""

    def __init__(self, engine: HFEngine, tokenizer: Any) -> None:
        self.engine, self.tok = engine, tokenizer
        self.calls = self.prompts = 0

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        self.engine.generate(prompts, params)
        self.calls, self.prompts = self.calls + 1, self.prompts + len(prompts)
        out = []
        for ids in prompts:
            text = self.tok.decode(list(ids))
            responses = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text)
            reply = (f"ANSWER: {responses[-1]}" if responses else
                     tool_call_text("calculate", {"expression": re.findall(r"What is (.*?)\?", text)[-1]}))
            gen = (self.tok.encode(reply, add_special_tokens=False) + [self.tok.eos_token_id])[: params.max_tokens]
            out.append(Generation(gen, [-1.0] * len(gen), "stop" if gen[-1] == self.tok.eos_token_id else "length"))
        return out

    def load_weights(self, named_tensors: Any) -> None:
        self.engine.load_weights(named_tensors)


def timed_turns(collect: Callable[[], Any]) -> float:
    """Seconds per turn of one ``collect()`` (wall clock)."""
    tic = perfbench.clock()
    _, stats = collect()
    return (perfbench.clock() - tic) / stats.turns


def tools_figures(cfg: TrainConfig, latency: float, pairs: int) -> tuple[Any, Any, int, list[float]]:
    """(served vs direct, served vs direct at max_batch 1) paired seconds per turn; turns per round; the
    mean prompts per engine call of the served and the direct side."""
    path = build_tiny_for(cfg)
    tok = load_tokenizer(path)
    engines = [OracleReplies(HFEngine(path, tok, seed=cfg.seed), tok) for _ in range(3)]
    task = with_tool_latency(agent_task(cfg), latency)
    common = dict(num_envs=cfg.env.num_envs, group_size=1, seed=cfg.seed, pad_id=int(tok.pad_token_id),
                  sampling=sampling_params(cfg.rollout))
    client = EngineClient([EngineServer(engines[0], max_batch=cfg.rollout.server_max_batch)]).start()
    served = ToolLoopCollector(task, None, tok, agent_limits(cfg), client=client, **common)
    direct = ToolLoopCollector(task, engines[1], tok, agent_limits(cfg), **common)
    unbatched = ToolLoopCollector(task, engines[2], tok, agent_limits(cfg), max_batch=1, **common)
    try:
        batched = interleave(lambda: timed_turns(served.collect), lambda: timed_turns(direct.collect), pairs=pairs)
        single = interleave(lambda: timed_turns(served.collect), lambda: timed_turns(unbatched.collect), pairs=pairs)
        turns = served.collect()[1].turns
    finally:
        served.close()
    return batched, single, turns, [e.prompts / max(e.calls, 1) for e in engines[:2]]


def babyai_figure(cfg: TrainConfig, pairs: int) -> tuple[Any, int]:
    """Served vs direct paired seconds per turn of a fixed-turn batch; turns per batch."""
    path = build_tiny_for(cfg)
    tok = load_tokenizer(path)
    make_memory = memory_factory(cfg.memory, tok)

    def collector(engine: Any) -> FixedTurnCollector:
        venv = make_vector_env(cfg.env.task, cfg.env.num_envs, seed=cfg.seed, mode=cfg.env.vector_mode,
                               env_kwargs=cfg.env.env_kwargs())
        return FixedTurnCollector(venv, [make_memory() for _ in range(cfg.env.num_envs)], engine, decoder(tok),
                                  sampling_params(cfg.rollout), cfg.rollout.turns_per_env, int(tok.pad_token_id),
                                  seed=cfg.seed)

    client = EngineClient([EngineServer(HFEngine(path, tok, seed=cfg.seed), max_batch=cfg.rollout.server_max_batch)])
    served, direct = collector(ServedEngine(client.start())), collector(HFEngine(path, tok, seed=cfg.seed))
    try:
        times = interleave(lambda: timed_turns(served.collect), lambda: timed_turns(direct.collect), pairs=pairs)
    finally:
        served.close()
        direct.close()
    return times, cfg.env.num_envs * cfg.rollout.turns_per_env


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tool-envs", type=int, default=64, help="calculator conversations a round (default 64, the recipe's)")
    p.add_argument("--latency", type=float, default=0.1, help="seconds injected into every tool call (default 0.1)")
    p.add_argument("--envs", type=int, default=32, help="babyai envs (default 32, the tiny recipe's)")
    p.add_argument("--turns", type=int, default=16, help="babyai turns per env a batch (default 16)")
    p.add_argument("--only", choices=("tools", "babyai"), default=None, help="run one figure only")
    add_common_args(p, pairs=3)
    p.add_argument("--babyai-pairs", type=int, default=9,
                   help="pairs of the babyai figure (default 9: each side is one ~1 s batch whose time swings by "
                        "+-20 %% on a shared machine, so its median needs more pairs than the tool figures' 3)")
    p.add_argument("--quick", action="store_true", help="16 conversations; 8 sync babyai envs x 4 turns; 1 pair")
    p.add_argument("overrides", nargs="*", help="more overrides of both recipes, key=value (e.g. rollout.server_max_batch=32)")
    args = p.parse_args(argv)
    sync = []
    if args.quick:
        args.tool_envs, args.envs, args.turns, args.pairs, args.babyai_pairs = 16, 8, 4, 1, 1
        sync = ["env.vector_mode=sync"]
    torch.set_num_threads(args.threads)
    if args.only in (None, "tools"):
        cfg = load_recipe("calculator_tools", [f"threads={args.threads}", f"env.num_envs={args.tool_envs}",
                                               *args.overrides])
        batched, single, turns, per_call = tools_figures(cfg, args.latency, args.pairs)
        served, direct, one = (1 / spread(t).median for t in (batched.a, batched.b, single.b))
        print(f"bench_async_rollout tools: calculator, {args.tool_envs} conversations ({turns} turns) a round, "
              f"{args.latency * 1000:.0f} ms per tool call, {threads_note(torch.get_num_threads())}; turns/s (median): "
              f"served {served:.1f}, direct {direct:.1f}, direct one prompt a call {one:.1f}; prompts per engine call "
              f"(mean): served {per_call[0]:.1f}, direct {per_call[1]:.1f}; {load_note()}")
        report(Result.of("async/tools-unbatched", "rollout", f"served {1 / spread(single.a).median:.1f} turns/s vs "
                         f"one prompt a call {one:.1f} turns/s", f">= {TOOLS_GOAL:.2f}", single.rate_ratios(),
                         args.threads), json_for(args.json, "tools-unbatched"))
        report(Result.of("async/tools", "rollout", f"served {served:.1f} turns/s vs direct (batched) {direct:.1f} turns/s",
                         f">= {TOOLS_GOAL:.2f}", batched.rate_ratios(), args.threads),
               args.json if args.only == "tools" else json_for(args.json, "tools"))
    if args.only in (None, "babyai"):
        cfg = load_recipe("tiny", [f"threads={args.threads}", f"env.num_envs={args.envs}",
                                   f"rollout.turns_per_env={args.turns}", *sync, *args.overrides])
        times, turns = babyai_figure(cfg, args.babyai_pairs)
        served, direct = 1 / spread(times.a).median, 1 / spread(times.b).median
        print(f"bench_async_rollout babyai: {cfg.env.task}, {args.envs} envs x {args.turns} turns a batch "
              f"({cfg.env.vector_mode} envs), {threads_note(torch.get_num_threads())}; turns/s (median): served "
              f"{served:.1f}, direct {direct:.1f}; {load_note()}")
        report(Result.of("async/babyai", "rollout", f"served {served:.1f} turns/s vs direct {direct:.1f} turns/s",
                         f">= {BABYAI_GOAL:.2f}", times.rate_ratios(), args.threads), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
