"""Checkpoint hygiene: ``checkpoint_keep`` deletes old checkpoints only once a newer one is complete; rewriting an
iteration's checkpoint never leaves it without one; resume validates, passes over damaged or crafted checkpoints
with one line and never unpickles."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from soak_resume import RUN_ARGS as SOAK_ARGS  # noqa: E402
from test_e2e import SMALL, train  # noqa: E402
from helpers import train_cli  # noqa: E402
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


# ---------------------------------------------------------------- replacing an iteration's checkpoint


def test_rewriting_an_iteration_leaves_a_complete_checkpoint_at_every_step(tmp_path, monkeypatch):
    from verlog import checkpointing as C

    old = _fake(tmp_path, 2)
    (old / "actor" / "weights").write_bytes(b"old")
    new = _fake(tmp_path, 2, tmp=True)
    (new / "actor" / "weights").write_bytes(b"new")
    real_rename, renames = Path.rename, []

    def killed_after_first_rename(self, target):
        if renames:
            raise KeyboardInterrupt  # the process dies between the two renames
        renames.append(target)
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", killed_after_first_rename)
    with pytest.raises(KeyboardInterrupt):
        C._replace(old, new)
    monkeypatch.setattr(Path, "rename", real_rename)
    # iteration 2 still has a complete checkpoint: the one being replaced, under its aside name
    [found] = complete_checkpoints(tmp_path)
    assert found.name == "iter_000002.old" and (found / "actor" / "weights").read_bytes() == b"old"
    C._replace(old, new)  # the next save completes the replacement and removes the aside copy
    assert complete_checkpoints(tmp_path) == [old] and (old / "actor" / "weights").read_bytes() == b"new"
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["iter_000002"]


def test_an_aside_copy_counts_only_while_its_iteration_has_no_complete_checkpoint(tmp_path):
    aside = _fake(tmp_path, 3)
    aside.rename(aside.with_name("iter_000003.old"))
    assert [c.name for c in complete_checkpoints(tmp_path)] == ["iter_000003.old"]
    _fake(tmp_path, 3)
    assert [c.name for c in complete_checkpoints(tmp_path)] == ["iter_000003"]


# ---------------------------------------------------------------- damaged and unsafe checkpoints

#: A 2-iteration run with a checkpoint after each iteration (benchmarks/soak_resume.py's tiny run).
TWO = [a for a in SOAK_ARGS if not a.startswith("iterations=")] + ["iterations=2"]


class _Payload:
    """Pickles to a call that writes ``path``: what a crafted checkpoint file would run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (self.path, "ran"))


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


DAMAGE = {
    "rng truncated": ("rng_rank0.safetensors", lambda p: _truncate(p)),
    "rng json truncated": ("rng_rank0.json", lambda p: _truncate(p)),
    "model states truncated": ("ds/actor/mp_rank_00_model_states.pt", lambda p: _truncate(p)),
    "optimizer states truncated": ("ds/critic/zero_pp_rank_0_mp_rank_00_optim_states.pt", lambda p: _truncate(p, 0.9)),
    "trainer state garbage": ("trainer_state.json", lambda p: p.write_bytes(b"\x00\xff{not json")),
    "trainer state wrong shape": ("trainer_state.json", lambda p: p.write_text('{"iteration": "two"}')),
    "rank state missing a key": ("state_rank0.json", lambda p: p.write_text('{"collector": {}}')),
    "actor weights truncated": ("actor/model.safetensors", lambda p: _truncate(p, 0.8)),
}


