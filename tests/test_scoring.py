"""Scoring rows: response-token logprobs and values sit at the right sequence positions."""

import pytest
import torch

from verlog.models import load_actor, load_critic
from verlog.scoring import (batched, critic_outputs, pack_pairs, pack_prompts, pack_rows, policy_outputs,
                            response_positions)
from verlog.tiny_model import build_tiny_model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    corpus = [f"turn {i} left right forward" for i in range(50)]
    path = build_tiny_model(tmp_path_factory.mktemp("tiny"), corpus, vocab_size=300, hidden_size=64, num_heads=1,
                            intermediate_size=64)
    actor = load_actor(path).eval()
    critic = load_critic(path, value_head_init_std=0.5).eval()
    return actor, critic


def _example():
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    responses = [[20, 21], [22, 23, 24], [25]]
    P, R = 4, 3
    prompt_ids = torch.zeros(3, P, dtype=torch.long)
    response_ids = torch.zeros(3, R, dtype=torch.long)
    mask = torch.zeros(3, R, dtype=torch.bool)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        prompt_ids[i, : len(p)] = torch.tensor(p)
        response_ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = True
    rows = pack_rows(prompt_ids, torch.tensor([len(p) for p in prompts]), response_ids, mask, pad_id=0)
    return prompts, responses, rows


def test_pack_rows_concatenates_and_right_pads():
    prompts, responses, rows = _example()
    for i, (p, r) in enumerate(zip(prompts, responses)):
        n = len(p) + len(r)
        assert rows.input_ids[i, :n].tolist() == p + r
        assert rows.attention_mask[i].tolist() == [1] * n + [0] * (rows.input_ids.shape[1] - n)
    assert response_positions(rows)[0].tolist() == [2, 3, 4]  # p - 1 + k


def test_pack_pairs_is_pack_rows_of_the_lists():
    prompts, responses, rows = _example()
    pairs = pack_pairs(prompts, responses, pad_id=0)
    for field in ("input_ids", "attention_mask", "prompt_lengths", "response_ids", "response_mask"):
        assert torch.equal(getattr(pairs, field), getattr(rows, field)), field
    with pytest.raises(ValueError, match="as many responses"):
        pack_pairs(prompts, responses[:2], pad_id=0)


def test_logprobs_and_values_match_unpadded_forward(models):
    actor, critic = models
    prompts, responses, rows = _example()
    with torch.no_grad():
        logprobs, entropy = policy_outputs(actor, rows, with_entropy=True)
        values = critic_outputs(critic, rows)
        for i, (p, r) in enumerate(zip(prompts, responses)):
            seq = torch.tensor([p + r])
            logits = actor(input_ids=seq).logits[0].log_softmax(-1)
            for k, tok in enumerate(r):
                assert logprobs[i, k] == pytest.approx(float(logits[len(p) - 1 + k, tok]), abs=1e-5)
            v = critic(input_ids=seq).logits[0, :, 0]
            for k in range(len(r)):  # V_k: value of the state before response token k
                assert values[i, k] == pytest.approx(float(v[len(p) - 1 + k]), abs=1e-5)
    assert entropy.shape == logprobs.shape and bool((entropy[rows.response_mask] > 0).all())


def test_bootstrap_prompt_value_is_the_last_prompt_token(models):
    _, critic = models
    prompts = [[5, 6, 7], [8, 9]]
    rows = pack_prompts(prompts, pad_id=0)
    with torch.no_grad():
        v = critic_outputs(critic, rows)[:, 0]
        for i, p in enumerate(prompts):
            assert v[i] == pytest.approx(float(critic(input_ids=torch.tensor([p])).logits[0, -1, 0]), abs=1e-5)


def test_batched_restores_row_order(models):
    actor, _ = models
    _, _, rows = _example()
    full = policy_outputs(actor, rows)[0].detach()
    assert torch.allclose(batched(lambda r: policy_outputs(actor, r)[0], rows, 1), full, atol=1e-5)
    assert torch.allclose(batched(lambda r: policy_outputs(actor, r)[0], rows, 2), full, atol=1e-5)


def _full_head_logprobs(model, rows):
    """Reference: logits at every position, then the response positions gathered."""
    from verlog.algos.logprobs import logprobs_from_logits
    from verlog.scoring import gather_response

    logits = model(input_ids=rows.input_ids, attention_mask=rows.attention_mask).logits
    return logprobs_from_logits(gather_response(logits, rows).float(), rows.response_ids)


def test_response_window_covers_every_gathered_position():
    from verlog.scoring import response_window

    _, _, rows = _example()
    lo, hi = response_window(rows)
    idx = response_positions(rows)
    assert lo == int(idx.min()) == 1 and hi == int(idx.max()) + 1  # shortest prompt has 2 tokens


def test_head_on_the_response_window_equals_the_full_head(models):
    actor, _ = models
    _, _, rows = _example()
    with torch.no_grad():
        expected = _full_head_logprobs(actor, rows)
        got = policy_outputs(actor, rows)[0]
    m = rows.response_mask
    assert torch.allclose(got[m], expected[m], atol=1e-6, rtol=0)


def test_head_window_gradients_equal_the_full_head(models):
    actor, _ = models
    _, _, rows = _example()
    m = rows.response_mask
    grads = []
    for fn in (_full_head_logprobs, lambda a, r: policy_outputs(a, r)[0]):
        actor.zero_grad(set_to_none=True)
        fn(actor, rows)[m].sum().backward()
        grads.append([p.grad.clone() for p in actor.parameters()])
    actor.zero_grad(set_to_none=True)
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-6)


def test_head_window_through_peft_and_on_smollm2(smollm2_dir):
    """SmolLM2 (Llama architecture) with a LoRA wrapper: same logprobs as the full head."""
    from verlog.lora import add_lora

    model = load_actor(smollm2_dir).eval()
    rows = pack_pairs([[1, 2, 3, 4, 5, 6], [7, 8, 9]], [[10, 11], [12, 13, 14, 15]], pad_id=2)
    with torch.no_grad():
        expected = _full_head_logprobs(model, rows)
        peft = add_lora(model, rank=2, alpha=4.0, dropout=0.0, target_modules=["q_proj"], base_path=smollm2_dir)
        got = policy_outputs(peft, rows)[0]
    m = rows.response_mask
    assert torch.allclose(got[m], expected[m], atol=1e-5, rtol=0)
