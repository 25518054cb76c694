"""Tests of verlog.tools: schema inference, docstrings, validation, execution, registry, YAML, calculator."""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
from typing import Literal, Optional

import pytest

from verlog.tools import (
    BaseTool,
    FunctionTool,
    ToolConfigError,
    ToolError,
    ToolRegistry,
    ToolResult,
    function_tool,
    load_tools_yaml,
    parse_docstring,
    validate_arguments,
)
from verlog.tools.examples import calculate, evaluate_arithmetic


def run(tool: BaseTool, arguments: dict) -> ToolResult:
    """One create -> execute -> release cycle, as the agent loop does it."""

    async def cycle() -> ToolResult:
        instance = await tool.create()
        try:
            return await tool.execute(instance, arguments)
        finally:
            await tool.release(instance)

    return asyncio.run(cycle())


# ----------------------------------------------------------------------------- schema inference


@function_tool
def search(query: str, top_k: int = 3, threshold: float = 0.5, exact: bool = False) -> str:
    """Search the knowledge base.

    Args:
        query: what to look for.
        top_k (int): how many results
            to return.
        threshold: minimum score.
        exact: match the query exactly.

    Returns:
        The results, one per line.
    """
    return f"{query}|{top_k}|{threshold}|{exact}"


def test_primitives_schema() -> None:
    assert search.openai_schema() == {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the knowledge base.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "what to look for."},
                    "top_k": {"type": "integer", "description": "how many results to return."},
                    "threshold": {"type": "number", "description": "minimum score."},
                    "exact": {"type": "boolean", "description": "match the query exactly."},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    }


def test_containers_optional_literal_schema() -> None:
    @function_tool(name="move", description="Move pieces.")
    def f(
        pieces: list[int],
        direction: Literal["up", "down"],
        grid: list[list[float]],
        note: Optional[str] = None,
        speed: int | None = None,
        mode: Optional[Literal[1, 2]] = 1,
        tags: Optional[list[Literal["a", "b"]]] = None,
        holes: list[Optional[int]] = [],  # noqa: B006 - never mutated
        weights: dict[str, float] = {},  # noqa: B006
        flag: Literal[True] = True,
        must: Optional[bool] = None,
    ) -> str:
        return ""

    assert f.name == "move" and f.description == "Move pieces."
    assert f.parameters == {
        "type": "object",
        "properties": {
            "pieces": {"type": "array", "items": {"type": "integer"}},
            "direction": {"type": "string", "enum": ["up", "down"]},
            "grid": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
            "note": {"type": ["string", "null"]},
            "speed": {"type": ["integer", "null"]},
            "mode": {"type": ["integer", "null"], "enum": [1, 2, None]},
            "tags": {"type": ["array", "null"], "items": {"type": "string", "enum": ["a", "b"]}},
            "holes": {"type": "array", "items": {"type": ["integer", "null"]}},
            "weights": {"type": "object", "additionalProperties": {"type": "number"}},
            "flag": {"type": "boolean", "enum": [True]},
            "must": {"type": ["boolean", "null"]},
        },
        "required": ["pieces", "direction", "grid"],
        "additionalProperties": False,
    }


def test_optional_without_default_is_required_but_nullable() -> None:
    @function_tool
    def f(x: Optional[int], y: int = 0) -> str:
        """Doc."""
        return repr(x)

    assert f.parameters["required"] == ["x"]
    assert f.parameters["properties"]["x"] == {"type": ["integer", "null"]}
    assert run(f, {"x": None}).text == "None"


