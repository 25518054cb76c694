"""Shared pieces of the benchmarks: the clock, the thread count, the common command-line flags, the
machine load, and the result (its final line, and the JSON object that ``benchmarks/table.py`` reads).

Every benchmark that compares two sides ends with one result line::

    <figure> <name>: <what>: ratio <median> [<min>-<max>, <n> pairs] (goal <goal>)

where the ratio is the median of the per-pair ratios (:mod:`paired`) and ``[min-max, n pairs]`` their
spread; ``make bench-quick`` checks that format. With ``--json PATH`` (or the environment variable
``BENCH_JSON``) the same result is also written to PATH as one JSON object (:meth:`Result.to_json`).

A result may carry a second, absolute goal beside its ratio (the env benchmarks: the microseconds the
text layer adds per step, ``<= 10 us``); it then passes when either goal is met (:attr:`Result.passes`),
and the line ends ``(goal <ratio goal> or <added goal> added: pass|FAIL)``.

This module imports neither torch nor Verlog at import time, so that :func:`preset_threads` can run
before torch is imported and ``table.py`` starts fast.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    from verlog.config import TrainConfig

#: The clock of every timing in the benchmarks (a module attribute, so tests can replace it).
clock: Callable[[], float] = time.perf_counter

#: The environment variable that names the JSON result file when ``--json`` is not given.
JSON_ENV = "BENCH_JSON"

#: The spread as the result line prints it (``make bench-quick`` matches it).
RESULT_FORMAT = "{label}: {what}: ratio {median:.2f} [{min:.2f}-{max:.2f}, {pairs} pairs] (goal {goal})"

_GOAL = re.compile(r"^\s*(>=|<=)\s*([0-9]+(?:\.[0-9]+)?)\s*x?(?:\s|$|\()")


def tiny_config(overrides: list[str]) -> "TrainConfig":
    """The default recipe (``recipes/tiny.yaml``) with ``key=value`` overrides, validated."""
    from verlog.config import load_recipe

    return load_recipe("tiny", overrides)


def load_note() -> str:
    """The 1/5/15-minute load averages and the CPU count: figures on a shared machine need them."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes (wall clock, :data:`clock`)."""
    tic = clock()
    fn()
    return clock() - tic


class Stopwatch:
    """Seconds summed over several timed stretches, for a loop that times only part of each step
    (e.g. an env's steps but not its resets)::

        steps = Stopwatch()
        with steps:
            env.step(action)
        steps.seconds  # all the stretches together
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._tic = 0.0

    def __enter__(self) -> "Stopwatch":
        self._tic = clock()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds += clock() - self._tic


# ---------------------------------------------------------------------------------------------- threads
def set_threads(threads: int) -> None:
    """Fix the thread count: ``OMP_NUM_THREADS`` (read by OpenMP when torch is first imported, and by
    every subprocess) and, when torch is imported, ``torch.set_num_threads``."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)


