"""Token ids of prompt text, remembered per tokenizer.

Text memories render each prompt with the tokenizer's chat template and then tokenize it. In a
gridworld without history the same prompt comes back again and again (BabyAI's easy go-to task: 117
distinct prompts in 2,560 turns of the ``tiny`` recipe), and the tokenizer is most of a prompt's cost
on a small model (about 100 of 170 µs). :func:`encode_cached` remembers the ids of the last
:data:`CACHE_SIZE` texts per tokenizer object, so a prompt seen before costs the template's rendering
and a dictionary lookup. The text memories tokenize every text through it (rendered prompts, the
reply prefix, an observation being shortened to fit the budget).

For a rendered prompt the ids are exactly what ``apply_chat_template(..., tokenize=True)`` returns:
that call renders the text and then tokenizes it with ``add_special_tokens=False``, which is what a
miss does here. The cache assumes the tokenizer is not changed after its first use (Verlog never adds
tokens to a loaded tokenizer); it is kept per tokenizer object and dropped with it.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable, Mapping

CACHE_SIZE = 4096
"""Texts remembered per tokenizer (least recently used dropped first); ~100 ids each on BabyAI."""

_ENCODERS: weakref.WeakKeyDictionary[Any, Callable[[str], tuple[int, ...]]] = weakref.WeakKeyDictionary()


def encode_cached(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` (typically a rendered chat template), tokenized without added special tokens.

    Args:
        tokenizer: a Hugging Face tokenizer (called as ``tokenizer(text, add_special_tokens=False)``).
        text: the text, e.g. the template's output (``apply_chat_template(..., tokenize=False)``).

    Returns:
        A fresh list of int ids (the caller may change it).

    Raises:
        TypeError: the tokenizer returned something other than int ids.
    """
    encoder = _ENCODERS.get(tokenizer)
    if encoder is None:
        ref = weakref.ref(tokenizer)  # the cache must not keep its own key alive
        encoder = _ENCODERS[tokenizer] = functools.lru_cache(maxsize=CACHE_SIZE)(lambda t: _encode(ref(), t))
    return list(encoder(text))


def _encode(tokenizer: Any, text: str) -> tuple[int, ...]:
    out = tokenizer(text, add_special_tokens=False)
    ids = out["input_ids"] if isinstance(out, Mapping) else out  # BatchEncoding is a Mapping
    ids = tuple(ids)
    if ids and not isinstance(ids[0], int):
        raise TypeError(f"the tokenizer returned {type(ids[0]).__name__} items, expected int ids")
    return ids
