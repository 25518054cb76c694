"""BALROG's evaluation protocol: task lists, episode counts, resumable runs and BALROG's aggregation.

:data:`BALROG_SUITE` lists BALROG's tasks per environment with its default episode counts (BabyAI 5
tasks x 10, Baba Is AI 40 x 3, TextWorld 3 x 10, MiniHack x 5, Crafter 1 x 10, NetHack 1 x 5; source:
BALROG's ``config/config.yaml``). MiniHack's two Boxoban tasks need a download of the Boxoban levels
and are left out, so MiniHack has 6 tasks here, not 8.

:func:`run_suite` plays every (task, episode) with fixed seeds (episode i of a task is reset with
``seed + i``), appends each finished episode to ``episodes.jsonl`` at once (an interrupted run resumes
by skipping the episodes already there), and writes ``summary.json`` and ``summary.csv``. A line of
``episodes.jsonl`` is :meth:`~verlog.rollout.records.EpisodeRecord.to_json` plus the suite env's name
(``env``).

Aggregation (BALROG's ``utils.py``): the score of an env is the mean progression
over all of its episodes; its standard error is the population std over those episodes / sqrt(n); the
overall score is the unweighted mean over envs and its SE is sqrt(sum of the env SEs squared) / number
of envs; everything is reported in percent.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from verlog.evaluate import mean_and_se
from verlog.rollout.records import EpisodeRecord
from verlog.rollout.runner import EpisodeSpec, Policy, run_episodes

__all__ = [
    "BALROG_SUITE",
    "SuiteEnv",
    "aggregate",
    "episode_specs",
    "read_episodes",
    "run_suite",
    "select_suite",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SuiteEnv:
    """One environment of the suite: its task names and BALROG's episodes per task."""

    tasks: tuple[str, ...]
    episodes_per_task: int


def _babaisai_tasks() -> tuple[str, ...]:
    from verlog.envs.babaisai import BABAISAI_LEVELS

    return tuple(f"babaisai/{level}" for level in BABAISAI_LEVELS)


#: Environment -> tasks and BALROG's default episodes per task. Baba Is AI's 40 levels come from
#: :data:`verlog.envs.babaisai.BABAISAI_LEVELS` (loaded on first use).
BALROG_SUITE: dict[str, SuiteEnv | Callable[[], SuiteEnv]] = {
    "babyai": SuiteEnv(("babyai/goto", "babyai/pickup", "babyai/open", "babyai/putnext",
                        "babyai/pick_up_seq_go_to"), 10),
    "crafter": SuiteEnv(("crafter/default",), 10),
    "textworld": SuiteEnv(("textworld/treasure_hunter", "textworld/the_cooking_game", "textworld/coin_collector"), 10),
    "babaisai": lambda: SuiteEnv(_babaisai_tasks(), 3),
    "minihack": SuiteEnv(("minihack/MazeWalk-9x9", "minihack/MazeWalk-15x15", "minihack/Corridor-R3",
                          "minihack/CorridorBattle-Dark", "minihack/Quest-Easy", "minihack/Quest-Medium"), 5),
    "nle": SuiteEnv(("nle/NetHackChallenge",), 5),
}


