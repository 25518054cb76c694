"""BALROG's evaluation protocol: aggregation on hand-worked numbers, resume, files, random floor, CLI."""

import csv
import json
import math
import subprocess
import sys

import pytest

from helpers import COUNT_TASK
from verlog.evaluate import RandomPolicy
from verlog.rollout.records import EpisodeRecord
from verlog.rollout.runner import EpisodeSpec, run_episodes
from verlog.suite import BALROG_SUITE, SuiteEnv, aggregate, episode_specs, read_episodes, run_suite, select_suite


def rec(task, episode, progression, success=None, length=4, invalid=0):
    return EpisodeRecord.from_json({
        "task": task, "episode": episode, "seed": episode, "return": 0.0, "length": length, "invalid": invalid,
        "success": progression >= 1 if success is None else success, "progression": progression,
        "truncated": False})


def test_aggregate_matches_balrog_by_hand():
    suite = {"a": SuiteEnv(("a/x", "a/y"), 2), "b": SuiteEnv(("b/z",), 2)}
    records = [rec("a/x", 0, 1.0), rec("a/x", 1, 0.0), rec("a/y", 0, 1.0), rec("a/y", 1, 1.0),
               rec("b/z", 0, 0.5, invalid=2), rec("b/z", 1, 0.25)]
    s = aggregate(records, suite)
    # env a: mean of its 4 episodes = 0.75; population std = sqrt(0.1875); se = std / 2
    assert s["envs"]["a"]["progression"] == pytest.approx(75.0)
    assert s["envs"]["a"]["se"] == pytest.approx(100 * math.sqrt(0.1875) / 2)
    # env b: mean 0.375, std 0.125, se = 0.125 / sqrt(2)
    assert s["envs"]["b"]["progression"] == pytest.approx(37.5)
    assert s["envs"]["b"]["se"] == pytest.approx(100 * 0.125 / math.sqrt(2))
    assert s["envs"]["b"]["success"] == 0.0
    assert s["envs"]["b"]["tasks"]["b/z"]["invalid_rate"] == pytest.approx(2 / 8)
    # overall: unweighted mean over envs; se = sqrt(sum se^2) / n_envs
    assert s["overall"]["progression"] == pytest.approx((75.0 + 37.5) / 2)
    se_a, se_b = s["envs"]["a"]["se"], s["envs"]["b"]["se"]
    assert s["overall"]["se"] == pytest.approx(math.sqrt(se_a**2 + se_b**2) / 2)
    assert s["envs"]["a"]["tasks"]["a/y"]["progression"] == pytest.approx(100.0)


def test_aggregate_leaves_unplayed_envs_out_of_the_overall_score():
    suite = {"a": SuiteEnv(("a/x",), 1), "b": SuiteEnv(("b/z",), 1)}
    s = aggregate([rec("a/x", 0, 0.5)], suite)
    assert s["overall"] == {"progression": pytest.approx(50.0), "se": pytest.approx(0.0), "envs": 1}
    assert s["envs"]["b"]["episodes"] == 0 and math.isnan(s["envs"]["b"]["progression"])


def test_suite_lists_balrog_counts():
    suite = select_suite(["babyai", "textworld", "minihack", "crafter", "nle"])
    assert len(suite["babyai"].tasks) == 5 and suite["babyai"].episodes_per_task == 10
    assert suite["textworld"].episodes_per_task == 10 and len(suite["textworld"].tasks) == 3
    assert suite["minihack"].episodes_per_task == 5 and not any("Boxoban" in t for t in suite["minihack"].tasks)
    assert suite["crafter"].episodes_per_task == 10 and suite["nle"].episodes_per_task == 5
    small = select_suite(["babyai"], episodes_per_task=2, tasks_per_env=1)
    assert small == {"babyai": SuiteEnv(("babyai/goto",), 2)}
    specs = episode_specs(small, seed=7)
    assert [(s.task, s.seed, s.index) for s in specs] == [("babyai/goto", 7, 0), ("babyai/goto", 8, 1)]
    with pytest.raises(ValueError, match="unknown suite envs"):
        select_suite(["chess"])
    with pytest.raises(ValueError, match="episodes_per_task"):
        select_suite(["babyai"], episodes_per_task=0)
    assert set(BALROG_SUITE) == {"babyai", "crafter", "textworld", "babaisai", "minihack", "nle"}


