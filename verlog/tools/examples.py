"""Example tools. ``calculate`` evaluates arithmetic safely (never with ``eval``)."""

from __future__ import annotations

import ast
import math
import operator
from typing import Callable, Union

from verlog.tools.function import function_tool

__all__ = ["calculate", "evaluate_arithmetic", "MAX_EXPRESSION_CHARS", "MAX_EXPONENT", "MAX_INT_BITS"]

MAX_EXPRESSION_CHARS = 500
MAX_EXPONENT = 1000  # |exponent| of any ``**``
MAX_INT_BITS = 4096  # integer results (intermediate ones too) stay below 2**4096
_MAX_DEPTH = 50  # nesting of operations, so deep parentheses cannot exhaust the stack

Number = Union[int, float]

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_SYMBOL = {ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
           ast.MatMult: "@", ast.Invert: "~", ast.Not: "not"}


def evaluate_arithmetic(expression: str) -> Number:
    """The value of an arithmetic expression of numbers, ``+ - * / // % **``, unary ``-``/``+`` and
    parentheses.

    Raises:
        ValueError: anything else (names, calls, attributes, strings, comparisons, ...), an
            expression longer than MAX_EXPRESSION_CHARS or nested deeper than 50, an exponent above
            MAX_EXPONENT in magnitude, an integer above MAX_INT_BITS bits, division by zero, a
            float overflow or a complex result; the message says which.
    """
    if not isinstance(expression, str):
        raise ValueError(f"expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(
            f"expression too long ({len(expression)} characters, at most {MAX_EXPRESSION_CHARS})"
        )
    if not expression.strip():
        raise ValueError("empty expression")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"invalid syntax: {exc.msg}") from None
    return _evaluate(tree.body, 0)


def _evaluate(node: ast.AST, depth: int) -> Number:
    if depth > _MAX_DEPTH:
        raise ValueError(f"expression nested too deeply (at most {_MAX_DEPTH} levels)")
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"only numbers are allowed, got {value!r}")
        return _checked(value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _checked(_UNARY[type(node.op)](_evaluate(node.operand, depth + 1)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left = _evaluate(node.left, depth + 1)
        right = _evaluate(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        try:
            return _checked(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
        except OverflowError:
            raise ValueError("result too large") from None
    raise ValueError(f"{_describe(node)} is not allowed; only numbers, + - * / // % ** and parentheses")


def _check_power(base: Number, exponent: Number) -> None:
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"exponent {exponent} too large (at most {MAX_EXPONENT} in magnitude)")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        if max(base.bit_length() - 1, 0) * exponent > MAX_INT_BITS:
            raise ValueError(f"result too large (integers up to {MAX_INT_BITS} bits)")


def _checked(value: Number) -> Number:
    if isinstance(value, complex):
        raise ValueError("result is not a real number")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ValueError(f"result too large (integers up to {MAX_INT_BITS} bits)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("result too large")
    return value


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return f"name {node.id!r}"
    if isinstance(node, ast.Attribute):
        return f"attribute access '.{node.attr}'"
    if isinstance(node, ast.Call):
        return "a function call"
    if isinstance(node, (ast.BinOp, ast.UnaryOp)) and type(node.op) in _SYMBOL:
        return f"operator {_SYMBOL[type(node.op)]!r}"
    return type(node).__name__


def _format(value: Number) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


@function_tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression: numbers, + - * / // % ** (exponent at most 1000),
    unary minus and parentheses; no names or functions.

    The first paragraph is the description the model sees. A whole float is written without
    ".0", so "8/2" gives "4".

    Args:
        expression: the expression, e.g. "(3 + 4) * 2 ** 3".

    Raises:
        ValueError: see :func:`evaluate_arithmetic`.
    """
    return _format(evaluate_arithmetic(expression))