def test_no_parameters_and_keyword_only() -> None:
    @function_tool
    def now() -> str:
        """The time."""
        return "noon"

    @function_tool
    def kw(*, a: str) -> str:
        """Keyword only."""
        return a

    assert now.parameters == {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    assert run(now, {}).text == "noon"
    assert kw.parameters["required"] == ["a"] and run(kw, {"a": "x"}).text == "x"


@pytest.mark.parametrize(
    "annotation, fragment",
    [
        ("tuple[int, int]", "tuple"),
        ("list", "list[str]"),
        ("dict", "list[str]"),
        ("dict[int, str]", "dict[str, T]"),
        ("int | str", "Optional"),
        ("Optional[int | str]", "Optional"),
        ("bytes", "bytes"),
        ("set[int]", "set"),
        ("Literal['a', 1]", "Literal"),
        ("Literal[1.5]", "Literal"),
    ],
)
def test_unsupported_annotation_raises_naming_parameter(annotation: str, fragment: str) -> None:
    namespace: dict = {"Literal": Literal, "Optional": Optional}
    exec(f"def bad(ok: int, weird: {annotation}) -> str:\n    'Doc.'\n    return ''", namespace)
    with pytest.raises(TypeError, match="'weird'") as info:
        function_tool(namespace["bad"])
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_bad_signatures_raise_at_decoration() -> None:
    def unannotated(x) -> str:  # type: ignore[no-untyped-def]
        """Doc."""
        return ""

    def varargs(*xs: int) -> str:
        """Doc."""
        return ""

    def kwargs(**kw: int) -> str:
        """Doc."""
        return ""

    def undocumented(x: int) -> str:
        return ""

    def wrong_doc(x: int) -> str:
        """Doc.

        Args:
            y: not a parameter.
        """
        return ""

    with pytest.raises(TypeError, match="'x' has no type annotation"):
        function_tool(unannotated)
    with pytest.raises(TypeError, match="'xs'"):
        function_tool(varargs)
    with pytest.raises(TypeError, match="'kw'"):
        function_tool(kwargs)
    with pytest.raises(TypeError, match="no description"):
        function_tool(undocumented)
    assert function_tool(description="Given.")(undocumented).description == "Given."
    with pytest.raises(TypeError, match="'y', which is not a parameter"):
        function_tool(wrong_doc)
    with pytest.raises(ValueError, match="invalid tool name"):
        function_tool(name="has space", description="d")(undocumented)


def test_decorated_function_is_still_callable() -> None:
    assert isinstance(search, FunctionTool) and isinstance(search, BaseTool)
    assert search("q", top_k=1) == "q|1|0.5|False"
    assert search.__name__ == "search" and "knowledge base" in search.__doc__


# ----------------------------------------------------------------------------- docstrings


def test_parse_docstring_google_style() -> None:
    doc = """Fetch a page
    from the web.

    More details that are not part of the description.

    Args:
        url (str): the address.
        timeout: seconds to wait;
            longer pages need more.

            Zero means no limit.
        retries: how often to retry.

    Returns:
        url: this is not an argument.

    Raises:
        ValueError: a bad url.
    """
    description, args = parse_docstring(doc)
    assert description == "Fetch a page from the web."
    assert args == {
        "url": "the address.",
        "timeout": "seconds to wait; longer pages need more. Zero means no limit.",
        "retries": "how often to retry.",
    }


def test_parse_docstring_edge_cases() -> None:
    assert parse_docstring(None) == ("", {})
    assert parse_docstring("One line.") == ("One line.", {})
    assert parse_docstring("Summary.\nArgs:\n    a: first.\n    b: second.") == (
        "Summary.",
        {"a": "first.", "b": "second."},
    )
    assert parse_docstring("Summary.\n\nArguments:\n  a (list[int]): items.\nTail text.") == (
        "Summary.",
        {"a": "items."},
    )
    # an Args: header as the first line leaves the description empty
    assert parse_docstring("Args:\n    a: x.")[0] == ""


# ----------------------------------------------------------------------------- execution and returns


def test_return_forms() -> None:
    @function_tool
    def give(kind: str) -> object:
        """Return something of the given kind."""
        return {
            "str": "plain",
            "dict": {"answer": 42, "name": "é"},
            "result": ToolResult("r", 0.5, {"m": 1.0}),
            "pair": ("scored", 1),
            "pair_dict": ({"a": 1}, -0.25),
            "triple": ("t", 2.0, {"calls": 3}),
        }[kind]

    assert run(give, {"kind": "str"}) == ToolResult("plain")
    assert run(give, {"kind": "dict"}) == ToolResult(json.dumps({"answer": 42, "name": "é"}, ensure_ascii=False))
    assert json.loads(run(give, {"kind": "dict"}).text) == {"answer": 42, "name": "é"}
    assert run(give, {"kind": "result"}) == ToolResult("r", 0.5, {"m": 1.0})
    assert run(give, {"kind": "pair"}) == ToolResult("scored", 1.0, {})
    assert run(give, {"kind": "pair_dict"}) == ToolResult('{"a": 1}', -0.25)
    result = run(give, {"kind": "triple"})
    assert result == ToolResult("t", 2.0, {"calls": 3.0}) and isinstance(result.metrics["calls"], float)


@pytest.mark.parametrize(
    "value, fragment",
    [
        (None, "returned NoneType"),
        (3, "returned int"),
        (("a",), "tuple of 1"),
        (("a", 1.0, {}, 4), "tuple of 4"),
        (("a", "high"), "bad reward"),
        (("a", True), "bad reward"),
        (("a", float("nan")), "bad reward"),
        (("a", 1.0, {"m": "x"}), "bad reward or metrics"),
        ((3, 1.0), "returned int"),
        ({"x": {1, 2}}, "not JSON"),
    ],
)
def test_bad_returns_become_tool_errors(value: object, fragment: str) -> None:
    @function_tool
    def bad() -> object:
        """Return a bad value."""
        return value

    with pytest.raises(ToolError, match=fragment):
        run(bad, {})


def test_tool_result_validation() -> None:
    with pytest.raises(TypeError):
        ToolResult(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ToolResult("x", True)
    with pytest.raises(ValueError):
        ToolResult("x", metrics={"m": float("inf")})
    assert ToolResult("x", 1).reward == 1.0 and isinstance(ToolResult("x", 1).reward, float)


def test_sync_tool_runs_in_a_worker_thread() -> None:
    main = threading.get_ident()

    @function_tool
    def where() -> str:
        """Which thread runs me."""
        return "worker" if threading.get_ident() != main else "main"

    assert run(where, {}).text == "worker"


def test_sync_tools_do_not_block_the_event_loop() -> None:
    barrier = threading.Barrier(2, timeout=5)

    @function_tool
    def meet() -> str:
        """Wait for the other call."""
        barrier.wait()  # deadlocks (BrokenBarrierError after 5 s) if calls ran one after another
        return "met"

    async def both() -> list[ToolResult]:
        return await asyncio.gather(meet.execute("a", {}), meet.execute("b", {}))

    assert [r.text for r in asyncio.run(both())] == ["met", "met"]


def test_async_tool_runs_on_the_loop() -> None:
    @function_tool
    async def slow_echo(text: str, delay: float = 0.0) -> tuple[str, float]:
        """Echo after a delay.

        Args:
            text: what to echo.
            delay: seconds.
        """
        await asyncio.sleep(delay)
        return text.upper(), 1.0

    assert slow_echo.is_async
    assert run(slow_echo, {"text": "hi", "delay": 0}) == ToolResult("HI", 1.0)


def test_exceptions_become_tool_errors() -> None:
    @function_tool
    def divide(a: float, b: float) -> str:
        """Divide a by b."""
        return str(a / b)

    @function_tool
    async def explode() -> str:
        """Fail with a two-line message."""
        raise RuntimeError("first line\nsecond line")

    @function_tool
    def refuse() -> str:
        """Refuse with a message for the model."""
        raise ToolError("no access to that file")

    with pytest.raises(ToolError, match="tool 'divide' failed: ZeroDivisionError: float division by zero") as info:
        run(divide, {"a": 1, "b": 0})
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    with pytest.raises(ToolError) as info:
        run(explode, {})
    assert info.value.message == "tool 'explode' failed: RuntimeError: first line second line"
    with pytest.raises(ToolError) as info:
        run(refuse, {})
    assert info.value.message == "no access to that file"


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({}, "tool 'search': missing required argument 'query'"),
        ({"query": "q", "limit": 3}, "tool 'search': unknown argument 'limit' (expected: query, top_k, threshold, exact)"),
        ({"query": 3}, "tool 'search': argument 'query' must be string, got integer"),
        ({"query": "q", "top_k": 2.5}, "tool 'search': argument 'top_k' must be integer, got number"),
        ({"query": "q", "top_k": 2.0}, "tool 'search': argument 'top_k' must be integer, got number"),
        ({"query": "q", "top_k": True}, "tool 'search': argument 'top_k' must be integer, got boolean"),
        ({"query": "q", "threshold": False}, "tool 'search': argument 'threshold' must be number, got boolean"),
        ({"query": "q", "threshold": "0.5"}, "tool 'search': argument 'threshold' must be number, got string"),
        ({"query": "q", "exact": 1}, "tool 'search': argument 'exact' must be boolean, got integer"),
        ({"query": None}, "tool 'search': argument 'query' must be string, got null"),
        (["q"], "tool 'search': arguments must be a JSON object, got array"),
    ],
)
def test_validation_errors(arguments: object, message: str) -> None:
    with pytest.raises(ToolError) as info:
        run(search, arguments)  # type: ignore[arg-type]
    assert info.value.message == message


