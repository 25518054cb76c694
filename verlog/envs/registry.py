"""Name -> factory registry of text environments (``make_env("babyai/goto", max_steps=32)``).

Names are ``<family>/<task>``. Each family lives in its own module, which registers its tasks when it
is imported; the module is imported lazily, the first time a name of its family is asked for (or when
:func:`list_envs` is called), so that ``import verlog`` does not pay for NetHack's or TextWorld's imports.
:data:`FAMILIES` maps each family to its module.

Environments from outside Verlog come in two ways, with no change to Verlog's source:

* an **import path** ``package.module:Name`` as the name, where ``Name`` is a
  :class:`~verlog.envs.base.TextEnv` subclass or a factory returning one (called with the keyword
  arguments of :func:`make_env`); it is imported and registered under that name the first time it is
  asked for;
* a **plugin family**: an installed package that declares an entry point in the group
  :data:`ENTRY_POINT_GROUP` (``verlog.envs``) named after its family, e.g. in ``pyproject.toml``
  ``[project.entry-points."verlog.envs"] mygames = "mygames.verlog"``. Asking for ``mygames/<task>``
  loads it: the entry point names a module that registers its tasks with :func:`register` when
  imported, or a function (``mygames.verlog:register_all``) that does so when called;
* an **OpenEnv server** ``openenv:<url>`` (e.g. ``openenv:http://127.0.0.1:8000``): episodes are played
  over the network against whatever environment that server runs (:mod:`verlog.envs.openenv_client`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from typing import Any, Callable

from verlog.catalog import ENTRY_POINT_GROUP, OPENENV_PREFIX, did_you_mean, openenv_url
from verlog.envs.base import TextEnv
from verlog.imports import is_import_path

__all__ = ["FAMILIES", "EnvImportError", "accepts_argument", "plugin_families", "register", "make_env", "list_envs",
           "is_registered", "registered_names"]

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
    "reasoning_gym": "verlog.envs.reasoning_gym",
    "gem": "verlog.envs.gem",
    "textarena": "verlog.envs.textarena",
}


_LOADED_PLUGINS: set[str] = set()


class EnvImportError(ValueError):
    """An environment given by import path or plugin family could not be loaded (one line, naming it)."""


def plugin_families() -> dict[str, importlib.metadata.EntryPoint]:
    """The families installed packages declare in :data:`ENTRY_POINT_GROUP`: name -> entry point
    (Verlog's own family names are left out: a plugin cannot replace them)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name not in FAMILIES}


def _load_plugin(family: str, entry_point: importlib.metadata.EntryPoint) -> None:
    """Load a plugin family once: import its module, and call it when it names a function.

    Raises:
        EnvImportError: the entry point cannot be imported or its function raised.
    """
    if family in _LOADED_PLUGINS:
        return
    try:
        loaded = entry_point.load()
        if callable(loaded):
            loaded()
    except Exception as exc:  # the plugin's own code may raise anything
        raise EnvImportError(f"environment family {family!r} (entry point {entry_point.value!r}) failed to load: "
                             f"{type(exc).__name__}: {_first_line(exc)}") from None
    _LOADED_PLUGINS.add(family)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _load_family(family: str) -> None:
    """Import the module of ``family`` (registering its tasks): Verlog's own, else an installed plugin's;
    unknown families are ignored.

    Raises:
        EnvImportError: a plugin family that fails to load.
    """
    module = FAMILIES.get(family)
    if module is not None:
        importlib.import_module(module)
        return
    entry_point = plugin_families().get(family)
    if entry_point is not None:
        _load_plugin(family, entry_point)


def _register_import_path(name: str) -> None:
    """Import ``package.module:Name`` and register it under ``name``.

    Raises:
        EnvImportError: the module cannot be imported (its own errors included), it has no ``Name``,
            or ``Name`` is neither a :class:`TextEnv` subclass nor another callable.
    """
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise EnvImportError(f"cannot load {name!r}: no module named {exc.name!r}") from None
    except Exception as exc:  # the user's module may raise anything while it is imported
        raise EnvImportError(f"cannot load {name!r}: importing {module_name} raised {type(exc).__name__}: "
                             f"{_first_line(exc)}") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise EnvImportError(f"cannot load {name!r}: module {module_name} has no {attr!r}")
    if not callable(factory) or (isinstance(factory, type) and not issubclass(factory, TextEnv)):
        raise EnvImportError(f"cannot load {name!r}: expected a TextEnv subclass or a factory returning one, "
                             f"got {factory!r}")
    register(name, factory, replace=True)


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
    """Sorted names of all registered environments (imports every family's module first, installed
    plugin families included).

    Raises:
        ImportError: if a family's module or the game package it wraps cannot be imported.
        EnvImportError: a plugin family that fails to load.
    """
    for family in [*FAMILIES, *plugin_families()]:
        _load_family(family)
    return sorted(_FACTORIES)


def registered_names() -> list[str]:
    """Sorted names registered in this process so far (imports nothing; see :func:`list_envs` for all)."""
    return sorted(_FACTORIES)


def is_registered(name: str) -> bool:
    """Whether ``name`` is a registered environment (imports only its own family's module; an import
    path is imported and registered, and so is an OpenEnv server ``openenv:<url>``, without contacting it).

    Raises:
        EnvImportError: an import path or a plugin family that cannot be loaded, or an ``openenv:`` name
            whose URL is malformed.
    """
    if not isinstance(name, str):
        return False
    if name not in _FACTORIES:
        if is_import_path(name):
            _register_import_path(name)
        elif name.startswith(OPENENV_PREFIX):
            try:
                openenv_url(name)
            except ValueError as exc:
                raise EnvImportError(str(exc)) from None
            importlib.import_module("verlog.envs.openenv_client").register_server(name)
        else:
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
        ValueError: unknown ``name`` (the message lists the known names and suggests the closest);
            :class:`EnvImportError` for an import path or plugin family that cannot be loaded.
        TypeError: arguments the factory does not accept (the message lists the accepted ones), or a
            factory that does not return a ``TextEnv``.
    """
    if not is_registered(name):
        families = sorted({*FAMILIES, *plugin_families()})
        raise ValueError(
            f"unknown environment {name!r}; names are <family>/<task> with family one of {families}, an import "
            f"path package.module:Name, or an OpenEnv server openenv:<url>; registered so far: {sorted(_FACTORIES)}{did_you_mean(name, _FACTORIES)}"
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
