"""The texts a tool task's format warm-up and tiny tokenizer are made of, shared by the built-in tasks
(:mod:`verlog.agent.calculator`, :mod:`verlog.agent.search`) and class tasks
(:mod:`verlog.agent.class_task`): Hermes tool calls (:func:`tool_call_text`, defined beside the parser
that reads them in :mod:`verlog.chat.parsing`), the final ``ANSWER: <answer>`` line (written and
read here, once for every task), argument values drawn from a tool's schema, and whole conversations
rendered by the tiny model's chat template."""

from __future__ import annotations

import random
import re
from typing import Any

from verlog.chat.parsing import tool_call_text
from verlog.tools.base import BaseTool

__all__ = ["ANSWER_PREFIX", "answer_text", "corpus_text", "draw_arguments", "final_answer", "prompt_vocabulary",
           "tool_call_text"]

#: what the final line of a built-in task's answer starts with
ANSWER_PREFIX = "ANSWER:"
_FINAL_ANSWER = re.compile(re.escape(ANSWER_PREFIX) + r"[ \t]*([^\n]*)")


def answer_text(value: float | int | str) -> str:
    """The final reply ``ANSWER: <value>`` (a whole float written as an int: 12.0 -> ``ANSWER: 12``)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{ANSWER_PREFIX} {value}"


def final_answer(text: str | None) -> str | None:
    """The text after the last ``ANSWER:`` of ``text``, up to the end of its line, stripped; None when
    ``text`` is empty or has no ``ANSWER:`` (``"x\nANSWER: 5 apples\n"`` -> ``"5 apples"``)."""
    if not text:
        return None
    found = _FINAL_ANSWER.findall(text)
    return found[-1].strip() if found else None


def corpus_text(messages: list[dict[str, Any]], tools: list[BaseTool], turns: list[dict[str, Any]]) -> str:
    """One tokenizer-corpus text: ``messages`` then ``turns`` (assistant and tool messages) then a tool
    error for an unknown tool, rendered by the tiny model's chat template with the tools' schemas (so
    the template's tool block, calls, responses, answers and error texts all reach the tokenizer)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    from verlog.tiny_model import CHATML_TEMPLATE

    known = ", ".join(t.name for t in tools)
    error = {"role": "tool", "content": f"Error: unknown tool 'x' (available: {known})"}
    rendered, _ = render_jinja_template([list(messages) + list(turns) + [error]],
                                        tools=[t.openai_schema() for t in tools], chat_template=CHATML_TEMPLATE)
    return rendered[0]


def prompt_vocabulary(messages: list[dict[str, Any]]) -> tuple[list[str], list[int]]:
    """The words (letters only) and integers that ``messages``' contents contain, each once, in order."""
    text = " ".join(str(m.get("content", "")) for m in messages)
    words = list(dict.fromkeys(re.findall(r"[A-Za-z]+", text)))
    numbers = list(dict.fromkeys(int(x) for x in re.findall(r"-?\d+", text)))
    return words, numbers


def draw_arguments(parameters: dict[str, Any], rng: random.Random, words: list[str] | None = None,
                   numbers: list[int] | None = None) -> dict[str, Any]:
    """Values for the required arguments of an object schema (as :mod:`verlog.tools.schema` writes
    them), drawn with ``rng``: strings from ``words``, integers and numbers from ``numbers`` (0..9
    when empty), an enum's values, one-item arrays and one-key objects; a nullable type is drawn as
    its other type. Optional arguments are left out."""
    words = words or ["x"]
    numbers = numbers or list(range(10))
    props = parameters.get("properties", {})
    return {name: _draw(props[name], rng, words, numbers) for name in parameters.get("required", [])}


def _draw(schema: dict[str, Any], rng: random.Random, words: list[str], numbers: list[int]) -> Any:
    """One value of ``schema`` (see :func:`draw_arguments`)."""
    if "enum" in schema:
        return rng.choice([v for v in schema["enum"] if v is not None])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "string":
        return rng.choice(words)
    if kind == "integer":
        return rng.choice(numbers)
    if kind == "number":
        return float(rng.choice(numbers))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [_draw(schema.get("items", {}), rng, words, numbers)]
    if kind == "object":
        extra = schema.get("additionalProperties")
        return {rng.choice(words): _draw(extra, rng, words, numbers)} if isinstance(extra, dict) else {}
    return None