def preset_threads(argv: Sequence[str] | None = None, default: int = 1) -> int:
    """Read ``--threads`` from the command line (``sys.argv``) and :func:`set_threads` it; a benchmark
    calls this before it imports torch, so that OpenMP starts with that many threads. A value of 0 or
    below leaves the environment alone (a benchmark may give 0 its own meaning)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--threads", type=int, default=default)
    threads = p.parse_known_args(sys.argv[1:] if argv is None else list(argv))[0].threads
    if threads > 0:
        set_threads(threads)
    return threads


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_common_args(parser: argparse.ArgumentParser, pairs: int | None = 5, threads: bool = True) -> None:
    """The flags every benchmark takes: ``--pairs`` (unless ``pairs`` is None: the benchmark's pairs are
    not timed calls), ``--threads`` (unless ``threads`` is false: the benchmark defines its own) and
    ``--json``."""
    if pairs is not None:
        parser.add_argument("--pairs", type=positive_int, default=pairs,
                            help=f"timed A B pairs (median of the per-pair ratios; default {pairs})")
    if threads:
        parser.add_argument("--threads", type=positive_int, default=1,
                            help="torch / OpenMP threads: torch.set_num_threads and OMP_NUM_THREADS (default 1)")
    parser.add_argument("--json", type=Path, default=os.environ.get(JSON_ENV) or None,
                        help=f"also write the result as one JSON object to this file (default: ${JSON_ENV})")


def threads_note(threads: int) -> str:
    """The thread count as the figures print it."""
    return f"{threads} thread{'s' if threads != 1 else ''} (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')})"


# ---------------------------------------------------------------------------------------------- goals
def parse_goal(goal: str) -> tuple[str, float]:
    """``(op, value)`` of a goal text such as ``">= 0.90"``, ``"<= 1.2x"`` or ``">= 100x (note)"``.

    Raises:
        ValueError: the text does not start with ``>=`` or ``<=`` and a number.
    """
    m = _GOAL.match(goal)
    if m is None:
        raise ValueError(f"goal {goal!r}: expected '>= <number>' or '<= <number>' (an 'x' and a note may follow)")
    return m.group(1), float(m.group(2))


def meets(value: float, op: str, target: float) -> bool:
    """Whether ``value`` meets the goal ``op target`` (``op``: ``">="`` or ``"<="``)."""
    if op == ">=":
        return value >= target
    if op == "<=":
        return value <= target
    raise ValueError(f"goal operator {op!r}: expected '>=' or '<='")


def passes(median: float, goal: str, added: float | None = None, added_goal: str | None = None) -> bool:
    """Whether a median ratio meets ``goal``, or (where both are given) a median added cost meets
    ``added_goal``: the looser of the two goals decides."""
    if meets(median, *parse_goal(goal)):
        return True
    return added is not None and added_goal is not None and meets(added, *parse_goal(added_goal))


# ---------------------------------------------------------------------------------------------- result
@dataclass(frozen=True)
class Result:
    """A benchmark's figure: the median of its per-pair ratios, their spread, and the conditions.

    Attributes:
        figure: short name, e.g. ``"P1"`` or ``"env/babyai"``.
        name: one word after it in the result line, e.g. ``"rollout"``.
        what: the figures compared, in words (``"collector 80 turns/s vs bare engine 82 turns/s"``).
        goal: the goal as text, starting with ``>=`` or ``<=`` and a number (:func:`parse_goal`).
        ratios: the per-pair ratios, in the order the pairs ran.
        median, min, max: of the per-pair ratios.
        pairs: how many pairs.
        threads: the fixed thread count.
        load: the 1/5/15-minute load averages at the end.
        cpus: the machine's CPU count.
        added: the per-pair absolute cost A adds over B per unit of work (e.g. microseconds per env
            step), when the result has a second goal; else empty.
        added_goal: that second goal (``"<= 10 us"``, :func:`parse_goal`), or None.
    """

    figure: str
    name: str
    what: str
    goal: str
    ratios: tuple[float, ...]
    median: float
    min: float
    max: float
    pairs: int
    threads: int
    load: tuple[float, float, float]
    cpus: int
    added: tuple[float, ...] = ()
    added_goal: str | None = None

    @classmethod
    def of(cls, figure: str, name: str, what: str, goal: str, ratios: Sequence[float], threads: int,
           added: Sequence[float] = (), added_goal: str | None = None) -> "Result":
        """The result of the per-pair ``ratios``, with the machine's load now; ``added`` and
        ``added_goal``: the per-pair absolute costs and their goal, for a result with a second goal.

        Raises:
            ValueError: no ratios, a goal :func:`parse_goal` cannot read, or ``added`` without
                ``added_goal`` (or the reverse) or with another count than ``ratios``.
        """
        if not ratios:
            raise ValueError(f"{figure}: no ratios")
        parse_goal(goal)
        if (added_goal is None) != (not added):
            raise ValueError(f"{figure}: added costs and their goal come together")
        if added_goal is not None:
            parse_goal(added_goal)
            if len(added) != len(ratios):
                raise ValueError(f"{figure}: {len(added)} added costs for {len(ratios)} ratios")
        return cls(figure, name, what, goal, tuple(ratios), statistics.median(ratios), min(ratios), max(ratios),
                   len(ratios), threads, tuple(round(x, 2) for x in os.getloadavg()), os.cpu_count() or 0,
                   tuple(added), added_goal)

    @property
    def added_spread(self) -> tuple[float, float, float] | None:
        """(median, min, max) of the per-pair added costs, or None without a second goal."""
        if not self.added:
            return None
        return statistics.median(self.added), min(self.added), max(self.added)

    @property
    def passes(self) -> bool:
        """Whether the median ratio meets the goal, or the median added cost meets the second goal."""
        return passes(self.median, self.goal, self.added_spread and self.added_spread[0], self.added_goal)

    @property
    def label(self) -> str:
        """``<figure> <name>``, the result line's first words."""
        return f"{self.figure} {self.name}"

    def line(self) -> str:
        """The result line (:data:`RESULT_FORMAT`); with a second goal, the added cost's median and spread
        follow the figures, and the goal says both and the verdict."""
        what, goal = self.what, self.goal
        if self.added_goal is not None:
            median, lo, hi = self.added_spread
            what = f"{what}; adds {median:.1f} us/step [{lo:.1f}-{hi:.1f}]"
            goal = f"{goal} or {self.added_goal} added: {'pass' if self.passes else 'FAIL'}"
        return RESULT_FORMAT.format(label=self.label, what=what, median=self.median, min=self.min,
                                    max=self.max, pairs=self.pairs, goal=goal)

    def to_json(self) -> dict:
        """The result as one JSON object: every attribute, the goal as a comparison
        ``{"op": ">=", "value": 0.9}`` beside its text, and ``verdict`` (``"pass"`` or ``"FAIL"``); with a
        second goal also ``added`` ({median, min, max, values}) and ``added_compare``."""
        op, value = parse_goal(self.goal)
        data = {**asdict(self), "ratios": list(self.ratios), "load": list(self.load),
                "compare": {"op": op, "value": value}, "verdict": "pass" if self.passes else "FAIL"}
        del data["added"], data["added_goal"]
        if self.added_goal is not None:
            median, lo, hi = self.added_spread
            added_op, added_value = parse_goal(self.added_goal)
            data.update(added={"median": median, "min": lo, "max": hi, "values": list(self.added)},
                        added_goal=self.added_goal, added_compare={"op": added_op, "value": added_value})
        return data


def json_for(json_path: Path | None, figure: str) -> Path | None:
    """Where a script that reports more than one figure writes ``figure``'s JSON: beside ``json_path``
    (``<stem>.<figure>.json``, ``/`` in the figure written ``-``) so that ``make bench``'s table, which
    reads every ``*.json`` of its directory, shows each figure; ``None`` when ``json_path`` is."""
    if json_path is None:
        return None
    json_path = Path(json_path)
    return json_path.with_name(f"{json_path.stem}.{figure.replace('/', '-')}.json")


def report(result: Result, json_path: Path | None) -> None:
    """Print the per-pair ratios with the thread count and the load, then the result line (a
    benchmark's last line); when ``json_path`` is set, also write the JSON object there."""
    if json_path is not None:
        json_path = Path(json_path)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result.to_json()) + "\n")
    print(f"{result.label}: per-pair ratios " + " ".join(f"{r:.2f}" for r in result.ratios)
          + f"; {threads_note(result.threads)}; {load_note()}")
    print(result.line(), flush=True)
