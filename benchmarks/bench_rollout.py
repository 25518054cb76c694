"""P1 rollout: collector turns/s against the bare engine's turns/s on the same prompts.

    python benchmarks/bench_rollout.py [--batches 2 --num-envs 32 --turns 16] [--quick]

On the default recipe (``recipes/tiny.yaml``: babyai/easy_goto, the tiny model built offline by
:func:`verlog.builders.build_tiny_for`, HF engine, the recipe's sampling parameters) it

1. runs :meth:`FixedTurnCollector.collect` once untimed (warm-up: first generate calls, env
   start), then ``--batches`` timed batches; the engine is wrapped so that every ``generate``
   call's prompts and the engine's RNG state before the call are recorded;
2. replays exactly those calls on the bare engine: the RNG state is restored before each call
   (so the same tokens are sampled and the same lengths generated) and only ``engine.generate``
   is timed.

collector turns/s = turns collected / collect() time (prompt building, generation, decoding, env
steps, batch packing); bare turns/s = the same turns / the summed generate() times. The ratio is
collector / bare (goal >= 0.90): the share of rollout time that is generation. The environments
run in the recipe's vector mode (async: one subprocess per env), so on a 2-core machine the env
workers compete with generation for the cores; the load at the time is printed with the figures.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from perfbench import load_note, result_line, tiny_config  # noqa: E402
from verlog.builders import build_tiny_for, decoder, memory_factory, sampling_params  # noqa: E402
from verlog.config import TrainConfig  # noqa: E402
from verlog.envs.vector import make_vector_env  # noqa: E402
from verlog.models import load_tokenizer  # noqa: E402
from verlog.rollout.collector import FixedTurnCollector  # noqa: E402
from verlog.rollout.engine import Generation, SamplingParams  # noqa: E402
from verlog.rollout.hf import HFEngine  # noqa: E402

GOAL = 0.90


class RecordingEngine:
    """Wraps an :class:`HFEngine`: records each ``generate`` call's prompts and the RNG state before it."""

    def __init__(self, engine: HFEngine) -> None:
        self.engine = engine
        self.calls: list[tuple[list[list[int]], torch.Tensor]] = []
        self.recording = False

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        if self.recording:
            self.calls.append(([list(p) for p in prompts], self.engine.generator.get_state()))
        return self.engine.generate(prompts, params)

    def load_weights(self, named_tensors: Any) -> None:
        self.engine.load_weights(named_tensors)


def time_collector(collector: FixedTurnCollector, batches: int) -> tuple[float, int, dict[str, float]]:
    """(seconds, turns, the collector's own phase seconds) of ``batches`` collect() calls."""
    turns, tic = 0, time.perf_counter()
    phases = {"generate+decode": 0.0, "env": 0.0, "prompts": 0.0}
    for _ in range(batches):
        _, stats = collector.collect()
        turns += stats.turns
        phases["generate+decode"] += stats.generate_seconds
        phases["env"] += stats.env_seconds
        phases["prompts"] += stats.prompt_seconds
    return time.perf_counter() - tic, turns, phases


def time_bare(engine: HFEngine, calls: list[tuple[list[list[int]], torch.Tensor]],
              sampling: SamplingParams) -> tuple[float, int]:
    """(seconds, turns) of replaying the recorded generate calls on the bare engine."""
    seconds, turns = 0.0, 0
    for prompts, rng_state in calls:
        engine.generator.set_state(rng_state)
        tic = time.perf_counter()
        engine.generate(prompts, sampling)
        seconds += time.perf_counter() - tic
        turns += len(prompts)
    return seconds, turns


def run(cfg: TrainConfig, batches: int) -> tuple[float, float, dict[str, float]]:
    """(collector turns/s, bare turns/s, seconds: collect, its phases, bare generate) on ``cfg``."""
    torch.set_num_threads(cfg.threads)
    path = build_tiny_for(cfg)
    tokenizer = load_tokenizer(path)
    engine = HFEngine(path, tokenizer, seed=cfg.seed)
    recorder = RecordingEngine(engine)
    sampling = sampling_params(cfg.rollout)
    make_memory = memory_factory(cfg.memory, tokenizer)
    venv = make_vector_env(cfg.env.task, cfg.env.num_envs, seed=cfg.seed, mode=cfg.env.vector_mode,
                           env_kwargs=cfg.env.env_kwargs())
    try:
        collector = FixedTurnCollector(venv, [make_memory() for _ in range(cfg.env.num_envs)], recorder,
                                       decoder(tokenizer), sampling, cfg.rollout.turns_per_env,
                                       int(tokenizer.pad_token_id), seed=cfg.seed)
        collector.collect()  # warm-up
        recorder.recording = True
        t_collect, turns, phases = time_collector(collector, batches)
    finally:
        venv.close()
    t_bare, bare_turns = time_bare(engine, recorder.calls, sampling)
    assert bare_turns == turns, (bare_turns, turns)
    return turns / t_collect, turns / t_bare, {"collect": t_collect, **phases, "bare generate": t_bare}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=2, help="timed collect() calls after one warm-up (default 2)")
    p.add_argument("--num-envs", type=int, default=None, help="environments (default: the recipe's, 32)")
    p.add_argument("--turns", type=int, default=None, help="turns per env per batch (default: the recipe's, 16)")
    p.add_argument("--quick", action="store_true", help="smallest run (4 envs x 2 turns, 1 batch, sync envs)")
    p.add_argument("overrides", nargs="*", help="more recipe overrides, key=value")
    args = p.parse_args(argv)
    overrides = list(args.overrides)
    if args.quick:
        args.batches, args.num_envs, args.turns = 1, 4, 2
        overrides.append("env.vector_mode=sync")
    if args.num_envs:
        overrides.append(f"env.num_envs={args.num_envs}")
    if args.turns:
        overrides.append(f"rollout.turns_per_env={args.turns}")
    cfg = tiny_config(overrides)
    collector_tps, bare_tps, secs = run(cfg, args.batches)
    print(f"bench_rollout: {cfg.env.task}, {cfg.env.num_envs} envs x {cfg.rollout.turns_per_env} turns x "
          f"{args.batches} batches ({cfg.env.vector_mode} envs, {cfg.rollout.engine} engine, "
          f"{torch.get_num_threads()} threads); seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in secs.items())
          + f"; {load_note()}")
    ratio = collector_tps / bare_tps
    print(result_line("P1 rollout", f"collector {collector_tps:.0f} turns/s vs bare engine {bare_tps:.0f} turns/s",
                      ratio, f">= {GOAL:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
