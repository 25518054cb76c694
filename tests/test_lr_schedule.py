"""ppo.actor_lr_schedule: the actor's learning rate changes at given iterations.

The rate in force at iteration i is that of the latest schedule entry at or before i (``actor_lr``
before the first), and it is the rate the optimizer steps with (a resumed run included: the
checkpoint's optimizer state does not bring the old rate back).
"""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from helpers import SHRUNK_TINY_RUN, train_cli
from verlog.config import load_recipe
from verlog.logging import read_metrics


def test_the_latest_entry_at_or_before_the_iteration_is_in_force():
    ppo = load_recipe("tiny", ["ppo.actor_lr=5e-4", "ppo.actor_lr_schedule={300: 3e-4, 400: 1e-4}"]).ppo
    assert [ppo.actor_lr_at(it) for it in (1, 299, 300, 399, 400, 900)] == [5e-4, 5e-4, 3e-4, 3e-4, 1e-4, 1e-4]


def _actor(run, iteration: int) -> dict[str, torch.Tensor]:
    return load_file(run / "checkpoints" / f"iter_{iteration:06d}" / "actor" / "model.safetensors")


def _moved(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def test_the_optimizer_steps_with_the_scheduled_rate(tmp_path):
    """actor_lr 1e-3 with {2: 1e-12, 3: 1e-3}: the actor moves in iterations 1 and 3, and in 2 by no more
    than a rate of 1e-12 allows (Adam's step is at most about the rate per parameter)."""
    train_cli("tiny", "iterations=3", "env.vector_mode=sync", *SHRUNK_TINY_RUN,
              "checkpoint_every=1", "ppo.actor_lr=1e-3", "ppo.actor_lr_schedule={2: 1e-12, 3: 1e-3}",
              f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", "name=lrsched")
    run = tmp_path / "lrsched"
    assert [row["ppo/actor_lr"] for row in read_metrics(run / "metrics.jsonl")] == [1e-3, 1e-12, 1e-3]
    first, second, third = (_actor(run, it) for it in (1, 2, 3))
    assert _moved(first, second) < 1e-9
    assert _moved(second, third) > 1e-5
