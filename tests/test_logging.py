"""Metric sinks and plots."""

import json
import math

from verlog.logging import MetricLogger, read_metrics
from verlog.plots import plot_run


def test_jsonl_lines_nan_as_null_and_resume_dedup(tmp_path):
    log = MetricLogger(tmp_path, total_iterations=3, progress=False)
    log.log({"iteration": 1, "turns": 10, "episode/success": math.nan, "critic/explained_variance": 0.5})
    log.log({"iteration": 2, "turns": 20, "episode/success": 0.5})
    log.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["episode/success"] is None
    # a resumed run appends and re-logs iteration 2: the later line wins
    log = MetricLogger(tmp_path, total_iterations=3, start_iteration=1, progress=False)
    log.log({"iteration": 2, "turns": 20, "episode/success": 0.75})
    log.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [1, 2] and rows[1]["episode/success"] == 0.75


def test_wandb_offline_run_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    log = MetricLogger(tmp_path, total_iterations=1, progress=False,
                       wandb_config={"project": "verlog-test", "mode": "offline", "name": "t", "config": {"a": 1}})
    log.log({"iteration": 1, "turns": 5, "episode/return": 1.0})
    log.close()
    assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_plot_writes_png(tmp_path):
    log = MetricLogger(tmp_path, total_iterations=2, progress=False)
    for i in (1, 2):
        log.log({"iteration": i, "turns": 16 * i, "phase": "ppo", "episode/success": 0.5 * i,
                 "critic/explained_variance": 0.1})
    log.close()
    (png,) = plot_run(tmp_path)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
