"""The main claim, as a test: the default recipe's agent learns easy_goto (a few minutes on 2 cores)."""

import json
from pathlib import Path

import pytest

from helpers import train_cli
from verlog.logging import read_metrics


def training_summary(run: Path) -> str:
    """One line for a failure message: the first iteration's metrics and recent success every 5 iterations."""
    rows = read_metrics(run / "metrics.jsonl")
    if not rows:
        return "no metrics"
    curve = " ".join(f"{r['iteration']}:{r['episode/success_recent100']:.2f}" for r in rows[4::5])
    return (f"{len(rows)} iterations, {rows[-1]['turns']} turns; success_recent100 by iteration: {curve}; "
            f"last invalid-action rate {rows[-1]['rollout/invalid_action_rate']:.3f}, "
            f"entropy {rows[-1].get('actor/entropy', float('nan')):.3f}")


@pytest.mark.slow
def test_tiny_recipe_learns_easy_goto(tmp_path):
    args = [f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", "name=learn", "eval.episodes=50",
            "logging.progress=false"]
    train_cli("tiny", *args, timeout=1500)
    result = json.loads((tmp_path / "learn" / "eval.json").read_text())
    before = result["untrained"]["greedy"]["success_mean"]
    after = result["trained"]["greedy"]["success_mean"]
    sampled_before = result["untrained"]["sampled"]["success_mean"]
    summary = training_summary(tmp_path / "learn")  # says how training went when the evaluation falls short
    assert after >= 0.8, (summary, result)
    assert after >= max(before, sampled_before) + 0.3, (summary, result)
