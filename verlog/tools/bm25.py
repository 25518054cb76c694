"""Retrieval over a local corpus with BM25 (the maintained ``bm25s`` library, the optional
``verlog[search]`` extra) and the ``search`` tool built on it.

BM25 (Robertson and Zaragoza, 2009, "The Probabilistic Relevance Framework: BM25 and Beyond") with
bm25s's defaults (Lucene's variant, k1 = 1.5, b = 0.75); texts are lower-cased, split into words of two
or more word characters, and English stopwords are dropped (``bm25s.tokenize``).
"""

from __future__ import annotations

import threading
from typing import Sequence

from verlog.tools.function import FunctionTool, function_tool

__all__ = ["BM25Index", "NO_RESULTS", "search_tool"]

#: what the ``search`` tool answers when no passage shares a word with the query
NO_RESULTS = "No passages found."


def _bm25s():
    """The ``bm25s`` module.

    Raises:
        ImportError: one line with the install command when it is missing.
    """
    try:
        import bm25s
    except ImportError:
        raise ImportError("the search tool needs the bm25s package, not installed: pip install 'verlog[search]'") \
            from None
    return bm25s


class BM25Index:
    """A BM25 index of ``texts``, searched with :meth:`search`; safe to share between threads.

    Args:
        texts: the passages, at least one.

    Raises:
        ValueError: ``texts`` is empty.
        ImportError: bm25s is not installed (one line with the install command).
    """

    def __init__(self, texts: Sequence[str]) -> None:
        if not texts:
            raise ValueError("BM25Index needs at least one text")
        bm25s = _bm25s()
        self.texts = list(texts)
        self._retriever = bm25s.BM25()
        self._retriever.index(bm25s.tokenize(self.texts, stopwords="en", show_progress=False), show_progress=False)
        self._lock = threading.Lock()

    def search(self, query: str, k: int) -> list[int]:
        """The indices of the (at most) ``k`` texts that score highest for ``query``, best first; texts
        that share no word with the query (score 0) are left out, so an empty list means no match.

        Raises:
            ValueError: ``k`` < 1.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        bm25s = _bm25s()
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)
        if not tokens[0]:
            return []
        with self._lock:
            docs, scores = self._retriever.retrieve(tokens, k=min(k, len(self.texts)), show_progress=False,
                                                    n_threads=1)
        return [int(d) for d, s in zip(docs[0], scores[0]) if s > 0]


def search_tool(index: BM25Index, k: int) -> FunctionTool:
    """The ``search`` tool: ``search(query)`` -> the ``k`` best passages of ``index`` for the query, one
    per line, best first, or :data:`NO_RESULTS`.

    Raises:
        ValueError: ``k`` < 1.
    """
    if k < 1:
        raise ValueError(f"search_tool: k must be >= 1, got {k}")

    def search(query: str) -> str:
        """Search the knowledge base; returns the passages that best match the query, one per line.

        Args:
            query: the words to look for, e.g. a name.
        """
        found = index.search(query, k)
        return "\n".join(index.texts[i] for i in found) if found else NO_RESULTS

    return function_tool(search)
