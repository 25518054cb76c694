"""Why is a checkpoint's greedy success on BALROG's BabyAI tasks far below its sampled success? Do its
failed greedy episodes end in a loop, and how sure is the policy of the action it loops on?

    python benchmarks/probe_greedy_loops.py <run>/checkpoints/iter_000480 [--episodes 20] [--seed 100000]
        [--threads 1] [--recipe <run>/config.yaml] [--temperature T] [--examples 3]

Not a speed target: a diagnosis of a checkpoint's policy. It plays ``--episodes`` greedy episodes of
each of BALROG's five BabyAI tasks (episode i of a task reset with seed + i, as ``verlog-eval
suite=balrog_babyai greedy=true`` plays them), with the run's memory, rollout engine and env keywords
as :func:`verlog.cli.eval_main` builds them, recording every turn. A deterministic policy that meets
the same prompt again gives the same reply, so a failed episode typically ends in a loop: the last
3 * p turns repeat with period p in (observation, action), for the shortest p in 1..8
(:func:`find_loop`): p = 1 is a no-op repeated on an unchanged observation (``go forward`` into a key
that blocks the way), p = 4 often ``turn left`` forever, p = 2 ``turn left`` / ``turn right``.

For each loop it rebuilds the prompt of the loop's first turn (the episode's turns replayed through a
fresh memory of the recipe) and scores each of the six actions' whole replies there, renormalised
over the six (:mod:`action_scores`), at ``--temperature`` (default: the run's sampling temperature at
the checkpoint's iteration, the one sampled evaluation uses): how likely a sampled policy was to take
the looping action again, and the best other action (the runner-up) it could have escaped with.

It prints, per task, the episodes, the failures, the failures by loop kind and the median probability
of the looping action and of the runner-up; then a few example loop states; last the ``result:`` line.

The recipe (default: the ``config.yaml`` two levels above the checkpoint, where ``verlog-train`` writes
it) gives the memory, the reply prefix, the rollout engine and the env keywords.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from action_scores import (action_distribution, action_replies, add_checkpoint_arguments,  # noqa: E402
                           checkpoint_and_recipe)
from verlog import builders  # noqa: E402
from verlog.checkpointing import trained_iterations  # noqa: E402
from verlog.engine_lifecycle import make_rollout_engine  # noqa: E402
from verlog.envs import make_env  # noqa: E402
from verlog.envs.babyai import BABYAI_ACTIONS  # noqa: E402
from verlog.evaluate import ModelPolicy  # noqa: E402
from verlog.memory import Memory, TurnOutcome  # noqa: E402
from verlog.models import load_actor, load_tokenizer  # noqa: E402
from verlog.rollout.records import EpisodeRecord  # noqa: E402
from verlog.rollout.runner import run_episodes  # noqa: E402
from verlog.suite import episode_specs, select_suite  # noqa: E402

ACTIONS = tuple(BABYAI_ACTIONS)
MAX_PERIOD = 8
REPEATS = 3
#: Loop kinds in the order they are printed; "other" is any other period in 2..MAX_PERIOD.
KINDS = ("no-op repeat", "period 2", "period 4", "other", "no loop")


@dataclass(frozen=True)
class Loop:
    """The loop an episode ends in (:func:`find_loop`).

    Attributes:
        period: p, in turns (1..max_period).
        start: index of the loop's first turn in the episode's turn log: the earliest s such that
            turns s..T-1 repeat with period p (so T - start >= repeats * p turns are spent in it).
        kind: ``"no-op repeat"`` (p = 1: the same action on an unchanged observation), ``"period 2"``,
            ``"period 4"`` or ``"other"``.
    """

    period: int
    start: int
    kind: str


def find_loop(turns: Sequence[Mapping[str, Any]], max_period: int = MAX_PERIOD, repeats: int = REPEATS) -> Loop | None:
    """The loop at the end of an episode, or ``None`` when it does not end in one.

    Args:
        turns: the episode's turn log, oldest first: T dicts with (at least) ``"observation"`` (the
            observation text the turn answered) and ``"action"`` (the action the env executed), as
            :class:`~verlog.rollout.records.EpisodeRecord` ``.turns`` holds them.
        max_period: the longest period looked for, in turns (>= 1).
        repeats: how many whole periods the end of the log must hold (>= 2).

    Returns:
        The shortest period p in 1..max_period such that the last ``repeats * p`` turns repeat with
        period p in (observation, action), i.e. ``key[i] == key[i - p]`` for every i in
        ``T - (repeats - 1) * p .. T - 1``, with the loop's first turn traced back as far as the
        period holds (:class:`Loop`); ``None`` when no p fits (or T < repeats).
    """
    keys = [(t["observation"], t["action"]) for t in turns]
    n = len(keys)
    for p in range(1, max_period + 1):
        if n < repeats * p:
            break
        if all(keys[i] == keys[i - p] for i in range(n - (repeats - 1) * p, n)):
            start = n - repeats * p
            while start > 0 and keys[start - 1] == keys[start - 1 + p]:
                start -= 1
            kind = {1: "no-op repeat", 2: "period 2", 4: "period 4"}.get(p, "other")
            return Loop(p, start, kind)
    return None


def replay_prompt(memory: Memory, instruction: str, turns: Sequence[Mapping[str, Any]], index: int) -> list[int]:
    """The prompt ids that ``memory`` (fresh or reused: the episode is restarted) builds for turn
    ``index`` of an episode with ``instruction`` (the env's reset ``info["instruction"]``), from its
    turn log: the first observation, then each earlier turn's reply and the observation it led to."""
    memory.start_episode(instruction, turns[0]["observation"], turns[0].get("context", ""))
    for before, after in zip(turns[:index], turns[1:index + 1]):
        outcome = TurnOutcome(before["action"], before["action_valid"], before["reward"])
        memory.add_turn(before["reply"], after["observation"], after.get("context", ""), outcome)
    return memory.prompt_ids()[0]


@dataclass(frozen=True)
class LoopState:
    """A loop's first state, scored: the policy's distribution over :data:`ACTIONS` there."""

    record: EpisodeRecord
    loop: Loop
    probs: list[float]

    @property
    def action(self) -> str:
        return self.record.turns[self.loop.start]["action"]

    @property
    def p_action(self) -> float:
        return self.probs[ACTIONS.index(self.action)]

    @property
    def runner_up(self) -> tuple[str, float]:
        """The most probable action other than the looping one, and its probability."""
        return max(((a, p) for a, p in zip(ACTIONS, self.probs) if a != self.action), key=lambda x: x[1])


def median(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_checkpoint_arguments(parser)
    parser.add_argument("--episodes", type=int, default=20, help="greedy episodes per task")
    parser.add_argument("--seed", type=int, default=100_000, help="seed of each task's first episode")
    parser.add_argument("--temperature", type=float, default=None,
                        help="temperature the loop states are scored at (default: the run's sampling temperature)")
    parser.add_argument("--examples", type=int, default=3, help="example loop states to print")
    args = parser.parse_args()
    model_dir, cfg = checkpoint_and_recipe(args)
    iteration = trained_iterations(model_dir)
    temperature = args.temperature if args.temperature is not None else (
        cfg.rollout.policy_temperature_at(iteration) if iteration else cfg.rollout.temperature or 1.0)

    tokenizer = load_tokenizer(model_dir)
    engine = make_rollout_engine(cfg, model_dir, tokenizer, rank=0)
    policy = ModelPolicy(engine, builders.decoder(tokenizer),
                         replace(builders.sampling_params(cfg.rollout, greedy=True), seed=args.seed))
    make_memory = builders.memory_factory(cfg.memory, tokenizer)
    style = cfg.env.instruction_style  # the keywords verlog-eval's suite mode gives the envs
    env_kwargs = {"format_penalty": cfg.env.format_penalty, **({"instruction_style": style} if style != "full" else {})}
    suite = select_suite(["babyai"], episodes_per_task=args.episodes)
    records = run_episodes(episode_specs(suite, args.seed), policy, num_envs=cfg.eval.num_envs,
                           make_memory=make_memory, env_kwargs=env_kwargs, record_turns=True)

    model = getattr(engine, "model", None) or load_actor(model_dir).eval()  # a vLLM engine has none
    memory = make_memory()
    replies = action_replies(tokenizer, memory.reply_prefix, ACTIONS)
    envs: dict[str, Any] = {}
    states: list[LoopState] = []
    kinds: dict[str, Counter] = {task: Counter() for task in suite["babyai"].tasks}
    for record in records:
        if record.success:
            continue
        loop = find_loop(record.turns)
        kinds[record.task][loop.kind if loop else "no loop"] += 1
        if loop is None:
            continue
        if record.task not in envs:
            envs[record.task] = make_env(record.task, **env_kwargs)
        first, info = envs[record.task].reset(seed=record.seed)
        if first != record.turns[0]["observation"]:
            raise RuntimeError(f"{record.task} seed {record.seed}: a reset gives another first observation")
        prompt = replay_prompt(memory, info["instruction"], record.turns, loop.start)
        probs = action_distribution(model, prompt, replies, tokenizer.pad_token_id, temperature).tolist()
        states.append(LoopState(record, loop, probs))
    for env in envs.values():
        env.close()

    print(f"{model_dir}: {args.episodes} greedy episodes per task from seed {args.seed}; loop states scored at "
          f"temperature {temperature:g}" + (f" (iteration {iteration})" if iteration else ""))
    print(f"  {'task':<26} {'episodes':>8} {'failures':>8} " + " ".join(f"{k:>12}" for k in KINDS)
          + f" {'p(loop act)':>11} {'p(runner-up)':>12}")
    for task, counts in kinds.items():
        done = [r for r in records if r.task == task]
        mine = [s for s in states if s.record.task == task]
        print(f"  {task:<26} {len(done):>8} {sum(not r.success for r in done):>8} "
              + " ".join(f"{counts[k]:>12}" for k in KINDS)
              + f" {median([s.p_action for s in mine]):>11} {median([s.runner_up[1] for s in mine]):>12}")
    top = sum(s.p_action == max(s.probs) for s in states)
    invalid = sum(not s.record.turns[s.loop.start]["action_valid"] for s in states)
    print(f"  the looping action is the most probable of the six at {top} of {len(states)} loop states; "
          f"{invalid} of them answer with an invalid reply (the env's fallback action runs)")
    firsts = [next(s for s in states if s.loop.kind == k) for k in KINDS if any(s.loop.kind == k for s in states)]
    for s in (firsts + [s for s in states if s not in firsts])[: args.examples]:  # one of each kind first
        turn = s.record.turns[s.loop.start]
        ranked = sorted(zip(ACTIONS, s.probs), key=lambda x: -x[1])[:3]
        kind = s.loop.kind if s.loop.kind != "other" else f"period {s.loop.period}"
        print(f"\n  {s.record.task} seed {s.record.seed}: {kind} from turn "
              f"{s.loop.start} of {s.record.length}, action {s.action!r}; "
              + ", ".join(f"{a}={p:.2f}" for a, p in ranked))
        for line in turn["observation"].splitlines():
            print(f"    | {line}")
    failures = sum(not r.success for r in records)
    print(f"\nresult: {len(states)} of {failures} greedy failures end in a loop; median p(looping action) "
          f"{median([s.p_action for s in states])}, median p(runner-up) {median([s.runner_up[1] for s in states])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
