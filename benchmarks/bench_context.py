"""P2 context: prompt tokens late in a long Crafter episode against early on, for every memory type.

    python benchmarks/bench_context.py [--episodes 3 --early 5 --late 200 --seed 0 --threads 1] [--quick]

On crafter/default with the default config (``TrainConfig``'s defaults, ``env.task=crafter/default``)
it plays seeded random-action episodes (replies ``"ACTION: <valid action>"``, actions drawn from a
``random.Random(seed)``) and records the prompt length in tokens (``prompt_ids()``) at turn ``--early``
and at turn ``--late`` (turn t's prompt is the one the agent answers at its t-th step, i.e. after
t - 1 recorded turns), for each built-in text ``memory.type`` (``none``, ``window``, ``full``,
``summary``; not ``vision``, whose prompts show images), built by
:func:`verlog.builders.memory_factory` with the config's other memory keys, so all share
``memory.max_prompt_tokens``) and for an unbounded full history (``full`` with a token budget of 10^9:
nothing is ever dropped). Each memory is told the step's outcome as the runner tells it
(:class:`~verlog.memory.TurnOutcome`). Episodes that end before turn ``--late`` (the random agent dies)
are skipped and the next seed is tried, at most ``--max-attempts`` episodes in all. Tokens are counted
with the tokenizer that ``model.path=tiny`` trains on a Crafter corpus
(:func:`verlog.builders.build_tiny_for`).

Result: late tokens / early tokens of the window memory, per episode (each episode is a pair: the
same memory, early and late); the median of those ratios with their min-max (goal <= 1.05). Before
it, one line per memory type with its mean early and late tokens, their ratio and what the budget
trimmed. Nothing here is timed; ``--threads`` (default 1) sets the config's ``threads`` and
``OMP_NUM_THREADS`` as in the other benchmarks (a ``threads=`` override wins).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfbench import Result, add_common_args, load_note, preset_threads, report, threads_note  # noqa: E402

preset_threads()  # OMP_NUM_THREADS before torch is imported
from verlog.builders import build_tiny_for, memory_factory  # noqa: E402
from verlog.config import TrainConfig, build_config, parse_overrides  # noqa: E402
from verlog.envs.registry import make_env  # noqa: E402
from verlog.memory import MEMORY_TYPES, PromptStats, TurnOutcome  # noqa: E402
from verlog.models import load_tokenizer  # noqa: E402
from verlog.warmup import format_reply  # noqa: E402

GOAL = "<= 1.05"
TASK = "crafter/default"
UNBOUNDED = "full, unbounded"


Pair = tuple[PromptStats, PromptStats]  # (early, late) prompt statistics of one episode


def play_episode(env: Any, memories: dict[str, Any], seed: int, early: int,
                 late: int) -> dict[str, Pair] | None:
    """One random-action episode fed to every memory; ``{name: (early stats, late stats)}``, or
    ``None`` when the episode ends before turn ``late``."""
    rng = random.Random(seed)
    obs, info = env.reset(seed=seed)
    for m in memories.values():
        m.start_episode(info["instruction"], obs, info["context"])
    tokens: dict[str, list[PromptStats]] = {name: [] for name in memories}
    for turn in range(1, late + 1):
        if turn in (early, late):
            for name, m in memories.items():
                tokens[name].append(m.prompt_ids()[1])
        if turn == late:
            break
        reply = format_reply(rng.choice(info["valid_actions"]))
        obs, reward, terminated, truncated, info = env.step(reply)
        if terminated or truncated:
            return None
        outcome = TurnOutcome.from_step(reward, info)
        for m in memories.values():
            m.add_turn(reply, obs, info["context"], outcome)
    return {name: (t[0], t[1]) for name, t in tokens.items()}


def text_memory_types() -> list[str]:
    """The built-in ``memory.type`` names whose prompts are text alone: a memory whose class has
    ``prompt_images`` (the vision memory) needs an image model's processor and image observations,
    which a text game's prompt length says nothing about."""
    return [name for name in MEMORY_TYPES if not hasattr(MEMORY_TYPES[name], "prompt_images")]


