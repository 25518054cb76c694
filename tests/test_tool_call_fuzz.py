"""``parse_reply`` (Hermes tool calls and reasoning) on hostile replies: >= 10,000 random replies never
raise and agree with the plain regex reading of the format; deep nesting is a malformed call; unclosed
tags cost linear time."""

from __future__ import annotations

import json
import re
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verlog.chat.bounded_json import MAX_JSON_DEPTH, JSONDepthError, json_depth_exceeds, loads_bounded
from verlog.chat.parsing import parse_reply, reasoning_text

EXAMPLES = 10_000
CALL = '<tool_call>{"name": "calculate", "arguments": {"expression": "3 + 4"}}</tool_call>'
TAGS = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_", "call>", "</think", "<"]
JSON_BITS = ['{"name": "f", "arguments": {}}', '{"name": "f", "arguments": "{\\"x\\": 1}"}', '{"name": ""}',
             '{"arguments": {}}', "[1, 2]", '"s"', "{", "}", "[", "]", '"', "\\", "null", "1e999", "9" * 5000,
             '{"name": "f", "arguments": "' + "[" * 1500 + '"}']

# The format as a regex (what parse_reply did before it became linear): the oracle on short replies.
_RE_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_RE_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def regex_reading(text: str) -> tuple[str, list[str], str]:
    """(content, the raw text of each call, reasoning) as the lazy regexes read ``text``."""
    visible = _RE_THINK.sub("", text)
    if "</think>" in visible:
        visible = visible.rsplit("</think>", 1)[1]
    if "<think>" in visible:
        visible = visible.split("<think>", 1)[0]
    raws = [m.group(1).strip() for m in _RE_CALL.finditer(visible)]
    rest = _RE_CALL.sub("", visible)
    if "<tool_call>" in rest:
        head, tail = rest.split("<tool_call>", 1)
        raws.append(tail.strip())
        rest = head
    parts = [m.strip() for m in _RE_THINK.findall(text)]
    rest_think = _RE_THINK.sub("", text)
    if "</think>" in rest_think:
        parts.insert(0, rest_think.rsplit("</think>", 1)[0].replace("<think>", "").strip())
    return rest.strip(), raws, "\n".join(p for p in parts if p)


def replies() -> st.SearchStrategy[str]:
    """Tags, JSON fragments, valid calls, deep brackets, unicode and binary-ish text, cut anywhere,
    repeated up to thousands of times."""
    piece = st.one_of(st.text(max_size=20), st.binary(max_size=20).map(lambda b: b.decode("latin-1")),
                      st.sampled_from(TAGS), st.sampled_from(JSON_BITS), st.just(CALL),
                      st.integers(1, 1500).map(lambda k: "[" * k), st.integers(1, 100).map(lambda k: "{\"a\":" * k))
    joined = st.lists(piece, max_size=10).map("".join)
    cut = joined.flatmap(lambda s: st.integers(0, len(s)).map(lambda k: s[:k]))
    repeated = st.tuples(joined, st.integers(1, 300)).map(lambda t: (t[0] or "<tool_call>") * t[1])
    return st.one_of(st.just(""), joined, cut, repeated)


def test_parse_reply_never_raises_and_reads_the_format_as_the_regexes_do():
    seen = {"calls": 0, "malformed": 0, "content": 0}

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(replies())
    def check(text: str) -> None:
        parsed = parse_reply(text)
        reasoning = reasoning_text(text)
        assert isinstance(parsed.content, str) and isinstance(reasoning, str)
        for call in parsed.calls:
            if call.error is None:
                assert call.name and isinstance(call.arguments, dict)
                assert not json_depth_exceeds(call.arguments, MAX_JSON_DEPTH)
                json.dumps(call.arguments)  # what the proxy does with a call: it must not raise either
            else:
                assert call.error.startswith("malformed tool call") and "\n" not in call.error
        if len(text) <= 2_000:  # the quadratic regexes are fine on short replies
            assert (parsed.content, [c.raw for c in parsed.calls], reasoning) == regex_reading(text)
        seen["calls"] += sum(c.error is None for c in parsed.calls)
        seen["malformed"] += sum(c.error is not None for c in parsed.calls)
        seen["content"] += bool(parsed.content)

    check()
    assert min(seen.values()) > 0  # the strategy reaches well-formed calls, malformed ones and plain text


def test_deep_nesting_is_a_malformed_call_not_a_recursion_error():
    for reply in ["<tool_call>" + "[" * 1_000, "<tool_call>" + "[" * 100_000 + "</tool_call>",
                  '<tool_call>{"name": "f", "arguments": ' + "[" * 50_000 + "</tool_call>",
                  '<tool_call>{"name": "f", "arguments": "' + "{\\\"a\\\":" * 5_000 + '"}</tool_call>']:
        (call,) = parse_reply(reply).calls
        assert call.error is not None and call.error.startswith("malformed tool call")
    deep_ok = '{"name": "f", "arguments": ' + '{"a": ' * (MAX_JSON_DEPTH - 1) + "1" + "}" * MAX_JSON_DEPTH
    (call,) = parse_reply(f"<tool_call>{deep_ok}</tool_call>").calls
    assert call.error is None and call.name == "f"  # exactly the allowed depth
    too_deep = '{"name": "f", "arguments": ' + '{"a": ' * MAX_JSON_DEPTH + "1" + "}" * (MAX_JSON_DEPTH + 1)
    (call,) = parse_reply(f"<tool_call>{too_deep}</tool_call>").calls
    assert call.error == f"malformed tool call: JSON nests deeper than {MAX_JSON_DEPTH} levels"


def test_loads_bounded_counts_levels_without_recursing():
    assert loads_bounded("1") == 1 and loads_bounded("[]") == [] and loads_bounded('{"a": [1]}') == {"a": [1]}
    assert loads_bounded("[" * 3 + "]" * 3, max_depth=3) == [[[]]]
    for text in ["[" * 4 + "]" * 4, "[" * 10_000 + "]" * 10_000, "[" * 10_000]:
        try:
            loads_bounded(text, max_depth=3)
        except JSONDepthError as exc:
            assert str(exc) == "JSON nests deeper than 3 levels"
        else:
            raise AssertionError(f"{text[:10]}... accepted")
    assert json_depth_exceeds([[1], {"a": {"b": []}}], 2) and not json_depth_exceeds([[1], {"a": {"b": 1}}], 3)


def _best_time(text: str, fn, reps: int) -> float:
    """Least of 5 timings of ``reps`` calls (the least is the one least disturbed by other jobs)."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            fn(text)
        best = min(best, time.perf_counter() - start)
    return best


def test_unclosed_tags_cost_linear_time():
    """Time of n and 4n repetitions of each hostile unit: linear parsing takes ~4x, the lazy regexes
    took ~16x (2,000 unclosed ``<tool_call>`` took seconds). The bound (10x) is generous for noise."""
    units = ["<tool_call>", "<think>", "<tool_call>x</think>", "<think><tool_call>[", "<tool_call>{\"a\": ["]
    n = 500

    def parse(text: str) -> None:
        parse_reply(text), reasoning_text(text)

    for unit in units:
        small, large = unit * n, unit * (4 * n)
        reps = 1
        while _best_time(small, parse, reps) < 0.02 and reps < 100_000:
            reps *= 4
        ratio = _best_time(large, parse, reps) / _best_time(small, parse, reps)
        assert ratio < 10, f"{unit!r}: {n} -> {4 * n} units took {ratio:.1f}x as long"
