"""JSON decoding with a bound on nesting, for text that strangers write (request bodies, model replies).

``json.loads`` recurses once per level: ten thousand ``[`` raise ``RecursionError``, which is not a
``ValueError``, and a value that decodes but nests a few hundred levels deep can still exhaust the
stack later (``copy.deepcopy``, ``json.dumps``, a chat template). :func:`loads_bounded` turns both into
a :class:`JSONDepthError` (a ``ValueError``) and checks the depth without recursing.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "JSONDepthError", "json_depth_exceeds", "loads_bounded"]

MAX_JSON_DEPTH = 64
"""Most nested arrays/objects accepted; ``[]`` and ``{}`` are depth 1, a scalar depth 0."""


class JSONDepthError(ValueError):
    """A JSON text nests arrays/objects deeper than allowed (message on one line)."""


def json_depth_exceeds(value: Any, max_depth: int) -> bool:
    """Whether ``value`` (decoded JSON: dicts, lists, scalars) nests deeper than ``max_depth``.

    Iterative (no recursion), linear in the number of containers; stops at the first container
    below ``max_depth``.
    """
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def loads_bounded(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)`` that refuses nesting deeper than ``max_depth``.

    Raises:
        JSONDepthError: deeper than ``max_depth`` (also when ``json.loads`` itself ran out of stack).
        ValueError: anything else ``json.loads`` rejects (``json.JSONDecodeError``, bytes that are not
            UTF-8, an integer longer than Python converts).
    """
    try:
        value = json.loads(text)
    except RecursionError:
        raise JSONDepthError(f"JSON nests deeper than {max_depth} levels") from None
    if json_depth_exceeds(value, max_depth):
        raise JSONDepthError(f"JSON nests deeper than {max_depth} levels")
    return value