def test_ints_are_fine_for_floats_and_become_floats() -> None:
    result = run(search, {"query": "q", "threshold": 1, "top_k": 7})
    assert result.text == "q|7|1.0|False"


def test_nested_validation() -> None:
    schema = {
        "type": "object",
        "properties": {
            "xs": {"type": "array", "items": {"type": ["integer", "null"]}},
            "mode": {"type": ["string", "null"], "enum": ["a", "b", None]},
            "w": {"type": "object", "additionalProperties": {"type": "number"}},
        },
        "required": [],
        "additionalProperties": False,
    }
    assert validate_arguments(schema, {"xs": [1, None], "mode": None, "w": {"k": 2}}) == {
        "xs": [1, None],
        "mode": None,
        "w": {"k": 2.0},
    }
    with pytest.raises(ValueError, match=r"argument 'xs\[1\]' must be integer or null, got string"):
        validate_arguments(schema, {"xs": [1, "2"]})
    with pytest.raises(ValueError, match="argument 'mode' must be one of 'a', 'b', None, got 'c'"):
        validate_arguments(schema, {"mode": "c"})
    with pytest.raises(ValueError, match="argument 'w.k' must be number, got boolean"):
        validate_arguments(schema, {"w": {"k": True}})


def test_literal_enum_checks_type_too() -> None:
    @function_tool
    def pick(level: Literal[1, 2]) -> str:
        """Pick a level."""
        return str(level)

    assert run(pick, {"level": 2}).text == "2"
    with pytest.raises(ToolError, match="argument 'level' must be one of 1, 2, got 3"):
        run(pick, {"level": 3})


