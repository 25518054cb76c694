"""Shared pieces of the framework-overhead benchmarks P1, P2, P4, P5 (bench_rollout, bench_context,
bench_update, bench_scaling): the tiny recipe's config, the machine load, and the final result line."""

from __future__ import annotations

import os
import time
from typing import Callable

from verlog.config import TrainConfig, load_recipe


def tiny_config(overrides: list[str]) -> TrainConfig:
    """The default recipe (``recipes/tiny.yaml``) with ``key=value`` overrides, validated."""
    return load_recipe("tiny", overrides)


def load_note() -> str:
    """The 1/5/15-minute load averages and the CPU count: figures on a shared machine need them."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes (wall clock)."""
    tic = time.perf_counter()
    fn()
    return time.perf_counter() - tic


def result_line(label: str, what: str, ratio: float, goal: str) -> str:
    """The benchmark's final line: ``<label>: <what>: ratio <r> (goal <goal>)`` (``make bench-quick`` checks its format)."""
    return f"{label}: {what}: ratio {ratio:.2f} (goal {goal})"
