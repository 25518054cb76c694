"""The benchmarks' shared paired timing (``benchmarks/paired.py``), their result (``perfbench.Result``)
and the results table (``benchmarks/table.py``): pure logic, with a call log and a fake clock."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import paired  # noqa: E402
import perfbench  # noqa: E402
import table  # noqa: E402


def makefile_result_regex() -> re.Pattern:
    """The RESULT_LINE regex that ``make bench-quick`` greps the benchmarks' last lines with."""
    m = re.search(r"^RESULT_LINE = (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert m, "Makefile: no RESULT_LINE"
    return re.compile(m.group(1).replace("$$", "$"))


class FakeClock:
    """A clock that only moves when a side says how long it took."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------------------------------------- paired
def test_interleave_runs_warmup_then_pairs_in_order_a_b_and_keeps_only_the_pairs():
    log: list[str] = []

    def side(name: str):
        def call() -> float:
            log.append(name)
            return float(len(log))  # the call's position: tells kept calls from warm-up ones
        return call

    times = paired.interleave(side("A"), side("B"), pairs=3, warmup=2)
    assert log == ["A", "B"] * 5
    assert times.a == [5.0, 7.0, 9.0] and times.b == [6.0, 8.0, 10.0]
    assert times.pairs == 3


def test_paired_times_times_each_call_on_the_clock_and_leaves_warmup_untimed(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(perfbench, "clock", clock)
    calls = {"A": 0, "B": 0}

    def side(name: str, seconds: list[float]):
        def call() -> None:
            clock.now += seconds[calls[name]]
            calls[name] += 1
        return call

    # The first call of each side is the warm-up: 100 s, which must appear nowhere.
    times = paired.paired_times(side("A", [100.0, 2.0, 4.0, 6.0]), side("B", [100.0, 1.0, 1.0, 2.0]), pairs=3)
    assert times.a == [2.0, 4.0, 6.0] and times.b == [1.0, 1.0, 2.0]
    assert times.ratios() == [2.0, 4.0, 3.0]
    assert times.rate_ratios() == [0.5, 0.25, 1 / 3]
    assert paired.spread(times.ratios()) == (3.0, 2.0, 4.0)


@pytest.mark.parametrize("pairs", [0, -1])
def test_fewer_than_one_pair_raises(pairs):
    with pytest.raises(ValueError, match="pairs must be >= 1"):
        paired.interleave(lambda: 1.0, lambda: 1.0, pairs=pairs)
    with pytest.raises(ValueError, match="pairs must be >= 1"):
        paired.paired_times(lambda: None, lambda: None, pairs=pairs)


def test_negative_warmup_raises_and_zero_warmup_runs_only_the_pairs():
    with pytest.raises(ValueError, match="warmup"):
        paired.interleave(lambda: 1.0, lambda: 1.0, pairs=1, warmup=-1)
    log: list[str] = []
    paired.interleave(lambda: log.append("A") or 1.0, lambda: log.append("B") or 1.0, pairs=2, warmup=0)
    assert log == ["A", "B", "A", "B"]


def test_paired_times_sum_pair_by_pair_and_refuse_different_pair_counts():
    total = paired.PairedTimes([1.0, 2.0], [3.0, 4.0]) + paired.PairedTimes([0.5, 0.5], [1.0, 1.0])
    assert total == paired.PairedTimes([1.5, 2.5], [4.0, 5.0])
    with pytest.raises(ValueError):
        paired.PairedTimes([1.0], [1.0]) + total


def test_stopwatch_sums_only_the_timed_stretches(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(perfbench, "clock", clock)
    watch = perfbench.Stopwatch()
    for step in (1.0, 2.5):
        with watch:
            clock.now += step
        clock.now += 10.0  # e.g. a reset, not counted
    assert watch.seconds == 3.5


# ---------------------------------------------------------------------------------------------- result
def test_result_has_median_spread_and_a_line_that_make_bench_quick_accepts():
    result = perfbench.Result.of("P1", "rollout", "collector 80.0 turns/s vs bare engine 82.0 turns/s", ">= 0.90",
                                 [1.0, 3.0, 2.0, 10.0], threads=1)
    assert (result.median, result.min, result.max, result.pairs) == (2.5, 1.0, 10.0, 4)
    assert result.line() == ("P1 rollout: collector 80.0 turns/s vs bare engine 82.0 turns/s: "
                             "ratio 2.50 [1.00-10.00, 4 pairs] (goal >= 0.90)")
    regex = makefile_result_regex()
    assert regex.match(result.line())
    env = perfbench.Result.of("env/babyai", "wrapper", "wrapped vs bare", "<= 1.20x", [1.1], threads=1)
    assert regex.match(env.line())
    assert not regex.match(perfbench.RESULT_FORMAT.replace(" [{min:.2f}-{max:.2f}, {pairs} pairs]", "").format(
        label="P1 rollout", what="x", median=1.0, goal=">= 0.90"))  # the spread is required


def test_result_refuses_no_ratios_and_an_unreadable_goal():
    with pytest.raises(ValueError, match="no ratios"):
        perfbench.Result.of("P1", "rollout", "x", ">= 0.90", [], threads=1)
    with pytest.raises(ValueError, match="goal"):
        perfbench.Result.of("P1", "rollout", "x", "as fast as possible", [1.0], threads=1)


def test_report_prints_the_result_line_last_and_writes_the_json_object(tmp_path, capsys):
    result = perfbench.Result.of("P3", "gae", "batched vs reference", ">= 100x", [120.0, 90.0, 150.0], threads=1)
    perfbench.report(result, tmp_path / "sub" / "p3.json")
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == result.line()
    assert "per-pair ratios 120.00 90.00 150.00" in out[-2] and "1 thread" in out[-2] and "load" in out[-2]
    data = json.loads((tmp_path / "sub" / "p3.json").read_text())
    assert data["figure"] == "P3" and data["goal"] == ">= 100x"
    assert data["compare"] == {"op": ">=", "value": 100.0}
    assert (data["median"], data["min"], data["max"], data["pairs"], data["threads"]) == (120.0, 90.0, 150.0, 3, 1)
    assert len(data["load"]) == 3 and data["ratios"] == [120.0, 90.0, 150.0]


def test_a_second_figure_of_one_script_gets_its_own_file_that_the_table_reads(tmp_path, capsys):
    main = tmp_path / "bench_async_rollout.json"
    assert perfbench.json_for(None, "async/tools") is None
    second = perfbench.json_for(main, "async/tools")
    assert second == tmp_path / "bench_async_rollout.async-tools.json"
    perfbench.report(perfbench.Result.of("async/babyai", "rollout", "x", ">= 0.95", [1.0], threads=1), main)
    perfbench.report(perfbench.Result.of("async/tools", "rollout", "y", ">= 1.50", [1.1], threads=1), second)
    capsys.readouterr()
    assert table.main([str(tmp_path)]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == ["async/babyai", "async/tools"]


def test_common_args_default_to_five_pairs_one_thread_and_the_json_env_var(monkeypatch):
    monkeypatch.setenv(perfbench.JSON_ENV, "/tmp/x.json")
    p = argparse.ArgumentParser()
    perfbench.add_common_args(p)
    args = p.parse_args([])
    assert (args.pairs, args.threads, args.json) == (5, 1, Path("/tmp/x.json"))
    assert p.parse_args(["--json", "y.json"]).json == Path("y.json")
    with pytest.raises(SystemExit):
        p.parse_args(["--pairs", "0"])


def test_preset_threads_sets_omp_num_threads_from_the_command_line(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # leave this process's torch threads alone
    assert perfbench.preset_threads(["--quick", "--threads", "3"]) == 3
    assert perfbench.os.environ["OMP_NUM_THREADS"] == "3"
    assert perfbench.preset_threads([]) == 1
    assert perfbench.os.environ["OMP_NUM_THREADS"] == "1"


# ---------------------------------------------------------------------------------------------- goals
@pytest.mark.parametrize("goal, parsed", [
    (">= 0.90", (">=", 0.9)), ("<= 1.2x", ("<=", 1.2)), (">= 100x", (">=", 100.0)), ("<= 1.05", ("<=", 1.05)),
    (">= 2.00 (ideal; 2 CPUs here)", (">=", 2.0)), (">=0.8", (">=", 0.8)),
])
def test_parse_goal(goal, parsed):
    assert perfbench.parse_goal(goal) == parsed


@pytest.mark.parametrize("goal", ["0.90", "about 1", "> = 1", "== 1", ">= fast", ">= 1.2y"])
def test_parse_goal_refuses_what_it_cannot_compare(goal):
    with pytest.raises(ValueError):
        perfbench.parse_goal(goal)


# ---------------------------------------------------------------------------------------------- table
def write_result(path: Path, figure: str, goal: str, ratios: list[float]) -> Path:
    result = perfbench.Result.of(figure, "x", "what", goal, ratios, threads=1)
    path.write_text(json.dumps(result.to_json()))
    return path


@pytest.mark.parametrize("goal, median, verdict", [
    (">= 0.90", 0.95, "pass"), (">= 0.90", 0.90, "pass"), (">= 0.90", 0.89, "FAIL"),
    ("<= 1.2x", 1.1, "pass"), ("<= 1.2x", 1.2, "pass"), ("<= 1.2x", 1.3, "FAIL"),
    (">= 100x", 131.0, "pass"), (">= 100x", 99.9, "FAIL"),
])
def test_verdict_is_whether_the_median_meets_the_goal(tmp_path, goal, median, verdict):
    # min and max on the other side of the goal: only the median counts
    path = write_result(tmp_path / "r.json", "P1", goal, [median - 50, median, median + 50])
    assert table.verdict(table.read_result(path)) == verdict


def test_table_prints_one_row_per_result_sorted_by_figure(tmp_path, capsys):
    write_result(tmp_path / "b.json", "P3", ">= 100x", [131.0, 120.0, 150.0])
    write_result(tmp_path / "a.json", "env/babyai", "<= 1.20x", [1.3, 1.25, 1.4])
    write_result(tmp_path / "c.json", "P1", ">= 0.90", [0.97, 0.95, 0.99])
    (tmp_path / "notes.txt").write_text("not a result")
    assert table.main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["figure", "goal", "median", "spread", "(min-max)", "pairs", "verdict", "added",
                                "(min-max)"]
    assert [line.split()[0] for line in lines[1:]] == ["P1", "P3", "env/babyai"]
    assert lines[1].split()[2:] == [">=", "0.90", "0.97", "0.95-0.99", "3", "pass"]
    assert lines[2].split()[-4:] == ["131.00", "120.00-150.00", "3", "pass"]
    assert lines[3].split()[-4:] == ["1.30", "1.25-1.40", "3", "FAIL"]


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("{not json", "not JSON"),
    ("[1, 2]", "a JSON list, not an object"),
    (json.dumps({"figure": "P1", "name": "x", "goal": ">= 0.9"}), "no 'median'"),
    (json.dumps({"figure": "P1", "name": "x", "goal": ">= 0.9", "median": "1", "min": 1, "max": 1, "pairs": 1,
                 "compare": {"op": ">=", "value": 0.9}}), "'median' is '1'"),
    (json.dumps({"figure": "P1", "name": "x", "goal": ">= 0.9", "median": 1, "min": 1, "max": 1, "pairs": 1,
                 "compare": {"op": "~", "value": 0.9}}), "'compare'"),
])
def test_a_missing_or_malformed_file_gives_one_line_naming_it(tmp_path, capsys, content, message):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    good = write_result(tmp_path / "good.json", "P1", ">= 0.90", [1.0])
    assert table.main([str(good), str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"table.py: {path}: ") and message in err[0]
    assert "Traceback" not in captured.err


def test_a_directory_without_results_is_an_error(tmp_path, capsys):
    assert table.main([str(tmp_path)]) == 1
    assert "no *.json results" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- second goal
def env_times(wrapped_us: list[float], bare_us: list[float], steps: int) -> paired.PairedTimes:
    """Paired seconds of ``steps`` steps at the given microseconds per step, pair by pair."""
    return paired.PairedTimes([us * steps / 1e6 for us in wrapped_us], [us * steps / 1e6 for us in bare_us])


@pytest.mark.parametrize("wrapped, bare, verdict", [
    ([26.0, 27.0, 26.5], [9.0, 9.0, 9.0], "FAIL"),    # ~2.9x and ~17.5 us added: neither goal
    ([18.0, 19.0, 18.5], [9.0, 9.0, 9.0], "pass"),    # ~2.1x but 9.5 us added: the absolute goal
    ([110.0, 115.0, 118.0], [100.0, 100.0, 100.0], "pass"),  # 15 us added but 1.15x: the ratio goal
    ([140.0, 140.0, 140.0], [100.0, 100.0, 100.0], "FAIL"),  # 40 us and 1.4x
])
def test_env_result_passes_when_either_the_added_microseconds_or_the_ratio_meet_their_goal(
        tmp_path, capsys, wrapped, bare, verdict):
    import envbench

    steps = 2000
    times = env_times(wrapped, bare, steps)
    assert envbench.added_us(times, steps) == pytest.approx([w - b for w, b in zip(wrapped, bare)])
    result = envbench.env_result("babaisai", {"goto_win": times}, threads=1, steps=steps)
    assert result.added == pytest.approx([w - b for w, b in zip(wrapped, bare)])
    assert result.passes == (verdict == "pass")
    line = result.line()
    assert makefile_result_regex().match(line)
    assert line.endswith(f"(goal <= 1.20x or <= 10 us added: {verdict})")
    assert "adds " in line and " us/step [" in line
    perfbench.report(result, tmp_path / "env.json")
    data = json.loads((tmp_path / "env.json").read_text())
    assert data["verdict"] == verdict
    assert data["added_compare"] == {"op": "<=", "value": 10.0} and data["added_goal"] == "<= 10 us"
    assert data["added"]["median"] == pytest.approx(sorted(w - b for w, b in zip(wrapped, bare))[1])
    assert table.verdict(table.read_result(tmp_path / "env.json")) == verdict
    assert table.main([str(tmp_path / "env.json")]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert "<= 1.20x or <= 10 us added" in row and f" {verdict} " in row and row.split()[-2].startswith("+")


def test_env_result_pools_tasks_each_with_its_own_step_count():
    import envbench

    short, long = env_times([20.0], [10.0], 100), env_times([13.0], [10.0], 400)
    result = envbench.env_result("textworld", {"a": short, "b": long}, threads=1, steps={"a": 100, "b": 400})
    assert result.added == pytest.approx([10.0, 3.0]) and result.pairs == 2


def test_added_costs_need_their_goal_and_one_per_pair():
    with pytest.raises(ValueError, match="together"):
        perfbench.Result.of("env/x", "wrapper", "w", "<= 1.2x", [1.0], threads=1, added=[1.0])
    with pytest.raises(ValueError, match="added costs for"):
        perfbench.Result.of("env/x", "wrapper", "w", "<= 1.2x", [1.0, 2.0], threads=1, added=[1.0],
                            added_goal="<= 10 us")


def test_a_result_with_a_malformed_second_goal_is_an_error(tmp_path, capsys):
    result = perfbench.Result.of("env/x", "wrapper", "w", "<= 1.2x", [1.5], threads=1, added=[5.0],
                                 added_goal="<= 10 us")
    data = result.to_json()
    data["added_compare"] = {"op": "~", "value": 10}
    (tmp_path / "r.json").write_text(json.dumps(data))
    assert table.main([str(tmp_path / "r.json")]) == 1
    assert "'added_compare'" in capsys.readouterr().err
