"""``benchmarks/probe_policy_lines.py``: its distance by hand, and a run on a freshly built tiny model."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "probe_policy_lines.py"
_spec = importlib.util.spec_from_file_location("probe_policy_lines", SCRIPT)
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)


def test_total_variation_by_hand() -> None:
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.3, 0.5])
    assert probe.total_variation(p, q) == pytest.approx(0.3)  # 0.5 * (0.3 + 0 + 0.3)
    assert probe.total_variation(p, p) == 0.0


def test_run_on_a_tiny_model(tmp_path: Path) -> None:
    from verlog import builders
    from verlog.config import load_recipe

    model_dir = builders.build_tiny_for(load_recipe("tiny", [f"model.cache_dir={tmp_path}"]))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), str(model_dir), "--recipe", "tiny"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    rows = [line for line in lines if line.startswith("  '")]
    assert len(rows) == len(probe.SINGLE)
    for row in rows:  # each row's six probabilities sum to 1 (to the two printed decimals)
        assert sum(float(v) for v in re.findall(r"=(\d\.\d\d)", row)) == pytest.approx(1.0, abs=0.04)
    match = re.match(r"^result: mean total variation when the first line changes (\d\.\d{3}), when the last line "
                     r"changes (\d\.\d{3}) \(210 pairs each\)$", lines[-1])
    assert match, lines[-1]
    assert all(0.0 <= float(x) <= 1.0 for x in match.groups())
