"""A calculator task for the tool agent: seeded arithmetic questions, the ``calculate`` tool, and
reward 1 for a final ``ANSWER: <number>`` equal to the true value (else 0).

For the tiny model it also gives the tokenizer's corpus and the *format* warm-up's scripts: a
warmed-up model calls ``calculate`` on a prefix of the question's expression drawn uniformly (its
first operand, its first two operands, or the whole expression) and answers with the tool's result, so the
warm-up teaches the call and answer formats while leaving which expression to compute to RL (about
1 in 3 right before RL; an instruct model knows the formats already).
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any

from verlog.agent.formats import answer_text, corpus_text, final_answer, tool_call_text
from verlog.tools.examples import calculate, evaluate_arithmetic

__all__ = ["CalculatorQuestion", "SYSTEM_PROMPT", "make_questions", "parse_answer", "calculator_reward",
           "calculator_tools", "tool_call_text", "answer_text", "warmup_scripts", "calculator_corpus"]

SYSTEM_PROMPT = (
    "Solve the arithmetic problem. You may call the calculate tool. "
    "End with a final line 'ANSWER: <number>'."
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@dataclass(frozen=True)
class CalculatorQuestion:
    """One question: its expression, the true value and the opening chat messages."""

    expression: str
    value: float

    def messages(self) -> list[dict[str, Any]]:
        """[system, user] messages that open the conversation."""
        return [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": f"What is {self.expression}?"}]


def make_questions(n: int, seed: int, max_operand: int = 99) -> list[CalculatorQuestion]:
    """``n`` questions ``a op b op c`` with integers 2..max_operand and ops ``+ - *``, a pure
    function of (n, seed, max_operand).

    Raises:
        ValueError: ``n`` < 0 or ``max_operand`` < 2.
    """
    if n < 0:
        raise ValueError(f"make_questions: n must be >= 0, got {n}")
    if max_operand < 2:
        raise ValueError(f"make_questions: max_operand must be >= 2, got {max_operand}")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b, c = (rng.randint(2, max_operand) for _ in range(3))
        op1, op2 = rng.choice("+-*"), rng.choice("+-*")
        expression = f"{a} {op1} {b} {op2} {c}"
        out.append(CalculatorQuestion(expression, float(evaluate_arithmetic(expression))))
    return out


def parse_answer(text: str | None) -> float | None:
    """The number the last ``ANSWER:`` line of ``text`` starts with (read by
    :func:`~verlog.agent.formats.final_answer`), or None."""
    found = _NUMBER.match(final_answer(text) or "")
    return float(found.group()) if found else None


def calculator_reward(question: CalculatorQuestion):
    """The reward function of ``question`` for :class:`~verlog.agent.loop.ToolAgentLoop`:
    ``(answer, trajectory) -> 1.0`` when the answer's number equals the value (relative tolerance
    1e-9), else 0.0."""

    def reward(answer: str | None, trajectory: Any = None) -> float:
        value = parse_answer(answer)
        if value is None:
            return 0.0
        return 1.0 if math.isclose(value, question.value, rel_tol=1e-9, abs_tol=1e-9) else 0.0

    return reward


def calculator_tools() -> list:
    """The task's tools: ``[calculate]``."""
    return [calculate]


def _prefixes(question: CalculatorQuestion) -> list[str]:
    """The expression's prefixes that end on an operand (``a op b op c`` -> ``a``, ``a op b``, the
    whole): each starts where the question's expression starts, so a warmed-up model copies from one
    fixed offset and only the point where it stops copying is left to learn."""
    parts = question.expression.split(" ")
    return [" ".join(parts[: k + 1]) for k in range(0, len(parts), 2)]


def warmup_scripts(question: CalculatorQuestion) -> list[list[str]]:
    """The format warm-up's reply scripts for ``question``: for each prefix ``e`` of its expression
    that ends on an operand, ``[call calculate(e), ANSWER: <value of e>]``."""
    return [[tool_call_text("calculate", {"expression": e}), answer_text(calculate(e))] for e in _prefixes(question)]


def calculator_corpus(n: int, seed: int, max_operand: int = 99) -> list[str]:
    """Texts for the tiny tokenizer: ``n`` questions' warm-up conversations, one per script, rendered
    by :func:`~verlog.agent.formats.corpus_text` with the ``calculate`` tool."""
    texts = []
    for q in make_questions(n, seed, max_operand):
        for e in _prefixes(q):
            result = calculate(e)
            turns = [{"role": "assistant", "content": tool_call_text("calculate", {"expression": e})},
                     {"role": "tool", "content": result},
                     {"role": "assistant", "content": answer_text(result)}]
            texts.append(corpus_text(q.messages(), calculator_tools(), turns))
    return texts
