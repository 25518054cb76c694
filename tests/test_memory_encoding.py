"""Tests for verlog.memory.encoding: the remembered ids of rendered prompts are the library's own."""

from __future__ import annotations

import gc
import weakref

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_memory import CORPUS, CountingTokenizer, chatml_tokenizer

from verlog.memory import WindowMemory
from verlog.memory import encoding
from verlog.memory.encoding import encode_cached


@pytest.fixture(scope="module")
def tok():
    return chatml_tokenizer()


TEXT = st.lists(st.sampled_from(list("abc ACTION:\n\ufffd.é") + ["red ball", "go forward"]), max_size=20).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(contents=st.lists(TEXT, min_size=1, max_size=4))
def test_ids_equal_apply_chat_template_tokenize_true(tok, contents):
    roles = ["system", "user", "assistant", "user"]
    messages = [{"role": roles[i % 4], "content": c} for i, c in enumerate(contents)]
    expected = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert encode_cached(tok, text) == list(expected)
    assert encode_cached(tok, text) == list(expected)  # and again, from the cache


def test_a_text_seen_before_skips_the_tokenizer(tok):
    counting = CountingTokenizer(tok)
    first = encode_cached(counting, "<|im_start|>user\nCurrent observation:\na wall<|im_end|>\n")
    again = encode_cached(counting, "<|im_start|>user\nCurrent observation:\na wall<|im_end|>\n")
    assert first == again and counting.calls == 1
    encode_cached(counting, "<|im_start|>user\nCurrent observation:\na ball<|im_end|>\n")
    assert counting.calls == 2


def test_memories_on_one_tokenizer_share_it(tok):
    counting = CountingTokenizer(tok)
    a, b = WindowMemory(counting), WindowMemory(counting)
    for mem in (a, b):
        mem.start_episode("Reach the goal.", "a wall 2 steps forward")
    calls = counting.calls
    assert a.prompt_ids() == b.prompt_ids()
    assert counting.calls == calls + 1  # b's prompt is a's: tokenized once


def test_each_tokenizer_has_its_own(tok):
    other = chatml_tokenizer(corpus=[c.upper() for c in CORPUS])
    text = "<|im_start|>user\nyou see a red ball<|im_end|>\n"
    assert tok(text, add_special_tokens=False)["input_ids"] != other(text, add_special_tokens=False)["input_ids"]
    assert encode_cached(tok, text) == tok(text, add_special_tokens=False)["input_ids"]
    assert encode_cached(other, text) == other(text, add_special_tokens=False)["input_ids"]


def test_returns_a_fresh_list(tok):
    ids = encode_cached(tok, "go forward")
    ids.clear()
    assert encode_cached(tok, "go forward") == tok("go forward", add_special_tokens=False)["input_ids"]


def test_least_recently_used_text_is_dropped(tok, monkeypatch):
    monkeypatch.setattr(encoding, "CACHE_SIZE", 2)
    counting = CountingTokenizer(tok)  # a new tokenizer object: its cache is made with the patched size
    for text in ("a", "b", "a", "c", "a", "b"):
        encode_cached(counting, text)
    assert counting.calls == 4  # a, b, c, then b again (dropped when c came)


def test_the_cache_does_not_keep_its_tokenizer_alive(tok):
    counting = CountingTokenizer(tok)
    encode_cached(counting, "go forward")
    ref = weakref.ref(counting)
    del counting
    gc.collect()
    assert ref() is None


def test_non_int_ids_raise(tok):
    class FloatTokenizer:
        def __call__(self, text, add_special_tokens):
            return {"input_ids": [1.0, 2.0]}

    with pytest.raises(TypeError, match="expected int ids"):
        encode_cached(FloatTokenizer(), "x")
