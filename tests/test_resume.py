"""Exact resume: a run killed with SIGKILL after a checkpoint and resumed logs the same metrics."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import soak_resume as soak  # noqa: E402


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    _, tail = soak.start_and_maybe_kill(root, "reference", None)
    return root, tail, soak.metrics(root, "reference")


def test_sigkilled_run_resumes_to_the_same_metrics(reference):
    root, tail, ref = reference
    assert [r["iteration"] for r in ref] == [1, 2, 3, 4]
    delay = random.Random().uniform(0.0, 0.6 * tail)  # a random point before the run would end
    for attempt in range(3):  # a run faster than the reference (the load changed) may end before the kill:
        name = f"killed{attempt}"  # kill the next one earlier
        killed, rows = soak.kill_and_resume(root, name, delay)
        if killed:
            break
        delay /= 4
    assert killed, "three runs, each killed earlier than the last, finished before their kill"
    assert soak.mismatches(ref, rows) == []
    state = json.loads((root / name / "checkpoints" / "iter_000004" / "state_rank0.json").read_text())
    assert {"collector", "recent_success", "turns_done"} <= set(state)
    assert len(state["collector"]["envs"]) == 2 and "replies" in state["collector"]["envs"][0]


def test_mismatches_reports_a_changed_metric_but_not_timings(reference):
    _, _, ref = reference
    other = [dict(r) for r in ref]
    other[1]["time/update"] = 123.0
    other[1]["turns_per_second"] = 1.0
    assert soak.mismatches(ref, other) == []
    other[2]["critic/value_loss"] = ref[2]["critic/value_loss"] + 1e-2
    assert len(soak.mismatches(ref, other)) == 1


def test_resume_without_a_complete_checkpoint_fails(tmp_path):
    (tmp_path / "r" / "checkpoints" / "iter_000001.tmp").mkdir(parents=True)
    (tmp_path / "r" / "checkpoints" / "iter_000001.tmp" / "COMPLETE").write_text("ok\n")
    from verlog.trainer import newest_checkpoint

    assert newest_checkpoint(tmp_path / "r") is None  # a half-renamed checkpoint is never used


def _start(root: Path, name: str, *extra: str):
    import subprocess

    return subprocess.Popen(soak.train_command(root, name, *extra), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=soak._env())


def _wait_for_metrics(path: Path, proc, timeout: float = 300) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not (path.is_file() and path.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before its first iteration"
        time.sleep(0.02)


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_signal_finishes_the_iteration_checkpoints_and_prints_how_to_resume(reference, signame):
    import shlex
    import signal
    import subprocess

    root, _, ref = reference
    name = f"sig_{signame}"
    proc = _start(root, name, "checkpoint_every=0")  # only the signal writes a checkpoint before the end
    _wait_for_metrics(root / name / "metrics.jsonl", proc)
    proc.send_signal(getattr(signal, signame))
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    ckpts = [c for c in (root / name / "checkpoints").glob("iter_*") if (c / "COMPLETE").is_file()]
    assert len(ckpts) == 1 and int(ckpts[0].name.split("_")[1]) < 4, out[-2000:]
    assert not (root / name / "eval.json").exists()  # stopped early: no final evaluation
    lines = [line for line in out.splitlines() if "resume with:" in line]
    assert len(lines) == 1, out[-2000:]
    command = shlex.split(lines[0].split("resume with:", 1)[1])
    assert command[0] == "verlog-train" and command[2] == f"resume={root / name}"
    if signame == "SIGTERM":  # the printed command continues the run exactly
        done = subprocess.run([sys.executable, "-c", "from verlog.cli import train_main; train_main()",
                               *command[1:]], capture_output=True, text=True, timeout=600, env=soak._env())
        assert done.returncode == 0, done.stderr[-3000:]
        assert soak.mismatches(ref, soak.metrics(root, name)) == []


def test_rng_states_round_trip_without_pickle(tmp_path):
    import numpy as np
    import torch

    from verlog.resume import load_rng_states, save_rng_states

    gen = torch.Generator().manual_seed(3)
    random.seed(1), np.random.seed(2), torch.manual_seed(4), torch.rand(3, generator=gen)
    np.random.standard_normal()  # leaves a cached gaussian in numpy's legacy state
    save_rng_states(tmp_path, 0, {"update": gen})
    def draw():
        return (random.random(), float(np.random.standard_normal()), torch.rand(2).tolist(),
                torch.rand(2, generator=gen).tolist())

    draws = draw()
    random.seed(9), np.random.seed(9), torch.manual_seed(9), gen.manual_seed(9)
    load_rng_states(tmp_path, 0, {"update": gen})
    assert draw() == draws
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rng_rank0.json", "rng_rank0.safetensors"]
    with pytest.raises(FileNotFoundError, match="rng_rank1"):
        load_rng_states(tmp_path, 1, {})
