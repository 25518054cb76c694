"""Every algorithm of the family trains the tiny task end to end (`algorithm=<name>` switches it)."""

import math
import subprocess
import sys

import pytest
import torch

from test_e2e import train
from verlog.batch import ScoredBatch
from verlog.algos.registry import ALGORITHMS
from verlog.config import load_recipe
from verlog.logging import read_metrics
from verlog.models import load_actor

SMALL = [
    "iterations=2", "env.num_envs=4", "env.vector_mode=sync", "algo.group_size=2", "ppo.minibatches=2",
    "ppo.micro_batch_size=4", "format_warmup.steps=60", "format_warmup.episodes=2", "model.tiny.corpus_episodes=4",
    "eval.episodes=2", "eval.num_envs=2", "env.max_steps=6", "logging.progress=false", "eval.baseline=false",
    "logging.dump_batch_every=1", "ppo.epochs=2",
]
EXTRA = {"dapo": ["algo.overlong_penalty=true", "algo.overlong_cache_tokens=4", "ppo.clip_high=0.28"],
         "grpo": ["algo.loss_aggregation=seq-mean-token-mean"], "rloo": ["algo.loss_aggregation=seq-mean-token-sum"]}


@pytest.mark.parametrize("name", [a for a in ALGORITHMS if a != "ppo"])
def test_critic_free_algorithm_trains_end_to_end(tmp_path, name):
    train(*SMALL, f"algorithm={name}", f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", "name=r",
          *EXTRA.get(name, []))
    run = tmp_path / "r"
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["phase"] for r in rows] == [name, name]
    assert rows[-1]["turns"] == sum(r["rollout/turns"] for r in rows)
    for row in rows:
        assert row["rollout/turns"] >= row["episodes"] and "critic/value_loss" not in row
        if "update/skipped_no_signal" not in row:  # dapo skips an update when no group has a signal
            assert row["algo/groups"] >= 1 and math.isfinite(row["actor/pg_loss"])
    trained = [r for r in rows if "update/skipped_no_signal" not in r]
    assert all(("algo/anchor_groups" in r) == (name == "gigpo") for r in trained)
    assert all(("actor/seq_ratio_mean" in r) == (name == "gspo") for r in trained)
    assert all(("algo/refills" in r) == (name == "dapo") for r in rows)
    # a learning signal (some group whose returns differ) moves the weights; none leaves them
    signal = any(r["algo/no_signal_groups"] < r["algo/groups"] for r in trained)

    ckpt = run / "checkpoints" / "iter_000002"
    assert (ckpt / "actor" / "model.safetensors").is_file() and not (ckpt / "critic").exists()
    before, after = load_actor(run / "format_warmup"), load_actor(ckpt / "actor")
    changed = [not torch.equal(a, b) for a, b in zip(before.parameters(), after.parameters())]
    assert any(changed) == signal

    scored = ScoredBatch.load(run / "batches" / "iter_000002.pt")
    batch = scored.batch
    pad = ~batch.turns
    assert scored.values is None and scored.returns is None and batch.group_ids is not None
    assert float(scored.advantages[pad].abs().sum()) == 0.0
    assert float(scored.advantages[~batch.response_mask].abs().sum()) == 0.0


def test_gigpo_refuses_an_env_without_state_keys(tmp_path):
    # the docs' example game reports no state key (every built-in family now does)
    import os
    from pathlib import Path

    examples = Path(__file__).resolve().parent.parent / "docs" / "examples"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(examples), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", "from verlog.cli import train_main; train_main()", "tiny",
                           "algorithm=gigpo", "env.task=my_games:GuessNumber", f"run_root={tmp_path}"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert "algo.algorithm" in lines[-1] and "state key" in lines[-1] and "Traceback" not in proc.stderr


def test_algorithm_alias_and_group_checks():
    assert load_recipe("tiny", ["algorithm=gigpo"]).algo.algorithm == "gigpo"
    from verlog.config import ConfigError
    from verlog.preflight import check_buildable

    with pytest.raises(ConfigError, match="algo.group_size"):
        check_buildable(load_recipe("tiny", ["algorithm=grpo", "algo.group_size=3"]))  # 32 envs
    with pytest.raises(ConfigError, match="algo.algorithm"):
        check_buildable(load_recipe("tiny", ["algorithm=a2c"]))


def test_dapo_without_any_learning_signal_skips_the_update(tmp_path):
    # a barely format-warmed model writes no valid action: every return is the same, every group dropped
    args = [a for a in SMALL if not a.startswith("format_warmup.steps")] + ["format_warmup.steps=1"]
    train(*args, "algorithm=dapo", "algo.max_refills=1", f"run_root={tmp_path}",
          f"model.cache_dir={tmp_path / 'cache'}", "name=r")
    rows = read_metrics(tmp_path / "r" / "metrics.jsonl")
    for row in rows:
        assert row["update/skipped_no_signal"] == 1.0 and row["algo/kept_groups"] == 0.0
        assert row["algo/refills"] == 1.0 and row["algo/dropped_groups"] == 4.0  # 2 groups x 2 rounds
        assert row["rollout/turns"] == 2 * 4 * 6  # both rounds' turns are counted (4 envs x 6 steps)
    before = load_actor(tmp_path / "r" / "format_warmup")
    after = load_actor(tmp_path / "r" / "checkpoints" / "iter_000002" / "actor")
    assert all(torch.equal(a, b) for a, b in zip(before.parameters(), after.parameters()))
