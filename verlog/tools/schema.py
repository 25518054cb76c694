"""JSON schemas from Python annotations, Google-style docstring parsing, argument validation.

Supported annotations and their schemas:

=======================  ====================================================================
``str`` / ``int``        ``{"type": "string"}`` / ``{"type": "integer"}``
``float`` / ``bool``     ``{"type": "number"}`` / ``{"type": "boolean"}``
``list[T]``              ``{"type": "array", "items": <T>}``
``dict[str, T]``         ``{"type": "object", "additionalProperties": <T>}``
``Literal[a, b]``        ``{"type": <type of the values>, "enum": [a, b]}`` (all str, all int
                         or all bool)
``Optional[X]``          the schema of X with ``"null"`` added to its type (and ``None`` to its
``X | None``             enum): ``{"type": ["string", "null"]}``
=======================  ====================================================================

These nest (``list[Optional[int]]``, ``Optional[list[Literal["a", "b"]]]``, ...). Anything else
(bare ``list``, ``tuple``, other unions, classes) is refused with a TypeError.
:func:`validate_arguments` checks a decoded JSON object against exactly this subset.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from typing import Any, Literal, Union

__all__ = ["annotation_schema", "parse_docstring", "validate_arguments", "ArgumentError"]

_PRIMITIVES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def annotation_schema(annotation: Any) -> dict[str, Any]:
    """The JSON schema of one supported annotation (see the module table).

    Raises:
        TypeError: the annotation (or a part of it) is not supported; the message names it.
    """
    if annotation in _PRIMITIVES:
        return {"type": _PRIMITIVES[annotation]}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is list:
        if len(args) != 1:
            raise TypeError(f"unsupported annotation {annotation!r}: use list[T]")
        return {"type": "array", "items": annotation_schema(args[0])}
    if origin is dict:
        if len(args) != 2 or args[0] is not str:
            raise TypeError(f"unsupported annotation {annotation!r}: use dict[str, T]")
        return {"type": "object", "additionalProperties": annotation_schema(args[1])}
    if origin is Literal:
        return _literal_schema(annotation, args)
    if origin is Union or origin is types.UnionType:
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1 or len(args) != 2:
            raise TypeError(f"unsupported annotation {annotation!r}: only Optional[X] unions")
        schema = annotation_schema(rest[0])
        kind = schema["type"]
        if isinstance(kind, list):  # Optional[Optional[X]] collapses to Optional[X] already
            return schema
        schema["type"] = [kind, "null"]
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
        return schema
    if annotation in (list, dict):
        raise TypeError(f"unsupported annotation {annotation!r}: give the item type, e.g. list[str]")
    raise TypeError(f"unsupported annotation {annotation!r}")


def _literal_schema(annotation: Any, values: tuple[Any, ...]) -> dict[str, Any]:
    for kind, name in ((bool, "boolean"), (str, "string"), (int, "integer")):
        if all(type(v) is kind for v in values):
            return {"type": name, "enum": list(values)}
    raise TypeError(
        f"unsupported annotation {annotation!r}: Literal values must be all str, all int or all bool"
    )


# A section header of a Google docstring ("Args:", "Returns:", "Raises:", ...), alone on its line.
_SECTION = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
_ARG_SECTIONS = {"args", "arguments", "parameters", "params"}
# "name: text" or "name (type): text" (the type in brackets is ignored).
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {argument: description}).

    The description is the first paragraph (up to the first blank line or section header), its
    lines joined by spaces. Argument descriptions come from the ``Args:`` section (also spelled
    ``Arguments:``, ``Parameters:``); an entry is ``name: text`` or ``name (type): text`` and
    continues on more-indented lines. Other sections are ignored. Never raises.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    first: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line.strip()):
            break
        first.append(line.strip())
    description = " ".join(first)

    args: dict[str, str] = {}
    in_args = False
    section_indent = 0
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        header = _SECTION.match(stripped)
        if header and (not in_args or indent <= section_indent):
            in_args = header.group(1).strip().lower() in _ARG_SECTIONS
            section_indent, entry_indent, current = indent, None, None
            continue
        if not in_args or not stripped:
            continue
        if indent <= section_indent:  # dedented text ends the section
            in_args, current = False, None
            continue
        if entry_indent is None:
            entry_indent = indent
        match = _ARG_LINE.match(stripped)
        if indent <= entry_indent and match:
            current = match.group(1)
            args[current] = match.group(2).strip()
        elif current is not None:
            args[current] = (args[current] + " " + stripped).strip()
    return description, args


class ArgumentError(ValueError):
    """An argument does not match its schema; the message names the argument."""


#: Python types of decoded JSON and their JSON names, bool before int (a bool is an int).
_JSON_TYPE_NAMES = ((type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                    (list, "array"), (dict, "object"))


def _json_type_name(value: Any) -> str:
    """The JSON type of a decoded value, for messages (Python's name for anything else)."""
    return next((name for typ, name in _JSON_TYPE_NAMES if isinstance(value, typ)), type(value).__name__)


_JSON_TYPES = frozenset({"null", "boolean", "integer", "number", "string", "array", "object"})


def _matches(kind: str, value: Any) -> bool:
    """Whether ``value`` is of JSON schema type ``kind`` (an integer is also a number)."""
    name = _json_type_name(value)
    return kind in _JSON_TYPES and (name == kind or (kind == "number" and name == "integer"))


def _check(schema: dict[str, Any], value: Any, where: str) -> Any:
    """``value`` checked against ``schema`` (ints given for numbers become floats)."""
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        matched = next((k for k in kinds if _matches(k, value)), None)
        if matched is None:
            expected = " or ".join(kinds)
            raise ArgumentError(f"argument '{where}' must be {expected}, got {_json_type_name(value)}")
    else:
        matched = _json_type_name(value)
    if "enum" in schema and not any(value == v and type(value) is type(v) for v in schema["enum"]):
        choices = ", ".join(repr(v) for v in schema["enum"])
        raise ArgumentError(f"argument '{where}' must be one of {choices}, got {value!r}")
    if matched == "number":
        return float(value)
    if matched == "array" and "items" in schema:
        return [_check(schema["items"], item, f"{where}[{i}]") for i, item in enumerate(value)]
    if matched == "object" and ("properties" in schema or "additionalProperties" in schema):
        return _check_object(schema, value, where)
    return value


def _check_object(schema: dict[str, Any], value: dict[str, Any], where: str) -> dict[str, Any]:
    props: dict[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    prefix = f"{where}." if where else ""
    for name in schema.get("required", []):
        if name not in value:
            raise ArgumentError(f"missing required argument '{prefix}{name}'")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise ArgumentError(f"argument names must be strings, got {key!r}")
        if key in props:
            out[key] = _check(props[key], item, prefix + key)
        elif extra is False:
            known = ", ".join(props) or "none"
            raise ArgumentError(f"unknown argument '{prefix}{key}' (expected: {known})")
        elif isinstance(extra, dict):
            out[key] = _check(extra, item, prefix + key)
        else:
            out[key] = item
    return out


def validate_arguments(schema: dict[str, Any], arguments: Any) -> dict[str, Any]:
    """Check decoded tool-call ``arguments`` against an object ``schema``; return a cleaned copy.

    Checks required arguments, unknown arguments (when ``additionalProperties`` is false), types
    (an int is accepted for a number and becomes a float; a bool is never an int or a number),
    enums, array items and nested objects. Keywords outside the subset this module writes are
    ignored.

    Raises:
        ArgumentError: the first problem found, in one line naming the argument (``xs[2]`` for an
            item of ``xs``).
    """
    if not isinstance(arguments, dict):
        raise ArgumentError(f"arguments must be a JSON object, got {_json_type_name(arguments)}")
    return _check_object(schema, arguments, "")
