"""Exact match of a short answer after SQuAD-style normalisation.

The normalisation is the one of the official SQuAD v1.1 evaluation script (``normalize_answer`` in
Rajpurkar et al., 2016, "SQuAD: 100,000+ Questions for Machine Comprehension of Text"), used since
by most open-domain and multi-hop QA benchmarks (HotpotQA, Natural Questions' short answers): lower
case, drop ASCII punctuation, drop the articles *a*, *an*, *the* as whole words, and collapse
whitespace. Two answers match exactly when their normalised forms are equal.
"""

from __future__ import annotations

import re
import string

__all__ = ["exact_match", "normalize_answer"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """``text`` lower-cased, without ASCII punctuation (:data:`string.punctuation`), without the
    articles a/an/the as whole words, its words joined by single spaces, in the SQuAD v1.1 script's
    order (lower, punctuation, articles, whitespace): ``"  The  Quenlid-Works. "`` -> ``"quenlidworks"``."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str | None, gold: str) -> bool:
    """Whether ``prediction`` equals ``gold`` after :func:`normalize_answer` (None never matches; nor
    does a prediction that normalises to nothing)."""
    if prediction is None:
        return False
    normalized = normalize_answer(prediction)
    return bool(normalized) and normalized == normalize_answer(gold)