# ----------------------------------------------------------------------------- BaseTool lifecycle


class CounterTool(BaseTool):
    """Counts calls per trajectory; the step reward is the count."""

    def __init__(self, start: int = 0) -> None:
        super().__init__(
            "counter",
            "Count calls.",
            {"type": "object", "properties": {}, "required": [], "additionalProperties": False},
        )
        self.start = start

    async def create(self, instance_id: str | None = None, **kwargs: object) -> str:
        instance_id = await super().create(instance_id, **kwargs)
        self.instances[instance_id]["count"] = self.start
        return instance_id

    async def execute(self, instance_id: str, arguments: dict) -> ToolResult:
        state = self.instances[instance_id]
        state["count"] += 1
        return ToolResult(str(state["count"]), reward=float(state["count"]), metrics={"count": state["count"]})


def test_base_tool_lifecycle() -> None:
    tool = CounterTool(start=10)

    async def scenario() -> tuple[str, str, list[str]]:
        a = await tool.create("traj-a", ground_truth="x")
        b = await tool.create()
        with pytest.raises(ValueError, match="already exists"):
            await tool.create("traj-a")
        await tool.execute(a, {})
        second = await tool.execute(a, {})
        first_b = await tool.execute(b, {})
        assert tool.instances[a]["ground_truth"] == "x"
        await tool.release(a)
        await tool.release(a)  # idempotent
        await tool.release(b)
        return second.text, first_b.text, list(tool.instances)

    assert asyncio.run(scenario()) == ("12", "11", [])
    assert tool.openai_schema()["function"]["name"] == "counter"


def test_base_tool_rejects_bad_definitions() -> None:
    with pytest.raises(TypeError):
        BaseTool("x", "d", {"type": "object"})  # type: ignore[abstract]
    with pytest.raises(ValueError, match="invalid tool name"):
        FunctionTool(lambda: "", name="a.b", description="d")

    class ArrayTool(CounterTool):
        def __init__(self) -> None:
            BaseTool.__init__(self, "ok", "d", {"type": "array"})

    with pytest.raises(ValueError, match="type 'object'"):
        ArrayTool()


# ----------------------------------------------------------------------------- registry


@function_tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


