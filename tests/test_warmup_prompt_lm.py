"""format_warmup.prompt_lm_weight: the next-token loss on the prompt beside the reply loss."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from helpers import COUNT_CORPUS, COUNT_TASK
from verlog.config import ConfigError, load_recipe
from verlog.memory import WindowMemory
from verlog.models import load_actor, load_tokenizer
from verlog.scoring import pack_pairs, policy_outputs
from verlog.tiny_model import build_tiny_model
from verlog.warmup import collect_prompts, format_warmup, reply_and_prompt_nll


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tiny_dir = build_tiny_model(tmp_path_factory.mktemp("tiny"), COUNT_CORPUS, vocab_size=300, hidden_size=64,
                                num_heads=1, intermediate_size=64)
    tokenizer = load_tokenizer(tiny_dir)
    make_memory = lambda: WindowMemory(tokenizer, history_turns=1)  # noqa: E731
    examples = collect_prompts(COUNT_TASK, make_memory, episodes=6, seed=0, env_kwargs={"max_steps": 3})
    return tiny_dir, tokenizer, examples


def _rows(tokenizer, examples, n=5):
    encode = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    picked = examples[:n]
    replies = [encode(ex.replies[i % len(ex.replies)]) + [tokenizer.eos_token_id] for i, ex in enumerate(picked)]
    return pack_pairs([ex.prompt_ids for ex in picked], replies, tokenizer.pad_token_id), picked, replies


def test_both_losses_match_a_row_by_row_reference(setup):
    tiny_dir, tokenizer, examples = setup
    model = load_actor(tiny_dir).eval()
    rows, picked, replies = _rows(tokenizer, examples)
    assert len({len(ex.prompt_ids) for ex in picked}) > 1  # padding is exercised
    with torch.no_grad():
        reply_nll, prompt_nll = reply_and_prompt_nll(model, rows)
        logprobs, _ = policy_outputs(model, rows)
        reply_sum = prompt_sum = 0.0
        reply_n = prompt_n = 0
        for ex, reply in zip(picked, replies):  # each row alone, unpadded
            ids = torch.tensor([ex.prompt_ids + reply])
            lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), -1)
            per_token = lp.gather(1, ids[0, 1:, None]).squeeze(1)
            P = len(ex.prompt_ids)
            prompt_sum -= float(per_token[: P - 1].sum())
            reply_sum -= float(per_token[P - 1:].sum())
            prompt_n += P - 1
            reply_n += len(reply)
    assert float(reply_nll) == pytest.approx(reply_sum / reply_n, rel=1e-4)
    assert float(prompt_nll) == pytest.approx(prompt_sum / prompt_n, rel=1e-4)
    # the reply part is the loss the warm-up uses without the prompt term
    assert float(reply_nll) == pytest.approx(float(-(logprobs * rows.response_mask).sum() / rows.response_mask.sum()),
                                             rel=1e-4)


def test_the_prompt_term_lowers_the_prompt_loss_and_zero_leaves_it_alone(setup):
    tiny_dir, tokenizer, examples = setup
    encode = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    rows, _, _ = _rows(tokenizer, examples, n=len(examples))
    base = load_actor(tiny_dir)
    with torch.no_grad():
        before = float(reply_and_prompt_nll(base.eval(), rows)[1])
    after = {}
    for weight in (0.0, 1.0):
        model = copy.deepcopy(base)
        losses = format_warmup(model, encode, tokenizer.eos_token_id, tokenizer.pad_token_id, examples, steps=30,
                               batch_size=8, lr=3e-3, seed=0, prompt_lm_weight=weight)
        assert len(losses) == 30 and all(math.isfinite(x) for x in losses)
        with torch.no_grad():
            after[weight] = float(reply_and_prompt_nll(model.eval(), rows)[1])
    assert after[1.0] < 0.5 * before  # the prompt's text is learned
    assert after[1.0] < 0.5 * after[0.0]  # and not by the reply loss alone


def test_a_negative_weight_is_refused(setup):
    tiny_dir, tokenizer, examples = setup
    with pytest.raises(ValueError, match="prompt_lm_weight"):
        format_warmup(load_actor(tiny_dir), lambda s: [1], 0, 0, examples, steps=1, batch_size=2, lr=1e-3, seed=0,
                      prompt_lm_weight=-1.0)
    with pytest.raises(ConfigError, match="^format_warmup.prompt_lm_weight: "):
        load_recipe("tiny", ["format_warmup.prompt_lm_weight=-0.5"])
