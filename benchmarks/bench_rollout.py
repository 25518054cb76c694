"""P1 rollout: collector turns/s against the bare engine's turns/s on the same prompts, timed in pairs.

    python benchmarks/bench_rollout.py [--pairs 5 --num-envs 32 --turns 16 --threads 1] [--quick]

On the default recipe (``recipes/tiny.yaml``: babyai/easy_goto, the tiny model built offline by
:func:`verlog.builders.build_tiny_for`, HF engine, the recipe's sampling parameters, ``threads`` set
to ``--threads``; ``model.path=smollm2-135m-instruct`` measures a real model instead, resolved as a
run resolves it) it times two sides interleaved, A B A B ... (:mod:`paired`, one untimed pair first):

* A: one :meth:`FixedTurnCollector.collect` batch; the engine is wrapped so that every ``generate``
  call's prompts and the engine's RNG state before the call are recorded;
* B: exactly those calls replayed on the bare engine: the RNG state is restored before each call
  (so the same tokens are sampled and the same lengths generated), then ``engine.generate``.

collector turns/s = turns of a batch / collect() time (prompt building, generation, decoding, env
steps, batch packing); bare turns/s = the same turns / the replay's time (its ``generate`` calls and
the RNG restores, microseconds each). The ratio of a pair is collector / bare turns/s (goal >= 0.90):
the share of rollout time that is generation; the result is the median of the per-pair ratios with
their min-max. The environments run in the recipe's vector mode (sync: in this process, one after
the other; ``env.vector_mode=async`` puts each in a subprocess, whose workers then compete with
generation for the cores); the load at the time is printed with the figures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfbench import (Result, add_common_args, load_note, preset_threads, report, threads_note,  # noqa: E402
                       tiny_config)

preset_threads()  # OMP_NUM_THREADS before torch is imported
import torch  # noqa: E402

from paired import PairedTimes, paired_times, spread  # noqa: E402
from verlog.builders import base_model_path, decoder, memory_factory, sampling_params  # noqa: E402
from verlog.config import TrainConfig  # noqa: E402
from verlog.envs.vector import make_vector_env  # noqa: E402
from verlog.models import load_tokenizer  # noqa: E402
from verlog.rollout.collector import FixedTurnCollector  # noqa: E402
from verlog.rollout.engine import Generation, SamplingParams  # noqa: E402
from verlog.rollout.hf import HFEngine  # noqa: E402
from verlog.rollout.records import CollectStats  # noqa: E402

GOAL = 0.90


class RecordingEngine:
    """Wraps an :class:`HFEngine`: records each ``generate`` call's prompts and the RNG state before it."""

    def __init__(self, engine: HFEngine) -> None:
        self.engine = engine
        self.calls: list[tuple[list[list[int]], torch.Tensor]] = []

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """Record the call, then the wrapped engine's ``generate``."""
        self.calls.append(([list(p) for p in prompts], self.engine.generator.get_state()))
        return self.engine.generate(prompts, params)

    def load_weights(self, named_tensors: Any) -> None:
        """The wrapped engine's ``load_weights``."""
        self.engine.load_weights(named_tensors)


def replay(engine: HFEngine, calls: list[tuple[list[list[int]], torch.Tensor]], sampling: SamplingParams) -> None:
    """The recorded generate calls on the bare engine, each from its recorded RNG state."""
    for prompts, rng_state in calls:
        engine.generator.set_state(rng_state)
        engine.generate(prompts, sampling)


def run(cfg: TrainConfig, pairs: int) -> tuple[PairedTimes, int, list[CollectStats]]:
    """Paired seconds of A (one collect() batch) and B (its generate calls replayed on the bare engine);
    the turns of a batch; the collector's stats of the timed batches."""
    torch.set_num_threads(cfg.threads)
    path = base_model_path(cfg)  # the tiny model, or model.path=<a real model> resolved
    tokenizer = load_tokenizer(path)
    engine = HFEngine(path, tokenizer, seed=cfg.seed)
    recorder = RecordingEngine(engine)
    sampling = sampling_params(cfg.rollout)
    make_memory = memory_factory(cfg.memory, tokenizer)
    stats: list[CollectStats] = []

    def collect() -> None:
        recorder.calls.clear()
        stats.append(collector.collect()[1])

    venv = make_vector_env(cfg.env.task, cfg.env.num_envs, seed=cfg.seed, mode=cfg.env.vector_mode,
                           env_kwargs=cfg.env.env_kwargs())
    try:
        collector = FixedTurnCollector(venv, [make_memory() for _ in range(cfg.env.num_envs)], recorder,
                                       decoder(tokenizer), sampling, cfg.rollout.turns_per_env,
                                       int(tokenizer.pad_token_id), seed=cfg.seed)
        times = paired_times(collect, lambda: replay(engine, recorder.calls, sampling), pairs=pairs)
    finally:
        venv.close()
    turns = {s.turns for s in stats}
    bare_turns = sum(len(prompts) for prompts, _ in recorder.calls)
    assert turns == {bare_turns}, (turns, bare_turns)
    return times, bare_turns, stats[-pairs:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-envs", type=int, default=None, help="environments (default: the recipe's, 32)")
    p.add_argument("--turns", type=int, default=None, help="turns per env per batch (default: the recipe's, 16)")
    add_common_args(p)
    p.add_argument("--quick", action="store_true", help="smallest run (4 envs x 2 turns, sync envs)")
    p.add_argument("overrides", nargs="*", help="more recipe overrides, key=value")
    args = p.parse_args(argv)
    overrides = [f"threads={args.threads}"]
    if args.quick:
        args.num_envs, args.turns = 4, 2
        overrides.append("env.vector_mode=sync")
    if args.num_envs:
        overrides.append(f"env.num_envs={args.num_envs}")
    if args.turns:
        overrides.append(f"rollout.turns_per_env={args.turns}")
    cfg = tiny_config([*overrides, *args.overrides])
    times, turns, stats = run(cfg, args.pairs)
    t_collect, t_bare = spread(times.a).median, spread(times.b).median
    phases = {"generate+decode": sum(s.generate_seconds for s in stats), "env": sum(s.env_seconds for s in stats),
              "prompts": sum(s.prompt_seconds for s in stats)}
    print(f"bench_rollout: {cfg.env.task}, {cfg.env.num_envs} envs x {cfg.rollout.turns_per_env} turns a batch "
          f"({cfg.env.vector_mode} envs, {cfg.rollout.engine} engine, {threads_note(torch.get_num_threads())}); "
          f"seconds a batch (median): collect {t_collect:.2f}, bare generate {t_bare:.2f}; collect phases over the "
          f"{args.pairs} timed batches: " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()) + f"; {load_note()}")
    report(Result.of("P1", "rollout", f"collector {turns / t_collect:.1f} turns/s vs bare engine "
                     f"{turns / t_bare:.1f} turns/s", f">= {GOAL:.2f}", times.rate_ratios(), torch.get_num_threads()),
           args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