def test_registry_add_get_schemas() -> None:
    registry = ToolRegistry([search, echo])
    assert registry.names() == ["search", "echo"] and len(registry) == 2
    assert registry.get("echo") is echo and registry["search"] is search and "echo" in registry
    assert registry.schemas() == [search.openai_schema(), echo.openai_schema()]
    with pytest.raises(KeyError, match="unknown tool 'nope' \\(registered: search, echo\\)"):
        registry.get("nope")
    with pytest.raises(ValueError, match="'echo' is already registered"):
        registry.add(function_tool(name="echo", description="Another echo.")(lambda: ""))
    with pytest.raises(TypeError):
        registry.add(lambda: "")  # type: ignore[arg-type]


def test_registry_merge() -> None:
    left, right = ToolRegistry([search]), ToolRegistry([echo, calculate])
    merged = left.merge(right)
    assert merged.names() == ["search", "echo", "calculate"]
    assert left.names() == ["search"] and right.names() == ["echo", "calculate"]
    with pytest.raises(ValueError, match="'echo'"):
        merged.merge(ToolRegistry([echo]))


# ----------------------------------------------------------------------------- YAML loading


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """An importable module ``verlog_test_plugin`` with tools of every kind."""
    (tmp_path / "verlog_test_plugin.py").write_text(
        textwrap.dedent(
            '''
            from verlog.tools import BaseTool, ToolResult, function_tool

            class Greeter(BaseTool):
                def __init__(self, greeting: str = "hello", name: str = "greet"):
                    super().__init__(name, "Greet.", {"type": "object", "properties": {}})
                    self.greeting = greeting

                async def execute(self, instance_id, arguments):
                    return ToolResult(self.greeting)

            def word_count(text: str) -> int:
                """Count words.

                Args:
                    text: the text.
                """
                return str(len(text.split()))

            def untyped(text):
                """No annotation."""

            @function_tool
            def shout(text: str) -> str:
                """Shout."""
                return text.upper()

            class Tools:
                inner = shout

            NOT_A_TOOL = 3
            '''
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


ONE = "tools:\n  - "  # a tools file with one entry, written after it


def write(tmp_path, text: str):
    path = tmp_path / "tools.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_load_yaml_all_entry_kinds(plugin) -> None:
    path = write(
        plugin,
        """
        tools:
          - path: verlog.tools.examples:calculate
          - path: verlog_test_plugin:Greeter
            kwargs: {greeting: hi}
          - verlog_test_plugin:word_count
          - path: verlog_test_plugin:Tools.inner
        """,
    )
    registry = ToolRegistry.from_yaml(path)
    assert registry.names() == ["calculate", "greet", "word_count", "shout"]
    assert registry.get("calculate") is calculate
    assert run(registry.get("greet"), {}).text == "hi"
    assert run(registry.get("word_count"), {"text": "a b c"}).text == "3"
    assert registry.get("word_count").parameters["properties"]["text"]["description"] == "the text."
    assert [t.name for t in load_tools_yaml(path)] == registry.names()


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "expected a mapping with a 'tools' list"),
        ("tools: calc", "'tools' must be a list"),
        ("tools: []\nextra: 1", "unknown top-level key 'extra'"),
        ("tools: [\n", "invalid YAML"),
        (ONE + "3", "tools[0]: expected a mapping"),
        (ONE + "{path: verlog.tools.examples.calculate}", "tools[0]: 'path' must be 'module:attribute'"),
        (ONE + "{path: 'verlog.tools.examples:calculate', name: x}", "tools[0]: unknown key 'name'"),
        (ONE + "{path: 'no_such_module_xyz:f'}", "tools[0] (no_such_module_xyz:f): cannot import module"),
        (ONE + "{path: 'verlog.tools.examples:nope'}", "(verlog.tools.examples:nope): 'verlog.tools.examples' has no attribute 'nope'"),
        (ONE + "{path: 'verlog_test_plugin:NOT_A_TOOL'}", "expected a BaseTool, a BaseTool subclass or a function"),
        (ONE + "{path: 'verlog_test_plugin:untyped'}", "function untyped: tool 'untyped': parameter 'text' has no type annotation"),
        (ONE + "{path: 'verlog_test_plugin:Greeter', kwargs: {volume: 3}}", "cannot build Greeter: TypeError"),
        (ONE + "{path: 'verlog_test_plugin:Greeter', kwargs: [1]}", "'kwargs' must be a mapping"),
        (ONE + "{path: 'verlog_test_plugin:shout', kwargs: {a: 1}}", "'kwargs' only applies to a BaseTool class"),
        (ONE + "{path: 'verlog_test_plugin:ToolResult'}", "class ToolResult is not a BaseTool subclass"),
        (
            "tools:\n  - verlog.tools.examples:calculate\n  - verlog.tools.examples:calculate",
            "tools[1]: tool name collision: 'calculate' is already registered",
        ),
    ],
)
def test_load_yaml_bad_files(plugin, text: str, fragment: str) -> None:
    path = write(plugin, text)
    with pytest.raises(ToolConfigError) as info:
        load_tools_yaml(path)
    message = str(info.value)
    assert fragment in message, message
    assert message.startswith(str(path)) and "\n" not in message


