"""Shared pieces of the env benchmarks (``bench_env_*.py``: the bare game against our text env on the
same actions): the timed play loop, the paired runs of one task, its line, and the benchmark's result.

Each task is played by both sides alternately, wrapped (A) and bare (B), ``--pairs`` times
(:func:`paired.interleave`), after one untimed run of each that also checks that both played the
same episodes where they should. A pair's overhead is bare steps/s / wrapped steps/s (wrapped
seconds / bare seconds on the same steps); the benchmark's result is the median of the per-pair
overheads of all its tasks with their min-max.

The goal is the looser of two: the text layer adds at most 10 us per step (a pair's added cost is
(wrapped seconds - bare seconds) / steps), or at most 1.2x the bare step. A cheap bare step (a few
microseconds) is held to the absolute goal, an expensive one to the ratio; the result carries both
medians and passes when either is met (:attr:`perfbench.Result.passes`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from paired import PairedTimes, interleave, spread
from perfbench import Result, timed

GOAL = "<= 1.20x"
#: The second goal: microseconds the text layer adds per step (median of the pairs).
ADDED_GOAL = "<= 10 us"

#: One run of a side: a tuple whose first item is the seconds to count (e.g. steps without resets).
Run = Callable[[], tuple]


class Mismatch(Exception):
    """The bare and the wrapped run of a task did not play the same episodes."""


def play(reset: Callable[[int], Any], step: Callable[[int], bool], actions: Sequence[int],
         seed: int) -> tuple[float, list[int]]:
    """Play ``actions`` (indices) from ``reset(seed)``; ``step`` returns whether the episode ended,
    after which the next episode is ``reset(seed + k)``.

    Returns:
        Seconds for the whole loop (resets included), and the action indices where episodes ended.
    """
    ends: list[int] = []

    def loop() -> None:
        reset(seed)
        for i, a in enumerate(actions):
            if step(a):
                ends.append(i)
                reset(seed + len(ends))

    return timed(loop), ends


def play_text_env(env: Any, replies: Sequence[str], actions: Sequence[int], seed: int) -> tuple[float, list[int]]:
    """:func:`play` on a text env stepped with ``replies[a]`` (parsing, text and info included)."""
    return play(lambda s: env.reset(seed=s), lambda a: any(env.step(replies[a])[2:4]), actions, seed)


def paired_task(task: str, bare: Run, wrapped: Run, pairs: int,
                match: Callable[[tuple], Any] | None = None) -> tuple[PairedTimes, tuple, tuple]:
    """``pairs`` interleaved runs of ``wrapped`` (A) and ``bare`` (B), after one untimed run of each (the
    warm-up); where ``match`` is given, ``match(output)`` of the two warm-up runs must be equal.

    Returns:
        The paired seconds, and the outputs of the last timed bare and wrapped runs.

    Raises:
        Mismatch: the warm-up runs do not match.
    """
    last: dict[str, tuple] = {"bare": bare(), "wrapped": wrapped()}
    if match is not None and match(last["bare"]) != match(last["wrapped"]):
        raise Mismatch(f"{task}: MISMATCH: bare and wrapped episodes end at different steps")

    def side(name: str, run: Run) -> Callable[[], float]:
        def call() -> float:
            last[name] = run()
            return last[name][0]
        return call

    times = interleave(side("wrapped", wrapped), side("bare", bare), pairs=pairs, warmup=0)
    return times, last["bare"], last["wrapped"]


def added_us(times: PairedTimes, steps: int) -> list[float]:
    """[pairs] microseconds the wrapped side adds per step in each pair: (wrapped - bare seconds) / steps."""
    return [(a - b) / steps * 1e6 for a, b in zip(times.a, times.b)]


def task_line(task: str, times: PairedTimes, steps: int) -> str:
    """``<task>: bare N steps/s, wrapped M steps/s, overhead Kx (min-max over n pairs), adds A us/step
    (min-max)``: steps/s from the median seconds of each side, the overhead and the added microseconds
    the medians of the per-pair figures."""
    bare, wrapped = steps / spread(times.b).median, steps / spread(times.a).median
    overhead, added = spread(times.ratios()), spread(added_us(times, steps))
    return (f"{task}: bare {bare:.1f} steps/s, wrapped {wrapped:.1f} steps/s, overhead {overhead.median:.2f}x "
            f"({overhead.min:.2f}-{overhead.max:.2f} over {times.pairs} pairs), adds {added.median:.1f} us/step "
            f"({added.min:.1f}-{added.max:.1f})")


def env_result(family: str, tasks: dict[str, PairedTimes], threads: int, steps: int | dict[str, int],
               unit: str = "task") -> Result:
    """The benchmark's result: the per-pair overheads and added microseconds per step of all its tasks
    (or other ``unit``s), pooled; ``steps``: the timed steps of every task, or of each task by name."""
    count = steps if isinstance(steps, dict) else dict.fromkeys(tasks, steps)
    overheads = [r for times in tasks.values() for r in times.ratios()]
    added = [us for task, times in tasks.items() for us in added_us(times, count[task])]
    per_task = [spread(times.ratios()).median for times in tasks.values()]
    what = (f"wrapped vs bare steps/s, {len(tasks)} {unit}{'s' if len(tasks) != 1 else ''} "
            f"({unit} medians {min(per_task):.2f}-{max(per_task):.2f}x, mean {sum(per_task) / len(per_task):.2f}x)")
    return Result.of(f"env/{family}", "wrapper", what, GOAL, overheads, threads, added=added, added_goal=ADDED_GOAL)
