"""A policy's distribution over a fixed list of actions at one prompt: each action's whole reply scored,
renormalised over the actions. Shared by the reading probes (``probe_policy_lines.py``,
``probe_greedy_loops.py``).

The reply of an action is what the format warm-up teaches (:func:`verlog.warmup.format_reply`, e.g.
``"ACTION: turn left"``) minus the memory's reply prefix (the prompt already ends with it), then the
end-of-sequence token. Its score is the sum of its tokens' logprobs under the model; the distribution
is the softmax of the scores over the actions, i.e. P(reply a) / sum over b of P(reply b).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from verlog.config import TrainConfig, load_recipe  # noqa: E402
from verlog.memory.base import completion_of  # noqa: E402
from verlog.scoring import pack_pairs, policy_outputs  # noqa: E402
from verlog.warmup import format_reply  # noqa: E402


def action_replies(tokenizer: Any, reply_prefix: str | None, actions: Sequence[str]) -> list[list[int]]:
    """Per action, the ids of its reply after ``reply_prefix`` (``None``: no prefix), ending with EOS."""
    return [tokenizer.encode(completion_of(reply_prefix, format_reply(a)), add_special_tokens=False)
            + [tokenizer.eos_token_id] for a in actions]


def action_distribution(model: Any, prompt: Sequence[int], replies: Sequence[Sequence[int]], pad_id: int,
                        temperature: float = 1.0) -> torch.Tensor:
    """[A] float32 on the CPU: the probability of each of the A ``replies`` (from :func:`action_replies`)
    after ``prompt`` (token ids), renormalised over the A replies; sums to 1.

    ``temperature`` divides the logits of every token (as sampling at that temperature does) before
    the reply's logprobs are summed.
    """
    rows = pack_pairs([list(prompt)] * len(replies), replies, pad_id)
    with torch.no_grad():
        logprobs, _ = policy_outputs(model, rows, temperature=temperature)
    return torch.softmax((logprobs.cpu() * rows.response_mask).sum(-1), 0)


def add_checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """The probes' common arguments: the checkpoint (``model``), ``--recipe`` and ``--threads``."""
    parser.add_argument("model", help="a checkpoint directory (its actor/ is loaded) or a model directory")
    parser.add_argument("--recipe", default=None, help="recipe name or YAML (default: the run's config.yaml)")
    parser.add_argument("--threads", type=int, default=1)


def checkpoint_and_recipe(args: argparse.Namespace) -> tuple[Path, TrainConfig]:
    """Set torch's threads to ``args.threads``; return the model directory (a checkpoint's ``actor/``,
    or ``args.model`` itself) and the recipe (``args.recipe``, default the ``config.yaml`` two levels
    above the checkpoint, where ``verlog-train`` writes it).

    Raises:
        verlog.config.ConfigError: the recipe is missing or invalid.
    """
    torch.set_num_threads(args.threads)
    model_dir = Path(args.model) / "actor" if (Path(args.model) / "actor").is_dir() else Path(args.model)
    recipe = args.recipe or str(Path(args.model).resolve().parents[1] / "config.yaml")
    return model_dir, load_recipe(recipe)
