"""A tiny real training run with injected env faults (async workers): it finishes, counts every fault."""

from __future__ import annotations

import os
import signal

from helpers import COUNT_TASK, FAULT_PLAN, FAULTY_TASK
from verlog.config import load_recipe
from verlog.logging import read_metrics
from verlog.trainer import Trainer

T, N, ITERATIONS = 4, 2, 3
# global step numbers (over all envs' steps while armed) -> fault; 3 x 4 x 2 = 24 training steps
SCHEDULE = {2: "raise", 7: "kill", 11: "hang", 16: "hang_hard", 21: "raise"}


def tiny_async_recipe(tmp_path, name: str, *overrides: str):
    """The tiny recipe on the faulty count task, ``N`` async env workers, ``T`` turns each, ``ITERATIONS``
    iterations; later ``overrides`` win."""
    return load_recipe("tiny", [
        f"iterations={ITERATIONS}", "ppo.critic_warmup_iterations=1", f"env.num_envs={N}", "env.vector_mode=async",
        f"env.task={FAULTY_TASK}", "env.max_steps=6", "env.instruction_style=full", "env.step_timeout_s=0.5", f"rollout.turns_per_env={T}",
        "rollout.max_response_tokens=8", "ppo.minibatches=2", "ppo.micro_batch_size=4", "format_warmup.steps=0",
        "model.tiny.corpus_episodes=2", "model.tiny.vocab_size=300", "model.tiny.hidden_size=32",
        "model.tiny.intermediate_size=64", "eval.episodes=1", "eval.num_envs=1", "eval.baseline=false",
        "logging.progress=false", "deepspeed.zero_stage=0", f"run_root={tmp_path}",
        f"model.cache_dir={tmp_path / 'cache'}", f"name={name}", *overrides])


def test_training_survives_injected_faults(tmp_path):
    FAULT_PLAN.arm(SCHEDULE, now=False)  # workers fork with the schedule; armed after set-up
    cfg = tiny_async_recipe(tmp_path, "faults")
    trainer = Trainer(cfg)
    FAULT_PLAN.armed.value = 1
    try:
        trainer.train()
    finally:
        FAULT_PLAN.armed.value = 0
    rows = read_metrics(tmp_path / "faults" / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == list(range(1, ITERATIONS + 1))
    assert [r["turns"] for r in rows] == [T * N * (k + 1) for k in range(ITERATIONS)]  # no short batch
    assert FAULT_PLAN.injected.value == len(SCHEDULE)
    assert sum(r["env/faults"] for r in rows) == len(SCHEDULE)
    assert sum(r["env/restarts"] for r in rows) == len(SCHEDULE)
    assert sum(r["episode/truncated_fraction"] * r["episodes"] for r in rows) >= len(SCHEDULE)


def test_training_survives_a_worker_killed_from_outside(tmp_path):
    # SIGKILL of a real env worker process between iterations 1 and 2 (idle, mid-episode: the next step's
    # command meets a broken pipe), as an operator or the OOM killer would do it.
    trainer = Trainer(tiny_async_recipe(tmp_path, "killed", f"env.task={COUNT_TASK}", "env.max_steps=50"))
    workers = trainer.collector.venv.unwrapped.processes
    iteration, killed = trainer.iteration, []

    def iteration_then_kill(it, logger=None):
        metrics = iteration(it, logger)
        if it == 0:
            victim = workers[1]
            os.kill(victim.pid, signal.SIGKILL)
            victim.join(timeout=10)
            killed.append(victim.exitcode)
        return metrics

    trainer.iteration = iteration_then_kill
    trainer.train()
    assert killed == [-signal.SIGKILL]
    rows = read_metrics(tmp_path / "killed" / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == list(range(1, ITERATIONS + 1))
    assert [r["turns"] for r in rows] == [T * N * (k + 1) for k in range(ITERATIONS)]  # T x N every iteration
    assert [r["rollout/turns"] for r in rows] == [T * N] * ITERATIONS
    assert [r["env/restarts"] for r in rows] == [0, 1, 0] and [r["env/faults"] for r in rows] == [0, 1, 0]
    # no time limit is reached (max_steps 50): the one truncated episode is the killed worker's
    assert [round((r["episode/truncated_fraction"] or 0.0) * r["episodes"]) for r in rows] == [0, 1, 0]
    assert (tmp_path / "killed" / "eval.json").is_file()
