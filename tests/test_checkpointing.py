"""Checkpoint hygiene: ``checkpoint_keep`` deletes old checkpoints only once a newer one is complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_e2e import SMALL, train
from verlog.checkpointing import (CHECKPOINT_MARKER, checkpoint_dir, complete_checkpoints, newest_checkpoint,
                                  prune_checkpoints)
from verlog.logging import read_metrics


def _fake(run: Path, iteration: int, *, complete: bool = True, tmp: bool = False) -> Path:
    path = checkpoint_dir(run, iteration)
    path = path.with_name(path.name + ".tmp") if tmp else path
    (path / "actor").mkdir(parents=True)
    (path / "actor" / "weights").write_bytes(b"x" * 10)
    if complete:
        (path / CHECKPOINT_MARKER).write_text("ok\n")
    return path


def test_prune_keeps_the_newest_complete_and_never_an_unfinished_or_protected_one(tmp_path):
    ckpts = [_fake(tmp_path, k) for k in (1, 2, 3, 4)]
    unfinished = _fake(tmp_path, 5, complete=False)
    writing = _fake(tmp_path, 6, tmp=True)
    assert prune_checkpoints(tmp_path, 0) == [] and complete_checkpoints(tmp_path) == ckpts
    assert prune_checkpoints(tmp_path, 2) == ckpts[:2]
    assert complete_checkpoints(tmp_path) == ckpts[2:]
    assert unfinished.is_dir() and writing.is_dir()
    # the checkpoint just written is never deleted, even when newer ones (another run's) sort after it
    assert prune_checkpoints(tmp_path, 1, protect=ckpts[2]) == []
    assert complete_checkpoints(tmp_path) == ckpts[2:]
    assert newest_checkpoint(tmp_path) == ckpts[3]


def test_prune_rejects_a_negative_count(tmp_path):
    with pytest.raises(ValueError, match="checkpoint_keep"):
        prune_checkpoints(tmp_path, -1)


def test_negative_checkpoint_keep_is_one_line(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "from verlog.cli import train_main; train_main()", "tiny",
                           "checkpoint_keep=-1", f"run_root={tmp_path}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "checkpoint_keep" in proc.stderr.strip().splitlines()[-1]


def test_run_keeps_the_newest_checkpoint_and_resumes_from_it(tmp_path):
    args = [a for a in SMALL if not a.startswith(("iterations=", "logging.dump", "eval."))] + [
        "checkpoint_keep=1", "eval.episodes=1", "eval.num_envs=1", "eval.baseline=false",
        f"model.cache_dir={tmp_path / 'cache'}", f"run_root={tmp_path}", "name=keep"]
    run = tmp_path / "keep"
    train(*args, "iterations=2")
    assert [c.name for c in (run / "checkpoints").iterdir()] == ["iter_000002"]
    train(*args, "iterations=3", f"resume={run}")  # resumes from iteration 2, deleted once 3 is complete
    assert [c.name for c in (run / "checkpoints").iterdir()] == ["iter_000003"]
    assert [r["iteration"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2, 3]
