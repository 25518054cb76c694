"""A calculator task for the tool agent: seeded arithmetic questions, the ``calculate`` tool, and
reward 1 for a final ``ANSWER: <number>`` equal to the true value (else 0)."""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any

from verlog.tools.examples import calculate, evaluate_arithmetic

__all__ = ["CalculatorQuestion", "SYSTEM_PROMPT", "make_questions", "parse_answer", "calculator_reward",
           "calculator_tools"]

SYSTEM_PROMPT = (
    "Solve the arithmetic problem. You may call the calculate tool. "
    "End with a final line 'ANSWER: <number>'."
)
_ANSWER = re.compile(r"ANSWER:\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")


@dataclass(frozen=True)
class CalculatorQuestion:
    """One question: its expression, the true value and the opening chat messages."""

    expression: str
    value: float

    def messages(self) -> list[dict[str, Any]]:
        """[system, user] messages that open the conversation."""
        return [{"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": f"What is {self.expression}?"}]


def make_questions(n: int, seed: int) -> list[CalculatorQuestion]:
    """``n`` questions ``a op b op c`` with integers 2..99 and ops ``+ - *``, a pure function of seed.

    Raises:
        ValueError: ``n`` < 0.
    """
    if n < 0:
        raise ValueError(f"make_questions: n must be >= 0, got {n}")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b, c = (rng.randint(2, 99) for _ in range(3))
        op1, op2 = rng.choice("+-*"), rng.choice("+-*")
        expression = f"{a} {op1} {b} {op2} {c}"
        out.append(CalculatorQuestion(expression, float(evaluate_arithmetic(expression))))
    return out


def parse_answer(text: str | None) -> float | None:
    """The number of the last ``ANSWER: <number>`` in ``text``, or None."""
    if not text:
        return None
    found = _ANSWER.findall(text)
    return float(found[-1]) if found else None


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
