"""The import contracts of setup.cfg hold: layers with no import pointing up, a config that is data,
an agent loop and a proxy independent of each other, engines that do not read the config."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _lint_imports(source_root: Path) -> subprocess.CompletedProcess:
    """Run the environment's ``lint-imports`` with this repository's contracts on the ``verlog``
    package under ``source_root`` (put first on the path, so an installed copy is not analysed)."""
    script = Path(sys.executable).parent / "lint-imports"
    path = os.pathsep.join(p for p in (str(source_root), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run([str(script), "--config", str(ROOT / "setup.cfg"), "--no-cache"],
                          cwd=source_root, env={**os.environ, "PYTHONPATH": path},
                          capture_output=True, text=True, timeout=300)


def test_setup_cfg_declares_the_contracts():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    contracts = {s.split(":", 2)[2]: cfg[s]["type"] for s in cfg.sections() if s.startswith("importlinter:contract:")}
    assert contracts == {"layers": "layers", "config-is-data": "forbidden", "agent-proxy": "independence",
                         "engines": "forbidden"}
    assert cfg["importlinter:contract:layers"]["exhaustive"] == "true"


def test_import_contracts_are_kept():
    proc = _lint_imports(ROOT)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "Contracts: 4 kept, 0 broken." in output, output


def test_an_upward_import_breaks_the_contracts(tmp_path):
    shutil.copytree(ROOT / "verlog", tmp_path / "verlog", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "verlog" / "rollout" / "hf.py", "a") as f:
        f.write("\nfrom verlog.config import TrainConfig  # an engine reading the config\n")
    (tmp_path / "verlog" / "unplaced.py").write_text('"""A module in no layer."""\n')
    proc = _lint_imports(tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "Rollout engines do not read the run config BROKEN" in output, output
    assert "verlog.rollout.hf -> verlog.config" in output, output
    assert "verlog.unplaced" in output, output  # exhaustive: every module is placed in a layer
