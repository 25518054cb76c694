"""GAE-curve figures: data extraction on hand-made batches (hand-worked numbers), verlog-plot on a
tiny run, and the notebook executed headless on that run."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import train_cli
from verlog.batch import ScoredBatch, TurnBatch
from verlog.cli import plot_main
from verlog.gae_figures import (
    episode_positions,
    explained_variance_series,
    gae_settings,
    gae_sweep,
    group_by_position,
    turn_points,
    write_gae_figures,
)

REPO = Path(__file__).resolve().parents[1]
FIGURES = ("explained_variance.png", "values_vs_returns.png", "advantages_by_position.png", "gae_sweep.png")


def make_batch(rewards, lengths, terminated, truncated=None, R=2) -> TurnBatch:
    """A TurnBatch from [T][N] rewards/lengths/flags (no values yet); prompts and ids are dummies."""
    T, N = len(rewards), len(rewards[0])
    truncated = truncated or [[False] * N for _ in range(T)]
    return TurnBatch.from_turns(
        prompts=[[[1] for _ in range(N)] for _ in range(T)],
        responses=[[[2] * lengths[t][n] for n in range(N)] for t in range(T)],
        logprobs=[[[0.0] * lengths[t][n] for n in range(N)] for t in range(T)],
        rewards=rewards, terminated=terminated, truncated=truncated,
        episode_ids=[[0] * N for _ in range(T)], action_valid=[[True] * N for _ in range(T)],
        cut_at_max_tokens=[[False] * N for _ in range(T)], bootstrap_prompts={}, pad_id=0, max_response_tokens=R,
    )


# ------------------------------------------------------------------------------------- data functions
def test_episode_positions_count_from_episode_start_and_to_its_end():
    # env 0: terminated after t=1, then an episode still running at the batch end
    # env 1: truncated after t=0, then an episode that terminates after t=3
    term = torch.tensor([[False, False], [True, False], [False, False], [False, True]])
    trunc = torch.tensor([[False, True], [False, False], [False, False], [False, False]])
    index, to_end = episode_positions(term, trunc)
    assert index[:, 0].tolist() == [0, 1, 0, 1] and index[:, 1].tolist() == [0, 0, 1, 2]
    assert to_end[:, 0].tolist() == [1, 0, -1, -1] and to_end[:, 1].tolist() == [0, 2, 1, 0]
    with pytest.raises(ValueError, match="T, N"):
        episode_positions(term[0], trunc[0])


def test_turn_points_take_turn_value_and_first_token_return():
    b = make_batch([[0.0, 0.0], [0.0, 0.0]], [[2, 1], [1, 2]], [[True, False], [False, False]])
    with pytest.raises(ValueError, match="no values/returns"):
        turn_points(ScoredBatch(b))
    p = turn_points(ScoredBatch(b, values=torch.tensor([[[1.0, 9.0], [2.0, 9.0]], [[3.0, 9.0], [4.0, 9.0]]]),
                                returns=torch.tensor([[[1.5, 7.0], [1.0, 0.0]], [[3.0, 0.0], [6.0, 7.0]]])))
    assert p.value.tolist() == [1.0, 2.0, 3.0, 4.0] and p.ret.tolist() == [1.5, 1.0, 3.0, 6.0]
    assert p.advantage.tolist() == [0.5, -1.0, 0.0, 2.0]
    assert p.t.tolist() == [0, 0, 1, 1] and p.env.tolist() == [0, 1, 0, 1]
    assert p.turn_index.tolist() == [0, 0, 0, 1]  # env 0 terminated after t=0
    assert p.steps_to_end.tolist() == [0, -1, -1, -1]


def test_group_by_position_drops_unknown_and_pools_above_cap():
    groups = group_by_position(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), np.array([0, 1, 0, -1, 3, 2]), cap=2)
    assert list(groups) == [0, 1, 2]
    assert groups[0].tolist() == [1.0, 3.0] and groups[1].tolist() == [2.0] and groups[2].tolist() == [5.0, 6.0]
    with pytest.raises(ValueError, match="same shape"):
        group_by_position(np.zeros(2), np.zeros(3, dtype=int))


def test_explained_variance_series_skips_missing_and_nan():
    rows = [
        {"iteration": 1, "turns": 16, "phase": "critic_warmup", "critic/explained_variance": -0.5},
        {"iteration": 2, "turns": 32, "phase": "ppo", "critic/explained_variance": float("nan")},
        {"iteration": 3, "turns": 48, "phase": "ppo"},
        {"iteration": 4, "turns": 64, "phase": "ppo", "critic/explained_variance": 0.25},
    ]
    s = explained_variance_series(rows)
    assert s.iteration.tolist() == [1, 4] and s.turns.tolist() == [16, 64]
    assert s.ev.tolist() == [-0.5, 0.25] and s.warmup.tolist() == [True, False]


def test_gae_sweep_step_discount_by_hand():
    # one env, three one-token turns, V = 0; rewards 1, 0, 2; terminated after t=0; bootstrap 0 after t=2.
    b = make_batch([[1.0], [0.0], [2.0]], [[1], [1], [1]], [[True], [False], [False]], R=1)
    b = ScoredBatch(b, values=torch.zeros(3, 1, 1), bootstrap_values=torch.zeros(3, 1))
    ones = dict(gamma_step=1.0, lam_step=1.0, gamma_token=1.0, lam_token=1.0)
    base, half = gae_sweep(b, ones, {"gamma_step": [0.5, 1.0]})  # 1.0 equals the base: not repeated
    # gamma_step = 1: A = [1 (terminated), 0 + A(t=2) = 2, 2]; turn index in episode [0, 0, 1]
    assert base.varied is None and half.varied == "gamma_step" and half.settings["gamma_step"] == 0.5
    assert base.by_turn_index == pytest.approx({0: 1.5, 1: 2.0})
    assert base.mean_abs_advantage == pytest.approx(5 / 3)
    # gamma_step = 0.5: A(t=1) = 0 + 0.5 * V'(0) - 0 + 0.5 * 1 * A(t=2) = 1
    assert half.by_turn_index == pytest.approx({0: 1.0, 1: 2.0})
    assert half.mean_abs_advantage == pytest.approx(4 / 3)


def test_gae_sweep_token_discount_by_hand_and_saved_token_rewards():
    # one two-token turn that terminates: V = [0.5, 2.0], reward 1 on the last token.
    b = ScoredBatch(make_batch([[1.0]], [[2]], [[True]], R=2), values=torch.tensor([[[0.5, 2.0]]]))
    ones = dict(gamma_step=1.0, lam_step=1.0, gamma_token=1.0, lam_token=1.0)
    base, half = gae_sweep(b, ones, {"gamma_token": [0.5]})
    # A_1 = 1 - 2 = -1; A_0 = g*2 - 0.5 + g*1*A_1 = g - 0.5
    assert base.by_turn_index == pytest.approx({0: 0.5}) and base.mean_abs_advantage == pytest.approx(0.75)
    assert half.by_turn_index == pytest.approx({0: 0.0}) and half.mean_abs_advantage == pytest.approx(0.5)
    assert half.abs_by_turn_index == pytest.approx({0: 0.0})
    b = ScoredBatch(b.batch, values=b.values, token_rewards=torch.tensor([[[0.0, 3.0]]]))  # saved token rewards win
    (base,) = gae_sweep(b, ones, {})
    assert base.by_turn_index == pytest.approx({0: 2.5})  # A_1 = 1, A_0 = 2 - 0.5 + 1
    with pytest.raises(ValueError, match="discount keys"):
        gae_sweep(b, ones, {"gamma": [0.5]})


def test_gae_settings_read_config_with_defaults(tmp_path):
    assert gae_settings(tmp_path) == dict(gamma_step=0.99, lam_step=0.95, gamma_token=1.0, lam_token=1.0)
    (tmp_path / "config.yaml").write_text("gae:\n  gamma_step: 0.9\n  lam_token: 0.5\n")
    assert gae_settings(tmp_path) == dict(gamma_step=0.9, lam_step=0.95, gamma_token=1.0, lam_token=0.5)


# ------------------------------------------------------------------------------------- run directory, CLI
def _metrics(run: Path) -> None:
    run.mkdir(parents=True, exist_ok=True)
    rows = [{"iteration": i, "turns": 8 * i, "phase": "ppo", "critic/explained_variance": 0.1 * i} for i in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_missing_batches_skip_their_figures_with_a_line(tmp_path):
    run = tmp_path / "run"
    _metrics(run)
    lines: list[str] = []
    paths = write_gae_figures(run, log=lines.append)
    assert [p.name for p in paths] == ["explained_variance.png"] and paths[0].stat().st_size > 1000
    assert len(lines) == 1 and "skipped" in lines[0] and "no dumped batches" in lines[0]
    (run / "batches").mkdir()
    (run / "batches" / "iter_000001.pt").write_bytes(b"not a torch file")
    lines.clear()
    assert [p.name for p in write_gae_figures(run, log=lines.append)] == ["explained_variance.png"]
    assert len(lines) == 1 and "cannot use" in lines[0] and "iter_000001.pt" in lines[0]


@pytest.mark.parametrize("setup, message", [
    (lambda run: None, "is not a directory"),
    (lambda run: run.mkdir(), "no metrics.jsonl"),
    (lambda run: (run.mkdir(), (run / "metrics.jsonl").write_text("{not json\n")), "cannot read"),
])
def test_plot_cli_rejects_bad_run_dirs_with_one_line(tmp_path, capsys, setup, message):
    run = tmp_path / "run"
    setup(run)
    with pytest.raises(SystemExit) as exc:
        plot_main([str(run)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


# ------------------------------------------------------------------------------------- on a tiny run
TINY = [
    "iterations=2", "ppo.critic_warmup_iterations=1", "env.num_envs=2", "env.vector_mode=sync",
    "rollout.turns_per_env=4", "ppo.minibatches=1", "ppo.micro_batch_size=8", "format_warmup.steps=0",
    "format_warmup.episodes=1", "model.tiny.corpus_episodes=2", "eval.episodes=1", "eval.num_envs=1",
    "env.max_steps=3", "logging.progress=false", "logging.dump_batch_every=1", "eval.baseline=false",
]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """One short tiny-model run with dumped batches (shared by the tests below)."""
    root = tmp_path_factory.mktemp("gae_runs")
    train_cli("tiny", *TINY, f"run_root={root}", f"model.cache_dir={root / 'cache'}", "name=tiny")
    return root / "tiny"


@pytest.mark.slow
def test_verlog_plot_writes_all_figures(tiny_run):
    proc = subprocess.run([sys.executable, "-c", "from verlog.cli import plot_main; plot_main()", str(tiny_run)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = proc.stdout.split()
    expected = [str(tiny_run / "curves.png")] + [str(tiny_run / "figures" / f) for f in FIGURES]
    assert printed == expected
    for path in expected:
        assert Path(path).stat().st_size > 1000, path
    assert "skipped" not in proc.stdout


@pytest.mark.slow
def test_notebook_executes_headless_on_the_run(tiny_run, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    figures = tiny_run / "figures"
    for f in FIGURES:
        (figures / f).unlink(missing_ok=True)
    nb = nbformat.read(REPO / "notebooks" / "gae_curves.ipynb", as_version=4)
    monkeypatch.setenv("VERLOG_RUN", str(tiny_run))  # the kernel inherits this process's environment
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == len(FIGURES)
    text = "".join(o.get("text", "") for o in outputs)
    assert "mean|A|" in text and "gamma_step" in text
    for f in FIGURES:
        assert (figures / f).stat().st_size > 1000, f
    assert not math.isnan(float(text.split("mean|A| = ")[1].split()[0]))
