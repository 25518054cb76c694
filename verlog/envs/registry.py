"""Name -> factory registry of text environments (``make_env("babyai/goto", max_steps=32)``).

Names are ``<family>/<task>``. Each family lives in its own module, which registers its tasks when it
is imported; the module is imported lazily, the first time a name of its family is asked for (or when
:func:`list_envs` is called), so that ``import verlog`` does not pay for NetHack's or TextWorld's imports.
:data:`FAMILIES` maps each family to its module.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

from verlog.catalog import did_you_mean
from verlog.envs.base import TextEnv

__all__ = ["FAMILIES", "accepts_argument", "register", "make_env", "list_envs", "is_registered", "registered_names"]

_FACTORIES: dict[str, Callable[..., TextEnv]] = {}

#: Environment family (the part of a name before ``/``) -> the module that registers its tasks.
FAMILIES: dict[str, str] = {
    "babyai": "verlog.envs.babyai",
    "crafter": "verlog.envs.crafter",
    "babaisai": "verlog.envs.babaisai",
    "minihack": "verlog.envs.minihack",
    "nle": "verlog.envs.nle",
    "textworld": "verlog.envs.textworld",
    "sokoban": "verlog.envs.sokoban",
}


def _load_family(family: str) -> None:
    """Import the module of ``family`` (registering its tasks); unknown families are ignored."""
    module = FAMILIES.get(family)
    if module is not None:
        importlib.import_module(module)


def register(name: str, factory: Callable[..., TextEnv], *, replace: bool = False) -> None:
    """Register ``factory`` (called with the keyword arguments of :func:`make_env`) under ``name``.

    Args:
        name: non-empty name without surrounding whitespace, conventionally ``"<game>/<task>"``.
        factory: callable returning a :class:`~verlog.envs.base.TextEnv`.
        replace: allow overwriting an existing registration.

    Raises:
        TypeError: ``name`` is not a str or ``factory`` is not callable.
        ValueError: empty/whitespace-padded name, or ``name`` already registered and not ``replace``.
    """
    if not isinstance(name, str):
        raise TypeError(f"env name must be a str, got {type(name).__name__}")
    if not name or name != name.strip():
        raise ValueError(f"env name must be non-empty without surrounding whitespace, got {name!r}")
    if not callable(factory):
        raise TypeError(f"factory for {name!r} must be callable, got {type(factory).__name__}")
    if name in _FACTORIES and not replace:
        raise ValueError(f"environment {name!r} is already registered (pass replace=True to overwrite)")
    _FACTORIES[name] = factory


def list_envs() -> list[str]:
    """Sorted names of all registered environments (imports every family's module first).

    Raises:
        ImportError: if a family's module or the game package it wraps cannot be imported.
    """
    for family in FAMILIES:
        _load_family(family)
    return sorted(_FACTORIES)


def registered_names() -> list[str]:
    """Sorted names registered in this process so far (imports nothing; see :func:`list_envs` for all)."""
    return sorted(_FACTORIES)


def is_registered(name: str) -> bool:
    """Whether ``name`` is a registered environment (imports only its own family's module)."""
    if not isinstance(name, str):
        return False
    if name not in _FACTORIES:
        _load_family(name.split("/", 1)[0])
    return name in _FACTORIES


def accepts_argument(name: str, argument: str) -> bool:
    """Whether the registered environment ``name``'s factory takes the keyword argument ``argument``.

    Raises:
        ValueError: unknown ``name``.
    """
    if not is_registered(name):
        raise ValueError(f"unknown environment {name!r}")
    try:
        parameters = inspect.signature(_FACTORIES[name]).parameters
    except (TypeError, ValueError):  # builtins without a signature: assume it does
        return True
    return argument in parameters or any(p.kind == p.VAR_KEYWORD for p in parameters.values())


def make_env(name: str, **kwargs: Any) -> TextEnv:
    """Build the registered environment ``name`` with keyword arguments ``kwargs``.

    Raises:
        ValueError: unknown ``name`` (the message lists the known names and suggests the closest).
        TypeError: arguments the factory does not accept (the message lists the accepted ones), or a
            factory that does not return a ``TextEnv``.
    """
    if not is_registered(name):
        raise ValueError(
            f"unknown environment {name!r}; names are <family>/<task> with family one of {sorted(FAMILIES)}; "
            f"registered so far: {sorted(_FACTORIES)}{did_you_mean(name, _FACTORIES)}"
        )
    factory = _FACTORIES[name]
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # builtins without a signature: let the call decide
        signature = None
    if signature is not None:
        try:
            signature.bind(**kwargs)
        except TypeError as err:
            accepted = [
                n for n, p in signature.parameters.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
            ]
            raise TypeError(f"bad arguments for environment {name!r}: {err}; accepted: {accepted}") from None
    env = factory(**kwargs)
    if not isinstance(env, TextEnv):
        raise TypeError(f"factory of {name!r} returned a {type(env).__name__}, not a TextEnv")
    return env