def test_load_yaml_missing_file(tmp_path) -> None:
    with pytest.raises(ToolConfigError, match="cannot read"):
        load_tools_yaml(tmp_path / "absent.yaml")


# ----------------------------------------------------------------------------- calculator


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("1 + 2", "3"),
        ("2 * (3 + 4)", "14"),
        ("8 / 2", "4"),
        ("7 / 2", "3.5"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("2 ** 10", "1024"),
        ("2 ** -1", "0.5"),
        ("-3 ** 2", "-9"),
        ("(-3) ** 2", "9"),
        ("--4", "4"),
        ("+4", "4"),
        ("1.5e3 + 0.25", "1500.25"),
        ("0.1 + 0.2", "0.30000000000000004"),
        ("  ( ( 1 ) )  ", "1"),
        ("(" * 90 + "2" + ")" * 90, "2"),  # parentheses alone add no depth
        ("10 ** 100", str(10**100)),
        ("2 ** 1000 - 2 ** 1000", "0"),
    ],
)
def test_calculator_results(expression: str, expected: str) -> None:
    assert calculate(expression) == expected
    assert run(calculate, {"expression": expression}).text == expected


@pytest.mark.parametrize(
    "expression, fragment",
    [
        ("__import__('os')", "a function call is not allowed"),
        ("__import__('os').system('true')", "is not allowed"),
        ("x + 1", "name 'x' is not allowed"),
        ("(1).real", "attribute access '.real' is not allowed"),
        ("(1).__class__", "attribute access '.__class__' is not allowed"),
        ("'a' * 3", "only numbers are allowed"),
        ("True + 1", "only numbers are allowed"),
        ("1j * 2", "only numbers are allowed"),
        ("[1, 2]", "List is not allowed"),
        ("1 < 2", "Compare is not allowed"),
        ("1 << 3", "operator '<<' is not allowed"),
        ("~1", "operator '~' is not allowed"),
        ("lambda: 1", "Lambda is not allowed"),
        ("1 if 1 else 2", "IfExp is not allowed"),
        ("import os", "invalid syntax"),
        ("1 +", "invalid syntax"),
        ("", "empty expression"),
        ("9 ** 9 ** 9", "exponent 387420489 too large"),
        ("2 ** 1001", "exponent 1001 too large"),
        ("2 ** -5000", "exponent -5000 too large"),
        ("(10 ** 100) ** 100", "result too large"),
        ("99999 ** 999 * 99999 ** 999 * 99999 ** 999", "result too large"),
        ("1e308 * 10", "result too large"),
        ("2.0 ** 1000 * 2.0 ** 1000", "result too large"),
        ("1 / 0", "division by zero"),
        ("1 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("(-8) ** 0.5", "not a real number"),
        ("1 + " * 200 + "1", "too long"),
        ("(1 + " * 60 + "1" + ")" * 60, "nested too deeply"),
        ("-" * 100 + "1", "nested too deeply"),
    ],
)
def test_calculator_rejects(expression: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        evaluate_arithmetic(expression)
    assert fragment in str(info.value), str(info.value)
    with pytest.raises(ToolError) as tool_info:
        run(calculate, {"expression": expression})
    assert tool_info.value.message.startswith("tool 'calculate' failed: ValueError: ")
    assert fragment in tool_info.value.message


def test_calculator_schema() -> None:
    function = calculate.openai_schema()["function"]
    assert function["name"] == "calculate"
    assert function["description"].startswith("Evaluate an arithmetic expression: numbers, + - * / // % **")
    assert function["parameters"] == {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": 'the expression, e.g. "(3 + 4) * 2 ** 3".'}},
        "required": ["expression"],
        "additionalProperties": False,
    }