def select_suite(envs: Sequence[str] | None = None, *, episodes_per_task: int | None = None,
                 tasks_per_env: int | None = None) -> dict[str, SuiteEnv]:
    """The suite restricted to ``envs`` (default: all six), optionally with other counts.

    Args:
        envs: environment names (keys of :data:`BALROG_SUITE`).
        episodes_per_task: overrides BALROG's count for every env (>= 1).
        tasks_per_env: keep only the first k tasks of each env (>= 1; for quick runs).

    Raises:
        ValueError: an unknown env or a count < 1.
    """
    names = list(BALROG_SUITE) if envs is None else list(envs)
    unknown = [n for n in names if n not in BALROG_SUITE]
    if unknown:
        raise ValueError(f"unknown suite envs {unknown}; known: {list(BALROG_SUITE)}")
    for label, value in (("episodes_per_task", episodes_per_task), ("tasks_per_env", tasks_per_env)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{label} must be a positive int, got {value!r}")
    out = {}
    for name in names:
        entry = BALROG_SUITE[name]
        env = entry() if callable(entry) else entry
        tasks = env.tasks[:tasks_per_env] if tasks_per_env else env.tasks
        out[name] = SuiteEnv(tuple(tasks), episodes_per_task or env.episodes_per_task)
    return out


def episode_specs(suite: Mapping[str, SuiteEnv], seed: int) -> list[EpisodeSpec]:
    """Every episode of the suite: episode i of each task is reset with ``seed + i``."""
    return [EpisodeSpec(task, seed + i, i) for env in suite.values() for task in env.tasks
            for i in range(env.episodes_per_task)]


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of an ``episodes.jsonl``; a torn last line (a crash mid-write) is dropped and logged.

    Raises:
        ValueError: a malformed line that is not the last one.
    """
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):
                logger.warning("%s: dropped a torn last line (an interrupted write)", path)
                continue
            raise ValueError(f"{path}:{number}: not a JSON line") from None
    return out


def read_episodes(path: Path) -> list[EpisodeRecord]:
    """The records of an ``episodes.jsonl`` (:meth:`~verlog.rollout.records.EpisodeRecord.from_json`);
    a torn last line (a crash mid-write) is dropped and logged.

    Raises:
        ValueError: a malformed line that is not the last one.
    """
    return [EpisodeRecord.from_json(line) for line in _read_lines(path)]


def _percent(x: float) -> float:
    return 100.0 * x if math.isfinite(x) else math.nan


def aggregate(records: Iterable[EpisodeRecord], suite: Mapping[str, SuiteEnv]) -> dict[str, Any]:
    """BALROG's summary of per-episode records (see the module docstring), in percent.

    Returns:
        ``{"overall": {"progression", "se", "envs"}, "envs": {env: {"progression", "se", "success",
        "episodes", "expected_episodes", "tasks": {task: {"progression", "se", "success", "episodes",
        "mean_steps", "invalid_rate"}}}}}``. Envs or tasks with no episodes yet have NaN scores and
        are left out of the overall mean (``overall.envs`` counts those included).
    """
    by_task: dict[str, list[EpisodeRecord]] = {}
    for r in records:
        by_task.setdefault(r.task, []).append(r)
    envs_out: dict[str, Any] = {}
    for env_name, env in suite.items():
        env_records = [r for t in env.tasks for r in by_task.get(t, [])]
        prog, se = mean_and_se([float(r.progression) for r in env_records])
        succ, _ = mean_and_se([float(r.success) for r in env_records])
        tasks_out = {}
        for task in env.tasks:
            rs = by_task.get(task, [])
            t_prog, t_se = mean_and_se([float(r.progression) for r in rs])
            t_succ, _ = mean_and_se([float(r.success) for r in rs])
            steps = sum(r.length for r in rs)
            tasks_out[task] = {"progression": _percent(t_prog), "se": _percent(t_se), "success": _percent(t_succ),
                               "episodes": len(rs), "mean_steps": steps / len(rs) if rs else math.nan,
                               "invalid_rate": sum(r.invalid_actions for r in rs) / steps if steps else math.nan}
        envs_out[env_name] = {"progression": _percent(prog), "se": _percent(se), "success": _percent(succ),
                              "episodes": len(env_records),
                              "expected_episodes": len(env.tasks) * env.episodes_per_task, "tasks": tasks_out}
    scored = [e for e in envs_out.values() if e["episodes"]]
    overall = math.nan
    overall_se = math.nan
    if scored:
        overall = sum(e["progression"] for e in scored) / len(scored)
        overall_se = math.sqrt(sum(e["se"] ** 2 for e in scored)) / len(scored)
    return {"overall": {"progression": overall, "se": overall_se, "envs": len(scored)}, "envs": envs_out}


def _write_csv(path: Path, summary: Mapping[str, Any]) -> None:
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["env", "task", "episodes", "progression_pct", "se_pct", "success_pct", "mean_steps",
                         "invalid_rate"])
        for env_name, env in summary["envs"].items():
            for task, t in env["tasks"].items():
                writer.writerow([env_name, task, t["episodes"], t["progression"], t["se"], t["success"],
                                 t["mean_steps"], t["invalid_rate"]])
            writer.writerow([env_name, "ALL", env["episodes"], env["progression"], env["se"], env["success"], "", ""])
        o = summary["overall"]
        writer.writerow(["OVERALL", "ALL", sum(e["episodes"] for e in summary["envs"].values()), o["progression"],
                         o["se"], "", "", ""])
    os.replace(tmp, path)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, allow_nan=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def run_suite(
    policy: Policy,
    suite: Mapping[str, SuiteEnv],
    out_dir: str | Path,
    *,
    seed: int,
    num_envs: int,
    make_memory: Callable[[], Any] | None = None,
    env_kwargs: Callable[[str], dict[str, Any]] | dict[str, Any] | None = None,
    record_turns: bool = False,
    run_info: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluate ``policy`` on ``suite``; resumable; writes the summary files into ``out_dir``.

    Files: ``run.json`` (``run_info`` + suite + seed: a resumed run must match it), ``episodes.jsonl``
    (one record per finished episode, appended and flushed as each ends:
    :meth:`~verlog.rollout.records.EpisodeRecord.to_json` plus ``env``), ``summary.json`` (see
    :func:`aggregate`) and ``summary.csv`` (one row per task, per env and overall).

    Args:
        policy: a :class:`~verlog.rollout.runner.Policy` (e.g. of :mod:`verlog.evaluate`).
        suite: e.g. :func:`select_suite` output.
        out_dir: the output directory (created; reused to resume).
        seed: seed of episode 0 of every task.
        num_envs: episodes run side by side.
        make_memory, env_kwargs, record_turns: see :func:`~verlog.rollout.runner.run_episodes`.
        run_info: what identifies the policy (checkpoint, decoding); stored and compared on resume.
        progress: show a tqdm progress bar.

    Returns:
        The summary (also in ``summary.json``).

    Raises:
        ValueError: ``out_dir`` holds a run with a different ``run.json`` (policy, suite or seed).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    identity = {"run": dict(run_info or {}), "seed": seed,
                "suite": {k: {"tasks": list(v.tasks), "episodes_per_task": v.episodes_per_task}
                          for k, v in suite.items()}}
    run_file = out / "run.json"
    if run_file.is_file():
        previous = json.loads(run_file.read_text(encoding="utf-8"))
        if previous != json.loads(json.dumps(identity)):
            raise ValueError(f"{out} holds an evaluation with other settings ({run_file}); use another out directory")
    else:
        _write_json(run_file, identity)
    episodes_file = out / "episodes.jsonl"
    lines = _read_lines(episodes_file)
    if episodes_file.is_file():  # rewrite without a torn last line before appending
        tmp = episodes_file.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        os.replace(tmp, episodes_file)
    done = [EpisodeRecord.from_json(line) for line in lines]
    env_of = {task: env_name for env_name, env in suite.items() for task in env.tasks}
    finished = {(r.task, r.episode_id) for r in done}
    todo = [s for s in episode_specs(suite, seed) if (s.task, s.index) not in finished]
    if done:
        logger.info("resuming %s: %d episodes done, %d to go", out, len(done), len(todo))
    bar = None
    if progress and todo:
        from tqdm import tqdm

        bar = tqdm(total=len(todo) + len(finished), initial=len(finished), desc="eval", unit="ep", dynamic_ncols=True)
    records = list(done)
    with episodes_file.open("a", encoding="utf-8") as f:
        def on_episode(record: EpisodeRecord) -> None:
            f.write(json.dumps({**record.to_json(), "env": env_of[record.task]}) + "\n")
            f.flush()
            records.append(record)
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"{record.task} prog {record.progression:.2f}")

        try:
            if todo:
                run_episodes(todo, policy, num_envs=num_envs, make_memory=make_memory, env_kwargs=env_kwargs,
                             record_turns=record_turns, on_episode=on_episode)
        finally:
            if bar is not None:
                bar.close()
    summary = aggregate(records, suite)
    _write_json(out / "summary.json", summary)
    _write_csv(out / "summary.csv", summary)
    return summary
