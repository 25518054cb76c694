"""Before RL: the tiny tokenizer's text corpus and the supervised *format* warm-up.

A randomly initialised model almost never writes a parseable reply, so the tiny recipe first
teaches the reply format only: ``ACTION: <a uniformly random valid action>``, drawn afresh for
every example, so the warm-up carries no information about which action is good. An instruct
model already knows such a format; with one, set ``format_warmup.steps=0``.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch
from tqdm import tqdm

from verlog.algos.logprobs import logprobs_from_logits
from verlog.catalog import REPLY_PREFIX
from verlog.envs import make_env
from verlog.logging import phase_label
from verlog.memory import completion_of
from verlog.rollout.runner import EpisodeSpec, run_episodes
from verlog.scoring import Rows, forward_rows, pack_pairs, policy_outputs
from verlog.vision import VisionInput


def format_reply(action: str) -> str:
    """The reply text that the format warm-up teaches for ``action``."""
    return f"{REPLY_PREFIX}{action}"


def env_corpus(task: str, *, episodes: int, seed: int, env_kwargs: dict[str, Any] | None = None,
               invalid_reply_rate: float = 0.1) -> list[str]:
    """Texts of random play: instructions, observations, replies — to train a tokenizer on.

    Some replies are deliberately invalid so the env's invalid-action notice is in the corpus too.
    """
    rng = random.Random(seed)
    env = make_env(task, **(env_kwargs or {}))
    texts: list[str] = ["Observation:\n", "Current observation:\n"]
    try:
        for ep in range(episodes):
            obs, info = env.reset(seed=seed + ep)
            texts += [info["instruction"], obs]
            texts += [format_reply(a) for a in info["valid_actions"]]
            done = False
            while not done:
                reply = "???" if rng.random() < invalid_reply_rate else format_reply(rng.choice(info["valid_actions"]))
                obs, _, terminated, truncated, info = env.step(reply)
                texts.append(obs)
                done = terminated or truncated
    finally:
        env.close()
    return texts


@dataclass
class WarmupExample:
    """One prompt and the replies the warm-up may teach there (one is drawn uniformly per use).

    ``replies`` are the texts the model is taught to write right after ``prompt_ids``. For a text
    env: a prompt of random play and ``format_reply(a)`` for every valid action ``a``; when the
    memory pre-fills a reply prefix (which the prompt then ends with), only the part of
    ``format_reply(a)`` after the prefix (:func:`~verlog.memory.completion_of`). ``images``: the
    prompt's images (a vision memory's, :class:`~verlog.vision.VisionInput`), or None.
    """

    prompt_ids: list[int]
    replies: list[str]
    images: Optional[VisionInput] = None


class _RandomPlay:
    """The warm-up's :class:`~verlog.rollout.runner.Policy`: a uniformly random valid action from one
    ``random.Random(seed)`` stream; every prompt it answers is kept as a :class:`WarmupExample`.

    Its replies to the env are whole replies (``format_reply(a)``), as the runner hands on a model's.

    Raises (from :meth:`act`):
        ValueError: ``format_reply(a)`` does not start with the memory's reply prefix.
    """

    needs_memory = True

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.examples: list[WarmupExample] = []

    def act(self, memories: Sequence[Any], infos: Sequence[dict[str, Any]], specs: Sequence[Any],
            turn: int) -> list[str]:
        replies = []
        for memory, info in zip(memories, infos):
            targets = [completion_of(memory.reply_prefix, format_reply(a)) for a in info["valid_actions"]]
            images = memory.prompt_images() if hasattr(memory, "prompt_images") else None
            self.examples.append(WarmupExample(memory.prompt_ids()[0], targets, images))
            replies.append(format_reply(self.rng.choice(info["valid_actions"])))
        return replies


def collect_prompts(task: str, make_memory: Callable[[], Any], *, episodes: int, seed: int,
                    env_kwargs: dict[str, Any] | None = None) -> list[WarmupExample]:
    """Prompts exactly as the memory renders them in training, from uniformly random play: ``episodes``
    episodes one after another (episode i reset with ``seed + i``), the actions drawn from one
    ``random.Random(seed)`` stream. With a reply prefix the prompts end with it, and each example's
    replies are the rest of the reply (see :class:`WarmupExample`).

    Raises:
        ValueError: the memory's reply prefix is not a start of ``format_reply(a)`` for a valid action.
    """
    play = _RandomPlay(seed)
    run_episodes([EpisodeSpec(task, seed + ep, ep) for ep in range(episodes)], play, num_envs=1,
                 make_memory=make_memory, env_kwargs=env_kwargs)
    return play.examples


def reply_and_prompt_nll(model: torch.nn.Module, rows: Rows) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean next-token negative log-likelihoods (nats/token) of the reply tokens and of the prompt tokens.

    One forward over every position of ``rows`` (prompt then reply, right-padded): position j predicts
    token j + 1; the prompt's tokens 1..P-1 are predicted from their prefix (its first token has none),
    the reply's from the whole prompt and the reply before them.

    Returns:
        ``(reply_nll, prompt_nll)``, scalar tensors that carry gradients.
    """
    dev = next(model.parameters()).device
    logits = forward_rows(model, rows, dev).logits
    ids = rows.input_ids.to(dev)
    logprobs = logprobs_from_logits(logits[:, :-1].float(), ids[:, 1:])  # [M, S-1]
    position = torch.arange(1, ids.shape[1], device=dev).unsqueeze(0)
    real = rows.attention_mask[:, 1:].to(dev).bool()
    in_reply = position >= rows.prompt_lengths.to(dev).unsqueeze(1)
    reply, prompt = real & in_reply, real & ~in_reply
    return (-(logprobs * reply).sum() / reply.sum().clamp(min=1),
            -(logprobs * prompt).sum() / prompt.sum().clamp(min=1))


