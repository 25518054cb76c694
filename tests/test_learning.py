"""The main claim, as a test: the default recipe's agent learns easy_goto (a few minutes on 2 cores)."""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_tiny_recipe_learns_easy_goto(tmp_path):
    args = [f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", "name=learn", "eval.episodes=50",
            "logging.progress=false"]
    proc = subprocess.run([sys.executable, "-c", "from verlog.cli import train_main; train_main()", "tiny", *args],
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "learn" / "eval.json").read_text())
    before = result["untrained"]["greedy"]["success_mean"]
    after = result["trained"]["greedy"]["success_mean"]
    sampled_before = result["untrained"]["sampled"]["success_mean"]
    assert after >= 0.8, result
    assert after >= max(before, sampled_before) + 0.3, result