@pytest.fixture(scope="module")
def two_iterations(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    train(*TWO, f"run_root={root}", f"model.cache_dir={root / 'cache'}", "name=base")
    return root


def _copy_run(root: Path, name: str) -> Path:
    import shutil

    shutil.copytree(root / "base", root / name)
    return root / name


def test_an_intact_checkpoint_validates(two_iterations):
    from verlog.checkpointing import checkpoint_problem

    for k in (1, 2):
        ckpt = checkpoint_dir(two_iterations / "base", k)
        assert checkpoint_problem(ckpt, rank=0, world_size=1, engines=["actor", "critic"]) is None
    # another world size is refused too: its ranks' files do not exist
    assert "rank" in checkpoint_problem(ckpt, rank=0, world_size=2, engines=["actor"])


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_file_is_named_and_the_older_checkpoint_chosen(two_iterations, damage, capsys):
    from verlog.checkpointing import checkpoint_problem, select_checkpoint

    run = _copy_run(two_iterations, damage.replace(" ", "_"))
    rel, spoil = DAMAGE[damage]
    spoil(checkpoint_dir(run, 2) / rel)
    problem = checkpoint_problem(checkpoint_dir(run, 2), rank=0, world_size=1, engines=["actor", "critic"])
    assert problem is not None and Path(rel).name in problem and "\n" not in problem
    capsys.readouterr()
    assert select_checkpoint(run, engines=["actor", "critic"]) == checkpoint_dir(run, 1)
    [line] = capsys.readouterr().out.splitlines()
    assert "iter_000002" in line and Path(rel).name in line and line.endswith("resuming from iter_000001")


def test_a_pickle_payload_in_a_deepspeed_file_never_runs(two_iterations, tmp_path):
    import torch
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

    from verlog.checkpointing import checkpoint_problem
    from verlog.safe_load import UnsafeCheckpointFile, weights_only_loads

    marker = tmp_path / "payload_ran"
    run = _copy_run(two_iterations, "payload_unit")
    target = checkpoint_dir(run, 2) / "ds" / "actor" / "mp_rank_00_model_states.pt"
    torch.save({"module": _Payload(marker)}, target)
    problem = checkpoint_problem(checkpoint_dir(run, 2), rank=0, world_size=1, engines=["actor"])
    assert "not allowed" in problem and not marker.exists()
    # the reader DeepSpeed gets while it loads a checkpoint refuses it as well, and is put back after
    engine = type("Engine", (), {})()
    engine.checkpoint_engine = inner = TorchCheckpointEngine()
    with weights_only_loads(engine):
        with pytest.raises(UnsafeCheckpointFile):
            engine.checkpoint_engine.load(str(target), map_location="cpu")
        good = checkpoint_dir(run, 1) / "ds" / "critic" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
        assert isinstance(engine.checkpoint_engine.load(str(good), map_location="cpu"), dict)
    assert engine.checkpoint_engine is inner and not marker.exists()


def test_resume_passes_over_a_crafted_checkpoint_and_keeps_the_metrics(two_iterations, tmp_path):
    """The newest checkpoint holds a pickle payload: it must not run; the run resumes from the one before."""
    import torch

    marker = tmp_path / "payload_ran"
    run = _copy_run(two_iterations, "crafted")
    torch.save({"module": _Payload(marker)}, checkpoint_dir(run, 2) / "ds" / "actor" / "mp_rank_00_model_states.pt")
    proc = train_cli("tiny", *TWO, f"run_root={two_iterations}", f"model.cache_dir={two_iterations / 'cache'}",
                     "name=crafted", f"resume={run}", check=False)
    assert not marker.exists()
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if "passed over" in line]
    assert len(lines) == 1 and "iter_000002" in lines[0] and lines[0].endswith("resuming from iter_000001")
    assert [r["iteration"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2]
    # iteration 2 was trained again and its checkpoint replaced by a sound one
    from verlog.checkpointing import checkpoint_problem

    assert checkpoint_problem(checkpoint_dir(run, 2), rank=0, world_size=1, engines=["actor", "critic"]) is None
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_000001", "iter_000002"]


def test_resume_without_a_sound_checkpoint_is_one_line_and_touches_nothing(two_iterations):
    run = _copy_run(two_iterations, "all_damaged")
    _truncate(checkpoint_dir(run, 2) / "rng_rank0.safetensors")
    (checkpoint_dir(run, 1) / "trainer_state.json").write_text("garbage")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    proc = train_cli("tiny", *TWO, f"run_root={two_iterations}", f"model.cache_dir={two_iterations / 'cache'}",
                     "name=all_damaged", f"resume={run}", timeout=300, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("[")]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "iter_000002" in lines[0] and "iter_000001" in lines[0] and "trainer_state.json" in lines[0]
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before  # metrics.jsonl kept whole