def format_warmup(model: torch.nn.Module, encode: Callable[[str], list[int]], eos_id: int, pad_id: int,
                  examples: list[WarmupExample], *, steps: int, batch_size: int, lr: float,
                  seed: int, progress: bool = False, prompt_lm_weight: float = 0.0) -> list[float]:
    """Supervised steps on ``<a reply drawn uniformly from the example's replies><eos>`` targets (for a
    text env ``ACTION: <random valid action>``, or the part after the prompt's reply prefix); trains
    ``model`` in place: only its parameters that require grad (frozen lower layers, as
    ``model.trainable_layers`` leaves them, stay unchanged). ``progress``: a bar of the steps (on stderr),
    labelled with the run's phase.

    Random targets carry no information about the prompt, so the reply loss alone is minimised by a
    reply position that ignores the observation (measured on the tiny model: the spread of its action
    distribution over states falls twentyfold). ``prompt_lm_weight`` > 0 adds that weight times the
    next-token loss of the prompt's own tokens (:func:`reply_and_prompt_nll`), which the model can only
    lower by reading the text.

    Returns:
        The per-step mean negative log-likelihood of the target (reply) tokens (nats/token).
    Raises:
        ValueError: no examples, or a negative ``prompt_lm_weight``.
    """
    if prompt_lm_weight < 0:
        raise ValueError(f"format_warmup: prompt_lm_weight must be >= 0, got {prompt_lm_weight}")
    if not examples:
        raise ValueError("format_warmup: no prompts collected")
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    losses = []
    for _ in tqdm(range(steps), desc=phase_label("format_warmup"), disable=not progress, file=sys.stderr,
                  leave=False, dynamic_ncols=True, unit="step"):
        picked = [examples[rng.randrange(len(examples))] for _ in range(batch_size)]
        targets = [encode(rng.choice(ex.replies)) + [eos_id] for ex in picked]
        rows = pack_pairs([ex.prompt_ids for ex in picked], targets, pad_id)
        if any(ex.images is not None for ex in picked):
            rows.images = [ex.images for ex in picked]
        if prompt_lm_weight > 0:
            reply_nll, prompt_nll = reply_and_prompt_nll(model, rows)
            loss = reply_nll + prompt_lm_weight * prompt_nll
        else:
            logprobs, _ = policy_outputs(model, rows)
            reply_nll = loss = -(logprobs * rows.response_mask).sum() / rows.response_mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(reply_nll.item())
    model.eval()
    return losses
