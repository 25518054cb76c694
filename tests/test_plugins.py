"""Environments from outside Verlog: by import path and by an installed package's entry point, the
docs' example game (docs/examples/my_games.py) trained through verlog-train with no change to Verlog."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import cli_error_line, train_cli
from verlog.config import ConfigError, load_recipe
from verlog.logging import read_metrics
from verlog.preflight import check_buildable, check_external_env

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
SHORT = ["iterations=2", "ppo.critic_warmup_iterations=1", "env.num_envs=4", "rollout.turns_per_env=4",
         "ppo.minibatches=2", "ppo.micro_batch_size=4", "format_warmup.steps=10", "format_warmup.episodes=2",
         "model.tiny.corpus_episodes=8", "eval.episodes=4", "eval.num_envs=2", "logging.progress=false",
         "eval.baseline=false"]


def _installed_plugin(root: Path) -> Path:
    """A directory that, on the path, makes importlib.metadata see an installed distribution declaring
    the family "guess" in the verlog.envs group (what ``pip install`` of a package with that entry
    point leaves behind)."""
    info = root / "my_games_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-games-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[verlog.envs]\nguess = my_games:register_all\n")
    return root


def _env_with_path(*paths: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture
def on_path(monkeypatch, tmp_path):
    """The example module and the plugin's metadata on this process's path."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.syspath_prepend(str(_installed_plugin(tmp_path / "site")))
    return tmp_path


def test_the_docs_example_is_short_and_keeps_the_contract(on_path):
    assert len((EXAMPLES / "my_games.py").read_text().splitlines()) < 40
    cfg = load_recipe("tiny", ["env.task=my_games:GuessNumber", "env.kwargs={high: 5}"])
    check_buildable(cfg)
    check_external_env(cfg)  # gymnasium's check_env
    from verlog.envs import make_env

    env = make_env("my_games:GuessNumber", **cfg.env.env_kwargs())
    _, info = env.reset(seed=3)
    assert info["valid_actions"] == [f"guess {k}" for k in range(1, 6)]


def test_a_plugin_family_is_found_through_its_entry_point(on_path, capsys):
    from verlog.cli import train_main

    check_buildable(load_recipe("tiny", ["env.task=guess/number_16"]))
    train_main(["--list-envs"])
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("guess")]
    assert line == "guess (plugin: my_games:register_all): number, number_16"
    with pytest.raises(ConfigError, match=r"^env.task: 'guess/numbr' is not a task of the installed family 'guess'"):
        check_buildable(load_recipe("tiny", ["env.task=guess/numbr"]))


BROKEN = '''
from verlog.envs import TextEnv

class NotText(TextEnv):
    default_action = "go"
    fixed_actions = ("go",)
    progression = 0.0
    def __init__(self, **kw):
        super().__init__(**kw)
        self._instruction = "Go."
    def _reset_game(self, seed):
        return "start", {}
    def _step_game(self, action):
        return "x" * 9000, 0.0, False, False, {}  # longer than the observation space allows

class Endless(NotText):  # never ends and has no step limit: random play would never stop
    def _step_game(self, action):
        return "on", 0.0, False, False, {}

class Plain:
    pass

raise_on_import = None
'''


@pytest.mark.parametrize("task, overrides, words", [
    ("nowhere_pkg.games:Game", [], "env.task: cannot load 'nowhere_pkg.games:Game': no module named 'nowhere_pkg.games'"),
    ("broken_games:Missing", [], "env.task: cannot load 'broken_games:Missing': module broken_games has no 'Missing'"),
    ("broken_games:Plain", [], "env.task: cannot load 'broken_games:Plain': expected a TextEnv subclass"),
    ("raising_games:Game", [], "env.task: cannot load 'raising_games:Game': importing raising_games raised "
                               "RuntimeError: no luck"),
    ("my_games:GuessNumber", ["env.kwargs={colour: red}"], "env.task: my_games:GuessNumber cannot be built with the "
                                                           "run's arguments: TypeError"),
    ("broken_games:NotText", ["env.max_steps=5"], "env.task: broken_games:NotText breaks the gymnasium environment "
                                                   "contract"),
    ("my_games:GuessNumber", ["env.kwargs={max_steps: 3}"], "env.kwargs: max_steps is set by env.max_steps"),
    ("broken_games:Endless", [], "env.task: broken_games:Endless sets no step limit"),
])
def test_bad_external_envs_are_one_line_naming_the_key(tmp_path, monkeypatch, capsys, task, overrides, words):
    (tmp_path / "broken_games.py").write_text(BROKEN)
    (tmp_path / "raising_games.py").write_text("raise RuntimeError('no luck')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from verlog.cli import train_main

    line = cli_error_line(train_main, ["tiny", f"env.task={task}", *overrides, f"run_root={tmp_path / 'runs'}",
                                       *SHORT], capsys)
    assert line.startswith(f"error: {words}"), line


@pytest.mark.slow
@pytest.mark.parametrize("task", ["my_games:GuessNumber", "guess/number"])
def test_an_outside_game_trains_through_verlog_train(tmp_path, task):
    # async vector env: the env workers find the game through PYTHONPATH like the trainer does
    env = _env_with_path(EXAMPLES, _installed_plugin(tmp_path / "site"))
    train_cli("tiny", f"env.task={task}", *SHORT, f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}",
              "name=r", env=env)
    rows = read_metrics(tmp_path / "r" / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [1, 2] and all(r["rollout/turns"] == 16 for r in rows)
    assert (tmp_path / "r" / "eval.json").is_file()
    listed = subprocess.run([sys.executable, "-c", "from verlog.cli import train_main; train_main()", "--list-envs"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert "guess (plugin: my_games:register_all): number, number_16" in listed.stdout
