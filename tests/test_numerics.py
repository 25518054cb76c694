"""Numerical faults: a non-finite loss skips the optimizer step (weights untouched), is counted, and
too many skips in a row stop the run with a checkpoint."""

from __future__ import annotations

import math

import pytest
import torch

import verlog.algos.objectives as O
import verlog.trainer as T
from verlog.config import load_recipe
from verlog.logging import read_metrics

ARGS = [
    "iterations=3", "ppo.critic_warmup_iterations=1", "env.num_envs=2", "env.vector_mode=sync",
    "rollout.turns_per_env=4", "ppo.minibatches=2", "ppo.micro_batch_size=4", "format_warmup.steps=0",
    "model.tiny.corpus_episodes=4", "eval.episodes=1", "eval.num_envs=1", "eval.baseline=false",
    "env.max_steps=6", "checkpoint_every=0", "logging.progress=false",
]


def _poisoned_trainer(tmp_path, monkeypatch, poison, *extra):
    """A Trainer whose policy loss is NaN whenever ``poison()`` is true."""
    real = O.ppo_policy_loss

    def ppo_policy_loss(*args, **kwargs):
        pg, stats = real(*args, **kwargs)
        return (pg * float("nan") if poison() else pg), stats

    monkeypatch.setattr(O, "ppo_policy_loss", ppo_policy_loss)
    cfg = load_recipe("tiny", ARGS + [f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", "name=nan",
                                      *extra])
    return T.Trainer(cfg)


def _params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def test_nan_loss_skips_the_step_leaves_weights_and_the_run_goes_on(tmp_path, monkeypatch):
    it = {"n": 0}
    trainer = _poisoned_trainer(tmp_path, monkeypatch, lambda: it["n"] == 2)
    real_update, seen = T.update, {}

    def update(*args, **kwargs):
        it["n"] += 1
        before = (_params(trainer.actor.module), _params(trainer.critic.module))
        out = real_update(*args, **kwargs)
        seen[it["n"]] = (before, (_params(trainer.actor.module), _params(trainer.critic.module)))
        return out

    monkeypatch.setattr(T, "update", update)
    trainer.train()
    (actor0, critic0), (actor1, critic1) = seen[2]
    assert all(torch.equal(actor0[n], actor1[n]) for n in actor0)  # the poisoned actor steps were skipped
    assert any(not torch.equal(critic0[n], critic1[n]) for n in critic0)  # the critic still trained
    (a0, _), (a1, _) = seen[3]
    assert any(not torch.equal(a0[n], a1[n]) for n in a0)  # the next iteration updates the actor again
    assert all(bool(torch.isfinite(p).all()) for p in a1.values())
    rows = read_metrics(tmp_path / "nan" / "metrics.jsonl")
    steps = float(trainer.cfg.ppo.epochs * trainer.cfg.ppo.minibatches)  # actor steps of iteration 2
    assert [r["update/skipped_steps"] for r in rows] == [0.0, steps, 0.0]
    assert rows[1]["update/skipped_steps_consecutive"] == steps
    assert rows[-1]["update/skipped_steps_total"] == steps and rows[-1]["update/skipped_steps_consecutive"] == 0.0
    assert "actor/pg_loss" not in rows[1] and math.isfinite(rows[2]["actor/pg_loss"])
    assert (tmp_path / "nan" / "eval.json").is_file()  # the run finished


def test_too_many_skips_in_a_row_stop_the_run_with_a_checkpoint(tmp_path, monkeypatch):
    trainer = _poisoned_trainer(tmp_path, monkeypatch, lambda: True, "ppo.max_skipped_steps=1")
    with pytest.raises(T.NumericalFault, match=r"optimizer steps in a row.*max_skipped_steps=1"):
        trainer.train()
    ckpt = tmp_path / "nan" / "checkpoints" / "iter_000002"
    assert (ckpt / "COMPLETE").is_file()
    rows = read_metrics(tmp_path / "nan" / "metrics.jsonl")
    steps = float(trainer.cfg.ppo.epochs * trainer.cfg.ppo.minibatches)
    assert rows[-1]["iteration"] == 2 and rows[-1]["update/skipped_steps"] == steps
