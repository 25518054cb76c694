"""``benchmarks/probe_goto_matching.py``: its oracle on hand-made observations, and a short run."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "probe_goto_matching.py"
_spec = importlib.util.spec_from_file_location("probe_goto_matching", SCRIPT)
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)

LEFT, RIGHT, FORWARD = 0, 1, 2


@pytest.mark.parametrize("observation,expected", [
    ("a wall 2 steps forward\na green ball 3 steps forward", (FORWARD, True)),
    ("a green ball 1 step left and 2 steps forward", (FORWARD, True)),  # ahead: close the distance first
    ("a green ball 2 steps left", (LEFT, True)),
    ("a green ball 1 step right", (RIGHT, True)),
    ("a green key 1 step right\na red ball 2 steps left", (LEFT, False)),  # same colour or type is not it
    ("", (LEFT, False)),
    # two green balls: the nearer one (1 step right) decides, whatever the listing order
    ("a green ball 3 steps left and 4 steps forward\na green ball 1 step right", (RIGHT, True)),
])
def test_oracle_action(observation: str, expected: tuple[int, bool]) -> None:
    assert probe.ACTIONS[LEFT] == "turn left" and probe.ACTIONS[RIGHT] == "turn right"
    assert probe.oracle_action("go to the green ball", observation) == expected


PICK_UP = 3


@pytest.mark.parametrize("mission,observation,expected", [
    ("pick up the grey key", "a wall 6 steps forward\na grey key 1 step forward", (PICK_UP, "k1")),
    ("pick up the grey key", "a grey key 2 steps forward", (FORWARD, "ahead")),
    ("pick up the grey key", "a grey key 2 steps left and 3 steps forward", (FORWARD, "diagonal")),
    ("pick up the grey key", "a wall 3 steps forward\na grey key 2 steps left", (LEFT, "side")),
    ("pick up the grey key", "a grey key 1 step right", (RIGHT, "side")),
    ("pick up a key", "a red ball 1 step forward\na purple key 1 step forward", (PICK_UP, "k1")),  # any key
    # no target in view: explore forward while a wall is 2+ steps ahead, else turn right
    ("pick up the grey key", "a wall 6 steps forward\na wall 1 step right", (FORWARD, "explore")),
    ("pick up the grey key", "a wall 1 step forward\na grey ball 2 steps left", (RIGHT, "explore")),
    ("pick up the grey key", "a wall 2 steps left and 1 step forward", (RIGHT, "explore")),  # not straight ahead
])
def test_pickup_oracle(mission: str, observation: str, expected: tuple[int, str]) -> None:
    assert probe.PICKUP_ACTIONS[PICK_UP] == "pick up" and probe.PICKUP_ACTIONS[FORWARD] == "go forward"
    assert probe.oracle_pickup_action(mission, observation) == expected


def test_short_run_ends_with_the_result_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--task", "babyai/easy_goto", "--steps", "2",
                           "--eval-every", "1", "--test-size", "16", "--batch", "8"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert sum(line.startswith("step ") for line in lines) == 3  # steps 0, 1, 2
    assert re.match(r"^result: babyai/easy_goto after 2 steps x 8 states: accuracy \d\.\d{3} "
                    r"\(majority action \d\.\d{3}\), \d\.\d{3} where the target is described$", lines[-1]), lines[-1]
    assert list(tmp_path.iterdir()) == []  # the model was built in a temporary directory, now gone


def test_short_pickup_run_reports_each_kind(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--recipe", "balrog_babyai_cpu", "--task", "babyai/pickup",
                           "--oracle", "pickup", "--walk", "12", "--steps", "1", "--eval-every", "1",
                           "--test-size", "48", "--batch", "8", "--heads", "1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = proc.stdout.strip().splitlines()[-1]
    assert re.match(r"^result: babyai/pickup after 1 steps x 8 states: accuracy \d\.\d{3} \(majority action "
                    r"\d\.\d{3}\), by kind ([a-z0-9]+ \d\.\d{3}(, )?)+$", result), result
    assert "explore" in result  # the walls-only states are always among 48 random ones
