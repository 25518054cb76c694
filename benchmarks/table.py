"""Print one table of benchmark results from their JSON files (``--json``, see :mod:`perfbench`).

    python benchmarks/table.py RESULTS_DIR_OR_FILE [...]

A directory stands for every ``*.json`` file in it. One row per result: figure, goal, median of the
per-pair ratios, their spread (min-max), pairs, and ``pass`` when the median meets the goal, else
``FAIL``. Exit status 0 whatever the verdicts (the figures depend on the machine and its load);
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
HEADER = ("figure", "goal", "median", "spread (min-max)", "pairs", "verdict")


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
    compare = data["compare"]
    if compare.get("op") not in (">=", "<=") or not isinstance(compare.get("value"), (int, float)):
        raise ResultError(f"{path}: not a benchmark result ('compare' is {compare!r})")
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
    """``"pass"`` when the result's median meets its goal, else ``"FAIL"``."""
    return "pass" if meets(result["median"], result["compare"]["op"], result["compare"]["value"]) else "FAIL"


def table(results: list[dict[str, Any]]) -> str:
    """The results as an aligned text table (header first), one row each, sorted by figure."""
    rows = [HEADER] + [(f"{r['figure']} {r['name']}", r["goal"], f"{r['median']:.2f}",
                        f"{r['min']:.2f}-{r['max']:.2f}", str(r["pairs"]), verdict(r))
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
