"""Kill a tiny training run with SIGKILL at random points and check that resuming reproduces it.

    python benchmarks/soak_resume.py [--runs 10] [--seed 0] [--root DIR]

One uninterrupted reference run (2 envs, sync vector mode, checkpoint every iteration) is timed;
then each soak run starts the same training, waits for its first complete checkpoint, sleeps a
random time in [0, 0.8 x] the time the reference needed from its first checkpoint to its exit, sends
SIGKILL (a run that already finished is reported as such and not counted as killed), resumes with ``resume=<run dir>`` and compares every metric row with the reference's
(float tolerance; timing keys excluded). Prints one line per run and finally
``resume soak: K/N runs matched (J killed before they finished)``; exit status 1 if any run did
not match.

:func:`kill_and_resume` and :func:`mismatches` are also used by ``tests/test_resume.py``.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

#: The tiny run (iterations, envs, batch) that every soak run trains.
RUN_ARGS = [
    "iterations=4", "ppo.critic_warmup_iterations=1", "env.num_envs=2", "env.vector_mode=sync",
    "rollout.turns_per_env=4", "ppo.minibatches=2", "ppo.micro_batch_size=4", "format_warmup.steps=4",
    "format_warmup.episodes=2", "model.tiny.corpus_episodes=4", "eval.episodes=1", "eval.num_envs=1",
    "eval.baseline=false", "env.max_steps=6", "checkpoint_every=1", "logging.progress=false",
]
#: Metric keys that measure wall-clock time and may differ between runs.
TIMING_PREFIXES = ("time/", "turns_per_second")


def train_command(root: Path, name: str, *extra: str) -> list[str]:
    """``verlog-train tiny`` with :data:`RUN_ARGS` under ``root/name`` (tiny model cached in ``root``)."""
    return [sys.executable, "-c", "from verlog.cli import train_main; train_main()", "tiny", *RUN_ARGS,
            f"run_root={root}", f"model.cache_dir={root / 'cache'}", f"name={name}", *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def start_and_maybe_kill(root: Path, name: str, kill_after: float | None,
                         timeout: float = 600) -> tuple[bool, float]:
    """Start a run; ``kill_after`` s after its first checkpoint is complete, SIGKILL it.

    Args:
        kill_after: seconds after ``checkpoints/iter_000001/COMPLETE`` appears; ``None``: never kill.

    Returns:
        ``(killed, tail)``: whether the process was killed (``False``: it had already exited) and the
        seconds from the first checkpoint to its end.

    Raises:
        RuntimeError: the run failed (non-zero exit without being killed) or wrote no checkpoint.
    """
    marker = root / name / "checkpoints" / "iter_000001" / "COMPLETE"
    log = (root / f"{name}.log").open("w")
    proc = subprocess.Popen(train_command(root, name), stdout=log, stderr=subprocess.STDOUT, env=_env())
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{name}: no first checkpoint (exit {proc.returncode}); see {log.name}")
        time.sleep(0.02)
    t0 = time.monotonic()
    killed = False
    if kill_after is not None:
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            killed = True
    rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    tail = time.monotonic() - t0
    log.close()
    if not killed and rc != 0:
        raise RuntimeError(f"{name}: exit status {rc}; see {log.name}")
    return killed, tail


def resume(root: Path, name: str, timeout: float = 600) -> None:
    """Resume ``root/name`` from its newest complete checkpoint; raise RuntimeError on failure."""
    proc = subprocess.run(train_command(root, name, f"resume={root / name}"), capture_output=True, text=True,
                          timeout=timeout, env=_env())
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: resume failed ({proc.returncode}): {proc.stderr[-2000:]}")


def metrics(root: Path, name: str) -> list[dict[str, Any]]:
    """The run's metric rows (one per iteration)."""
    from verlog.logging import read_metrics

    return read_metrics(root / name / "metrics.jsonl")


def mismatches(reference: list[dict[str, Any]], other: list[dict[str, Any]], rel: float = 1e-5,
               abs_tol: float = 1e-6) -> list[str]:
    """Human-readable differences between two runs' metric rows (timing keys excluded); [] if equal."""
    out = []
    if [r["iteration"] for r in reference] != [r["iteration"] for r in other]:
        return [f"iterations {[r['iteration'] for r in reference]} != {[r['iteration'] for r in other]}"]
    for a, b in zip(reference, other):
        keys = {k for k in set(a) | set(b) if not k.startswith(TIMING_PREFIXES)}
        for k in sorted(keys):
            x, y = a.get(k), b.get(k)
            if isinstance(x, float) and isinstance(y, float):
                if math.isclose(x, y, rel_tol=rel, abs_tol=abs_tol):
                    continue
            elif x == y:
                continue
            out.append(f"iteration {a['iteration']}: {k} {x!r} != {y!r}")
    return out


def kill_and_resume(root: Path, name: str, kill_after: float) -> tuple[bool, list[dict[str, Any]]]:
    """Start, SIGKILL ``kill_after`` s after the first checkpoint, resume; return (killed, metric rows)."""
    killed, _ = start_and_maybe_kill(root, name, kill_after)
    resume(root, name)
    return killed, metrics(root, name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", type=Path, default=None)
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="soak_resume_"))
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    _, tail = start_and_maybe_kill(root, "reference", None)
    reference = metrics(root, "reference")
    print(f"reference: {len(reference)} iterations, {tail:.1f} s from the first checkpoint to the end", flush=True)
    matched = killed_runs = 0
    for i in range(args.runs):
        delay = rng.uniform(0.0, 0.8 * tail)
        killed, rows = kill_and_resume(root, f"soak{i}", delay)
        diff = mismatches(reference, rows)
        matched += not diff
        killed_runs += killed
        print(f"run {i}: kill {delay:.2f} s after the first checkpoint ({'killed' if killed else 'had finished'}), "
              f"{'matched' if not diff else 'MISMATCH: ' + '; '.join(diff[:3])}", flush=True)
    print(f"resume soak: {matched}/{args.runs} runs matched ({killed_runs} killed before they finished)")
    return 0 if matched == args.runs else 1


if __name__ == "__main__":
    raise SystemExit(main())
