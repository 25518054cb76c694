"""Names of user code a config may give (``package.module:Name``): their form, and whether the module
exists, found without importing it (its code does not run)."""

from __future__ import annotations

import importlib.util

__all__ = ["is_import_path", "module_exists"]


def module_exists(name: str) -> bool:
    """Whether ``import <name>`` would find a module: :func:`importlib.util.find_spec`, which imports
    only the parent packages of a dotted name. A missing parent package or a malformed name is
    ``False``, never an exception."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that is missing, or a malformed name
        return False


def is_import_path(name: str) -> bool:
    """Whether ``name`` has the form ``package.module:Name`` (dotted identifiers, a colon, an identifier)."""
    module, sep, attr = str(name).partition(":")
    return bool(sep) and bool(module) and attr.isidentifier() and all(p.isidentifier() for p in module.split("."))