def measure(cfg: TrainConfig, episodes: int, early: int, late: int, seed: int,
            max_attempts: int) -> tuple[dict[str, list[Pair]], int]:
    """Early/late prompt tokens per memory over ``episodes`` episodes that reach turn ``late``;
    also returns how many episodes were played."""
    tokenizer = load_tokenizer(build_tiny_for(cfg))
    factories: dict[str, Callable[[], Any]] = {
        name: memory_factory(replace(cfg.memory, type=name), tokenizer) for name in text_memory_types()}
    factories[UNBOUNDED] = memory_factory(replace(cfg.memory, type="full", max_prompt_tokens=10**9), tokenizer)
    env = make_env(cfg.env.task, **cfg.env.env_kwargs())
    results: dict[str, list[Pair]] = {name: [] for name in factories}
    played = 0
    try:
        while len(results["window"]) < episodes and played < max_attempts:
            memories = {name: make() for name, make in factories.items()}
            out = play_episode(env, memories, seed + played, early, late)
            played += 1
            if out is not None:
                for name, pair in out.items():
                    results[name].append(pair)
    finally:
        env.close()
    if not results["window"]:
        raise SystemExit(f"bench_context: no episode of {played} reached turn {late}")
    return results, played


def ratio(pairs: list[Pair]) -> tuple[float, float, float]:
    """(mean early tokens, mean late tokens, late / early)."""
    early = statistics.mean(p[0].num_tokens for p in pairs)
    late = statistics.mean(p[1].num_tokens for p in pairs)
    return early, late, late / early


def trimmed_note(pairs: list[Pair]) -> str:
    """What the token budget dropped, early and late (mean history turns, mean observation tokens)."""
    def mean(i: int, key: str) -> float:
        return statistics.mean(getattr(p[i], key) for p in pairs)
    return (f"trimmed history turns {mean(0, 'trimmed_turns'):.1f} -> {mean(1, 'trimmed_turns'):.1f}, "
            f"trimmed observation tokens {mean(0, 'trimmed_observation_tokens'):.0f} -> "
            f"{mean(1, 'trimmed_observation_tokens'):.0f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=3, help="episodes reaching the late turn (default 3)")
    p.add_argument("--early", type=int, default=5, help="early turn (default 5)")
    p.add_argument("--late", type=int, default=200, help="late turn (default 200)")
    p.add_argument("--seed", type=int, default=0, help="first episode seed (default 0)")
    p.add_argument("--max-attempts", type=int, default=40, help="episodes played at most (default 40)")
    add_common_args(p, pairs=None)
    p.add_argument("--quick", action="store_true",
                   help="smallest run: 1 episode, late turn 20, tokenizer trained on 4 episodes (own cache dir)")
    p.add_argument("overrides", nargs="*", help="config overrides, key=value (e.g. memory.history_turns=2)")
    args = p.parse_args(argv)
    overrides = {"threads": args.threads, **parse_overrides(args.overrides)}
    if args.quick:
        args.episodes, args.late = 1, 20
        overrides = {"model.tiny.corpus_episodes": 4, "model.cache_dir": ".cache/verlog/quick", **overrides}
    cfg = build_config({"env": {"task": TASK}}, overrides)
    results, played = measure(cfg, args.episodes, args.early, args.late, args.seed, args.max_attempts)
    w_early, w_late, _ = ratio(results["window"])
    f_ratio = ratio(results[UNBOUNDED])[2]
    m = cfg.memory
    print(f"bench_context: {cfg.env.task} ({cfg.env.instruction_style} instruction), {len(results['window'])} "
          f"episodes reaching turn {args.late} of {played} played (seeds {args.seed}..{args.seed + played - 1}); "
          f"memory.max_prompt_tokens={m.max_prompt_tokens}, history_turns={m.history_turns}, "
          f"summary_turns={m.summary_turns}; {threads_note(args.threads)}; {load_note()}")
    for name, pairs in results.items():
        early, late, r = ratio(pairs)
        print(f"  {name:<16} turn {args.early}: {early:6.0f} tokens  turn {args.late}: {late:6.0f} tokens  "
              f"ratio {r:5.2f}  ({trimmed_note(pairs)})")
    per_episode = [late.num_tokens / early.num_tokens for early, late in results["window"]]
    report(Result.of("P2", "context", f"window memory turn {args.late} {w_late:.0f} tokens vs turn {args.early} "
                     f"{w_early:.0f} tokens (means; full history ratio {f_ratio:.2f})", GOAL, per_episode,
                     args.threads), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
