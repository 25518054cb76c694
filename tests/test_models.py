"""Tests of verlog.models: loaders, critic head, padding-safe forwards."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from transformers import AutoTokenizer

from helpers import model_weights
from verlog.models import (
    ModelLoadError,
    causal_lm_logits,
    critic_values,
    is_critic_dir,
    load_actor,
    load_critic,
    load_tokenizer,
    position_ids_from_mask,
)

torch.set_num_threads(1)


# ---------------------------------------------------------------------------- loaders


@pytest.mark.parametrize("loader", [load_tokenizer, load_actor, load_critic])
def test_load_missing_path_is_one_line_error(tmp_path, loader):
    with pytest.raises(ModelLoadError, match="no such directory") as info:
        loader(tmp_path / "does-not-exist")
    assert "\n" not in str(info.value)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ModelLoadError, match="not a directory"):
        loader(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="not a model directory"):
        loader(tmp_path / "empty")


def test_load_unknown_hub_id_offline_is_one_line_error(monkeypatch):
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="cannot load model 'verlog-no-such-org/no-such-model'") as info:
        load_actor("verlog-no-such-org/no-such-model")
    assert "\n" not in str(info.value)


def test_tokenizer_without_chat_template_is_rejected(tmp_path, tiny):
    copy = shutil.copytree(tiny, tmp_path / "nochat")
    (copy / "chat_template.jinja").unlink()
    with pytest.raises(ModelLoadError, match="no chat template"):
        load_tokenizer(copy)


def test_tokenizer_without_pad_falls_back_to_eos(tmp_path, tiny):
    copy = shutil.copytree(tiny, tmp_path / "nopad")
    cfg = json.loads((copy / "tokenizer_config.json").read_text())
    cfg["pad_token"] = None
    (copy / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert AutoTokenizer.from_pretrained(copy).pad_token is None  # the premise of the test
    tok = load_tokenizer(copy)
    assert tok.pad_token == tok.eos_token == "<|im_end|>"
    assert tok.padding_side == "left"


def test_actor_loads_all_weights(tiny):
    model = load_actor(tiny)
    saved = model_weights(tiny)
    params = dict(model.named_parameters())
    assert set(saved) <= set(params)
    assert all(torch.equal(params[k], saved[k]) for k in saved)
    bf16 = load_actor(tiny, dtype=torch.bfloat16)
    assert bf16.get_input_embeddings().weight.dtype == torch.bfloat16


# ---------------------------------------------------------------------------- critic


def _batch(lengths, vocab, seed=0):
    """Left-padded random batch: ([B, S] ids with pad id 3, [B, S] mask, list of unpadded rows)."""
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(4, vocab, (n,), generator=g) for n in lengths]
    width = max(lengths)
    ids = torch.full((len(rows), width), 3, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row):] = row
        mask[i, width - len(row):] = 1
    return ids, mask, rows


def test_fresh_critic_head_is_zero_and_backbone_is_the_actor(tiny):
    critic = load_critic(tiny)
    assert type(critic).__name__ == "Qwen2ForTokenClassification"
    assert torch.count_nonzero(critic.score.weight) == 0
    assert critic.score.bias is None or torch.count_nonzero(critic.score.bias) == 0
    ids, mask, _ = _batch([5, 9], critic.config.vocab_size)
    with torch.no_grad():
        values = critic_values(critic, ids, mask)
    assert values.shape == ids.shape and values.dtype == torch.float32
    assert torch.count_nonzero(values) == 0
    actor = load_actor(tiny)
    actor_backbone = dict(actor.model.named_parameters())
    for name, param in critic.model.named_parameters():
        assert torch.equal(param, actor_backbone[name]), name


def test_critic_random_head_std_and_no_dropout(tiny):
    torch.manual_seed(0)
    critic = load_critic(tiny, value_head_init_std=0.5)
    std = critic.score.weight.std().item()
    assert 0.35 < std < 0.65  # 128 draws of N(0, 0.5^2)
    critic.train()  # head dropout is forced to 0: two training-mode forwards agree
    ids, mask, _ = _batch([6, 4], critic.config.vocab_size)
    with torch.no_grad():
        v1, v2 = critic_values(critic, ids, mask), critic_values(critic, ids, mask)
    assert torch.equal(v1, v2)
    assert torch.count_nonzero(v1[mask.bool()]) == int(mask.sum())
    with pytest.raises(ValueError, match="value_head_init_std"):
        load_critic(tiny, value_head_init_std=-1.0)


def test_saved_critic_reload_keeps_trained_head(tmp_path, tiny):
    critic = load_critic(tiny)
    with torch.no_grad():
        critic.score.weight.normal_(0.0, 1.0, generator=torch.Generator().manual_seed(1))
        critic.score.bias.fill_(0.25)
    critic.save_pretrained(tmp_path / "critic")
    assert is_critic_dir(tmp_path / "critic") and not is_critic_dir(tiny)
    reloaded = load_critic(tmp_path / "critic", value_head_init_std=0.0)
    assert torch.equal(reloaded.score.weight, critic.score.weight)
    assert torch.equal(reloaded.score.bias, critic.score.bias)
    ids, mask, _ = _batch([7, 3], critic.config.vocab_size)
    with torch.no_grad():
        assert torch.allclose(critic_values(reloaded, ids, mask), critic_values(critic, ids, mask))
    with pytest.raises(ModelLoadError, match="saved critic"):
        load_actor(tmp_path / "critic")


# ---------------------------------------------------------------------------- padding


def test_position_ids_from_mask_hand_worked():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    expected = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 0, 0, 0]])
    assert torch.equal(position_ids_from_mask(mask), expected)


def test_left_padding_gives_the_same_outputs_as_each_row_alone(tiny):
    torch.manual_seed(0)
    actor = load_actor(tiny)
    critic = load_critic(tiny, value_head_init_std=1.0)
    ids, mask, rows = _batch([3, 11, 7, 11], actor.config.vocab_size, seed=2)
    with torch.no_grad():
        logits = causal_lm_logits(actor, ids, mask)
        values = critic_values(critic, ids, mask)
        assert logits.shape == (*ids.shape, actor.config.vocab_size)
        for i, row in enumerate(rows):
            n = len(row)
            alone_logits = actor(input_ids=row[None]).logits[0]
            alone_values = critic(input_ids=row[None]).logits[0, :, 0]
            torch.testing.assert_close(logits[i, -n:], alone_logits, atol=1e-5, rtol=0)
            torch.testing.assert_close(values[i, -n:], alone_values, atol=1e-5, rtol=0)
            assert torch.count_nonzero(logits[i, :-n]) == 0
            assert torch.count_nonzero(values[i, :-n]) == 0


def test_forwards_reject_bad_batches(tiny):
    critic = load_critic(tiny)
    ids = torch.ones((2, 4), dtype=torch.long)
    with pytest.raises(ValueError, match="must be \\[B, S\\]"):
        critic_values(critic, ids[0], torch.ones(4))
    with pytest.raises(ValueError, match="attention_mask shape"):
        critic_values(critic, ids, torch.ones((2, 3)))
    with pytest.raises(ValueError, match="only 0 and 1"):
        critic_values(critic, ids, torch.full((2, 4), 2))
