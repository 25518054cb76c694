"""Finding the agent function of ``agent.loop=proxy`` by its ``module:function`` name.

The function is any callable ``agent_fn(item, *, base_url, reward_url, temperature, max_tokens)``
that talks to the proxy with an OpenAI client (:mod:`verlog.agent.calculator_openai` is one).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

__all__ = ["load_agent_fn"]


def load_agent_fn(path: str) -> Callable[..., Any]:
    """The agent function named ``module:function``.

    Raises:
        ValueError: not of the form ``module:function``, or the module or function cannot be found.
    """
    module, _, name = path.partition(":")
    if not module or not name:
        raise ValueError(f"expected 'module:function', got {path!r}")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load {path!r}: {exc}") from None
    if not callable(fn):
        raise ValueError(f"{path!r} is not callable")
    return fn
