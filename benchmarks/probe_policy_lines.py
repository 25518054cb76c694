"""Which line of the observation does a trained policy read? Change one line, see how far the actions move.

    python benchmarks/probe_policy_lines.py <run>/checkpoints/iter_000200 [--recipe <run>/config.yaml]
        [--mission "go to the grey key"] [--threads 1]

Not a speed target: a reading test of a checkpoint's policy (its ``actor/`` model). The prompt is the
one the recipe's memory builds (instruction, then the observation), with BALROG-style observation lines
from a fixed list. For every ordered triple of distinct lines (a, b, c) it compares the policy's
distribution over the BabyAI actions (each action's reply scored whole, renormalised over the six)
between the two-line observations ``a / c`` and ``b / c`` (the *first* line changed) and between
``c / a`` and ``c / b`` (the *last* line changed), and prints the mean total-variation distance of
each: a policy that reads every line moves about as much either way. Then it prints the distribution
for single-line observations that differ only in the number of steps or the side (``1 step forward``
against ``2 steps forward``, ``2 steps left`` against ``2 steps right``).

The recipe (default: the ``config.yaml`` two levels above the checkpoint, where ``verlog-train`` writes
it) gives the memory and the reply prefix.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))
from action_scores import (action_distribution, action_replies, add_checkpoint_arguments,  # noqa: E402
                           checkpoint_and_recipe)
from verlog import builders  # noqa: E402
from verlog.models import load_actor, load_tokenizer  # noqa: E402

ACTIONS = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")
LINES = ("a wall 1 step forward", "a wall 6 steps forward", "a wall 2 steps left", "a red ball 3 steps right",
         "a grey key 1 step forward", "a grey key 2 steps left and 3 steps forward", "a wall 1 step right")
SINGLE = ("a grey key 1 step forward", "a grey key 2 steps forward", "a grey key 4 steps forward",
          "a wall 1 step forward", "a wall 6 steps forward", "a grey key 2 steps left", "a grey key 2 steps right")


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    """Total-variation distance 0.5 * sum |p - q| between two distributions of the same support."""
    return 0.5 * float((p - q).abs().sum())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_checkpoint_arguments(parser)
    parser.add_argument("--mission", default="go to the grey key")
    args = parser.parse_args()
    model_dir, cfg = checkpoint_and_recipe(args)
    tokenizer, model = load_tokenizer(model_dir), load_actor(model_dir).eval()
    memory = builders.memory_factory(cfg.memory, tokenizer)()
    instruction = (f"Your goal is to {args.mission}. Actions: {', '.join(ACTIONS)}. "
                   "Reply with ACTION: <action>.")
    replies = action_replies(tokenizer, memory.reply_prefix, ACTIONS)
    cache: dict[str, torch.Tensor] = {}

    def distribution(observation: str) -> torch.Tensor:
        """[6] the policy's probabilities of the actions' replies after ``observation``, renormalised."""
        if observation not in cache:
            memory.start_episode(instruction, observation)
            cache[observation] = action_distribution(model, memory.prompt_ids()[0], replies, tokenizer.pad_token_id)
        return cache[observation]

    first, last = [], []
    for a, b, c in itertools.permutations(LINES, 3):
        first.append(total_variation(distribution(f"{a}\n{c}"), distribution(f"{b}\n{c}")))
        last.append(total_variation(distribution(f"{c}\n{a}"), distribution(f"{c}\n{b}")))
    print(f"{model_dir}: mission {args.mission!r}")
    for observation in SINGLE:
        p = distribution(observation)
        print(f"  {observation!r:34} " + " ".join(f"{name}={v:.2f}" for name, v in zip(ACTIONS, p.tolist())))
    print(f"result: mean total variation when the first line changes {statistics.mean(first):.3f}, "
          f"when the last line changes {statistics.mean(last):.3f} ({len(first)} pairs each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
