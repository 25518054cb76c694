"""Tools an agent can call: the :class:`BaseTool` contract, ``@function_tool`` (schema inferred
from annotations and a Google-style docstring), an object's public methods as tools
(:mod:`verlog.tools.methods`), :class:`ToolRegistry` and YAML tool files."""

from verlog.tools.base import BaseTool, ToolError, ToolResult
from verlog.tools.delay import DelayedTool
from verlog.tools.function import FunctionTool, function_tool
from verlog.tools.methods import MethodTool, method_tools, tool_method_names
from verlog.tools.registry import ToolConfigError, ToolRegistry, load_tool, load_tools_yaml
from verlog.tools.schema import annotation_schema, parse_docstring, validate_arguments

__all__ = [
    "BaseTool",
    "DelayedTool",
    "FunctionTool",
    "MethodTool",
    "ToolConfigError",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "annotation_schema",
    "function_tool",
    "load_tool",
    "load_tools_yaml",
    "method_tools",
    "parse_docstring",
    "tool_method_names",
    "validate_arguments",
]