def test_every_suite_task_is_a_registered_env():
    from verlog.envs.registry import is_registered

    suite = select_suite()
    assert len(suite["babaisai"].tasks) == 40 and suite["babaisai"].episodes_per_task == 3
    missing = [t for env in suite.values() for t in env.tasks if not is_registered(t)]
    assert missing == []


def test_random_policy_episodes_do_not_depend_on_batching():
    specs = [EpisodeSpec("babyai/goto", 100 + i, i) for i in range(6)]
    one = [r.to_json() for r in run_episodes(specs, RandomPolicy(3), num_envs=1)]
    many = run_episodes(specs, RandomPolicy(3), num_envs=4)
    assert one == [r.to_json() for r in many]
    assert sorted({r.env_index for r in many}) == [0, 1, 2, 3]  # the slots differ, the episodes do not
    other = [r.to_json() for r in run_episodes(specs, RandomPolicy(4), num_envs=4)]
    assert other != one


def test_turn_log_is_recorded_on_request():
    specs = [EpisodeSpec(COUNT_TASK, 0, 0)]
    (record,) = run_episodes(specs, RandomPolicy(0), num_envs=1, env_kwargs={"max_steps": 3}, record_turns=True)
    assert len(record.turns) == record.length
    assert record.turns[0]["observation"] == "count 0"
    assert all(t["reply"] == f"ACTION: {t['action']}" for t in record.turns)
    assert sum(t["reward"] for t in record.turns) == pytest.approx(record.episode_return)
    assert record.to_json()["turns"] == record.turns
    (plain,) = run_episodes(specs, RandomPolicy(0), num_envs=1, env_kwargs={"max_steps": 3})
    assert plain.turns is None and "turns" not in plain.to_json()


class _Crash(RuntimeError):
    pass


class _CrashingPolicy(RandomPolicy):
    """Raises on the turn numbered ``crash_at`` (a simulated interruption)."""

    def __init__(self, seed, crash_at):
        super().__init__(seed)
        self.crash_at = crash_at

    def act(self, memories, infos, specs, turn):
        if turn == self.crash_at:
            raise _Crash("interrupted")
        return super().act(memories, infos, specs, turn)


def test_interrupted_run_resumes_where_it_stopped(tmp_path):
    suite = {"count": SuiteEnv((COUNT_TASK,), 12)}
    kwargs = {"max_steps": 3}
    full = run_suite(RandomPolicy(1), suite, tmp_path / "full", seed=0, num_envs=3, env_kwargs=kwargs, progress=False)
    with pytest.raises(_Crash):
        run_suite(_CrashingPolicy(1, crash_at=5), suite, tmp_path / "cut", seed=0, num_envs=3, env_kwargs=kwargs,
                  progress=False)
    partial = read_episodes(tmp_path / "cut" / "episodes.jsonl")
    assert 0 < len(partial) < 12
    # a torn last line (killed mid-write) is dropped, not fatal
    with (tmp_path / "cut" / "episodes.jsonl").open("a") as f:
        f.write('{"task": "test/cou')
    resumed = run_suite(RandomPolicy(1), suite, tmp_path / "cut", seed=0, num_envs=3, env_kwargs=kwargs, progress=False)
    assert resumed == full
    episodes = read_episodes(tmp_path / "cut" / "episodes.jsonl")
    assert sorted(r.episode_id for r in episodes) == list(range(12))  # each exactly once
    by_index = {r.episode_id: r for r in read_episodes(tmp_path / "full" / "episodes.jsonl")}
    assert all(by_index[r.episode_id] == r for r in episodes)


