"""Print one table of benchmark results from their JSON files (``--json``, see :mod:`perfbench`).

    python benchmarks/table.py RESULTS_DIR_OR_FILE [...]

A directory stands for every ``*.json`` file in it. One row per result: figure, goal, median of the
per-pair ratios, their spread (min-max), pairs, ``pass`` when the median meets the goal, else
``FAIL``, and, for a result with a second goal on the absolute cost added (the env benchmarks:
``<= 10 us`` per step), that cost's median and spread: such a result passes when either goal is met,
and its goal column shows both. Exit status 0 whatever the verdicts (the figures depend on the machine and its load);
1, with one line saying which file and why, when a file is missing or is not a result.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfbench import meets  # noqa: E402

#: Keys a result must have, with their JSON types.
REQUIRED = {"figure": str, "name": str, "goal": str, "median": (int, float), "min": (int, float),
            "max": (int, float), "pairs": int, "compare": dict}
HEADER = ("figure", "goal", "median", "spread (min-max)", "pairs", "verdict", "added (min-max)")


class ResultError(Exception):
    """A results file that is missing or malformed; the message is one line naming the file."""


def read_result(path: Path) -> dict[str, Any]:
    """The result object in ``path``, checked.

    Raises:
        ResultError: the file is missing or unreadable, not JSON, or lacks a key or its type.
    """
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ResultError(f"{path}: no such file") from None
    except OSError as err:
        raise ResultError(f"{path}: cannot read: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise ResultError(f"{path}: not JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(data, dict):
        raise ResultError(f"{path}: not a benchmark result (a JSON {type(data).__name__}, not an object)")
    for key, kind in REQUIRED.items():
        if key not in data:
            raise ResultError(f"{path}: not a benchmark result (no '{key}')")
        if not isinstance(data[key], kind) or isinstance(data[key], bool):
            raise ResultError(f"{path}: not a benchmark result ('{key}' is {data[key]!r})")
    for key in ("compare", "added_compare") if "added" in data else ("compare",):
        compare = data.get(key)
        if (not isinstance(compare, dict) or compare.get("op") not in (">=", "<=")
                or not isinstance(compare.get("value"), (int, float))):
            raise ResultError(f"{path}: not a benchmark result ('{key}' is {compare!r})")
    if "added" in data:
        added = data["added"]
        if not isinstance(added, dict) or not all(
                isinstance(added.get(k), (int, float)) and not isinstance(added.get(k), bool)
                for k in ("median", "min", "max")):
            raise ResultError(f"{path}: not a benchmark result ('added' is {added!r})")
        if not isinstance(data.get("added_goal"), str):
            raise ResultError(f"{path}: not a benchmark result ('added_goal' is {data.get('added_goal')!r})")
    return data


def result_files(paths: list[Path]) -> list[Path]:
    """``paths`` with each directory replaced by its ``*.json`` files (sorted).

    Raises:
        ResultError: a directory holds no ``*.json`` file.
    """
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(path.glob("*.json"))
            if not found:
                raise ResultError(f"{path}: no *.json results in this directory")
            files += found
        else:
            files.append(path)
    return files


def verdict(result: dict[str, Any]) -> str:
    """``"pass"`` when the result's median meets its goal, or its median added cost meets its second
    goal where it has one, else ``"FAIL"``."""
    ok = meets(result["median"], result["compare"]["op"], result["compare"]["value"])
    if not ok and "added" in result:
        ok = meets(result["added"]["median"], result["added_compare"]["op"], result["added_compare"]["value"])
    return "pass" if ok else "FAIL"


def goal_cell(result: dict[str, Any]) -> str:
    """The goal column: the ratio's goal, and ``or <added goal> added`` where there is a second goal."""
    return f"{result['goal']} or {result['added_goal']} added" if "added" in result else result["goal"]


def added_cell(result: dict[str, Any]) -> str:
    """The added-cost column: ``+<median> (<min>-<max>)``, or empty without a second goal."""
    if "added" not in result:
        return ""
    added = result["added"]
    return f"+{added['median']:.1f} ({added['min']:.1f}-{added['max']:.1f})"


def table(results: list[dict[str, Any]]) -> str:
    """The results as an aligned text table (header first), one row each, sorted by figure."""
    rows = [HEADER] + [(f"{r['figure']} {r['name']}", goal_cell(r), f"{r['median']:.2f}",
                        f"{r['min']:.2f}-{r['max']:.2f}", str(r["pairs"]), verdict(r), added_cell(r))
                       for r in sorted(results, key=lambda r: r["figure"])]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def main(argv: list[str] | None = None) -> int:
    """Print the table of the results named on the command line; 1 with a one-line error on bad input."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", type=Path, help="result files, or directories of them")
    args = p.parse_args(argv)
    try:
        results = [read_result(f) for f in result_files(args.paths)]
    except ResultError as err:
        print(f"table.py: {err}", file=sys.stderr)
        return 1
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
