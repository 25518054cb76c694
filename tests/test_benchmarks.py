"""The issue-6 performance benchmarks still run: each script with ``--quick`` ends with its result line.

Only the format is checked (``<label>: <figures>: ratio <r> (goal <goal>)``), never the figures:
they depend on the machine and its load. ``--help`` is checked too (``make bench`` users read it).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINE = r"^{label}: .+: ratio \d+\.\d\d \(goal .+\)$"
BENCHMARKS = [
    ("bench_rollout.py", "P1 rollout", False),
    ("bench_context.py", "P2 context", False),
    ("bench_update.py", "P4 update", False),
    ("bench_scaling.py", "P5 scaling", True),  # two launcher runs: 1 and 2 processes
]


def _run(script: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("script,label,slow", BENCHMARKS, ids=[b[0] for b in BENCHMARKS])
def test_quick_run_prints_the_result_line(script: str, label: str, slow: bool, request) -> None:
    if slow:
        request.applymarker(pytest.mark.slow)
    proc = _run(script, "--quick")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert re.match(LINE.format(label=re.escape(label)), last), last


@pytest.mark.parametrize("script", [b[0] for b in BENCHMARKS])
def test_help_names_what_is_measured(script: str, capsys, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # the scripts import perfbench beside them
    spec = importlib.util.spec_from_file_location(script[:-3], ROOT / "benchmarks" / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--quick" in out and "goal" in out