def test_resume_refuses_other_settings(tmp_path):
    suite = {"count": SuiteEnv((COUNT_TASK,), 2)}
    run_suite(RandomPolicy(1), suite, tmp_path, seed=0, num_envs=1, run_info={"policy": "a"}, progress=False)
    with pytest.raises(ValueError, match="other settings"):
        run_suite(RandomPolicy(1), suite, tmp_path, seed=1, num_envs=1, run_info={"policy": "a"}, progress=False)


def test_summary_files(tmp_path):
    suite = {"count": SuiteEnv((COUNT_TASK,), 4)}
    summary = run_suite(RandomPolicy(2), suite, tmp_path, seed=0, num_envs=2, env_kwargs={"max_steps": 2},
                        progress=False)
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(json.dumps(summary))
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert [(r["env"], r["task"]) for r in rows] == [("count", COUNT_TASK), ("count", "ALL"), ("OVERALL", "ALL")]
    assert float(rows[-1]["progression_pct"]) == pytest.approx(summary["overall"]["progression"])
    records = read_episodes(tmp_path / "episodes.jsonl")
    lines = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert {line["env"] for line in lines} == {"count"} and len(records) == 4
    # a line is the record's JSON plus its env, and reads back as the same record
    assert [{k: v for k, v in line.items() if k != "env"} for line in lines] == [r.to_json() for r in records]
    assert list(lines[0]) == ["task", "episode", "seed", "return", "length", "invalid", "success", "progression",
                              "truncated", "env"]


def test_cli_random_floor_on_babyai(tmp_path):
    out = tmp_path / "ev"
    cmd = [sys.executable, "-c", "from verlog.cli import eval_main; eval_main()", "random", "suite=balrog",
           "envs=babyai", "episodes_per_task=1", "tasks_per_env=2", f"out={out}", "num_envs=2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "overall" in proc.stdout
    assert len(read_episodes(out / "episodes.jsonl")) == 2
    bad = subprocess.run(cmd[:4] + ["suite=balrog", "envs=chess"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "unknown suite envs" in bad.stderr and "Traceback" not in bad.stderr
    bad = subprocess.run(cmd[:4] + ["suite=balrog", "episodes_per_task=x"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "episodes_per_task" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_cli_suite_of_one_env_prints_tasks_and_references(tmp_path, capsys):
    from helpers import cli_error_line
    from verlog.cli import eval_main
    from verlog.leaderboard import LEADERBOARD, RANDOM_FLOOR

    out = tmp_path / "ev"
    eval_main(["random", "suite=balrog_babyai", "episodes=2", f"out={out}", "num_envs=5", "logging.progress=false"])
    printed = capsys.readouterr().out
    records = read_episodes(out / "episodes.jsonl")
    tasks = BALROG_SUITE["babyai"].tasks
    assert sorted(r.task for r in records) == sorted(tasks * 2)  # episodes=2 counts per task
    lines = printed.splitlines()
    for task in tasks:
        (line,) = [x for x in lines if x.split() and x.split()[0] == task]
        assert line.rstrip().endswith("(2 episodes)")
    for ref in (*LEADERBOARD["babyai"], RANDOM_FLOOR["babyai"]):
        (line,) = [x for x in lines if x.strip().startswith(ref.name)]
        assert f"{ref.score:.1f} %" in line
    score = json.loads((out / "summary.json").read_text())["envs"]["babyai"]["progression"]
    for ref in LEADERBOARD["babyai"]:  # each row says which side of this run it is
        (line,) = [x for x in lines if x.strip().startswith(ref.name)]
        assert line.endswith("(below this run)" if score > ref.score else "(at or above this run)")
    assert "envs: suite=balrog_babyai already names its env" in cli_error_line(
        eval_main, ["random", "suite=balrog_babyai", "envs=crafter"], capsys)
    assert "suite: expected 'balrog' or 'balrog_<env>'" in cli_error_line(eval_main, ["random", "suite=chess"], capsys)
    assert "episodes: expected a positive int" in cli_error_line(
        eval_main, ["random", "suite=balrog_babyai", "episodes=x"], capsys)
